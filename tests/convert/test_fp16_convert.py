"""`toolkit convert --fp-to-fp16` and toolkit.convert.fp16.convert_to_fp16."""

import json
import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto

import fp16_models as fm
import modelzoo as mz
from toolkit.convert import fp16
from toolkit.convert.ranges import REASON_RANGE_CARRIED
from toolkit.core.errors import InputError


def ort_run(model, feed):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feed)))


def value_types(model):
    """Element type of every tensor of the top graph, from ONNX type inference (strict)."""
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True, check_type=True)
    types = {}
    for coll in (inferred.graph.input, inferred.graph.value_info, inferred.graph.output):
        for vi in coll:
            types[vi.name] = vi.type.tensor_type.elem_type
    for t in inferred.graph.initializer:
        types[t.name] = t.data_type
    return types


def node(model, name):
    return next(n for n in model.graph.node if n.name == name)


def input_types(model, name):
    types = value_types(model)
    return [types.get(i) for i in node(model, name).input if i]


def test_layernorm_converts_and_keeps_chosen_nodes_fp32():
    model = fm.layernorm_overflow()
    feed = fm.ln_input()
    ref = ort_run(model, feed)["y"]
    out = fp16.convert_to_fp16(model, keep_fp32=fm.LN_MUST_KEEP)
    # I/O types kept
    assert out.graph.input[0].type.tensor_type.elem_type == TensorProto.FLOAT
    assert out.graph.output[0].type.tensor_type.elem_type == TensorProto.FLOAT
    # kept nodes compute in fp32 and exchange fp32 directly (no fp16 round trip between them)
    assert input_types(out, "square") == [TensorProto.FLOAT, TensorProto.FLOAT]
    assert input_types(out, "variance") == [TensorProto.FLOAT]
    assert node(out, "variance").input[0] == node(out, "square").output[0]
    # the others compute in fp16, weights stored in fp16
    assert input_types(out, "proj") == [TensorProto.FLOAT16, TensorProto.FLOAT16]
    assert {t.name: t.data_type for t in out.graph.initializer}["W1"] == TensorProto.FLOAT16
    got = ort_run(out, feed)["y"]
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, ref, atol=5e-3, rtol=1e-2)
    # the input model is untouched
    assert all(t.data_type == TensorProto.FLOAT for t in model.graph.initializer)


def test_keep_fp32_by_op_type_and_glob():
    model = fm.layernorm_overflow()
    by_type = fp16.convert(model, ["Pow", "ReduceMean"])
    assert set(by_type.kept) == {"square", "variance", "mean"}
    by_glob = fp16.convert(model, ["s*"])  # square, std, scale, shift
    assert {"square", "std", "scale", "shift"} <= set(by_glob.kept)
    assert "proj" not in by_glob.kept


def test_keep_fp32_unknown_word_is_an_input_error():
    with pytest.raises(InputError, match="--keep-fp32 nope"):
        fp16.convert(fm.layernorm_overflow(), ["nope"])


def test_shape_subgraph_resize_constants_stay_consistent():
    """onnxconverter-common alone writes a model ONNX-Runtime rejects here (Cast(to=float) in a
    shape computation); the shape math stays fp32 and the model runs."""
    model = fm.shape_resize()
    feed = {"x": np.random.default_rng(0).standard_normal((1, 3, 6, 10)).astype(np.float32)}
    ref = ort_run(model, feed)["y"]
    res = fp16.convert(model)
    assert res.kept["scale_hw"] == fp16.REASON_SHAPE
    assert res.kept["resize"] == fp16.REASON_NO_KERNEL
    assert "conv" not in res.kept and "relu" not in res.kept
    got = ort_run(res.model, feed)["y"]
    assert got.shape == ref.shape
    np.testing.assert_allclose(got, ref, atol=5e-3, rtol=1e-2)
    # Resize's inputs: data in fp32 (kept node); the Constant with value_float became fp16-able
    assert input_types(res.model, "conv") == [TensorProto.FLOAT16, TensorProto.FLOAT16]


@pytest.mark.parametrize("cond", [True, False])
def test_if_and_loop_bodies(cond):
    model = fm.if_loop()
    feed = {"x": np.array([[0.5, 1.25, -3.0, 7.0]], np.float32), "cond": np.array(cond)}
    ref = ort_run(model, feed)["y"]
    out = fp16.convert_to_fp16(model)
    loop = node(out, "loop")
    body = next(a.g for a in loop.attribute if a.name == "body")
    assert body.input[2].type.tensor_type.elem_type == TensorProto.FLOAT16
    np.testing.assert_allclose(ort_run(out, feed)["y"], ref, rtol=2e-3)
    # keeping a node inside a body
    kept = fp16.convert_to_fp16(model, keep_fp32=["body_mul"])
    np.testing.assert_allclose(ort_run(kept, feed)["y"], ref, rtol=2e-3)


@pytest.mark.parametrize("nested", [False, True])
def test_if_decided_by_a_shape_converts_and_loads(nested):
    # an If whose condition comes from Size(x) is no shape computation: its branches compute
    # floats. Its branches leave their output types out; the written model must still load
    # (a value_info typed 0 does not) and compute what the original does.
    model = fm.shape_decided_if(nested)
    feed = {"x": np.array([[0.5, -1.0, 2.0, -3.0]], np.float32)}
    if nested:
        feed["cond"] = np.array(True)
    ref = ort_run(model, feed)
    conv = fp16.convert(model)
    assert "inner_if" not in conv.kept and "then_relu" not in conv.kept
    for g in fp16.iter_graphs(conv.model.graph):
        for vi in g.value_info:  # (the branches' own outputs may stay untyped)
            assert vi.type.tensor_type.elem_type != 0, vi.name
    got = ort_run(conv.model, feed)
    for k, v in ref.items():
        np.testing.assert_allclose(got[k], v, rtol=2e-3)
    types = {n.name: n for n in fp16.iter_nodes(conv.model)}
    assert "then_relu" in types  # the branch is still there, converted


def test_constants_read_only_by_kept_nodes_stay_fp32():
    # weights held in Constant nodes follow their readers, as initializers do: kept in fp32,
    # the factor 1e5 is not clamped to 65504 on its way to the fp32 node
    model = fm.constant_weights_past_fp16()
    feed = {"x": np.array([[0.5, 1.25, -3.0, 7.0]], np.float32)}
    ref = ort_run(model, feed)["y"]
    conv = fp16.convert(model, ["up", "down"])
    assert conv.kept["big_const"] == fp16.REASON_CONSTANT and conv.kept["small_const"] == fp16.REASON_CONSTANT
    np.testing.assert_allclose(ort_run(conv.model, feed)["y"], ref, rtol=1e-6)
    emu = fp16.emulate(model, ["up", "down"])
    np.testing.assert_allclose(ort_run(emu.model, feed)["y"], ref, rtol=1e-6)
    # converted, the Constants are fp16 (clamped): the product is far off
    assert np.abs(ort_run(fp16.emulate(model, auto_keep=False).model, feed)["y"] - ref).max() > 0.1
    # the automatic set keeps `up` (it reads 1e5) and `down` (it reads x * 1e5, which `up` passes on)
    assert fp16.convert(model).kept["down"] == REASON_RANGE_CARRIED


def test_shared_weight_and_kept_graph_output():
    model = fm.shared_and_kept_output()
    feed = {"x": np.linspace(-2, 2, 8, dtype=np.float32).reshape(1, 8)}
    ref = ort_run(model, feed)
    for keep in ([], ["mul"], ["relu"], ["mul", "relu"]):
        out = fp16.convert_to_fp16(model, keep_fp32=keep)
        got = ort_run(out, feed)
        for name in ref:
            np.testing.assert_allclose(got[name], ref[name], atol=2e-3)
    # a kept node producing a graph output writes it in fp32 directly (no fp16 rounding)
    out = fp16.convert_to_fp16(model, keep_fp32=["relu"])
    assert node(out, "relu").output[0] == "y2"


def _w1_past_fp16():
    model = fm.layernorm_overflow()
    w1 = next(t for t in model.graph.initializer if t.name == "W1")
    arr = onnx.numpy_helper.to_array(w1).copy()
    arr[0, 0], arr[0, 1], arr[0, 2] = 1e6, 1e-9, 5000.0
    w1.CopyFrom(onnx.numpy_helper.from_array(arr, "W1"))
    return model


def test_weights_outside_fp16_range_stay_fp32_with_their_readers():
    res = fp16.convert(_w1_past_fp16())
    assert res.clamped == [] and list(res.out_of_range) == ["W1"]
    readers = [n.name for n in res.model.graph.node if "W1" in n.input]
    assert readers and all(res.kept.get(r) == fp16.REASON_RANGE for r in readers)
    w1 = next(t for t in res.model.graph.initializer if t.name == "W1")
    assert w1.data_type == TensorProto.FLOAT and onnx.numpy_helper.to_array(w1)[0, 0] == 1e6


def test_weights_outside_fp16_range_are_clamped_not_infinite_without_auto_keep():
    res = fp16.convert(_w1_past_fp16(), auto_keep=False)
    assert res.clamped == ["W1"] and res.out_of_range == {}
    conv = onnx.numpy_helper.to_array(next(t for t in res.model.graph.initializer if t.name == "W1"))
    assert conv[0, 0] == np.float16(65504) and conv[0, 1] == np.float16(2**-24) and conv[0, 2] == 5000


def test_ocr_sized_cnn_within_fp16_tolerance():
    model = fm.ocr_detector()
    feed = {"x": np.random.default_rng(0).random((1, 3, 320, 320)).astype(np.float32)}
    ref = ort_run(model, feed)["prob"]
    out = fp16.convert_to_fp16(model)
    n_fp16 = sum(t.data_type == TensorProto.FLOAT16 for t in out.graph.initializer)
    assert n_fp16 > 0.9 * len(out.graph.initializer)
    got = ort_run(out, feed)["prob"]
    assert got.dtype == np.float32 and got.shape == ref.shape
    np.testing.assert_allclose(got, ref, atol=2e-3)


def test_weights_listed_as_graph_inputs_ir3_convert_and_run():
    # IR version 3 models (many older exported models) list every initializer as a graph input too
    model = fm.ocr_detector()
    model.graph.input.extend(
        onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in model.graph.initializer
    )
    model.ir_version = 3
    feed = {"x": np.random.default_rng(1).random((1, 3, 320, 320)).astype(np.float32)}
    ref = ort_run(model, feed)["prob"]
    for keep in ([], [model.graph.node[0].name]):
        out = fp16.convert_to_fp16(model, keep)
        assert [vi.name for vi in out.graph.input] == ["x"] and out.ir_version >= 4
        np.testing.assert_allclose(ort_run(out, feed)["prob"], ref, atol=2e-3)


def test_unnamed_nodes_get_names():
    model = mz.chain(4)
    for n in model.graph.node:
        n.name = ""
    res = fp16.convert(model, ["Sigmoid"])
    names = [n.name for n in res.model.graph.node if n.op_type != "Cast"]
    assert all(names) and len(set(names)) == len(names)
    assert list(res.kept) == ["Sigmoid_0"]


# ---------------------------------------------------------------------- CLI


def test_cli_convert_writes_model_and_json(cli, tmp_path):
    src = mz.save(fm.layernorm_overflow(), tmp_path / "ln.onnx")
    before = open(src, "rb").read()
    out = tmp_path / "ln16.onnx"
    r = cli("convert", src, "--fp-to-fp16", "--keep-fp32", "square", "variance", "-o", out, "--json")
    assert r.code == 0, r.err
    info = json.loads(r.out)
    assert info["kept_fp32"] == {"square": fp16.REASON_USER, "variance": fp16.REASON_USER}
    assert "Kept in fp32: 2 node(s)" in r.err
    assert open(src, "rb").read() == before
    conv = onnx.load(str(out))
    assert {t.name: t.data_type for t in conv.graph.initializer}["W1"] == TensorProto.FLOAT16
    # runs through toolkit itself
    r = cli("run", out, "--onnxrt")
    assert r.code == 0, r.err


def test_cli_convert_errors(cli, tmp_path):
    src = mz.save(fm.layernorm_overflow(), tmp_path / "ln.onnx")
    r = cli("convert", src, "-o", tmp_path / "o.onnx")
    assert r.code == 2 and "--fp-to-fp16" in r.err
    r = cli("convert", src, "--fp-to-fp16", "--keep-fp32", "nope", "-o", tmp_path / "o.onnx")
    assert r.code == 3 and "nope" in r.err and "Traceback" not in r.err
    assert not os.path.exists(tmp_path / "o.onnx")
    r = cli("convert", src, "--fp-to-fp16", "-o", src)
    assert r.code == 2
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model")
    r = cli("convert", bad, "--fp-to-fp16", "-o", tmp_path / "o.onnx")
    assert r.code == 3 and "error:" in r.err


def test_cli_convert_external_data(cli, tmp_path):
    src = mz.save_with_external_data(fm.ocr_detector(size=64), tmp_path / "det.onnx", location="det.bin")
    out = tmp_path / "det16.onnx"
    r = cli("convert", src, "--fp-to-fp16", "-o", out, "--external-data")
    assert r.code == 0, r.err
    assert os.path.exists(str(out) + ".data")
    conv = onnx.load(str(out))
    feed = {"x": np.random.default_rng(0).random((1, 3, 64, 64)).astype(np.float32)}
    ref = ort_run(onnx.load(src), feed)["prob"]
    np.testing.assert_allclose(ort_run(conv, feed)["prob"], ref, atol=2e-3)


def test_weight_conversion_matches_onnxconverter_common_bit_for_bit():
    """toolkit converts weights itself (faster); the result is the library's, with fp16's limits."""
    import warnings

    from onnxconverter_common.float16 import convert_np_to_float16

    rng = np.random.default_rng(0)
    x = np.concatenate(
        [
            rng.standard_normal(10000).astype(np.float32) * 0.01,
            np.array([0, 1e-9, -1e-9, 2.98e-8, 3e-8, 70000, -1e6, np.inf, -np.inf, 65519, 65520, 1.0001], np.float32),
        ]
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = convert_np_to_float16(x, fp16.FP16_TINY, fp16.FP16_MAX)
    got, over = fp16.to_fp16(x)
    assert over
    np.testing.assert_array_equal(got.view(np.uint16), ref.view(np.uint16))
    nan = np.array([np.nan], np.float32)
    assert np.isnan(fp16.to_fp16(nan)[0]).all()


def test_a_mixed_model_is_not_converted_again(cli, tmp_path):
    """Converting twice would turn the deliberate fp32 nodes to fp16: the library call returns
    the mixed model unchanged (TensorRT 11's --fp16 path relies on that), the CLI refuses."""
    mixed = fp16.convert_to_fp16(fm.layernorm_overflow(), fm.LN_MUST_KEEP)
    again = fp16.convert(mixed)
    assert again.already_mixed and again.model.SerializeToString() == mixed.SerializeToString()
    with pytest.raises(InputError, match="already holds float16"):
        fp16.convert(mixed, if_mixed="error")
    path = mz.save(mixed, tmp_path / "mixed.onnx")
    r = cli("convert", path, "--fp-to-fp16", "-o", tmp_path / "again.onnx")
    assert r.code == 3 and "already holds float16" in r.err

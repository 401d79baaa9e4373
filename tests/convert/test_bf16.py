"""bfloat16: `convert --fp-to-bf16`, bf16 storage emulation (`onnxrt:bf16`) against a numpy
bfloat16 reference (ml_dtypes), and `debug precision` searching a bf16 model."""

import json

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import fp16_models as fm
import modelzoo as mz
from test_fp16_emulate import X, _cases, elementwise_model, marked, ort_run
from toolkit.convert import fp16
from toolkit.precision.search import PrecisionConfig, PrecisionSearch

BF16 = ml_dtypes.bfloat16


def rb(a):
    """bfloat16 storage, the reference: round to nearest even (ml_dtypes), back to float32."""
    return np.asarray(a, np.float32).astype(BF16).astype(np.float32)


def all_types(model):
    """Every element type the model mentions (tensors, value types, Cast targets), all graphs."""
    found = set()
    for g in fp16.iter_graphs(model.graph):
        found.update(t.data_type for t in g.initializer)
        for coll in (g.input, g.output, g.value_info):
            found.update(v.type.tensor_type.elem_type for v in coll if v.type.HasField("tensor_type"))
        for n in g.node:
            found.update(a.i for a in n.attribute if n.op_type == "Cast" and a.name == "to")
            found.update(t.data_type for _, _, t in fp16.attr_tensors(n))
    found.discard(0)
    return found


def full_check(model):
    onnx.checker.check_model(model, full_check=True)  # shape inference, strict


# ----------------------------------------------------------------------------- rounding


def test_to_bf16_rounds_like_the_numpy_reference_on_every_kind_of_value():
    rng = np.random.default_rng(0)
    bits = rng.integers(0, 2**32, size=100_000, dtype=np.uint64).astype(np.uint32)
    ties = np.array([0x3F808000, 0x3F818000, 0x00008000, 0x00018000, 0x80018000, 1, 0x807FFFFF], np.uint32)
    x = np.concatenate([bits, ties]).view(np.float32)
    got_bits, _ = fp16.to_bf16(x)
    got = fp16.bf16_values(got_bits)
    with np.errstate(invalid="ignore", over="ignore"):
        ref = rb(x)
    fits = np.isfinite(ref) | ~np.isfinite(x)  # the reference overflows to inf past 3.39e38
    np.testing.assert_array_equal(got[fits], ref[fits])
    assert np.isnan(got[np.isnan(x)]).all()
    # ties go to even: 1 + 2**-8 is halfway between 1 and 1 + 2**-7
    assert fp16.bf16_values(fp16.to_bf16(np.float32(1 + 2**-8))[0]) == 1.0
    # subnormals round as bfloat16 holds them (no fp16-style clamping of tiny values)
    assert fp16.bf16_values(fp16.to_bf16(np.float32(1e-40))[0]) == rb(np.float32(1e-40))


def test_to_bf16_clamps_only_finite_values_past_its_range():
    x = np.array([3.4e38, -3.4e38, np.inf, -np.inf, 1e5, 1e-9], np.float32)
    bits, clamped = fp16.to_bf16(x)
    v = fp16.bf16_values(bits)
    assert clamped
    assert v[0] == fp16.BF16_MAX and v[1] == -fp16.BF16_MAX
    assert v[2] == np.inf and v[3] == -np.inf
    assert v[4] == rb(1e5) != 65504 and v[5] == rb(1e-9) > 0  # fp16 would clamp both
    assert not fp16.to_bf16(x[2:])[1]


# ----------------------------------------------------------------------------- emulation


def numpy_bf16_reference(x, p, keep=()):
    """elementwise_model in numpy with bfloat16 storage: a converted node reads bf16 values and
    stores its output in bf16; a kept node reads and writes fp32."""
    k = set(keep)

    def read(consumer, v):
        return v if consumer in k else rb(v)

    def out(producer, v):
        return v if producer in k else rb(v)

    with np.errstate(over="ignore", invalid="ignore"):
        m = out("mul", read("mul", x) * read("mul", p["w"]))
        a = out("add", read("add", m) + read("add", p["b"]))
        pw = out("pow", read("pow", a) * read("pow", a))
        s = out("sub", read("sub", pw) - read("sub", p["c"]))
        y = out("scale_down", read("scale_down", s) * read("scale_down", p["tiny"]))
        e = out("exp", np.exp(read("exp", x)))
    return dict(m=m, a=a, p=pw, s=s, y=y, e=e)


@pytest.mark.parametrize("keep", [[], ["pow"], ["pow", "sub"], ["mul", "exp"]])
def test_every_tensor_matches_the_numpy_bf16_reference(keep):
    model, params = elementwise_model()
    names = ["m", "a", "p", "s", "y", "e"]
    emu = fp16.emulate(marked(model, names), keep, auto_keep=False, dtype="bfloat16")
    assert set(emu.kept) == set(keep)
    got = ort_run(emu.model, {"x": X}, names)  # ONNX-Runtime's CPU Cast to bfloat16 and back
    ref = numpy_bf16_reference(X, params, keep)
    for name in names:
        if not keep:
            np.testing.assert_array_equal(got[name], ref[name], err_msg=name)
        else:  # kept nodes compute in fp32: numpy and ORT may differ in the last bit there
            np.testing.assert_allclose(got[name], ref[name], rtol=1e-6, err_msg=name)
    if not keep:
        # what bf16 storage does: no overflow where fp16 overflows, but 8 significant bits
        assert np.isfinite(got["p"]).all() and np.isfinite(got["e"]).all()
        assert got["s"][0, 4] != -65504  # the weight 1e5 is not clamped (fp16 clamps it)
        assert got["m"][0, 0] == 1.0  # 1.0001 rounds to 1 in bf16
        fp16_p = ort_run(fp16.emulate(marked(elementwise_model()[0], names), auto_keep=False).model, {"x": X}, names)
        assert np.isinf(fp16_p["p"][0, 1])


def _at_opset(model, version):
    del model.opset_import[:]
    model.opset_import.append(helper.make_opsetid("", version))
    return model


def test_a_model_before_opset_13_is_upgraded_for_bf16(cli, tmp_path):
    # Cast to bfloat16 exists from opset 13 on: at opset 11 the emulation's Casts and the
    # conversion's bf16 Constants would not load; the model is upgraded first, names kept
    names = ["m", "a", "p", "s", "y", "e"]
    model = _at_opset(marked(elementwise_model()[0], names), 11)
    emu = fp16.emulate(model, auto_keep=False, dtype="bfloat16")
    assert fp16.opset_version(emu.model) == 13 and fp16.opset_version(model) == 11
    got = ort_run(emu.model, {"x": X}, names)
    ref = numpy_bf16_reference(X, elementwise_model()[1])
    for name in names:
        np.testing.assert_array_equal(got[name], ref[name], err_msg=name)
    conv = fp16.convert(model, dtype="bfloat16")
    assert conv.upgraded_from == 11
    full_check(conv.model)
    path = mz.save(model, tmp_path / "op11.onnx")
    res = cli("run", path, "--onnxrt", "--bf16", "--atol", "1e5", "--rtol", "1")
    assert res.code == 0, res.err
    res = cli("convert", path, "--fp-to-bf16", "-o", str(tmp_path / "op11_bf16.onnx"))
    assert res.code == 0, res.err
    assert "Upgraded from opset 11 to 13" in res.err


def test_inputs_are_rounded_to_bf16():
    model = mz.chain(1, shape=(1, 5), ops=["Relu"])
    x = np.array([[1.0001, 257.0, 1e-39, 3.3e38, 70000.0]], np.float32)
    y = ort_run(fp16.emulate(model, auto_keep=False, dtype="bfloat16").model, {"x": x})["y"]
    np.testing.assert_array_equal(y, rb(x))
    assert y[0, 1] == 256.0 and y[0, 4] == 70144.0  # 8 significant bits, no overflow at 7e4


@pytest.mark.parametrize("case", _cases(), ids=lambda c: c[0])
def test_emulating_the_fp32_model_equals_emulating_its_bf16_conversion(case):
    """emulate(model, keep, bf16) rounds exactly the tensors convert(model, keep, bf16) stores in
    bf16, with the same weights: emulating the converted model gives the same bits."""
    _name, build, feed, keeps = case
    model = build()
    for keep in keeps:
        a = ort_run(fp16.emulate(model, keep, dtype="bfloat16").model, feed)
        mixed = fp16.convert(model, keep, dtype="bfloat16").model
        assert fp16.reduced_types(mixed) == {"bfloat16"} and not fp16.reduced_types(model)
        b = ort_run(fp16.emulate_any(mixed).model, feed)
        for k in a:
            np.testing.assert_array_equal(a[k], b[k], err_msg=f"{keep} {k}")


# ----------------------------------------------------------------------------- conversion


@pytest.mark.parametrize("case", _cases(), ids=lambda c: c[0])
def test_bf16_conversion_passes_the_full_onnx_checker_and_holds_no_fp16(case):
    _name, build, _feed, keeps = case
    model = build()
    for keep in keeps:
        result = fp16.convert(model, keep, dtype="bfloat16")
        full_check(result.model)
        types = all_types(result.model)
        assert TensorProto.BFLOAT16 in types and TensorProto.FLOAT16 not in types
        top = result.model.graph
        assert {v.type.tensor_type.elem_type for v in list(top.input) + list(top.output)} <= {
            TensorProto.FLOAT, TensorProto.BOOL, TensorProto.INT64}  # fmt: skip
        assert set(keep) <= set(result.kept)


def test_bf16_weights_are_rounded_once_from_their_float32_values():
    # 1 + 2**-8 + 2**-11: bf16 of it is 1 + 2**-7; through fp16 first (tie -> 1 + 2**-8) it would be 1.0
    w = np.array([[1 + 2**-8 + 2**-11, 1e5, -1e-9, 3.1415927, 65519.0, 1e38]], np.float32)
    g = helper.make_graph(
        [helper.make_node("Mul", ["x", "w"], ["y"], name="mul")], "g",
        [mz.vi("x", [1, 6])], [mz.vi("y", [1, 6])], [numpy_helper.from_array(w, "w")],
    )  # fmt: skip
    result = fp16.convert(mz.make_model(g), dtype="bfloat16")
    (t,) = result.model.graph.initializer
    assert t.data_type == TensorProto.BFLOAT16
    stored = numpy_helper.to_array(t).astype(np.float32)
    np.testing.assert_array_equal(stored, rb(w))
    assert stored[0, 0] == 1 + 2**-7 and stored[0, 1] > 65504 and stored[0, 5] > 9e37
    assert result.clamped == []
    full_check(result.model)


def test_kept_nodes_stay_fp32_with_casts_around_them():
    result = fp16.convert(fm.layernorm_overflow(), ["square", "ReduceMean"], dtype="bfloat16")
    m = result.model
    full_check(m)
    assert set(result.kept) == {"square", "mean", "variance"}
    inferred = onnx.shape_inference.infer_shapes(m)
    types = {v.name: v.type.tensor_type.elem_type for v in list(inferred.graph.value_info) + list(m.graph.output)}
    by_name = {n.name: n for n in m.graph.node}
    assert types[by_name["square"].output[0]] == TensorProto.FLOAT
    assert types[by_name["variance"].output[0]] == TensorProto.FLOAT
    assert types[by_name["normalize"].output[0]] == TensorProto.BFLOAT16
    casts = [a.i for n in m.graph.node if n.op_type == "Cast" for a in n.attribute]
    assert TensorProto.BFLOAT16 in casts and TensorProto.FLOAT in casts


def test_ops_without_bf16_at_the_models_opset_stay_fp32():
    old = fp16.convert(fm.conv_block(17), dtype="bfloat16")
    assert old.kept == {"conv": fp16.REASON_SCHEMA_BF16, "pool": fp16.REASON_SCHEMA_BF16}
    full_check(old.model)
    assert fp16.convert(fm.conv_block(17)).kept == {}  # fp16: Conv and MaxPool have it at 17
    new = fp16.convert(fm.conv_block(22), dtype="bfloat16")
    assert new.kept == {}
    full_check(new.model)
    assert fp16.bf16_opset("Conv", 17) == 22 and fp16.bf16_opset("Relu", 12) == 13
    assert fp16.bf16_opset("Relu", 17) is None  # it has bf16 already
    x = {"x": np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)}
    for model in (fm.conv_block(17), fm.conv_block(22)):  # the fp32 nodes are computed unrounded
        a = ort_run(fp16.emulate(model, dtype="bfloat16").model, x)["y"]
        b = ort_run(fp16.emulate_any(fp16.convert(model, dtype="bfloat16").model).model, x)["y"]
        np.testing.assert_array_equal(a, b)


def test_a_mixed_model_is_not_converted_again():
    mixed = fp16.convert(fm.layernorm_overflow(), dtype="bfloat16").model
    for dtype in ("bfloat16", "float16"):
        again = fp16.convert(mixed, dtype=dtype)
        assert again.already_mixed and again.model.SerializeToString() == mixed.SerializeToString()
    with pytest.raises(fp16.InputError, match="already holds bfloat16"):
        fp16.convert(mixed, dtype="bfloat16", if_mixed="error")


# ----------------------------------------------------------------------------- command line


@pytest.fixture
def ln_path(tmp_path):
    return mz.save(fm.layernorm_overflow(), tmp_path / "ln.onnx")


def test_cli_convert_fp_to_bf16(cli, ln_path, tmp_path):
    out = tmp_path / "bf16.onnx"
    res = cli("convert", ln_path, "--fp-to-bf16", "--keep-fp32", "square", "-o", out, "--json")
    assert res.code == 0, res.err
    info = json.loads(res.out)
    assert info["precision"] == "bfloat16" and info["kept_fp32"] == {"square": fp16.REASON_USER}
    assert "Converted to mixed bf16" in res.err
    m = onnx.load(str(out))
    full_check(m)
    assert m.graph.input[0].type.tensor_type.elem_type == TensorProto.FLOAT
    io = tmp_path / "io.onnx"
    assert cli("convert", ln_path, "--fp-to-bf16", "--bf16-io", "-o", io).code == 0
    m = onnx.load(str(io))
    assert m.graph.input[0].type.tensor_type.elem_type == m.graph.output[0].type.tensor_type.elem_type == 16
    full_check(m)


def test_cli_convert_bf16_says_which_opset_gives_bf16(cli, tmp_path):
    res = cli("convert", mz.save(fm.conv_block(17), tmp_path / "c.onnx"), "--fp-to-bf16", "-o", tmp_path / "o.onnx")
    assert res.code == 0, res.err
    assert "At opset 17, Conv (opset 22), MaxPool (opset 22) accept no bfloat16" in res.err


@pytest.mark.parametrize(
    "args,message",
    [
        (["--fp-to-fp16", "--fp-to-bf16"], "--fp-to-fp16 and --fp-to-bf16 exclude each other"),
        (["--bf16-io"], "--bf16-io needs --fp-to-bf16"),
        (["--fp-to-bf16", "--fp16-io"], "with --fp-to-bf16 use --bf16-io"),
        (["--keep-fp32", "square"], "--keep-fp32 needs --fp-to-fp16 or --fp-to-bf16"),
        ([], "nothing to convert: give --fp-to-fp16 or --fp-to-bf16"),
    ],
)
def test_cli_convert_usage_errors(cli, ln_path, tmp_path, args, message):
    res = cli("convert", ln_path, *args, "-o", tmp_path / "o.onnx")
    assert res.code == 2 and message in res.err
    assert not (tmp_path / "o.onnx").exists()


def test_run_onnxrt_bf16_compares_fp32_with_bf16_storage(cli, tmp_path):
    path = mz.save(fm.offset_cancellation(), tmp_path / "off.onnx")
    res = cli("run", path, "--onnxrt", "--bf16", "--atol", "1e-2", "--rtol", "1e-2")
    assert res.code == 1  # bf16 loses the offset's low bits
    assert "bf16 storage emulated" in res.err and "onnxrt-runner vs onnxrt:bf16" in res.err
    res = cli("run", path, "--onnxrt", "--fp16", "--atol", "0.3")
    assert res.code == 0, res.err  # fp16 keeps 3 more bits: errors stay under 0.25
    res = cli("run", path, "--onnxrt", "--bf16", "--atol", "0.3")
    assert res.code == 1


def test_runner_spec_rejects_both_precisions(cli, ln_path):
    res = cli("debug", "precision", ln_path, "--compare", "onnxrt", "onnxrt:fp16,bf16")
    assert res.code == 2 and "one precision at a time" in res.err


def test_a_bf16_model_on_ort_names_the_emulation(cli, ln_path, tmp_path):
    out = tmp_path / "bf16.onnx"
    assert cli("convert", ln_path, "--fp-to-bf16", "-o", out).code == 0
    res = cli("run", out, "--onnxrt")
    assert res.code == 3
    assert "ONNX-Runtime's CPU provider lacks such kernels" in res.err and "onnxrt:bf16" in res.err


# ----------------------------------------------------------------------------- debug precision


def test_debug_precision_finds_the_nodes_bf16_needs_in_fp32(tmp_path):
    path = mz.save(fm.offset_cancellation(), tmp_path / "off.onnx")
    out = tmp_path / "mixed.onnx"
    outcome = PrecisionSearch(PrecisionConfig(path, output=str(out), candidate="onnxrt:bf16")).run()
    assert outcome.status == "found" and outcome.precision == "bf16"
    assert outcome.kept == fm.BF16_MUST_KEEP and outcome.one_minimal
    mixed = onnx.load(str(out))
    full_check(mixed)
    assert fp16.reduced_types(mixed) == {"bfloat16"}
    x = {"x": np.random.default_rng(7).standard_normal((2, 16)).astype(np.float32)}
    ref = ort_run(fm.offset_cancellation(), x)["y"]
    got = ort_run(fp16.emulate_any(mixed).model, x)["y"]
    np.testing.assert_allclose(got, ref, atol=1e-2, rtol=1e-2)
    plain = ort_run(fp16.emulate(fm.offset_cancellation(), dtype="bfloat16").model, x)["y"]
    assert np.abs(plain - ref).max() > 0.5


def test_debug_precision_bf16_cli_json(cli, tmp_path):
    path = mz.save(fm.offset_cancellation(), tmp_path / "off.onnx")
    res = cli("debug", "precision", path, "--compare", "onnxrt", "onnxrt:bf16", "--json")
    assert res.code == 0, res.err
    info = json.loads(res.out)
    assert info["precision"] == "bf16" and info["keep_fp32"] == fm.BF16_MUST_KEEP
    assert "moving any one of them back to bf16 makes the comparison fail" in res.err
    res = cli("debug", "precision", mz.save(fm.layernorm_overflow(), tmp_path / "ln.onnx"),
              "--compare", "onnxrt", "onnxrt:bf16", "--atol", "0.02")  # fmt: skip
    assert res.code == 0 and "The bf16 model passes as it is" in res.err  # no overflow in bf16


def test_debug_reduce_compare_with_the_bf16_runner_spec(cli, tmp_path):
    """Fed the fp32 value of 300 + h, the Sub alone loses h's low bits in bf16: it is the culprit."""
    path = mz.save(fm.offset_cancellation(), tmp_path / "off.onnx")
    out = tmp_path / "reduced.onnx"
    r = cli("debug", "reduce", path, "-o", out, "--compare", "onnxrt", "onnxrt:bf16", "--atol", "1e-2", "--rtol",
            "1e-2", "--save-debug-replay", tmp_path / "replay.json")  # fmt: skip
    assert r.code == 0, r.err
    assert [n.name for n in onnx.load(str(out)).graph.node] == ["unoffset"]

"""`toolkit convert --fp-to-fp16` never clamps silently, converts quantized models, and checks its result.

Each pattern is built in code: a BatchNorm whose variance (1e8) sits in a Constant node (as in
PP-OCR's detector), a value computed from constants that overflows fp16, weights fp16's
subnormals lose, QDQ models at opsets 17 and 18 (DequantizeLinear has no fp16 output there)
and a dynamically quantized int8 MatMulInteger model.
"""

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import modelzoo as mz
from toolkit.convert import fp16
from toolkit.convert.ranges import REASON_RANGE, value_problem

RNG = np.random.default_rng(0)


def ort_run(model, feed):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feed)))


def _model(nodes, inputs, outputs, inits=(), opset=17):
    g = helper.make_graph(nodes, "m", inputs, outputs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def _const(name, arr):
    return helper.make_node("Constant", [], [name], name=f"{name}_const", value=numpy_helper.from_array(arr, name))


def bn_variance_in_constant():
    """Conv -> BatchNormalization (variance up to 1e8, in a Constant) -> Sigmoid."""
    c = 8
    w = RNG.normal(0, 0.3, (c, 3, 3, 3)).astype(np.float32)
    var = np.linspace(1e7, 1e8, c).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "W"], ["conv"], name="conv", pads=[1, 1, 1, 1]),
        _const("scale", np.full(c, 3000.0, np.float32)),
        _const("bias", np.zeros(c, np.float32)),
        _const("mean", np.zeros(c, np.float32)),
        _const("var", var),
        helper.make_node("BatchNormalization", ["conv", "scale", "bias", "mean", "var"], ["bn"], name="bn"),
        helper.make_node("Sigmoid", ["bn"], ["y"], name="sig"),
    ]
    return _model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c, 16, 16])],
        [numpy_helper.from_array(w, "W")],
    )


def computed_overflow():
    """y = x / (a * a) with a = 300 (in range); a * a = 90000 is not."""
    nodes = [
        _const("a", np.full((4,), 300.0, np.float32)),
        helper.make_node("Mul", ["a", "a"], ["aa"], name="square_a"),
        helper.make_node("Mul", ["x", "k"], ["xk"], name="scale_x"),
        helper.make_node("Div", ["xk", "aa"], ["y"], name="div"),
    ]
    return _model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
        [numpy_helper.from_array(np.full((4,), 9000.0, np.float32), "k")],
    )


def tiny_weights():
    """y = (x * s) * 1e7 with every s about 1e-7 (fp16 subnormals: 2**-24 = 6e-8 apart)."""
    s = RNG.uniform(0.5e-7, 1.5e-7, (8,)).astype(np.float32)
    nodes = [
        helper.make_node("Mul", ["x", "s"], ["xs"], name="tiny"),
        helper.make_node("Mul", ["xs", "big"], ["y"], name="undo"),
    ]
    return _model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])],
        [numpy_helper.from_array(s, "s"), numpy_helper.from_array(np.full((8,), 1e4, np.float32), "big")],
    )


def qdq_model(opset):
    """QuantizeLinear/DequantizeLinear around a Conv (static QDQ quantization)."""
    w = RNG.normal(0, 0.2, (8, 4, 3, 3)).astype(np.float32)
    ws = np.float32(np.abs(w).max() / 127)
    inits = [
        numpy_helper.from_array(np.clip(np.round(w / ws), -127, 127).astype(np.int8), "Wq"),
        numpy_helper.from_array(np.array(ws, np.float32), "ws"),
        numpy_helper.from_array(np.array(0, np.int8), "wz"),
        numpy_helper.from_array(np.array(0.02, np.float32), "xs"),
        numpy_helper.from_array(np.array(0, np.int8), "xz"),
        numpy_helper.from_array(RNG.normal(0, 0.1, 8).astype(np.float32), "B"),
        numpy_helper.from_array(np.array(0.05, np.float32), "ys"),
        numpy_helper.from_array(np.array(0, np.int8), "yz"),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
        helper.make_node("DequantizeLinear", ["Wq", "ws", "wz"], ["Wd"]),
        helper.make_node("Conv", ["xd", "Wd", "B"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("QuantizeLinear", ["r", "ys", "yz"], ["rq"]),
        helper.make_node("DequantizeLinear", ["rq", "ys", "yz"], ["rd"]),
        helper.make_node("Tanh", ["rd"], ["y"]),
    ]
    return _model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8, 8])],
        inits,
        opset,
    )


def int8_matmul_model():
    """Dynamic int8 quantization as ONNX-Runtime's quantizer writes it (MatMulInteger + scales)."""
    w = RNG.normal(0, 0.2, (16, 8)).astype(np.float32)
    ws = np.float32(np.abs(w).max() / 127)
    inits = [
        numpy_helper.from_array(np.clip(np.round(w / ws), -127, 127).astype(np.int8), "Wq"),
        numpy_helper.from_array(np.array(ws, np.float32), "ws"),
        numpy_helper.from_array(np.array(0, np.int8), "wz"),
        numpy_helper.from_array(RNG.normal(0, 0.1, 8).astype(np.float32), "B"),
    ]
    nodes = [
        helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"]),
        helper.make_node("MatMulInteger", ["xq", "Wq", "xz", "wz"], ["mi"]),
        helper.make_node("Cast", ["mi"], ["mf"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["xs", "ws"], ["s"]),
        helper.make_node("Mul", ["mf", "s"], ["m"]),
        helper.make_node("Add", ["m", "B"], ["a"]),
        helper.make_node("Tanh", ["a"], ["y"]),
    ]
    return _model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])],
        inits,
    )


def rel_l2(got, ref):
    return float(np.linalg.norm(got.astype(np.float64) - ref) / np.linalg.norm(ref))


# ---------------------------------------------------------------------- values fp16 cannot hold


def test_value_problem_rules():
    assert "past fp16's largest" in value_problem(np.array([1.0, -1e5], np.float32), fp16.FLOAT16)
    assert value_problem(np.array([1.0, 65504.0], np.float32), fp16.FLOAT16) is None
    assert "subnormals" in value_problem(np.full(16, 1e-7, np.float32), fp16.FLOAT16)
    assert value_problem(np.array([1.0, 1e-9], np.float32), fp16.FLOAT16) is None  # negligible in the tensor
    assert value_problem(np.array([1e-5], np.float32), fp16.FLOAT16) is None  # an epsilon: 0.1% off
    assert value_problem(np.array([np.inf, -np.inf, 1.0], np.float32), fp16.FLOAT16) is None
    assert value_problem(np.array([1e30], np.float32), fp16.BFLOAT16) is None


def test_bn_variance_in_a_constant_stays_fp32():
    model = bn_variance_in_constant()
    feed = {"x": RNG.uniform(-2, 2, (1, 3, 16, 16)).astype(np.float32)}
    ref = ort_run(model, feed)["y"]
    res = fp16.convert(model)
    assert list(res.out_of_range) == ["var"] and res.clamped == []
    assert res.kept["bn"] == REASON_RANGE and res.kept["var_const"] == fp16.REASON_CONSTANT
    assert "conv" not in res.kept  # the rest is fp16
    got = ort_run(res.model, feed)["y"]
    assert np.abs(got - ref).max() < 0.05


def test_clamped_constants_are_named_without_auto_keep():
    model = bn_variance_in_constant()
    next(n for n in model.graph.node if n.name == "var_const").attribute[0].t.name = ""  # (exporters leave it out)
    res = fp16.convert(model, auto_keep=False)
    assert res.clamped == ["var"] and res.out_of_range == {}


def test_a_value_computed_from_constants_stays_fp32():
    model = computed_overflow()
    x = RNG.uniform(-2, 2, (2, 4)).astype(np.float32)
    ref = ort_run(model, {"x": x})["y"]
    res = fp16.convert(model)
    assert set(res.out_of_range) == {"aa"} and "computed from constants" in res.out_of_range["aa"]
    assert res.kept["square_a"] == REASON_RANGE and res.kept["div"] == REASON_RANGE
    np.testing.assert_allclose(ort_run(res.model, {"x": x})["y"], ref, rtol=2e-3)


def test_weights_lost_to_underflow_stay_fp32():
    model = tiny_weights()
    x = RNG.uniform(-2, 2, (2, 8)).astype(np.float32)
    ref = ort_run(model, {"x": x})["y"]
    res = fp16.convert(model)
    assert list(res.out_of_range) == ["s"] and res.kept["tiny"] == REASON_RANGE
    assert rel_l2(ort_run(res.model, {"x": x})["y"], ref) < 2e-3


def test_emulation_keeps_what_the_conversion_keeps():
    model = computed_overflow()
    x = RNG.uniform(-2, 2, (2, 4)).astype(np.float32)
    ref = ort_run(model, {"x": x})["y"]
    cache: dict = {}
    for _ in range(2):  # the second call finds the values in the cache
        emu = fp16.emulate(model, cache=cache)
        assert emu.kept["div"] == REASON_RANGE
        np.testing.assert_allclose(ort_run(emu.model, {"x": x})["y"], ref, rtol=2e-3)


def test_cli_json_names_the_kept_values(cli, tmp_path):
    src = mz.save(bn_variance_in_constant(), tmp_path / "bn.onnx")
    r = cli("convert", src, "--fp-to-fp16", "-o", tmp_path / "bn16.onnx", "--json")
    assert r.code == 0, r.err
    info = json.loads(r.out)
    assert info["clamped_weights"] == [] and list(info["out_of_range"]) == ["var"]
    assert info["kept_fp32"]["bn"] == REASON_RANGE
    assert "var (values up to 1e+08" in r.err


# ---------------------------------------------------------------------- quantized models


@pytest.mark.parametrize("make", [lambda: qdq_model(17), lambda: qdq_model(18), int8_matmul_model])
def test_quantized_models_convert(cli, tmp_path, make):
    model = make()
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    x = RNG.uniform(-2, 2, shape).astype(np.float32)
    src = mz.save(model, tmp_path / "q.onnx")
    out = tmp_path / "q16.onnx"
    r = cli("convert", src, "--fp-to-fp16", "-o", out)
    assert r.code == 0, r.err
    conv = onnx.load(str(out))
    ints = {n.op_type for n in model.graph.node} & fp16.QUANT_OPS
    assert {n.op_type for n in conv.graph.node} >= ints  # Q/DQ and integer ops are still there
    assert any(t.data_type == TensorProto.FLOAT16 for t in conv.graph.initializer) or any(
        n.op_type == "Cast" and n.attribute[0].i == TensorProto.FLOAT16 for n in conv.graph.node
    )
    assert rel_l2(ort_run(conv, {"x": x})["y"], ort_run(model, {"x": x})["y"]) < 2e-2


def test_dequantized_weights_fp16_cannot_hold_stay_fp32():
    """A weight scale of 1e-9 dequantizes to values fp16 holds only as subnormals: the Conv stays fp32;
    the usual scales (normal fp16 values for every 8-bit value) are not computed at all."""
    model = qdq_model(17)
    ws = next(t for t in model.graph.initializer if t.name == "ws")
    ws.CopyFrom(numpy_helper.from_array(np.array(1e-9, np.float32), "ws"))
    res = fp16.convert(model)
    assert set(res.out_of_range) == {"ws", "Wd"} and "computed from constants" in res.out_of_range["Wd"]
    assert res.kept[next(n.name for n in res.model.graph.node if n.op_type == "Conv")] == REASON_RANGE
    assert fp16.convert(qdq_model(17)).out_of_range == {}


# ---------------------------------------------------------------------- failures inside the library


def test_a_library_failure_is_not_bad_input(cli, tmp_path, monkeypatch):
    from onnxconverter_common import float16

    def broken(*_a, **_k):
        raise AttributeError("'NoneType' object has no attribute 'name'")

    monkeypatch.setattr(float16, "convert_float_to_float16", broken)
    src = mz.save(int8_matmul_model(), tmp_path / "q.onnx")
    r = cli("convert", src, "--fp-to-fp16", "-o", tmp_path / "q16.onnx")
    assert r.code == fp16.ConverterError.exit_code == 1
    assert "onnxconverter-common" in r.err and "AttributeError" in r.err and "--keep-fp32" in r.err
    assert "Traceback" not in r.err and not (tmp_path / "q16.onnx").exists()


# ---------------------------------------------------------------------- the check against the original


def runtime_overflow():
    """y = ((x * 1000) * 1000) / 1e6: every weight fits fp16, the product (1e6) does not."""
    nodes = [
        helper.make_node("Mul", ["x", "k"], ["a"], name="m1"),
        helper.make_node("Mul", ["a", "k"], ["b"], name="m2"),
        helper.make_node("Div", ["b", "d"], ["c"], name="div"),
        helper.make_node("Relu", ["c"], ["y"], name="relu"),
    ]
    return _model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])],
        [
            numpy_helper.from_array(np.full((4,), 1000.0, np.float32), "k"),
            numpy_helper.from_array(np.full((4,), 60000.0, np.float32), "d"),
        ],
    )


def test_the_check_names_the_first_tensor_that_differs(cli, tmp_path):
    src = mz.save(runtime_overflow(), tmp_path / "o.onnx")
    r = cli("convert", src, "--fp-to-fp16", "-o", tmp_path / "o16.onnx", "--val-range", "[1,2]", "--json")
    assert r.code == 0, r.err
    v = json.loads(r.out)["validation"]
    assert not v["passed"] and v["differing_outputs"] == ["y"] and v["max_error"] > 1
    assert v["first_differing_tensor"] == "b"
    assert "first tensor that differs (topological order) is b" in r.err and "toolkit debug precision" in r.err


def test_the_check_passes_and_no_validate_skips_it(cli, tmp_path):
    src = mz.save(bn_variance_in_constant(), tmp_path / "bn.onnx")
    r = cli("convert", src, "--fp-to-fp16", "-o", tmp_path / "a.onnx", "--val-range", "[-2,2]", "--json")
    assert r.code == 0, r.err
    v = json.loads(r.out)["validation"]
    assert v["passed"] and v["max_error"] < 0.05 and v["first_differing_tensor"] is None
    assert "Checked against the original in ONNX-Runtime" in r.err
    r = cli("convert", src, "--fp-to-fp16", "-o", tmp_path / "b.onnx", "--no-validate", "--json")
    assert r.code == 0 and json.loads(r.out)["validation"] is None and "Checked" not in r.err
    r = cli("convert", src, "--fp-to-fp16", "-o", tmp_path / "c.onnx", "--no-validate", "--seed", "3")
    assert r.code == 2 and "--no-validate" in r.err


def test_the_check_reads_loaded_inputs(cli, tmp_path):
    src = mz.save(runtime_overflow(), tmp_path / "o.onnx")
    small = tmp_path / "small.npz"
    np.savez(small, x=np.full((3, 4), 0.01, np.float32))  # (x * 1e6 = 1e4: fp16 holds it)
    r = cli("convert", src, "--fp-to-fp16", "-o", tmp_path / "o16.onnx", "--load-inputs", small, "--json")
    assert r.code == 0, r.err
    assert json.loads(r.out)["validation"]["passed"]
    r = cli("convert", src, "--fp-to-fp16", "-o", tmp_path / "p.onnx", "--load-inputs", tmp_path / "none.npz")
    assert r.code == 3 and not (tmp_path / "p.onnx").exists()


def test_integer_accumulators_stay_fp32(cli, tmp_path):
    """MatMulInteger's int32 sums pass fp16's 65504 (64 products of up to 127 x 127): the Cast that
    makes them float and the scale that reads it stay fp32; converted to fp16 they are inf."""
    k = 64
    model = int8_matmul_model()
    wq = np.full((k, 8), 127, np.int8)
    wq[:, 1::2] = -127
    model.graph.initializer[0].CopyFrom(numpy_helper.from_array(wq, "Wq"))
    model.graph.input[0].CopyFrom(helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, k]))
    x = np.ones((2, k), np.float32)
    res = fp16.convert(model)
    cast = next(n for n in res.model.graph.node if n.op_type == "Cast" and n.input[0] == "mi")
    assert cast.attribute[0].i == TensorProto.FLOAT
    reader = next(n for n in res.model.graph.node if cast.output[0] in n.input)
    assert reader.name in res.kept
    from toolkit.convert.emulate import emulate_mixed

    want = ort_run(model, {"x": x})["y"]
    for conv in (res.model, emulate_mixed(res.model).model):
        got = ort_run(conv, {"x": x})["y"].astype(np.float32)
        assert np.all(np.isfinite(got)) and np.abs(got - want).max() < 2e-2
    src = mz.save(model, tmp_path / "q.onnx")
    r = cli("convert", src, "--fp-to-fp16", "-o", tmp_path / "q16.onnx", "--json")
    assert r.code == 0 and "differs" not in r.err, r.err
    # bf16 holds such sums (its range is float32's): nothing kept for them
    assert fp16.REASON_ACCUMULATOR not in fp16.convert(model, dtype="bfloat16").kept.values()

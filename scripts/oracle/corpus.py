"""The oracle's corpus: models made in code (each built for a kind of verdict or a known trap) and registry
models (/work/models, and what scripts/fetch_unseen_models.sh fetched), each with its inputs and the verdicts
to re-check.

A case is a dict: name, path, feeds (one input set), origin ('made' or 'registry'), note, and checks, a list of
dicts: {'kind': 'run', 'runners': [...], 'atol', 'rtol'}, {'kind': 'run-golden', 'runner', 'atol', 'rtol'},
{'kind': 'reduce-compare', 'ref', 'test', 'atol', 'rtol'}, {'kind': 'reduce-check', 'check'},
{'kind': 'precision', 'atol', 'rtol'}, {'kind': 'convert'}.

Only onnx and numpy here (no toolkit).
"""

from __future__ import annotations

import os
from typing import Callable, Dict, List, Optional

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

OPSET = 17
IR = 8
F32, BF16, FP16 = "openvino:precision=f32", "openvino:precision=bf16", "onnxrt:fp16"


def _model(nodes, inputs, outputs, inits=(), opset: int = OPSET) -> onnx.ModelProto:
    g = h.make_graph(nodes, "oracle", inputs, outputs, list(inits))
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)], producer_name="oracle")
    m.ir_version = IR
    onnx.checker.check_model(m)
    return m


def _vi(name, shape, dtype=T.FLOAT):
    return h.make_tensor_value_info(name, dtype, shape)


def _w(name, arr):
    return nh.from_array(np.asarray(arr, dtype=np.float32), name)


def _rng(seed=0):
    return np.random.default_rng(seed)


def run(runners, atol=1e-5, rtol=1e-5, mark=False):
    return {"kind": "run", "runners": list(runners), "atol": atol, "rtol": rtol, "mark": mark}


def golden(runner, atol, rtol, outputs=()):
    return {"kind": "run-golden", "runner": runner, "atol": atol, "rtol": rtol, "onnx_outputs": list(outputs)}


def reduce_cmp(test, atol=1e-5, rtol=1e-5, ref="onnxrt"):
    return {"kind": "reduce-compare", "ref": ref, "test": test, "atol": atol, "rtol": rtol}


def precision(atol=1e-2, rtol=1e-2):
    return {"kind": "precision", "atol": atol, "rtol": rtol}


CONVERT = {"kind": "convert"}
RUNS = [run(["onnxrt", F32]), run(["onnxrt", BF16], 1e-2, 1e-2), run(["onnxrt", FP16], 1e-3, 1e-3)]

# ---------------------------------------------------------------------------------------------- made models


def mlp():
    r = _rng(1)
    m = _model([h.make_node("MatMul", ["x", "W"], ["a"], name="mm"), h.make_node("Relu", ["a"], ["r"], name="relu"),
                h.make_node("Mul", ["r", "r"], ["y"], name="sq")],
               [_vi("x", [2, 8])], [_vi("y", [2, 8])], [_w("W", r.standard_normal((8, 8)))])
    return m, {"x": r.standard_normal((2, 8)).astype(np.float32)}, RUNS + [CONVERT, precision(),
                                                                         reduce_cmp(BF16, 1e-3, 1e-3)]


def add_chain():
    m = _model([h.make_node("Add", ["x", "c"], ["a"], name="add"), h.make_node("Mul", ["a", "x"], ["b"], name="mul"),
                h.make_node("Tanh", ["b"], ["t"], name="tanh"), h.make_node("Sub", ["t", "c"], ["y"], name="sub")],
               [_vi("x", [3, 4])], [_vi("y", [3, 4])], [_w("c", np.full((4,), 0.5))])
    return m, {"x": _rng(2).uniform(-1, 1, (3, 4)).astype(np.float32)}, RUNS + [CONVERT, precision(1e-3, 1e-3)]


def fp16_overflow():
    """x*300 squared overflows fp16 (up to 9e4 > 65504), then scaled back."""
    m = _model([h.make_node("Mul", ["x", "k"], ["a"], name="scale"), h.make_node("Mul", ["a", "a"], ["p"], name="square"),
                h.make_node("Div", ["p", "d"], ["q"], name="shrink"), h.make_node("Sqrt", ["q"], ["y"], name="root")],
               [_vi("x", [2, 6])], [_vi("y", [2, 6])], [_w("k", 300.0), _w("d", 1e4)])
    x = _rng(3).uniform(0.5, 1.0, (2, 6)).astype(np.float32)
    return m, {"x": x}, RUNS + [CONVERT, precision(), reduce_cmp(FP16, 1e-2, 1e-2), golden(FP16, 1e-2, 1e-2)]


def fp16_cancel():
    """(x + 1e4) - 1e4: fp16 keeps 8 units of spacing at 1e4, so the small x is lost."""
    m = _model([h.make_node("Add", ["x", "big"], ["a"], name="offset"), h.make_node("Sub", ["a", "big"], ["b"], name="back"),
                h.make_node("Mul", ["b", "two"], ["y"], name="double")],
               [_vi("x", [4, 4])], [_vi("y", [4, 4])], [_w("big", 1e4), _w("two", 2.0)])
    return m, {"x": _rng(4).uniform(0, 1, (4, 4)).astype(np.float32)}, RUNS + [CONVERT, precision(),
                                                                             reduce_cmp(FP16, 1e-2, 1e-2)]


def layernorm_big():
    """A decomposed LayerNorm whose Pow output passes 65504 in fp16."""
    nodes = [h.make_node("ReduceMean", ["x"], ["mu"], axes=[-1], name="mean"),
             h.make_node("Sub", ["x", "mu"], ["d"], name="center"),
             h.make_node("Pow", ["d", "two"], ["d2"], name="pow"),
             h.make_node("ReduceMean", ["d2"], ["var"], axes=[-1], name="var"),
             h.make_node("Add", ["var", "eps"], ["ve"], name="eps"),
             h.make_node("Sqrt", ["ve"], ["sd"], name="sqrt"),
             h.make_node("Div", ["d", "sd"], ["y"], name="norm")]
    m = _model(nodes, [_vi("x", [2, 16])], [_vi("y", [2, 16])], [_w("two", 2.0), _w("eps", 1e-5)])
    x = _rng(5).uniform(0, 600, (2, 16)).astype(np.float32)
    return m, {"x": x}, RUNS + [CONVERT, precision(), reduce_cmp(FP16, 1e-2, 1e-2)]


def cast_int8():
    """y = int8(x * 1), x = 127.97: fp32 gives 127, fp16 rounds to 128 (out of int8's range: undefined)."""
    m = _model([h.make_node("Mul", ["x", "one"], ["hh"], name="times_one"),
                h.make_node("Cast", ["hh"], ["y"], to=T.INT8, name="to_int8")],
               [_vi("x", [4])], [_vi("y", [4], T.INT8)], [_w("one", 1.0)])
    x = np.array([127.97, 1.0, 2.0, 3.0], np.float32)
    return m, {"x": x}, [run(["onnxrt", FP16], 1e-3, 1e-3), run(["onnxrt", FP16], 1e-3, 1e-3, mark=True),
                     run(["onnxrt", F32]), golden(FP16, 1e-3, 1e-3)]


def cast_int32_relu():
    """yi = int32(Relu(x*300)), x in [250, 300]: defined in fp32 (<= 9e4), inf in fp16."""
    m = _model([h.make_node("Mul", ["x", "k"], ["a"], name="scale"), h.make_node("Relu", ["a"], ["r"], name="relu"),
                h.make_node("Cast", ["r"], ["yi"], to=T.INT32, name="to_int")],
               [_vi("x", [8])], [_vi("yi", [8], T.INT32)], [_w("k", 300.0)])
    x = _rng(6).uniform(250, 300, (8,)).astype(np.float32)
    return m, {"x": x}, [run(["onnxrt", FP16], 1e-3, 1e-3), run(["onnxrt", FP16], 1e-3, 1e-3, mark=True),
                     golden(FP16, 1e-3, 1e-3), golden(FP16, 1e-3, 1e-3, ["r", "yi"]), precision(1e-3, 1e-3)]


def cast_nan_both():
    """int32(Log(x)) with x < 0 in some elements: undefined on both sides, the rest compares."""
    m = _model([h.make_node("Log", ["x"], ["l"], name="log"), h.make_node("Mul", ["l", "k"], ["s"], name="scale"),
                h.make_node("Cast", ["s"], ["yi"], to=T.INT32, name="to_int")],
               [_vi("x", [6])], [_vi("yi", [6], T.INT32)], [_w("k", 100.0)])
    x = np.array([-1.0, 2.0, 3.0, -4.0, 5.0, 6.0], np.float32)
    return m, {"x": x}, [run(["onnxrt", F32]), run(["onnxrt", FP16], 1.0, 1e-3)]


def qdq_conv():
    """A static-QDQ two-Conv net (onnxruntime.quantization), built in code and calibrated on [0, 1]."""
    r = _rng(7)
    nodes = [h.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
             h.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             h.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], name="conv2"),
             h.make_node("GlobalAveragePool", ["c2"], ["gp"], name="gap"),
             h.make_node("Flatten", ["gp"], ["y"], name="flat")]
    m = _model(nodes, [_vi("x", [1, 3, 8, 8])], [_vi("y", [1, 4])],
               [_w("w1", r.standard_normal((8, 3, 3, 3)) * 0.3), _w("b1", r.standard_normal(8) * 0.1),
                _w("w2", r.standard_normal((4, 8, 3, 3)) * 0.3), _w("b2", r.standard_normal(4) * 0.1)], opset=13)
    return m, {"x": r.uniform(0, 1, (1, 3, 8, 8)).astype(np.float32)}, [
        run(["onnxrt", F32]), run(["onnxrt", "onnxrt:opt=disable"]), reduce_cmp(F32), reduce_cmp("onnxrt:opt=disable"),
        CONVERT]


def qdq_clip():
    """The static-QDQ net of qdq_conv (input pair calibrated on [0, 1]) run on inputs in [-1, 1]: the input pair
    clips half the values; debug precision with the float model as reference."""
    m, _, _ = qdq_conv()
    x = _rng(22).uniform(-1, 1, (1, 3, 8, 8)).astype(np.float32)
    return m, {"x": x}, [{"kind": "precision-qdq", "atol": 3e-2, "rtol": 3e-2}, run(["onnxrt", F32])]


def if_model():
    then_g = h.make_graph([h.make_node("Mul", ["x", "two"], ["tb"], name="then_mul")], "then", [],
                          [_vi("tb", [2, 4])], [_w("two", 2.0)])
    else_g = h.make_graph([h.make_node("Sub", ["x", "one"], ["eb"], name="else_sub")], "else", [],
                          [_vi("eb", [2, 4])], [_w("one", 1.0)])
    nodes = [h.make_node("ReduceSum", ["x"], ["s"], keepdims=0, name="sum"),
             h.make_node("Greater", ["s", "zero"], ["cond"], name="gt"),
             h.make_node("If", ["cond"], ["b"], then_branch=then_g, else_branch=else_g, name="branch"),
             h.make_node("MatMul", ["b", "W"], ["y"], name="mm")]
    r = _rng(8)
    m = _model(nodes, [_vi("x", [2, 4])], [_vi("y", [2, 4])], [_w("zero", 0.0), _w("W", r.standard_normal((4, 4)))],
               opset=13)
    return m, {"x": r.uniform(0, 1, (2, 4)).astype(np.float32)}, [run(["onnxrt", F32]), run(["onnxrt", BF16], 1e-2, 1e-2),
                                                                   reduce_cmp(BF16, 1e-4, 1e-4), CONVERT]


def loop_model():
    body = h.make_graph([h.make_node("Identity", ["cond_in"], ["cond_out"]),
                         h.make_node("Mul", ["acc", "half"], ["ah"]),
                         h.make_node("Add", ["ah", "x"], ["acc_out"])], "body",
                        [_vi("i", [], T.INT64), _vi("cond_in", [], T.BOOL), _vi("acc", [2, 3])],
                        [_vi("cond_out", [], T.BOOL), _vi("acc_out", [2, 3])], [_w("half", 0.5)])
    nodes = [h.make_node("Loop", ["trip", "cond", "x"], ["acc_final"], body=body, name="loop"),
             h.make_node("Tanh", ["acc_final"], ["y"], name="tanh")]
    inits = [nh.from_array(np.array(3, np.int64), "trip"), nh.from_array(np.array(True), "cond")]
    m = _model(nodes, [_vi("x", [2, 3])], [_vi("y", [2, 3])], inits, opset=13)
    return m, {"x": _rng(9).uniform(-1, 1, (2, 3)).astype(np.float32)}, [run(["onnxrt", F32]),
                                                                        run(["onnxrt", BF16], 1e-2, 1e-2), CONVERT]


def dynamic():
    r = _rng(10)
    m = _model([h.make_node("Gemm", ["x", "W", "b"], ["g"], name="gemm"), h.make_node("Sigmoid", ["g"], ["y"], name="sig")],
               [_vi("x", ["batch", 8])], [_vi("y", ["batch", 3])],
               [_w("W", r.standard_normal((8, 3))), _w("b", r.standard_normal(3))])
    return m, {"x": r.standard_normal((5, 8)).astype(np.float32)}, RUNS + [CONVERT, reduce_cmp(BF16, 1e-3, 1e-3)]


def external_data():
    r = _rng(11)
    m = _model([h.make_node("MatMul", ["x", "W"], ["a"], name="mm"), h.make_node("Add", ["a", "b"], ["y"], name="bias")],
               [_vi("x", [2, 64])], [_vi("y", [2, 32])],
               [_w("W", r.standard_normal((64, 32)) * 0.1), _w("b", r.standard_normal(32))])
    return m, {"x": r.standard_normal((2, 64)).astype(np.float32)}, RUNS + [CONVERT, reduce_cmp(BF16, 1e-4, 1e-4)]


def planted_nan():
    """A chain where Log(x - 2) is NaN on inputs in [0, 1]: the bare check (any non-finite output) fails."""
    nodes = [h.make_node("Mul", ["x", "k"], ["a"], name="n0_mul"), h.make_node("Add", ["a", "k"], ["b"], name="n1_add"),
             h.make_node("Tanh", ["b"], ["c"], name="n2_tanh"), h.make_node("Sub", ["c", "two"], ["d"], name="n3_sub"),
             h.make_node("Log", ["d"], ["e"], name="n4_log"), h.make_node("Add", ["e", "k"], ["f"], name="n5_add"),
             h.make_node("Abs", ["f"], ["g"], name="n6_abs"), h.make_node("Mul", ["g", "k"], ["y"], name="n7_mul")]
    m = _model(nodes, [_vi("x", [2, 4])], [_vi("y", [2, 4])], [_w("k", 0.5), _w("two", 2.0)])
    return m, {"x": _rng(12).uniform(0, 1, (2, 4)).astype(np.float32)}, [
        {"kind": "reduce-check", "check": "nonfinite"}, run(["onnxrt", F32]),
        {"kind": "reduce-check", "check": "crash-without-log"},
        {"kind": "reduce-check", "check": "has-abs", "replay_from": "nonfinite"}]


def bf16_planted():
    """A 24-node chain with one MatMul that cancels a 1e4 offset (bf16 loses it), the rest benign."""
    r = _rng(13)
    nodes, inits, prev = [], [], "x"
    for i in range(24):
        out = "y" if i == 23 else f"t{i}"
        if i == 11:
            inits += [_w("off", np.full((1, 8), 1e4)), _w("Wc", np.eye(8))]
            nodes += [h.make_node("Add", [prev, "off"], [f"o{i}"], name=f"n{i}_offset"),
                      h.make_node("MatMul", [f"o{i}", "Wc"], [f"m{i}"], name=f"n{i}_matmul"),
                      h.make_node("Sub", [f"m{i}", "off"], [out], name=f"n{i}_back")]
        elif i % 2 == 0:
            inits.append(_w(f"a{i}", r.uniform(0.9, 1.1, (1, 8))))
            nodes.append(h.make_node("Mul", [prev, f"a{i}"], [out], name=f"n{i}_mul"))
        else:
            nodes.append(h.make_node("Tanh", [prev], [out], name=f"n{i}_tanh"))
        prev = out
    m = _model(nodes, [_vi("x", [2, 8])], [_vi("y", [2, 8])], inits)
    return m, {"x": r.uniform(-1, 1, (2, 8)).astype(np.float32)}, [
        run(["onnxrt", BF16], 1e-2, 1e-2), reduce_cmp(BF16, 1e-2, 1e-2), reduce_cmp(FP16, 1e-2, 1e-2), precision()]


def two_outputs():
    r = _rng(14)
    nodes = [h.make_node("MatMul", ["x", "W"], ["a"], name="mm"), h.make_node("Relu", ["a"], ["y1"], name="relu"),
             h.make_node("Add", ["x", "big"], ["b"], name="offset"), h.make_node("Sub", ["b", "big"], ["y2"], name="back")]
    m = _model(nodes, [_vi("x", [2, 8])], [_vi("y1", [2, 8]), _vi("y2", [2, 8])],
               [_w("W", r.standard_normal((8, 8))), _w("big", 3e3)])
    return m, {"x": r.uniform(0, 1, (2, 8)).astype(np.float32)}, RUNS + [CONVERT, precision(),
                                                                       reduce_cmp(FP16, 1e-2, 1e-2)]


def softmax_big():
    m = _model([h.make_node("Mul", ["x", "k"], ["a"], name="scale"), h.make_node("Softmax", ["a"], ["y"], axis=-1, name="sm")],
               [_vi("x", [2, 10])], [_vi("y", [2, 10])], [_w("k", 40.0)])
    return m, {"x": _rng(15).uniform(-1, 1, (2, 10)).astype(np.float32)}, RUNS + [CONVERT, precision()]


def argmax_int():
    r = _rng(16)
    nodes = [h.make_node("MatMul", ["x", "W"], ["logits"], name="mm"),
             h.make_node("ArgMax", ["logits"], ["idx"], axis=-1, keepdims=0, name="argmax")]
    m = _model(nodes, [_vi("x", [4, 8])], [_vi("logits", [4, 5]), _vi("idx", [4], T.INT64)],
               [_w("W", r.standard_normal((8, 5)))])
    return m, {"x": r.standard_normal((4, 8)).astype(np.float32)}, RUNS + [CONVERT]


def conv_bn():
    r = _rng(17)
    nodes = [h.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             h.make_node("BatchNormalization", ["c", "s", "bb", "mu", "var"], ["bn"], name="bn"),
             h.make_node("Relu", ["bn"], ["y"], name="relu")]
    m = _model(nodes, [_vi("x", [1, 3, 6, 6])], [_vi("y", [1, 4, 6, 6])],
               [_w("w", r.standard_normal((4, 3, 3, 3)) * 0.2), _w("s", r.uniform(0.5, 1.5, 4)),
                _w("bb", r.standard_normal(4) * 0.1), _w("mu", r.standard_normal(4) * 0.1), _w("var", r.uniform(0.5, 2, 4))])
    return m, {"x": r.standard_normal((1, 3, 6, 6)).astype(np.float32)}, RUNS + [CONVERT, reduce_cmp(BF16, 1e-3, 1e-3)]


def sigmoid_saturate():
    """An fp16 overflow hidden by a saturating Sigmoid on the output."""
    m = _model([h.make_node("Mul", ["x", "k"], ["a"], name="scale"), h.make_node("Mul", ["a", "a"], ["p"], name="square"),
                h.make_node("Sigmoid", ["p"], ["y"], name="sig")],
               [_vi("x", [2, 4])], [_vi("y", [2, 4])], [_w("k", 400.0)])
    return m, {"x": _rng(18).uniform(0.7, 1.0, (2, 4)).astype(np.float32)}, RUNS + [CONVERT, precision(),
                                                                                  reduce_cmp(FP16, 1e-3, 1e-3)]


def empty_output():
    """An output with zero elements (Slice to nothing) next to a real one: a comparison of 0 elements."""
    nodes = [h.make_node("Slice", ["x", "st", "en"], ["e"], name="slice"), h.make_node("Tanh", ["x"], ["y"], name="tanh")]
    m = _model(nodes, [_vi("x", [3, 4])], [_vi("e", [0, 4]), _vi("y", [3, 4])],
               [nh.from_array(np.array([0], np.int64), "st"), nh.from_array(np.array([0], np.int64), "en")])
    return m, {"x": _rng(19).standard_normal((3, 4)).astype(np.float32)}, [run(["onnxrt", F32]), run(["onnxrt", FP16], 1e-3, 1e-3)]


def rounding_chain():
    """Eight MatMul+Tanh layers whose fp16 rounding adds up past 1e-3 with no single culprit node."""
    r = _rng(20)
    nodes, inits, prev = [], [], "x"
    for i in range(8):
        inits.append(_w(f"W{i}", r.standard_normal((16, 16)) * 0.5))
        nodes += [h.make_node("MatMul", [prev, f"W{i}"], [f"m{i}"], name=f"mm{i}"),
                  h.make_node("Tanh", [f"m{i}"], [f"t{i}"], name=f"tanh{i}")]
        prev = f"t{i}"
    inits.append(_w("ten", 10.0))
    nodes.append(h.make_node("Mul", [prev, "ten"], ["y"], name="scale"))
    m = _model(nodes, [_vi("x", [4, 16])], [_vi("y", [4, 16])], inits)
    return m, {"x": r.standard_normal((4, 16)).astype(np.float32)}, [
        run(["onnxrt", FP16], 1e-3, 1e-3), precision(1e-3, 1e-3), CONVERT, reduce_cmp(FP16, 1e-3, 1e-3)]


MADE: Dict[str, Callable] = {f.__name__: f for f in [
    mlp, add_chain, fp16_overflow, fp16_cancel, layernorm_big, cast_int8, cast_int32_relu, cast_nan_both, qdq_conv,
    qdq_clip,
    if_model, loop_model, dynamic, external_data, planted_nan, bf16_planted, two_outputs, softmax_big, argmax_int,
    conv_bn, sigmoid_saturate, empty_output, rounding_chain]}
# The CI sample (tests/oracle): a few checks of a few made models, one of each verdict kind, that take a few
# seconds each: {case: indices into its checks}.
SAMPLE = {"mlp": [0, 3, 4], "planted_nan": [0], "fp16_overflow": [5], "external_data": [0]}


def _quantize_qdq(m: onnx.ModelProto, feeds, path: str) -> None:
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    src = path[:-len(".onnx")] + ".float.onnx"
    onnx.save(m, src)

    class Reader(CalibrationDataReader):
        def __init__(self):
            r = _rng(70)
            self.items = iter([{"x": r.uniform(0, 1, feeds["x"].shape).astype(np.float32)} for _ in range(4)])

        def get_next(self):
            return next(self.items, None)

    quantize_static(src, path, Reader(), quant_format=QuantFormat.QDQ, activation_type=QuantType.QUInt8,
                    weight_type=QuantType.QInt8)


def make(name: str, folder: str) -> dict:
    m, feeds, checks = MADE[name]()
    path = os.path.join(folder, name + ".onnx")
    if name.startswith("qdq_"):
        _quantize_qdq(m, feeds, path)
    elif name == "external_data":
        onnx.save(m, path, save_as_external_data=True, all_tensors_to_one_file=True, location=name + ".onnx.data",
                  size_threshold=64)
    else:
        onnx.save(m, path)
    return {"name": name, "path": path, "feeds": feeds, "checks": checks, "origin": "made",
            "note": (MADE[name].__doc__ or "").strip().split("\n")[0]}


# ---------------------------------------------------------------------------------------------- registry models

MODELS_DIR = os.environ.get("ORACLE_MODELS", "/work/models")
UNSEEN_DIR = os.environ.get("ORACLE_UNSEEN") or next(
    (d for d in ("/tmp/unseen-models", "/tmp/oracle-unseen") if os.path.isdir(d)), "/tmp/unseen-models")


def _reg_inputs(spec: dict, seed: int = 0) -> dict:
    r = _rng(seed)
    out = {}
    for name, (kind, shape, *args) in spec.items():
        if kind == "normal":
            out[name] = (r.standard_normal(shape) * (args[1] if len(args) > 1 else 1)).astype(args[0] if args else np.float32)
        elif kind == "uniform":
            out[name] = r.uniform(args[0], args[1], shape).astype(np.float32)
        elif kind == "int":
            out[name] = r.integers(args[0], args[1], shape).astype(np.int64)
        elif kind == "bool":
            out[name] = r.integers(0, 2, shape).astype(bool)
        elif kind == "ones":
            out[name] = np.ones(shape, dtype=args[0])
        elif kind == "const":
            out[name] = np.array(args[1], dtype=args[0]).reshape(shape)
    return out


REG_RUNS = [run(["onnxrt", F32], 1e-4, 1e-4), run(["onnxrt", BF16], 5e-2, 5e-2), CONVERT]
REGISTRY = {
    "basic_pitch_nmp": (MODELS_DIR, {"serving_default_input_2:0": ("normal", [1, 43844, 1], np.float32, 0.1)}, REG_RUNS),
    "captcha_crnn": (MODELS_DIR, {"image": ("uniform", [1, 3, 60, 160], 0, 1)}, REG_RUNS),
    "ppocr_det": (MODELS_DIR, {"x": ("uniform", [1, 3, 64, 64], 0, 1)}, REG_RUNS),
    "romanizer_encoder": (MODELS_DIR, {"src": ("int", [1, 8], 1, 50), "src_mask": ("ones", [1, 8], bool)}, REG_RUNS),
    "romanizer_decoder": (MODELS_DIR, {"prefix": ("int", [1, 4], 1, 50), "memory": ("normal", [1, 8, 256]),
                                       "src_mask": ("ones", [1, 8], bool), "hidden": ("normal", [1, 2, 256])}, REG_RUNS),
    "silero_vad": (MODELS_DIR, {"input": ("normal", [1, 512], np.float32, 0.1), "state": ("normal", [2, 1, 128], np.float32, 0.0),
                                "sr": ("const", [], np.int64, 16000)},
                   REG_RUNS + [reduce_cmp("onnxrt:opt=disable", 1e-7, 1e-7)]),
    "capspot_sim": (UNSEEN_DIR, {"input_1": ("uniform", [1, 60, 60, 3], 0, 1), "input_2": ("uniform", [1, 60, 60, 3], 0, 1)},
                    REG_RUNS),
    "capspot_sim_ext": (UNSEEN_DIR, {"input_1": ("uniform", [1, 60, 60, 3], 0, 1),
                                     "input_2": ("uniform", [1, 60, 60, 3], 0, 1)}, [run(["onnxrt", F32], 1e-4, 1e-4)]),
    "atspm_phase": (UNSEEN_DIR, {"X": ("normal", [4, 261], np.float64)}, [run(["onnxrt", F32], 1e-4, 1e-4)]),
    "eeg_seizure": (UNSEEN_DIR, {"x": ("normal", [1, 100, 200])}, REG_RUNS),
    "eeg_seizure_int8": (UNSEEN_DIR, {"x": ("normal", [1, 100, 200])}, [run(["onnxrt", F32], 1e-4, 1e-4), CONVERT]),
    "eeg_spindle": (UNSEEN_DIR, {"raw_signal": ("normal", [1, 1, 7500]), "spectrogram": ("normal", [1, 15, 7500])}, REG_RUNS),
    "eeg_spindle_qdq": (UNSEEN_DIR, {"raw_signal": ("normal", [1, 1, 7500]), "spectrogram": ("normal", [1, 15, 7500])},
                        [run(["onnxrt", F32], 1e-4, 1e-4), run(["onnxrt", "onnxrt:opt=disable"], 1e-4, 1e-4), CONVERT]),
}


def registry(name: str) -> Optional[dict]:
    folder, spec, checks = REGISTRY[name]
    path = os.path.join(folder, name + ".onnx")
    if not os.path.exists(path):
        return None
    return {"name": name, "path": path, "feeds": _reg_inputs(spec), "checks": checks, "origin": "registry",
            "note": f"registry model from {folder}"}


def corpus(folder: str, names: Optional[List[str]] = None) -> List[dict]:
    """Every case (made ones written under ``folder``); ``names`` picks some."""
    os.makedirs(folder, exist_ok=True)
    out = []
    for name in names or list(MADE) + list(REGISTRY):
        if name in MADE:
            out.append(make(name, folder))
        elif name in REGISTRY:
            case = registry(name)
            if case is not None:
                out.append(case)
    return out

"""`run --onnxrt` on the CPU provider says when the model computes in float16/bfloat16: ONNX-Runtime
runs the nodes it has no such kernel for in float32, so an overflow a GPU shows does not show."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from conftest import run_toolkit

NOTE = "computes in float16/bfloat16"


def _squares(path, *, mixed: bool = False, io=TensorProto.FLOAT):
    """y = sum((300 x)^2) / 1e6: (300 x)^2 passes fp16's 65504 for x above 0.85."""
    w = numpy_helper.from_array(np.array(300.0, np.float32), "w")
    d = numpy_helper.from_array(np.array(1e6, np.float32), "d")
    nodes = []
    x = "x"
    if mixed:  # as toolkit convert writes it: float32 in and out, fp16 inside
        nodes.append(helper.make_node("Cast", ["x"], ["x16"], to=TensorProto.FLOAT16))
        w = numpy_helper.from_array(np.array(300.0, np.float16), "w")
        x = "x16"
    nodes += [helper.make_node("Mul", [x, "w"], ["a"]), helper.make_node("Mul", ["a", "a"], ["b"]),
              helper.make_node("ReduceSum", ["b"], ["s"], keepdims=1)]
    if mixed:
        nodes.append(helper.make_node("Cast", ["s"], ["s32"], to=TensorProto.FLOAT))
    nodes.append(helper.make_node("Div", ["s32" if mixed else "s", "d"], ["y"]))
    if io == TensorProto.FLOAT16:  # every value fp16 (no Cast): its inputs and outputs say so
        nodes = [helper.make_node("Mul", ["x", "w"], ["y"])]
        w = numpy_helper.from_array(np.array(3.0, np.float16), "w")
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", io, [1, 16])],
                          [helper.make_tensor_value_info("y", io, [1, 1] if io == TensorProto.FLOAT else [1, 16])],
                          [w] if io == TensorProto.FLOAT16 else [w, d])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, str(path))
    return str(path)


def test_a_mixed_fp16_model_on_the_cpu_provider_is_told(tmp_path):
    path = _squares(tmp_path / "mixed.onnx", mixed=True)
    r = run_toolkit("run", path, "--onnxrt", "--val-range", "x:[0.9,1]", cwd=str(tmp_path))
    assert r.code == 0, r.output
    assert NOTE in r.err and "--onnxrt --fp16" in r.err


def test_a_float16_model_is_told_from_its_inputs(tmp_path):
    path = _squares(tmp_path / "half.onnx", io=TensorProto.FLOAT16)
    r = run_toolkit("run", path, "--onnxrt", cwd=str(tmp_path))
    assert r.code == 0, r.output
    assert NOTE in r.err


def test_float32_models_and_the_emulation_are_not(tmp_path):
    path = _squares(tmp_path / "fp32.onnx")
    r = run_toolkit("run", path, "--onnxrt", "--onnxrt", "--fp16", "--val-range", "x:[0.9,1]", cwd=str(tmp_path))
    assert NOTE not in r.err
    assert r.code == 1  # the emulation shows the overflow: (300 x)^2 past 65504 is inf in fp16
    # the same model converted to fp16 before the run: the note, the same as for a file
    r = run_toolkit("run", path, "--onnxrt", "--fp-to-fp16", "--val-range", "x:[0.9,1]", cwd=str(tmp_path))
    assert NOTE in r.err, r.err

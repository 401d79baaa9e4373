"""`run --onnxrt --openvino --onnx-outputs mark all`: one option marks the ONNX model's tensors for
both runners, and a comparison that leaves tensors out names the option that would add them."""

from __future__ import annotations

import importlib.util

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from toolkit.run.options import RunOptions

needs_openvino = pytest.mark.skipif(importlib.util.find_spec("openvino") is None, reason="openvino is not installed")


def _chain(path) -> str:
    """x -> Relu -> Mul(2) -> Add(1) -> y: three tensors."""
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="relu"), helper.make_node("Mul", ["a", "two"], ["b"], name="mul"),
             helper.make_node("Add", ["b", "one"], ["y"], name="add")]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])],
        initializer=[onnx.numpy_helper.from_array(np.array(2, np.float32), "two"),
                     onnx.numpy_helper.from_array(np.array(1, np.float32), "one")],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9), str(path))
    return str(path)


def test_onnx_outputs_choose_openvino_tensors_unless_it_has_its_own():
    from toolkit.run.plan import share_onnx_outputs
    from toolkit.run.registry import get_kind, with_values

    opts = RunOptions("m.onnx", runners=["onnxrt", "openvino"], onnx_outputs=["mark", "all"])
    assert share_onnx_outputs(opts, ["onnxrt", "openvino"]).of("openvino").outputs == ["mark", "all"]
    assert share_onnx_outputs(opts, ["onnxrt"]).of("openvino").outputs == []
    own = RunOptions("m.onnx", runners=["onnxrt", "openvino"], onnx_outputs=["mark", "all"])
    own = with_values(own, {get_kind("openvino").option("outputs"): ["y"]})
    assert share_onnx_outputs(own, ["onnxrt", "openvino"]).of("openvino").outputs == ["y"]


def test_a_tensor_left_out_names_the_option_that_marks_it():
    from toolkit.cli.run import _marking_hint

    assert _marking_hint("trt-runner") == "; --trt-outputs mark all makes trt-runner return them too"
    assert "--openvino-outputs mark all" in _marking_hint("openvino:precision=f32")
    assert _marking_hint("golden (from g.json)") == ""


@needs_openvino
def test_one_option_compares_every_tensor_of_both(cli, tmp_path):
    res = cli("run", _chain(tmp_path / "m.onnx"), "--onnxrt", "--openvino", "--openvino-precision", "f32",
              "--onnx-outputs", "mark", "all")
    assert res.code == 0, res.err
    assert "Iteration 0 | 3 output(s) compared\n" in res.err and "not compared" not in res.err


@needs_openvino
def test_openvino_outputs_of_its_own_leave_a_hint(cli, tmp_path):
    res = cli("run", _chain(tmp_path / "m.onnx"), "--onnxrt", "--openvino", "--openvino-precision", "f32",
              "--onnx-outputs", "mark", "all", "--openvino-outputs", "y")
    assert res.code == 0, res.err
    assert "1 output(s) compared (not compared: 2 only in onnxrt-runner: a, b; --openvino-outputs mark all makes " \
           "openvino-runner return them too)" in res.err

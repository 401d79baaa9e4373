"""Models whose outputs as a runtime deploys them differ from the same model with every tensor
marked as an output (the runtime's fusions stop at marked tensors), or with optimizations off."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from modelzoo import make_model, vi


def qdq_softmax(path):
    """x -> Relu -> Q -> DQ -> Softmax -> Q -> DQ -> Mul(100) -> y: ONNX-Runtime fuses the middle
    into QLinearSoftmax (one 1/255 step off the float Softmax on some elements) only when none of
    its tensors is an output."""
    inits = [numpy_helper.from_array(np.array(v, dt), n) for n, v, dt in (
        ("as", 0.0173, np.float32), ("ys", 1 / 255, np.float32), ("z", 0, np.uint8), ("k", 100, np.float32))]
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="relu"),
        helper.make_node("QuantizeLinear", ["a", "as", "z"], ["aq"], name="q_in"),
        helper.make_node("DequantizeLinear", ["aq", "as", "z"], ["ad"], name="dq_in"),
        helper.make_node("Softmax", ["ad"], ["s"], name="softmax"),
        helper.make_node("QuantizeLinear", ["s", "ys", "z"], ["sq"], name="q_out"),
        helper.make_node("DequantizeLinear", ["sq", "ys", "z"], ["sd"], name="dq_out"),
        helper.make_node("Mul", ["sd", "k"], ["y"], name="scale"),
    ]
    graph = helper.make_graph(nodes, "qdq_softmax", [vi("x", [4, 64])], [vi("y", [4, 64])], inits)
    onnx.save(make_model(graph, opset=17), path)
    return path

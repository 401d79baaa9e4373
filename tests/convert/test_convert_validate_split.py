"""The check's emulated model: its large fp16 weights are given to ONNX-Runtime as float32 arrays, and
the emulation takes the tensor types from before that (the dynamo exporter's T5 MatMuls read such a
weight that the model also declares in its value_info (as float16 once converted): shape inference
failed on the model in between, with a warning)."""

import warnings

import numpy as np
from onnx import helper, numpy_helper

import modelzoo as mz
from toolkit.convert import fp16
from toolkit.convert.validate import validate


def big_matmul(d: int = 64):
    w = numpy_helper.from_array((np.random.default_rng(0).standard_normal((d, d)) * 0.1).astype(np.float32), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"), helper.make_node("Relu", ["h"], ["y"], name="relu")]
    graph = helper.make_graph(nodes, "mm", [mz.vi("x", ["n", d])], [mz.vi("y", ["n", d])], [w])
    graph.value_info.append(mz.vi("w", [d, d]))  # (as torch.onnx's dynamo exporter writes its weights)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_the_check_of_a_model_with_large_fp16_weights_warns_nothing():
    converted = fp16.convert_to_fp16(big_matmul())
    x = np.random.default_rng(1).standard_normal((3, 64)).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        val = validate(big_matmul(), converted, {"x": x})
    assert val.passed and 0 < val.max_error < 0.01

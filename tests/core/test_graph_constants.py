"""The one reading of a graph's constants (initializers, Constant nodes' values), of the tensors its
nodes compute and of the inputs a run feeds, as every room uses it: the value ONNX-Runtime computes,
never another one."""

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from toolkit.quant import qdq


def _constant(output: str, *values, domain: str = "") -> onnx.NodeProto:
    """A Constant node whose ``value`` attribute is repeated once per value (onnx's checker refuses
    that; ONNX-Runtime runs it)."""
    node = helper.make_node("Constant", [], [output], name=output, domain=domain)
    for v in values:
        node.attribute.append(helper.make_attribute("value", numpy_helper.from_array(np.asarray(v, np.float32))))
    return node


def _model(nodes, inputs, outputs, inits=()) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def _qdq_model(scale_node: onnx.NodeProto) -> onnx.ModelProto:
    zp = numpy_helper.from_array(np.array(128, np.uint8), "zp")
    nodes = [scale_node,
             helper.make_node("QuantizeLinear", ["x", "scale", "zp"], ["q"], name="x_QuantizeLinear"),
             helper.make_node("DequantizeLinear", ["q", "scale", "zp"], ["y"], name="x_DequantizeLinear")]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8])], [zp])


def _ort(model: onnx.ModelProto, feed=None) -> list:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feed or {})


def test_a_pair_s_scale_is_the_one_onnxruntime_quantizes_with():
    """A Constant scale whose ``value`` is repeated: the pair's grid is the one the model runs on."""
    model = _qdq_model(_constant("scale", 0.1, 0.5))
    x = np.linspace(-3, 3, 8).astype(np.float32)
    (ran,) = _ort(model, {"x": x})
    (pair,) = qdq.find_pairs(model)
    grid = (np.clip(np.round(x / pair.scale) + pair.zero_point, pair.qmin, pair.qmax) - pair.zero_point) * pair.scale
    np.testing.assert_allclose(grid, ran, rtol=0, atol=1e-6)
    assert float(pair.scale) == np.float32(0.1)


def test_constants_are_the_values_onnxruntime_computes():
    from toolkit.core.graph.constants import constant_names, constant_nodes, constant_values, is_constant_node

    custom = _constant("custom", 7.0, domain="my.ops")
    nodes = [_constant("c", 1.0, 2.0), _constant("d", [3.0, 4.0]), custom,
             helper.make_node("Constant", [], ["f"], value_float=5.0)]
    inits = [numpy_helper.from_array(np.array([6.0], np.float32), "w")]
    graph = _model(nodes, [], [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in "cdf"], inits).graph
    values = constant_values(graph)
    assert sorted(values) == ["c", "d", "w"]  # (a custom op named Constant, a value_float: not read)
    ran = dict(zip("cdf", _ort(_model([n for n in nodes if n is not custom], [], list(graph.output), inits))))
    for name in "cd":
        np.testing.assert_array_equal(values[name], ran[name])
    assert [n.output[0] for n, _ in constant_nodes(graph)] == ["c", "d"]
    assert not is_constant_node(custom) and is_constant_node(nodes[3])
    assert constant_names(graph) == {"c", "d", "f", "w"}  # (a value_float Constant is a constant too)


def test_node_outputs_name_no_omitted_optional_output():
    from toolkit.core.graph.graphs import node_outputs

    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Dropout", ["r"], ["y", ""])]
    graph = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])]).graph
    assert node_outputs(graph) == ["r", "y"]


def test_fed_inputs_leave_out_initializers_listed_as_inputs():
    from toolkit.core.graph.graphs import fed_inputs
    from toolkit.core.io.model import graph_io_meta

    w = numpy_helper.from_array(np.ones(2, np.float32), "w")
    vis = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2]) for n in ("x", "w")]
    model = _model([helper.make_node("Add", ["x", "w"], ["y"])], vis,
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])], [w])  # (IR 3 style)
    assert [vi.name for vi in fed_inputs(model.graph)] == ["x"]
    assert [m.name for m in graph_io_meta(model)[0]] == ["x"]

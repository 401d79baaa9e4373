"""`run --save-report NAME.model-explorer.json`: node data keyed by the node ids Model Explorer's
ONNX adapter gives the model's nodes, so the overlay colours the graph the viewer shows."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper


def _branch(name: str, op: str) -> onnx.GraphProto:
    """An If body of two unnamed nodes that reads ``b`` of the outer graph."""
    nodes = [helper.make_node(op, ["b"], [f"{name}_t"]), helper.make_node("Identity", [f"{name}_t"], [f"{name}_o"])]
    out = helper.make_tensor_value_info(f"{name}_o", TensorProto.FLOAT, [2, 4])
    return helper.make_graph(nodes, name, [], [out])


def _model(path) -> str:
    """Named and unnamed nodes, a name the adapter also generates, and an If whose bodies hold unnamed nodes."""
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="relu"),
        helper.make_node("Add", ["a", "a"], ["b"]),
        helper.make_node("If", ["cond"], ["c"], name="branch", then_branch=_branch("then", "Neg"),
                         else_branch=_branch("else", "Abs")),
        helper.make_node("Mul", ["c", "x"], ["d"]),
        helper.make_node("Sigmoid", ["d"], ["y"], name="node"),
    ]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
        initializer=[onnx.numpy_helper.from_array(np.array(True), "cond")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return str(path)


def test_ids_follow_the_adapter_naming(tmp_path):
    from toolkit.run.node_data import explorer_ids

    graph = onnx.load(_model(tmp_path / "m.onnx")).graph
    ids = explorer_ids(graph)
    # the If bodies hold "node", "node_1" (then) and "node", "node_2" (else): the top Mul is "node_3"
    assert ids == {"a": "relu", "b": "node", "c": "branch", "d": "node_3", "y": "node_4"}


def _report(cli, model, path):
    res = cli("run", model, "--onnxrt", "--onnxrt", "--onnx-outputs", "mark", "all", "--save-report", path)
    assert res.code == 0, res.err
    return json.loads(path.read_text())


def test_every_compared_node_is_a_key(cli, tmp_path):
    data = _report(cli, _model(tmp_path / "m.onnx"), tmp_path / "e.model-explorer.json")
    assert set(data["results"]) == {"relu", "node", "branch", "node_3", "node_4", "[value] y"}
    assert all(v == {"value": 0.0} for v in data["results"].values())


def test_the_real_adapter_shows_a_node_for_every_key(cli, tmp_path):
    adapter = pytest.importorskip("model_explorer_onnx.main", reason="model-explorer-onnx is not installed")
    model = _model(tmp_path / "m.onnx")
    data = _report(cli, model, tmp_path / "e.model-explorer.json")
    graphs = adapter.ONNXAdapter().convert(model, {})["graphs"]
    main = graphs[0]
    node_ids = {n.id for n in main.nodes}
    matched = [k for k in data["results"] if k in node_ids]
    assert len(matched) == len(data["results"]) == 6
    ops = {n.id for n in main.nodes if n.label in ("Relu", "Add", "If", "Mul", "Sigmoid")}
    assert ops <= set(matched)

"""The stable topological order (toolkit.core.graph.graphs) agrees with the cycle check of
toolkit.surgeon.load: a node that reads its own output is a cycle; a name a body defines for
itself, though the node it belongs to also makes it, is not."""

from __future__ import annotations

import onnx
from onnx import helper

from modelzoo import make_model, save, vi
from toolkit.convert.repair import toposort
from toolkit.core.graph.graphs import stable_topological_order
from toolkit.core.shapes import node_reads


def _self_reading():
    """x -> relu -> a; selfadd: b = a + b (reads its own output); b -> relu -> y."""
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="r0"),
             helper.make_node("Add", ["a", "b"], ["b"], name="selfadd"),
             helper.make_node("Relu", ["b"], ["y"], name="r2")]
    return make_model(helper.make_graph(nodes, "self", [vi("x", [2])], [vi("y", [2])]))


def _shadowing_if():
    """An If whose output 'y' is also the name of a tensor its branches make and read, listed after
    its reader (so the order must change); ONNX's checker and ONNX-Runtime accept the sorted model."""

    def branch(op):
        nodes = [helper.make_node(op, ["x"], ["y"], name=f"{op}_in"),
                 helper.make_node("Identity", ["y"], [f"z_{op}"], name=f"{op}_id")]
        return helper.make_graph(nodes, op, [], [vi(f"z_{op}", [2])])

    cond = helper.make_node("Constant", [], ["c"], value=helper.make_tensor("cv", onnx.TensorProto.BOOL, [], [True]),
                            name="cst")
    iff = helper.make_node("If", ["c"], ["y"], then_branch=branch("Relu"), else_branch=branch("Neg"), name="if")
    out = helper.make_node("Relu", ["y"], ["o"], name="out")
    return make_model(helper.make_graph([out, iff, cond], "shadow", [vi("x", [2])], [vi("o", [2])]))


def test_a_node_reading_its_own_output_is_left_out_of_the_order_as_a_cycle():
    nodes = list(_self_reading().graph.node)
    assert stable_topological_order(nodes, node_reads) == [0]  # (r2 waits on selfadd, which waits on itself)


def test_a_self_reading_node_is_a_cycle_for_debug_reduce_too(cli, tmp_path, monkeypatch):
    """Bad input, said before any check runs: exit 3, one line naming the node."""
    monkeypatch.chdir(tmp_path)
    save(_self_reading(), tmp_path / "self.onnx")
    res = cli("debug", "reduce", "self.onnx", "-o", "r.onnx", "--check", "false")
    assert res.code == 3, res.err
    errors = [ln for ln in res.err.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "cycle" in errors[0] and "'selfadd'" in errors[0], res.err
    assert "Iteration" not in res.err and "Traceback" not in res.err
    assert not (tmp_path / "r.onnx").exists()


def test_a_body_name_equal_to_its_nodes_output_is_no_cycle():
    model = _shadowing_if()
    toposort(model.graph)
    assert [n.name for n in model.graph.node] == ["cst", "if", "out"]
    onnx.checker.check_model(model)

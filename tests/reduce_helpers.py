"""Helpers for the `debug reduce` tests: an in-process fake check and extra model builders."""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from modelzoo import make_model, save, vi

HERE = os.path.dirname(os.path.abspath(__file__))
CHECKER = os.path.join(HERE, "checkers", "fail_if_nodes.py")
sys.path.insert(0, os.path.join(HERE, "checkers"))

import fail_if_nodes  # noqa: E402

from toolkit.reduce.verdict import CheckResult  # noqa: E402


class FakeCheck:
    """Runs tests/checkers/fail_if_nodes.py in-process on the iteration artifact."""

    kind = "test"

    def __init__(self, artifact, names, *, any_=False, ort=False, log=None):
        self.artifact = str(artifact)
        self.names = list(names)
        self.extra = (["--any"] if any_ else []) + (["--ort"] if ort else [])
        self.log = str(log) if log else None
        self.calls = 0

    def run(self, tick=None):
        self.calls += 1
        out = io.StringIO()
        argv = [self.artifact, *self.names, *self.extra] + (["--log", self.log] if self.log else [])
        with contextlib.redirect_stdout(out):
            code = fail_if_nodes.main(argv)
        return CheckResult(code, out.getvalue().encode(), b"")

    def close(self):
        pass

    def records(self):
        if not self.log or not os.path.exists(self.log):
            return []
        with open(self.log) as fh:
            return [json.loads(line) for line in fh]


def reduce_model(tmp_path, model, culprits, *, mode=None, any_=False, ort=False, **cfg):
    """Reduce ``model`` with a fake check failing when ``culprits`` are present.

    Returns (outcome, reduced model or None, FakeCheck).
    """
    from toolkit.reduce.verdict import FailureRule
    from toolkit.reduce.session import ReduceConfig, Reducer

    path = str(tmp_path / "model.onnx") if not isinstance(model, str) else model
    if not isinstance(model, str):
        save(model, path)
    artifact = tmp_path / "polygraphy_debug.onnx"
    check = FakeCheck(artifact, culprits, any_=any_, ort=ort, log=tmp_path / "check.log")
    out = str(tmp_path / "reduced.onnx")
    config = ReduceConfig(
        model=path,
        output=out,
        check=["fake-check"],
        mode=mode,
        rule=FailureRule(fail_codes=[1]),
        iter_artifact=str(artifact),
        **cfg,
    )
    outcome = Reducer(config, runner=check).run()
    reduced = onnx.load(out) if os.path.exists(out) else None
    return outcome, reduced, check


def node_names(model):
    return [n.name for n in model.graph.node]


def optional_input():
    """x -> Relu -> Clip(r, '', hi) -> Abs -> y: Clip's min is omitted ('')."""
    hi = numpy_helper.from_array(np.array(0.5, np.float32), "hi")
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("Clip", ["r", "", "hi"], ["c"], name="clip"),
        helper.make_node("Abs", ["c"], ["y"], name="abs"),
    ]
    graph = helper.make_graph(nodes, "optional_input", [vi("x", [1, 4])], [vi("y", [1, 4])], [hi])
    return make_model(graph)


def multi_output():
    """x -> Relu -> Split -> (a, b) both graph outputs; a also -> Neg -> n (output)."""
    split = numpy_helper.from_array(np.array([2, 2], np.int64), "split")
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("Split", ["r", "split"], ["a", "b"], name="split", axis=1),
        helper.make_node("Neg", ["a"], ["n"], name="neg"),
    ]
    graph = helper.make_graph(
        nodes,
        "multi_output",
        [vi("x", [1, 4])],
        [vi("a", [1, 2]), vi("b", [1, 2]), vi("n", [1, 2])],
        [split],
    )
    return make_model(graph)


def wide(n_branches=4, depth=3):
    """x -> Relu 'stem' -> n_branches parallel chains (b{i}_{k}) -> Sum 'sum' -> y."""
    nodes = [helper.make_node("Relu", ["x"], ["s"], name="stem")]
    ends = []
    for b in range(n_branches):
        prev = "s"
        for k in range(depth):
            out = f"b{b}_{k}_out"
            op = ["Sigmoid", "Abs", "Neg", "Tanh"][(b + k) % 4]
            nodes.append(helper.make_node(op, [prev], [out], name=f"b{b}_{k}"))
            prev = out
        ends.append(prev)
    nodes.append(helper.make_node("Sum", ends, ["y"], name="sum"))
    graph = helper.make_graph(nodes, "wide", [vi("x", [1, 4])], [vi("y", [1, 4])])
    return make_model(graph)


def with_loop():
    """x -> Relu -> r; Loop(3) body adds outer r to the carried value -> Abs -> y."""
    body = helper.make_graph(
        [
            helper.make_node("Add", ["acc_in", "r"], ["acc_out"], name="body_add"),
            helper.make_node("Identity", ["cond_in"], ["cond_out"], name="body_cond"),
        ],
        "body",
        [vi("i", [], TensorProto.INT64), vi("cond_in", [], TensorProto.BOOL), vi("acc_in", [1, 4])],
        [vi("cond_out", [], TensorProto.BOOL), vi("acc_out", [1, 4])],
    )
    trip = numpy_helper.from_array(np.array(3, np.int64), "trip")
    cond = numpy_helper.from_array(np.array(True), "cond")
    zero = numpy_helper.from_array(np.zeros((1, 4), np.float32), "zero")
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("Loop", ["trip", "cond", "zero"], ["loop_out"], name="loop", body=body),
        helper.make_node("Abs", ["loop_out"], ["y"], name="abs"),
    ]
    graph = helper.make_graph(nodes, "with_loop", [vi("x", [1, 4])], [vi("y", [1, 4])], [trip, cond, zero])
    return make_model(graph)


def unsorted_chain():
    """A chain whose nodes are stored out of topological order."""
    nodes = [
        helper.make_node("Abs", ["t1"], ["y"], name="last"),
        helper.make_node("Relu", ["x"], ["t0"], name="first"),
        helper.make_node("Neg", ["t0"], ["t1"], name="middle"),
    ]
    graph = helper.make_graph(nodes, "unsorted", [vi("x", [1, 4])], [vi("y", [1, 4])])
    return make_model(graph)

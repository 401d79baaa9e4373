"""One classification of a failing node (toolkit.core.compare.noise.classify): overflow (a value its
storage cannot hold), rounding (within that storage's noise bound, fp16/bf16 named as such),
carried (only its inputs' error) or fault. `run`'s diagnosis and report name the overflowing node
where the error starts, call the rest rounding, and never call a passing node the culprit."""

from __future__ import annotations

import json

import numpy as np
import onnx
from onnx import helper, numpy_helper

from conftest import run_toolkit
from modelzoo import make_model, vi


def _model(path):
    """x -> conv (fp16 rounding) -> add (fp16 rounding) -> bn (x 5e4: past fp16's 65504) ->
    scale (x 1e-5) -> sig: the overflow's inf saturates the Sigmoid."""
    nodes = [
        helper.make_node("Mul", ["x", "w1"], ["a"], name="conv"),
        helper.make_node("Add", ["a", "b1"], ["b"], name="add"),
        helper.make_node("Mul", ["b", "big"], ["c"], name="bn"),
        helper.make_node("Mul", ["c", "small"], ["d"], name="scale"),
        helper.make_node("Sigmoid", ["d"], ["y"], name="sig"),
    ]
    inits = [
        numpy_helper.from_array(np.full((1, 16), 1.37, np.float32), "w1"),
        numpy_helper.from_array(np.full((1, 16), 0.011, np.float32), "b1"),
        numpy_helper.from_array(np.array(5e4, np.float32), "big"),
        numpy_helper.from_array(np.array(1e-5, np.float32), "small"),
    ]
    onnx.save(make_model(helper.make_graph(nodes, "g", [vi("x", [1, 16])], [vi("y", [1, 16])], inits)), path)
    return path


def test_run_fp16_names_the_overflow_and_calls_the_rest_rounding(tmp_path):
    model = _model(str(tmp_path / "m.onnx"))
    res = run_toolkit("run", model, "--onnxrt", "--fp16", "--onnx-outputs", "mark", "all", "--val-range", "[1,2]",
                      "--save-report", str(tmp_path / "r.json"), cwd=tmp_path)
    assert res.code == 1, res.err
    assert "Error starts at: bn [Op: Mul] (overflow: a value past fp16's range (65504)); 2 other failing node(s) are " \
           "fp16 rounding" in res.err
    assert "conv [Op: Mul] | amplification" in res.err and "FAILED (fp16 rounding)" in res.err
    assert "infx" not in res.err
    doc = json.loads((tmp_path / "r.json").read_text())
    diag = doc["comparisons"][0] if isinstance(doc["comparisons"], list) else doc["comparisons"]
    diag = diag.get("diagnosis", diag)
    assert diag["first_fault"]["node"] == "bn" and diag["first_fault"]["kind"] == "overflow"
    kinds = {n["node"]: n["kind"] for n in diag["ranked_nodes"]}
    assert kinds == {"bn": "overflow", "conv": "rounding", "add": "rounding", "scale": "carried", "sig": "carried"}


def test_the_culprit_is_never_a_passing_node():
    from toolkit.run.diagnosis import Diagnosis, NodeScore

    ok = NodeScore("sig", "Sigmoid", 5, 5, ["y"], 1e-3, 1.0, 1e3, True, "y", kind="ok")
    bad = NodeScore("bn", "Mul", 3, 3, ["c"], 1e-7, 1e-2, 1e5, False, "c", kind="fault")
    assert Diagnosis("a", "b", [], None, [ok, bad], []).culprit.node == "bn"
    rounding = NodeScore("conv", "Mul", 1, 1, ["a"], 0.0, 3e-4, 2.5e3, False, "a", kind="rounding")
    assert Diagnosis("a", "b", [], None, [ok, rounding], []).culprit is None

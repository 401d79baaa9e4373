"""`debug precision` keeps no node in fp32 for rounding alone (the noise model, toolkit.core.compare.noise)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from modelzoo import make_model, save
from toolkit.core.compare.tolerances import Tolerances
from toolkit.precision.search import PrecisionConfig, PrecisionSearch

N = 256


def overflow_then_matmul():
    """x (16, 256) -> Mul 1e5 (past fp16's range) -> Mul 1e-5 -> MatMul (256 x 256): the MatMul's
    fp16 rounding alone puts outputs near 0 off by more than atol = rtol = 1e-2."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((N, N)).astype(np.float32)
    inits = [
        numpy_helper.from_array(np.array(1e5, np.float32), "big"),
        numpy_helper.from_array(np.array(1e-5, np.float32), "small"),
        numpy_helper.from_array(w, "w"),
    ]
    nodes = [
        helper.make_node("Mul", ["x", "big"], ["up"], name="up"),
        helper.make_node("Mul", ["up", "small"], ["down"], name="down"),
        helper.make_node("MatMul", ["down", "w"], ["y"], name="matmul"),
    ]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [16, N])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [16, N])], inits,
    )
    return make_model(graph)


@pytest.fixture
def path(tmp_path):
    return save(overflow_then_matmul(), tmp_path / "m.onnx")


def test_rounding_alone_keeps_no_node_and_names_the_tolerance(path):
    out = PrecisionSearch(PrecisionConfig(model=path, val_range=["[-2,2]"])).run()
    assert out.status == "rounding"
    # the overflow is kept in fp32 ("up" reads a constant fp16 cannot hold, and "down" its 2e5 output:
    # the conversion keeps both itself), the MatMul's rounding is not
    assert "matmul" not in out.kept and {"up", "down"} <= set(out.auto_kept)
    assert out.passing_atol is not None and out.passing_atol > 1e-2
    assert out.checks <= out.cost_bound
    # at the tolerance it names, the same search passes with the same nodes and no word of rounding
    again = PrecisionSearch(PrecisionConfig(model=path, val_range=["[-2,2]"], tolerances=Tolerances.of(atol=out.passing_atol, rtol=1e-2))).run()
    assert again.status == "none-needed" and again.kept == out.kept


def test_cli_says_it_is_rounding(cli, path):
    """What fails by rounding alone fails: the tolerances given are the verdict (exit 1), with the
    label and the tolerance that would pass."""
    res = cli("debug", "precision", path, "--val-range", "[-2,2]", "--json")
    assert res.code == 1, res.err
    doc = json.loads(res.out)
    assert doc["status"] == "rounding" and "matmul" not in doc["keep_fp32"] and doc["exit_code"] == 1
    assert "FAILED at the tolerances given" in res.err and "is fp16 rounding, within the noise bound" in res.err
    assert f"--atol {doc['passing_atol']:g}" in res.err
    assert "| pass |" not in res.err and "| FAIL |" in res.err and "(fp16 rounding)" in res.err


def test_tight_tolerances_are_the_verdict(cli, path):
    """--atol 1e-3 --rtol 1e-3: a check off by a few 1e-3 (within fp16's rounding bound) is a
    failure, never shown as a pass, and the run does not exit 0."""
    res = cli("debug", "precision", path, "--val-range", "[-0.5,0.5]", "--atol", "1e-3", "--rtol", "1e-3", "--json")
    doc = json.loads(res.out)
    checks = [line for line in res.err.splitlines() if line.startswith("Check ")]
    assert checks and all("| pass |" not in line for line in checks), res.err
    assert doc["status"] == "rounding" and res.code == 1, res.err
    assert doc["passing_atol"] > 1e-3


def test_the_log_says_when_the_cost_bound_is_not_kept(capsys):
    from toolkit.cli.precision import _summary
    from toolkit.precision.search import PrecisionOutcome

    out = PrecisionOutcome("found", kept=["a", "b"], candidates=16, checks=30)
    assert out.cost_bound == 4 + 2 * 2
    _summary(out, PrecisionConfig(model="m.onnx"), False)
    err = capsys.readouterr().err
    assert "30 checks, more than the search's bound of 8" in err
    _summary(PrecisionOutcome("found", kept=["a"], candidates=16, checks=6), PrecisionConfig(model="m.onnx"), False)
    assert "bound" not in capsys.readouterr().err

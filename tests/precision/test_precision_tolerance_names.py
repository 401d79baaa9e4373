"""A per-output tolerance must name an output the command compares: a name no output has is a usage
error (exit 2) naming the outputs there are, before any work -- never a silently changed verdict."""

from __future__ import annotations

import numpy as np
import pytest

import fp16_models as fm
import modelzoo as mz
import qdq_models as qm
from toolkit.core.io.datafiles import save_inputs

BAD = [("--atol", "1", "Y:1e-6"), ("--rtol", "nosuch:0.5"), ("--check-error-stat", "nosuch:mean")]


@pytest.mark.parametrize("option", BAD, ids=lambda o: o[0])
def test_debug_precision_qdq_refuses_a_tolerance_for_no_output(cli, tmp_path, option):
    model = mz.save(qm.two_or_one(), tmp_path / "two.onnx")
    feeds = tmp_path / "in.json"
    save_inputs(str(feeds), [{"x": np.full((1, 4), 0.45, np.float32)}])
    r = cli("debug", "precision", model, "--load-inputs", feeds, *option)
    assert r.code == 2, r.err
    assert f"{option[0]} names '{option[-1].split(':')[0]}', which no output has" in r.err
    assert "the outputs are: y" in r.err and "Check 1" not in r.err


@pytest.mark.parametrize("option", BAD, ids=lambda o: o[0])
def test_debug_precision_fp16_refuses_a_tolerance_for_no_output(cli, tmp_path, option):
    model = mz.save(fm.overflow_before_int_cast(), tmp_path / "m.onnx")
    r = cli("debug", "precision", model, "--val-range", "[60,100]", *option)
    assert r.code == 2, r.err
    assert "which no output has" in r.err and "Check 1" not in r.err


def test_debug_reduce_compare_refuses_a_tolerance_for_no_tensor(cli, tmp_path):
    model = mz.save(qm.two_or_one(), tmp_path / "two.onnx")
    r = cli("debug", "reduce", model, "-o", tmp_path / "r.onnx", "--compare", "onnxrt", "onnxrt:fp16",
            "--atol", "1", "nosuch:1e-6")
    assert r.code == 2, r.err
    assert "--atol names 'nosuch', which no tensor of the model has" in r.err and "Reference:" not in r.err


@pytest.mark.parametrize("given,global_atol,global_rtol", [
    ((["y1:1"], [], []), 1e-2, 1e-2),  # a value for one output leaves the others at the command's default
    (([], ["y1:0.5"], []), 1e-2, 1e-2),
    ((["0.3", "y1:1"], ["0"], []), 0.3, 0.0),
    ((["y1:1", "0.3"], [], []), 0.3, 1e-2),
])
def test_a_tolerance_for_some_outputs_keeps_the_default_for_the_others(given, global_atol, global_rtol):
    from toolkit.core.compare.tolerances import ToleranceOptions, parse_atol, parse_rtol, parse_stats
    from toolkit.precision.config import search_tolerances

    atol, rtol, stats = given
    tol = search_tolerances(ToleranceOptions(parse_atol(atol), parse_rtol(rtol), parse_stats(stats)))
    assert (tol.atol, tol.rtol) == (global_atol, global_rtol)

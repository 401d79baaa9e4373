"""`debug reduce` you can trust: verdict classes (broken checks), evidence, progress, --json."""

from __future__ import annotations

import importlib.util
import json
import sys
import textwrap

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import modelzoo
from conftest import run_toolkit

from toolkit.reduce.verdict import BROKEN, FAIL, PASS, TIMEOUT, CheckResult, FailureRule, error_line
from toolkit.reduce.evidence import (
    Evidence,
    TensorEvidence,
    from_check_output,
    noise_warning,
    storage_rounding_warning,
)

HAS_TRT = importlib.util.find_spec("tensorrt") is not None


@pytest.fixture
def chain6(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    modelzoo.save(modelzoo.chain(6), tmp_path / "model.onnx")
    return tmp_path


def _nothing_written(folder, *names):
    for name in ("out.onnx", "polygraphy_debug.onnx", "polygraphy_debug_replay.json", *names):
        assert not (folder / name).exists(), name


# ---------------------------------------------------------------------- classification


def _res(code, out=b"", err=b"", **kw):
    return CheckResult(code, out, err, **kw)


def test_classify_toolkit_codes_are_broken_only_for_toolkit_checks():
    rule = FailureRule()
    for code in (2, 3, 4):
        assert rule.classify(_res(code), toolkit_check=True) == BROKEN
        assert rule.classify(_res(code), toolkit_check=False) == FAIL
    assert rule.classify(_res(1), toolkit_check=True) == FAIL
    assert rule.classify(_res(0), toolkit_check=True) == PASS
    for code in (126, 127):
        assert rule.classify(_res(code)) == BROKEN
    assert rule.classify(_res(None, timed_out=True)) == TIMEOUT
    assert rule.classify(_res(None, signal=9)) == FAIL


def test_classify_named_codes_keep_their_meaning():
    assert FailureRule(fail_codes=[3]).classify(_res(3), toolkit_check=True) == FAIL
    assert FailureRule(ignore_codes=[4]).classify(_res(4), toolkit_check=True) == PASS
    # a matching pattern says the output is the failure the user chases
    assert FailureRule(fail_regex=["cannot parse"]).classify(_res(3, err=b"error: cannot parse"), True) == FAIL
    assert FailureRule(fail_regex=["nomatch"]).classify(_res(3, err=b"error: x"), True) == BROKEN
    # exit 3 about the model under check (a parser rejecting it) is the model failing
    parse = _res(3, err=b"error: polygraphy_debug.onnx: TensorRT cannot parse the model: node 0 (Mul)\n")
    assert FailureRule().classify(parse, True, "polygraphy_debug.onnx") == FAIL
    data = _res(3, err=b"error: inputs.json: iteration 0 has no tensor for model input(s) t4\n")
    assert FailureRule().classify(data, True, "polygraphy_debug.onnx") == BROKEN


def test_classify_argument_parsing_failures():
    tb = (
        b"Traceback (most recent call last):\n"
        b'  File "/x/check.py", line 9, in <module>\n'
        b'  File "/usr/lib/python3.11/argparse.py", line 1890, in parse_args\n'
        b"RuntimeError: bad option\n"
    )
    assert FailureRule().classify(_res(1, err=tb)) == BROKEN
    usage = b"usage: check.py [-h] model\ncheck.py: error: the following arguments are required: model\n"
    assert FailureRule().classify(_res(2, err=usage)) == BROKEN
    # a traceback of the model's own failure is a failure, not a broken check
    crash = b'Traceback (most recent call last):\n  File "/x/run.py", line 3\nValueError: NaN\n'
    assert FailureRule().classify(_res(1, err=crash)) == FAIL
    assert error_line(_res(3, err=b"onnxrt | starting\nerror: missing.onnx: no such file\n")) == (
        "missing.onnx: no such file"
    )


# ---------------------------------------------------------------------- broken on the full model


_ARGPARSE_TRACEBACK = """
import argparse

class Boom(argparse.Action):
    def __call__(self, parser, namespace, values, option_string=None):
        raise RuntimeError("cannot parse " + str(values))

p = argparse.ArgumentParser()
p.add_argument("model")
p.add_argument("--mode", action=Boom)
p.parse_args()
"""


def _broken_cases():
    cases = [
        pytest.param(["toolkit", "run", "polygraphy_debug.onnx"], 3, "nothing to run", id="no-runner-flag"),
        pytest.param(["toolkit", "run", "missing.onnx", "--onnxrt"], 3, "missing.onnx", id="missing-model"),
        pytest.param(["toolkit", "run", "polygraphy_debug.onnx", "--no-such-flag"], 3, "No such option",
                     id="usage-error"),
        pytest.param(["no-such-program-xyz", "polygraphy_debug.onnx"], 4, "not found", id="not-found"),
        pytest.param([sys.executable, "check.py", "polygraphy_debug.onnx", "--mode", "x"], 3, "cannot parse x",
                     id="argparse-traceback"),
        pytest.param([sys.executable, "check.py"], 3, "required", id="argparse-usage"),
    ]
    if not HAS_TRT:
        cases.append(pytest.param(["toolkit", "run", "polygraphy_debug.onnx", "--trt"], 4, "TensorRT",
                                  id="no-tensorrt"))
    return cases


@pytest.mark.parametrize("check, code, says", _broken_cases())
@pytest.mark.parametrize("warm", [True, False], ids=["warm", "subprocess"])
def test_broken_check_on_full_model_stops_at_once(chain6, cli, check, code, says, warm, monkeypatch):
    (chain6 / "check.py").write_text(textwrap.dedent(_ARGPARSE_TRACEBACK))
    if not warm:
        monkeypatch.setenv("TOOLKIT_NO_WARM_WORKER", "1")
    res = cli("debug", "reduce", "model.onnx", "-o", "out.onnx", "--min-good", "good.onnx", "--check", *check)
    assert res.code == code, res.err
    errors = [ln for ln in res.err.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith("error: the check command itself fails: "), res.err
    assert says in errors[0]
    assert "Traceback" not in res.err.replace(says, "")
    _nothing_written(chain6, "good.onnx")


def test_named_exit_code_is_not_broken(chain6):
    res = run_toolkit("debug", "reduce", "model.onnx", "-o", "out.onnx", "--fail-code", "3",
                      "--check", "toolkit", "run", "missing.onnx", "--onnxrt", cwd=chain6)
    assert res.code == 0, res.err  # every check "fails" with 3, as asked
    assert (chain6 / "out.onnx").exists()


# ---------------------------------------------------------------------- broken mid-run


def _golden(folder, model="model.onnx", perturb=1.0, mark_all=False):
    """inputs.json and a golden outputs file with every value moved by ``perturb``."""
    from toolkit.core.io.datafiles import clear_cache, load_outputs, save_outputs

    extra = ["--onnx-outputs", "mark", "all"] if mark_all else []
    res = run_toolkit("run", model, "--onnxrt", "--save-inputs", "inputs.json", "--save-outputs", "golden.json",
                      *extra, cwd=folder)
    assert res.code == 0, res.err
    results = load_outputs(str(folder / "golden.json"))
    for _, iters in results.runs:
        for it in iters:
            for name in list(it.outputs):
                it.outputs[name] = it.outputs[name] + np.float32(perturb)
    save_outputs(str(folder / "bad.json"), results)
    clear_cache()  # the loader caches what it read, and the arrays above were replaced in place


def test_check_broken_mid_run_counts_as_pass_and_is_reported(chain6):
    # The check compares only the model output 'y' and feeds only 'x': it works on the full
    # model (and fails there), but breaks (exit 3) on subgraphs without 'y' or reading a cut.
    # Every check after the full model breaks, so the reduce cannot judge the model: after 6
    # broken checks it stops (exit 3) instead of reporting 6 -> 6 nodes as "reduced".
    _golden(chain6)
    res = run_toolkit("debug", "reduce", "model.onnx", "-o", "out.onnx", "--min-good", "good.onnx", "--json",
                      "--iter-info", "info.json", "--no-remove-intermediate",
                      "--check", "toolkit", "run", "polygraphy_debug.onnx", "--onnxrt",
                      "--load-inputs", "inputs.json", "--load-outputs", "bad.json", cwd=chain6)
    assert res.code == 3, res.err
    assert "Iteration 1 | 6 nodes | FAIL | full model" in res.err
    broken_lines = [ln for ln in res.err.splitlines() if ln.startswith("Iteration ") and "| BROKEN |" in ln]
    assert broken_lines and all("exit code 3:" in ln for ln in broken_lines)
    assert "counted as a pass" in res.err
    assert "the check could not judge 6 of the 6 subgraphs checked after the full model" in res.err
    assert not (chain6 / "out.onnx").exists() and not (chain6 / "good.onnx").exists()
    # the replay and --iter-info record each check's verdict class and exit code
    replay = json.loads((chain6 / "polygraphy_debug_replay.json").read_text())
    kinds = [(e["verdict"], e["code"]) for e in replay["entries"]]
    assert kinds[0] == ("fail", 1) and ("broken", 3) in kinds
    info = json.loads((chain6 / "info.json").read_text())
    assert info["verdict"] == "broken" and info["exit_code"] == 3


# ---------------------------------------------------------------------- evidence and --json


def test_evidence_parsed_from_run_output():
    text = (
        "    FAILED | y | max abs 2.9981e-05, mean abs 2.9e-05, max rel 4.8657e-05, mean rel 4.5e-05 | would pass "
        "with atol 2.9981e-05 or rtol 4.8657e-05 (elemwise) | tolerance atol 1e-05, rtol 1e-05 | 4 of 4 element(s)\n"
        "    PASSED | r | max abs 0, mean abs 0, max rel 0, mean rel 0 | would pass with atol 0 or rtol 0 "
        "(elemwise) | tolerance atol 1e-05, rtol 1e-05\n"
    )
    ev = from_check_output(text)
    assert [t.name for t in ev.tensors] == ["y", "r"]
    assert ev.worst.name == "y" and ev.worst.max_abs == pytest.approx(2.9981e-05)
    assert ev.worst.needed_rtol == pytest.approx(4.8657e-05) and ev.worst.atol == 1e-05
    assert from_check_output("exit 1, no comparison") is None


def test_evidence_from_comparison_objects():
    class Cmp:
        name, passed, max_abs, max_rel = "t", False, 0.5, 0.25
        required_atol, required_rtol, atol, rtol, stat = 0.5, 0.25, 1e-3, 1e-3, "elemwise"

    ev = Evidence([TensorEvidence.of(Cmp())], source="compare")
    assert ev.to_json()["worst"]["needed_atol"] == 0.5 and ev.to_json()["source"] == "compare"
    inf = Evidence([TensorEvidence(name="t", passed=False, max_abs=1.0, max_rel=float("inf"), atol=1e-5, rtol=1e-5,
                                    stat="elemwise", needed_atol=1.0, needed_rtol=float("inf"))])
    assert inf.to_json()["worst"]["max_rel"] is None
    json.dumps(inf.to_json(), allow_nan=False)


def test_noise_warning_rules():
    def ev(max_abs, max_rel):
        return Evidence([TensorEvidence(name="t", passed=False, max_abs=max_abs, max_rel=max_rel, atol=1e-5, rtol=1e-5, stat="elemwise", needed_atol=max_abs, needed_rtol=max_rel)])

    assert "float rounding" in noise_warning(ev(3e-5, 3e-5), ev(4.2e-5, 3.1e-5))
    # far less than the full model's error, but 1000x the tolerance: a fault, never noise on that ground alone
    assert noise_warning(ev(2.0, 0.5), ev(0.01, 0.002)) is None
    assert "far less than the full model" in noise_warning(ev(2.0, 0.5), ev(1.9e-5, 0.04))
    assert "within 10x of the tolerance" in noise_warning(ev(0.08, 1.6), ev(1.9e-5, 0.04))
    assert "--atol 3e-05" in noise_warning(None, ev(1.9e-5, 0.04))
    assert noise_warning(ev(2.0, 0.5), ev(1.5, 0.4)) is None
    # near a tolerance the user raised (atol 1e-3: PP-OCR rec in fp16 failing by 1.5e-3) is no kernel noise
    raised = Evidence([TensorEvidence(name="t", passed=False, max_abs=1.48e-3, max_rel=5.0, atol=1e-3, rtol=4e-3, stat="elemwise", needed_atol=1.48e-3, needed_rtol=5.0)])
    assert noise_warning(ev(6.5e-3, 1.0), raised) is None
    assert noise_warning(None, None) is None
    # an overflow in both (fp16 on resnet50: inf and inf) is the fault, not noise
    inf = float("inf")
    assert noise_warning(ev(inf, inf), ev(inf, inf)) is None
    assert noise_warning(ev(inf, inf), ev(float("nan"), float("nan"))) is None
    text = noise_warning(None, ev(4.2e-5, 3.1e-5))
    assert "--atol" in text and "mark all" in text and "--ort-optimization disable" in text


def test_storage_rounding_warning():
    def ev(max_abs, max_rel):
        return Evidence([TensorEvidence(name="t", passed=False, max_abs=max_abs, max_rel=max_rel, atol=1e-5, rtol=1e-5, stat="elemwise", needed_atol=max_abs, needed_rtol=max_rel)])

    # silero-vad's Pad: 0.000243 (max rel 0.000467) is one fp16 rounding of its input
    text = storage_rounding_warning(ev(2.43e-4, 4.67e-4), "fp16")
    assert "no more than fp16 storage rounds" in text and "--rtol 0.004" in text
    assert storage_rounding_warning(ev(0.0173, 0.511), "fp16") is None  # a real amplification
    assert storage_rounding_warning(ev(2.43e-4, 4.67e-4), None) is None  # not a reduced-precision runner
    assert storage_rounding_warning(ev(1e-3, 6e-3), "bf16") is not None  # bf16 rounds 8x coarser
    assert storage_rounding_warning(ev(float("inf"), float("inf")), "fp16") is None


def test_compare_fp16_at_default_tolerances_warns_of_fp16_rounding(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    modelzoo.save(modelzoo.chain(4, ops=["Relu", "Abs"]), tmp_path / "m.onnx")
    res = cli("debug", "reduce", "m.onnx", "-o", "r.onnx", "--compare", "onnxrt", "onnxrt:fp16")
    assert res.code == 0, res.err
    assert "no more than fp16 storage rounds" in res.err


def test_storage_rounding_is_measured_against_the_tensors_scale(cli, tmp_path, monkeypatch):
    """A MatMul whose outputs cross 0 (YOLOv8's first Conv on OpenVINO's bf16, a detector head's
    Conv in fp16): some element near 0 has a max rel of 1e2 or more from rounding alone, so the
    elementwise measure called it no rounding, and the result (the first node) came without the
    warning that every node fails alone at these tolerances. Against the tensor's largest value
    the error is fp16 rounding, and the warning says so."""
    monkeypatch.chdir(tmp_path)
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.normal(0, 1, (64, 64)).astype(np.float32), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"), helper.make_node("Relu", ["m"], ["r"]),
             helper.make_node("Abs", ["r"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [16, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [16, 64])], [w])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), "m.onnx")
    res = cli("debug", "reduce", "m.onnx", "-o", "r.onnx", "--compare", "onnxrt", "onnxrt:fp16")
    assert res.code == 0, res.err
    assert "Reduced model: largest error" in res.err and "on 'm'" in res.err, res.err
    assert "no more than fp16 storage rounds" in res.err and "of the tensor's largest value" in res.err, res.err


def test_json_summary_with_evidence(chain6):
    _golden(chain6, perturb=0.5, mark_all=True)
    res = run_toolkit("data", "to-input", "inputs.json", "golden.json", "-o", "layerwise.json", cwd=chain6)
    assert res.code == 0, res.err
    # only the tensors after node 3 are off: perturb the golden values of t3, t4, y
    from toolkit.core.io.datafiles import clear_cache, load_outputs, save_outputs

    good = load_outputs(str(chain6 / "golden.json"))
    for _, iters in good.runs:
        for it in iters:
            for name in ("t3", "t4", "y"):
                it.outputs[name] = it.outputs[name] + np.float32(0.5)
    save_outputs(str(chain6 / "golden_bad.json"), good)
    clear_cache()
    res = run_toolkit("debug", "reduce", "model.onnx", "-o", "out.onnx", "--json",
                      "--check", "toolkit", "run", "polygraphy_debug.onnx", "--onnxrt",
                      "--load-inputs", "layerwise.json", "--load-outputs", "golden_bad.json", cwd=chain6)
    assert res.code == 0, res.err
    doc = json.loads(res.out)
    assert doc["status"] == "reduced" and doc["result_nodes"] == ["n3_neg [Op: Neg]"]
    assert doc["checks"] >= 2 and sum(doc["phases"].values()) == doc["checks"]
    assert doc["phases"]["full model"] == 1
    full, reduced = doc["evidence"]["full_model"], doc["evidence"]["reduced"]
    assert full["worst"]["max_abs"] == pytest.approx(0.5, rel=1e-3) and full["worst"]["atol"] == 1e-05
    assert reduced["worst"]["name"] == "t3" and reduced["worst"]["needed_atol"] == pytest.approx(0.5, rel=1e-3)
    assert doc["evidence"]["noise_warning"] is None
    assert doc["artifacts"]["output"] == "out.onnx" and doc["artifacts"]["replay"] == "polygraphy_debug_replay.json"
    assert "Full model: largest error 0.5" in res.err and "Reduced model: largest error 0.5" in res.err
    # progress: phase, nodes tried, verdict, checks left; the data files announced with their size
    assert "Loading layerwise.json (" in res.err and "once for all checks" in res.err
    lines = [ln for ln in res.err.splitlines() if ln.startswith("Iteration ")]
    assert any("| bisect (last node) | nodes 0.." in ln and "checks left" in ln for ln in lines)
    # failing output is shown once (the first failure), not for every failing check
    assert res.err.count("---- check stderr") == 1


def test_show_output_shows_every_check(chain6):
    res = run_toolkit("debug", "reduce", "model.onnx", "-o", "out.onnx", "--show-output",
                      "--fail-regex", "n3_", "--check", "toolkit", "inspect", "model", "polygraphy_debug.onnx",
                      "--mode=basic", cwd=chain6)
    assert res.code == 0, res.err
    checks = len([ln for ln in res.err.splitlines() if ln.startswith("Iteration ")])
    assert res.err.count("---- check stdout") == checks > 1


def test_timeouts_are_counted(chain6):
    res = run_toolkit("debug", "reduce", "model.onnx", "-o", "out.onnx", "--json", "--check-timeout", "0.5",
                      "--check", "sh", "-c", "sleep 5", cwd=chain6)
    assert res.code == 0, res.err
    doc = json.loads(res.out)
    assert doc["timeouts"] == doc["checks"] >= 1
    assert "| TIMEOUT |" in res.err and "timed out (--check-timeout) and counted as a failure" in res.err


@pytest.mark.skipif(HAS_TRT, reason="needs a machine without TensorRT")
def test_compare_with_a_missing_backend_stops_with_exit_4(cli, tmp_path, monkeypatch):
    # the built-in check runs in the warm worker: a missing TensorRT must end the check as
    # `toolkit run --trt` ends (exit 4), not as a crash counted as a failure on every subgraph
    monkeypatch.chdir(tmp_path)
    modelzoo.save(modelzoo.chain(6), tmp_path / "m.onnx")
    res = cli("debug", "reduce", "m.onnx", "-o", "r.onnx", "--compare", "onnxrt", "trt")
    assert res.code == 4, res.err
    # refused before the model is loaded or the reference computed, in one line
    assert res.err.startswith("error: TensorRT is not installed"), res.err
    assert not (tmp_path / "polygraphy_debug.onnx").exists()
    assert "Traceback" not in res.err and not (tmp_path / "r.onnx").exists()


def test_compare_on_a_dynamic_model_names_its_own_shape_option(cli, tmp_path, monkeypatch):
    # the reference run's note about a guessed dim must name debug reduce's option, not run's
    monkeypatch.chdir(tmp_path)
    modelzoo.save(modelzoo.chain(4, shape=("batch", 4)), tmp_path / "m.onnx")
    res = cli("debug", "reduce", "m.onnx", "-o", "r.onnx", "--compare", "onnxrt", "onnxrt")
    assert "(set it with --model-input-shapes x:[...])" in res.err, res.err
    assert "--input-shapes x" not in res.err.replace("--model-input-shapes", "")

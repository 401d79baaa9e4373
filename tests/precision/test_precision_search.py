"""`toolkit debug precision`: the minimal set of nodes to keep in fp32."""

import json
import math
import re

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto

import fp16_models as fm
import modelzoo as mz
from toolkit.core.compare.tolerances import Tolerances
from toolkit.convert import fp16
from toolkit.precision.search import PrecisionConfig, PrecisionSearch, Reporter


@pytest.fixture
def ln_path(tmp_path):
    return mz.save(fm.layernorm_overflow(), tmp_path / "ln.onnx")


def ort_run(model, feed):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feed)[0]


def test_finds_exactly_the_overflowing_nodes_within_the_check_bound(ln_path, tmp_path):
    out = tmp_path / "mixed.onnx"
    outcome = PrecisionSearch(PrecisionConfig(ln_path, output=str(out))).run()
    assert outcome.status == "found"
    assert outcome.kept == fm.LN_MUST_KEEP
    assert outcome.one_minimal
    # checks <= a plain bisect over the nodes + 2 x the result size
    n = outcome.candidates
    assert n == 11
    assert outcome.checks <= math.ceil(math.log2(n)) + 2 * len(outcome.kept)
    # the mixed model: those two nodes fp32, the rest fp16, and it matches fp32
    mixed = onnx.load(str(out))
    inits = {t.name: t.data_type for t in mixed.graph.initializer}
    assert inits["W1"] == TensorProto.FLOAT16
    feed = fm.ln_input()
    ref = ort_run(fm.layernorm_overflow(), feed)
    np.testing.assert_allclose(ort_run(mixed, feed), ref, atol=1e-2, rtol=1e-2)
    # and its emulation passes where the all-fp16 one fails
    model = fm.layernorm_overflow()
    assert np.abs(ort_run(fp16.emulate_fp16(model, outcome.kept), feed) - ref).max() < 1e-2
    assert np.abs(ort_run(fp16.emulate_fp16(model), feed) - ref).max() > 0.5


@pytest.mark.parametrize("mode", ["bisect", "linear"])
def test_modes(ln_path, mode):
    outcome = PrecisionSearch(PrecisionConfig(ln_path, mode=mode)).run()
    assert outcome.kept == fm.LN_MUST_KEEP


def test_nothing_needed(tmp_path):
    ok = mz.save(fm.layernorm_overflow(scale=1.0), tmp_path / "small.onnx")
    outcome = PrecisionSearch(PrecisionConfig(ok)).run()
    assert outcome.status == "none-needed" and outcome.kept == [] and outcome.checks == 1


def test_cli_names_on_stdout_json_and_replay(cli, ln_path, tmp_path):
    out = tmp_path / "mixed.onnx"
    rep = tmp_path / "replay.json"
    r = cli("debug", "precision", ln_path, "-o", out, "--save-debug-replay", rep)
    assert r.code == 0, r.err
    assert r.out.split() == fm.LN_MUST_KEEP
    assert "Check 1 | 0 of 11 node(s) in fp32 | FAIL" in r.err
    assert "Keep 2 of 11 node(s) in fp32" in r.err
    # the counts say which checks ran ("4 check(s), 4 answered from memory" read as none run)
    assert re.search(r"\(\d+ check\(s\) run, \d+ more answered from memory, ", r.err), r.err
    doc = json.loads(rep.read_text())
    assert doc["tool"] == "toolkit debug precision"
    n_checks = len(doc["entries"])
    # replay: every verdict comes from the file, no model is run again
    r = cli("debug", "precision", ln_path, "--load-debug-replay", rep, "--json")
    assert r.code == 0, r.err
    info = json.loads(r.out)
    assert info["keep_fp32"] == fm.LN_MUST_KEEP and info["checks"] == 0 and info["remembered"] >= n_checks
    assert info["status"] == "found" and info["one_minimal"] is True
    # a replay of another model is refused
    other = mz.save(fm.layernorm_overflow(seed=5), tmp_path / "other.onnx")
    other_model = onnx.load(other)
    other_model.graph.node[3].name = "renamed"
    mz.save(other_model, tmp_path / "other.onnx")
    r = cli("debug", "precision", tmp_path / "other.onnx", "--load-debug-replay", rep)
    assert r.code == 3 and "different model" in r.err


def test_cli_user_kept_and_errors(cli, ln_path, tmp_path):
    r = cli("debug", "precision", ln_path, "--keep-fp32", "square", "--json")
    assert r.code == 0, r.err
    info = json.loads(r.out)
    assert info["keep_fp32"] == ["variance"] and info["also_fp32"] == {"square": "--keep-fp32"}
    assert cli("debug", "precision", ln_path, "--compare", "onnxrt").code == 2
    assert cli("debug", "precision", ln_path, "--compare", "onnxrt", "nope:fp16").code == 2
    r = cli("debug", "precision", ln_path, "--compare", "onnxrt", "onnxrt")
    assert r.code == 2 and "reduced precision" in r.err
    assert cli("debug", "precision", ln_path, "--mode", "weird").code == 2
    assert cli("debug", "precision", ln_path, "-o", ln_path).code == 2
    r = cli("debug", "precision", ln_path, "--keep-fp32", "nope")
    assert r.code == 3 and "nope" in r.err


def test_cli_fails_in_fp32_is_exit_1(cli, ln_path, tmp_path):
    """Reference outputs that no fp32 run reproduces (saved, then perturbed): exit 1, with the reason."""
    from toolkit.core.io.datafiles import IterationResult, RunResults, save_inputs, save_outputs

    feed = fm.ln_input()
    ref = ort_run(fm.layernorm_overflow(), feed)
    ins, outs = tmp_path / "in.json", tmp_path / "golden.json"
    save_inputs(str(ins), [feed])
    save_outputs(str(outs), RunResults([("golden", [IterationResult({"y": ref + 0.5})])]))
    args = ("debug", "precision", ln_path, "--load-inputs", ins, "--load-outputs", outs)
    r = cli(*args)
    assert r.code == 1 and "fails even with every node in fp32" in r.err
    # the true golden outputs: found as with the reference runner
    save_outputs(str(outs), RunResults([("golden", [IterationResult({"y": ref})])]))
    r = cli(*args)
    assert r.code == 0 and r.out.split() == fm.LN_MUST_KEEP


@pytest.mark.parametrize("mode", [None, "bisect"])
def test_a_reference_no_fp32_run_matches_stops_after_the_all_fp32_check(ln_path, tmp_path, mode):
    # before a search of many checks, every node in fp32 is checked once: it fails, so does every search
    from toolkit.core.io.datafiles import IterationResult, RunResults, save_inputs, save_outputs

    feed = fm.ln_input()
    ins, outs = tmp_path / "in.json", tmp_path / "golden.json"
    save_inputs(str(ins), [feed])
    save_outputs(str(outs), RunResults([("golden", [IterationResult({"y": ort_run(fm.layernorm_overflow(), feed) + 0.5})])]))
    config = PrecisionConfig(ln_path, load_inputs=[str(ins)], load_outputs=str(outs), mode=mode)
    search = PrecisionSearch(config)
    outcome = search.run()
    assert outcome.status == "fails-in-fp32"
    assert outcome.checks <= 2 + len(fm.LN_MUST_KEEP)  # all fp16, the guided overflow steps, all fp32
    assert search.checks[-1].kept == outcome.candidates


def test_a_model_with_constant_weights_past_fp16_is_found(tmp_path):
    # the conversion keeps both Muls itself ("down" reads x * 1e5, which "up" passes on); the search is
    # left the Relu after them
    model = fm.constant_weights_past_fp16()
    model.graph.node.append(onnx.helper.make_node("Relu", ["y"], ["r"], name="relu"))
    model.graph.output[0].name = "r"
    path = mz.save(model, tmp_path / "c.onnx")
    outcome = PrecisionSearch(PrecisionConfig(path, tolerances=Tolerances.of(atol=1e-3, rtol=1e-3))).run()
    assert {"up", "down"} <= set(outcome.auto_kept) and outcome.status == "none-needed", outcome


def test_interrupt_writes_best_so_far(ln_path, tmp_path):
    class Stop(Reporter):
        def __init__(self):
            self.seen = []

        def check(self, check):
            self.seen.append(check)
            if len(self.seen) == 3:  # after the first passing set: {square, variance}
                raise KeyboardInterrupt

    out = tmp_path / "mixed.onnx"
    rep = Stop()
    outcome = PrecisionSearch(PrecisionConfig(ln_path, output=str(out)), rep).run()
    assert outcome.status == "interrupted"
    assert rep.seen[2].passed and outcome.kept == fm.LN_MUST_KEEP
    assert out.exists()


def test_broken_checks_count_as_failing_and_are_reported(ln_path, monkeypatch):
    from toolkit.core.errors import InputError

    search = PrecisionSearch(PrecisionConfig(ln_path))
    real = search.candidate_model

    def flaky(keep):
        if len(keep) == 1:  # say these mixed models do not load
            raise InputError("ONNX-Runtime cannot load the model: simulated")
        return real(keep)

    monkeypatch.setattr(search, "candidate_model", flaky)
    outcome = search.run()
    assert outcome.kept == fm.LN_MUST_KEEP and outcome.broken >= 1
    assert any(c.worst.startswith("broken: ") for c in search.checks)


def test_broken_first_check_stops_with_the_error(cli, ln_path, monkeypatch):
    from toolkit.core.errors import InputError

    def always(self, keep):
        raise InputError("ONNX-Runtime cannot load the model: simulated")

    monkeypatch.setattr(PrecisionSearch, "candidate_model", always)
    r = cli("debug", "precision", ln_path)
    assert r.code == 3 and "simulated" in r.err and "Traceback" not in r.err

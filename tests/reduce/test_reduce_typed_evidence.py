"""The built-in comparison's evidence comes back typed, through the check's own pipe: never read
back from the rows the check printed (only a user's own ``--check`` command has only text)."""

from __future__ import annotations

import json
import os

import pytest

from accuracy_models import save_pair
from conftest import run_toolkit
from toolkit.reduce.check import WarmRunner, WorkerEntry, run_in_process
from toolkit.reduce.evidence import Evidence, Findings, TensorEvidence


def _rows(n: int) -> Evidence:
    return Evidence([
        TensorEvidence(name=f"t{k}", passed=False, max_abs=0.1234567891 + k, max_rel=1.0, atol=1e-5, rtol=1e-5,
                       stat="elemwise", needed_atol=0.1234567891 + k, needed_rtol=1.0)
        for k in range(n)
    ], source="built-in comparison")


def _findings(n: int) -> Findings:
    found = Findings()
    found.rows = {(t.name, t.max_abs): t for t in _rows(n).tensors}
    return found


def _entry(n: int) -> WorkerEntry:
    def main(args):
        print("FAILED | t0 | max abs 9, mean abs 9, max rel 9 | this text is never read")
        return 1

    return WorkerEntry(main, result=lambda: _findings(n))


@pytest.mark.parametrize("n", [1, 3000])  # (3000 rows: more than a pipe holds, read while the check runs)
def test_a_forked_check_hands_its_evidence_back_typed(n):
    res = WarmRunner(["run", "m.onnx"], timeout=60, entry=_entry(n)).run()
    assert res.code == 1 and "never read" in res.stdout_text
    assert res.evidence == _rows(n)
    assert res.evidence.worst.max_abs == 0.1234567891 + (n - 1)


def test_a_check_in_process_hands_its_evidence_back_typed():
    res = run_in_process(_entry(2), "toolkit", ["run", "m.onnx"])
    assert res.code == 1 and res.evidence == _rows(2)


def test_a_command_check_has_no_typed_evidence():
    res = WarmRunner(["run", "m.onnx"], timeout=60, entry=WorkerEntry(lambda args: 0)).run()
    assert res.code == 0 and res.evidence is None


@pytest.mark.parametrize("fork", ["0", "1"])
def test_compare_reports_the_comparisons_own_numbers(tmp_path, fork):
    """The evidence is the comparison's, at full precision (the printed rows round to 5 digits),
    the same whether the check runs in this process or in the warm worker."""
    paths = save_pair(tmp_path, perturb=(3,))
    env = dict(os.environ, TOOLKIT_FORK_CHECKS=fork)
    res = run_toolkit("debug", "reduce", paths["faulty"], "-o", "r.onnx", "--compare", "onnxrt", "onnxrt",
                      "--reference-model", paths["clean"], "--json", cwd=tmp_path, env=env)
    assert res.code == 0, res.err
    doc = json.loads(res.out)
    assert doc["runner"] == ("warm" if fork == "1" else "in-process")
    reduced = doc["evidence"]["reduced"]
    assert reduced["source"] == "built-in comparison" and reduced["worst"]["name"] == "c3"
    worst = reduced["worst"]["max_abs"]
    assert float(f"{worst:.5g}") != worst  # (not a number read back from a printed row)
    assert "largest error 0.236" in res.err

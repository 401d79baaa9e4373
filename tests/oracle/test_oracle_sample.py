"""The oracle (scripts/oracle) on its CI sample: every verdict toolkit gives on a few made models is re-checked
with bare ONNX-Runtime / OpenVINO and numpy, and any disagreement fails. Also: the oracle never imports toolkit,
and it does disagree when toolkit's answer is wrong (a fabricated PASSED on a failing model)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ORACLE = os.path.join(REPO, "scripts", "oracle")

pytest.importorskip("onnxruntime")


@pytest.fixture(scope="module")
def oracle():
    sys.path.insert(0, ORACLE)
    try:
        import check  # noqa: PLC0415 -- the oracle's own module, on its own path

        yield check
    finally:
        sys.path.remove(ORACLE)


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = REPO + os.pathsep + env.get("PYTHONPATH", "")
    return env


def test_the_oracle_never_imports_toolkit():
    code = ("import sys; sys.path.insert(0, %r); import check, bare, corpus, nonfinite_check; "
            "assert not [m for m in sys.modules if m == 'toolkit' or m.startswith('toolkit.')], 'toolkit imported'"
            % ORACLE)
    subprocess.run([sys.executable, "-c", code], check=True, env=_env(), timeout=120)


def test_the_oracle_disagrees_with_a_wrong_passed(oracle, tmp_path, monkeypatch):
    """A toolkit that says PASSED (exit 0, a row with max abs 0) on a model that fails fp16 is caught."""
    import corpus  # noqa: PLC0415

    case = corpus.make("fp16_overflow", str(tmp_path))
    chk = corpus.run(["onnxrt", corpus.FP16], 1e-3, 1e-3)

    def lying_toolkit(args, cwd, timeout=0):
        return 0, "", "    PASSED | y | max abs 0, mean abs 0 | tolerance atol 0.001, rtol 0.001\n", "toolkit run"

    monkeypatch.setattr(oracle, "toolkit", lying_toolkit)
    import bare  # noqa: PLC0415

    bare.write_npz(str(tmp_path / "in.npz"), case["feeds"])
    r = oracle.check_run(case, chk, str(tmp_path))
    assert r["status"] == "disagree", r
    assert "toolkit PASSED, oracle fails" in r["detail"]


def test_the_oracle_refuses_a_pass_without_evidence(oracle):
    import bare  # noqa: PLC0415
    import numpy as np  # noqa: PLC0415

    a = np.array([1, 2], np.int32)
    res = {"y": bare.compare(a, a, 0, 0, skip=np.array([True, True]))}
    ok, why = oracle.oracle_verdict(res)
    assert not ok and "y" in why


def test_sample_agrees(tmp_path):
    """The CI sample: run (OpenVINO f32, fp16 emulation), convert's error, debug precision's written model, a
    compare reduce and a check reduce; each verdict must agree with the bare runtimes."""
    p = subprocess.run([sys.executable, os.path.join(ORACLE, "check.py"), "--sample", "--work", str(tmp_path),
                        "--json", str(tmp_path / "rows.json")],
                       capture_output=True, text=True, env=_env(), timeout=300)
    assert "totals:" in p.stdout, p.stdout + p.stderr
    assert p.returncode == 0, p.stdout
    import json  # noqa: PLC0415

    rows = json.loads((tmp_path / "rows.json").read_text())
    assert len(rows) >= 6
    assert not [r for r in rows if r["status"] == "skipped"], rows


def test_the_oracle_disagrees_with_a_wrong_full_model_passes(oracle, tmp_path, monkeypatch):
    """A reduce that says "the full model passes" on a model that fails deployed is caught."""
    import bare  # noqa: PLC0415
    import corpus  # noqa: PLC0415

    case = corpus.make("fp16_overflow", str(tmp_path))
    chk = corpus.reduce_cmp(corpus.FP16, 1e-2, 1e-2)

    def lying_toolkit(args, cwd, timeout=0):
        return 0, '{"status": "passed", "nodes_after": null, "result_nodes": []}', "", "toolkit debug reduce"

    monkeypatch.setattr(oracle, "toolkit", lying_toolkit)
    bare.write_npz(str(tmp_path / "in.npz"), case["feeds"])
    r = oracle.check_reduce_compare(case, chk, str(tmp_path))
    assert r["status"] == "disagree", r
    assert "the full model passes" in r["detail"]

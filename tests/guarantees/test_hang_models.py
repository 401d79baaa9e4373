"""Models made to hang or exhaust a tool: every command ends on SIGTERM within a second (exit
130, no child process and no file left behind), and folding bounds what it computes before
computing it (sanitize writes a correct model and says what it left unfolded)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time

import onnx
import pytest

from conftest import REPO, run_toolkit
from hang_models import big_constant, big_range, long_constant_loop, long_loop, save
from procs import alive as _alive


def _children(pid: int) -> set:
    """Processes whose parent is ``pid``."""
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        found.add(int(entry))
            except (OSError, ValueError, IndexError):
                pass
    return found



def _wait_for(proc, marker, deadline: float) -> None:
    """Until stderr shows ``marker`` (bytes), or, for "child", until the command has a child process."""
    seen = b""
    os.set_blocking(proc.stderr.fileno(), False)
    while time.monotonic() < deadline and proc.poll() is None:
        if marker == "child":
            if _children(proc.pid):
                return
        else:
            seen += proc.stderr.read() or b""
            if marker in seen:
                return
        time.sleep(0.05)
    raise AssertionError(f"never reached {marker!r}: {seen[-500:]!r} (exit {proc.poll()})")


def _sigterm_at(tmp_path, args, marker, delay: float) -> None:
    before = set(os.listdir(tmp_path))
    env = dict(os.environ, PYTHONPATH=str(REPO), COLUMNS="200")
    proc = subprocess.Popen([sys.executable, "-m", "toolkit", *args], cwd=tmp_path, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        _wait_for(proc, marker, time.monotonic() + 60)
        time.sleep(delay)
        kids = _children(proc.pid)
        assert proc.poll() is None, "the command ended by itself: it is no hang"
        proc.send_signal(signal.SIGTERM)
        start = time.monotonic()
        code = proc.wait(timeout=10)
        took = time.monotonic() - start
        assert code == 130 and took < ENDS_WITHIN, (code, took, proc.stderr.read())
        time.sleep(0.2)
        assert not [k for k in kids if _alive(k)], "a child process outlived the command"
        assert set(os.listdir(tmp_path)) == before, "the command left files behind"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


SIGTERM_CASES = {
    # a Loop of 10^12 steps: ONNX-Runtime's inference never ends
    "run loop": (["run", "loop.onnx", "--onnxrt"], b"Activating"),
}
# (alone, each ends within 0.3 s of the signal; 1 s holds with two extra busy processes per core)
ENDS_WITHIN = 1.0


@pytest.mark.serial
@pytest.mark.parametrize("case", list(SIGTERM_CASES))
def test_sigterm_at_random_times_ends_every_command_on_the_hang_models(tmp_path, case):
    save(long_loop(), tmp_path / "loop.onnx")
    args, marker = SIGTERM_CASES[case]
    rng = random.Random(case)
    for _ in range(2):
        _sigterm_at(tmp_path, args, marker, rng.uniform(0.0, 0.8))


# ---------------------------------------------------------------------- folding bounds


@pytest.mark.parametrize("make", [big_range, lambda: big_constant("ConstantOfShape"), lambda: big_constant("Tile"),
                                  lambda: big_constant("Expand")], ids=["Range", "ConstantOfShape", "Tile", "Expand"])
def test_folding_leaves_a_result_over_the_size_limit_uncomputed_and_says_so(tmp_path, cli, monkeypatch, make):
    """Range(0, 10^12) is 8 TB: folding it filled memory (gigabytes) before failing."""
    model = make()
    op = model.graph.node[0].op_type
    save(model, tmp_path / "m.onnx")
    monkeypatch.chdir(tmp_path)
    res = cli("surgeon", "sanitize", "m.onnx", "--fold-constants", "-o", "out.onnx")
    assert res.code == 0, res.err
    assert f"left unfolded: {op} node" in res.err and "--max-tensor-size" in res.err, res.err
    out = onnx.load(str(tmp_path / "out.onnx"))
    assert [n.op_type for n in out.graph.node][0] == op
    import onnxruntime as ort

    ort.InferenceSession(out.SerializeToString(), providers=["CPUExecutionProvider"])  # (it loads)


def test_the_size_limit_is_the_common_option_and_small_results_still_fold(tmp_path, cli, monkeypatch):
    save(big_range(10**6), tmp_path / "m.onnx")  # 8 MB of int64
    monkeypatch.chdir(tmp_path)
    res = cli("surgeon", "sanitize", "m.onnx", "--fold-constants", "--max-tensor-size", "1M", "-o", "out.onnx")
    assert res.code == 0 and "left unfolded: Range node" in res.err, res.err
    res = cli("surgeon", "sanitize", "m.onnx", "--fold-constants", "-o", "out.onnx")
    assert res.code == 0 and "left unfolded" not in res.err, res.err
    out = onnx.load(str(tmp_path / "out.onnx"))
    assert [n.op_type for n in out.graph.node] == ["Add"]  # Range, ReduceSum and Cast folded


def test_a_constant_loop_of_10_to_the_12_steps_is_not_folded_nor_run(tmp_path):
    """Folding it (or running the model to validate the fold) would take days."""
    save(long_constant_loop(), tmp_path / "m.onnx")
    res = run_toolkit("surgeon", "sanitize", "m.onnx", "--fold-constants", "-o", "out.onnx", cwd=tmp_path, timeout=90)
    assert res.code == 0, res.err
    assert "left unfolded: Loop node" in res.err and "--max-nodes" in res.err, res.err
    assert "not compared" in res.err  # (validation loaded the result without running it)
    assert [n.op_type for n in onnx.load(str(tmp_path / "out.onnx")).graph.node] == ["Loop", "Add"]


# ---------------------------------------------------------------------- data files, header first


def test_an_inputs_file_given_as_outputs_is_refused_from_its_first_iteration(tmp_path, cli, monkeypatch):
    """The kind of a JSON data file is read from its head: the rest (here garbage, in a real
    file 200k iterations that took a minute to parse) is never parsed before the refusal."""
    import numpy as np

    from modelzoo import chain
    from toolkit.core.io.datafiles import save_inputs

    save(chain(2), tmp_path / "m.onnx")
    save_inputs(str(tmp_path / "in.json"), [{"x": np.ones((1, 4), np.float32)}] * 3)
    text = (tmp_path / "in.json").read_text()
    (tmp_path / "bad.json").write_text(text[: text.index("},") + 2] + " garbage" * 1000)
    monkeypatch.chdir(tmp_path)
    res = cli("run", "m.onnx", "--onnxrt", "--load-outputs", "bad.json")
    assert res.code == 3 and "bad.json is an inputs file" in res.err, res.err
    res = cli("run", "m.onnx", "--onnxrt", "--load-outputs", "in.json")
    assert res.code == 3 and "in.json is an inputs file" in res.err, res.err

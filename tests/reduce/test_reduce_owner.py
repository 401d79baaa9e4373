"""One `debug reduce` run owns its iteration artifact and replay file (toolkit.reduce.owner)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from modelzoo import chain, save

from toolkit.core.errors import InputError
from toolkit.reduce.owner import Ownership, lock_path


def _start(folder, culprit, *extra, gate=None):
    """``debug reduce`` of ``folder/model.onnx`` in a subprocess, with a check that fails when ``culprit`` is
    in the artifact; while the file ``gate`` exists, every check waits (the run is then surely checking)."""
    wait = f"while [ -e {gate} ]; do sleep 0.05; done; " if gate else ""
    check = wait + f"grep -q {culprit} polygraphy_debug.onnx && exit 1; exit 0"
    argv = [
        sys.executable, "-m", "toolkit", "debug", "reduce", "model.onnx", "-o", f"reduced_{culprit}.onnx", "--json",
        *extra, "--check", "sh", "-c", check,
    ]
    # fixed check costs: the check count then does not depend on how loaded the machine is
    env = dict(os.environ, TOOLKIT_REDUCE_FIXED_COSTS="1")
    return subprocess.Popen(argv, cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)


def _done(proc, timeout=120):
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out.decode(), err.decode()


def _start_held(tmp_path, fail):
    """(the run, its gate file): a reduce started and seen checking, its first check waiting at the
    gate until the file is removed."""
    gate = tmp_path / "gate"
    gate.touch()
    proc = _start(tmp_path, fail, gate=gate)
    deadline = time.monotonic() + 60
    while not os.path.exists(tmp_path / "polygraphy_debug.onnx") and time.monotonic() < deadline:
        time.sleep(0.05)
    return proc, gate


def test_two_reduces_at_once_in_one_folder(tmp_path):
    save(chain(16), tmp_path / "model.onnx")
    alone = _done(_start(tmp_path, "n10_tanh"))
    assert alone[0] == 0, alone[2]
    expected = json.loads(alone[1])
    os.unlink(tmp_path / "reduced_n10_tanh.onnx")

    first, gate = _start_held(tmp_path, "n10_tanh")
    try:
        before = sorted(os.listdir(tmp_path))
        second = _done(_start(tmp_path, "n9_neg"), timeout=60)
    finally:
        gate.unlink()  # the first run goes on
    code, _out, err = second
    assert code == 3
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), err
    assert "polygraphy_debug.onnx" in err and "polygraphy_debug_replay.json" in err and "--iter-artifact" in err
    assert not (tmp_path / "reduced_n9_neg.onnx").exists()
    assert set(os.listdir(tmp_path)) <= set(before) | {"polygraphy_debug_replay.json"}  # (the first run's files)
    code, out, err = _done(first)
    assert code == 0, err
    got = json.loads(out)
    assert got["result_nodes"] == expected["result_nodes"] == ["n10_tanh [Op: Tanh]"]
    assert got["checks"] == expected["checks"]
    assert not [f for f in os.listdir(tmp_path) if f.endswith(".lock")]  # nothing left behind


def test_a_killed_run_does_not_block_the_next(tmp_path):
    save(chain(16), tmp_path / "model.onnx")
    proc, gate = _start_held(tmp_path, "n10_tanh")
    try:
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
    finally:
        gate.unlink()  # (the killed run's check, if it lives on, ends too)
    code, out, err = _done(_start(tmp_path, "n10_tanh"))
    assert code == 0, err
    assert json.loads(out)["result_nodes"] == ["n10_tanh [Op: Tanh]"]


def test_other_files_in_one_folder_run_side_by_side(tmp_path):
    a = Ownership([str(tmp_path / "a.onnx"), str(tmp_path / "a_replay.json")])
    b = Ownership([str(tmp_path / "b.onnx"), str(tmp_path / "b_replay.json")])
    a.acquire()
    b.acquire()
    c = Ownership([str(tmp_path / "c.onnx"), str(tmp_path / "a_replay.json")])
    with pytest.raises(InputError, match="a_replay.json is in use by another debug reduce"):
        c.acquire()
    assert os.path.exists(lock_path(str(tmp_path / "c.onnx"))) is False  # (released with the refusal)
    a.release()
    c.acquire()
    c.release()
    b.release()
    assert not [f for f in os.listdir(tmp_path) if f.endswith(".lock")]


def test_a_folder_without_room_for_a_lock_is_left_to_the_run(tmp_path):
    own = Ownership([str(tmp_path / "missing" / "a.onnx")])
    own.acquire()  # (nothing to lock: the run's own checks report the folder)
    own.release()

"""A child never outlives its command, and a child that dies leaves no temp file.

`run` computes in a forked child (the supervisor): killing the command (``kill -9`` of the
parent) ends the child at once, so nothing is written later; a child killed by a signal while
it writes ``--save-outputs`` leaves no ``.out.npz.*.tmp`` behind (the parent removes it)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import onnx
import pytest
from onnx import TensorProto, helper

from conftest import REPO
from test_faults import matmul_model
from procs import alive as _alive

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and prctl")


def _popen(args, cwd):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    env.pop("TOOLKIT_NO_SUPERVISOR", None)
    return subprocess.Popen([sys.executable, "-m", "toolkit", *args], cwd=cwd, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)


def _children(pid: int) -> list:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        return []



def _wait_for(cond, limit: float) -> bool:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.002)
    return cond()


def test_kill_9_of_the_command_ends_its_child_and_nothing_is_written_later(tmp_path):
    onnx.save(matmul_model(depth=40, size=256), str(tmp_path / "m.onnx"))
    proc = _popen(["run", "m.onnx", "--onnxrt", "--iterations", "100000", "--save-outputs", "out.npz"], tmp_path)
    try:
        assert _wait_for(lambda: _children(proc.pid), 60), proc.stderr.read().decode() if proc.poll() else ""
        child = _children(proc.pid)[0]
        time.sleep(1.0)  # (the child is computing)
        proc.kill()
        proc.wait(timeout=30)
        assert _wait_for(lambda: not _alive(child), 5), "the child outlived its command"
    finally:
        for pid in _children(proc.pid):
            os.kill(pid, signal.SIGKILL)
    time.sleep(0.5)
    # (a temp file the child had open may stay: SIGKILL of the command itself leaves its temp files)
    assert [n for n in os.listdir(tmp_path) if not n.endswith(".tmp")] == ["m.onnx"]


def _big_output_model(path, side=2048):
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])], "big",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [side, side])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [side, side])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))


def test_a_child_killed_while_writing_its_outputs_leaves_no_temp_file(tmp_path):
    _big_output_model(tmp_path / "m.onnx")
    proc = _popen(["run", "m.onnx", "--onnxrt", "--iterations", "12", "--save-outputs", "out.npz"], tmp_path)

    def writing():
        return any(n.startswith(".out.npz.") for n in os.listdir(tmp_path)) or proc.poll() is not None

    assert _wait_for(writing, 120)
    children = _children(proc.pid)
    if proc.poll() is not None or not children:
        pytest.skip("the run ended before its output could be caught half-written")
    os.kill(children[0], signal.SIGKILL)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, err.decode()
    assert "SIGKILL" in err.decode()
    assert sorted(os.listdir(tmp_path)) == ["m.onnx"]

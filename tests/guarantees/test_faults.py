"""Faults: checks that crash, hang or get killed; Ctrl-C and SIGKILL in the middle of work.

- `debug reduce` with a check that segfaults, hangs (with and without ignoring SIGTERM,
  under --check-timeout) or is SIGKILLed half-way: each counts as a failure, and the
  reduce still ends with the right 1-node model;
- Ctrl-C (SIGINT) during `run`, `surgeon sanitize` and `debug reduce`: exit 130, no
  traceback, inputs untouched, outputs absent or complete;
- a reduce interrupted with Ctrl-C and resumed from its replay file ends with the same
  model as an uninterrupted one, without re-running the checks already answered;
- SIGKILL of `surgeon sanitize -o INPUT` never leaves a half-written model.

Workloads are generated models big enough for the signal to land mid-way; the signal is
sent when the child has used some CPU time (robust to a loaded machine), or after a
progress line.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import modelzoo as z
from conftest import run_toolkit

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses /proc and POSIX signals")

ENV = dict(os.environ, COLUMNS="200")


def toolkit_popen(args, cwd):
    return subprocess.Popen(
        [sys.executable, "-m", "toolkit", *map(str, args)],
        cwd=str(cwd),
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def cpu_seconds(pid: int) -> float:
    """CPU seconds of process ``pid`` and its live descendants (a command may work in a child
    process while it waits, e.g. constant folding)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        children = []
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                children += [int(c) for c in f.read().split()]
    except OSError:
        return 0.0
    own = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return own + sum(cpu_seconds(c) for c in children)


def _drain(stream, sink: list) -> threading.Thread:
    """Read a pipe in the background so a chatty child never blocks on a full pipe."""

    def pump():
        for chunk in iter(lambda: stream.read1(65536), b""):
            sink.append(chunk)

    t = threading.Thread(target=pump, daemon=True)
    t.start()
    return t


def interrupt_after_cpu(proc, seconds: float, sig=signal.SIGINT, limit: float = 60.0):
    """Send ``sig`` once the child has used ``seconds`` of CPU; return (code, out, err, sent)."""
    out, err = [], []
    pumps = [_drain(proc.stdout, out), _drain(proc.stderr, err)]
    deadline = time.monotonic() + limit
    while proc.poll() is None and cpu_seconds(proc.pid) < seconds and time.monotonic() < deadline:
        time.sleep(0.02)
    sent = proc.poll() is None
    if sent:
        proc.send_signal(sig)
    proc.wait(timeout=limit)
    for t in pumps:
        t.join(timeout=limit)
    return proc.returncode, b"".join(out).decode(errors="replace"), b"".join(err).decode(errors="replace"), sent


def interrupt_after_output(proc, marker: bytes, sig=signal.SIGINT, limit: float = 300.0):
    """Send ``sig`` once the child has written ``marker`` to stderr (it is then surely at work,
    however loaded the machine); return (code, out, err, sent). The limits are generous: a slow
    machine makes the test slower, never wrong."""
    out, err = [], []
    pumps = [_drain(proc.stdout, out), _drain(proc.stderr, err)]
    deadline = time.monotonic() + limit
    while proc.poll() is None and marker not in b"".join(err) and time.monotonic() < deadline:
        time.sleep(0.05)
    sent = proc.poll() is None and marker in b"".join(err)
    if sent:
        proc.send_signal(sig)
    try:
        proc.wait(timeout=limit)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    for t in pumps:
        t.join(timeout=limit)
    return proc.returncode, b"".join(out).decode(errors="replace"), b"".join(err).decode(errors="replace"), sent


def files(folder) -> dict:
    return {n: (folder / n).read_bytes() for n in sorted(os.listdir(folder)) if (folder / n).is_file()}


def assert_no_temp_files(folder):
    left = [n for n in os.listdir(folder) if n.endswith(".tmp")]
    assert not left, f"temporary files left: {left}"


# ---------------------------------------------------------------------- workloads


def const_chain(n: int):
    """x + (((c0 + k0) + k1) + ... + k{n-1}): n foldable Add nodes; folding takes ~0.7 ms/node."""
    inits = [numpy_helper.from_array(np.ones((4,), np.float32), "c0")]
    nodes = []
    prev = "c0"
    for i in range(n):
        inits.append(numpy_helper.from_array(np.full((4,), 1e-3 * i, np.float32), f"k{i}"))
        nodes.append(helper.make_node("Add", [prev, f"k{i}"], [f"c{i + 1}"], name=f"cadd{i}"))
        prev = f"c{i + 1}"
    nodes.append(helper.make_node("Add", ["x", prev], ["y"], name="final"))
    graph = helper.make_graph(nodes, "const_chain", [z.vi("x", [4])], [z.vi("y", [4])], inits)
    return z.make_model(graph)


def matmul_model(depth: int = 40, size: int = 128):
    """x[1,size] through ``depth`` MatMuls: ~0.1-0.3 ms per iteration, tiny inputs and outputs."""
    rng = np.random.default_rng(0)
    w = (rng.random((size, size), dtype=np.float32) / size).astype(np.float32)
    inits = [numpy_helper.from_array(w, "w")]
    nodes, prev = [], "x"
    for i in range(depth):
        out = "y" if i == depth - 1 else f"h{i}"
        nodes.append(helper.make_node("MatMul", [prev, "w"], [out], name=f"mm{i}"))
        prev = out
    graph = helper.make_graph(nodes, "mm", [z.vi("x", [1, size])], [z.vi("y", [1, size])], inits)
    return z.make_model(graph)


# ---------------------------------------------------------------------- faulty checks

TARGET = "n3_neg"  # chain(6): n0_relu n1_sigmoid n2_abs n3_neg n4_tanh n5_exp

_CHECK = (
    "import os, signal, sys, time\n"
    "data = open('polygraphy_debug.onnx', 'rb').read()\n"
    "if b'" + TARGET + "' not in data:\n"
    "    sys.exit(0)\n"
    "mode = sys.argv[1]\n"
    "if mode == 'segv':\n"
    "    import ctypes, faulthandler\n"
    "    faulthandler.disable()\n"
    "    ctypes.string_at(0)\n"
    "elif mode == 'hang':\n"
    "    time.sleep(60)\n"
    "elif mode == 'hang-ignore-term':\n"
    "    signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "    time.sleep(60)\n"
    "elif mode == 'killed':\n"
    "    print('half of the output', flush=True)\n"
    "    os.kill(os.getpid(), signal.SIGKILL)\n"
)


@pytest.mark.parametrize(
    "mode, extra, evidence",
    [
        ("segv", [], "SIGSEGV"),
        pytest.param("hang", ["--check-timeout", "0.5"], "timed out", marks=pytest.mark.serial),  # (timed)
        pytest.param("hang-ignore-term", ["--check-timeout", "0.5"], "timed out", marks=pytest.mark.serial),
        ("killed", [], "SIGKILL"),
    ],
)
def test_reduce_with_a_faulty_check(tmp_path, mode, extra, evidence):
    """A crash, a hang or a kill is a failure of that candidate; the reduce goes on and finds it."""
    z.save(z.chain(6), tmp_path / "model.onnx")
    (tmp_path / "check.py").write_text(_CHECK)
    before = (tmp_path / "model.onnx").read_bytes()
    start = time.monotonic()
    res = run_toolkit(
        "debug", "reduce", "model.onnx", "-o", "out.onnx", *extra,
        "--check", sys.executable, "check.py", mode, cwd=tmp_path, timeout=90,
    )
    assert res.code == 0, res.err
    assert "Traceback" not in res.err
    assert evidence in res.err, res.err
    assert [n.name for n in onnx.load(str(tmp_path / "out.onnx")).graph.node] == [TARGET]
    assert (tmp_path / "model.onnx").read_bytes() == before
    assert not (tmp_path / "polygraphy_debug.onnx").exists()
    assert_no_temp_files(tmp_path)
    if mode.startswith("hang"):
        assert time.monotonic() - start < 30  # every hang was cut at ~0.5 s


# ---------------------------------------------------------------------- Ctrl-C


@pytest.mark.serial
def test_ctrl_c_during_run(tmp_path):
    z.save(matmul_model(), tmp_path / "model.onnx")
    before = files(tmp_path)
    proc = toolkit_popen(
        ["run", "model.onnx", "--onnxrt", "--iterations", "200000", "--save-inputs", "in.npz", "--save-outputs", "out.json"],
        tmp_path,
    )
    # interrupt once iterations are under way (not after a fixed time, which a loaded machine
    # may spend before the first iteration)
    code, out, err, sent = interrupt_after_output(proc, b"Iteration 1 ")
    assert sent, f"the run ended (or never started iterating) before it could be interrupted:\n{err[-2000:]}"
    assert code == 130, err[-2000:]
    assert "Traceback" not in err
    assert "Iteration" in err  # it was running
    assert files(tmp_path) == before  # nothing saved: outputs are written at the end, atomically
    assert_no_temp_files(tmp_path)


@pytest.mark.serial
@pytest.mark.parametrize("in_place", [False, True], ids=["new-output", "output-is-input"])
def test_ctrl_c_during_sanitize(tmp_path, in_place):
    z.save(const_chain(15000), tmp_path / "model.onnx")
    before = files(tmp_path)
    out = "model.onnx" if in_place else "out.onnx"
    proc = toolkit_popen(["surgeon", "sanitize", "model.onnx", "-o", out, "--fold-constants"], tmp_path)
    code, _, err, sent = interrupt_after_cpu(proc, 2.5)
    assert sent, f"sanitize ended before it could be interrupted:\n{err[-2000:]}"
    assert code == 130, err[-2000:]
    assert "Traceback" not in err
    assert files(tmp_path) == before  # the input is intact and no output appeared
    assert_no_temp_files(tmp_path)


@pytest.mark.serial
def test_sigkill_during_in_place_sanitize_leaves_a_whole_model(tmp_path):
    """Even SIGKILL (no cleanup at all) cannot leave a half-written model at the target:
    the model is written to a temporary file and renamed into place."""
    model = const_chain(3000)
    z.save(model, tmp_path / "model.onnx")
    before = (tmp_path / "model.onnx").read_bytes()
    proc = toolkit_popen(["surgeon", "sanitize", "model.onnx", "-o", "model.onnx", "--fold-constants"], tmp_path)
    code, _, err, sent = interrupt_after_cpu(proc, 2.2, sig=signal.SIGKILL)
    after = (tmp_path / "model.onnx").read_bytes()
    if after != before:  # the rename happened: the new model is complete
        m = onnx.load_from_string(after)
        onnx.checker.check_model(m)
        assert len(m.graph.node) == 1
    # a SIGKILLed process may leave its hidden temporary file; never a partial target
    for name in os.listdir(tmp_path):
        assert name == "model.onnx" or (name.startswith(".model.onnx.") and name.endswith(".tmp")), name


def _reduce_args(out="out.onnx", *extra):
    check = ["sh", "-c", f"sleep 0.15; ! grep -q {TARGET_LONG} polygraphy_debug.onnx"]
    return ["debug", "reduce", "model.onnx", "-o", out, *extra, "--check", *check]


TARGET_LONG = "n13_sigmoid"  # in chain(24) (its ops cycle through 6)


def _interrupt_reduce_after(proc, iteration: int, limit: float = 60.0):
    lines = []
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        line = proc.stderr.readline().decode(errors="replace")
        if not line:
            break
        lines.append(line)
        if line.startswith(f"Iteration {iteration} "):
            proc.send_signal(signal.SIGINT)
            break
    out, rest = proc.communicate(timeout=limit)
    return proc.returncode, "".join(lines) + rest.decode(errors="replace")


def test_chain_names():
    names = [n.name for n in z.chain(24).graph.node]
    assert TARGET_LONG in names and sum(TARGET_LONG in n for n in names) == 1
    assert TARGET in [n.name for n in z.chain(6).graph.node]


@pytest.mark.serial
def test_ctrl_c_during_reduce_leaves_valid_outputs(tmp_path):
    z.save(z.chain(24), tmp_path / "model.onnx")
    before = (tmp_path / "model.onnx").read_bytes()
    proc = toolkit_popen(_reduce_args("out.onnx", "--save-debug-replay", "replay.json"), tmp_path)
    code, err = _interrupt_reduce_after(proc, 3)
    assert code == 130, err
    assert "Traceback" not in err
    assert (tmp_path / "model.onnx").read_bytes() == before
    # what is there is complete: the smallest failing model so far, and the verdicts
    out = onnx.load(str(tmp_path / "out.onnx"))
    onnx.checker.check_model(out)
    assert TARGET_LONG in [n.name for n in out.graph.node]
    assert len(out.graph.node) < 24
    doc = json.loads((tmp_path / "replay.json").read_text())
    assert len(doc["entries"]) >= 3
    assert not (tmp_path / "polygraphy_debug.onnx").exists()
    assert_no_temp_files(tmp_path)


@pytest.mark.serial
def test_reduce_resumed_from_replay_ends_like_an_uninterrupted_one(tmp_path):
    z.save(z.chain(24), tmp_path / "model.onnx")
    # the reference: one uninterrupted run
    res = run_toolkit(*_reduce_args("reference.onnx"), cwd=tmp_path, timeout=120)
    assert res.code == 0, res.err
    reference = onnx.load(str(tmp_path / "reference.onnx"))
    assert [n.name for n in reference.graph.node] == [TARGET_LONG]
    checks_total = sum(1 for line in res.err.splitlines() if line.startswith("Iteration "))

    # interrupted after iteration 4, then resumed from the replay file
    proc = toolkit_popen(_reduce_args("out.onnx", "--save-debug-replay", "replay.json"), tmp_path)
    code, err = _interrupt_reduce_after(proc, 4)
    assert code == 130, err
    answered = len(json.loads((tmp_path / "replay.json").read_text())["entries"])
    assert answered >= 4
    res = run_toolkit(
        *_reduce_args("out.onnx", "--load-debug-replay", "replay.json", "--save-debug-replay", "replay.json"),
        cwd=tmp_path, timeout=120,
    )
    assert res.code == 0, res.err
    assert "Traceback" not in res.err
    resumed = onnx.load(str(tmp_path / "out.onnx"))
    assert resumed.SerializeToString() == reference.SerializeToString()
    # the checks answered before the interruption were not run again
    m = [line for line in res.err.splitlines() if "answered from memory" in line]
    assert m, res.err
    ran = int(m[0].split(" checks run")[0].split()[-1])
    assert ran <= checks_total - answered + 1, res.err

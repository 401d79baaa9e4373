"""SIGTERM ends every command within a second while it is busy in a long call on a hang model:
exit 130, no file left behind, no child process left alive.

Each command is started on a model (or data file) made to keep it busy for minutes, signalled
once it is in the long call (its marker seen on stderr, or its child process started) after
a random short delay, and timed from the signal to its exit. The long calls: ONNX-Runtime's
inference of a Loop of 10^12 steps (`run`, `convert`'s runtime check, `debug precision`, `debug
reduce`'s check), onnx's shape inference of a 2-million-node function fan-out (`inspect model
--shape-inference`, `surgeon extract`, `convert`), the folding of such a Loop on constants (`surgeon
sanitize --fold-constants` with --max-nodes raised), the parsing of a big data file (`inspect data`,
`data to-input`)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time

import pytest

from conftest import REPO
from hang_models import fan_out, long_foldable_loop, long_loop, save
from procs import alive as _alive

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc")

ENDS_WITHIN = 1.0  # seconds from SIGTERM to exit
MANY = ["--max-nodes", "100000000"]  # (the fan-out is over the default bound, which would refuse it at once)
# Markers of the long call: bytes on stderr (module imports are logged there: -X importtime), or
# CHILD * n: the n-th child process the command started (after WAIT_FOR_CHILD seconds without it,
# the command is signalled anyway).
CHILD = ("child",)

CASES = {
    "run": (["run", "loop.onnx", "--onnxrt"], b"Activating"),
    "inspect model --shape-inference": (["inspect", "model", "fan.onnx", "--show", "layers", "--shape-inference",
                                         *MANY], CHILD),
    "inspect data": (["inspect", "data", "big.json"], b"| toolkit.inspect.data\n"),
    "surgeon sanitize --fold-constants": (["surgeon", "sanitize", "cloop.onnx", "--fold-constants", "--max-nodes",
                                           "10000000000000", "-o", "out.onnx"], CHILD * 2),
    "surgeon extract": (["surgeon", "extract", "fan.onnx", "--outputs", "y:auto", *MANY, "-o", "out.onnx"], CHILD),
    "convert (shape inference)": (["convert", "fan.onnx", "--fp-to-fp16", *MANY, "-o", "out.onnx"], CHILD),
    "convert (runtime check)": (["convert", "loop.onnx", "--fp-to-fp16", "-o", "out.onnx"], b"Converted"),
    "debug reduce": (["debug", "reduce", "loop.onnx", "-o", "out.onnx", "--check", "toolkit", "run",
                      "polygraphy_debug.onnx", "--onnxrt"], CHILD),  # (it writes its replay file when interrupted)
    "debug precision": (["debug", "precision", "loop.onnx", "-o", "out.onnx"], b"Searching"),
    "data to-input": (["data", "to-input", "big.json", "-o", "out.json"], b"| toolkit.core.io.datafiles\n"),
}
WAIT_FOR_CHILD = 15.0


def _make_files(folder) -> None:
    save(long_loop(), folder / "loop.onnx")
    save(long_foldable_loop(), folder / "cloop.onnx")
    fan = fan_out(21)  # (2 million nodes once inlined: onnx's inference takes tens of seconds)
    del fan.graph.output[0].type.tensor_type.shape.dim[:]  # (extract infers the output's shape)
    fan.graph.output[0].type.tensor_type.ClearField("shape")
    save(fan, folder / "fan.onnx")
    one = ('{"x": {"array": "k05VTVBZAQB2AHsnZGVzY3InOiAnPGY0JywgJ2ZvcnRyYW5fb3JkZXInOiBGYWxzZSwgJ3NoYXBlJzogKDEsI'
           'DQpLCB9ICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgIAoAAIA/AACAPwAAgD8AAIA/",'
           ' "polygraphy_class": "ndarray"}}')
    (folder / "big.json").write_text("[" + ", ".join([one] * 40000) + "]")  # (a (1, 4) float32 input, 40000 times)


def _descendants(pid: int) -> set:
    found, todo = set(), [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/task/{p}/children") as f:
                kids = [int(k) for k in f.read().split()]
        except OSError:
            kids = []
        found.update(kids)
        todo.extend(kids)
    return found



def _wait_for(proc, marker, seconds: float) -> None:
    """Until the long call of ``marker`` (see CASES)."""
    seen, children = b"", set()
    start = time.monotonic()
    os.set_blocking(proc.stderr.fileno(), False)
    while proc.poll() is None and time.monotonic() < start + seconds:
        if isinstance(marker, tuple):
            children |= _descendants(proc.pid)
            if len(children) >= len(marker) or time.monotonic() > start + WAIT_FOR_CHILD:
                return
        else:
            seen += proc.stderr.read() or b""
            if marker in seen:
                return
        time.sleep(0.01)
    raise AssertionError(f"never reached {marker!r}: {seen[-500:]!r} (exit {proc.poll()})")


KEPT = {"polygraphy_debug_replay.json"}  # (what an interrupted command writes, as documented)


def sigterm_when_busy(folder, args, marker, delay: float) -> float:
    """Seconds from SIGTERM to the exit of ``toolkit ARGS`` (asserting exit 130, no file and no
    child process left)."""
    before = set(os.listdir(folder)) | KEPT
    env = dict(os.environ, PYTHONPATH=str(REPO), COLUMNS="200", PYTHONPROFILEIMPORTTIME="1")
    env.pop("TOOLKIT_NO_SUPERVISOR", None)
    proc = subprocess.Popen([sys.executable, "-m", "toolkit", *args], cwd=folder, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        _wait_for(proc, marker, 60)
        time.sleep(delay)
        kids = _descendants(proc.pid)
        assert proc.poll() is None, f"the command ended by itself: it is no hang ({proc.stderr.read()!r})"
        proc.send_signal(signal.SIGTERM)
        start = time.monotonic()
        code = proc.wait(timeout=60)
        took = time.monotonic() - start
        err = proc.stderr.read() or b""
        assert code == 130, (code, err[-800:])
        if took >= ENDS_WITHIN:
            raise SlowExit(f"{took:.2f} s from SIGTERM to exit")
        deadline = time.monotonic() + 1.0
        while [k for k in kids if _alive(k)] and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not [k for k in kids if _alive(k)], "a child process outlived the command"
        assert set(os.listdir(folder)) <= before, f"left behind: {set(os.listdir(folder)) - before}"
        return took
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for k in _descendants(proc.pid):
            os.kill(k, signal.SIGKILL)


@pytest.fixture(scope="module")
def hang_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("hang")
    _make_files(folder)
    return folder


@pytest.mark.parametrize("case", list(CASES))
def test_sigterm_ends_every_command_busy_in_a_long_call_within_a_second(hang_files, tmp_path, case):
    for name in os.listdir(hang_files):
        os.symlink(hang_files / name, tmp_path / name)
    args, marker = CASES[case]
    rng = random.Random(case)
    try:
        took = sigterm_when_busy(tmp_path, args, marker, rng.uniform(0.05, 0.4))
    except SlowExit:
        # (on a machine busy with other work, a signal landing in a lazy import waits for the import to
        # end: seen 1.6-5.8 s with several test workers on 2 cores; the bound must hold on a second start)
        took = sigterm_when_busy(tmp_path, args, marker, rng.uniform(0.05, 0.4))
    print(f"{case}: {took:.3f} s from SIGTERM to exit")


class SlowExit(AssertionError):
    """The command ended as it should, but later than ENDS_WITHIN after the signal."""

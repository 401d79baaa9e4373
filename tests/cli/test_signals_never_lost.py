"""A signal that reaches a command is never lost: not at an import boundary (held until the import
ends, then raised), not just before the process exits, not at a random time during the command."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import modelzoo as z
from conftest import REPO

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="POSIX signals and /proc")

# A command whose last act is a lazy import, during which the signal lands; the process ends right
# after it with os._exit (as the console script does): nothing may be left for later.
AT_IMPORT_END = """
import os, signal, sys
sys.path.insert(0, {folder!r})
from toolkit.cli.entry import hold_early_signals
hold_early_signals()
from toolkit.cli import app

def last_step(argv):
    import landing  # sends the signal to this process while it is being imported
    os._exit(0)

app._main = last_step
os._exit(app.main(["inspect", "model", "m.onnx"]))
"""

LANDING = """
import os, signal, time
os.kill(os.getpid(), signal.{sig})
time.sleep(0.2)  # (the signal arrives while this module is still being imported)
"""


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT", "SIGHUP"])
def test_a_signal_during_the_last_import_before_exit_is_not_lost(tmp_path, sig):
    (tmp_path / "landing.py").write_text(LANDING.format(sig=sig))
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-c", AT_IMPORT_END.format(folder=str(tmp_path))], cwd=tmp_path, env=env,
                          capture_output=True, timeout=60)
    err = proc.stderr.decode(errors="replace")
    assert proc.returncode == 130, err
    assert "Traceback" not in err and err.startswith("error: interrupted"), err


def _caught(pid: int, sig: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as f:
            mask = next(int(line.split()[1], 16) for line in f if line.startswith("SigCgt:"))
    except (OSError, StopIteration):
        return False
    return bool(mask & (1 << (sig - 1)))


def _model(path, n: int = 30):
    """x + (((c0 + k0) + k1) + ...): ``n`` foldable Add nodes."""
    inits = [numpy_helper.from_array(np.ones((4,), np.float32), "c0")]
    nodes, prev = [], "c0"
    for i in range(n):
        inits.append(numpy_helper.from_array(np.full((4,), 1e-3 * i, np.float32), f"k{i}"))
        nodes.append(helper.make_node("Add", [prev, f"k{i}"], [f"c{i + 1}"], name=f"cadd{i}"))
        prev = f"c{i + 1}"
    nodes.append(helper.make_node("Add", ["x", prev], ["y"], name="final"))
    graph = helper.make_graph(nodes, "chain", [z.vi("x", [4])], [z.vi("y", [4])], inits)
    onnx.save(z.make_model(graph), str(path))


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_signal_at_a_random_time_ends_the_command_with_130(tmp_path, sig):
    """From the moment the process has its handlers until it exits, a signal is exit 130 with one
    error line (what was written, what not), never a traceback, never a lost signal (exit 0)."""
    _model(tmp_path / "m.onnx")
    rng = random.Random(int(sig))
    env = dict(os.environ, PYTHONPATH=str(REPO))
    for trial in range(3):
        out = tmp_path / f"out{trial}.onnx"
        proc = subprocess.Popen([sys.executable, "-m", "toolkit", "surgeon", "sanitize", "m.onnx", "-o", out.name,
                                 "--fold-constants"], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
        deadline = time.monotonic() + 30
        while not _caught(proc.pid, signal.SIGTERM) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.001)
        time.sleep(rng.uniform(0, 1.5))
        sent = proc.poll() is None
        if sent:
            proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
        text = err.decode(errors="replace")
        assert "Traceback" not in text, text
        if sent:
            assert proc.returncode == 130, (trial, text)
            assert text.strip().splitlines()[-1].startswith("error: interrupted"), text
        if out.exists():
            onnx.load(str(out))  # whatever is written is whole
        assert not [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]

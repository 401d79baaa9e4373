"""SIGINT and SIGTERM during start-up (while the CLI is still being imported) end the
command with one error line and exit 130, never a traceback or a silent 143.

The import is made slow on purpose: a stand-in ``typer`` package first in the path sleeps
before it hands over to the real one, so the signal lands in the import every time."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import REPO

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="POSIX signals and /proc")

SLOW_TYPER = '''
import importlib, os, sys, time
time.sleep(3)
sys.path.remove(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
del sys.modules["typer"]
sys.modules["typer"] = importlib.import_module("typer")
'''


def _caught(pid: int, sig: int) -> bool:
    """Whether process ``pid`` has a handler for ``sig`` (its SigCgt mask)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            mask = next(int(line.split()[1], 16) for line in f if line.startswith("SigCgt:"))
    except (OSError, StopIteration):
        return False
    return bool(mask & (1 << (sig - 1)))


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_while_the_cli_is_imported_is_exit_130_with_one_line(tmp_path, sig):
    (tmp_path / "slow" / "typer").mkdir(parents=True)
    (tmp_path / "slow" / "typer" / "__init__.py").write_text(SLOW_TYPER)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path / "slow"), str(REPO)]))
    proc = subprocess.Popen([sys.executable, "-m", "toolkit", "inspect", "model", "missing.onnx"], cwd=tmp_path,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 20
    while not _caught(proc.pid, signal.SIGINT) and time.monotonic() < deadline:  # the interpreter is up
        time.sleep(0.005)
    time.sleep(1.0)  # well inside the 3 s import
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=30)
    text = err.decode(errors="replace")
    assert proc.returncode == 130, text
    assert "Traceback" not in text and text.count("\n") == 1 and text.startswith("error: interrupted"), text

"""A check that closes its output just before it exits (``cat`` does) is judged by its exit,
not killed in between: its exit code 0 was read as "killed by SIGKILL" (a crash) when the
process group was killed at the end of the output, before the check had exited."""

from __future__ import annotations

import sys

from toolkit.reduce.check import make_runner

CLOSES_THEN_EXITS = (
    "import os, sys, time; sys.stdout.write('done\\n'); sys.stdout.flush(); "
    "os.close(1); os.close(2); time.sleep(0.3); sys.exit({code})"
)


def _run(code: int, timeout=None):
    runner = make_runner([sys.executable, "-c", CLOSES_THEN_EXITS.format(code=code)], timeout, warm=False)
    try:
        return runner.run()
    finally:
        runner.close()


def test_exit_code_after_closing_output_is_kept():
    res = _run(0)
    assert res.signal is None and res.code == 0, res.describe()
    assert b"done" in res.stdout


def test_failing_exit_after_closing_output_is_a_failure_not_a_crash():
    res = _run(3)
    assert res.signal is None and res.code == 3, res.describe()


def test_a_check_that_never_exits_after_closing_output_times_out():
    runner = make_runner([sys.executable, "-c", "import os, time; os.close(1); os.close(2); time.sleep(30)"], 1.0,
                         warm=False)
    try:
        res = runner.run()
    finally:
        runner.close()
    assert res.timed_out

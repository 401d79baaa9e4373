"""A runtime that crashes `toolkit run` is reported in one sentence (which runtime, which signal,
which phase) with exit 1, not a silent death with exit 139.

The stand-in crash: ONNX-Runtime's InferenceSession is replaced in the test process (so in the
forked child too) by one that kills its process with SIGSEGV, at session creation or at inference."""

import os
import signal
import subprocess
import sys
import textwrap

import onnxruntime as ort
import pytest

import fp16_models as fm
import modelzoo as mz

_REAL_SESSION = ort.InferenceSession


@pytest.fixture(autouse=True)
def supervised(monkeypatch):
    """As the `toolkit` entry point runs it (in-process calls of main() are not supervised)."""
    from toolkit.core.process import phases

    monkeypatch.setattr(phases, "_ENABLED", [True])


class _CrashOnCreate(_REAL_SESSION):
    def __init__(self, *args, **kwargs):
        os.kill(os.getpid(), signal.SIGSEGV)


class _CrashOnRun(_REAL_SESSION):
    def run(self, *args, **kwargs):
        os.kill(os.getpid(), signal.SIGSEGV)


@pytest.mark.parametrize("session, phase", [(_CrashOnCreate, "session creation"), (_CrashOnRun, "inference")])
def test_a_crash_is_one_sentence_and_exit_1(cli, tmp_path, monkeypatch, session, phase):
    monkeypatch.setattr(ort, "InferenceSession", session)
    model = mz.save(fm.conv_block(17), tmp_path / "m.onnx")
    r = cli("run", model, "--onnxrt")
    assert r.code == 1, r.err
    line = f"error: ONNX-Runtime {ort.__version__} crashed (SIGSEGV) during {phase}, so the run has no result"
    assert line in r.err
    assert r.err.count("error:") == 1


def test_a_run_that_works_keeps_its_output_and_code(cli, tmp_path):
    model = mz.save(fm.conv_block(17), tmp_path / "m.onnx")
    r = cli("run", model, "--onnxrt", "--save-outputs", tmp_path / "o.json")
    assert r.code == 0, r.err
    assert "PASSED" in r.err and (tmp_path / "o.json").exists()
    r = cli("run", tmp_path / "missing.onnx", "--onnxrt")
    assert r.code == 3 and r.err.count("error:") == 1


def test_the_real_entry_point_exits_1_not_139(tmp_path):
    model = mz.save(fm.conv_block(17), tmp_path / "m.onnx")
    code = textwrap.dedent(
        f"""
        import os, signal, sys
        import onnxruntime as ort
        class S(ort.InferenceSession):
            def __init__(self, *a, **k):
                os.kill(os.getpid(), signal.SIGSEGV)
        ort.InferenceSession = S
        sys.argv = ["toolkit", "run", {model!r}, "--onnxrt"]
        from toolkit.cli.app import run
        run()
        """
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert "crashed (SIGSEGV) during session creation" in proc.stderr
    assert "Traceback" not in proc.stderr and "Fatal Python error" not in proc.stderr


@pytest.mark.parametrize("group", [True, False], ids=["process-group", "parent-only"])
def test_an_interrupt_reaches_the_child_once(tmp_path, group):
    """SIGINT to the whole process group (as Ctrl-C in a terminal, or killpg) or to the supervising
    parent alone: one `interrupted` line, exit 130, no traceback."""
    import time

    model = mz.save(fm.conv_block(17), tmp_path / "m.onnx")
    proc = subprocess.Popen(
        [sys.executable, "-m", "toolkit", "run", model, "--onnxrt", "--iterations", "1000000"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True, cwd=tmp_path,
    )  # fmt: skip
    err = b""
    deadline = time.monotonic() + 120
    while b"Iteration 1 " not in err and time.monotonic() < deadline:
        err += os.read(proc.stderr.fileno(), 4096)
    assert b"Iteration 1 " in err
    (os.killpg if group else os.kill)(proc.pid, signal.SIGINT)
    _, tail = proc.communicate(timeout=120)
    text = (err + tail).decode()
    assert proc.returncode == 130, text[-2000:]
    assert "Traceback" not in text and text.count("interrupted") == 1


def test_debug_precision_reports_a_crash_too(cli, tmp_path, monkeypatch):
    monkeypatch.setattr(ort, "InferenceSession", _CrashOnRun)
    model = mz.save(fm.conv_block(17), tmp_path / "m.onnx")
    r = cli("debug", "precision", model)
    assert r.code == 1, r.err
    assert f"error: ONNX-Runtime {ort.__version__} crashed (SIGSEGV) during inference" in r.err

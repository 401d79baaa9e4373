"""A command that runs a model, supervised: the work runs in a forked child, which reports its
phases (which runtime, session creation or inference) through a pipe; when a runtime kills the
child with a signal, the parent says so in one sentence and exits 1, the way a failed inference
is reported, instead of dying silently with exit 139.

The fork happens before any runtime session or device context exists (the child creates them);
it costs one fork of the process (a few milliseconds). Only the ``toolkit`` command-line entry
point turns it on (a library call, or ``main()`` called in process, runs as before);
``TOOLKIT_NO_SUPERVISOR=1`` runs the work in the process itself (for a debugger); ``debug
reduce``'s forked workers never fork again.
"""

import faulthandler
import os
import select
import signal
import sys
import time
from typing import Callable

from toolkit.cli import output
from toolkit.cli.errors import run_with_boundary
from toolkit.core.process import phases
from toolkit.core.process.phases import INTERRUPTED
from toolkit.core.process.supervise import fork, signal_name
from toolkit.core.errors import InferenceError


def run_supervised(body: Callable[[], int]) -> int:
    """``body()`` (an exit code), in a forked child when supervision applies; see the module docstring."""
    if not phases.supervision_enabled():
        return body()
    _flush()  # (nothing buffered may be written twice)
    read_fd, write_fd = os.pipe()
    pid = fork()  # (the child dies with this process: never a run that outlives its command)
    if pid == 0:
        os.close(read_fd)
        _child(body, write_fd)
    os.close(write_fd)
    return _parent(pid, read_fd)


def _child(body: Callable[[], int], fd: int) -> None:
    code = 70
    try:
        faulthandler.disable()  # (a crash is the parent's to report, in one sentence)
        phases.set_phase_fd(fd)
        code = run_with_boundary(body)
    finally:
        _flush()
        os._exit(code)


def _flush() -> None:
    """stdout, stderr and the --log-file."""
    for stream in (sys.stdout, sys.stderr, output.state.log_file):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            pass


_FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _parent(pid: int, fd: int) -> int:
    """Wait for the child: its exit code, or InferenceError naming the crash.

    While it waits, SIGINT, SIGTERM and SIGHUP are blocked here and taken one by one: one sent
    to this process alone (``kill PID``: a user-sent signal) is passed on to the child, which
    reports it as a plain run does; one the terminal sent (Ctrl-C, a hang-up) reached the child
    too, and is not sent twice."""
    old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, _FORWARDED)
    try:
        chunks = _collect(pid, fd)
        _, status = os.waitpid(pid, 0)
    finally:
        os.close(fd)
        while signal.sigtimedwait(_FORWARDED, 0) is not None:
            pass  # (taken: the child had them)
        signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
    if not os.WIFSIGNALED(status):
        return os.waitstatus_to_exitcode(status)
    _remove_temp_files(b"".join(chunks))
    runtime, phase = phases.last_phase(b"".join(chunks))
    raise InferenceError(crash_sentence(runtime, phase, os.WTERMSIG(status)))


def _remove_temp_files(reported: bytes) -> None:
    """The temp files of a child that died by a signal (they would be left behind otherwise)."""
    for path in phases.temp_files(reported):
        try:
            os.unlink(path)
        except OSError:
            pass  # (renamed into place, or removed, before the child died)


def _collect(pid: int, fd: int) -> list:
    """What the child writes to the pipe until it closes it, passing signals on meanwhile: a signal
    sent to this process (not by the terminal) goes to the child unless the child reports within
    0.2 s that it got one itself (``kill`` of the whole process group reaches both)."""
    chunks: list = []
    pending: dict = {}  # signal -> when to pass it on
    while True:
        ready, _, _ = select.select([fd], [], [], 0.05)
        if ready:
            chunk = os.read(fd, 65536)
            if not chunk:
                return chunks
            chunks.append(chunk)
            if INTERRUPTED.encode() in chunk:
                pending.clear()
        _take_signals(pending)
        now = time.monotonic()
        for num in [n for n, when in pending.items() if when <= now]:
            del pending[num]
            os.kill(pid, num)


def _take_signals(pending: dict) -> None:
    while True:
        info = signal.sigtimedwait(_FORWARDED, 0)
        if info is None:
            return
        if info.si_code <= 0:  # SI_USER, SI_QUEUE, SI_TKILL: sent to this process, not by the terminal
            pending.setdefault(info.si_signo, time.monotonic() + 0.2)


def crash_sentence(runtime: str, phase: str, signum: int) -> str:
    """'ONNX-Runtime 1.32.0 crashed (SIGSEGV) during session creation: ...'."""
    name = signal_name(signum)
    if signum in (signal.SIGKILL,) and not phase:
        return f"the command was killed ({name}) before any runtime ran: out of memory, or killed from outside"
    if not runtime:
        return f"the command crashed ({name}) before any runtime ran"
    advice = (
        "; try another graph optimization level (--ort-optimization basic) or keep nodes in fp32"
        if runtime.startswith("ONNX-Runtime")
        else ""
    )
    return f"{runtime} crashed ({name}) during {phase}, so the run has no result{advice}"

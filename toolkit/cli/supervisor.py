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
import signal
import sys
from typing import Callable

from toolkit.cli.errors import run_with_boundary
from toolkit.core import supervise
from toolkit.core.errors import InferenceError


def run_supervised(body: Callable[[], int]) -> int:
    """``body()`` (an exit code), in a forked child when supervision applies; see the module docstring."""
    if not supervise.supervision_enabled():
        return body()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()  # (nothing buffered may be written twice)
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        _child(body, write_fd)
    os.close(write_fd)
    return _parent(pid, read_fd)


def _child(body: Callable[[], int], fd: int) -> None:
    code = 70
    try:
        faulthandler.disable()  # (a crash is the parent's to report, in one sentence)
        supervise.set_phase_fd(fd)
        code = run_with_boundary(body)
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)


def _parent(pid: int, fd: int) -> int:
    """Wait for the child: its exit code, or InferenceError naming the crash."""
    forward = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP)}
    old_int = signal.signal(signal.SIGINT, signal.SIG_IGN)  # (the child gets Ctrl-C and reports it)
    for s in forward:
        signal.signal(s, lambda num, _frame: os.kill(pid, num))
    try:
        chunks = []
        while True:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            chunks.append(chunk)
        _, status = os.waitpid(pid, 0)
    finally:
        os.close(fd)
        signal.signal(signal.SIGINT, old_int)
        for s, handler in forward.items():
            signal.signal(s, handler)
    if not os.WIFSIGNALED(status):
        return os.waitstatus_to_exitcode(status)
    runtime, phase = supervise.last_phase(b"".join(chunks))
    raise InferenceError(crash_sentence(runtime, phase, os.WTERMSIG(status)))


def crash_sentence(runtime: str, phase: str, signum: int) -> str:
    """'ONNX-Runtime 1.32.0 crashed (SIGSEGV) during session creation: ...'."""
    name = supervise.signal_name(signum)
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

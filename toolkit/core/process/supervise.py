"""Work that may crash the process (a runtime's SIGSEGV), run in a forked child.

A runtime that dies by a signal takes the whole process with it: no exception, no message, exit
139. Run in a forked copy of this process, the same work becomes a finding: the parent learns
which signal killed the child and which phase the child had reported last (``session creation``,
``inference``) and can say so in one sentence.

The child inherits everything already imported and loaded (fork: no new interpreter, no
re-import; tens of milliseconds for a warm process). It reports its phases and its result through
a pipe, as pickled frames; a Python exception in the child comes back as an exception of the
same type in the parent. Fork where no runtime session is live in the parent (a live thread pool
is not copied into the child).

No Typer or Rich here.
"""

from __future__ import annotations

import faulthandler
import os
import pickle
import select
import signal
import struct
import sys
import threading
import time
from dataclasses import dataclass
from typing import Callable, Optional

from toolkit.core.contain import carried

_HEADER = struct.Struct("<Q")


@dataclass
class ChildOutcome:
    """How the child ended: its result, or the signal that killed it (and the phase it was in)."""

    value: object = None
    signal: Optional[int] = None  # the signal that killed the child, None when it returned
    phase: str = ""  # the last phase the child reported
    exit_code: Optional[int] = None  # the child's exit status when it exited without a result

    @property
    def crashed(self) -> bool:
        return self.signal is not None or self.exit_code is not None

    @property
    def signal_name(self) -> str:
        return signal_name(self.signal) if self.signal is not None else f"exit {self.exit_code}"


def signal_name(num: Optional[int]) -> str:
    """'SIGSEGV' for 11 (the number when the name is unknown)."""
    try:
        return signal.Signals(int(num or 0)).name
    except ValueError:
        return f"signal {num}"


# A forked child never collects, through the cycle collector, objects it inherited: their
# destructors may wait on locks or condition variables that threads of the parent held at the fork
# (seen: an ONNX-Runtime object blocking the child forever in pthread_cond_destroy). What the child
# creates itself is collected as usual.
if hasattr(os, "register_at_fork"):
    import gc

    os.register_at_fork(after_in_child=gc.freeze)


def can_fork() -> bool:
    return hasattr(os, "fork")


PR_SET_PDEATHSIG = 1
_PRCTL: list = []


def _prctl():
    """libc's prctl on Linux (looked up once, in the parent: a child between fork and exec
    should not load libraries), else None."""
    if not _PRCTL:
        func = None
        if sys.platform.startswith("linux"):
            try:
                import ctypes

                func = getattr(ctypes.CDLL(None, use_errno=True), "prctl", None)  # None: a libc without it
            except OSError:
                func = None
        _PRCTL.append(func)
    return _PRCTL[0]


def prepare_fork():
    """Call in the parent before :func:`die_with_parent` runs in a child (loads what it needs)."""
    return _prctl()


def die_with_parent(parent: int) -> None:  # pragma: no cover - runs in the child
    """In a forked child: be killed when ``parent`` dies, however it dies (SIGKILL included).
    Linux: the kernel's parent-death signal (SIGKILL). Elsewhere: a thread that ends the child
    once it has been handed to another parent (its parent id changes)."""
    prctl = _PRCTL[0] if _PRCTL else None
    if prctl is not None:
        prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    elif hasattr(os, "getppid"):

        def watch() -> None:
            while os.getppid() == parent:
                time.sleep(0.2)
            os._exit(1)

        threading.Thread(target=watch, name="toolkit-parent-watch", daemon=True).start()
    if os.getppid() != parent:  # the parent died before the line above
        os._exit(1)


# The signals that end a command (toolkit.cli.signals turns each into KeyboardInterrupt).
STOPPING = tuple(getattr(signal, n) for n in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, n))


# [True] in a shielded child (see :func:`fork`): its parent kills it on a signal, so work in it
# need not be forked off again to stay interruptible.
SHIELDED: list = [False]


def fork(*, shielded: bool = False) -> int:
    """``os.fork()``, the child dying with this process (see :func:`die_with_parent`);
    ``shielded``: the child ignores SIGINT, SIGTERM and SIGHUP (its parent decides).

    A signal that comes during the fork is not lost: a handler run inside the fork's own hooks
    (``os.register_at_fork``: logging's, for one) has its exception ignored by Python, so the
    handlers only note signals meanwhile; once the fork is done the parent raises them again
    (the child, just made, is then killed and reaped)."""
    prepare_fork()
    parent = os.getpid()
    held: list = []
    saved = _note_signals(held)
    pid = os.fork()
    if pid == 0:
        die_with_parent(parent)
        for num, handler in saved.items():
            signal.signal(num, signal.SIG_IGN if shielded else handler)
        SHIELDED[:] = [shielded]
        return 0
    _restore_signals(saved, held, pid)
    return pid


def _note_signals(held: list) -> dict:
    """{signal: its handler}, each replaced by one that appends to ``held`` (main thread only:
    elsewhere no handler runs, and nothing is replaced)."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    saved = {}
    for num in STOPPING:
        if signal.getsignal(num) is not None:  # (None: a handler not set from Python, left alone)
            saved[num] = signal.signal(num, lambda n, _f: held.append(n))
    return saved


def _restore_signals(saved: dict, held: list, pid: int) -> None:
    """In the parent after the fork: the handlers back, the noted signals raised again."""
    try:
        for num, handler in saved.items():
            signal.signal(num, handler)
        for num in dict.fromkeys(held):
            signal.raise_signal(num)
    except BaseException:  # (the signal's KeyboardInterrupt: the child is not handed to the caller)
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except OSError:
            pass
        raise


def run_in_child(work: Callable[..., object], *args) -> ChildOutcome:
    """``work(phase, *args)`` in a forked child; ``phase(name)`` reports the phase it is in.

    The child's return value comes back (it must pickle); an exception it raises is raised here.
    Where fork does not exist, ``work`` runs in this process (no crash protection)."""

    return start_child(work, *args).wait()


class Child:
    """A forked child running ``work(phase, *args)`` (see :func:`start_child`); :meth:`wait`
    gives its outcome, :meth:`kill` ends it.

    The one way this package computes in a child process:

    - the child dies with this process, however this process dies (:func:`fork`);
    - it streams pickled frames through a pipe: the phases it reports, the temp files it makes
      (:func:`toolkit.core.process.phases.report_temp`), then its value or its exception;
    - :meth:`wait` waits in short selects, where this process's signal handlers run: a signal's
      exception (KeyboardInterrupt) kills the child (SIGKILL), reaps it and is raised;
    - a child that ends without a result (killed by a signal, by this process, or out of memory;
      or exited: ``sys.exit()`` called by the work, which ends the child, not this process) leaves
      no temp file: this process removes the ones it reported;
    - ``shielded`` (the default): the child ignores SIGINT, SIGTERM and SIGHUP (a Ctrl-C reaches
      the whole process group): this process alone decides, and kills it (in :meth:`wait`, or
      its caller through :meth:`kill`; at the latest the kernel, when this process exits).
    """

    def __init__(self, work: Callable[..., object], args: tuple, *, shielded: bool = True) -> None:
        self._outcome: Optional[ChildOutcome] = None
        self._error: Optional[BaseException] = None
        self._temp: list = []
        self._fd: Optional[int] = None
        self.pid = 0
        if not can_fork():
            got = carried(work, lambda _name: None, *args)  # (raised by wait(), as from a child)
            self._outcome, self._error = ChildOutcome(value=got.value), got.error
            if isinstance(got.error, SystemExit):  # (as from a child: an exit without a result)
                self._outcome, self._error = ChildOutcome(exit_code=exit_status(got.error)), None
            return
        for stream in (sys.stdout, sys.stderr):  # (nothing buffered may be written twice)
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        read_fd, write_fd = os.pipe()
        _widen(write_fd)
        try:
            pid = fork(shielded=shielded)
        except BaseException:
            os.close(read_fd)
            os.close(write_fd)
            raise
        if pid == 0:  # the child
            os.close(read_fd)
            _child(work, args, write_fd)
        os.close(write_fd)
        self.pid, self._fd = pid, read_fd

    def wait(self) -> ChildOutcome:
        """The child's outcome (waits for it once; an exception it raised is raised here)."""
        if self._outcome is None and self._error is None:
            try:
                assert self._fd is not None
                data = _read_all(self._fd)
                _, status = os.waitpid(self.pid, 0)
            except BaseException:  # a signal (KeyboardInterrupt): the child ends before this process goes on
                self.kill()
                raise
            finally:
                self._close_pipe()
            self.pid = 0
            ended = carried(self._ended, read_frames(data), status)  # (its exception: raised on every wait())
            self._outcome, self._error = ended.value, ended.error
        if self._error is not None:
            raise self._error
        assert self._outcome is not None
        return self._outcome

    def kill(self) -> None:
        """End the child now (SIGKILL) and reap it; its temp files are removed."""
        if self.pid:
            try:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
            self.pid = 0
            self._close_pipe()
            _remove(self._temp)

    def _close_pipe(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def _ended(self, frames: list, status: int) -> ChildOutcome:
        from toolkit.core.process.phases import reported_temps

        self._temp = reported_temps([f for f in frames if f[0] in ("temp", "untemp")])
        out = _outcome(frames, status)  # (raises the child's exception)
        if out.crashed:
            _remove(self._temp)
        return out


def start_child(work: Callable[..., object], *args, shielded: bool = True) -> Child:
    """``work(phase, *args)`` started in a forked child, running while this process goes on."""
    return Child(work, args, shielded=shielded)


def _child(work: Callable[..., object], args: tuple, fd: int) -> None:
    """Run ``work`` and send its result (never returns). When the pipe itself fails, the parent
    sees exit code 70 and no result; when ``work`` calls ``sys.exit()``, the code it gives and no
    result."""
    code = 70
    try:
        served = carried(_serve, work, args, fd)
        if served.error is None:
            code = served.value or 0
    finally:
        os._exit(code)


def exit_status(exc: SystemExit) -> int:
    """The exit status Python gives a process that ends by ``exc`` (``sys.exit(None)``: 0, a number:
    itself, anything else: 1)."""
    if exc.code is None:
        return 0
    return exc.code & 0xFF if isinstance(exc.code, int) else 1


def _serve(work: Callable[..., object], args: tuple, fd: int) -> int:
    """In the child: run ``work``, every frame to ``fd``, its failure too (raised by the parent);
    returns the child's exit status. ``work`` calling ``sys.exit()`` (a library's, a custom op's
    own exit) sends no result: the parent sees a child that exited with that status (a crash, as
    for a child killed by a signal), never a ``SystemExit`` of its own (a command that "succeeded"
    with nothing done)."""
    faulthandler.disable()  # (a crash is the parent's to report: no traceback dump of its own)
    from toolkit.core.process import phases

    phases.set_phase_fd(None)  # (this child reports to its own parent, in frames)
    with os.fdopen(fd, "wb") as pipe:
        phases.set_temp_hook(lambda kind, path: send_frame(pipe, (kind, path)))

        def phase(name: str) -> None:
            send_frame(pipe, ("phase", name))

        got = carried(work, phase, *args)
        if isinstance(got.error, SystemExit):
            return exit_status(got.error)
        frame = ("value", got.value) if got.error is None else ("error", picklable(got.error))
        sent = carried(send_frame, pipe, frame, catching=Exception)  # (a value that does not pickle: a finding)
        if sent.error is not None:
            send_frame(pipe, ("error", RuntimeError(f"the child's result could not be sent back: {sent.error}")))
    return 0


def send_frame(pipe, frame) -> None:
    """Write one frame (a picklable value) to the binary file ``pipe``: its length, then its pickle."""
    data = pickle.dumps(frame, protocol=pickle.HIGHEST_PROTOCOL)
    pipe.write(_HEADER.pack(len(data)))
    pipe.write(data)
    pipe.flush()


def picklable(exc: BaseException) -> BaseException:
    """``exc``, or a RuntimeError naming it when it does not survive pickling (sent from a child)."""
    # (pickling an object may raise anything its class's reduction raises)
    trip = carried(lambda: pickle.loads(pickle.dumps(exc)), catching=Exception)
    return exc if trip.error is None else RuntimeError(f"{type(exc).__name__}: {exc}")


_F_SETPIPE_SZ = 1031  # (Linux)


def _widen(fd: int) -> None:
    """A pipe of 1 MiB where Linux allows it (a result of megabytes then crosses in a few
    writes, not in hundreds of 64 KiB turns between the two processes)."""
    if sys.platform.startswith("linux"):
        try:
            import fcntl

            fcntl.fcntl(fd, _F_SETPIPE_SZ, 1 << 20)
        except OSError:
            pass


def _read_all(fd: int) -> bytes:
    """Everything written to ``fd`` until it closes, waiting where a signal handler can run."""
    chunks: list = []
    while True:
        ready, _, _ = select.select([fd], [], [], 0.05)
        if not ready:
            continue
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def read_frames(data: bytes) -> list:
    """The complete frames in ``data``, as :func:`send_frame` wrote them (a dying child may leave
    the last one cut)."""
    frames: list = []
    pos, view = 0, memoryview(data)
    while pos + _HEADER.size <= len(data):
        (size,) = _HEADER.unpack_from(data, pos)
        pos += _HEADER.size
        if pos + size > len(data):
            break
        frames.append(pickle.loads(view[pos:pos + size]))
        pos += size
    return frames


def _remove(paths: list) -> None:
    for path in paths:
        try:
            os.unlink(path)
        except OSError:
            pass  # (renamed into place, or removed, before the child ended)


def _outcome(frames: list, status: int) -> ChildOutcome:
    out = ChildOutcome()
    for kind, payload in frames:
        if kind == "phase":
            out.phase = payload
        elif kind == "error":
            raise payload
        elif kind == "value":
            return ChildOutcome(value=payload, phase=out.phase)
    if os.WIFSIGNALED(status):
        out.signal = os.WTERMSIG(status)
    else:
        out.exit_code = os.waitstatus_to_exitcode(status)
    return out

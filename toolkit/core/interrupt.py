"""Long library calls that a signal still ends: Ctrl-C, SIGTERM or SIGHUP stop the command
within a fraction of a second however long the call would run.

Python runs a signal handler only between bytecodes of the main thread, so a call that stays
inside C++ holds the signal back until it returns:

- onnx's shape inference holds the GIL for the whole call (minutes on a big model): no thread
  of this process runs meanwhile. :func:`call_in_child` runs such a call in a forked child
  (it inherits the model, nothing is copied in) and waits for its answer where a signal reaches
  Python; the interrupted parent kills the child (SIGKILL) and reaps it before going on, and a
  child whose parent dies is killed by the kernel (Linux' parent-death signal) or notices it.
- ONNX-Runtime's ``InferenceSession.run`` releases the GIL but keeps the main thread (a Loop of
  10^12 steps runs for days). :func:`interruptible_run` runs it in a helper thread; on a signal it
  sets the run's ``terminate`` flag, which ONNX-Runtime checks between nodes, so the helper
  stops too.

No numpy, onnx or Typer here (onnxruntime only inside :func:`run_session`).
"""

from __future__ import annotations

import faulthandler
import os
import pickle
import select
import signal
import threading
from typing import Callable, Optional, Sequence, TypeVar

from toolkit.core.supervise import fork, picklable, signal_name

T = TypeVar("T")

_STOPPED = tuple(getattr(signal, n) for n in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, n))



def can_isolate() -> bool:
    """A child can run the call: fork exists and this is the main thread (only it gets signals)."""
    return hasattr(os, "fork") and threading.current_thread() is threading.main_thread()


def call_in_child(fn: Callable[..., T], *args, what: str = "the library call") -> T:
    """``fn(*args)`` computed in a forked child; its result (which must pickle) or its exception
    comes back. A signal to this process kills the child and is raised here as usual. A child
    killed by a signal of its own (out of memory) is a RuntimeError naming ``what``. Where
    fork does not exist, or off the main thread, ``fn`` runs here."""
    if not can_isolate():
        return fn(*args)
    read_fd, write_fd = os.pipe()
    pid = fork()  # (the child dies with this process: core.supervise)
    if pid == 0:  # the child
        os.close(read_fd)
        _child(fn, args, write_fd)
    os.close(write_fd)
    try:
        data = _read_all(read_fd)
        _, status = os.waitpid(pid, 0)
    except BaseException:  # a signal (KeyboardInterrupt): the child ends with this process
        _kill(pid)
        raise
    finally:
        os.close(read_fd)
    if not data:
        raise RuntimeError(f"{what} ended without a result ({_status_text(status)}); out of memory?")
    kind, payload = pickle.loads(data)
    if kind == "error":
        raise payload
    return payload


def _child(fn: Callable, args: tuple, fd: int) -> None:
    """Run ``fn``, send ("value", result) or ("error", exception), exit (never returns)."""
    code = 0
    try:
        faulthandler.disable()
        for num in _STOPPED:  # (the parent decides: it kills this child when a signal comes)
            signal.signal(num, signal.SIG_IGN)
        try:
            frame: tuple = ("value", fn(*args))
        except BaseException as exc:  # noqa: BLE001 - every failure goes back to the parent
            frame = ("error", picklable(exc))
        data = pickle.dumps(frame, protocol=pickle.HIGHEST_PROTOCOL)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view[: 1 << 20]):]
    except BaseException:  # noqa: BLE001 - the pipe itself failed: the parent sees no result
        code = 70
    finally:
        os._exit(code)




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


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except (ProcessLookupError, ChildProcessError):
        pass


def _status_text(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"killed by {signal_name(os.WTERMSIG(status))}"
    return f"exit {os.waitstatus_to_exitcode(status)}"


def interruptible_run(sess, names: Optional[Sequence[str]], feed) -> list:
    """``sess.run(names, feed)`` (an ONNX-Runtime session) where a signal ends it: the run goes
    on in a helper thread (ONNX-Runtime releases the GIL) while the main thread waits in short
    joins; a signal's exception stops the run through its ``terminate`` flag and is raised here."""
    import onnxruntime as ort  # (its callers have imported it: free)

    if threading.current_thread() is not threading.main_thread() or not isinstance(sess, ort.InferenceSession):
        return sess.run(names, feed)  # (a wrapper runs its own session through this function)

    options = ort.RunOptions()
    box: dict = {}

    def target() -> None:
        try:
            box["value"] = sess.run(names, feed, options)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            box["error"] = exc

    helper = threading.Thread(target=target, name="toolkit-inference", daemon=True)
    helper.start()
    try:
        while helper.is_alive():
            helper.join(0.05)
    except BaseException:
        options.terminate = True  # (ONNX-Runtime stops between nodes; the thread then ends)
        raise
    if "error" in box:
        raise box["error"]
    return box["value"]

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
  stops too. The same flag gives a run a time bound where one is asked for (a Loop whose
  condition stays true runs forever).

No numpy, onnx or Typer here (onnxruntime only inside :func:`run_session`).
"""

from __future__ import annotations

import os
import threading
import time
from typing import Callable, Optional, Sequence, TypeVar

from toolkit.core.contain import carried
from toolkit.core.process.supervise import SHIELDED, Child

T = TypeVar("T")


def can_isolate() -> bool:
    """A child can run the call: fork exists and this is the main thread (only it gets signals)."""
    return hasattr(os, "fork") and threading.current_thread() is threading.main_thread()


def call_in_child(fn: Callable[..., T], *args, what: str = "the library call") -> T:
    """``fn(*args)`` computed in a forked child (:class:`toolkit.core.process.supervise.Child`, shielded
    from signals); its result (which must pickle) or its exception comes back. A signal to this
    process kills the child and is raised here as usual. A child killed by a signal of its own
    (out of memory), or one that exits without a result (``sys.exit()`` called in ``fn``), is a
    RuntimeError naming ``what``. Where fork does not exist, off the main
    thread, or in a shielded child already (a signal ends it through its parent), ``fn`` runs here."""
    if not can_isolate() or SHIELDED[0]:  # (in a shielded child, the parent kills this process on a signal)
        return fn(*args)
    got = Child(_call, (fn, args), shielded=True).wait()
    if got.crashed:
        why = "out of memory?" if got.signal is not None else "something it ran called exit()"
        raise ChildDied(f"{what} ended without a result ({_ended(got)}); {why}")
    return got.value  # type: ignore[return-value]


class ChildDied(RuntimeError):
    """The child of :func:`call_in_child` ended without a result (killed by a signal: out of memory;
    or exited: something it ran called ``sys.exit()``)."""


def _call(_phase, fn: Callable, args: tuple):
    return fn(*args)


def _ended(got) -> str:
    return f"killed by {got.signal_name}" if got.signal is not None else got.signal_name


class RunTimedOut(RuntimeError):
    """A run given a time bound (:func:`interruptible_run`'s ``seconds``) did not end within it."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"the run did not end within {seconds:g} s")
        self.seconds = seconds

    def __reduce__(self):
        return RunTimedOut, (self.seconds,)


def interruptible_run(sess, names: Optional[Sequence[str]], feed, seconds: Optional[float] = None) -> list:
    """``sess.run(names, feed)`` (an ONNX-Runtime session) where a signal ends it: the run goes
    on in a helper thread (ONNX-Runtime releases the GIL) while the main thread waits in short
    joins; a signal's exception stops the run through its ``terminate`` flag and is raised here.

    ``seconds``: a time bound (any thread): past it the ``terminate`` flag stops the run (between
    two nodes, Loop steps included) and :class:`RunTimedOut` is raised."""
    import onnxruntime as ort  # (its callers have imported it: free)

    if not isinstance(sess, ort.InferenceSession):
        return sess.run(names, feed)  # (a wrapper runs its own session through this function)
    if seconds is None and threading.current_thread() is not threading.main_thread():
        return sess.run(names, feed)
    options = ort.RunOptions()
    end = None if seconds is None else time.monotonic() + max(seconds, 0.0)
    got, expired = _run_in_helper(sess, names, feed, options, end)
    if got.error is not None and expired:
        raise RunTimedOut(float(seconds or 0.0)) from None
    return got.get()


def _run_in_helper(sess, names, feed, options, end: Optional[float] = None):
    """``sess.run`` in a helper thread, waited for in short joins (see :func:`interruptible_run`),
    its ``terminate`` flag set once the clock passes ``end`` (None: never): (its value or its
    exception, carried; whether it ran past ``end``)."""
    box: list = []
    helper = threading.Thread(target=lambda: box.append(carried(sess.run, names, feed, options)), name="toolkit-inference",
                              daemon=True)
    helper.start()
    expired = False
    try:
        while helper.is_alive():
            helper.join(0.05)
            if end is not None and not expired and time.monotonic() >= end:
                options.terminate = True  # (ONNX-Runtime stops between nodes, Loop steps included)
                expired = True
    except BaseException:
        options.terminate = True  # (ONNX-Runtime stops between nodes; the thread then ends)
        raise
    return box[0], expired

"""SIGINT, SIGTERM and SIGHUP while a command runs: never lost, never a traceback.

Each ends the command as Ctrl-C does (KeyboardInterrupt: temp files removed, ``debug reduce``
writes what it has, the running check is killed, exit 130); a second one while that cleanup
runs is ignored (a second SIGINT interrupts the cleanup). Which signal came is kept for the
message.

A signal that lands while a module is being imported is held until that import ends: raised
inside an import, KeyboardInterrupt can leave a module half-initialised (a C extension then
reports itself as missing, a second import fails). The hold costs no thread and no timer: the
signal is noted, a profile hook waits for the outermost import frame to return, and the signal
is raised again right there: the KeyboardInterrupt comes out of the ``import`` statement of the
code that asked for the import, the module complete. Nothing can end the
process in between (an ``os._exit`` after the import runs only after that frame got the
signal), so no signal is ever lost.

Only the main thread can set handlers; elsewhere nothing changes.
"""

from __future__ import annotations

import signal
import sys
import threading
from typing import Callable, Dict, List, Optional

NAMES = ("SIGINT", "SIGTERM", "SIGHUP")


def _import_top(frame):
    """The outermost import frame ``frame`` runs in (importlib's frames on the stack), or None;
    None too when that frame is the one returning now, whose held signals are being raised."""
    top, depth = None, 0
    while frame is not None and depth < 1000:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            top = frame
        frame, depth = frame.f_back, depth + 1
    if top is not None and top is _HELD.returning:
        return None  # (the import is complete: its module is in sys.modules)
    return top


class _Held:
    """Signals that arrived during an import, raised again when the import's outermost frame returns."""

    def __init__(self) -> None:
        self.pending: List[int] = []
        self.top = None
        self.returning = None  # the import frame returning while its held signals are raised
        self.previous: Optional[Callable] = None

    def hold(self, signum: int, top) -> None:
        if signum not in self.pending:
            self.pending.append(signum)
        if self.top is not None:
            return
        self.top, self.previous = top, sys.getprofile()
        sys.setprofile(self._watch)

    def _watch(self, frame, event, arg):
        if event == "return" and frame is self.top:
            self.release()
        elif self.previous is not None:
            self.previous(frame, event, arg)

    def release(self) -> None:
        """Raise the held signals again (their handlers run at the next statement)."""
        if self.top is None:
            return
        sys.setprofile(self.previous)
        self.returning, self.top, self.previous = self.top, None, None
        pending, self.pending = self.pending, []
        try:
            for num in pending:
                signal.raise_signal(num)  # (its handler runs here, in this frame or the next)
        finally:
            self.returning = None


_HELD = _Held()


def handler(signum, frame) -> None:
    """The command's handler: KeyboardInterrupt, held while an import runs."""
    from toolkit.cli import output
    from toolkit.core.process.phases import report_interrupted

    top = _import_top(frame)
    if top is not None:
        _HELD.hold(signum, top)
        return
    first = output.state.signal is None
    output.state.signal = signum
    report_interrupted()  # (a supervising parent passes on no second copy of it)
    if signum == signal.SIGINT or first:
        raise KeyboardInterrupt


class handled:
    """The command's handlers while the ``with`` block runs (see the module docstring)."""

    def __enter__(self):
        self.old: Dict[int, object] = {}
        if threading.current_thread() is not threading.main_thread():
            return self
        for name in NAMES:
            num = getattr(signal, name, None)
            if num is None:
                continue
            current = signal.getsignal(num)
            default = signal.default_int_handler if name == "SIGINT" else signal.SIG_DFL
            if current is not default and not getattr(current, "toolkit_early", False):
                continue  # ignored (a background job, nohup) or handled by someone else: leave it
            try:
                self.old[num] = signal.signal(num, handler)
            except (ValueError, OSError):  # pragma: no cover - not settable here
                pass
        return self

    def __exit__(self, *exc):
        for num, old in self.old.items():
            if getattr(old, "toolkit_early", False):
                old.ended = True  # type: ignore[attr-defined]  # (its line then says the command had ended)
            try:
                signal.signal(num, old)  # type: ignore[arg-type]
            except (ValueError, OSError):  # pragma: no cover
                pass
        _HELD.release()  # (one still held, the with block having ended inside an import: to those handlers)
        return False

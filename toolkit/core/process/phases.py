"""Phases of a supervised process, reported to its parent through a pipe (one short write each).

Kept apart from :mod:`toolkit.core.process.supervise` (which pickles results) so that the CLI and the
backends import only ``os``: every command pays for this import, ``toolkit --help`` included.

No Typer or Rich here.
"""

from __future__ import annotations

import os
from typing import Callable, List, Optional, Tuple

# The write end of the pipe to the supervising parent (see toolkit.cli.supervisor); None when
# this process is not supervised: reporting a phase is then a no-op.
_PHASE_FD: Optional[int] = None


def set_phase_fd(fd: Optional[int]) -> None:
    global _PHASE_FD
    _PHASE_FD = fd


# the phase a supervised child reports when a signal interrupts it (its parent then does not pass on
# the same signal a second time)
INTERRUPTED = "\tinterrupted\n"


def report_interrupted() -> None:
    """Tell the supervising parent (if any) that a signal reached this process."""
    report_phase("", INTERRUPTED.strip())


def supervised() -> bool:
    """Whether this process reports its phases to a supervising parent."""
    return _PHASE_FD is not None


def report_phase(runtime: str, phase: str) -> None:
    """Tell the supervising parent (if any) that ``runtime`` is in ``phase`` (one short write)."""
    if _PHASE_FD is None:
        return
    try:
        os.write(_PHASE_FD, f"{runtime}\t{phase}\n".encode())
    except OSError:
        pass


# In a child of toolkit.core.process.supervise.Child: how a temp file is reported to its parent (in frames).
_TEMP_HOOK: List[Callable[[str, str], None]] = []


def set_temp_hook(hook: Optional[Callable[[str, str], None]]) -> None:
    _TEMP_HOOK[:] = [hook] if hook is not None else []


def report_temp(path: str, made: bool = True) -> None:
    """Tell the supervising parent (if any) that this process makes the temp file ``path`` (told
    before the file is made, so no moment is left where it exists untold): if the process dies by
    a signal before renaming or removing it, the parent removes it. ``made=False`` takes it back:
    the name was another's (the exclusive create failed), which the parent must never remove."""
    kind = "temp" if made else "untemp"
    if _TEMP_HOOK:
        try:
            _TEMP_HOOK[0](kind, os.path.abspath(path))
        except (OSError, ValueError):  # the parent is gone (a broken pipe, or it was closed): nothing to tell
            pass
        return
    if _PHASE_FD is None or "\n" in path:
        return
    try:
        os.write(_PHASE_FD, f"\t{kind}\t{os.path.abspath(path)}\n".encode("utf-8", "surrogateescape"))
    except OSError:
        pass


def reported_temps(reports) -> List[str]:
    """The temp files of ``reports`` ((kind, path) in order): each told, less those taken back."""
    out: List[str] = []
    for kind, path in reports:
        if kind == "temp":
            out.append(path)
        elif kind == "untemp" and path in out:
            out.remove(path)
    return out


def temp_files(data: bytes) -> List[str]:
    """The temp files a child reported (:func:`report_temp`) in ``data``."""
    reports = []
    for line in data.decode("utf-8", "surrogateescape").split("\n")[:-1]:
        for kind in ("temp", "untemp"):
            if line.startswith(f"\t{kind}\t"):
                reports.append((kind, line[len(kind) + 2:]))
    return reported_temps(reports)


def last_phase(data: bytes) -> Tuple[str, str]:
    """(runtime, phase) of the last complete line of ``data`` (('', '') when there is none)."""
    lines = [line for line in data.decode(errors="replace").split("\n")[:-1] if "\t" in line and line[0] != "\t"]
    if not lines:
        return "", ""
    runtime, phase = lines[-1].split("\t", 1)
    return runtime, phase


# Off until the command-line entry point turns it on: a library call, or the CLI's main() called
# in process (tests), runs in its own process as before.
_ENABLED = [False]


def enable_supervision() -> None:
    """Supervise this process's runs (the ``toolkit`` command-line entry point)."""
    _ENABLED[0] = True


def disable_supervision() -> None:
    """No supervising fork in this process (a forked warm worker of ``debug reduce``: its parent
    already counts a death by signal as a failure, and a second fork per check costs time)."""
    _ENABLED[0] = False


def supervision_enabled() -> bool:
    return _ENABLED[0] and hasattr(os, "fork") and not supervised() and not os.environ.get("TOOLKIT_NO_SUPERVISOR")

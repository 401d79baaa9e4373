"""One ``debug reduce`` run owns its iteration artifact and replay file.

Two runs in one folder with the default names would write the same
``polygraphy_debug.onnx`` and ``polygraphy_debug_replay.json``, and each one's check would
see the other's candidates. A run therefore takes an exclusive ``flock`` on a hidden lock
file beside each of those paths (``.polygraphy_debug.onnx.lock``) before it writes anything;
a second run that finds one taken stops at once. The kernel drops the lock when its process
ends, however it ends (SIGKILL included), so a run that died never blocks the next one; a
lock file it leaves behind is removed and made afresh. The lock file is always one this run
created itself (:func:`toolkit.core.files.create.take_lock`): a file or link found under that name is
never opened for writing. Where ``fcntl`` does not exist, nothing is locked.

No Typer or Rich here.
"""

from __future__ import annotations

import os
from typing import Dict, List, Optional, Sequence, Tuple

from toolkit.core.files.create import release_lock, take_lock
from toolkit.core.errors import InputError


def lock_path(path: str) -> str:
    """``dir/name`` -> ``dir/.name.lock``."""
    folder, name = os.path.split(os.path.abspath(path))
    return os.path.join(folder, f".{name}.lock")


def _take(path: str) -> Tuple[Optional[int], str]:
    """(fd holding the lock, "") or (None, the holder's pid as written in the file); (-1, "")
    when no lock file can be made there (the run's own writes then report the folder)."""
    return take_lock(lock_path(path))


class Ownership:
    """The locks of one run on ``paths`` (taken by :meth:`acquire`, dropped by :meth:`release`)."""

    def __init__(self, paths: Sequence[str]):
        first: Dict[str, str] = {}  # absolute path -> the first name given for it
        for p in paths:
            if p:
                first.setdefault(os.path.abspath(p), p)
        self.paths = list(first.values())
        self._held: List[Tuple[int, str]] = []

    def acquire(self) -> None:
        """Lock every path, or raise :class:`InputError` (exit 3) naming those in use."""
        try:
            import fcntl  # noqa: F401
        except ImportError:  # pragma: no cover - not a POSIX system
            return
        busy, holders = self._take_all()
        if busy:
            self.release()
            raise _in_use(busy, holders)

    def _take_all(self) -> Tuple[List[str], List[str]]:
        """Lock each path that is free (held from then on); returns (the paths in use by another
        run, the pids of those holding them, where known)."""
        busy: List[str] = []
        holders: List[str] = []
        for path in self.paths:
            fd, holder = _take(path)
            if fd is None:
                busy.append(path)
                if holder and holder not in holders:
                    holders.append(holder)
            elif fd >= 0:
                self._held.append((fd, lock_path(path)))
        return busy, holders

    def release(self) -> None:
        for fd, lock in self._held:
            release_lock(fd, lock)
        self._held = []


def _in_use(busy: List[str], holders: List[str]) -> InputError:
    """The error for files another run holds (``holders``: the pids known)."""
    who = f" (pid {', '.join(holders)})" if holders else ""
    return InputError(
        f"{' and '.join(busy)} {'are' if len(busy) > 1 else 'is'} in use by another debug reduce{who}; "
        "give this run files of its own with --iter-artifact PATH (and --save-debug-replay PATH)"
    )

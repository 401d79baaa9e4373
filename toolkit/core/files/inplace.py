"""In-place rewrites (``-o MODEL``): one at a time per model, and never over a model that
changed meanwhile.

:func:`lock_for_rewrite` takes an exclusive ``flock`` on the model file before it is read;
a second command rewriting the same model in place stops at once with one sentence (exit 3)
instead of interleaving with the first (each would read weights by offset while the other
replaced the data file). The model and its external data files are remembered by identity
(device, inode, size, modification time); :func:`verify` refuses the final rename when one
of them changed since (another program rewrote it): nothing is written then. The kernel
drops the lock when the process ends, however it ends.
"""

from __future__ import annotations

import os
from typing import Dict, Iterable, List, Tuple

from toolkit.core.errors import InputError

try:
    import fcntl
except ImportError:  # pragma: no cover - not a POSIX system: nothing is locked
    fcntl = None  # type: ignore[assignment]

Stamp = Tuple[int, int, int, int]

_HELD: List[int] = []  # open descriptors holding the locks (for the life of the process)
_STAMPS: Dict[str, Tuple[str, Stamp]] = {}  # resolved path -> (the model it belongs to, its identity)
_TARGETS: Dict[str, str] = {}  # resolved path of a model rewritten in place -> its name


def _stamp(path: str) -> Stamp:
    st = os.stat(path)
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def lock_for_rewrite(path: str) -> None:
    """Lock the model at ``path`` for an in-place rewrite (InputError if another holds it)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return  # the command's own reading reports it
    if fcntl is not None:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise InputError(
                f"{path} is being rewritten in place by another command right now; run this one after it ends "
                "(or write to another file with -o)"
            ) from None
    _HELD.append(fd)
    real = os.path.realpath(path)
    _TARGETS[real] = path
    watch(path, [path])


def watch(model: str, files: Iterable[str]) -> None:
    """Remember the identity of ``files`` (the model rewritten in place and its data files)."""
    for f in files:
        try:
            _STAMPS[os.path.realpath(f)] = (model, _stamp(f))
        except OSError:
            continue


def is_locked(path: str) -> bool:
    return bool(_TARGETS) and os.path.realpath(path) in _TARGETS


def verify(path: str) -> None:
    """Before ``path`` is replaced: InputError if it is a model rewritten in place and it, or a
    data file it reads, changed since it was read (nothing is written then)."""
    if not _TARGETS:
        return
    real = os.path.realpath(path)
    if real not in _TARGETS:
        return
    for f, (model, then) in _STAMPS.items():
        if os.path.realpath(model) != real:
            continue
        try:
            now = _stamp(f)
        except OSError:
            now = None  # type: ignore[assignment]
        if now != then:
            raise InputError(
                f"{f} was changed by another program while this command rewrote {model} in place; nothing was "
                "written (run it again on the model as it is now)"
            )


def release_all() -> None:
    """Drop every lock (for tests and long-lived processes; a command's end drops them anyway)."""
    while _HELD:
        os.close(_HELD.pop())
    _STAMPS.clear()
    _TARGETS.clear()

"""The one way a command creates a file.

A command often writes in a folder that others can write too: the folder of the model it
rewrites, where ``debug reduce``'s check runs and where anyone sharing the folder can leave a
symbolic link (or a hard link) under the name the command is about to use. Opening such a name
with ``open(path, "w")`` follows the link and truncates whatever it points to.

So every file a command creates (temp files, locks, replays, artifacts, spill files, reports,
outputs) is created here, with ``O_CREAT | O_EXCL | O_NOFOLLOW``: a new inode of the command's
own, or an error; nothing that already exists is ever opened for writing. Files that end under
a known name are written to a hidden temp name beside it (:func:`temp_beside`) and renamed into
place, which replaces a link planted at that name and never writes through it. A lock
(:func:`take_lock`) is held on an inode the command created itself.

Setting ``TOOLKIT_TRACE_CREATED`` to a file name appends the final name of every file created
here to that file, one a line (what the file-safety tests plant links at).

Standard library only (a Ray worker's check task uses it without importing numpy or onnx).
"""

from __future__ import annotations

import errno
import os
from typing import Optional, Tuple

from toolkit.core.process.phases import report_temp

NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_NEW = os.O_CREAT | os.O_EXCL | NOFOLLOW | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
TRACE_ENV = "TOOLKIT_TRACE_CREATED"


def trace(path: str) -> None:
    """Append ``path`` (as an absolute path) to the trace file, when one is set."""
    log = os.environ.get(TRACE_ENV)
    if not log:
        return
    try:
        fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT | NOFOLLOW, 0o600)
    except OSError:
        return
    try:
        os.write(fd, (os.path.abspath(path) + "\n").encode("utf-8", "surrogateescape"))
    finally:
        os.close(fd)


def create_new(path: str, mode: int = 0o666, *, readable: bool = False, final: Optional[str] = None) -> int:
    """A file descriptor of a new file at ``path`` (FileExistsError if anything is there, a link
    included). ``final``: the name the file will be renamed to (for the trace)."""
    fd = os.open(path, _NEW | (os.O_RDWR if readable else os.O_WRONLY), mode)
    trace(final or path)
    return fd


def open_new(path: str, mode: str = "wb", *, final: Optional[str] = None, **kwargs):
    """:func:`create_new` as a Python file object (``mode`` "wb", "w", ...)."""
    return os.fdopen(create_new(path, readable="+" in mode, final=final), mode, **kwargs)


def temp_name(basename: str) -> str:
    """The documented hidden temp name of a file being written: ``.NAME.<random>.tmp``."""
    import secrets  # (hashlib, hmac: not for --help)

    return f".{basename}.{secrets.token_hex(4)}.tmp"


def temp_beside(path: str, mode: int = 0o600) -> Tuple[int, str]:
    """(fd, name) of a new hidden temp file in ``path``'s folder, to be renamed over ``path``."""
    folder = os.path.dirname(os.path.abspath(path))
    for _ in range(100):
        tmp = os.path.join(folder, temp_name(os.path.basename(path)))
        report_temp(tmp)  # (first: a supervising parent removes it if this process dies by a signal)
        try:
            fd = create_new(tmp, mode, readable=True, final=path)  # (O_RDWR, as mkstemp gives)
        except FileExistsError:
            report_temp(tmp, made=False)  # (another's file: never to be removed for this process)
            continue
        return fd, tmp
    raise FileExistsError(errno.EEXIST, "no free temp file name", folder)


def write_new(path: str, data: bytes) -> None:
    """``data`` as the new file ``path`` (FileExistsError when something is there)."""
    with open_new(path, "wb") as f:
        f.write(data)


def open_append(path: str, encoding: str = "utf-8"):
    """A text file appended to (a log): made if absent, never reached through a symbolic link."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o666)
    trace(path)
    return os.fdopen(fd, "a", encoding=encoding)


def make_folder(path: str) -> str:
    """``path`` as a folder of its own: made if absent; a symbolic link found there (which would
    lead every file written "inside" elsewhere) is removed and the folder made in its place. A
    file there is FileExistsError."""
    import stat

    for _ in range(3):
        try:
            os.mkdir(path)
            trace(path)
            return path
        except FileExistsError:
            st = os.lstat(path)
            if stat.S_ISDIR(st.st_mode):
                trace(path)
                return path
            if not stat.S_ISLNK(st.st_mode):
                raise
            _unlink_quietly(path)
    raise FileExistsError(errno.EEXIST, "cannot make the folder", path)


def private_folder(path: str) -> str:
    """``path`` as a folder only this user can enter: made 0700, or found so (a folder someone
    else made, or a link, under that name is refused with PermissionError)."""
    import stat

    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != getattr(os, "getuid", lambda: st.st_uid)() or st.st_mode & 0o077:
        raise PermissionError(errno.EACCES, "not a private folder of this user", path)
    return path


def take_lock(path: str) -> Tuple[Optional[int], str]:
    """An exclusive ``flock`` on a lock file at ``path`` that this process created itself.

    Returns (fd, "") when taken (the file holds this process's id), (None, holder's id) when a
    live process holds it, (-1, "") when no lock file can be made there. A file found at
    ``path`` (a lock a dead run left, or a link someone planted) is never written: when no one
    holds a lock on it, the name is removed and a fresh file made; a symbolic link is removed,
    its target untouched."""
    import fcntl

    for _ in range(100):
        try:
            fd = create_new(path, 0o644, readable=True)
        except FileExistsError:
            holder = _holder(path, fcntl)
            if holder is not None:
                return None, holder
            continue  # (the stale name is gone: create it afresh)
        except OSError:
            return -1, ""
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # another run took our fresh file between create and flock: it is theirs now
            os.close(fd)
            continue
        if _same_inode(fd, path):
            os.write(fd, f"{os.getpid()}\n".encode())
            return fd, ""
        os.close(fd)
    return -1, ""


def _holder(path: str, fcntl) -> Optional[str]:
    """The holder's id if a live process holds the lock at ``path``; None after removing a stale
    (or planted) name."""
    try:
        fd = os.open(path, os.O_RDONLY | NOFOLLOW | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return None
    except OSError:  # a symbolic link (ELOOP), or a name we cannot open: not a lock of ours
        _unlink_quietly(path)
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return os.read(fd, 32).decode("ascii", "replace").strip()
        if _same_inode(fd, path):
            _unlink_quietly(path)  # (stale: we hold its lock, so no live run is using it)
        return None
    finally:
        os.close(fd)


def _same_inode(fd: int, path: str) -> bool:
    try:
        st, cur = os.fstat(fd), os.lstat(path)
    except OSError:
        return False
    return (st.st_dev, st.st_ino) == (cur.st_dev, cur.st_ino)


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def release_lock(fd: int, path: str) -> None:
    """Remove the lock file (only while it is still ours) and drop the lock."""
    if _same_inode(fd, path):
        _unlink_quietly(path)  # (unlinked while still locked: a run waiting on it makes a fresh one)
    os.close(fd)

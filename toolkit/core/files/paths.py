"""The one rule for the files a command touches, checked before any work.

Every file a command will write (outputs, data files, replay, iteration artifacts, logs, the
external data files of output models) is compared with every file it reads (the model and
its external data files, data files, replay, scripts) and with every other file it writes.
Paths are compared after resolving symbolic links, ``.`` and ``..``, hard links (the same
inode) and, where the filesystem folds case, letter case. A clash raises :class:`PathClash`
(a usage error, exit 2) naming both, before anything is read or written.

The command line's log file (``--log-file``) is a write of every command: the CLI registers
it once with :func:`add_process_write` and every :func:`check` includes it.
"""

from __future__ import annotations

import functools
import os
from typing import Iterable, List, Optional, Sequence, Set, Tuple

from toolkit.core.errors import LIBRARY_ERRORS, InputError, UsageError
from toolkit.core.graph.graphs import STDIO, external_data_folder, external_data_locations

Named = Tuple[str, str]  # (what the path is, e.g. "--save-outputs", the path)

_PROCESS_WRITES: List[Named] = []
_DECLARED: List[Named] = []  # the writes the command checked (what it means to write)
_WRITTEN: List[str] = []  # keys of the files written (renamed into place) so far


def describe(path: str) -> str:
    """``path`` as messages name it (``<stdin>`` for ``-``)."""
    return "<stdin>" if path == STDIO else path


class PathClash(UsageError):
    """Two paths of one command name one file where that would lose data."""

    def __init__(self, message: str, paths: Sequence[str]):
        super().__init__(message)
        self.paths = list(paths)


def add_process_write(what: str, path: str) -> None:
    """A file every command of this process writes (the log file)."""
    _PROCESS_WRITES.append((what, path))


def reset_process_writes() -> None:
    for held in (_PROCESS_WRITES, _DECLARED, _WRITTEN):
        held.clear()


def note_written(path: str) -> None:
    """``path`` is complete in place (called after its atomic rename)."""
    if path and path != STDIO:
        _WRITTEN.append(key(path))


def forget_written(path: str) -> None:
    """``path`` was put back as it was (an undone rewrite)."""
    gone = key(path)
    _WRITTEN[:] = [k for k in _WRITTEN if k != gone]


def written_summary() -> str:
    """What the command has written and what not (for the line an interruption prints):
    'nothing was written', 'X was written; Y was not', ... ('' if it writes nothing)."""
    declared = [(w, p) for w, p in _files(_DECLARED) if w != "--log-file"]
    done = [f"{w} {p}" for w, p in declared if key(p) in _WRITTEN]
    left = [f"{w} {p}" for w, p in declared if _unwritten(w, p)]
    return _written_words(done, left)


def _unwritten(what: str, path: str) -> bool:
    """Whether the file ``path`` (``what`` it is) is not written yet and has a name of its own to say
    (an output model's external data file goes with the model)."""
    return key(path) not in _WRITTEN and bool(os.path.basename(path)) and "external-data" not in what


def _written_words(done: List[str], left: List[str]) -> str:
    """'X was written; Y was not', 'nothing ...': the files ``done`` and those ``left``."""
    if not done and not left:
        return ""
    if not done:
        return f"{_were(left)} not written"
    return f"{_were(done)} written" + (f"; {_were(left)} not" if left else "")


def _were(items: List[str]) -> str:
    """'a was' or 'a, b were'."""
    return f"{', '.join(items)} {'was' if len(items) == 1 else 'were'}"


@functools.lru_cache(maxsize=64)
def _folds_case(folder: str) -> bool:
    """Whether the filesystem of ``folder`` treats letter case as the same name."""
    probe = folder.swapcase()
    if probe == folder or not os.path.isdir(folder):
        return False
    try:
        return os.path.samefile(folder, probe)
    except OSError:
        return False


def key(path: str) -> str:
    """The resolved form of ``path`` that two names of one file share."""
    real = os.path.realpath(os.path.abspath(path))
    folder = os.path.dirname(real)
    return real.lower() if _folds_case(folder) else real


def same_file(a: str, b: str) -> bool:
    """Whether ``a`` and ``b`` name one file (or would, once written)."""
    if a == STDIO or b == STDIO:
        return False
    if key(a) == key(b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _clash(write: Named, other: Named, is_read: bool) -> PathClash:
    (w, wpath), (o, opath) = write, other
    same = "" if opath == wpath else " (the same file)"
    if is_read:
        text = f"{w} {wpath} would overwrite {o} {opath}{same}, which this command reads"
    else:
        text = f"{w} {wpath} and {o} {opath} name the same file{'' if same else ''}; one would overwrite the other"
    return PathClash(f"{text}; nothing was read or written: choose another file name for {w}", [wpath, opath])


def check(reads: Iterable[Named], writes: Iterable[Named]) -> None:
    """PathClash unless every write differs from every read and from every other write.
    Empty paths and ``-`` (stdin/stdout) are left out."""
    reads = _files(reads)
    writes = _files(list(writes) + _PROCESS_WRITES)
    _DECLARED.extend(item for item in writes if item not in _DECLARED)
    seen: List[Named] = []
    for item in writes:
        _check_write(item, seen, reads)
        if item not in seen:
            seen.append(item)


def _files(items: Iterable[Named]) -> List[Named]:
    """The ``items`` that name a file (not empty, not ``-``: stdin/stdout)."""
    return [(w, p) for w, p in items if p and p != STDIO]


def _check_write(item: Named, earlier: List[Named], reads: List[Named]) -> None:
    """PathClash when the write ``item`` names the file of an ``earlier`` write or of a read, or
    an iteration file of a per-iteration folder read."""
    for other in earlier:
        if same_file(item[1], other[1]) and item != other:
            raise _clash(item, other, False)
    for src in reads:
        if same_file(item[1], src[1]):
            raise _clash(item, src, True)
        if in_iteration_folder(item[1], src[1]):
            raise PathClash(f"{item[0]} {item[1]} would be an iteration file of {src[0]} {src[1]}, a per-iteration "
                            f"folder this command reads; nothing was read or written: choose another file name for "
                            f"{item[0]}", [item[1], src[1]])


def is_iteration_file(name: str) -> bool:
    """Whether a file called ``name`` in a per-iteration data folder is one of its iterations
    (``0000000000.json``, ``0000000001.json``, ...: digits, then ``.json``)."""
    stem = name[: -len(".json")]
    return name.endswith(".json") and stem.isascii() and stem.isdigit()  # ("².json": no number int() reads)


def iteration_files(folder: str) -> List[str]:
    """The iteration files of the per-iteration data folder ``folder``, in the order of their numbers
    (``10.json`` after ``9.json``). InputError unless they are numbered 0, 1, ..., N-1, each once: a
    file missing, or a number written twice, would pair iteration k with iteration k+1 of another source."""
    names = sorted(filter(is_iteration_file, os.listdir(folder)), key=lambda n: int(n[: -len(".json")]))
    for k, name in enumerate(names):
        number = int(name[: -len(".json")])
        if number < k:
            raise InputError(f"{folder}: iteration {number} is given twice ({names[k - 1]} and {name}); keep one")
        if number > k:
            raise InputError(f"{folder}: iteration {k} is missing (the next file is {name}): the iterations would be "
                             "paired with another file's by position; put it back, or number the files 0 to N-1")
    return names


def in_iteration_folder(path: str, folder: str) -> bool:
    """Whether writing ``path`` would add or replace an iteration of the per-iteration folder ``folder``."""
    if not os.path.isdir(folder) or not is_iteration_file(os.path.basename(path)):
        return False
    return same_file(os.path.dirname(os.path.abspath(path)) or ".", folder)


def model_data_files(model_path: str, writes: Iterable[Named], external_data_dir: Optional[str] = None) -> List[str]:
    """The external data files of the model at ``model_path`` that one of ``writes`` could be.

    Only an existing file can be one (the model needs its data files to load), and only one
    whose name occurs in the model's bytes: the model is parsed only then, so the check costs
    nothing in the usual case."""
    if not model_path or model_path == STDIO or not os.path.isfile(model_path):
        return []
    names = _existing_names(writes)
    if not names or not _mentions(model_path, names):
        return []
    import onnx  # (only for a model whose bytes name a file the command writes)
    from google.protobuf.message import DecodeError

    try:
        model = onnx.load_model(model_path, load_external_data=False)
    except LIBRARY_ERRORS + (DecodeError,):
        return []  # the command itself says what is wrong with the model
    folder = external_data_folder(model_path, external_data_dir)
    return [os.path.join(folder, loc) for loc in external_data_locations(model) if isinstance(loc, str)]


def _existing_names(writes: Iterable[Named]) -> Set[str]:
    """The file names (as given and as resolved) of the ``writes`` that exist already."""
    names: Set[str] = set()
    for _w, path in writes:
        if path and path != STDIO and os.path.isfile(path):
            names.update({os.path.basename(path), os.path.basename(os.path.realpath(path))})
    return names


def _mentions(path: str, names: Iterable[str]) -> bool:
    """Whether the file at ``path`` holds one of ``names`` (read in chunks, never mapped: a file
    truncated by another program meanwhile is a short read, not a crash)."""
    wanted = [n.encode("utf-8", "surrogateescape") for n in names]
    overlap = max((len(w) for w in wanted), default=1) - 1
    tail = b""
    try:
        with open(path, "rb") as f:
            while True:
                chunk = f.read(_CHUNK)
                if not chunk:
                    return False
                window = tail + chunk
                if any(window.find(w) >= 0 for w in wanted):
                    return True
                tail = window[-overlap:] if overlap else b""
    except (OSError, ValueError):
        return False


_CHUNK = 16 << 20


def check_with_model(
    model: Optional[str], reads: Iterable[Named], writes: Iterable[Named], external_data_dir: Optional[str] = None,
) -> None:
    """:func:`check`, with the model (``MODEL``) and its external data files among the reads."""
    writes = list(writes)
    reads = [("MODEL", model or "")] + list(reads)
    all_writes = writes + list(_PROCESS_WRITES)
    reads += [("MODEL's external data file", p) for p in model_data_files(model or "", all_writes, external_data_dir)]
    check(reads, writes)

"""Inputs and outputs files: Polygraphy-compatible JSON and ``.npz``.

The format is chosen by file extension (``.npz`` -> npz, anything else -> JSON); for
``-`` (stdin) it is sniffed from the first bytes.

In memory:
- an *inputs* file is a list of feed dicts, one per iteration: ``[{name: ndarray}, ...]``;
- an *outputs* file is a :class:`RunResults`: a list of ``(runner_name, [IterationResult])``.

JSON layout (what Polygraphy reads and writes): every array is
``{"array": base64(np.save bytes), "polygraphy_class": "ndarray"}``; an outputs file is
``{"lst": [[runner, [iteration, ...]], ...], "polygraphy_class": "RunResults"}``.

``.npz`` layout (ours): one member per array (``t0``, ``t1``, ...) plus a JSON index in
the member ``__toolkit__`` (a unicode scalar, so nothing is ever pickled). Members load
lazily: reading one tensor of a big file reads only that tensor. A plain ``.npz`` of
named arrays (``np.savez(f, x=...)``) loads as one iteration.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import io
import json
import os
import shutil
import tempfile
import zipfile
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ContextManager, Dict, Iterable, Iterator, List, Optional, Tuple, Union

import numpy as np

from toolkit.core.errors import LIBRARY_ERRORS, PYTHON_ERRORS, InputError
from toolkit.core.files.paths import iteration_files
from toolkit.core.io.model import STDIO, atomic_output, check_data_file, check_readable_file, describe, read_bytes
from toolkit.core.io.npy import NpzMembers, array_from_bytes

NPZ_INDEX = "__toolkit__"
NPZ_FORMAT_VERSION = 1

# What numpy, zipfile and json raise reading a damaged data file (a bad header, a cut archive, a
# huge bogus shape): the file is bad input.
# numpy's .npy/.npz reader raises Python's errors too on a damaged header (the blocks that catch
# these hold only numpy and json calls)
CORRUPT_DATA_ERRORS = LIBRARY_ERRORS + PYTHON_ERRORS + (EOFError, ArithmeticError, zipfile.BadZipFile, zlib.error)


@dataclass
class IterationResult:
    """Outputs of one inference iteration of one runner."""

    outputs: Mapping  # name -> ndarray (may load lazily)
    runtime: float = 0.0
    runner_name: str = ""


@dataclass
class RunResults:
    """Per-runner, per-iteration outputs: ``[(runner_name, [IterationResult, ...]), ...]``."""

    runs: List[Tuple[str, List[IterationResult]]] = field(default_factory=list)

    def runner_names(self) -> List[str]:
        return [name for name, _ in self.runs]

    def __iter__(self):
        return iter(self.runs)

    def __len__(self) -> int:
        return len(self.runs)


Feed = Mapping  # name -> ndarray
InputsData = List[Feed]


class LazyTensors(Mapping):
    """A read-only name -> ndarray mapping over ``.npz`` members, read on each access.

    Nothing is kept: a run that streams through the iterations of a large file holds one
    iteration's tensors at a time (callers keep what they need)."""

    def __init__(self, reader: NpzMembers, file_name: str, members: Dict[str, str]):
        self._reader = reader
        self._file_name = file_name
        self._members = members

    def header(self, name) -> Optional[Tuple[tuple, "np.dtype"]]:
        """(shape, dtype) of tensor ``name`` from its ``.npy`` header: nothing else is inflated."""
        member = self._members[name]
        try:
            return self._reader.header(member)
        except ValueError as exc:
            raise InputError(f"{self._file_name}: tensor '{name}': {_pickle_message(exc)}") from None
        except CORRUPT_DATA_ERRORS as exc:
            raise InputError(f"{self._file_name}: tensor '{name}' is unreadable: {exc}") from None

    def __getitem__(self, name):
        member = self._members[name]
        try:
            return self._reader.array(member, f"{self._file_name}: tensor '{name}'")
        except ValueError as exc:
            raise InputError(f"{self._file_name}: tensor '{name}': {_pickle_message(exc)}") from None
        except CORRUPT_DATA_ERRORS as exc:
            raise InputError(f"{self._file_name}: tensor '{name}' is unreadable: {exc}") from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._members)

    def __len__(self) -> int:
        return len(self._members)

    def __contains__(self, name) -> bool:
        return name in self._members

    def __repr__(self) -> str:
        return f"LazyTensors({list(self._members)})"


def _pickle_message(exc: Exception) -> str:
    text = str(exc)
    if "pickle" in text.lower():
        return "holds pickled Python objects, which toolkit refuses to load (unsafe); save plain arrays"
    return text


def is_npz_path(path: str) -> bool:
    return path != STDIO and path.lower().endswith(".npz")


# ---------------------------------------------------------------------------- JSON


def _fixed_width(arr, kind: type):
    """An object array of ``str`` (``bytes``) as numpy's fixed-width unicode (bytes) dtype, which
    numpy saves and loads without pickle; a value ending in NUL would lose it there: refused."""
    if any(v.endswith("\0" if kind is str else b"\0") for v in arr.flat):
        raise InputError("cannot save a string tensor whose values end in a NUL character")
    return arr.astype(kind)


def storable(arr):
    """``arr`` as an array ``np.save`` writes without pickle: strings (object arrays of ``str``,
    what ONNX-Runtime returns for string tensors) become numpy's unicode dtype, bytes its bytes
    dtype (both load in Polygraphy and numpy as they are); numbers and bools stay as they are.
    Any other Python objects (a sequence or map output) are refused with an InputError."""
    arr = np.asanyarray(arr)
    if arr.dtype.kind != "O":
        return arr
    for kind in (str, bytes):
        if all(isinstance(v, kind) for v in arr.flat):
            return _fixed_width(arr, kind)
    types = sorted({type(v).__name__ for v in arr.flat if not isinstance(v, (str, bytes))})
    raise InputError(
        f"cannot save a tensor of Python objects ({', '.join(types)}): data files hold numbers, bools and strings"
    )


def _save_error(arr, exc: Exception) -> InputError:
    return InputError(f"cannot save an array of dtype {np.asarray(arr).dtype}: {exc}")


def _array_b64(arr) -> bytes:
    """base64 of the ``np.save`` bytes of ``arr`` (ASCII; never needs JSON escaping)."""

    buf = io.BytesIO()
    try:
        np.save(buf, storable(arr), allow_pickle=False)
    except ValueError as exc:
        raise _save_error(arr, exc) from None
    return base64.b64encode(buf.getbuffer())


def encode_array(arr) -> dict:
    return {"array": _array_b64(arr).decode("ascii"), "polygraphy_class": "ndarray"}


class _JsonArray:
    """An array to be written as ``{"array": <base64>, "polygraphy_class": "ndarray"}``."""

    __slots__ = ("arr",)

    def __init__(self, arr):
        self.arr = arr


def _json_chunks(obj, level: int = 0):
    """Byte chunks of ``json.dumps(obj, indent=4)``, with _JsonArray encoded on the fly.

    Streaming keeps memory to one array at a time and skips escaping, joining and
    re-encoding the (large) base64 strings.
    """
    pad = b"\n" + b" " * (4 * (level + 1))
    end = b"\n" + b" " * (4 * level)
    if isinstance(obj, _JsonArray):
        yield b"{" + pad + b'"array": "'
        yield _array_b64(obj.arr)
        yield b'",' + pad + b'"polygraphy_class": "ndarray"' + end + b"}"
    elif isinstance(obj, dict):
        if not obj:
            yield b"{}"
            return
        yield b"{"
        first = True
        for key, value in obj.items():
            yield (pad if first else b"," + pad) + json.dumps(key).encode("ascii") + b": "
            first = False
            yield from _json_chunks(value, level + 1)
        yield end + b"}"
    elif isinstance(obj, (list, tuple)):
        if not obj:
            yield b"[]"
            return
        yield b"["
        first = True
        for value in obj:
            yield pad if first else b"," + pad
            first = False
            yield from _json_chunks(value, level + 1)
        yield end + b"]"
    else:
        yield json.dumps(obj).encode("ascii")


def _decode_array(text: str):
    try:
        raw = binascii.a2b_base64(text)
    except (binascii.Error, TypeError, ValueError) as exc:  # ValueError: text that is not ASCII
        raise InputError(f"corrupt array data (bad base64: {exc})") from None
    try:
        return array_from_bytes(raw, "an array")
    except ValueError as exc:
        raise InputError(f"corrupt array data: {_pickle_message(exc)}") from None
    except CORRUPT_DATA_ERRORS as exc:
        raise InputError(f"corrupt array data: {exc}") from None


_LEGACY_PREFIX = "__polygraphy_encoded_"


def _class_of(dct) -> Optional[str]:
    cls = dct.get("polygraphy_class")
    if cls is None:
        for key in dct:
            if isinstance(key, str) and key.startswith(_LEGACY_PREFIX):
                return key[len(_LEGACY_PREFIX) :]
    return cls


def _run_results(dct) -> "RunResults":
    lst = dct.get("lst")
    if not isinstance(lst, list):
        raise InputError("corrupt RunResults (no 'lst' list)")
    runs = []
    for entry in lst:
        if not (isinstance(entry, (list, tuple)) and len(entry) == 2 and isinstance(entry[1], list)):
            raise InputError("corrupt RunResults entry (expected [runner_name, [iterations]])")
        iters = []
        for it in entry[1]:
            if isinstance(it, dict) and not isinstance(it, IterationResult):
                it = IterationResult(it, 0.0, str(entry[0]))
            if not isinstance(it, IterationResult):
                raise InputError("corrupt RunResults entry (iteration is not a result)")
            iters.append(it)
        runs.append((str(entry[0]), iters))
    return RunResults(runs)


def json_hook(dct):
    """Decode the objects Polygraphy's JSON marks with ``polygraphy_class`` (or the older key)."""
    cls = _class_of(dct)
    decode = _DECODERS.get(cls) if isinstance(cls, str) else None
    return dct if decode is None else decode(dct)


def _ndarray(dct) -> np.ndarray:
    if not isinstance(dct.get("array"), str):
        raise InputError("corrupt array entry (no 'array' field)")
    return _decode_array(dct["array"])


def _lazy_values(dct) -> np.ndarray:
    values = dct.get("values")
    if not isinstance(values, np.ndarray):
        raise InputError(f"corrupt {_class_of(dct)}: field 'values' is {_shown(values)}, expected an encoded array")
    return values


def _iteration_result(dct) -> "IterationResult":
    outs = dct.get("outputs")
    if not isinstance(outs, dict):
        raise InputError(f"corrupt IterationResult: field 'outputs' is {_shown(outs)}, expected a dict")
    for name, value in outs.items():
        if not isinstance(value, np.ndarray):
            raise InputError(f"corrupt IterationResult: output '{name}' is {_shown(value)}, expected an array")
    return IterationResult(outs, _runtime(dct.get("runtime"), "IterationResult"), str(dct.get("runner_name") or ""))


# polygraphy_class -> its decoder
_DECODERS = {"ndarray": _ndarray, "LazyArray": _lazy_values, "LazyNumpyArray": _lazy_values,
             "IterationResult": _iteration_result, "RunResults": _run_results}


def _shown(value) -> str:
    """A corrupt field's value as a message shows it (short)."""
    text = json.dumps(value) if isinstance(value, (str, int, float, list, dict, type(None))) else type(value).__name__
    return text if len(text) <= 40 else text[:37] + "..."


def _runtime(value, where: str) -> float:
    """A result's ``runtime`` field (seconds; missing is 0)."""
    if value is None:
        return 0.0
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(f"corrupt {where}: field 'runtime' is {_shown(value)}, expected a number of seconds")
    return float(value)


def _load_json_bytes(data: bytes, path: str):
    try:
        return json.loads(data, object_hook=json_hook)
    except InputError as exc:
        raise InputError(f"{describe(path)}: {exc.message}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"{describe(path)}: not a JSON or .npz data file ({exc})") from None
    except RecursionError:
        raise InputError(f"{describe(path)}: JSON nested too deeply") from None


# ---------------------------------------------------------------------------- npz


def _open_npz(source, path: str):
    try:
        npz = np.load(source, allow_pickle=False)
    except (zipfile.BadZipFile, OSError, ValueError, EOFError, NotImplementedError) as exc:  # (unsupported zip features)
        raise InputError(f"{describe(path)}: not a readable .npz file ({_not_zip(source) or exc})") from None
    if not isinstance(npz, np.lib.npyio.NpzFile):  # (np.load reads a .npy file whatever its name)
        raise InputError(f"{describe(path)}: not a readable .npz file ({_not_zip(source)})")
    return npz


def _not_zip(source) -> str:
    """What the file is instead of a zip archive, by its first bytes ('' when it starts as one):
    numpy takes any other file for a pickle and says so."""
    if isinstance(source, io.BytesIO):
        head = source.getvalue()[:4]
    else:
        with open(source, "rb") as fh:
            head = fh.read(4)
    if head.startswith(b"PK"):
        return ""
    if head.lstrip()[:1] in (b"[", b"{"):
        return "it holds JSON: name it .json"
    if head.startswith(b"\x93NUM"):
        return "it is a single .npy array: save the arrays by name with np.savez"
    return "it is not a zip archive, which a .npz file is"


def _npz_index(npz, path: str) -> Optional[dict]:
    if NPZ_INDEX not in npz.files:
        return None
    try:
        idx = json.loads(str(npz[NPZ_INDEX][()]))
    except CORRUPT_DATA_ERRORS as exc:
        raise InputError(f"{describe(path)}: corrupt index in .npz data file ({exc})") from None
    if not isinstance(idx, dict) or idx.get("kind") not in ("inputs", "outputs"):
        raise InputError(f"{describe(path)}: corrupt index in .npz data file")
    version = idx.get("version", 1)
    if not isinstance(version, int) or isinstance(version, bool) or not 1 <= version <= NPZ_FORMAT_VERSION:
        raise InputError(
            f"{describe(path)}: .npz data file of format version {_shown(version)}; this toolkit reads versions "
            f"up to {NPZ_FORMAT_VERSION}: read it with the toolkit that wrote it, or upgrade toolkit"
        )
    return idx


def _load_npz(path: str, data: Optional[bytes] = None):
    """Open a .npz data file (``data`` holds the bytes for stdin) and read its index."""
    npz = _open_npz(_npz_source(path, data), path)
    idx = _npz_index(npz, path)
    members = set(npz.files)
    reader = NpzMembers(npz.zip, npz)
    file_name = path if path != STDIO else "npz file"

    def lazy(mapping: dict) -> LazyTensors:
        for name, member in mapping.items():
            if not isinstance(member, str) or member not in members:
                raise InputError(f"tensor '{name}' is member {_shown(member)}, which the archive does not hold")
        return LazyTensors(reader, file_name, dict(mapping))

    if idx is None:
        return [lazy({k: k for k in npz.files})]
    try:
        if idx["kind"] == "inputs":
            return [lazy(_index_field(it, None, dict, "iteration")) for it in _index_field(idx, "iterations", list)]
        return RunResults([_npz_run(run, lazy) for run in _index_field(idx, "runs", list)])
    except InputError as exc:
        raise InputError(f"{describe(path)}: corrupt index in .npz data file ({exc.message})") from None


def _npz_source(path: str, data: Optional[bytes]):
    """What np.load reads: ``data`` (stdin's bytes), stdin read now, or the path (checked readable)."""
    if data is not None:
        return io.BytesIO(data)
    if path == STDIO:
        return io.BytesIO(read_bytes(path))
    check_readable_file(path)
    return path  # (np.load takes a path or a file)


def _npz_run(run, lazy) -> Tuple[str, List["IterationResult"]]:
    """One runner's entry of an outputs index: (runner name, its iterations, outputs read lazily)."""
    name = _index_field(_index_field(run, None, dict, "run"), "runner_name", str, "run")
    iters = []
    for it in _index_field(run, "iterations", list, "run"):
        it = _index_field(it, None, dict, "iteration")
        outputs = lazy(_index_field(it, "outputs", dict, "iteration"))
        iters.append(IterationResult(outputs, _runtime(it.get("runtime"), "iteration"), name))
    return name, iters


def _index_field(obj, key: Optional[str], kind: type, where: str = "index"):
    """``obj[key]`` (``obj`` itself for None) of an .npz index, checked to be a ``kind``."""
    if key is not None:
        obj = obj.get(key) if isinstance(obj, dict) else None
    if not isinstance(obj, kind):
        named = f"field '{key}' of {where}" if key is not None else where
        expected = {"list": "a list", "dict": "a dict", "str": "a string"}[kind.__name__]
        raise InputError(f"{named} is {_shown(obj)}, expected {expected}")
    return obj


# ---------------------------------------------------------------------------- public API


# Loaded data files, keyed by (absolute path, size, mtime). A warm parent process that
# preloads files hands them to its forked children for free (see toolkit.reduce).
_CACHE: Dict[tuple, object] = {}


def hold_in_memory(path: str, data) -> None:
    """Make :func:`load_data` return ``data`` (a list of feeds, or :class:`RunResults`) for
    ``path``, in this process and its forks, without any file: values computed in memory are
    then read like a data file (``debug reduce --compare``). :func:`release` forgets them."""
    _CACHE[("memory", path)] = data


def release(path: str) -> None:
    _CACHE.pop(("memory", path), None)


def _cache_key(path: str):
    if ("memory", path) in _CACHE:
        return ("memory", path)
    if path == STDIO:
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    if os.path.isdir(path):
        return None  # a per-iteration folder: its files may change without the folder's mtime
    return (os.path.abspath(path), st.st_size, st.st_mtime_ns)


def load_data(path: str, *, cache: bool = True):
    """Load an inputs file (list of feeds) or an outputs file (RunResults), whichever it is.

    With ``cache`` (default) a file already loaded by this process, unchanged since
    (same size and mtime), is returned from memory. Callers must not mutate the result.
    """
    key = _cache_key(path) if cache else None
    if key is not None and key in _CACHE:
        return _CACHE[key]
    result = _load_data_uncached(path)
    if key is not None:
        _CACHE[key] = result
    return result


def clear_cache() -> None:
    _CACHE.clear()


def _add_iteration_file(part, feeds: list, runs: Dict[str, list], mixed: str) -> None:
    """One iteration file's feeds or run results, joined to those of the files before it (InputError
    ``mixed`` when one is a feed and another run results)."""
    if isinstance(part, RunResults):
        if feeds:
            raise InputError(mixed)
        for runner, iters in part.runs:
            runs.setdefault(runner, []).extend(iters)
    else:
        if runs:
            raise InputError(mixed)
        feeds.extend(part)


def _load_iteration_folder(path: str):
    """Polygraphy 0.53's per-iteration folder (an extensionless ``--save-inputs``/``--save-outputs``
    path): zero-padded ``0000000000.json``, ``0000000001.json``, ... holding one iteration each
    (a feed, or run results with one iteration per runner). Iterations are joined in order."""
    names = iteration_files(path)
    if not names:
        raise InputError(
            f"{path}: is a directory without per-iteration files (0000000000.json, ...); give a data file"
        )
    feeds: list = []
    runs: Dict[str, list] = {}
    for name in names:
        part = _load_data_uncached(os.path.join(path, name))
        _add_iteration_file(part, feeds, runs, f"{path}: mixes inputs and outputs iteration files ({name})")
    if runs:
        return RunResults([(runner, iters) for runner, iters in runs.items()])
    return feeds


def _load_data_uncached(path: str):
    check_data_file(path)  # (a FIFO or a device: one sentence, never a read that blocks or never ends)
    if path != STDIO and os.path.isdir(path):
        return _load_iteration_folder(path)
    if is_npz_path(path):
        return _load_npz(path)
    data = read_bytes(path)
    if path == STDIO and data[:4] == b"PK\x03\x04":
        return _load_npz(path, data)
    if not data.strip():
        raise InputError(f"{describe(path)}: empty file, expected a JSON or .npz data file")
    obj = _load_json_bytes(data, path)
    del data
    return _as_data(obj, path)


def _as_data(obj, path: str):
    """Decoded JSON as data: run results, or a list of feeds (one feed: a list of it)."""
    if isinstance(obj, RunResults):
        return obj
    if isinstance(obj, dict) and is_feed(obj):
        return [obj]
    if isinstance(obj, list) and all(isinstance(it, dict) and is_feed(it) for it in obj):
        return obj
    raise InputError(
        f"{describe(path)}: JSON is not a data file (expected a list of {{name: array}} dicts "
        "or saved run results)"
    )


def is_feed(dct) -> bool:
    """A decoded JSON object that is one iteration's feed: names -> arrays."""
    return all(isinstance(k, str) and isinstance(v, np.ndarray) for k, v in dct.items())


def load_inputs(path: str) -> InputsData:
    """Load an inputs file. An outputs file is accepted too (its first runner's iterations)."""
    data = load_data(path)
    if isinstance(data, RunResults):
        if not data.runs:
            return []
        return [it.outputs for it in data.runs[0][1]]
    return data


def load_outputs(path: str) -> RunResults:
    """Load an outputs file. A plain inputs-style file becomes one runner named after the file."""
    data = load_data(path)
    if isinstance(data, RunResults):
        return data
    name = "loaded" if path == STDIO else os.path.basename(path)
    return RunResults([(name, [IterationResult(feed, 0.0, name) for feed in data])])


def save_inputs(path: str, iterations: Iterable[Feed]) -> None:
    """Write an inputs file (JSON list of feeds, or .npz)."""
    with inputs_writer(path) as writer:
        for feed in iterations:
            writer.add(feed)


def save_outputs(path: str, results: RunResults) -> None:
    """Write an outputs file (Polygraphy RunResults JSON, or .npz)."""
    with outputs_writer(path) as writer:
        for runner, iters in results.runs:
            writer.begin_runner(runner)
            for it in iters:
                writer.add(it.outputs, it.runtime, it.runner_name or runner)


# ---------------------------------------------------------------------------- streaming writers
#
# A run writes its inputs and outputs one iteration at a time, so that memory stays flat in
# the number of iterations: each writer holds one iteration's arrays at most. The file is
# complete (renamed into place, or copied to stdout) only when the ``with`` block ends
# without an exception; otherwise nothing is written.


@contextlib.contextmanager
def _output_stream(path: str) -> Iterator:
    """A binary stream for ``path``: a temp file renamed into place, or for ``-`` a spool
    copied to stdout once complete (a failed run writes nothing, not half a file)."""
    if path != STDIO:
        with atomic_output(path, "wb") as f:
            yield f
        return
    with tempfile.TemporaryFile() as spool:
        yield spool
        spool.seek(0)
        with atomic_output(STDIO, "wb") as out:
            shutil.copyfileobj(spool, out, 1 << 20)


def _pad(level: int) -> bytes:
    return b"\n" + b" " * (4 * level)


class _JsonList:
    """Writes the items of a JSON list at nesting ``level`` as they come (``json.dumps(indent=4)`` layout)."""

    def __init__(self, f, level: int):
        self.f = f
        self.level = level
        self.count = 0

    def item(self, chunks) -> None:
        self.f.write((b"[" if not self.count else b",") + _pad(self.level + 1))
        self.count += 1
        for chunk in chunks:
            self.f.write(chunk)

    def close(self) -> None:
        self.f.write(_pad(self.level) + b"]" if self.count else b"[]")


class _NpzMembers:
    """Writes ``.npz`` members one array at a time, then the JSON index (``__toolkit__``)."""

    def __init__(self, f):
        self.zip = zipfile.ZipFile(f, mode="w", compression=zipfile.ZIP_STORED, allowZip64=True)
        self.count = 0

    def _member(self, name: str, arr) -> None:
        with self.zip.open(name + ".npy", "w", force_zip64=True) as member:
            try:
                np.lib.format.write_array(member, storable(arr), allow_pickle=False)
            except ValueError as exc:
                raise _save_error(arr, exc) from None

    def add(self, feed: Mapping) -> Dict[str, str]:
        """Write each array of ``feed``; returns name -> member key."""
        keys = {}
        for name in feed:
            key = f"t{self.count}"
            self.count += 1
            self._member(key, feed[name])
            keys[name] = key
        return keys

    def close(self, index: dict) -> None:
        self._member(NPZ_INDEX, np.array(json.dumps(index)))
        self.zip.close()

    def abort(self) -> None:
        """Close the archive of a failed run (its temp file is removed next)."""
        with contextlib.suppress(Exception):
            self.zip.close()


class InputsWriter:
    """``add(feed)`` once per iteration; see :func:`inputs_writer`."""

    def __init__(self, f, npz: bool):
        self._npz = _NpzMembers(f) if npz else None
        self._json = _JsonList(f, 0)  # unused for .npz
        self._index: List[Dict[str, str]] = []

    def add(self, feed: Mapping) -> None:
        if self._npz is not None:
            self._index.append(self._npz.add(feed))
        else:
            self._json.item(_json_chunks({name: _JsonArray(feed[name]) for name in feed}, 1))

    def _close(self, f) -> None:
        if self._npz is not None:
            self._npz.close({"kind": "inputs", "version": NPZ_FORMAT_VERSION, "iterations": self._index})
        else:
            self._json.close()
            f.write(b"\n")


class OutputsWriter:
    """``begin_runner(name)``, then ``add(outputs, runtime)`` per iteration; see :func:`outputs_writer`."""

    def __init__(self, f, npz: bool):
        self._f = f
        self._npz = _NpzMembers(f) if npz else None
        self._runs: List[dict] = []
        self._lst = _JsonList(f, 1)  # unused for .npz
        self._iters: Optional[_JsonList] = None
        self._name = ""
        if self._npz is None:
            f.write(b"{" + _pad(1) + b'"lst": ')

    def _end_runner(self) -> None:
        if self._iters is not None:
            self._iters.close()
            self._f.write(_pad(2) + b"]")
            self._iters = None

    def begin_runner(self, runner_name: str) -> None:
        self._name = runner_name
        if self._npz is not None:
            self._runs.append({"runner_name": runner_name, "iterations": []})
            return
        self._end_runner()
        self._lst.item([b"[" + _pad(3) + json.dumps(runner_name).encode("ascii") + b"," + _pad(3)])
        self._iters = _JsonList(self._f, 3)

    def add(self, outputs: Mapping, runtime: float = 0.0, runner_name: str = "") -> None:
        if self._npz is not None:
            entry = {"outputs": self._npz.add(outputs), "runtime": float(runtime)}
            self._runs[-1]["iterations"].append(entry)
            return
        obj = {
            "outputs": {
                name: {"values": _JsonArray(outputs[name]), "polygraphy_class": "LazyArray"} for name in outputs
            },
            "runtime": float(runtime),
            "runner_name": runner_name or self._name,
            "polygraphy_class": "IterationResult",
        }
        assert self._iters is not None, "begin_runner() first"
        self._iters.item(_json_chunks(obj, 4))

    def _close(self, f) -> None:
        if self._npz is not None:
            self._npz.close({"kind": "outputs", "version": NPZ_FORMAT_VERSION, "runs": self._runs})
            return
        self._end_runner()
        self._lst.close()
        f.write(b"," + _pad(1) + b'"polygraphy_class": "RunResults"' + _pad(0) + b"}\n")


@contextlib.contextmanager
def _writing(path: str, cls):
    with _output_stream(path) as f:
        writer = cls(f, is_npz_path(path))
        try:
            yield writer
        except BaseException:
            if writer._npz is not None:
                writer._npz.abort()
            raise
        writer._close(f)


def inputs_writer(path: str) -> ContextManager[InputsWriter]:
    """An inputs file written one feed at a time (JSON, or .npz by extension)."""
    return _writing(path, InputsWriter)


def outputs_writer(path: str) -> ContextManager[OutputsWriter]:
    """An outputs file written one runner, then one iteration, at a time (JSON, or .npz)."""
    return _writing(path, OutputsWriter)


def merge_to_inputs(datasets: List[Union[InputsData, RunResults]]) -> List[Dict[str, object]]:
    """Merge inputs files and outputs files into one inputs list.

    Iteration k of every file goes into feed k; later files win on name clashes. Each
    feed is a fresh dict (never one dict shared by every iteration). An outputs file
    contributes every runner's iteration k, later runners winning.
    """
    merged: List[Dict[str, object]] = []

    def put(k: int, feed: Mapping) -> None:
        while len(merged) <= k:
            merged.append({})
        for name in feed:
            merged[k][name] = feed[name]

    for data in datasets:
        if isinstance(data, RunResults):
            for _runner, iters in data.runs:
                for k, it in enumerate(iters):
                    put(k, it.outputs)
        else:
            for k, feed in enumerate(data):
                put(k, feed)
    return merged

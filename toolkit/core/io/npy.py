"""Arrays in ``.npy`` form read by their header first: the shape, dtype and size an array
declares are known (and bounded by ``--max-tensor-size``) before any of its payload is
inflated or allocated. A 2 MB ``.npz`` can declare gigabytes of deflated zeros.

Each array's header is parsed once (a file of many small arrays repeats the same header:
parsed headers are remembered by their bytes), and an ``.npz`` member stored uncompressed
(what toolkit writes) is read straight from the file at its offset: its header, then its
payload into the array's own memory, its CRC checked as zipfile would. A compressed member
goes through zipfile, header first too.
"""

from __future__ import annotations

import io
import tokenize
import os
import struct
import zipfile
import zlib
from typing import Dict, Optional, Tuple

import numpy as np

from toolkit.core import limits
from toolkit.core.errors import InputError

MAGIC = b"\x93NUMPY"
HEAD_BYTES = 1 << 16  # read first: a header (numpy refuses one over 10000 bytes) and a small payload
CHUNK_BYTES = 1 << 20  # payload read through zipfile: one chunk at a time into the array
_HEADERS: Dict[bytes, Tuple[tuple, bool, np.dtype]] = {}
_HEADERS_MAX = 4096
_LOCAL = struct.Struct("<4s2B4HL2L2H")  # a zip member's local header (zipfile.structFileHeader)
_LOCAL_MAGIC = b"PK\x03\x04"

Header = Tuple[tuple, bool, "np.dtype", int]  # shape, Fortran order, dtype, offset of the payload


def _header_end(raw: bytes) -> int:
    """Where the header of ``.npy`` bytes ``raw`` ends (its length field read; not its text)."""
    if raw[:6] != MAGIC or len(raw) < 10:
        raise ValueError(f"the magic string is not correct; expected {MAGIC!r}, got {bytes(raw[:6])!r}")
    major = raw[6]
    if major == 1:
        return 10 + int.from_bytes(raw[8:10], "little")
    if major in (2, 3) and len(raw) >= 12:
        return 12 + int.from_bytes(raw[8:12], "little")
    raise ValueError(f"unsupported .npy format version {major}.{raw[7]}")


def _parse(head: bytes) -> Tuple[tuple, bool, "np.dtype"]:
    f = io.BytesIO(head)
    version = np.lib.format.read_magic(f)
    try:
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
        else:  # (2, 0); (3, 0) differs only in the header's text encoding
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
    except (tokenize.TokenError, SyntaxError) as exc:  # (numpy tokenizes the header's text first)
        raise ValueError(f"the .npy header is not a Python literal ({exc})") from None
    if dtype.hasobject:  # (what np.load(allow_pickle=False) refuses, said before the shape)
        raise ValueError("Object arrays cannot be loaded when allow_pickle=False (they are pickled)")
    if any(int(d) < 0 for d in shape):
        raise ValueError(f"the .npy header declares a negative dimension (shape {list(shape)})")
    return tuple(int(d) for d in shape), bool(fortran), dtype


def parse_header(raw: bytes) -> Header:
    """(shape, Fortran order, dtype, payload offset) of ``.npy`` bytes ``raw`` (at least the
    header). ValueError on a bad header, EOFError when ``raw`` ends inside it."""
    end = _header_end(raw)
    if len(raw) < end:
        raise EOFError(f"the .npy header ends after {len(raw)} bytes, but says it takes {end}")
    key = bytes(raw[:end])
    found = _HEADERS.get(key)
    if found is None:
        found = _parse(key)
        if len(_HEADERS) >= _HEADERS_MAX:
            _HEADERS.clear()
        _HEADERS[key] = found
    return found + (end,)


def _count(shape: tuple) -> int:
    count = 1
    for d in shape:
        count *= d
    return count


def _shaped(flat, shape: tuple, fortran: bool):
    if fortran:
        flat.shape = shape[::-1]
        return flat.transpose()
    flat.shape = shape
    return flat


def array_from_bytes(raw: bytes, what: str):
    """The array of ``.npy`` bytes ``raw`` (header checked against --max-tensor-size first); a
    writable array of its own, as ``np.load`` gives."""
    shape, fortran, dtype, start = parse_header(raw)
    check_tensor_size(what, shape, dtype)
    count = _count(shape)
    nbytes = count * dtype.itemsize
    if len(raw) - start < nbytes:
        raise EOFError(f"EOF: reading array data, expected {nbytes} bytes got {len(raw) - start}")
    if not nbytes:
        return _shaped(np.empty(count, dtype), shape, fortran)
    return _shaped(np.frombuffer(raw, dtype=dtype, count=count, offset=start).copy(), shape, fortran)


class NpzMembers:
    """Reads the ``.npy`` members of an open ``zipfile.ZipFile``, header first.

    A member stored uncompressed is read with ``pread`` (no shared file offset: forked readers
    of one open file do not disturb each other) at the offset its local header gives; others
    through ``zipfile``."""

    def __init__(self, archive: zipfile.ZipFile, owner: object = None):
        self.archive = archive
        self._owner = owner  # (what closes the archive when collected: numpy's NpzFile)

    def info(self, member: str) -> zipfile.ZipInfo:
        names = self.archive.NameToInfo
        found = names.get(member + ".npy") or names.get(member)
        if found is None:
            raise KeyError(f"{member} is not a file in the archive")
        return found

    def _fd(self) -> Optional[int]:
        """The archive's file descriptor (None for an in-memory archive: stdin)."""
        fp = self.archive.fp
        if fp is None:
            raise ValueError("the archive is closed")
        fileno = getattr(fp, "fileno", None)
        if fileno is None:
            return None
        try:
            return fileno()
        except io.UnsupportedOperation:
            return None

    def _pread(self, size: int, offset: int) -> bytes:
        fd = self._fd()
        if fd is not None:
            return os.pread(fd, size, offset)
        fp = self.archive.fp
        assert fp is not None
        fp.seek(offset)
        return fp.read(size)

    def _stored(self, info: zipfile.ZipInfo) -> bool:
        return (info.compress_type == zipfile.ZIP_STORED and not info.flag_bits & 0x1
                and info.compress_size == info.file_size)

    def _local(self, info: zipfile.ZipInfo, want: Optional[int] = None) -> Tuple[int, bytes]:
        """(where a member's bytes begin, its first ``want`` bytes, by default ``HEAD_BYTES`` at
        most): its local header read and checked, usually in the same read as those bytes."""
        want = min(info.file_size, HEAD_BYTES) if want is None else want
        raw = self._pread(_LOCAL.size + len(info.filename) + 64 + want, info.header_offset)
        if len(raw) < _LOCAL.size:
            raise EOFError("Truncated file header")
        fields = _LOCAL.unpack(raw[: _LOCAL.size])
        if fields[0] != _LOCAL_MAGIC:
            raise zipfile.BadZipFile("Bad magic number for file header")
        name_end = _LOCAL.size + fields[10]
        start = name_end + fields[11]
        if len(raw) < start:  # (a long name or extra field: read again, now that their sizes are known)
            raw = self._pread(start + want, info.header_offset)
        name = raw[_LOCAL.size: name_end]
        if len(name) < fields[10] or name.decode("utf-8" if info.flag_bits & 0x800 else "cp437") != info.orig_filename:
            raise zipfile.BadZipFile(f"File name in directory {info.orig_filename!r} and header {name!r} differ.")
        head = raw[start: start + want]
        if len(head) < want:
            head = self._pread(want, info.header_offset + start)
        return info.header_offset + start, head

    def _head(self, info: zipfile.ZipInfo) -> bytes:
        if self._stored(info):
            return self._local(info)[1]
        with self._open(info) as f:
            return f.read(min(info.file_size, HEAD_BYTES))

    def _open(self, info: zipfile.ZipInfo):
        """A reader of a compressed member's bytes. A deflated member of an archive on disk is read
        with ``pread`` and inflated here: zipfile seeks the one file offset that forked readers of
        an open file share, so two of them reading at once read each other's bytes."""
        if (info.compress_type == zipfile.ZIP_DEFLATED and not info.flag_bits & 0x1
                and self._fd() is not None):
            return _Inflater(self, info)
        return self.archive.open(info)

    def header(self, member: str) -> Tuple[tuple, "np.dtype"]:
        """(shape, dtype) of ``member``, read from its header alone."""
        shape, _fortran, dtype, _end = parse_header(self._head(self.info(member)))
        return shape, dtype

    def array(self, member: str, what: str):
        """The array of ``member`` (``what`` names it in a size refusal)."""
        info = self.info(member)
        if not self._stored(info):
            return self._array_inflated(info, what)
        start, head = self._local(info)
        shape, fortran, dtype, end = parse_header(head)
        check_tensor_size(what, shape, dtype)
        count = _count(shape)
        nbytes = count * dtype.itemsize
        if info.file_size - end != nbytes:  # (a payload short, or followed by bytes numpy ignores)
            return self._array_inflated(info, what)
        if end + nbytes <= len(head):
            flat = np.frombuffer(head, dtype=dtype, count=count, offset=end).copy() if nbytes else np.empty(count, dtype)
            crc = zlib.crc32(head[: end + nbytes])
        else:
            flat = np.empty(count, dtype)
            self._read_into(flat.view(np.uint8).data, start + end)
            crc = zlib.crc32(flat.view(np.uint8).data, zlib.crc32(head[:end]))
        if crc != info.CRC:
            raise zipfile.BadZipFile(f"Bad CRC-32 for file {info.filename!r}")
        return _shaped(flat, shape, fortran)

    def _read_into(self, view: memoryview, offset: int) -> None:
        fd = self._fd()
        done = 0
        while done < len(view):
            step = min(len(view) - done, 1 << 30)
            if fd is not None and hasattr(os, "preadv"):
                got = os.preadv(fd, [view[done: done + step]], offset + done)
            else:
                data = self._pread(step, offset + done)
                got = len(data)
                view[done: done + got] = data
            if got <= 0:
                raise EOFError(f"EOF: reading array data, expected {len(view)} bytes got {done}")
            done += got

    def _array_inflated(self, info: zipfile.ZipInfo, what: str):
        """A member through zipfile (compressed, or odd): header, size check, then the payload one
        chunk at a time into the array (zipfile checks the CRC at the end)."""
        with self._open(info) as f:
            head = f.read(min(info.file_size, HEAD_BYTES))
            shape, fortran, dtype, end = parse_header(head)
            check_tensor_size(what, shape, dtype)
            count = _count(shape)
            flat = np.empty(count, dtype)
            if not count * dtype.itemsize:
                return _shaped(flat, shape, fortran)
            buf = flat.view(np.uint8).data
            have = head[end: end + len(buf)]
            buf[: len(have)] = have
            done = len(have)
            while done < len(buf):
                data = f.read(min(CHUNK_BYTES, len(buf) - done))
                if not data:
                    raise EOFError(f"EOF: reading array data, expected {len(buf)} bytes got {done}")
                buf[done: done + len(data)] = data
                done += len(data)
            while f.read(CHUNK_BYTES):  # (to the end: the CRC is checked there)
                pass
        return _shaped(flat, shape, fortran)


class _Inflater:
    """A deflated zip member read with ``pread`` (see :meth:`NpzMembers._open`): ``read(n)`` as
    zipfile's member reader does, the CRC and size checked once the end is reached."""

    def __init__(self, members: NpzMembers, info: zipfile.ZipInfo):
        self._members, self._info = members, info
        self._pos = members._local(info, want=0)[0]  # (the local header read and checked)
        self._left = info.compress_size
        self._inflate = zlib.decompressobj(-15)
        self._buf = b""
        self._crc = 0
        self._size = 0

    def __enter__(self) -> "_Inflater":
        return self

    def __exit__(self, *exc) -> None:
        return None

    def _more(self) -> bool:
        """Inflate at most ``CHUNK_BYTES`` more (a small member may inflate a thousandfold)."""
        if self._inflate.unconsumed_tail:
            raw = self._inflate.unconsumed_tail
        elif self._left > 0:
            raw = self._members._pread(min(CHUNK_BYTES, self._left), self._pos)
            if not raw:
                raise EOFError(f"EOF: member {self._info.filename!r} is cut short")
            self._pos += len(raw)
            self._left -= len(raw)
        else:
            tail = self._inflate.flush()
            self._take(tail)
            return bool(tail)
        self._take(self._inflate.decompress(raw, CHUNK_BYTES))
        return True

    def _take(self, data: bytes) -> None:
        self._crc = zlib.crc32(data, self._crc)
        self._size += len(data)
        if self._size > self._info.file_size:
            raise zipfile.BadZipFile(f"member {self._info.filename!r} inflates past its size")
        self._buf += data

    def read(self, n: int) -> bytes:
        while len(self._buf) < n and self._more():
            pass
        out, self._buf = self._buf[:n], self._buf[n:]
        if not out and (self._size != self._info.file_size or self._crc != self._info.CRC):
            raise zipfile.BadZipFile(f"Bad CRC-32 for file {self._info.filename!r}")
        return out


_EOCD = struct.Struct("<4s4H2LH")  # end of central directory (zipfile.structEndArchive)
_EOCD_MAGIC = b"PK\x05\x06"
_LOCATOR64 = struct.Struct("<4sLQL")  # zip64 end of central directory locator
_LOCATOR64_MAGIC = b"PK\x06\x07"
_EOCD64 = struct.Struct("<4sQ2H2L4Q")  # zip64 end of central directory record
_EOCD64_MAGIC = b"PK\x06\x06"
_CENTRAL = struct.Struct("<4s4B4HL2L5H2L")  # a central directory entry (zipfile.structCentralDir)
_CENTRAL_MAGIC = b"PK\x01\x02"
_FULL32, _FULL16 = 0xFFFFFFFF, 0xFFFF


def _central_end(fd: int, size: int) -> Optional[int]:
    """Where a zip file's central directory ends, from its end records alone (None when they
    are not where a plain zip file has them)."""
    span = min(size, _EOCD.size + _FULL16 + _LOCATOR64.size)
    tail = os.pread(fd, span, size - span)
    at = tail.rfind(_EOCD_MAGIC)
    if at < 0 or len(tail) - at < _EOCD.size:
        return None
    fields = _EOCD.unpack_from(tail, at)
    count, cd_size, cd_offset = fields[4], fields[5], fields[6]
    if count == _FULL16 or _FULL32 in (cd_size, cd_offset):  # zip64: the sizes are in its record
        if at < _LOCATOR64.size:
            return None
        locator = _LOCATOR64.unpack_from(tail, at - _LOCATOR64.size)
        record = os.pread(fd, _EOCD64.size, locator[2]) if locator[0] == _LOCATOR64_MAGIC else b""
        if len(record) < _EOCD64.size or record[:4] != _EOCD64_MAGIC:
            return None
        cd_size, cd_offset = _EOCD64.unpack(record)[8:10]
    return cd_offset + cd_size


def last_member_head(path: str, name: str, limit: int) -> Optional[bytes]:
    """The first ``limit`` bytes of member ``name`` of the zip file ``path`` when it is the last
    member of the central directory and stored uncompressed, found from the end of the file (the
    central directory of a file of 200k members is not read whole); None when it is not so."""
    with open(path, "rb") as f:
        fd = f.fileno()
        entry = _last_central_entry(fd, os.fstat(fd).st_size, name.encode())
        return None if entry is None else _stored_head(fd, entry, name.encode(), limit)


def _last_central_entry(fd: int, size: int, name: bytes) -> Optional[tuple]:
    """The central directory's last entry, when it is member ``name``, stored uncompressed, not
    encrypted, not zip64 (else None)."""
    end = _central_end(fd, size)
    if end is None or not 0 < end <= size:
        return None
    chunk = os.pread(fd, min(end, 4096), end - min(end, 4096))
    at = chunk.rfind(_CENTRAL_MAGIC)
    if at < 0 or len(chunk) - at < _CENTRAL.size:
        return None
    entry = _CENTRAL.unpack_from(chunk, at)
    name_len, extra_len, comment_len = entry[12:15]
    found = chunk[at + _CENTRAL.size: at + _CENTRAL.size + name_len]
    if (found != name or at + _CENTRAL.size + name_len + extra_len + comment_len != len(chunk)
            or entry[6] != zipfile.ZIP_STORED or entry[5] & 0x1 or _FULL32 in (entry[10], entry[18])):
        return None
    return entry


def _stored_head(fd: int, entry: tuple, name: bytes, limit: int) -> Optional[bytes]:
    """The first ``limit`` bytes of the stored member of central ``entry``, through its local header
    (None when that header is not the member's)."""
    want = min(entry[10], limit)
    raw = os.pread(fd, _LOCAL.size + entry[12] + 256 + want, entry[18])
    if len(raw) < _LOCAL.size or raw[:4] != _LOCAL_MAGIC:
        return None
    local = _LOCAL.unpack_from(raw, 0)
    start = _LOCAL.size + local[10] + local[11]
    if raw[_LOCAL.size: _LOCAL.size + local[10]] != name:
        return None
    head = raw[start: start + want]
    return head if len(head) == want else os.pread(fd, want, entry[18] + start)


def npy_text_head(raw: bytes, chars: int) -> Optional[str]:
    """The first ``chars`` characters of the unicode scalar whose ``.npy`` bytes begin ``raw``
    (None when it is not one)."""
    try:
        shape, _fortran, dtype, end = parse_header(raw)
    except (ValueError, EOFError):
        return None
    if shape or dtype.kind != "U" or dtype.byteorder == ">":
        return None
    text = raw[end: end + 4 * min(chars, dtype.itemsize // 4)]
    return text[: len(text) // 4 * 4].decode("utf-32-le", "replace").rstrip("\0")


def npy_header(archive: zipfile.ZipFile, member: str) -> Tuple[tuple, "np.dtype"]:
    """(shape, dtype) of ``member`` of an ``.npz`` archive, read from its ``.npy`` header (the
    first bytes of the member: a compressed payload is not inflated)."""
    return NpzMembers(archive).header(member)


def tensor_header(feed, name) -> Optional[tuple]:
    """The shape of tensor ``name`` of ``feed`` without reading its values where the file says
    it in a header (an ``.npz`` member); None when only the value can tell."""
    header = getattr(feed, "header", None)
    found = header(name) if header is not None else None
    return found[0] if found is not None else None


def check_tensor_size(what: str, shape: tuple, dtype) -> None:
    """InputError when an array of ``shape`` and ``dtype`` is over --max-tensor-size (read before
    any of it is inflated or allocated)."""
    count = 1
    for d in shape:
        count *= max(int(d), 0)
    nbytes = count * max(int(getattr(dtype, "itemsize", 1) or 1), 1)
    if nbytes > limits.max_tensor_bytes:
        raise InputError(
            f"{what} would take {limits.size_text(nbytes)} in memory (shape {list(shape)}, {dtype}), over the "
            f"{limits.size_text(limits.max_tensor_bytes)} limit for one array; nothing was inflated. If the file is "
            "right, raise the limit with --max-tensor-size"
        )

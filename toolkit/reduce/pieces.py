"""A model file cut into its serialized pieces, for ``debug reduce``'s candidates.

Every node, initializer and value info of the top graph is sliced out of the file's bytes
once (nothing re-serialized); a candidate's bytes are those pieces joined behind their
protobuf field headers, and :func:`write_chunks` writes them without a joined copy.
"""

from __future__ import annotations

import mmap
from typing import Dict, Optional

import onnx

from toolkit.core.errors import InputError
from toolkit.core.files.create import open_new
from toolkit.core.io.model import atomic_output
from toolkit.core.io.protowire import encode_field, field_header, header_len, scan_fields


class RawPieces:
    """The serialized pieces of a model file, sliced out of its bytes (nothing re-serialized).

    :meth:`scan` cuts the file into its fields; :meth:`light_bytes` is the same model with
    big weights reduced to stubs (name, dims, type: no data), cheap to parse and to keep
    in memory while candidates are written from the real pieces.
    """

    # TensorProto fields that hold data (the rest: dims, data_type, name, ... are kept)
    _DATA_FIELDS = frozenset({4, 5, 6, 7, 9, 10, 11})
    _DATA_LOCATION = 14
    STUB_BYTES = 1 << 16

    def __init__(self, data, header, graph_other, nodes, initializers, sparse):
        self.data = data  # keeps the buffer (bytes or mmap) alive
        self.header = header  # ModelProto fields except graph and training_info
        self.graph_other = graph_other  # [(field number, slice)] in file order
        self.nodes = nodes
        self.initializers = initializers
        self.sparse = sparse
        self.external = False  # some initializer's data lives in another file

    def release_pages(self) -> None:
        """Let the kernel drop the file's pages this process has read (they are read again
        if needed): keeps a pass over a big memory-mapped model from growing our memory."""

        advise = getattr(self.data, "madvise", None)
        if advise is not None and hasattr(mmap, "MADV_DONTNEED"):
            try:
                advise(mmap.MADV_DONTNEED)
            except (OSError, ValueError):
                pass

    @classmethod
    def scan(cls, data) -> Optional["RawPieces"]:
        """Cut ``data`` (a serialized ModelProto) into pieces; None if it is not one graph."""
        f = field_numbers()
        try:
            buf = memoryview(data)
            top = scan_fields(buf)
            graphs = [t for t in top if t[0] == f["graph"]]
            if len(graphs) != 1:
                return None
            header = b"".join(bytes(buf[s:e]) for num, s, _, e in top if num not in (f["graph"], _TRAINING_INFO))
            _, _, gstart, gend = graphs[0]
            nodes, inits, sparse, other = _graph_pieces(buf, gstart, gend, f)
        except ValueError:  # not a protobuf message (truncated, or a wire type protobuf no longer uses)
            return None
        return cls(data, header, other, nodes, inits, sparse)

    def light_bytes(self) -> Optional[bytes]:
        """The model with every initializer over STUB_BYTES cut down to a data-less stub.

        Sets :attr:`external` when an initializer says its data is in an external file.
        """
        f = field_numbers()
        parts = [piece for _, piece in self.graph_other] + list(self.nodes)
        try:
            parts += [self._light_initializer(piece, f["initializer"]) for piece in self.initializers]
        except ValueError:  # not a protobuf message (truncated, or a wire type protobuf no longer uses)
            return None
        parts.extend(self.sparse)
        length = sum(len(p) for p in parts)
        return b"".join([self.header, field_header(f["graph"], length)] + [bytes(p) for p in parts])

    def _light_initializer(self, piece, number: int):
        """One initializer piece (field ``number``), cut down to a data-less stub when over
        STUB_BYTES; sets :attr:`external` when its data is in an external file."""
        fields = scan_fields(piece, header_len(piece), len(piece))
        if any(num == self._DATA_LOCATION and p < e and piece[p] == 1 for num, _s, p, e in fields):
            self.external = True
        if len(piece) <= self.STUB_BYTES:
            return piece
        return encode_field(number, b"".join(bytes(piece[s:e]) for num, s, _, e in fields if num not in self._DATA_FIELDS))

    @staticmethod
    def payload(piece):
        """The message bytes of one field piece (without its tag and length)."""
        return piece[header_len(piece):]


_TRAINING_INFO = 20


def _graph_pieces(buf, start: int, end: int, f: Dict[str, int]):
    """The fields of the GraphProto in ``buf[start:end]``: (nodes, initializers, sparse
    initializers, [(field number, piece)] of the others)."""
    kept: Dict[int, list] = {f["node"]: [], f["initializer"]: [], f["sparse_initializer"]: []}
    other = []
    for num, s, _, e in scan_fields(buf, start, end):
        if num in kept:
            kept[num].append(buf[s:e])
        else:
            other.append((num, buf[s:e]))
    return kept[f["node"]], kept[f["initializer"]], kept[f["sparse_initializer"]], other


_FIELDS: Dict[str, int] = {}


def field_numbers() -> Dict[str, int]:
    """Field numbers of the GraphProto and ModelProto fields a candidate is built from."""
    if not _FIELDS:
        _FIELDS.update(_lookupfield_numbers())
    return _FIELDS


def _lookupfield_numbers():
    g = onnx.GraphProto.DESCRIPTOR.fields_by_name
    m = onnx.ModelProto.DESCRIPTOR.fields_by_name
    return {
        "node": g["node"].number,
        "name": g["name"].number,
        "initializer": g["initializer"].number,
        "sparse_initializer": g["sparse_initializer"].number,
        "input": g["input"].number,
        "output": g["output"].number,
        "value_info": g["value_info"].number,
        "quantization_annotation": g["quantization_annotation"].number,
        "metadata_props": g["metadata_props"].number,
        "graph": m["graph"].number,
    }


def write_chunks(path: str, chunks, *, atomic: bool = True) -> None:
    """Write buffers one after the other (no joined copy); atomically unless told not to."""

    try:
        if atomic:
            with atomic_output(path, "wb") as fh:
                for c in chunks:
                    fh.write(c)
        else:
            with open_new(path, "wb", buffering=1 << 20) as fh:
                for c in chunks:
                    fh.write(c)
    except OSError as exc:
        raise InputError(f"{path}: cannot write: {exc.strerror or exc}") from None

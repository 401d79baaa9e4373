"""The protobuf wire format, for editing serialized models without parsing their weights.

ONNX files are protobuf messages; a model's weights are most of its bytes. Slicing fields out
of the serialized bytes, and writing new fields around existing payloads, keeps big models
cheap to cut, patch and copy (``toolkit.reduce.graph``, ``toolkit.core.io.weights``).
"""

from __future__ import annotations

from typing import List, Optional, Tuple

LENGTH_DELIMITED = 2  # wire type of messages, bytes and strings


def varint(value: int) -> bytes:
    """``value`` (>= 0) as a protobuf varint."""
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def read_varint(buf, pos: int) -> Tuple[int, int]:
    """The varint at ``buf[pos:]``: (value, position after it); ValueError where ``buf`` ends first."""
    result = 0
    shift = 0
    end = len(buf)
    while pos < end:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
    raise ValueError("truncated protobuf message")


def field_header(number: int, length: int) -> bytes:
    """Tag and length of a length-delimited field ``number`` whose payload is ``length`` bytes."""
    return varint((number << 3) | LENGTH_DELIMITED) + varint(length)


def encode_field(number: int, payload: bytes) -> bytes:
    """One length-delimited protobuf field: tag, length, payload."""
    return field_header(number, len(payload)) + payload


def header_len(piece) -> int:
    """Length of a length-delimited field's tag and length prefix (where its payload starts)."""
    _, pos = read_varint(piece, 0)
    _, pos = read_varint(piece, pos)
    return pos


def scan_fields(buf, start: int = 0, end: Optional[int] = None) -> List[Tuple[int, int, int, int]]:
    """Top-level fields of a serialized message: (number, field start, payload start, end).

    ValueError for a wire type protobuf no longer uses (groups) or a truncated message."""
    end = len(buf) if end is None else end
    pos = start
    out = []
    while pos < end:
        field_start = pos
        key, pos = read_varint(buf, pos)
        number, wire = key >> 3, key & 7
        payload = pos
        if wire == LENGTH_DELIMITED:
            length, payload = read_varint(buf, pos)
            pos = payload + length
        elif wire == 0:
            _, pos = read_varint(buf, pos)
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        else:
            raise ValueError(f"unsupported protobuf wire type {wire}")
        out.append((number, field_start, payload, pos))
    if pos != end:
        raise ValueError("truncated protobuf message")
    return out

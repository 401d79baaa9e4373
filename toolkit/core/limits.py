"""Bounds on what a small hostile input may make a command allocate or build, each one
raisable by a common option (set by the CLI before the command runs).

- ``--max-tensor-size SIZE``: the largest array a data file may hold (its ``.npy`` header
  says how big it is before anything is inflated; a 2 MB ``.npz`` can declare 2 GiB), and the
  largest result constant folding computes (``Range(0, 10^12)`` is left unfolded).
- ``--max-nodes N``: the most nodes a model may have once its local functions are inlined,
  If/Loop/Scan bodies counted at any depth (3 KB of nested functions can inline to 2^18
  nodes); checked before onnx's shape inference or a runtime is called. Also the most steps
  times body nodes of a Loop or Scan that folding computes (or that sanitize's validation runs).

No numpy, onnx or Typer here: the CLI imports it at start-up.
"""

from __future__ import annotations

import re

from toolkit.core.errors import UsageError

DEFAULT_TENSOR_BYTES = 1 << 30
DEFAULT_NODES = 100_000

max_tensor_bytes = DEFAULT_TENSOR_BYTES
max_nodes = DEFAULT_NODES

_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_size(text: str, what: str = "--max-tensor-size") -> int:
    """``4G``, ``512MiB``, ``1.5g``, ``100000`` -> bytes (binary units)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d*)?)\s*([kmgt]?)(?:i?b)?\s*", str(text).lower())
    if not m:
        raise UsageError(f"{what} {text}: expected a size such as 4G, 512M or a number of bytes")
    return int(float(m.group(1)) * _UNITS[m.group(2)])


def parse_count(text: str, what: str = "--max-nodes") -> int:
    try:
        value = int(str(text).replace("_", ""))
    except ValueError:
        value = -1
    if value <= 0:
        raise UsageError(f"{what} {text}: expected a positive number")
    return value


def size_text(nbytes: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{nbytes} bytes"

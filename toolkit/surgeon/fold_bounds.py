"""What constant folding must not compute: a node whose result would be too big, or whose work
too long, is kept as it is (hidden from the folding run) before anything is computed.

A few hundred bytes of model can ask for terabytes: ``Range(0, 10^12)``, ``ConstantOfShape``,
``Tile`` or ``Expand`` of constants to a huge shape, a Loop of 10^12 steps, a Scan over a huge
constant. ONNX-Runtime, asked to fold them, fills memory or runs for days. Each pass, before the
folding run, every node is sized from what is known without computing it (the shapes inference
found, the values of constant inputs):

- a result over ``--max-tensor-size`` (or over ``--fold-size-threshold`` when given) is not
  folded;
- Range, ConstantOfShape, Tile, Expand, Loop and Scan whose result size is not known yet are
  not folded in this pass (a later pass, knowing more, may fold them);
- a Loop without a constant trip count, or a Loop or Scan whose steps times body nodes exceed
  ``--max-nodes``, is not folded.

The nodes kept and why are reported once each. No printing here.
"""

from __future__ import annotations

import math
from typing import Any, List, Optional, Tuple

import numpy as np

from toolkit.core import limits
from toolkit.surgeon.fold_noops import bodies, numpy_dtype
from toolkit.surgeon.plumbing import all_nodes, count_nodes

GROWING = ("Range", "ConstantOfShape", "Tile", "Expand", "Loop", "Scan")
UNKNOWN_SIZE = "its result's size is not known before computing it"


def oversized_nodes(gs, graph, size_threshold: Optional[int]) -> List[Tuple[Any, str]]:
    """[(node, why)] of the nodes of ``graph`` (bodies included) folding must leave alone."""
    cap = limits.max_tensor_bytes if size_threshold is None else min(limits.max_tensor_bytes, size_threshold)
    found = []
    for node in all_nodes(graph):
        if node.op.startswith("__"):  # (hidden already)
            continue
        why = _why_not(gs, node, cap)
        if why:
            found.append((node, why))
    return found


def _why_not(gs, node, cap: int) -> Optional[str]:
    if node.op in _STEPS:
        why = _loop_work(gs, node)
        if why:
            return why
    size = _result_bytes(gs, node)
    if size is None:
        return UNKNOWN_SIZE if node.op in GROWING else None
    return _over_cap(size, cap)


def _over_cap(size: int, cap: int) -> Optional[str]:
    """Why a result of ``size`` bytes is not folded (it is over ``cap``, and which option sets
    that); None where it is not."""
    if size <= cap:
        return None
    name = "--max-tensor-size" if cap == limits.max_tensor_bytes else "--fold-size-threshold"
    return f"its result would take {limits.size_text(size)} (over {name} {limits.size_text(cap)})"


def _loop_work(gs, node) -> Optional[str]:
    """Why a Loop or Scan runs too long to fold (None when its steps are known and few)."""
    steps_of, unknown = _STEPS[node.op]
    trips = steps_of(gs, node)
    if trips is None:
        return unknown
    body_nodes = sum(count_nodes(b) for b in bodies(node)) or 1
    if trips * body_nodes > limits.max_nodes:
        return (f"it runs {trips} steps of {body_nodes} nodes (over --max-nodes {limits.max_nodes}: raise it to "
                "fold such a loop)")
    return None


def _trip_count(gs, node) -> Optional[int]:
    """The constant trip count of a Loop (None when it has none or it is not a constant)."""
    return _scalar(gs, node.inputs[0] if node.inputs else None)


def _scan_length(gs, node) -> Optional[int]:
    n_scan = int(node.attrs.get("num_scan_inputs", 0))
    scans = list(node.inputs[len(node.inputs) - n_scan:]) if n_scan else []
    axes = list(node.attrs.get("scan_input_axes", [0] * len(scans)) or [0] * len(scans))
    lengths = []
    for t, axis in zip(scans, axes):
        shape = _static_shape(t)
        if not shape:  # (unknown, or a scalar: nothing to scan)
            return None
        lengths.append(shape[int(axis) % len(shape)])
    return max(lengths, default=None)


# Loop/Scan -> (its number of steps, or None; what to say when that is not known)
_STEPS = {
    "Loop": (_trip_count, "its trip count is not a constant"),
    "Scan": (_scan_length, "its number of steps is not known before running it"),
}


def _result_bytes(gs, node) -> Optional[int]:
    """Bytes of ``node``'s outputs, from inferred shapes or computed from constant inputs."""
    total = 0
    for i, out in enumerate(node.outputs):
        if out.is_empty():
            continue
        count = _output_count(gs, node, i)
        if count is None:
            return None
        total += count * _itemsize(out)
    return total


def _output_count(gs, node, i: int) -> Optional[int]:
    """Elements of output ``i`` of ``node``: from its inferred shape, else (the first output of an
    op of :data:`_COUNTS`) from constant inputs; None where neither tells."""
    count = _count_of(_static_shape(node.outputs[i]))
    if count is None and i == 0:
        return _computed_count(gs, node)
    return count


def _computed_count(gs, node) -> Optional[int]:
    """Elements of the first output of Range, ConstantOfShape, Tile or Expand from constant inputs."""
    count = _COUNTS.get(node.op)
    return count(gs, node.inputs) if count is not None else None


def _range_count(gs, ins) -> Optional[int]:
    if len(ins) != 3:
        return None
    start, limit, delta = (_scalar(gs, t, float) for t in ins)
    if start is None or limit is None or not delta:
        return None
    return max(0, math.ceil((limit - start) / delta))


def _constant_of_shape_count(gs, ins) -> Optional[int]:
    return _count_of(_values(gs, ins[0])) if ins else None


def _tile_count(gs, ins) -> Optional[int]:
    if len(ins) != 2:
        return None
    shape, reps = _static_shape(ins[0]), _values(gs, ins[1])
    if shape is None or reps is None or len(shape) != len(reps):
        return None
    return _count_of([a * b for a, b in zip(shape, reps)])


def _expand_count(gs, ins) -> Optional[int]:
    if len(ins) != 2:
        return None
    shape, target = _static_shape(ins[0]), _values(gs, ins[1])
    if shape is None or target is None:
        return None
    rank = max(len(shape), len(target))
    a = [1] * (rank - len(shape)) + list(shape)
    b = [1] * (rank - len(target)) + list(target)
    return _count_of([max(x, y) for x, y in zip(a, b)])


# op -> elements of its first output, from its inputs where those are constants (or None)
_COUNTS = {"Range": _range_count, "ConstantOfShape": _constant_of_shape_count, "Tile": _tile_count,
           "Expand": _expand_count}


def _numbers(gs, tensor) -> Optional[np.ndarray]:
    """The flat values of a constant of numbers (bool, int, float); None for anything else."""
    if tensor is None or not isinstance(tensor, gs.Constant):
        return None
    values = np.asarray(tensor.values).reshape(-1)
    return values if values.dtype.kind in "biuf" else None


def _values(gs, tensor) -> Optional[List[int]]:
    values = _numbers(gs, tensor)
    try:
        return [int(v) for v in values] if values is not None else None
    except (ValueError, OverflowError):  # NaN, infinity
        return None


def _scalar(gs, tensor, kind=int):
    values = _numbers(gs, tensor)
    if values is None or values.size != 1:
        return None
    try:
        return kind(values[0])
    except (ValueError, OverflowError):  # NaN, infinity
        return None


def _static_shape(tensor) -> Optional[List[int]]:
    shape = getattr(tensor, "shape", None)
    if shape is None:
        return None
    dims = list(shape)
    if not all(isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d >= 0 for d in dims):
        return None
    return [int(d) for d in dims]


def _count_of(dims) -> Optional[int]:
    if dims is None:
        return None
    count = 1
    for d in dims:
        if d < 0:
            return None
        count *= int(d)
    return count


def _itemsize(tensor) -> int:
    dtype = numpy_dtype(tensor)
    return max(dtype.itemsize, 1) if dtype is not None else 8


def note_kept(gs, kept: List[Tuple[Any, str]], log) -> None:
    """Log the nodes the last pass kept unfolded that folding would have computed (every input a
    constant), by name, else by their first output."""
    kept = [(node, why) for node, why in kept if _reads_constants_only(gs, node)]
    for node, why in kept[:_SHOWN]:
        log(f"Folding constants | left unfolded: {node.op} node {_shown_name(node)}: {why}")
    if len(kept) > _SHOWN:
        log(f"Folding constants | left unfolded: {len(kept) - _SHOWN} more such nodes")


_SHOWN = 10


def _reads_constants_only(gs, node) -> bool:
    """Every input of ``node`` is a constant (or omitted): folding would have computed it."""
    return all(isinstance(t, gs.Constant) or t.is_empty() for t in node.inputs)


def _shown_name(node) -> str:
    """How the log names ``node``: by its name, else by its first output."""
    if node.name:
        return repr(node.name)
    return f"producing {node.outputs[0].name!r}" if node.outputs else "(unnamed)"

"""Rewrites ``surgeon sanitize --optimize`` adds to ONNX-Runtime's basic level.

Each one is exact (or, for folding a normalization into weights, exact up to float rounding)
and keeps only standard ops:

- :func:`merge_slices`: a Slice of a Slice on other axes is one Slice;
- :func:`fold_into_conv_transpose`: a per-channel constant Add, or an inference
  BatchNormalization, after a ConvTranspose goes into its weights and bias (ONNX-Runtime
  fuses these into Conv, not into ConvTranspose).

They work on an onnx-graphsurgeon graph's top level and leave dead nodes to the caller's
``cleanup()``.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Set

import numpy as np

from toolkit.core.graph.graphs import fresh_name
from toolkit.surgeon.fold_noops import slice_params

_STANDARD = (None, "", "ai.onnx")  # onnx-graphsurgeon gives None for the default domain


def _consumed_once(tensor, graph_outputs: Set[int]) -> bool:
    return len(tensor.outputs) == 1 and id(tensor) not in graph_outputs


def _slice_params(gs, node, rank: Optional[int]) -> Optional[Dict[str, List[int]]]:
    """starts/ends/axes/steps of a standard Slice as lists, axes made non-negative; None when
    one is not a constant, or an axis is negative and the rank unknown."""
    if node.op != "Slice" or node.domain not in _STANDARD or len(node.inputs) > 5:
        return None
    params = slice_params(gs, node)
    if params is None:
        return None
    starts, ends, axes, steps = params
    axes = _nonnegative_axes(axes, rank)
    return None if axes is None else {"starts": starts, "ends": ends, "axes": axes, "steps": steps}


def _nonnegative_axes(axes: List[int], rank: Optional[int]) -> Optional[List[int]]:
    """``axes`` with negative ones counted from the end of a tensor of ``rank``; None when one is
    negative and the rank unknown."""
    if rank is None:
        return None if any(a < 0 for a in axes) else axes
    return [a + rank if a < 0 else a for a in axes]


def merge_slices(gs, graph) -> int:
    """Slice(Slice(x, ...), ...) on disjoint axes, the inner one read only there: one Slice of
    ``x`` with both sets of starts/ends/axes/steps. Returns how many Slices were merged away."""

    graph_outputs = {id(t) for t in graph.outputs}
    taken = set(graph.tensors())
    merged = 0
    for node in list(graph.nodes):
        found = _slice_of_slice(gs, node, graph_outputs)
        if found is None:
            continue
        data, first, second = found
        params = _merged_params(gs, node.name or node.inputs[0].name, first, second, taken)
        node.inputs.clear()
        node.inputs.extend([data] + params)
        merged += 1
    return merged


def _merged_params(gs, base: str, first: dict, second: dict, taken: Set[str]) -> list:
    """The starts/ends/axes/steps constants (named after ``base``) of one Slice doing both the
    ``first`` and the ``second`` Slice's work."""
    return [
        gs.Constant(fresh_name(f"{base}_{key}", taken), np.array(first[key] + second[key], dtype=np.int64))
        for key in ("starts", "ends", "axes", "steps")
    ]


def _slice_of_slice(gs, node, graph_outputs: Set[int]):
    """``(x, inner params, outer params)`` where ``node`` is a Slice of a Slice of ``x`` on other
    axes, the inner Slice's output read only there; else None."""
    inner = _inner_slice(node, graph_outputs)
    if inner is None:
        return None
    data = inner.inputs[0]
    rank = len(data.shape) if data.shape is not None else None
    first, second = _slice_params(gs, inner, rank), _slice_params(gs, node, rank)
    if first is None or second is None or set(first["axes"]) & set(second["axes"]):
        return None
    return data, first, second


def _inner_slice(node, graph_outputs: Set[int]):
    """The Slice computing what Slice ``node`` slices, its one output read only there; else None."""
    if node.op != "Slice" or not node.inputs or len(node.inputs[0].inputs) != 1:
        return None
    middle = node.inputs[0]
    inner = middle.inputs[0]
    if inner.op != "Slice" or not _consumed_once(middle, graph_outputs) or len(inner.outputs) != 1:
        return None
    return inner


def _per_channel(values, channels: int, rank: int):
    """``values`` (a constant added to a rank-``rank`` NC... tensor) as one number per channel,
    or None when it varies along another axis or does not broadcast so."""

    if values.ndim > rank or values.dtype.kind != "f" or rank < 2:
        return None
    if not _one_per_channel((1,) * (rank - values.ndim) + tuple(values.shape), channels):
        return None
    return np.broadcast_to(np.asarray(values, dtype=np.float64).reshape(-1), (channels,))


def _one_per_channel(shape: tuple, channels: int) -> bool:
    """A constant of ``shape`` (of the NC... tensor's rank) holds one value per channel, or one for
    all: every dim but C is 1, and C is 1 or ``channels``."""
    return shape[1] in (1, channels) and all(d == 1 for i, d in enumerate(shape) if i != 1)


def _conv_transpose_of(gs, tensor, graph_outputs: Set[int]):
    """The ConvTranspose computing ``tensor`` with constant weights (and bias), its output read
    once; else None."""
    if len(tensor.inputs) != 1 or not _consumed_once(tensor, graph_outputs):
        return None
    node = tensor.inputs[0]
    return node if _is_foldable_conv_transpose(gs, node) else None


def _is_foldable_conv_transpose(gs, node) -> bool:
    """``node`` is a standard ConvTranspose with constant float weights and no bias or a constant one."""
    if node.op != "ConvTranspose" or node.domain not in _STANDARD or len(node.inputs) < 2:
        return False
    bias = _bias(node)
    return _float_weights(gs, node.inputs[1]) and (bias is None or isinstance(bias, gs.Constant))


def _float_weights(gs, weight) -> bool:
    """``weight`` is a constant float tensor of rank 3 or more (a convolution's weights)."""
    return isinstance(weight, gs.Constant) and weight.values.dtype.kind == "f" and weight.values.ndim >= 3


def _bias(node):
    """The bias input of a ConvTranspose ``node``; None where it has none."""
    return node.inputs[2] if len(node.inputs) > 2 and node.inputs[2].name else None


def _channels(node) -> int:
    weight = node.inputs[1].values
    return int(weight.shape[1]) * int(node.attrs.get("group", 1))


def _rewrite(gs, node, scale, shift, taken: Set[str]) -> None:
    """ConvTranspose ``node`` computing ``y * scale + shift`` per output channel."""

    weight = node.inputs[1].values
    group = int(node.attrs.get("group", 1))
    c_in, per_group = int(weight.shape[0]), int(weight.shape[1])
    grouped = weight.astype(np.float64).reshape((group, c_in // group, per_group) + weight.shape[2:])
    factor = scale.reshape((group, 1, per_group) + (1,) * (weight.ndim - 2))
    new_weight = (grouped * factor).reshape(weight.shape).astype(weight.dtype)
    bias = _bias(node)
    old_bias = bias.values.astype(np.float64) if bias is not None else 0.0
    new_bias = (old_bias * scale + shift).astype(weight.dtype)
    base = node.name or node.outputs[0].name
    w = gs.Constant(fresh_name(f"{base}_weight", taken), new_weight)
    b = gs.Constant(fresh_name(f"{base}_bias", taken), new_bias)
    data = node.inputs[0]
    node.inputs.clear()
    node.inputs.extend([data, w, b])


def _take_output(node, after) -> None:
    """``node`` now computes what ``after`` did: it takes ``after``'s output tensor."""
    out = after.outputs[0]
    after.outputs.clear()
    after.inputs.clear()
    node.outputs.clear()
    node.outputs.append(out)


def fold_into_conv_transpose(gs, graph) -> int:
    """Fold a per-channel constant ``Add`` and an inference ``BatchNormalization`` that follow a
    ConvTranspose (constant weights, output read only there) into its weights and bias.
    Returns how many nodes were folded away."""

    graph_outputs = {id(t) for t in graph.outputs}
    taken = set(graph.tensors())
    folded = 0
    for after in list(graph.nodes):
        found = _scale_shift_after_conv_transpose(gs, after, graph_outputs)
        if found is None:
            continue
        node, scale, shift = found
        _rewrite(gs, node, scale, shift, taken)
        _take_output(node, after)
        folded += 1
    return folded


def _scale_shift_after_conv_transpose(gs, after, graph_outputs: Set[int]):
    """``(ConvTranspose, scale, shift)`` where the standard node ``after`` (an op of
    :data:`_SCALE_SHIFT`) computes a per-channel scale and shift of what a foldable ConvTranspose
    computes; else None."""
    as_scale_shift = _SCALE_SHIFT.get(after.op)
    if as_scale_shift is None or after.domain not in _STANDARD or len(after.outputs) != 1 or not after.inputs:
        return None
    return as_scale_shift(gs, after, graph_outputs)


def _add_as_scale_shift(gs, after, graph_outputs: Set[int]):
    """``(ConvTranspose, scale, shift)`` where ``after`` adds a per-channel constant to what a
    foldable ConvTranspose computes; else None."""
    if len(after.inputs) != 2:
        return None
    k = 0 if isinstance(after.inputs[1], gs.Constant) else 1
    node = _conv_transpose_of(gs, after.inputs[k], graph_outputs)
    const = after.inputs[1 - k]
    if node is None or not isinstance(const, gs.Constant):
        return None
    # the ConvTranspose's output has the weight's rank
    shift = _per_channel(const.values, _channels(node), node.inputs[1].values.ndim)
    return None if shift is None else (node, np.ones_like(shift), shift)


def _batchnorm_as_scale_shift(gs, after, graph_outputs: Set[int]):
    """``(ConvTranspose, scale, shift)`` where ``after`` is an inference BatchNormalization (constant
    1-D parameters, one per channel) of what a foldable ConvTranspose computes; else None."""
    if len(after.inputs) != 5 or after.attrs.get("training_mode", 0):
        return None
    node = _conv_transpose_of(gs, after.inputs[0], graph_outputs)
    params = _vectors(gs, after.inputs[1:])
    if node is None or params is None or len(params[0]) != _channels(node):
        return None
    gamma, beta, mean, var = params
    scale = gamma / np.sqrt(var + float(after.attrs.get("epsilon", 1e-5)))
    return node, scale, beta - mean * scale


def _vectors(gs, tensors) -> Optional[list]:
    """The values of ``tensors`` as float64 vectors, where each is a 1-D constant; else None."""
    if not all(isinstance(t, gs.Constant) and t.values.ndim == 1 for t in tensors):
        return None
    return [t.values.astype(np.float64) for t in tensors]


# op after a ConvTranspose -> what it computes per channel as (ConvTranspose, scale, shift), or None
_SCALE_SHIFT = {"Add": _add_as_scale_shift, "BatchNormalization": _batchnorm_as_scale_shift}


def optimizer_rewrites(gs, graph) -> Dict[str, Any]:
    """Every rewrite of this module on ``graph``, repeated while one applies: counts by name."""
    counts = {"Slice(s) merged": 0, "node(s) folded into ConvTranspose": 0}
    while True:
        step = {"Slice(s) merged": merge_slices(gs, graph), "node(s) folded into ConvTranspose": fold_into_conv_transpose(gs, graph)}
        if not any(step.values()):
            return counts
        for key, n in step.items():
            counts[key] += n

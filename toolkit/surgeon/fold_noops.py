"""Nodes that pass their input through unchanged, found on an onnx-graphsurgeon graph.

``sanitize --remove-noops`` (and ``--optimize``) remove them, never constant folding alone (their
readers read the input instead): ``Identity``, ``Dropout`` at
inference, ``Cast`` to the dtype the input already has, ``Reshape`` to the input's own shape,
``Slice`` over the whole of every axis it names, ``Transpose`` with the identity permutation,
and ``Add``/``Sub`` of zeros and ``Mul``/``Div`` by ones that broadcast nothing. Every test
here needs facts the graph states (constants, inferred dtypes and dims); where one is
unknown the node is kept.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np
import onnx
from onnx import helper

from toolkit.core.errors import reraise_bug
from toolkit.core.graph.graphs import fresh_name

# Slice ends at or beyond this cover the whole axis whatever its size (exporters write INT_MAX/INT64_MAX).
_WHOLE_AXIS = 2**31 - 1

# op -> (neutral element, positions the constant may take)
_NEUTRAL = {"Add": (0, (0, 1)), "Sub": (0, (1,)), "Mul": (1, (0, 1)), "Div": (1, (1,))}


# Standard ops with graph attributes; nodes of other domains may have them too.
_BODY_OPS = frozenset(("If", "Loop", "Scan", "SequenceMap"))


def bodies(node):
    """``node``'s subgraphs, without scanning the attributes of the (many) standard ops that have none."""
    if node.op not in _BODY_OPS and node.domain in (None, "", "ai.onnx"):
        return ()
    return node.subgraphs()


def noop_source(gs, node, graph_outputs) -> Optional[Any]:
    """The tensor ``node`` (a node with inputs and outputs) passes through unchanged, or None when
    it is not such a node. The tests of :data:`_PASS_THROUGH` are called here only, for their op,
    and with one output but for Dropout."""
    op = node.op
    if len(node.outputs) != 1 and op != "Dropout":
        return None
    if op in _NEUTRAL:
        return _neutral_operand_source(gs, node)
    passes_first_input = _PASS_THROUGH.get(op)
    if passes_first_input is None or not passes_first_input(gs, node, graph_outputs):
        return None
    return node.inputs[0]


def _is_noop_identity(gs, node, graph_outputs) -> bool:
    return len(node.inputs) == 1


def numpy_dtype(tensor) -> Optional[np.dtype]:
    """The numpy dtype of an onnx-graphsurgeon tensor; None where it has none (unknown, or the
    ONNX type number, an int, that onnx-graphsurgeon keeps for a type numpy has no name for)."""
    dtype = getattr(tensor, "dtype", None)
    if isinstance(dtype, type) and issubclass(dtype, np.generic):
        return np.dtype(dtype)
    return dtype if isinstance(dtype, np.dtype) else None


def _is_noop_cast(gs, node, graph_outputs) -> bool:
    to = node.attrs.get("to")
    if len(node.inputs) != 1 or not isinstance(to, (int, np.integer)):
        return False
    have = numpy_dtype(node.inputs[0])
    try:
        want = np.dtype(helper.tensor_dtype_to_np_dtype(int(to)))
    except KeyError as exc:  # a type number onnx does not know
        reraise_bug(exc)
        return False
    return have is not None and have == want


def is_static_dim(d) -> bool:
    """``d`` is a fixed dim: a non-negative int (not a name, None, or an exporter's -1)."""
    return isinstance(d, int) and not isinstance(d, bool) and d >= 0


def _static_shape(tensor):
    shape = tensor.shape
    if shape is None:
        return None
    return [d if is_static_dim(d) else None for d in shape]


def _is_noop_transpose(gs, node, graph_outputs) -> bool:
    perm = node.attrs.get("perm")
    if perm is None or len(node.inputs) != 1:
        return False
    return list(perm) == list(range(len(perm)))


def _const_ints(gs, tensor):
    if not isinstance(tensor, gs.Constant) or tensor.values.ndim != 1 or tensor.values.dtype.kind not in "iu":
        return None
    return [int(v) for v in tensor.values.tolist()]


def slice_params(gs, node):
    """``(starts, ends, axes, steps)`` of a Slice (opset 10+ form) whose parameters are 1-D
    integer constants of one length, axes and steps defaulted as ONNX does; else None."""
    if len(node.inputs) < 3:
        return None
    starts, ends = _const_ints(gs, node.inputs[1]), _const_ints(gs, node.inputs[2])
    if starts is None or ends is None:
        return None
    axes = _optional_ints(gs, node, 3, list(range(len(starts))))
    steps = _optional_ints(gs, node, 4, [1] * len(starts))
    if axes is None or steps is None or not (len(starts) == len(ends) == len(axes) == len(steps)):
        return None
    return starts, ends, axes, steps


def _optional_ints(gs, node, k: int, default: list):
    """Optional input ``k`` of ``node`` as :func:`_const_ints` reads it; ``default`` where it is omitted."""
    if len(node.inputs) <= k or node.inputs[k].is_empty():
        return default
    return _const_ints(gs, node.inputs[k])


def _is_noop_slice(gs, node, graph_outputs) -> bool:
    """Every named axis is taken whole, in order: start 0 (or -dim), end past the last element, step 1."""
    shape = _static_shape(node.inputs[0])
    params = slice_params(gs, node) if shape is not None else None
    if params is None:
        return False
    return all(_keeps_axis(shape, *axis_params) for axis_params in zip(*params))


def _keeps_axis(shape, start: int, end: int, axis: int, step: int) -> bool:
    """Slicing ``axis`` of a tensor of ``shape`` from ``start`` to ``end`` by ``step`` keeps all
    of it, in order."""
    rank = len(shape)
    return step == 1 and -rank <= axis < rank and _takes_whole_axis(start, end, shape[axis % rank])


def _takes_whole_axis(start: int, end: int, dim: Optional[int]) -> bool:
    """Slicing ``start:end`` keeps the whole of an axis of size ``dim`` (None: unknown)."""
    if dim is None:
        return start == 0 and end >= _WHOLE_AXIS
    return _clamped(start, dim) == 0 and _clamped(end, dim) == dim


def _clamped(index: int, dim: int) -> int:
    """A Slice start or end as ONNX reads it on an axis of size ``dim``: negative counts from the end."""
    return min(max(index + dim if index < 0 else index, 0), dim)


def _neutral_operand_source(gs, node):
    """For Add/Sub of zeros and Mul/Div by ones: the other operand, when the constant broadcasts
    nothing onto it (its dims are 1 or the other's, and it has no more of them) and the dtypes match."""

    if len(node.inputs) != 2:
        return None
    neutral, positions = _NEUTRAL[node.op]
    for pos in positions:
        const, data = node.inputs[pos], node.inputs[1 - pos]
        if _is_neutral_constant(gs, const, data, neutral) and _broadcasts_nothing(gs, const.values, data):
            return data
    return None


def _is_neutral_constant(gs, const, data, neutral) -> bool:
    """``const`` is a constant (read from the model, not from disk) of ``neutral`` values, with
    the dtype of the computed tensor ``data``."""
    if not isinstance(const, gs.Constant) or isinstance(data, gs.Constant):
        return False
    if const.data_location == onnx.TensorProto.EXTERNAL:
        return False  # big weights left on disk (read only if the result keeps them): not read for this
    values = const.values
    if values.size == 0 or not np.all(values == neutral):
        return False
    have = numpy_dtype(data)
    return have is not None and have == values.dtype


def _broadcasts_nothing(gs, values, data) -> bool:
    """The constant ``values`` broadcast nothing onto ``data``: its dims are 1 or data's, and it
    has no more of them."""
    shape = data.shape
    if shape is None:
        # rank unknown: a one-element constant broadcasts nothing onto a tensor of at least its rank
        return values.size == 1 and values.ndim <= _min_rank(gs, data)
    if values.ndim > len(shape):
        return False
    tail = list(shape)[len(shape) - values.ndim:]
    return all(c == 1 or (isinstance(d, int) and c == d) for c, d in zip(values.shape, tail))


# Ops whose output has the rank of their broadcast inputs (the largest).
_ELEMENTWISE = frozenset(
    "Add Sub Mul Div Pow Max Min Sum Mean Where Relu LeakyRelu PRelu Sigmoid HardSigmoid HardSwish Tanh Clip "
    "Sqrt Exp Log Neg Abs Erf Reciprocal Floor Ceil Round Sign Softplus Elu Selu Gelu Mish Cast Identity".split()
)
# Ops whose output rank is at least this (their input must have N and C dims).
_AT_LEAST = {"Conv": 3, "ConvTranspose": 3, "MaxPool": 3, "AveragePool": 3, "GlobalAveragePool": 3,
             "GlobalMaxPool": 3, "BatchNormalization": 2, "InstanceNormalization": 3, "LRN": 3}


def _min_rank(gs, tensor, depth: int = 0) -> int:
    """A lower bound of ``tensor``'s rank from the graph's facts (0 when nothing is known)."""
    if isinstance(tensor, gs.Constant):
        return int(tensor.values.ndim)
    if tensor.shape is not None:
        return len(tensor.shape)
    if depth > 64 or len(tensor.inputs) != 1:
        return 0
    return _min_output_rank(gs, tensor.inputs[0], depth)


def _min_output_rank(gs, producer, depth: int) -> int:
    """A lower bound of the rank of what node ``producer`` computes, from its op (0 when it tells nothing)."""
    if producer.op in _AT_LEAST:
        return _AT_LEAST[producer.op]
    if producer.op in _ELEMENTWISE:
        return max((_min_rank(gs, t, depth + 1) for t in producer.inputs if not t.is_empty()), default=0)
    return 0


def _is_noop_reshape(gs, node, graph_outputs) -> bool:
    """A Reshape to the shape its input already has: a constant target of the same rank whose
    entries equal the input's static dims (or 0, "keep"), with at most one -1 standing for the
    input's only dim that is not static."""
    if len(node.inputs) < 2:
        return False
    shape = _static_shape(node.inputs[0])
    if shape is None:
        return False
    dims = _const_ints(gs, node.inputs[1])
    if dims is None or len(dims) != len(shape) or (node.attrs.get("allowzero", 0) and 0 in dims):
        return False
    return _keeps_shape(dims, shape)


def _keeps_shape(dims, shape) -> bool:
    """Reshape target ``dims`` (of ``shape``'s rank) give a tensor of ``shape`` (static dims, None
    for unknown ones) that same shape: each entry is 0 (copy), the dim itself, or -1 standing for
    the only dim that is not static (or for any one dim when all are static)."""
    unknown = [i for i, d in enumerate(shape) if d is None]
    if len(unknown) > 1 or dims.count(-1) > 1:
        return False
    return all(_keeps_dim(want, have, i, unknown) for i, (want, have) in enumerate(zip(dims, shape)))


def _keeps_dim(want: int, have: Optional[int], i: int, unknown: list) -> bool:
    """Reshape target entry ``want`` at ``i`` keeps dim ``have`` (None: not static): it is 0
    (copy), the dim itself, or -1 standing for the dim at ``i`` when that is the only one not
    static (``unknown``: the positions of those) or all are static."""
    return want in (0, have) or (want == -1 and unknown in ([], [i]))


def _is_inference_dropout(gs, node, graph_outputs) -> bool:
    """A Dropout that is an identity at inference: no training_mode (or a constant false),
    not the old test-mode attribute set to training, and its mask output unused."""
    if not node.attrs.get("is_test", True) or not _training_mode_off(gs, node):
        return False
    return not any(mask.outputs or id(mask) in graph_outputs for mask in node.outputs[1:])


def _training_mode_off(gs, node) -> bool:
    """The Dropout's training_mode input is absent or a constant false."""
    if len(node.inputs) < 3 or node.inputs[2].is_empty():
        return True
    mode = node.inputs[2]
    return isinstance(mode, gs.Constant) and not bool(mode.values.reshape(-1)[0])


# op -> does the node pass its first input through unchanged (neutral Add/Sub/Mul/Div: see _NEUTRAL)
_PASS_THROUGH = {
    "Identity": _is_noop_identity, "Dropout": _is_inference_dropout, "Reshape": _is_noop_reshape,
    "Cast": _is_noop_cast, "Slice": _is_noop_slice, "Transpose": _is_noop_transpose,
}


def replace_input(node, old, new) -> None:
    """``node`` reads ``new`` wherever it read ``old``."""
    for i, t in enumerate(list(node.inputs)):
        if t is old:
            node.inputs[i] = new


def read_instead(old, new) -> None:
    """Every node that reads tensor ``old`` reads ``new`` instead."""
    for reader in list(old.outputs):
        replace_input(reader, old, new)


def eliminate_noops(gs, graph) -> int:
    """Remove pass-through nodes from ``graph`` and every If/Loop/Scan body: their readers read
    the input instead. Where the node gives a graph's output, the input's producer writes that
    output instead when it is a node of the same graph with no body and no other ties; else
    the node stays (an output needs a node of its own there). Returns how many were removed."""
    removed = _eliminate_in(gs, graph)
    for node in list(graph.nodes):
        for sub in bodies(node):
            removed += eliminate_noops(gs, sub)
    return removed


def _eliminate_in(gs, graph) -> int:
    removed = 0
    outputs = {id(t) for t in graph.outputs}
    graph_ends = outputs | {id(t) for t in graph.inputs}
    own = {id(n) for n in graph.nodes}
    for node in list(graph.nodes):
        src = _passed_on(gs, node, outputs)
        if src is not None:
            removed += _remove_pass_through(gs, node, src, outputs, own, graph_ends)
    return removed


def _remove_pass_through(gs, node, src, outputs: set, own: set, graph_ends: set) -> bool:
    """Remove pass-through ``node`` (it passes on ``src``); False where it gives a graph output
    (in ``outputs``) that no other node can write (see :func:`_output_to_producer`)."""
    if id(node.outputs[0]) not in outputs:
        _bypass(node, src)
        return True
    return _output_to_producer(gs, node, src, own, graph_ends)


def _passed_on(gs, node, graph_outputs):
    """The tensor (not an omitted input) that pass-through ``node`` passes on; None when ``node``
    is no pass-through node."""
    if not node.outputs or not node.inputs:
        return None
    src = noop_source(gs, node, graph_outputs)
    return None if src is None or src.is_empty() else src


def _bypass(node, src) -> None:
    """Remove pass-through ``node``: the readers of its output read ``src`` instead."""
    read_instead(node.outputs[0], src)
    node.inputs.clear()
    node.outputs.clear()


def _output_to_producer(gs, node, src, own, graph_ends) -> bool:
    """Remove pass-through ``node`` whose output is a graph output: ``src``'s producer writes that
    output instead and src's other readers read it. Only where the producer is a node of this
    graph (in ``own``) with no body and no Identity, and src is not a constant nor a graph input
    or output (in ``graph_ends``); else False, and nothing changes."""
    producer = _plain_producer(src, own)
    if producer is None or id(src) in graph_ends or isinstance(src, gs.Constant):
        return False
    dst = node.outputs[0]
    read_instead(src, dst)  # (``node`` too, whose inputs are cleared next)
    node.inputs.clear()
    node.outputs.clear()
    producer.outputs[producer.outputs.index(src)] = dst
    return True


def _producer(tensor):
    """The node computing graphsurgeon ``tensor``; None for a graph input or a constant."""
    return tensor.inputs[0] if len(tensor.inputs) == 1 else None


def _plain_producer(tensor, own):
    """The one node computing ``tensor``, where it is a node of this graph (in ``own``) with no
    body and no Identity; else None."""
    producer = _producer(tensor)
    if producer is None or id(producer) not in own or producer.op == "Identity" or any(True for _ in bodies(producer)):
        return None
    return producer


def _concat_parts(gs, tensor):
    """The parts of the 1-D Concat that computes ``tensor`` (through integer Casts), or None."""
    node = _producer(tensor)
    while node is not None and node.op == "Cast" and len(node.inputs) == 1:
        node = _producer(node.inputs[0])
    if node is None or node.op != "Concat" or int(node.attrs.get("axis", 0)) not in (0, -1):
        return None
    return list(node.inputs)


def _dynamic_target(gs, node, copy_dynamic: bool = False):
    """For a Reshape whose target is a Concat of constants and one computed scalar entry, where
    the computed entry can only be one dim of the data: the target as a constant, with -1 for
    that entry. It can only be that dim when the data dims the target does not copy (with 0)
    are static but one, and hold as many elements as the positive constants ask. A 0 copies a
    static dim; with ``copy_dynamic``, a dynamic one too: the same for every input but an
    empty one (a copied dim of size 0 leaves -1 undefined)."""

    read = _computed_target(gs, node)
    if read is None or read[1] != 1 or not _entry_fixed_by(read[0], _static_shape(node.inputs[0]), copy_dynamic):
        return None
    return np.array(read[0], dtype=np.int64)


def _computed_target(gs, node):
    """``(entries, computed)`` (see :func:`_target_entries`) of the target of ``node``, a Reshape
    (no allowzero) of data of known rank whose target a Concat computes; else None."""
    if node.op != "Reshape" or len(node.inputs) < 2 or node.attrs.get("allowzero", 0):
        return None
    data, target = node.inputs[0], node.inputs[1]
    if isinstance(target, gs.Constant) or data.shape is None:
        return None
    return _target_entries(gs, _concat_parts(gs, target))


def _target_entries(gs, parts):
    """``(entries, computed)``: the Concat ``parts`` of a Reshape target as its entries, -1 for each
    of the ``computed`` one-element parts; None when a part is neither a 1-D integer constant nor
    such a part (or there are no parts: the target is no Concat)."""
    if not parts:
        return None
    entries, computed = [], 0
    for part in parts:
        ints = _const_ints(gs, part)
        if ints is not None:
            entries += ints
        elif part.shape is not None and list(part.shape) == [1]:
            computed += 1
            entries.append(-1)
        else:
            return None
    return entries, computed


def _entry_fixed_by(entries, dims, copy_dynamic: bool) -> bool:
    """The one computed entry (-1) of Reshape target ``entries`` can only be one dim of data of
    ``dims``: no other entry is negative, the dims the entries copy (0) exist and are not empty
    (and static unless ``copy_dynamic``), and the dims not copied are static but one and hold as
    many elements as the positive entries ask."""
    copied = {i for i, e in enumerate(entries) if e == 0}
    if sum(e < 0 for e in entries) > 1 or not _copyable(dims, copied, copy_dynamic):
        return False
    return _one_dim_left([d for i, d in enumerate(dims) if i not in copied], [e for e in entries if e > 0])


def _one_dim_left(rest, asked) -> bool:
    """Of the data dims ``rest`` (those no entry copies), one is dynamic and the static ones hold
    as many elements as the positive target entries ``asked``: the computed entry is that dim."""
    if rest.count(None) != 1:
        return False
    return int(np.prod([d for d in rest if d is not None], dtype=np.int64)) == int(np.prod(asked, dtype=np.int64))


def _copyable(dims, copied, copy_dynamic: bool) -> bool:
    """Every dim of ``dims`` at the ``copied`` positions exists and is not empty, and is static
    unless ``copy_dynamic``."""
    for i in copied:
        if i >= len(dims) or dims[i] == 0 or (dims[i] is None and not copy_dynamic):
            return False
    return True


def computed_reshape_targets(gs, graph) -> bool:
    """Whether a Reshape of ``graph``'s top level takes its target from a Concat that is not
    constant (a candidate for :func:`constant_reshape_targets`)."""
    return any(
        node.op == "Reshape" and len(node.inputs) > 1 and not isinstance(node.inputs[1], gs.Constant)
        and bool(_concat_parts(gs, node.inputs[1]))
        for node in graph.nodes
    )


def constant_reshape_targets(gs, graph, copy_dynamic: bool = False) -> int:
    """Replace computed Reshape targets that can only be one value by that constant (see
    :func:`_dynamic_target`), in ``graph`` and its bodies; the computation left unused goes
    with the next cleanup. Returns how many were replaced."""
    replaced = 0
    taken = None  # the graph's tensor names, gathered once there is a target to name
    for node in list(graph.nodes):
        for sub in bodies(node):
            replaced += constant_reshape_targets(gs, sub, copy_dynamic)
        values = _dynamic_target(gs, node, copy_dynamic)
        if values is None:
            continue
        taken = set(graph.tensors()) if taken is None else taken
        node.inputs[1] = gs.Constant(fresh_name(f"{node.inputs[1].name}_const", taken), values)
        replaced += 1
    return replaced

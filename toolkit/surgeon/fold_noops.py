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
    """The tensor ``node`` passes through unchanged, or None when it is not such a node."""
    op = node.op
    if len(node.outputs) != 1 and op != "Dropout":
        return None
    if op == "Identity" and len(node.inputs) == 1:
        return node.inputs[0]
    if op == "Dropout":
        return node.inputs[0] if is_inference_dropout(gs, node, graph_outputs) else None
    if op == "Reshape":
        return node.inputs[0] if is_noop_reshape(gs, node) else None
    if op == "Cast":
        return node.inputs[0] if _is_noop_cast(node) else None
    if op == "Slice":
        return node.inputs[0] if _is_noop_slice(gs, node) else None
    if op == "Transpose":
        return node.inputs[0] if _is_noop_transpose(node) else None
    if op in _NEUTRAL:
        return _neutral_operand_source(gs, node)
    return None


def numpy_dtype(tensor) -> Optional[np.dtype]:
    """The numpy dtype of an onnx-graphsurgeon tensor; None where it has none (unknown, or the
    ONNX type number, an int, that onnx-graphsurgeon keeps for a type numpy has no name for)."""
    dtype = getattr(tensor, "dtype", None)
    if isinstance(dtype, type) and issubclass(dtype, np.generic):
        return np.dtype(dtype)
    return dtype if isinstance(dtype, np.dtype) else None


def _is_noop_cast(node) -> bool:
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


def _static_shape(tensor):
    shape = tensor.shape
    if shape is None:
        return None
    return [d if isinstance(d, int) and not isinstance(d, bool) and d >= 0 else None for d in shape]


def _is_noop_transpose(node) -> bool:
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

    def given(k):
        return None if len(node.inputs) <= k or node.inputs[k].is_empty() else node.inputs[k]

    starts, ends = _const_ints(gs, node.inputs[1]), _const_ints(gs, node.inputs[2])
    if starts is None or ends is None:
        return None
    axes = list(range(len(starts))) if given(3) is None else _const_ints(gs, given(3))
    steps = [1] * len(starts) if given(4) is None else _const_ints(gs, given(4))
    if axes is None or steps is None or not (len(starts) == len(ends) == len(axes) == len(steps)):
        return None
    return starts, ends, axes, steps


def _is_noop_slice(gs, node) -> bool:
    """Every named axis is taken whole, in order: start 0 (or -dim), end past the last element, step 1."""
    shape = _static_shape(node.inputs[0]) if node.inputs else None
    params = slice_params(gs, node) if shape is not None else None
    if params is None or shape is None:
        return False
    starts, ends, axes, steps = params
    rank = len(shape)
    for start, end, axis, step in zip(starts, ends, axes, steps):
        if step != 1 or not -rank <= axis < rank:
            return False
        dim = shape[axis % rank]
        if dim is None:
            if start != 0 or end < _WHOLE_AXIS:
                return False
            continue
        if min(max(start + dim if start < 0 else start, 0), dim) != 0:
            return False
        if min(max(end + dim if end < 0 else end, 0), dim) != dim:
            return False
    return True


def _neutral_operand_source(gs, node):
    """For Add/Sub of zeros and Mul/Div by ones: the other operand, when the constant broadcasts
    nothing onto it (its dims are 1 or the other's, and it has no more of them) and the dtypes match."""

    if len(node.inputs) != 2:
        return None
    neutral, positions = _NEUTRAL[node.op]
    for pos in positions:
        const, data = node.inputs[pos], node.inputs[1 - pos]
        if not isinstance(const, gs.Constant) or isinstance(data, gs.Constant):
            continue
        if const.data_location == onnx.TensorProto.EXTERNAL:
            continue  # big weights left on disk (read only if the result keeps them): not read for this
        values = const.values
        if values.size == 0 or not np.all(values == neutral):
            continue
        have = numpy_dtype(data)
        if have is None or have != values.dtype:
            continue
        shape = data.shape
        if shape is None:
            # rank unknown: a one-element constant broadcasts nothing onto a tensor of at least its rank
            if values.size == 1 and values.ndim <= _min_rank(gs, data):
                return data
            continue
        if values.ndim > len(shape):
            continue
        tail = list(shape)[len(shape) - values.ndim:]
        if all(c == 1 or (isinstance(d, int) and c == d) for c, d in zip(values.shape, tail)):
            return data
    return None


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
    producer = tensor.inputs[0]
    if producer.op in _AT_LEAST:
        return _AT_LEAST[producer.op]
    if producer.op in _ELEMENTWISE:
        return max((_min_rank(gs, t, depth + 1) for t in producer.inputs if not t.is_empty()), default=0)
    return 0


def is_noop_reshape(gs, node) -> bool:
    """A Reshape to the shape its input already has: a constant target of the same rank whose
    entries equal the input's static dims (or 0, "keep"), with at most one -1 standing for the
    input's only dim that is not static."""
    if node.op != "Reshape" or len(node.inputs) < 2 or len(node.outputs) != 1:
        return False
    shape = _static_shape(node.inputs[0])
    if shape is None:
        return False
    dims = _const_ints(gs, node.inputs[1])
    if dims is None or len(dims) != len(shape) or (node.attrs.get("allowzero", 0) and 0 in dims):
        return False
    unknown = [i for i, d in enumerate(shape) if d is None]
    if len(unknown) > 1:
        return False
    for i, (want, have) in enumerate(zip(dims, shape)):
        if want == 0:
            continue
        if want == -1:
            if unknown and unknown != [i]:
                return False
            continue
        if want != have:
            return False
    return dims.count(-1) <= 1 and (not unknown or dims[unknown[0]] in (-1, 0))


def is_inference_dropout(gs, node, graph_outputs) -> bool:
    """A Dropout that is an identity at inference: no training_mode (or a constant false),
    not the old test-mode attribute set to training, and its mask output unused."""
    if node.op != "Dropout" or not node.inputs or not node.outputs:
        return False
    if "is_test" in node.attrs and not node.attrs["is_test"]:
        return False
    if len(node.inputs) >= 3 and not node.inputs[2].is_empty():
        mode = node.inputs[2]
        if not isinstance(mode, gs.Constant) or bool(mode.values.reshape(-1)[0]):
            return False
    for mask in node.outputs[1:]:
        if mask.outputs or id(mask) in graph_outputs:
            return False
    return True


def _replace_input(node, old, new) -> None:
    for i, t in enumerate(list(node.inputs)):
        if t is old:
            node.inputs[i] = new


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
    inputs = {id(t) for t in graph.inputs}
    own = {id(n) for n in graph.nodes}
    for node in list(graph.nodes):
        if not node.outputs or not node.inputs:
            continue
        src = noop_source(gs, node, outputs)
        if src is None or src.is_empty():
            continue
        dst = node.outputs[0]
        if id(dst) in outputs:
            producer = src.inputs[0] if len(src.inputs) == 1 else None
            if (producer is None or id(producer) not in own or id(src) in outputs or id(src) in inputs
                    or isinstance(src, gs.Constant) or any(True for _ in bodies(producer))
                    or producer.op == "Identity"):
                continue
            # src's producer now writes dst; src's other readers read dst.
            for reader in list(src.outputs):
                if reader is not node:
                    _replace_input(reader, src, dst)
            node.inputs.clear()
            node.outputs.clear()
            producer.outputs[producer.outputs.index(src)] = dst
        else:
            for reader in list(dst.outputs):
                _replace_input(reader, dst, src)
            node.inputs.clear()
            node.outputs.clear()
        removed += 1
    return removed


def _concat_parts(gs, tensor):
    """The parts of the 1-D Concat that computes ``tensor`` (through integer Casts), or None."""
    node = tensor.inputs[0] if len(tensor.inputs) == 1 else None
    while node is not None and node.op == "Cast" and len(node.inputs) == 1:
        src = node.inputs[0]
        node = src.inputs[0] if len(src.inputs) == 1 else None
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

    if node.op != "Reshape" or len(node.inputs) < 2 or node.attrs.get("allowzero", 0):
        return None
    data, target = node.inputs[0], node.inputs[1]
    if isinstance(target, gs.Constant) or data.shape is None:
        return None
    parts = _concat_parts(gs, target)
    if not parts:
        return None
    entries, computed = [], []
    for part in parts:
        if isinstance(part, gs.Constant) and part.values.ndim == 1 and part.values.dtype.kind in "iu":
            entries += [int(v) for v in part.values.tolist()]
        elif part.shape is not None and list(part.shape) == [1]:
            computed.append(len(entries))
            entries.append(-1)
        else:
            return None
    dims = _static_shape(data)
    if len(computed) != 1 or dims is None:
        return None
    known = [e for i, e in enumerate(entries) if i != computed[0]]
    copied = {i for i, e in enumerate(entries) if e == 0}
    if any(e < 0 for e in known) or any(i >= len(dims) or dims[i] == 0 for i in copied):
        return None
    if not copy_dynamic and any(dims[i] is None for i in copied):
        return None
    rest = [d for i, d in enumerate(dims) if i not in copied]
    if rest.count(None) != 1:
        return None
    wanted = int(np.prod([e for e in known if e > 0], dtype=np.int64))
    if int(np.prod([d for d in rest if d is not None], dtype=np.int64)) != wanted:
        return None
    return np.array(entries, dtype=np.int64)


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

"""Quantized (QDQ) models: their Q/DQ pairs, and taking pairs back to float (or requantizing one).

A *pair* is a ``QuantizeLinear`` whose output is read only by ``DequantizeLinear`` nodes
(one or several), on an activation (a tensor computed at run time) or on a weight (an
initializer). A weight stored already quantized (an integer initializer read by a
``DequantizeLinear``, the usual output of onnxruntime's quantizer) is a *weight pair* too
when its float values are known (from a float reference model).

*Bypassing* a pair takes its tensor back to float: the readers of the DQ output read the
tensor before the Q instead. Quantizers fold a ``Relu`` or ``Clip`` into the Q's range (the
node is gone; the Q reads its input). With the float model at hand, a tensor the float model
computes with a ``Relu``/``Clip`` the quantized model lacks gets that node back when bypassed
(a ``Clip`` with the float model's bounds), and nothing else: a bypassed pair is the float
model's computation exactly. Without it, a pair whose integer range starts at 0
(zero point at the type's minimum: a folded ``Relu``, or a tensor never negative) gets a
``Relu``; a folded ``Clip``'s upper bound is then not known and not kept.

Tensor names of a QDQ model are matched to the float model's by name and through the Q/DQ
naming of onnxruntime's quantizer (``X_QuantizeLinear_Input``, ``X_DequantizeLinear_Output``,
``X_quantized``); quantizers that insert Q/DQ on an existing tensor (ModelOpt, NNCF) leave the
float tensor's name on the Q's input, which the plain name match covers.

No Typer or Rich here.
"""

from __future__ import annotations

import math

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

import numpy as np
import onnx
from onnx import helper, numpy_helper

from toolkit.core.graph.constants import constant_values
from toolkit.core.graph.graphs import node_outputs
from toolkit.core.io.model import infer_shapes
from toolkit.core.shapes import node_reads

QUANT_SUFFIXES = ("_QuantizeLinear_Input", "_DequantizeLinear_Output_1", "_DequantizeLinear_Output",
                  "_QuantizeLinear_Output", "_quantized")
# integer-arithmetic (QOperator) ops: read, but not searchable as pairs
INTEGER_OPS = {"ConvInteger", "MatMulInteger", "QLinearConv", "QLinearMatMul", "DynamicQuantizeLinear",
               "QLinearAdd", "QLinearMul", "QLinearSigmoid", "QLinearLeakyRelu", "QLinearConcat",
               "QLinearAveragePool", "QLinearGlobalAveragePool", "QGemm", "QAttention", "DynamicQuantizeMatMul",
               "MatMulIntegerToFloat"}
# the integer types a Q/DQ pair can carry (QuantizeLinear's outputs, DequantizeLinear's inputs: int32 for
# the biases onnxruntime's quantizer writes) -> their range. A float type (float8, float4) is no integer grid:
# such a Q or DQ starts no pair (:func:`_int_range`)
_INT_RANGES = {
    onnx.TensorProto.INT8: (-128, 127), onnx.TensorProto.UINT8: (0, 255),
    onnx.TensorProto.INT16: (-32768, 32767), onnx.TensorProto.UINT16: (0, 65535),
    onnx.TensorProto.INT32: (-(2 ** 31), 2 ** 31 - 1),
    onnx.TensorProto.INT4: (-8, 7), onnx.TensorProto.UINT4: (0, 15),
    **({onnx.TensorProto.INT2: (-2, 1), onnx.TensorProto.UINT2: (0, 3)} if hasattr(onnx.TensorProto, "INT2") else {}),
}
_INT_TYPES: Dict[np.dtype, Any] = {}  # numpy type -> ONNX type: the first listed wins (onnx 1.16/1.17 give INT4 int8)
for _t in _INT_RANGES:
    _INT_TYPES.setdefault(np.dtype(helper.tensor_dtype_to_np_dtype(_t)), _t)


@dataclass
class Pair:
    """One Q/DQ pair (or a weight's DQ)."""

    name: str  # the Q node's name (the DQ's for a weight stored quantized)
    tensor: str  # the float tensor quantized (the Q's input; the float weight's name)
    outputs: List[str]  # the DQ outputs (what the readers read)
    dq_nodes: List[str]
    scale: np.ndarray
    zero_point: np.ndarray
    qmin: int
    qmax: int
    axis: Optional[int] = None  # per-channel axis
    weight: bool = False
    q_node: Optional[str] = None  # None: a weight stored quantized (no Q)
    float_name: Optional[str] = None  # the tensor's name in the float model, when matched
    float_value: Optional[np.ndarray] = None  # a weight stored quantized: its float values
    # (lo, hi) of an activation the quantizer folded into the Q (a Relu, a Clip): kept when bypassed
    folded: Optional[Tuple[float, float]] = None
    # the float model was consulted: ``folded`` is all a bypass keeps (a range starting at 0 is
    # then the calibration's, not a folded Relu: a bypass adds nothing)
    exact: bool = False
    user_name: Optional[str] = None  # the tensor as the user's graph calls it (a quantizer's suffix removed)

    @property
    def shown(self) -> str:
        """The tensor's name for people: the user's graph's (a quantizer's suffix removed), else the float
        model's, else as stored."""
        return self.user_name or self.float_name or self.tensor

    def clamp(self) -> Optional[Tuple[float, float]]:
        """What a bypass keeps of the Q's range: the folded activation's bounds; without the float
        model, (0, inf) for a range starting at 0; None: nothing."""
        if self.folded is not None or self.exact:
            return self.folded
        return (0.0, math.inf) if self.starts_at_zero and not self.weight else None

    @property
    def starts_at_zero(self) -> bool:
        """The integer range starts at 0 (a folded Relu, or a tensor never negative)."""
        return bool(np.all(self.zero_point.astype(np.int64) == self.qmin))

    def bounds(self, ndim: int):
        """(lo, hi): the float values of qmin and qmax, shaped to broadcast on a tensor of ``ndim`` dims."""
        s = self.scale.astype(np.float64)
        zp = self.zero_point.astype(np.float64)
        lo, hi = (self.qmin - zp) * s, (self.qmax - zp) * s
        return _along(lo, self.axis, ndim), _along(hi, self.axis, ndim), _along(s, self.axis, ndim)

    def describe(self) -> str:
        scale = _short(self.scale)
        zp = _short(self.zero_point)
        return f"{self.name} on {self.shown} (scale {scale}, zero point {zp})"


def _short(arr: np.ndarray) -> str:
    flat = np.asarray(arr).ravel()
    if flat.size == 1:
        return f"{flat[0]:.4g}" if flat.dtype.kind == "f" else str(int(flat[0]))
    return f"per-channel x{flat.size}"


def _along(arr: np.ndarray, axis: Optional[int], ndim: int) -> np.ndarray:
    if arr.ndim == 0 or arr.size == 1 or axis is None or ndim == 0:
        return arr.reshape(()) if arr.size == 1 else arr
    shape = [1] * ndim
    shape[axis % ndim] = arr.size
    return arr.reshape(shape)


def fake_quantize(pair: Pair, x) -> np.ndarray:
    """``x`` quantized and dequantized by ``pair`` in numpy (round half to even, saturating), as
    QuantizeLinear then DequantizeLinear compute it."""
    arr = np.asarray(x, dtype=np.float32)
    s = _along(pair.scale.astype(np.float32), pair.axis, arr.ndim)
    zp = _along(pair.zero_point.astype(np.float32), pair.axis, arr.ndim)
    with np.errstate(invalid="ignore", over="ignore"):
        q = np.clip(np.round(arr / s) + zp, pair.qmin, pair.qmax)
        return ((q - zp) * s).astype(np.float32)


def integer_ops(model) -> List[str]:
    """The integer-arithmetic (QOperator) op types the model holds, sorted."""
    return sorted({n.op_type for n in model.graph.node if n.op_type in INTEGER_OPS})


def is_quantized(model) -> bool:
    return any(n.op_type in ("QuantizeLinear", "DequantizeLinear") or n.op_type in INTEGER_OPS for n in model.graph.node)


def _int_range(node, zp: Optional[np.ndarray]) -> Optional[Tuple[int, int]]:
    """The integer range of Q or DQ ``node``: its ``output_dtype``, else its zero point's type (a
    stored weight's own type for a DQ without one), else uint8 (QuantizeLinear's default). None: a type
    that is no integer grid (float8, float4), or one ONNX does not define."""
    for attr in node.attribute:
        if attr.name == "output_dtype" and attr.i:
            return _INT_RANGES.get(attr.i)
    if zp is None:
        return _INT_RANGES[onnx.TensorProto.UINT8]
    return _INT_RANGES.get(_INT_TYPES.get(np.dtype(zp.dtype), onnx.TensorProto.UNDEFINED))


def _axis(node) -> int:
    return next((a.i for a in node.attribute if a.name == "axis"), 1)


def find_pairs(model, *, weights: bool = False, float_model=None) -> List[Pair]:
    """The model's Q/DQ pairs in node order: activation pairs, and with ``weights`` the weight
    pairs (a weight stored quantized only when ``float_model`` has its float values)."""
    values = constant_values(model.graph)
    ref = FloatModel(float_model) if float_model is not None else None
    # (weights stored quantized: searched only with ``weights``)
    pairs = [p for p in _all_pairs(model, values, ref if weights else None) if weights or not p.weight]
    graph_inputs = {i.name for i in model.graph.input} - set(values)
    known = _tensor_names(model)
    for pair in pairs:
        pair.user_name = match_name(pair.tensor, known - {pair.tensor})
        _match_float(pair, ref, model, graph_inputs)
    return pairs


def _all_pairs(model, values, weight_ref: Optional["FloatModel"]) -> List[Pair]:
    """Every pair a node of ``model`` starts, in node order (:func:`_pair_of`)."""
    readers = _readers(model)
    graph_outputs = {o.name for o in model.graph.output}
    pairs = [_pair_of(node, readers, values, graph_outputs, weight_ref) for node in model.graph.node]
    return [p for p in pairs if p is not None]


def _tensor_names(model) -> Set[str]:
    """The names of the top graph's node outputs, inputs and outputs."""
    graph = model.graph
    return set(node_outputs(graph)) | {i.name for i in graph.input} | {o.name for o in graph.output}


def _readers(model) -> Dict[str, List]:
    """Tensor name -> the top-level nodes that read it."""
    readers: Dict[str, List] = {}
    for node in model.graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    return readers


def _pair_of(node, readers, values, graph_outputs, weight_ref: Optional["FloatModel"]) -> Optional[Pair]:
    """The pair ``node`` starts: a Q with its DQs; or (given the float model ``weight_ref``) the DQ of a
    weight stored quantized."""
    if node.op_type == "QuantizeLinear":
        return _q_pair(node, readers, values, graph_outputs)
    if node.op_type == "DequantizeLinear" and weight_ref is not None and node.input[0] in values:
        return _stored_weight(node, values, weight_ref.weights)
    return None


def _match_float(pair: Pair, ref: Optional["FloatModel"], model, graph_inputs: Set[str]) -> None:
    """The pair's tensor in the float model ``ref`` (its name, a folded activation), and whether
    bypassing the pair gives exactly the float tensor."""
    if ref is not None:
        pair.float_name = match_name(pair.tensor, ref.names)
        pair.folded = ref.folded(pair.tensor, model)
        pair.exact = True
    elif pair.tensor in graph_inputs and not pair.weight:
        pair.exact = True  # a graph input has no activation folded into its Q: bypassed, it is itself


class FloatModel:
    """What the pairs need of the float model: tensor names, weights, folded activations."""

    def __init__(self, model):
        self.weights = constant_values(model.graph)
        self.producer = {o: n for n in model.graph.node for o in n.output}
        self.names = set(self.producer) | {i.name for i in model.graph.input} | set(self.weights)
        self._qdq_producers: Optional[Dict[str, str]] = None

    def folded(self, tensor: str, qdq_model) -> Optional[Tuple[float, float]]:
        """(lo, hi) when the float model computes ``tensor`` with a Relu or Clip that the quantized
        model no longer has (the quantizer folded it into the Q's range)."""
        node = self.producer.get(tensor)
        if node is None or node.op_type not in ("Relu", "Clip") or self._qdq_op(tensor, qdq_model) == node.op_type:
            return None
        return (0.0, math.inf) if node.op_type == "Relu" else self._clip_bounds(node)

    def _qdq_op(self, tensor: str, qdq_model) -> Optional[str]:
        """The op type computing ``tensor`` in the quantized model (None: no node computes it)."""
        if self._qdq_producers is None:
            self._qdq_producers = {o: n.op_type for n in qdq_model.graph.node for o in n.output}
        return self._qdq_producers.get(tensor)

    def _clip_bounds(self, node) -> Tuple[float, float]:
        """A Clip's (min, max): its constant inputs, else its attributes (Clip-6), else unbounded."""
        attrs = {a.name: a.f for a in node.attribute}
        bounds = [attrs.get("min", -math.inf), attrs.get("max", math.inf)]
        for k in (1, 2):
            if len(node.input) > k and node.input[k] in self.weights:
                bounds[k - 1] = float(np.asarray(self.weights[node.input[k]]).ravel()[0])
        return (float(bounds[0]), float(bounds[1]))


def _scale_zp(node, values):
    scale = values.get(node.input[1])
    zp = values.get(node.input[2]) if len(node.input) > 2 and node.input[2] else None
    return scale, zp


def _grid(node, values, range_zp=None) -> Optional[dict]:
    """The quantization grid of Q or DQ ``node``: scale, zero point, integer range and axis (None
    without a constant scale, or on a type that is no integer grid). Without a zero point, the integer
    range follows ``range_zp``'s type."""
    scale, zp = _scale_zp(node, values)
    if scale is None:
        return None
    grid = _int_range(node, zp if zp is not None else range_zp)
    if grid is None:  # (a float grid: not measured as integers)
        return None
    qmin, qmax = grid
    zp = zp if zp is not None else np.zeros_like(scale, dtype=np.int64)
    return dict(scale=np.asarray(scale), zero_point=np.asarray(zp), qmin=qmin, qmax=qmax,
                axis=_axis(node) if np.asarray(scale).size > 1 else None)


def _q_pair(node, readers, values, graph_outputs) -> Optional[Pair]:
    out = node.output[0]
    dqs = readers.get(out, [])
    grid = _grid(node, values) if _only_dequantized(out, dqs, graph_outputs) else None
    if grid is None:
        return None
    return Pair(name=node.name or out, tensor=node.input[0], outputs=[d.output[0] for d in dqs],
                dq_nodes=[d.name for d in dqs], weight=node.input[0] in values, q_node=node.name, **grid)


def _only_dequantized(out: str, readers: List, graph_outputs: Set[str]) -> bool:
    """A Q's output ``out`` is read, and only as the data input of ``DequantizeLinear`` nodes (not a graph output)."""
    if not readers or out in graph_outputs:
        return False
    return all(d.op_type == "DequantizeLinear" and d.input[0] == out for d in readers)


def _stored_weight(node, values, float_weights) -> Optional[Pair]:
    name = match_name(node.input[0], float_weights) or match_name(node.output[0], float_weights)
    if name is None:
        return None
    grid = _grid(node, values, values[node.input[0]])
    if grid is None:
        return None
    return Pair(name=node.name or node.output[0], tensor=name, outputs=[node.output[0]], dq_nodes=[node.name],
                weight=True, float_value=float_weights[name], **grid)


def pairs_at_op_types(model, pairs: Sequence[Pair], op_types: Sequence[str]) -> List[str]:
    """Names of the pairs on an input or the output of a node of ``op_types`` (each item may hold
    several, comma-separated: ``LayerNormalization,Softmax``): a DQ output such a node reads, or a
    tensor such a node computes."""
    wanted = _op_type_names(op_types)
    if not wanted:
        return []
    reads, writes = _tensors_of(model, wanted)
    return [p.name for p in pairs if p.tensor in writes or not reads.isdisjoint(p.outputs)]


def absent_op_types(model, op_types: Sequence[str]) -> List[Tuple[str, Optional[str]]]:
    """The op types of ``op_types`` (as :func:`pairs_at_op_types` reads them) that no node of the top
    graph has, each with the model's op type it differs from only in case, if any (or None)."""
    present = {node.op_type for node in model.graph.node}
    by_case = {t.lower(): t for t in present}
    return [(t, by_case.get(t.lower())) for t in sorted(_op_type_names(op_types)) if t not in present]


def _op_type_names(items: Sequence[str]) -> Set[str]:
    """The op types of option items, each one or several comma-separated."""
    return {t.strip() for item in items for t in item.split(",")} - {""}


def _tensors_of(model, op_types: Set[str]) -> Tuple[Set[str], Set[str]]:
    """(the tensors read, the tensors written) by the top graph's nodes of ``op_types``."""
    reads: Set[str] = set()
    writes: Set[str] = set()
    for node in model.graph.node:
        if node.op_type in op_types:
            reads.update(node.input)
            writes.update(node.output)
    return reads, writes


# ops that move or select values without computing new ones: their output holds only values of
# their (first) input, so a pair after one with its input pair's scale and zero point re-quantizes
# values already on that grid
MOVING_OPS = {"Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Slice", "Gather", "GatherElements",
              "GatherND", "Split", "Expand", "Tile", "Identity", "MaxPool", "DepthToSpace", "SpaceToDepth"}


def tied_pairs(model, pairs: Sequence[Pair]) -> Dict[str, str]:
    """Pairs that only re-quantize their input pair's values on the same grid, each mapped to the
    first pair of its chain: a pair whose Q reads the output of a value-moving op (``Reshape``,
    ``Slice``, ``Gather``, ...) fed by another pair's DQ, with the same scale, zero point and
    integer range. Alone in float such a pair changes nothing (its input is already on its grid);
    with its input pair in float it clips and rounds that pair's values again, so the two go to
    float together."""
    producer = {o: n for n in model.graph.node for o in n.output}
    by_output = _by_dq_output(pairs)
    tied: Dict[str, str] = {}
    axes = _AxisMap(model)
    for p in pairs:
        up = _requantized(p, producer, by_output, axes)
        if up is not None:
            tied[p.name] = tied.get(up.name, up.name)
    return _to_roots(tied)


def _by_dq_output(pairs: Sequence[Pair]) -> Dict[str, Pair]:
    """Each DQ output of the activation pairs -> its pair."""
    return {o: p for p in pairs if not p.weight for o in p.outputs}


def _to_roots(tied: Dict[str, str]) -> Dict[str, str]:
    """``tied`` with each pair mapped to the first pair of its chain (``tied`` updated in place)."""
    for name, root in list(tied.items()):
        while root in tied:
            root = tied[root]
        tied[name] = root
    return tied


def _requantized(p: Pair, producer, by_output: Dict[str, Pair], axes: "_AxisMap") -> Optional[Pair]:
    """The pair whose values activation pair ``p`` re-quantizes on the same grid after a value-moving op (or None)."""
    node = _moving_producer(p, producer)
    if node is None:
        return None
    up = by_output.get(node.input[0])
    if up is None or up is p or not _same_grid(up, p):
        return None
    # (a per-channel pair: the op may move the channels, the values then on another channel's grid)
    return up if _channels_kept(p, up, node, axes) else None


def _moving_producer(p: Pair, producer) -> Optional[onnx.NodeProto]:
    """The value-moving node computing activation pair ``p``'s tensor from an input (None: none does)."""
    node = None if p.weight else producer.get(p.tensor)
    if node is None or node.op_type not in MOVING_OPS or not node.input:
        return None
    return node


def _channels_kept(p: Pair, up: Pair, node, axes: "_AxisMap") -> bool:
    """A per-tensor ``p``, or value-moving ``node`` keeps ``up``'s channel axis where ``p`` has its own."""
    return not _per_channel(p) or axes.keeps(node, up.axis, p.axis)


def _per_channel(p: Pair) -> bool:
    return p.axis is not None and p.scale.size > 1


class _AxisMap:
    """Whether a value-moving node's output keeps its input's channel axis in place (per-channel
    values stay on their channel's scale): Identity and MaxPool (axis 1); Transpose where ``perm``
    maps the one axis to the other; Slice along other axes; Reshape, Flatten, Squeeze and Unsqueeze
    where static shapes prove it (the same channel count, the same number of elements before it).
    Anything else, or unknown shapes: not provably kept."""

    def __init__(self, model):
        self.model = model
        self._shapes: Optional[Dict[str, List[int]]] = None

    def shape(self, name: str) -> Optional[List[int]]:
        if self._shapes is None:
            self._shapes = _static_shapes(self.model)
        return self._shapes.get(name)

    def keeps(self, node, a_axis: Optional[int], b_axis: Optional[int]) -> bool:
        shape_in, shape_out = self.shape(node.input[0]), self.shape(node.output[0])
        if node.op_type == "Transpose":
            return _transpose_keeps(node, a_axis, b_axis, shape_out)
        a, b = _from_front(a_axis, _rank(shape_in)), _from_front(b_axis, _rank(shape_out))
        keeps = _KEEPS.get(node.op_type)
        if keeps is None or a is None or b is None:
            return False
        return keeps(self, node, a, b, shape_in, shape_out)

    def _slice_keeps(self, node, a: int, b: int, shape_in: Optional[List[int]], _shape_out) -> bool:
        """The same axis, and the Slice's axes (constant) leave it alone."""
        if a != b:
            return False
        if len(node.input) > 3 and node.input[3]:
            return self._axes_spare(node.input[3], a, _rank(shape_in))
        starts = _initializer(self.model, node.input[1]) if len(node.input) > 1 else None
        return starts is not None and a >= np.size(starts)

    def _axes_spare(self, name: str, axis: int, rank: Optional[int]) -> bool:
        """The constant axes ``name`` (of a tensor of ``rank``) are known and leave ``axis`` alone."""
        axes = _initializer(self.model, name)
        if axes is None:
            return False
        resolved = [_from_front(int(v), rank) for v in np.ravel(axes)]
        return None not in resolved and axis not in resolved


def _rank(shape: Optional[List[int]]) -> Optional[int]:
    return len(shape) if shape is not None else None


def _same_axis(_axes: _AxisMap, _node, a: int, b: int, _shape_in, _shape_out) -> bool:
    """Identity and MaxPool keep every axis in place."""
    return a == b


def _transpose_keeps(node, a_axis: Optional[int], b_axis: Optional[int], shape_out: Optional[List[int]]) -> bool:
    """``perm`` (default: reversed, known from the output's rank) maps output axis ``b`` to input axis ``a``."""
    perm = _perm(node, shape_out)
    if perm is None:
        return False
    a, b = _from_front(a_axis, len(perm)), _from_front(b_axis, len(perm))
    return b is not None and perm[b] == a  # (a None, unknown, equals no axis)


def _perm(node, shape_out: Optional[List[int]]) -> Optional[List[int]]:
    """A Transpose's ``perm``: its attribute, else the reversed axes of an output of known rank (None: unknown)."""
    perm = next((list(t.ints) for t in node.attribute if t.name == "perm"), None)
    if perm is None and shape_out is not None:
        perm = list(reversed(range(len(shape_out))))
    return perm


def _reshape_keeps(_axes: _AxisMap, _node, a: int, b: int, shape_in: Optional[List[int]],
                   shape_out: Optional[List[int]]) -> bool:
    """Static shapes prove the channel axis kept: the same channel count, the same number of elements before it."""
    if shape_in is None or shape_out is None:
        return False
    return shape_in[a] == shape_out[b] and math.prod(shape_in[:a]) == math.prod(shape_out[:b])


# value-moving op type -> whether its node keeps input axis a as output axis b (the axes counted from the front)
_KEEPS = {"Identity": _same_axis, "MaxPool": _same_axis, "Slice": _AxisMap._slice_keeps,
          "Reshape": _reshape_keeps, "Flatten": _reshape_keeps, "Squeeze": _reshape_keeps, "Unsqueeze": _reshape_keeps}


def _from_front(axis: Optional[int], rank: Optional[int]) -> Optional[int]:
    """``axis`` counted from the front (None: unknown, a negative axis of a tensor of unknown rank)."""
    if axis is None:
        return None
    if axis >= 0:
        return axis if rank is None or axis < rank else None
    return rank + axis if rank is not None and rank + axis >= 0 else None


def _initializer(model, name: str) -> Optional[np.ndarray]:
    for t in model.graph.initializer:
        if t.name == name:
            return numpy_helper.to_array(t)
    return None


def _static_shapes(model) -> Dict[str, List[int]]:
    """Tensors of the top graph whose shape is known and static, by name (none when inference fails)."""
    # (in a child a signal ends; a model inference cannot take comes back unchanged: no shapes, and
    # per-channel pairs are then not tied across moving ops)
    inferred = infer_shapes(model, data_prop=False)
    out: Dict[str, List[int]] = {}
    for vi in [*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output]:
        dims = _static_dims(vi)
        if dims is not None:
            out[vi.name] = dims
    return out


def _static_dims(vi) -> Optional[List[int]]:
    """A value info's shape when it is a tensor's, known and static (None otherwise)."""
    tensor_type = vi.type.tensor_type
    if not vi.type.HasField("tensor_type") or not tensor_type.HasField("shape"):
        return None
    dims = tensor_type.shape.dim
    return [d.dim_value for d in dims] if all(d.HasField("dim_value") for d in dims) else None


def _same_grid(a: Pair, b: Pair) -> bool:
    return (a.qmin, a.qmax, a.axis) == (b.qmin, b.qmax, b.axis) and a.scale.shape == b.scale.shape \
        and bool(np.all(a.scale == b.scale)) and bool(np.all(a.zero_point.astype(np.int64) == b.zero_point.astype(np.int64)))


def match_name(name: str, known) -> Optional[str]:
    """``name`` of a QDQ model's tensor as it is called in the float model (``known`` names):
    itself, or with a quantizer suffix removed; None when neither is known."""
    if name in known:
        return name
    for suffix in QUANT_SUFFIXES:
        if name.endswith(suffix) and name[: -len(suffix)] in known:
            return name[: -len(suffix)]
    return None


def bypass(model, pairs: Sequence[Pair]):
    """A copy of ``model`` with ``pairs`` taken back to float (see the module's docstring)."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    drop_q = {p.q_node for p in pairs if p.q_node is not None}
    by_dq = {dq: p for p in pairs for dq in p.dq_nodes}
    nodes = []
    for node in out.graph.node:
        nodes.extend(_bypassed(out, node, drop_q, by_dq))
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    _drop_grids(out, [n for n in model.graph.node if n.name in drop_q or n.name in by_dq])
    return out


def _drop_grids(model, removed: Sequence) -> None:
    """The scales and zero points of the ``removed`` Q/DQ nodes that nothing reads any more (a runtime
    would drop them with a warning on every load of the written model)."""
    grids = {name for node in removed for name in node.input[1:] if name}
    if not grids:
        return
    read = {name for node in model.graph.node for name in node_reads(node)} | {o.name for o in model.graph.output}
    read |= {i.name for i in model.graph.input}  # (an initializer listed as an input too: its default)
    kept = [t for t in model.graph.initializer if t.name not in grids or t.name in read]
    if len(kept) < len(model.graph.initializer):
        del model.graph.initializer[:]
        model.graph.initializer.extend(kept)


def _bypassed(model, node, drop_q: Set[str], by_dq: Dict[str, Pair]) -> List:
    """What stands for ``node`` in the bypassed ``model``: nothing for a dropped Q, the float path
    for a bypassed pair's DQ (a weight stored quantized: an initializer), else the node itself."""
    if node.op_type == "QuantizeLinear" and node.name in drop_q:
        return []
    pair = by_dq.get(node.name) if node.op_type == "DequantizeLinear" else None
    if pair is None:
        return [node]
    if pair.float_value is not None:  # a weight stored quantized: its float values, under the DQ's output name
        model.graph.initializer.append(numpy_helper.from_array(pair.float_value.astype(np.float32), node.output[0]))
        return []
    return _float_path(model, pair, node)


def _float_path(model, pair: Pair, dq) -> List:
    """The node(s) replacing ``dq`` of a bypassed pair: Identity, or the folded activation."""
    clamp = pair.clamp()
    if clamp is None:
        return [helper.make_node("Identity", [pair.tensor], [dq.output[0]], name=dq.name)]
    lo, hi = clamp
    if lo == 0.0 and hi == math.inf:
        return [helper.make_node("Relu", [pair.tensor], [dq.output[0]], name=dq.name)]
    return [_clip(model, pair, dq, lo, hi)]


def _clip(model, pair: Pair, dq, lo: float, hi: float):
    """A Clip to [lo, hi] in place of ``dq`` (infinite bounds left out), as the model's opset writes it."""
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 11)
    bounds = [(what, value) for what, value in (("min", lo), ("max", hi)) if math.isfinite(value)]
    if opset < 11:  # Clip-6: bounds as attributes
        node = helper.make_node("Clip", [pair.tensor], [dq.output[0]], name=dq.name)
        node.attribute.extend(helper.make_attribute(k, v) for k, v in bounds)
        return node
    inputs = {"min": "", "max": ""}
    for what, value in bounds:
        inputs[what] = f"{dq.name}_float_{what}"
        model.graph.initializer.append(numpy_helper.from_array(np.array(value, np.float32), inputs[what]))
    return helper.make_node("Clip", [pair.tensor, inputs["min"], inputs["max"]], [dq.output[0]], name=dq.name)


def requantize(model, pair: Pair, scale: np.ndarray, zero_point: np.ndarray):
    """A copy of ``model`` whose ``pair`` quantizes with ``scale`` and ``zero_point`` (new
    initializers: a scale shared with other pairs is left to them)."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    s_name, z_name = f"{pair.name}_suggested_scale", f"{pair.name}_suggested_zero_point"
    out.graph.initializer.append(numpy_helper.from_array(np.asarray(scale, np.float32).reshape(pair.scale.shape), s_name))
    out.graph.initializer.append(numpy_helper.from_array(
        np.asarray(zero_point).astype(pair.zero_point.dtype).reshape(pair.zero_point.shape), z_name))
    changed = [node for node in out.graph.node
               if node.name == pair.q_node or (node.name in pair.dq_nodes and node.op_type == "DequantizeLinear")]
    if not any(node.op_type == "QuantizeLinear" for node in changed):  # (a pair in float has no grid to change)
        raise RuntimeError(f"requantize: the pair {pair.name} is not in the model (taken back to float?)")
    for node in changed:
        _set_grid(node, s_name, z_name)
    return out


def _set_grid(node, scale: str, zero_point: str) -> None:
    """Q or DQ ``node`` reads its scale and zero point from ``scale`` and ``zero_point``."""
    del node.input[2:]
    node.input[1] = scale
    node.input.append(zero_point)

"""Weights that fp16 cannot hold: found before converting, kept in fp32 with the nodes that read them.

A float32 weight matters when fp16 would change it beyond plain rounding: a finite value past
65504 (it would be clamped: PP-OCR's detector holds BatchNorm variances of 1e7 to 1e8 in
``Constant`` nodes), or a tensor so small that fp16's subnormals lose it (its relative L2
rounding error above :data:`RANGE_REL`, 1%; plain fp16 rounding stays below 2**-11, 0.05%). Three kinds of
values are checked: initializers, ``Constant`` values, and values computed from constants only
(a ``Mul`` of two constants can overflow where neither does); those are computed once with
ONNX-Runtime. Each such value stays fp32, with the nodes that compute it from constants and
every node that reads it (:func:`range_keep`).

bfloat16 has float32's exponent range: only values past its largest finite value (3.39e38) matter.

No Typer or Rich here.
"""

from __future__ import annotations

from typing import Dict, Iterator, List, Optional, Set, Tuple

import numpy as np
from onnx import helper, numpy_helper

from toolkit.convert.common import (
    BF16_MAX,
    BFLOAT16,
    FLOAT,
    FP16_MAX,
    STD_DOMAINS,
    producers,
    read_names,
    readers_of,
    to_fp16,
    weight_array,
)
from toolkit.core.errors import ort_errors
from toolkit.core.process.interrupt import interruptible_run
from toolkit.core.graph.graphs import node_subgraphs
from toolkit.core.graph.constants import constant_names, constant_nodes, is_constant_node

KEEP_BYTES = 1 << 30  # weights read by the range check kept for the conversion, at most (bytes)
RANGE_REL = 1e-2  # relative L2 error of a weight's fp16 rounding past which it matters (1%)
_SUBNORMAL = 2.0**-14  # smallest normal fp16
REASON_RANGE = "reads a value fp16 cannot hold (past 65504, or lost to underflow)"
REASON_RANGE_BF16 = "reads a value bf16 cannot hold (past 3.39e38)"
REASON_RANGE_CARRIED = "reads a value past fp16's range that a node kept in fp32 passes on (inf in fp16)"
# ops whose float output holds the values of their float inputs (moved, selected, added to): a value past
# fp16's range read by one of them is past it in its output too
CARRYING_OPS = frozenset(
    {"Add", "Sub", "Neg", "Max", "Min", "Where", "Expand", "Tile", "Reshape", "Transpose", "Squeeze",
     "Unsqueeze", "Flatten", "Concat", "Gather", "Slice", "Identity", "Cast"}
)  # fmt: skip
_PAST_FP16 = "past fp16's largest"  # (in the reason of a value too large for fp16)
_RANDOM = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Bernoulli", "Multinomial"}


def value_problem(arr, low: int) -> Optional[str]:
    """Why ``low`` (FLOAT16 or BFLOAT16) cannot hold the float32 values ``arr``; None when it can."""

    a = _finite(np.asarray(arr, dtype=np.float32).ravel())
    if a.size == 0:
        return None
    amax = max(float(a.max()), -float(a.min()))
    if low == BFLOAT16:
        return f"values up to {amax:.3g}, past bf16's largest ({BF16_MAX:.3g})" if amax > BF16_MAX else None
    if amax > FP16_MAX:
        return f"values up to {amax:.3g}, {_PAST_FP16} (65504)"
    return _underflow(a, amax)


def _finite(a):
    """The finite values of the flat array ``a`` (inf and NaN are kept as they are: the checks look past them)."""
    finite = np.isfinite(a)
    return a if finite.all() else a[finite]


def _underflow(a, amax: float) -> Optional[str]:
    """Why fp16's subnormals lose the finite float32 values ``a`` (largest magnitude ``amax``, at most
    65504); None when they do not."""
    if amax >= 2.0**-6:  # (a value this large makes any tensor's subnormal part negligible in L2...)
        squares = float(np.dot(a, a))
        # ...when the RMS is well above 2**-14: rounding errs <= 2**-11 relative for normal values and
        # <= 2**-25 absolute below 2**-14, so the relative L2 error stays below RANGE_REL
        if squares * 3 >= a.size * 2.0**-28:
            return None
    finite = a.astype(np.float64)
    squares = float(np.dot(finite, finite))
    if squares == 0.0:
        return None
    rounded = to_fp16(finite)[0].astype(np.float64)
    rel = float(np.sqrt(np.sum((rounded - finite) ** 2) / squares))
    if rel <= RANGE_REL:
        return None
    return f"values of at most {amax:.3g}, where fp16 has only subnormals ({rel:.1%} relative error)"


def _constant_values(graph, keep: Optional[Dict[str, object]] = None) -> Iterator[Tuple[str, object]]:
    """(name, array) of the float32 initializers (with their data loaded) and ``Constant`` values of
    ``graph``, one at a time. ``keep``: a dict that also gets the initializers' arrays, up to
    :data:`KEEP_BYTES` in all (the conversion reads them once more otherwise: a copy each)."""

    yield from _initializer_values(graph, keep)
    for node, tensor in constant_nodes(graph):
        if tensor.data_type == FLOAT:
            yield node.output[0], numpy_helper.to_array(tensor)


def _initializer_values(graph, keep: Optional[Dict[str, object]]) -> Iterator[Tuple[str, object]]:
    """(name, array) of the float32 initializers of ``graph`` with their data loaded; ``keep`` (when
    given) gets the arrays too, up to :data:`KEEP_BYTES` in all."""
    budget = KEEP_BYTES
    for t in graph.initializer:
        if t.data_type == FLOAT and not t.external_data:
            arr = weight_array(t)
            if keep is not None and arr.nbytes <= budget:
                keep[t.name] = arr
                budget -= arr.nbytes
            yield t.name, arr


def _derived_nodes(graph, constants: Set[str], types: Dict[str, int]) -> List:
    """Nodes of ``graph`` (in order) that compute only from constants: their outputs are fixed values.

    A ``DequantizeLinear`` of 8-bit weights whose scales keep every value a normal fp16 (scale
    at least 2**-14, 255 x scale at most 65504: the usual case) is left out, with what is computed
    from it: a quantized model dequantizes every weight, and computing them all would cost a
    float32 copy of the model."""
    inputs = {vi.name for vi in graph.input}
    fixed = set(constants) - inputs  # (graph inputs vary, even those with an initializer)
    scales = _ScaleBounds(graph)
    out = []
    for node in graph.node:
        ins = [i for i in node.input if i]
        if _reads_only(node, ins, fixed) and not scales.dequantizes_normal(node, ins, types):
            out.append(node)
            fixed.update(set(node.output) - inputs)
    return out


def _reads_only(node, ins: List[str], fixed: Set[str]) -> bool:
    """Whether ``node`` (non-empty inputs ``ins``) computes the same values each run from values of
    ``fixed`` only."""
    return bool(ins) and fixed.issuperset(ins) and _computes_the_same(node)


def _computes_the_same(node) -> bool:
    """Whether a node computes the same values from the same inputs each run: a standard op with no
    body, not random (nor ``Constant``: its value is read as it is)."""
    if node.op_type == "Constant" or node.op_type in _RANDOM or node.domain not in STD_DOMAINS:
        return False
    return not node_subgraphs(node)


_BYTE_TYPES = (2, 3)  # UINT8, INT8


class _ScaleBounds:
    """Is a dequantization scale (a constant) one that keeps every 8-bit value a normal fp16?"""

    def __init__(self, graph):
        self.tensors = {t.name: t for t in graph.initializer}
        for node, tensor in constant_nodes(graph):
            self.tensors[node.output[0]] = tensor

    def dequantizes_normal(self, node, ins: List[str], types: Dict[str, int]) -> bool:
        """Whether ``node`` (inputs ``ins``) dequantizes 8-bit values into normal fp16 values."""
        if node.op_type != "DequantizeLinear":
            return False
        return types.get(ins[0]) in _BYTE_TYPES and self.safe(ins[1])

    def safe(self, name: str) -> bool:
        t = self.tensors.get(name)
        if t is None or t.data_type != FLOAT or t.external_data:
            return False
        s = np.abs(numpy_helper.to_array(t))
        return bool(s.size) and float(s.min()) >= _SUBNORMAL and float(s.max()) * 255 <= FP16_MAX


def _computed_values(model, graph, derived: List, types: Dict[str, int]) -> Dict[str, object]:
    """The float outputs of ``derived`` (nodes computing from constants), computed with ONNX-Runtime.

    Empty when ONNX-Runtime cannot compute them (the check then covers weights and Constants only)."""
    wanted = [o for n in derived for o in n.output if o and types.get(o) == FLOAT]
    if not wanted:
        return {}
    values = _run_alone(_constants_model(model, graph, derived, wanted), wanted)
    return {} if values is None else dict(zip(wanted, values))


def _run_alone(model, wanted: List[str]) -> Optional[list]:
    """The outputs ``wanted`` of a model without inputs, run once with ONNX-Runtime unoptimized; None
    when it cannot run it."""
    import onnxruntime as ort  # inspect loads this module without running a model

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 4  # (its errors come back as exceptions: no log lines of its own)
    try:
        sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        return interruptible_run(sess, wanted, {})
    except ort_errors():
        return None


def _constants_model(model, graph, derived: List, wanted: List[str]):
    """A model of the ``derived`` nodes and the constants they read, whose outputs are ``wanted``."""
    consts, inits = _constants_read(graph, read_names(derived))
    outputs = [helper.make_tensor_value_info(o, FLOAT, None) for o in wanted]
    g = helper.make_graph(consts + list(derived), "constants", [], outputs, inits)
    return helper.make_model(g, opset_imports=list(model.opset_import), ir_version=min(model.ir_version or 8, 10))


def _constants_read(graph, reads: Set[str]) -> Tuple[list, list]:
    """(the Constant nodes, the initializers) of ``graph`` that make a value of ``reads``."""
    consts = [n for n in graph.node if is_constant_node(n) and not reads.isdisjoint(n.output)]
    return consts, [t for t in graph.initializer if t.name in reads]


def risky_values(model, types: Dict[str, int], low: int, arrays: Optional[Dict[str, object]] = None) -> Dict[str, str]:
    """Float32 values of the top graph that ``low`` cannot hold: name -> why (initializers,
    ``Constant`` values and values computed from constants only). ``arrays``: see
    :func:`_constant_values`."""
    graph = model.graph
    out = _problems(_constant_values(graph, arrays), low, "")
    derived = _derived_nodes(graph, constant_names(graph), types)
    if derived:
        computed = _computed_values(model, graph, derived, types)
        out.update(_problems(computed.items(), low, "computed from constants: "))
    return out


def _problems(values, low: int, prefix: str) -> Dict[str, str]:
    """name -> why ``low`` cannot hold them (after ``prefix``), of the (name, array) ``values`` it cannot hold."""
    out: Dict[str, str] = {}
    for name, arr in values:
        why = value_problem(arr, low)
        if why:
            out[name] = prefix + why
    return out


def range_keep(model, types: Dict[str, int], low: int, risky: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """Nodes that stay fp32 so that no value ``low`` cannot hold is converted: name -> reason.

    The nodes that read a risky value (in any graph: bodies read outer values), and the nodes
    that compute one from constants."""
    if risky is None:
        risky = risky_values(model, types, low)
    if not risky:
        return {}
    readers = readers_of(model.graph)
    if low == BFLOAT16:  # (bfloat16 holds float32's lowest: no value it cannot hold is passed on)
        return dict.fromkeys(_producers(model.graph, risky) + _readers(risky, readers), REASON_RANGE_BF16)
    keep = dict.fromkeys(_producers(model.graph, risky) + _readers(risky, readers), REASON_RANGE)
    for name in _carried_readers(risky, readers, types):
        keep.setdefault(name, REASON_RANGE_CARRIED)
    return keep


def _readers(values, readers: Dict[str, list]) -> List[str]:
    """Names of the nodes that read ``values`` (``readers``: name -> the nodes reading it)."""
    return [node.name for name in values for node in readers.get(name, ())]


def _first_carried(risky: Dict[str, str], readers: Dict[str, list]) -> List[str]:
    """The outputs of the nodes that pass on a risky value too large for fp16 (a carrying op, or a
    ``Mul``: ``(1 - mask) * float32-lowest``; past it, a Mul may scale the value back)."""
    first = CARRYING_OPS | {"Mul"}
    large = [name for name, why in risky.items() if _PAST_FP16 in why]
    return [o for name in large for n in readers.get(name, ()) if n.op_type in first for o in n.output]


def _producers(graph, values) -> List[str]:
    """Names of the nodes that compute ``values``, back to the constants (they compute them in fp32)."""
    producer = producers(graph.node)
    names: List[str] = []
    todo = list(values)
    seen: Set[str] = set()
    while todo:
        node = producer.get(todo.pop())
        if node is not None and node.name not in seen and node.op_type != "Constant":
            seen.add(node.name)
            names.append(node.name)
            todo.extend(read_names([node]))
    return names


def _carried_readers(risky: Dict[str, str], readers: Dict[str, list], types: Dict[str, int]) -> List[str]:
    """Names of the nodes that read a risky value as a node kept in fp32 passes it on.

    A node kept because it reads a value fp16 cannot hold (:func:`range_keep`) may pass that value on:
    transformers' T5 masks its position bias with ``Where(mask, bias, float32-lowest)``, whose output
    holds -3.4e38 wherever a key is masked. Converted after it, that value becomes -inf, and a row
    whose every key is masked becomes NaN after the Softmax (float32 gives a uniform row). The value is
    followed through the nodes that pass values on unchanged in magnitude (:data:`CARRYING_OPS`, and a
    ``Mul`` that reads the value itself: transformers 4.x writes ``(1 - mask) * float32-lowest``); the
    first node of another kind (the Softmax, a Mul) reads it and stays fp32, and is not followed. Values lost
    to underflow are not followed (an epsilon added to a variance is not passed on)."""
    out: List[str] = []
    seen: Set[str] = set()
    todo = _first_carried(risky, readers)
    while todo:
        value = todo.pop()
        if value in seen or types.get(value) != FLOAT:
            continue
        seen.add(value)
        nodes = readers.get(value, ())
        out.extend(node.name for node in nodes)
        todo.extend(_passed_on(nodes))
    return out


def _passed_on(nodes) -> List[str]:
    """The outputs of the nodes among ``nodes`` that pass their values on unchanged in magnitude
    (:data:`CARRYING_OPS`), in order."""
    carrying = [n for n in nodes if n.op_type in CARRYING_OPS and n.domain in STD_DOMAINS]
    return [o for n in carrying for o in n.output if o]

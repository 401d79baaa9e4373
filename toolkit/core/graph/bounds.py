"""Whether running a model once would ask for more than the limits allow, known from the
model alone: a Loop whose constant trip count times its body's nodes exceeds ``--max-nodes``
(a Loop of 10^12 steps fits in 300 bytes), or a Range, ConstantOfShape, Tile or Expand of
constants whose result exceeds ``--max-tensor-size`` (``Range(0, 10^12)``: 8 TB).

A command that runs a model only to check its own work (sanitize's validation) asks
:func:`run_cost_refusal` first and skips that run, saying why. No printing here.
"""

from __future__ import annotations

import math
from typing import Dict, Optional

import numpy as np
from onnx import numpy_helper
from onnx.checker import ValidationError

from toolkit.core import limits
from toolkit.core.errors import reraise_bug
from toolkit.core.graph.constants import constant_nodes
from toolkit.core.graph.graphs import node_subgraphs, walk_graphs


def run_cost_refusal(model) -> Optional[str]:
    """Why one run of ``model`` would be too long or too big ("its Loop 'l' runs 10^12 steps..."),
    None when nothing says so."""
    for graph in walk_graphs(model.graph):
        consts = _constants(graph)
        for node in graph.node:
            why = _loop_steps(node, consts) if node.op_type == "Loop" else _constant_size(node, consts)
            if why:
                name = node.name or (node.output[0] if node.output else "")
                return f"its {node.op_type} {name!r} {why}"
    return None


def _constants(graph) -> Dict[str, np.ndarray]:
    """Small constants of ``graph`` by name: initializers and Constant nodes of up to 16 elements."""
    tensors = [(t.name, t) for t in graph.initializer]
    tensors += [(node.output[0], t) for node, t in constant_nodes(graph)]
    out: Dict[str, np.ndarray] = {}
    for name, t in tensors:
        value = _small_numbers(t)
        if value is not None:
            out[name] = value
    return out


def _small_numbers(t) -> Optional[np.ndarray]:
    """The values of tensor ``t`` when it holds up to 16 numbers (bool, int, float) onnx can read."""
    if math.prod(t.dims) > 16:
        return None
    try:
        value = numpy_helper.to_array(t)
    except (ValueError, TypeError, KeyError, ValidationError) as exc:  # a type onnx does not know, data that does not fit
        reraise_bug(exc)
        return None
    return value if value.dtype.kind in "biuf" else None


def _scalar(consts, name: str):
    value = consts.get(name)
    if value is None or value.size != 1:
        return None
    return value.reshape(-1)[0]


def _loop_steps(node, consts) -> Optional[str]:
    trips = _scalar(consts, node.input[0]) if node.input else None
    if trips is None:
        return None
    body = sum(_nodes(g) for g in node_subgraphs(node)) or 1
    if int(trips) * body > limits.max_nodes:
        return f"runs {int(trips)} steps of {body} nodes (over --max-nodes {limits.max_nodes})"
    return None


def _nodes(graph) -> int:
    return sum(len(g.node) for g in walk_graphs(graph))


def _constant_size(node, consts) -> Optional[str]:
    count = _elements(node, consts)
    if count is None or count * 4 <= limits.max_tensor_bytes:
        return None
    return (f"would make {count} elements (over --max-tensor-size {limits.size_text(limits.max_tensor_bytes)})")


def _elements(node, consts) -> Optional[int]:
    """How many elements ``node`` makes, where its constant inputs say (None: not known)."""
    count = _ELEMENT_COUNTS.get(node.op_type)
    if count is None:
        return None
    try:
        return count(list(node.input), consts)
    except (ValueError, OverflowError):  # NaN, infinity
        return None


def _range_elements(ins, consts) -> Optional[int]:
    if len(ins) != 3:
        return None
    start, limit, delta = (_scalar(consts, n) for n in ins)
    if start is None or limit is None or not delta:
        return None
    return max(0, math.ceil((float(limit) - float(start)) / float(delta)))


def _shape_elements(ins, consts) -> Optional[int]:
    if not ins or ins[0] not in consts:
        return None
    return math.prod(int(d) for d in consts[ins[0]].reshape(-1))


def _repeat_elements(ins, consts) -> Optional[int]:
    # (the input's own size is not known here: at least the repeats or the target shape)
    if len(ins) != 2 or ins[1] not in consts:
        return None
    return math.prod(max(int(d), 0) for d in consts[ins[1]].reshape(-1))


_ELEMENT_COUNTS = {"Range": _range_elements, "ConstantOfShape": _shape_elements, "Tile": _repeat_elements,
                   "Expand": _repeat_elements}

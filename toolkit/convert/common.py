"""What the fp16/bf16 conversion and the fp16 emulation share: element types, the reduced
precisions, graph walking and naming, and how a float32 value is stored in fp16 or bf16.

No Typer or Rich here.
"""

from __future__ import annotations

import math
from typing import Any, Dict, Iterator, Optional, Set

import numpy as np
import onnx
from onnx import helper, numpy_helper

from toolkit.core.errors import DependencyError, InputError
from toolkit.core.graph.graphs import tensor_damage, walk_graphs
from toolkit.core.graph.constants import STANDARD_DOMAINS, is_constant_node


def onnx_errors() -> tuple:
    """What onnx's checker, shape inference, schemas and version converter raise on a model they reject."""

    return (
        onnx.shape_inference.InferenceError,
        onnx.checker.ValidationError,
        onnx.defs.SchemaError,
        RuntimeError,  # (C++ errors without a class of their own)
        ValueError,
        TypeError,
        IndexError,
        KeyError,
    )


def cast_node(src: str, dst: str, name: str, to: int):
    """``Cast(src, to=to) -> dst`` named ``name`` (built directly: onnx.helper.make_node costs 10x more,
    and the emulation adds two Casts a tensor)."""

    node = onnx.NodeProto(op_type="Cast", name=name, input=[src], output=[dst])
    node.attribute.add(name="to", type=onnx.AttributeProto.INT, i=to)
    return node


iter_graphs = walk_graphs  # ``graph`` and every subgraph below it (If/Loop/Scan bodies), depth first


FLOAT = 1
FLOAT16 = 10
DOUBLE = 11
BFLOAT16 = 16
FP16_MAX = 65504.0
FP16_TINY = 2.0**-24  # smallest positive (subnormal) fp16
BF16_MAX = 3.3895313892515355e38  # largest finite bfloat16 (0x7F7F)
TENSOR_STR = {FLOAT: "tensor(float)", FLOAT16: "tensor(float16)", BFLOAT16: "tensor(bfloat16)"}
# the reduced precisions a model can be converted to / emulated in: dtype name -> (ONNX type, short name)
PRECISIONS = {"float16": (FLOAT16, "fp16"), "bfloat16": (BFLOAT16, "bf16")}
STD_DOMAINS = STANDARD_DOMAINS  # (the standard op set's domains: one definition, in core)
# ops whose output type comes from a ``dtype`` attribute
DTYPE_OPS = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "EyeLike", "Bernoulli"}


def float16_library():
    try:
        from onnxconverter_common import float16
    except ImportError:  # pragma: no cover - a dependency of the package
        raise DependencyError(
            "fp16 conversion needs onnxconverter-common; install it with `pip install onnxconverter-common`"
        ) from None
    return float16


def iter_nodes(model) -> Iterator:
    for graph in iter_graphs(model.graph):
        yield from graph.node


def name_nodes(model) -> int:
    """Give every unnamed or duplicate-named node a unique name (in place); returns how many."""
    taken: Set[str] = set()
    todo = []
    for node in iter_nodes(model):
        if node.name and node.name not in taken:
            taken.add(node.name)
        else:
            todo.append(node)
    counters: Dict[str, int] = {}
    for node in todo:
        base = node.name or node.op_type or "node"
        k = counters.get(base, 0)
        while True:
            candidate = f"{base}_{k}"
            k += 1
            if candidate not in taken:
                break
        counters[base] = k
        node.name = candidate
        taken.add(candidate)
    return len(todo)


class Names:
    """Fresh tensor/node names for a model: never one it already uses."""

    def __init__(self, model):
        self.taken: Set[str] = set()
        self.counters: Dict[str, int] = {}
        for g in iter_graphs(model.graph):
            for n in g.node:
                self.taken.update(n.output)
            self.taken.update(t.name for t in g.initializer)
            self.taken.update(v.name for v in g.input)

    def fresh(self, base: str) -> str:
        name = base
        k = self.counters.get(base, 0)
        while name in self.taken:
            k += 1
            name = f"{base}_{k}"
        self.counters[base] = k
        self.taken.add(name)
        return name


def copy_model(model, inplace: bool):
    """``model`` itself when ``inplace``, else a deep copy."""
    if inplace:
        return model

    m = onnx.ModelProto()
    m.CopyFrom(model)
    return m


def low_type(dtype: str) -> int:
    """ONNX element type of a reduced precision named ``float16``/``bfloat16`` (fp16/bf16 accepted)."""
    for name, (onnx_type, short) in PRECISIONS.items():
        if dtype in (name, short):
            return onnx_type
    raise ValueError(f"unknown reduced precision {dtype!r}: use float16 or bfloat16")


def short_name(onnx_type: int) -> str:
    return {FLOAT16: "fp16", BFLOAT16: "bf16"}.get(onnx_type, "fp32")


def replace_repeated(field, items) -> None:
    """Make the repeated message ``field`` hold copies of ``items`` (some of which it holds now)."""
    copies = []
    for item in items:
        c = type(item)()
        c.CopyFrom(item)
        copies.append(c)
    del field[:]
    field.extend(copies)


def producers(nodes) -> Dict[str, Any]:
    """Output name -> the node of ``nodes`` that makes it (empty names, omitted outputs, left out)."""
    return {o: n for n in nodes for o in n.output if o}


def read_names(nodes) -> Set[str]:
    """The names ``nodes`` read (their non-empty inputs)."""
    return {i for n in nodes for i in n.input if i}


def readers_of(g) -> Dict[str, list]:
    """name -> the nodes that read it, in ``g`` and in the subgraphs below it."""
    out: Dict[str, list] = {}
    for sub in iter_graphs(g):
        for n in sub.node:
            for i in n.input:
                if i:
                    out.setdefault(i, []).append(n)
    return out


def retype_attribute(node, name: str, old: int, new: int) -> None:
    """``node``'s INT attribute ``name`` (an element type) is ``new`` where it is ``old``."""
    for a in node.attribute:
        if a.name == name and a.i == old:
            a.i = new


def attr_tensors(node):
    """(attribute name, index, tensor) of every tensor a node's attributes hold (index -1: ``t``)."""
    for a in node.attribute:
        if a.HasField("t"):
            yield a.name, -1, a.t
        for k, t in enumerate(a.tensors):
            yield a.name, k, t


def normalize_constants(model) -> None:
    """Constant nodes with value_float(s) -> a ``value`` tensor (so they convert too)."""

    for node in iter_nodes(model):
        if not is_constant_node(node):
            continue
        for attr in list(node.attribute):
            if attr.name in ("value_float", "value_floats"):
                arr = np.float32(attr.f) if attr.name == "value_float" else np.asarray(attr.floats, np.float32)
                node.attribute.remove(attr)
                node.attribute.append(helper.make_attribute("value", numpy_helper.from_array(np.asarray(arr))))


def to_fp16(arr):
    """float32 values as fp16 the way the conversion stores weights: rounded to nearest, finite
    values past fp16's range clamped to +-65504, tiny nonzero values kept as +-2**-24 (never 0);
    inf and NaN unchanged. Returns (float16 array, whether any value was clamped at 65504)."""

    a = np.asarray(arr, dtype=np.float32)
    with np.errstate(over="ignore"):
        h = a.astype(np.float16)
    over = False
    if not np.isfinite(h).all():
        big = np.isinf(h) & np.isfinite(a)
        if big.any():
            h[big] = np.where(a[big] > 0, np.float16(FP16_MAX), np.float16(-FP16_MAX))
            over = True
    tiny = (h == 0) & (a != 0)
    if tiny.any():
        h[tiny] = np.where(a[tiny] > 0, np.float16(FP16_TINY), np.float16(-FP16_TINY))
    return h, over


def to_bf16(arr):
    """float32 values as bfloat16 the way the conversion stores weights: rounded once to nearest
    (ties to even) from the float32 value; finite values past bfloat16's range (3.39e38) become
    +-BF16_MAX instead of inf; inf and NaN unchanged; no clamping of small values (bfloat16 has
    float32's exponent range). Returns (the bfloat16 bit patterns as uint16, whether any value
    was clamped). numpy has no bfloat16: :func:`bf16_values` gives the values as float32."""

    a = np.ascontiguousarray(arr, dtype=np.float32)
    u = a.view(np.uint32)
    with np.errstate(over="ignore"):
        bits = ((u + np.uint32(0x7FFF) + ((u >> 16) & np.uint32(1))) >> 16).astype(np.uint16)
    nan = np.isnan(a)
    if nan.any():
        bits[nan] = ((u[nan] >> 16) | 0x0040).astype(np.uint16)  # quiet NaN, sign and payload kept
    over = False
    big = ((bits & 0x7FFF) == 0x7F80) & np.isfinite(a)
    if big.any():
        bits[big] = (bits[big] & 0x8000) | 0x7F7F
        over = True
    return bits, over


def bf16_values(bits):
    """bfloat16 bit patterns (uint16) -> their values as float32 (exact)."""

    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def widened(raw: bytes, data_type: int):
    """The values of float16 or bfloat16 raw data (little-endian bits) as float32 (exact), flat."""
    bits = np.frombuffer(raw, dtype="<u2")
    return bits.view("<f2").astype("<f4") if data_type == FLOAT16 else (bits.astype("<u4") << 16).view("<f4")


def round_values(arr, dtype: str = "float16"):
    """float32 values rounded as the conversion to ``dtype`` stores weights, back in float32."""

    if low_type(dtype) == BFLOAT16:
        return bf16_values(to_bf16(arr)[0])
    return to_fp16(arr)[0].astype(np.float32)


def weight_array(t):
    """A float32 weight's values (InputError for raw data that its shape does not fit: a damaged model).

    ``convert`` refuses a damaged model at its start (:func:`toolkit.core.graph.graphs.refuse_damaged`); this check is what
    the emulation of fp16 storage (``run --fp16``, ``debug precision``), which reads each float32
    weight it rounds, meets instead."""
    if t.HasField("raw_data"):
        raw = t.raw_data  # (protobuf hands it back as a copy: read once)
        if len(raw) == 4 * math.prod(t.dims):
            return np.frombuffer(raw, dtype="<f4").reshape(tuple(t.dims))
    damaged = tensor_damage(t)
    if damaged:
        raise InputError(f"the model's data is damaged: {damaged}; re-export the model")
    return numpy_helper.to_array(t)


def reduced_types(model) -> Set[str]:
    """The reduced precisions (``float16``, ``bfloat16``) the model's weights, inputs, outputs,
    value types or Casts hold (empty for a float32 model)."""
    by_type = {t: name for name, (t, _abbrev) in PRECISIONS.items()}
    return {by_type[t] for graph in iter_graphs(model.graph) for t in _held_types(graph) if t in by_type}


def _held_types(graph) -> Iterator[int]:
    """The element types of a graph's weights, inputs, outputs and value types, and those its Casts make."""
    yield from (t.data_type for t in graph.initializer)
    for coll in (graph.input, graph.output, graph.value_info):
        yield from (vi.type.tensor_type.elem_type for vi in coll)
    for node in graph.node:
        if node.op_type == "Cast":
            yield from (a.i for a in node.attribute if a.name == "to")


def cast_to(node) -> Optional[int]:
    """The element type a ``Cast`` node makes (its ``to``; None without one)."""
    return next((a.i for a in node.attribute if a.name == "to"), None)


def has_fp16(model) -> bool:
    """Does the model already hold float16 weights, inputs, outputs or Casts (a mixed model)?"""
    return "float16" in reduced_types(model)

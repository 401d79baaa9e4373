"""Which nodes stay fp32 in a mixed-precision model, and why.

The user's ``keep_fp32`` (node names, glob patterns over node names, op types), ops
onnxconverter-common lists as lacking fp16 kernels (Resize, Range, TopK, ...), ops whose ONNX
schema has no fp16 type, quantization and integer ops (Q/DQ, MatMulInteger, QLinear*, ...),
operators outside the standard domain, shape computations (float math on values derived from
``Shape``/``Size``: fp16 holds integers exactly only up to 2048), and the Constants only such
nodes read.

No Typer or Rich here.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from itertools import chain
from typing import Any, Dict, Iterable, Iterator, List, Optional, Set, Tuple

from toolkit.convert.common import (
    BFLOAT16,
    FLOAT,
    FLOAT16,
    STD_DOMAINS,
    cast_to,
    float16_library,
    iter_graphs,
    iter_nodes,
    low_type,
    name_nodes,
    producers,
    read_names,
    readers_of,
)
from toolkit.convert.onnx_types import Schemas, infer_types, schema_lacks, tensor_types
from toolkit.convert.ranges import range_keep
from toolkit.core.errors import InputError
from toolkit.core.graph.graphs import node_subgraphs

ML_DOMAIN = "ai.onnx.ml"

REASON_USER = "kept by --keep-fp32"
REASON_NO_KERNEL = "no fp16 kernel in ONNX-Runtime (onnxconverter-common's block list)"
REASON_SCHEMA = "its ONNX schema has no fp16 type"
REASON_SCHEMA_BF16 = "its ONNX schema has no bf16 type at the model's opset"
REASON_DOMAIN = "operator outside the standard ONNX domain"
REASON_SHAPE = "shape computation (fp16 holds integers exactly only up to 2048)"
REASON_CONSTANT = "a Constant read only by nodes kept in fp32 (its weights stay fp32, as initializers do)"
REASON_ML = "feeds or reads an ai.onnx.ml op (its fp16 version does not type-check next to it)"
REASON_QUANT = "quantization op (Q/DQ and integer ops stay as they are; Casts at their float boundaries)"
REASON_CAST_OUT = (
    "Cast from float to a non-float type: it reads its input at the precision it was computed in (a float32 "
    "value is not rounded to fp16/bf16 on its way to an integer)"
)
# standard-domain ops of quantized models: their float inputs and outputs (scales, dequantized
# values) stay float32, as the quantizer wrote them (DequantizeLinear has no fp16 output before
# opset 19, QuantizeLinear no fp16 scale)
REASON_ACCUMULATOR = (
    "integer accumulator made float (int32 sums of MatMulInteger/ConvInteger pass fp16's 65504): "
    "the Cast and the scale that reads it stay fp32"
)
# integer ops whose int32 outputs are sums of int8 products, and the integer ops that pass such sums on
ACCUMULATING_OPS = frozenset({"MatMulInteger", "ConvInteger"})
ACCUMULATOR_PASSING_OPS = frozenset({"Add", "Sub", "Mul", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten"})
QUANT_OPS = frozenset(
    {
        "QuantizeLinear",
        "DequantizeLinear",
        "DynamicQuantizeLinear",
        "MatMulInteger",
        "ConvInteger",
        "QLinearConv",
        "QLinearMatMul",
    }
)


def default_block_list() -> List[str]:
    """Op types onnxconverter-common keeps in fp32 (no fp16 kernel in ONNX-Runtime)."""
    return list(float16_library().DEFAULT_OP_BLOCK_LIST)


def _is_glob(word: str) -> bool:
    return any(c in word for c in "*?[")


def split_specs(specs: Iterable[str]) -> List[str]:
    """``["a,b", "c"]`` -> ``["a", "b", "c"]`` (commas and repeated options both work)."""
    out: List[str] = []
    for spec in specs or ():
        for word in str(spec).split(","):
            word = word.strip()
            if word and word not in out:
                out.append(word)
    return out


def resolve_keep(model, specs: Iterable[str]) -> List[str]:
    """Names of the nodes that ``specs`` (names, globs over names, op types) select.

    Every spec must select at least one node (InputError naming it otherwise).
    """
    nodes = list(iter_nodes(model))
    chosen: Dict[str, None] = {}  # (in the order first selected)
    for spec in split_specs(specs):
        hits = [n.name for n in nodes if _selects(spec, n)]
        if not hits:
            raise InputError(
                f"--keep-fp32 {spec}: no node has this name or op type, and no node name matches it; "
                "`toolkit inspect model` lists the nodes"
            )
        chosen.update(dict.fromkeys(hits))
    return list(chosen)


def _selects(spec: str, node) -> bool:
    """Whether ``spec`` names ``node``, its op type, or is a glob pattern its name matches."""
    return node.name == spec or node.op_type == spec or (_is_glob(spec) and fnmatch.fnmatchcase(node.name, spec))


def automatic_keep(model, types: Optional[Dict[str, int]] = None, dtype: str = "float16") -> Dict[str, str]:
    """Nodes that must stay fp32 whatever the user asks: name -> reason. ``dtype``: the precision
    the rest is converted to (``float16`` or ``bfloat16``: the schema check follows it)."""
    low = low_type(dtype)
    if types is None:
        types = tensor_types(infer_types(model))
    why = _Reasons(model, types, low)
    keep: Dict[str, str] = {}
    for node, derived in _shape_derivation(model):
        reason = why.of(node, derived)
        if reason is not None:
            keep[node.name] = reason
    if low == FLOAT16:  # (bf16 holds them, rounded)
        for name in accumulator_readers(model, types):
            keep.setdefault(name, REASON_ACCUMULATOR)
    return _with_ml_neighbours(model, keep)


def _shape_derivation(model) -> Iterator[Tuple[Any, bool]]:
    """Every node but the standard ``Shape``, ``Size`` and ``Constant`` ones, in order, with whether
    it computes on shapes (reads a value derived from ``Shape``/``Size``, and otherwise constants)."""
    shape_derived: Set[str] = set()
    constants: Set[str] = {t.name for graph in iter_graphs(model.graph) for t in graph.initializer}
    sources = {"Shape": shape_derived, "Size": shape_derived, "Constant": constants}
    for graph in iter_graphs(model.graph):
        for node in graph.node:
            if node.domain in STD_DOMAINS and node.op_type in sources:
                sources[node.op_type].update(node.output)
                continue
            derived = _computes_on_shapes(node, shape_derived, constants)
            if derived:
                shape_derived.update(node.output)
            yield node, derived


def _computes_on_shapes(node, shape_derived: Set[str], constants: Set[str]) -> bool:
    # an If reads only its condition: its outputs come from its branches, whatever decides it
    ins = read_names([node])
    if node.op_type == "If" or not ins:
        return False
    return not shape_derived.isdisjoint(ins) and all(i in shape_derived or i in constants for i in ins)


class _Reasons:
    """Why a node stays fp32 (None: it may be converted)."""

    def __init__(self, model, types: Dict[str, int], low: int):
        self.types = types
        self.low = low
        self.block = set(default_block_list())
        self.schemas = Schemas(model)
        self.reason_schema = REASON_SCHEMA if low == FLOAT16 else REASON_SCHEMA_BF16

    def of(self, node, derived: bool) -> Optional[str]:
        """Only a node that reads or makes float32 has a reason; the schema's is checked last."""
        if not _touches_float(node, self.types):
            return None
        reason = _reason(node, derived, self.block, self.types)
        if reason is not None:
            return reason
        schema = self.schemas.get(node)
        if schema is not None and schema_lacks(schema, self.low):
            return self.reason_schema
        return None


def _touches_float(node, types: Dict[str, int]) -> bool:
    """Whether ``node`` reads or makes a float32 value."""
    return any(types.get(t) == FLOAT for t in chain(node.input, node.output) if t)


def _reason(node, derived: bool, block: Set[str], types: Dict[str, int]) -> Optional[str]:
    """Why a node that reads or makes float32 stays fp32 (None: no reason but its schema's, checked after)."""
    if node.domain not in STD_DOMAINS:
        return REASON_DOMAIN
    if node.op_type in QUANT_OPS:
        return REASON_QUANT
    if node.op_type in block:
        return REASON_NO_KERNEL
    if derived:
        return REASON_SHAPE
    if casts_out_of_float(node, types):
        return REASON_CAST_OUT
    return None


def casts_out_of_float(node, types: Dict[str, int]) -> bool:
    """Whether ``node`` is a standard ``Cast`` of a float32 tensor to a type that is not a float the
    conversion reduces (an integer, bool or double). Kept fp32, it reads a float32 producer's value
    as it is, and a reduced one widened exactly: rounding an fp32 value to fp16 first would only
    lose it (a value past 65504 would reach the Cast as inf, whose integer is undefined)."""
    if node.op_type != "Cast" or node.domain not in STD_DOMAINS or not node.input or not node.input[0]:
        return False
    return types.get(node.input[0]) == FLOAT and cast_to(node) not in (None, FLOAT, FLOAT16, BFLOAT16)


def _with_ml_neighbours(model, keep: Dict[str, str]) -> Dict[str, str]:
    for name in ml_neighbours(model):
        keep.setdefault(name, REASON_ML)
    return keep


def ml_neighbours(model) -> List[str]:
    """Names of the standard-domain nodes that feed an ``ai.onnx.ml`` op (tree ensembles, scalers,
    ZipMap...) or read its outputs, also through ``Identity`` nodes (which are included).

    Those ops take and give float32 only, and ONNX infers no types for some of their outputs
    (``TreeEnsembleClassifier`` at ml opset 1), so the library's Casts at their boundaries are
    missing or wrong: a LightGBM classifier's ``Mul`` by one on the probabilities (onnxmltools,
    ``zipmap=False``) did not type-check in fp16."""
    return [name for graph in iter_graphs(model.graph) for name in _ml_neighbours_in(graph)]


def _ml_neighbours_in(graph) -> List[str]:
    made_by = producers(graph.node)
    ml_out: Set[str] = set()
    names: List[str] = []
    for node in graph.node:
        if node.domain == ML_DOMAIN:
            ml_out.update(_made(node))
            names.extend(_standard_feeders(node, made_by))
        elif node.domain in STD_DOMAINS and _reads(node, ml_out):
            names.append(node.name)
            if node.op_type == "Identity":
                ml_out.update(_made(node))
    return names


def _standard_feeders(node, made_by: Dict[str, Any]) -> List[str]:
    """Names of the standard-domain nodes that make an input of ``node`` (``made_by``: output name -> node)."""
    feeders = [made_by[i] for i in node.input if i in made_by]
    return [p.name for p in feeders if p.domain in STD_DOMAINS]


def _made(node) -> List[str]:
    """The outputs a node makes (an empty name is an omitted optional output)."""
    return [o for o in node.output if o]


def _reads(node, names: Set[str]) -> bool:
    return any(i in names for i in node.input if i)


def accumulator_readers(model, types: Dict[str, int]) -> List[str]:
    """Names of the nodes that make an integer accumulator float (a ``Cast`` of the int32 sums of
    ``MatMulInteger``/``ConvInteger``, also after an integer bias ``Add``) and of the nodes that read
    that float (the dequantizing scale): in fp16 the sums overflow to inf (65504 is 4 products of
    127 x 127), at the Cast or at the boundary Cast before its reader."""
    return [name for graph in iter_graphs(model.graph) for name in _accumulator_readers_in(graph, types)]


def _accumulator_readers_in(graph, types: Dict[str, int]) -> List[str]:
    names: List[str] = []
    sums: Set[str] = set()
    floats: Set[str] = set()
    for node in graph.node:
        role = _accumulator_role(node, sums, types)
        if role == _SUM:
            sums.update(_made(node))
        elif role == _MADE_FLOAT:
            names.append(node.name)
            floats.update(_made(node))
        elif _reads(node, floats) and node.name:
            names.append(node.name)
    return names


_SUM = "sum"
_MADE_FLOAT = "made float"


# op type -> its role when it reads an accumulator: (its output not float32, its output float32)
_ROLES = {**{op: (_SUM, None) for op in ACCUMULATOR_PASSING_OPS}, "Cast": (None, _MADE_FLOAT)}


def _accumulator_role(node, sums: Set[str], types: Dict[str, int]) -> Optional[str]:
    """``_SUM``: the node makes (or passes on, as an integer) an accumulator of ``sums``;
    ``_MADE_FLOAT``: it casts one to float32; None: neither."""
    if node.op_type in ACCUMULATING_OPS:
        return _SUM
    roles = _ROLES.get(node.op_type)
    if roles is None or not _reads(node, sums):
        return None
    return roles[types.get(node.output[0]) == FLOAT]


def _inside_kept(model, kept: Set[str]) -> Set[str]:
    """Names of nodes inside the subgraphs of kept nodes (they stay fp32 with them)."""
    out: Set[str] = set()

    def walk(graph, inherited: bool) -> None:
        for node in graph.node:
            if inherited:
                out.add(node.name)
            for sub in node_subgraphs(node):
                walk(sub, inherited or node.name in kept)

    walk(model.graph, False)
    return out


@dataclass
class Decision:
    """Which nodes stay fp32, and why (name -> reason), in model order."""

    kept: Dict[str, str] = field(default_factory=dict)

    @property
    def names(self) -> List[str]:
        return list(self.kept)


def decide(
    model,
    keep_fp32: Iterable[str] = (),
    *,
    auto: bool = True,
    types=None,
    dtype: str = "float16",
    risky: Optional[Dict[str, str]] = None,
) -> Decision:
    """Name the nodes (in place) and decide which stay fp32 when the rest becomes ``dtype``.

    ``risky``: the values ``dtype`` cannot hold (:func:`toolkit.convert.ranges.risky_values`),
    when the caller has them already; their readers stay fp32 (with ``auto`` only)."""
    name_nodes(model)
    chosen = {n: REASON_USER for n in resolve_keep(model, keep_fp32)}
    if auto:
        _add_reasons(chosen, _automatic_reasons(model, types, dtype, risky))
    _add_reasons(chosen, dict.fromkeys(_inside_kept(model, set(chosen)), "inside a node kept in fp32"))
    _add_reasons(chosen, dict.fromkeys(_constants_for_kept(model, set(chosen)), REASON_CONSTANT))
    return Decision({n.name: chosen[n.name] for n in iter_nodes(model) if n.name in chosen})


def _automatic_reasons(model, types, dtype: str, risky: Optional[Dict[str, str]]) -> Dict[str, str]:
    if types is None:
        types = tensor_types(infer_types(model))
    autos = automatic_keep(model, types, dtype)
    _add_reasons(autos, range_keep(model, types, low_type(dtype), risky))
    return autos


def _add_reasons(chosen: Dict[str, str], more: Dict[str, str]) -> None:
    """Adds the nodes of ``more`` not in ``chosen`` yet (a node keeps its first reason)."""
    for name, reason in more.items():
        chosen.setdefault(name, reason)


def _constants_for_kept(model, kept: Set[str]) -> List[str]:
    """Constant nodes whose every reader is kept in fp32: their values stay fp32 too (converted,
    a weight past fp16's range would reach the fp32 node clamped; PP-OCR holds its BatchNorm
    variances, up to 1e8, in Constants)."""
    readers = readers_of(model.graph)
    out = []
    for node in iter_nodes(model):
        if node.op_type == "Constant" and node.domain in STD_DOMAINS and node.name not in kept:
            if _read_only_by(node, readers, kept):
                out.append(node.name)
    return out


def _read_only_by(node, readers: Dict[str, list], kept: Set[str]) -> bool:
    """Whether nodes read ``node``'s outputs, all of them in ``kept`` (``readers``: name -> its readers)."""
    names = [r.name for o in node.output for r in readers.get(o, ())]  # (readers_of has no "")
    return bool(names) and kept.issuperset(names)

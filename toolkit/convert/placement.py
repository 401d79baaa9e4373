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
from typing import Dict, Iterable, List, Optional, Set

from toolkit.convert.common import (
    BFLOAT16,
    FLOAT,
    FLOAT16,
    STD_DOMAINS,
    float16_library,
    iter_graphs,
    iter_nodes,
    low_type,
    name_nodes,
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
    chosen: List[str] = []
    seen: Set[str] = set()
    for spec in split_specs(specs):
        hits = [
            n.name
            for n in nodes
            if n.name == spec or n.op_type == spec or (_is_glob(spec) and fnmatch.fnmatchcase(n.name, spec))
        ]
        if not hits:
            raise InputError(
                f"--keep-fp32 {spec}: no node has this name or op type, and no node name matches it; "
                "`toolkit inspect model` lists the nodes"
            )
        for name in hits:
            if name not in seen:
                seen.add(name)
                chosen.append(name)
    return chosen


def automatic_keep(model, types: Optional[Dict[str, int]] = None, dtype: str = "float16") -> Dict[str, str]:
    """Nodes that must stay fp32 whatever the user asks: name -> reason. ``dtype``: the precision
    the rest is converted to (``float16`` or ``bfloat16``: the schema check follows it)."""
    low = low_type(dtype)
    reason_schema = REASON_SCHEMA if low == FLOAT16 else REASON_SCHEMA_BF16
    if types is None:
        types = tensor_types(infer_types(model))
    block = set(default_block_list())
    schemas = Schemas(model)
    keep: Dict[str, str] = {}
    shape_derived: Set[str] = set()
    constants: Set[str] = set()
    for graph in iter_graphs(model.graph):
        constants.update(t.name for t in graph.initializer)
    for graph in iter_graphs(model.graph):
        for node in graph.node:
            ins = [i for i in node.input if i]
            floats = any(types.get(t) == FLOAT for t in list(ins) + list(node.output))
            if node.op_type in ("Shape", "Size") and node.domain in STD_DOMAINS:
                shape_derived.update(node.output)
                continue
            if node.op_type == "Constant" and node.domain in STD_DOMAINS:
                constants.update(node.output)
                continue
            # an If reads only its condition: its outputs come from its branches, whatever decides it
            derived = (
                node.op_type != "If"
                and bool(ins)
                and any(i in shape_derived for i in ins)
                and all(i in shape_derived or i in constants for i in ins)
            )
            if derived:
                shape_derived.update(node.output)
            reason = _reason(node, derived, block, types) if floats else None
            if floats and reason is None:
                schema = schemas.get(node)
                if schema is not None and schema_lacks(schema, low):
                    reason = reason_schema
            if reason is not None:
                keep[node.name] = reason
    for name in accumulator_readers(model, types) if low == FLOAT16 else ():  # (bf16 holds them, rounded)
        keep.setdefault(name, REASON_ACCUMULATOR)
    return _with_ml_neighbours(model, keep)


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
    to = next((a.i for a in node.attribute if a.name == "to"), None)
    return types.get(node.input[0]) == FLOAT and to not in (None, FLOAT, FLOAT16, BFLOAT16)


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
    names: List[str] = []
    for graph in iter_graphs(model.graph):
        producers = {o: n for n in graph.node for o in n.output if o}
        ml_out: Set[str] = set()
        for node in graph.node:
            if node.domain == ML_DOMAIN:
                ml_out.update(o for o in node.output if o)
                names.extend(
                    producers[i].name for i in node.input if i in producers and producers[i].domain in STD_DOMAINS
                )
            elif node.domain in STD_DOMAINS and any(i in ml_out for i in node.input if i):
                names.append(node.name)
                if node.op_type == "Identity":
                    ml_out.update(o for o in node.output if o)
    return names


def accumulator_readers(model, types: Dict[str, int]) -> List[str]:
    """Names of the nodes that make an integer accumulator float (a ``Cast`` of the int32 sums of
    ``MatMulInteger``/``ConvInteger``, also after an integer bias ``Add``) and of the nodes that read
    that float (the dequantizing scale): in fp16 the sums overflow to inf (65504 is 4 products of
    127 x 127), at the Cast or at the boundary Cast before its reader."""
    names: List[str] = []
    for graph in iter_graphs(model.graph):
        sums: Set[str] = set()
        floats: Set[str] = set()
        for node in graph.node:
            reads_sum = any(i in sums for i in node.input if i)
            if node.op_type in ACCUMULATING_OPS or (
                reads_sum and node.op_type in ACCUMULATOR_PASSING_OPS and types.get(node.output[0]) != FLOAT
            ):
                sums.update(o for o in node.output if o)
            elif reads_sum and node.op_type == "Cast" and types.get(node.output[0]) == FLOAT:
                names.append(node.name)
                floats.update(o for o in node.output if o)
            elif any(i in floats for i in node.input if i) and node.name:
                names.append(node.name)
    return names


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
    user = resolve_keep(model, keep_fp32)
    autos: Dict[str, str] = {}
    if auto:
        if types is None:
            types = tensor_types(infer_types(model))
        autos = automatic_keep(model, types, dtype)
        for n, r in range_keep(model, types, low_type(dtype), risky).items():
            autos.setdefault(n, r)
    order = [n.name for n in iter_nodes(model)]
    chosen = {n: REASON_USER for n in user}
    for n, r in autos.items():
        chosen.setdefault(n, r)
    for n in _inside_kept(model, set(chosen)):
        chosen.setdefault(n, "inside a node kept in fp32")
    for n in _constants_for_kept(model, set(chosen)):
        chosen.setdefault(n, REASON_CONSTANT)
    return Decision({n: chosen[n] for n in order if n in chosen})


def _constants_for_kept(model, kept: Set[str]) -> List[str]:
    """Constant nodes whose every reader is kept in fp32: their values stay fp32 too (converted,
    a weight past fp16's range would reach the fp32 node clamped; PP-OCR holds its BatchNorm
    variances, up to 1e8, in Constants)."""
    readers = readers_of(model.graph)
    out = []
    for node in iter_nodes(model):
        if node.op_type != "Constant" or node.domain not in STD_DOMAINS or node.name in kept:
            continue
        names = [r.name for o in node.output if o for r in readers.get(o, ())]
        if names and all(r in kept for r in names):
            out.append(node.name)
    return out

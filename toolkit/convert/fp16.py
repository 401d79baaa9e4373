"""Mixed precision: convert a model to fp16, and emulate fp16 storage in fp32.

:func:`convert_to_fp16` writes a mixed fp16/fp32 model. The conversion itself is
onnxconverter-common's ``convert_float_to_float16`` (weights, value types, the casts
around nodes kept in fp32, If/Loop bodies); around it, this module:

- decides which nodes stay fp32: the user's ``keep_fp32`` (node names, glob patterns
  over node names, op types), ops onnxconverter-common lists as lacking fp16 kernels
  (Resize, Range, TopK, ...), ops whose ONNX schema has no fp16 type, operators outside
  the standard domain, and shape computations (float math on values derived from
  ``Shape``/``Size``: fp16 holds integers exactly only up to 2048);
- runs shape inference itself on a copy without the large weights (works past 2 GB;
  the library would serialize the whole model);
- converts weights within fp16's range: values past 65504 become +-65504, tiny nonzero
  values +-2**-24 (the library's own default clips at 1e4, which changes weights that
  fp16 holds fine);
- repairs what the library leaves inconsistent: ``Cast(to=FLOAT)`` and ``dtype``
  attributes in the fp16 part, ``Constant`` nodes with ``value_float(s)``, nodes that
  receive a mix of fp16 and fp32 inputs (weights shared between a kept and a converted
  node, graph outputs also read inside the graph, blocked nodes without inferred
  types), fixed-type inputs such as ``Resize``'s scales, round trips through fp16
  between two fp32 nodes (the library removes them only for single consumers), and a
  crash when a node kept in fp32 produces a graph output;
- checks the result with ONNX type inference, so a broken model is never written.

:func:`emulate_fp16` rewrites a float32 model so that, running in fp32 on any backend,
every tensor that would be stored in fp16 is rounded to fp16 (``Cast`` to float16 and
back after the node that produces it): overflow past 65504 gives inf, tiny values
underflow to subnormals or zero, and every tensor boundary rounds. Tensors keep their
names, so comparisons and ``mark all`` line up with the fp32 model. What it does not
emulate: arithmetic inside a kernel (accumulation in fp16 within a reduction, MatMul
or Conv, fused kernels); those run in fp32, and only their results are rounded.

bfloat16: ``convert(..., dtype="bfloat16")`` and ``emulate(..., dtype="bfloat16")`` do the same
with bfloat16. The library only writes fp16, so it runs as for fp16 (same placement of the
fp32 nodes and Casts) on tensors that already hold bfloat16 bits rounded once from their
float32 values (:func:`to_bf16`), and every float16 type is then made bfloat16
(:func:`_retype_bf16`) before the repair; the automatic fp32 set asks the ONNX schemas for
bfloat16 instead of float16 (``Conv`` has it only from opset 22).

No Typer or Rich here.
"""

from __future__ import annotations

import fnmatch
import warnings
from dataclasses import dataclass, field
from typing import Dict, Iterable, Iterator, List, Optional, Set, Tuple

from toolkit.core.errors import DependencyError, InputError
from toolkit.core.graphs import element_count, node_subgraphs, stable_topological_order, walk_graphs

FLOAT = 1
FLOAT16 = 10
DOUBLE = 11
BFLOAT16 = 16
FP16_MAX = 65504.0
FP16_TINY = 2.0**-24  # smallest positive (subnormal) fp16
BF16_MAX = 3.3895313892515355e38  # largest finite bfloat16 (0x7F7F)
_TENSOR_STR = {FLOAT: "tensor(float)", FLOAT16: "tensor(float16)", BFLOAT16: "tensor(bfloat16)"}
# the reduced precisions a model can be converted to / emulated in: dtype name -> (ONNX type, short name)
PRECISIONS = {"float16": (FLOAT16, "fp16"), "bfloat16": (BFLOAT16, "bf16")}
_STD_DOMAINS = ("", "ai.onnx")
# ops whose output type comes from a ``dtype`` attribute
_DTYPE_OPS = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "EyeLike", "Bernoulli"}
_STRIP_BYTES = 4096  # weights larger than this are left out of the copy given to shape inference

REASON_USER = "kept by --keep-fp32"
REASON_NO_KERNEL = "no fp16 kernel in ONNX-Runtime (onnxconverter-common's block list)"
REASON_SCHEMA = "its ONNX schema has no fp16 type"
REASON_SCHEMA_BF16 = "its ONNX schema has no bf16 type at the model's opset"
REASON_DOMAIN = "operator outside the standard ONNX domain"
REASON_SHAPE = "shape computation (fp16 holds integers exactly only up to 2048)"
REASON_CONSTANT = "a Constant read only by nodes kept in fp32 (its weights stay fp32, as initializers do)"


def _float16_module():
    try:
        from onnxconverter_common import float16
    except ImportError:  # pragma: no cover - a dependency of the package
        raise DependencyError(
            "fp16 conversion needs onnxconverter-common; install it with `pip install onnxconverter-common`"
        ) from None
    return float16


def default_block_list() -> List[str]:
    """Op types onnxconverter-common keeps in fp32 (no fp16 kernel in ONNX-Runtime)."""
    return list(_float16_module().DEFAULT_OP_BLOCK_LIST)


# ---------------------------------------------------------------------- graph walking


iter_graphs = walk_graphs  # ``graph`` and every subgraph below it (If/Loop/Scan bodies), depth first


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


class _Names:
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


def _copy_model(model, inplace: bool):
    """``model`` itself when ``inplace``, else a deep copy."""
    if inplace:
        return model
    import onnx

    m = onnx.ModelProto()
    m.CopyFrom(model)
    return m


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


# ---------------------------------------------------------------------- types


def _stripped_copy(model):
    """A copy of ``model`` without the data of its large weights (for shape inference)."""
    import onnx

    light = onnx.ModelProto()
    light.CopyFrom(_without_big_data(model))
    return light


def _without_big_data(model):
    """``model`` itself when small; else a shallow rebuild whose big initializers are empty."""
    import onnx

    # (sized from the dims: reading raw_data or ByteSize() copies or walks the bytes)
    big = [i for i, t in enumerate(model.graph.initializer) if element_count(t) * 4 > _STRIP_BYTES]
    if not big:
        return model
    light = onnx.ModelProto()
    _copy_fields(model, light, skip=("graph",))
    _copy_fields(model.graph, light.graph, skip=("initializer",))
    g = light.graph
    big_set = set(big)
    for i, t in enumerate(model.graph.initializer):
        if i in big_set:
            c = g.initializer.add()
            c.name = t.name
            c.data_type = t.data_type
            c.dims.extend(t.dims)
            # external reference: shape inference reads only dims and type
            c.data_location = onnx.TensorProto.EXTERNAL
            e = c.external_data.add()
            e.key, e.value = "location", "stripped"
        else:
            g.initializer.add().CopyFrom(t)
    return light


def _copy_fields(src, dst, skip=()) -> None:
    """Copy the set fields of protobuf message ``src`` into ``dst``, except ``skip``."""
    for fd, value in src.ListFields():
        if fd.name in skip:
            continue
        repeated = getattr(fd, "is_repeated", None)
        if repeated is None:
            repeated = fd.label == fd.LABEL_REPEATED
        if repeated:
            getattr(dst, fd.name).extend(value)
        elif fd.message_type is not None:
            getattr(dst, fd.name).CopyFrom(value)
        else:
            setattr(dst, fd.name, value)


def infer_types(model, *, strict: bool = False):
    """Shape-inferred copy of ``model`` without its large weights' data (value_info filled)."""
    import onnx

    light = _stripped_copy(model)
    try:
        return onnx.shape_inference.infer_shapes(light, strict_mode=strict, data_prop=False)
    except Exception as exc:  # onnx raises InferenceError, ValidationError, RuntimeError...
        if strict:
            raise
        warnings.warn(f"shape inference failed: {exc}")
        return light


def tensor_types(model) -> Dict[str, int]:
    """Element type of every tensor the model declares (inputs, initializers, value_info, outputs),
    across all its graphs (names are unique in valid models)."""
    types: Dict[str, int] = {}
    for graph in iter_graphs(model.graph):
        for coll in (graph.input, graph.value_info, graph.output):
            for vi in coll:
                if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type:
                    types.setdefault(vi.name, vi.type.tensor_type.elem_type)
        for t in graph.initializer:
            types.setdefault(t.name, t.data_type)
        for node in graph.node:
            if node.op_type == "Constant" and node.domain in _STD_DOMAINS and node.output:
                for attr in node.attribute:
                    if attr.name == "value":
                        types.setdefault(node.output[0], attr.t.data_type)
                    elif attr.name in ("value_float", "value_floats"):
                        types.setdefault(node.output[0], FLOAT)
    return types


def _opset(model, domain: str = "") -> int:
    for o in model.opset_import:
        if o.domain in ((domain,) if domain else _STD_DOMAINS):
            return o.version
    return 0


BF16_MIN_OPSET = 13  # Cast and Constant accept bfloat16 from opset 13 on


def bf16_ready(model):
    """(``model`` at opset 13 or later, the opset it had or None): bfloat16 needs Cast and
    Constant of opset 13, so an older model is upgraded with onnx's version converter (a new
    model; tensor names are kept)."""
    opset = _opset(model)
    if not opset or opset >= BF16_MIN_OPSET:
        return model, None
    from onnx import version_converter

    try:
        upgraded = version_converter.convert_version(model, BF16_MIN_OPSET)
    except Exception as exc:  # the converter raises on ops it has no adapter for
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise InputError(
            f"bfloat16 needs opset {BF16_MIN_OPSET} (Cast and Constant accept bfloat16 from it), the model is at "
            f"opset {opset}, and onnx's version converter could not upgrade it ({first}); upgrade the model first"
        ) from None
    upgraded.ir_version = model.ir_version
    return upgraded, opset


class _Schemas:
    def __init__(self, model):
        self.opset = _opset(model)
        self._cache: Dict[str, object] = {}

    def get(self, node):
        if node.domain not in _STD_DOMAINS:
            return None
        key = node.op_type
        if key not in self._cache:
            import onnx

            try:
                self._cache[key] = onnx.defs.get_schema(node.op_type, self.opset, "")
            except Exception:
                self._cache[key] = None
        return self._cache[key]


def _allowed(schema, type_str: str) -> Set[str]:
    for c in schema.type_constraints:
        if c.type_param_str == type_str:
            return set(c.allowed_type_strs)
    return {type_str}


def _formal(params, i: int):
    if not params:
        return None
    if i < len(params):
        return params[i]
    last = params[-1]
    variadic = getattr(last.option, "name", "") == "Variadic" or str(last.option).endswith("Variadic")
    return last if variadic else None


def _low_type(dtype: str) -> int:
    """ONNX element type of a reduced precision named ``float16``/``bfloat16`` (fp16/bf16 accepted)."""
    for name, (onnx_type, short) in PRECISIONS.items():
        if dtype in (name, short):
            return onnx_type
    raise ValueError(f"unknown reduced precision {dtype!r}: use float16 or bfloat16")


def _schema_lacks(schema, low: int = FLOAT16) -> bool:
    """Does a type constraint of ``schema`` allow float32 but not the ``low`` precision?"""
    want = _TENSOR_STR[low]
    for c in schema.type_constraints:
        allowed = set(c.allowed_type_strs)
        if "tensor(float)" in allowed and want not in allowed:
            return True
    return False


def bf16_opset(op_type: str, after: int) -> Optional[int]:
    """The first opset past ``after`` whose schema of ``op_type`` (standard domain) accepts
    bfloat16 wherever it accepts float32; None when no opset this onnx knows does."""
    import onnx

    for version in range(after + 1, onnx.defs.onnx_opset_version() + 1):
        try:
            schema = onnx.defs.get_schema(op_type, version, "")
        except Exception:
            continue
        if schema.since_version > after and not _schema_lacks(schema, BFLOAT16):
            return schema.since_version
    return None


# ---------------------------------------------------------------------- which nodes stay fp32


def automatic_keep(model, types: Optional[Dict[str, int]] = None, dtype: str = "float16") -> Dict[str, str]:
    """Nodes that must stay fp32 whatever the user asks: name -> reason. ``dtype``: the precision
    the rest is converted to (``float16`` or ``bfloat16``: the schema check follows it)."""
    low = _low_type(dtype)
    reason_schema = REASON_SCHEMA if low == FLOAT16 else REASON_SCHEMA_BF16
    if types is None:
        types = tensor_types(infer_types(model))
    block = set(default_block_list())
    schemas = _Schemas(model)
    keep: Dict[str, str] = {}
    shape_derived: Set[str] = set()
    constants: Set[str] = set()
    for graph in iter_graphs(model.graph):
        constants.update(t.name for t in graph.initializer)
    for graph in iter_graphs(model.graph):
        for node in graph.node:
            ins = [i for i in node.input if i]
            floats = any(types.get(t) == FLOAT for t in list(ins) + list(node.output))
            if node.op_type in ("Shape", "Size") and node.domain in _STD_DOMAINS:
                shape_derived.update(node.output)
                continue
            if node.op_type == "Constant" and node.domain in _STD_DOMAINS:
                constants.update(node.output)
                continue
            # an If reads only its condition: its outputs come from its branches, whatever decides it
            derived = node.op_type != "If" and bool(ins) and any(i in shape_derived for i in ins) and all(
                i in shape_derived or i in constants for i in ins
            )
            if derived:
                shape_derived.update(node.output)
            if not floats:
                continue
            if node.domain not in _STD_DOMAINS:
                keep[node.name] = REASON_DOMAIN
            elif node.op_type in block:
                keep[node.name] = REASON_NO_KERNEL
            elif derived:
                keep[node.name] = REASON_SHAPE
            else:
                schema = schemas.get(node)
                if schema is not None and _schema_lacks(schema, low):
                    keep[node.name] = reason_schema
    return keep


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


def decide(model, keep_fp32: Iterable[str] = (), *, auto: bool = True, types=None, dtype: str = "float16") -> Decision:
    """Name the nodes (in place) and decide which stay fp32 when the rest becomes ``dtype``."""
    name_nodes(model)
    user = resolve_keep(model, keep_fp32)
    autos = automatic_keep(model, types, dtype) if auto else {}
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
    readers = _readers(model.graph)
    out = []
    for node in iter_nodes(model):
        if node.op_type != "Constant" or node.domain not in _STD_DOMAINS or node.name in kept:
            continue
        names = [r.name for o in node.output if o for r in readers.get(o, ())]
        if names and all(r in kept for r in names):
            out.append(node.name)
    return out


# ---------------------------------------------------------------------- conversion


@dataclass
class Conversion:
    model: object
    kept: Dict[str, str]  # node name -> why it stays fp32
    clamped: List[str]  # weights with values past +-65504 (clamped to it)
    casts_added: int
    already_mixed: bool = False  # the model held float16 already: returned as it was
    upgraded_from: Optional[int] = None  # the opset a bfloat16 conversion upgraded the model from


def to_fp16(arr):
    """float32 values as fp16 the way the conversion stores weights: rounded to nearest, finite
    values past fp16's range clamped to +-65504, tiny nonzero values kept as +-2**-24 (never 0);
    inf and NaN unchanged. Returns (float16 array, whether any value was clamped at 65504)."""
    import numpy as np

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
    import numpy as np

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
    import numpy as np

    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def round_values(arr, dtype: str = "float16"):
    """float32 values rounded as the conversion to ``dtype`` stores weights, back in float32."""
    import numpy as np

    if _low_type(dtype) == BFLOAT16:
        return bf16_values(to_bf16(arr)[0])
    return to_fp16(arr)[0].astype(np.float32)


def _weight_array(t):
    import numpy as np
    from onnx import numpy_helper

    if t.HasField("raw_data"):
        return np.frombuffer(t.raw_data, dtype="<f4").reshape(tuple(t.dims))
    return numpy_helper.to_array(t)


def _convert_weights(model, kept: Set[str], low: int = FLOAT16) -> List[str]:
    """Convert the float32 weights no kept node reads to fp16 (:func:`to_fp16`), before the
    library runs (its own conversion makes several masked copies of every weight: 6x slower).
    Returns the names of the weights that had values past 65504.

    ``low=BFLOAT16``: the weights get :func:`to_bf16`'s bit patterns (rounded once from their
    float32 values) but stay typed FLOAT16 while the library runs (see :func:`_retype_bf16`)."""
    readers_kept: Dict[str, bool] = {}
    for node in iter_nodes(model):
        k = node.name in kept
        for i in node.input:
            if i:
                readers_kept[i] = readers_kept.get(i, False) or k
    clamped = []
    for graph in iter_graphs(model.graph):
        for t in graph.initializer:
            if t.data_type != FLOAT or readers_kept.get(t.name, True):
                continue  # read by a kept node (the library keeps it fp32), or by nothing
            h, over = to_bf16(_weight_array(t)) if low == BFLOAT16 else to_fp16(_weight_array(t))
            del t.float_data[:]
            t.raw_data = h.tobytes()
            t.data_type = FLOAT16
            if over:
                clamped.append(t.name)
    return clamped


def _normalize_float_data(model) -> None:
    """float_data -> raw_data (the library converts float_data element by element in Python)."""
    from onnx import numpy_helper

    for graph in iter_graphs(model.graph):
        for t in graph.initializer:
            if t.data_type == FLOAT and len(t.float_data) > 64:
                arr = numpy_helper.to_array(t)
                t.raw_data = arr.astype("<f4").tobytes()
                del t.float_data[:]


def _normalize_constants(model) -> None:
    """Constant nodes with value_float(s) -> a ``value`` tensor (so they convert too)."""
    import numpy as np
    from onnx import helper, numpy_helper

    for node in iter_nodes(model):
        if node.op_type != "Constant" or node.domain not in _STD_DOMAINS:
            continue
        for attr in list(node.attribute):
            if attr.name in ("value_float", "value_floats"):
                arr = np.float32(attr.f) if attr.name == "value_float" else np.asarray(attr.floats, np.float32)
                node.attribute.remove(attr)
                node.attribute.append(helper.make_attribute("value", numpy_helper.from_array(np.asarray(arr))))


def _initializers_as_weights(model) -> None:
    """Initializers also listed as graph inputs (IR version 3 and older models) -> plain weights.

    Such an input is a default a caller may override; its declared type would stay float32
    while its weight becomes fp16, a model no runtime loads. The fp16 model reads them as
    weights (IR version 4 at least, where an initializer need not be an input)."""
    for graph in iter_graphs(model.graph):
        weights = {t.name for t in graph.initializer}
        if not any(vi.name in weights for vi in graph.input):
            continue
        inputs = [vi for vi in graph.input if vi.name not in weights]
        _replace_repeated(graph.input, inputs)
        model.ir_version = max(model.ir_version, 4)


def _bf16_placeholder(tensor, *_limits, clamped: Optional[List[str]] = None):
    """In place: a float32 tensor -> :func:`to_bf16`'s bits, typed FLOAT16 while the library runs."""
    if tensor.data_type == FLOAT:
        bits, over = to_bf16(_weight_array(tensor))
        del tensor.float_data[:]
        tensor.raw_data = bits.tobytes()
        tensor.data_type = FLOAT16
        if over and clamped is not None:
            clamped.append(tensor.name or "(a node attribute)")
    return tensor


def _library_convert(f16, model, kept: Set[str], keep_io_types: bool, bf16_clamped: Optional[List[str]] = None) -> None:
    """onnxconverter-common's conversion of ``model`` in place, nodes ``kept`` left in fp32.

    ``bf16_clamped`` (a list, for a bfloat16 conversion): the tensors the library converts get
    bfloat16 bits rounded from their float32 values (typed FLOAT16 until :func:`_retype_bf16`);
    the names of those clamped to +-BF16_MAX are appended to it."""
    # the library's topological sort is quadratic (10k nodes: seconds) and ignores what
    # If/Loop bodies read; ours (below) runs instead, for the duration of the call
    library_sort = getattr(f16, "sort_topology", None)
    library_tensor = f16.convert_tensor_float_to_float16
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            if bf16_clamped is not None:
                f16.convert_tensor_float_to_float16 = lambda t, *a: _bf16_placeholder(t, clamped=bf16_clamped)
            if library_sort is not None:
                f16.sort_topology = _sort_all
            f16.convert_float_to_float16(
                model,
                min_positive_val=FP16_TINY,
                max_finite_val=FP16_MAX,
                keep_io_types=keep_io_types,
                disable_shape_infer=True,
                op_block_list=[],
                node_block_list=sorted(kept),
                check_fp16_ready=False,
            )
        except Exception as exc:  # the library asserts and raises ValueError on odd graphs
            raise InputError(f"fp16 conversion failed in onnxconverter-common: {type(exc).__name__}: {exc}") from None
        finally:
            f16.convert_tensor_float_to_float16 = library_tensor
            if library_sort is not None:
                f16.sort_topology = library_sort


def _attr_tensors(node):
    """(attribute name, index, tensor) of every tensor a node's attributes hold (index -1: ``t``)."""
    for a in node.attribute:
        if a.HasField("t"):
            yield a.name, -1, a.t
        for k, t in enumerate(a.tensors):
            yield a.name, k, t


def _fp16_attr_tensors(model) -> Set[Tuple[str, str, int]]:
    """Attribute tensors already float16 in the original model (they stay float16)."""
    return {
        (n.name, name, k)
        for n in iter_nodes(model)
        for name, k, t in _attr_tensors(n)
        if t.data_type == FLOAT16
    }


def _retype_bf16(model, original_fp16: Set[Tuple[str, str, int]]) -> None:
    """The library's fp16 model -> bfloat16: every FLOAT16 type becomes BFLOAT16.

    The tensors already hold bfloat16 bits (:func:`_convert_weights`, :func:`_bf16_placeholder`),
    so only their type changes; Casts to FLOAT16 cast to BFLOAT16; value types follow. The
    original model held no float16 (it would be mixed already), except perhaps attribute
    tensors (``original_fp16``), which stay as they were.
    """
    for graph in iter_graphs(model.graph):
        for t in graph.initializer:
            if t.data_type == FLOAT16:
                t.data_type = BFLOAT16
        for coll in (graph.input, graph.output, graph.value_info):
            for vi in coll:
                if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type == FLOAT16:
                    vi.type.tensor_type.elem_type = BFLOAT16
        for node in graph.node:
            if node.op_type == "Cast" and node.domain in _STD_DOMAINS:
                for a in node.attribute:
                    if a.name == "to" and a.i == FLOAT16:
                        a.i = BFLOAT16
            for name, k, t in _attr_tensors(node):
                if t.data_type == FLOAT16 and (node.name, name, k) not in original_fp16:
                    t.data_type = BFLOAT16


def convert(
    model,
    keep_fp32: Iterable[str] = (),
    *,
    keep_io_types: bool = True,
    auto_keep: bool = True,
    validate: bool = True,
    inplace: bool = False,
    if_mixed: str = "keep",
    dtype: str = "float16",
) -> Conversion:
    """Convert a float32 model to mixed fp16 (see the module docstring); returns the details.

    ``dtype="bfloat16"``: mixed bfloat16 instead, by the same conversion (same placement of
    the nodes kept in fp32 and of the Casts, decided with bfloat16's ONNX schemas), with
    every weight rounded once from its float32 value to bfloat16 (no fp16 clamping);
    ``clamped`` then lists weights past bfloat16's range (3.39e38).

    A model that already holds float16 or bfloat16 (mixed precision, e.g. written by this
    function) is not converted again: that would turn its deliberate float32 nodes into
    reduced precision. With ``if_mixed="keep"`` it is returned as it is (``already_mixed``);
    with ``"error"`` that is an InputError.
    """
    low = _low_type(dtype)
    short = PRECISIONS["bfloat16" if low == BFLOAT16 else "float16"][1]
    held = reduced_types(model)
    if held:
        if if_mixed == "error" or keep_fp32:
            names = " and ".join(sorted(held))
            raise InputError(
                f"the model already holds {names} tensors (mixed precision); converting it again would turn its "
                f"float32 nodes to {short}: convert the float32 original (with --keep-fp32 for the nodes to keep)"
            )
        return Conversion(_copy_model(model, inplace), {}, [], 0, already_mixed=True)
    f16 = _float16_module()
    upgraded_from = None
    if low == BFLOAT16:
        model, upgraded_from = bf16_ready(model)
    model = _copy_model(model, inplace or upgraded_from is not None)
    _normalize_constants(model)
    _normalize_float_data(model)
    _initializers_as_weights(model)
    inferred = infer_types(model)
    types = tensor_types(inferred)
    decision = decide(model, keep_fp32, auto=auto_keep, types=types, dtype=dtype)
    # the library needs value types in value_info: take them from the light copy
    _copy_value_info(inferred, model)
    del inferred
    kept = set(decision.kept)
    clamped = _convert_weights(model, kept, low)
    original_fp16 = _fp16_attr_tensors(model) if low == BFLOAT16 else set()
    originals = {n.name for n in iter_nodes(model)}
    # graph outputs produced by kept nodes: hidden from the library (it would wrap them
    # in a Cast16/Cast32 pair and then fail on it); the repair below keeps them fp32
    producers = {o: n.name for n in model.graph.node for o in n.output}
    hidden = []
    for vi in model.graph.output:
        if (
            keep_io_types
            and producers.get(vi.name) in kept
            and vi.type.tensor_type.elem_type == FLOAT
        ):
            vi.type.tensor_type.elem_type = DOUBLE
            hidden.append(vi.name)
    _library_convert(f16, model, kept, keep_io_types, clamped if low == BFLOAT16 else None)
    for graph in iter_graphs(model.graph):
        toposort(graph)
    if low == BFLOAT16:
        _retype_bf16(model, original_fp16)
    hidden_set = set(hidden)
    for vi in model.graph.output:
        if vi.name in hidden_set:
            vi.type.tensor_type.elem_type = FLOAT
    repair = _Repair(model, types, kept, originals, keep_io_types, low)
    repair.run()
    _drop_round_trips(model, originals, repair.types)
    repair.write_value_info()
    if validate:
        check_types(model, short)
    return Conversion(model, dict(decision.kept), clamped, repair.casts_added, upgraded_from=upgraded_from)


def convert_to_fp16(model, keep_fp32: Iterable[str] = (), keep_io_types: bool = True, **kw):
    """Mixed-precision copy of ``model`` (an onnx ModelProto): fp16 where safe, fp32 kept for
    ``keep_fp32`` (node names, glob patterns over node names, op types) and for nodes that
    need it (see :func:`automatic_keep`). Graph inputs/outputs keep their types unless
    ``keep_io_types=False``. Raises InputError when a ``keep_fp32`` word selects no node.
    A model that already holds float16 comes back unchanged (see :func:`convert`).
    """
    return convert(model, keep_fp32, keep_io_types=keep_io_types, **kw).model


def _subgraph_reads(node) -> Set[str]:
    """Names a node's subgraphs read (they may come from the outer graph)."""
    names: Set[str] = set()
    for sub in node_subgraphs(node):
        for g in iter_graphs(sub):
            for n in g.node:
                names.update(i for i in n.input if i)
    return names


def toposort(graph) -> None:
    """Order ``graph``'s nodes topologically (stable), counting what If/Loop bodies read
    from the outer graph (onnxconverter-common's sort ignores it and can put an If before
    the node producing a tensor its branches read)."""
    nodes = list(graph.node)
    order = stable_topological_order(nodes, lambda n: set(i for i in n.input if i) | _subgraph_reads(n))
    if len(order) != len(nodes):  # a cycle: leave the order alone (type checking reports it)
        return
    if order == list(range(len(nodes))):
        return
    _replace_repeated(graph.node, [nodes[k] for k in order])


def _replace_repeated(field, items) -> None:
    """Make the repeated message ``field`` hold copies of ``items`` (some of which it holds now)."""
    copies = []
    for item in items:
        c = type(item)()
        c.CopyFrom(item)
        copies.append(c)
    del field[:]
    field.extend(copies)


def _sort_all(graph) -> None:
    for g in iter_graphs(graph):
        toposort(g)


def _copy_value_info(src, dst) -> None:
    """value_info of every graph of ``src`` into the matching graph of ``dst`` (same structure)."""
    for gs, gd in zip(iter_graphs(src.graph), iter_graphs(dst.graph)):
        del gd.value_info[:]
        gd.value_info.extend(gs.value_info)


def check_types(model, what: str = "fp16") -> None:
    """InputError unless ONNX type inference accepts ``model`` (checked without big weights)."""
    import onnx

    try:
        onnx.shape_inference.infer_shapes(_without_big_data(model), strict_mode=True, check_type=True, data_prop=False)
    except Exception as exc:
        msg = str(exc).strip().splitlines()
        raise InputError(
            f"the {what} model does not type-check (" + (msg[0] if msg else type(exc).__name__) + "); "
            "keep the node it names in fp32 with --keep-fp32"
        ) from None


def _body_output_types(node) -> Dict[str, int]:
    """Element types of an If's or Loop/Scan's outputs, from its (then-)body's outputs."""
    out: Dict[str, int] = {}
    if node.domain not in _STD_DOMAINS or node.op_type not in ("If", "Loop", "Scan"):
        return out
    bodies = ("then_branch", "else_branch") if node.op_type == "If" else ("body",)
    skip = 1 if node.op_type == "Loop" else 0
    for a in node.attribute:
        if a.name in bodies:
            for k, vi in enumerate(a.g.output[skip:]):
                # a body output may leave its type out (0): that says nothing
                if k < len(node.output) and vi.type.tensor_type.elem_type:
                    out.setdefault(node.output[k], vi.type.tensor_type.elem_type)
    return out


class _Repair:
    """Make every node's input types what its precision asks for, inserting Casts."""

    def __init__(
        self, model, orig_types: Dict[str, int], kept: Set[str], originals: Set[str], keep_io: bool, low: int = FLOAT16
    ):
        self.model = model
        self.low = low  # the reduced precision converted nodes compute in (FLOAT16 or BFLOAT16)
        self.floats = (FLOAT, low)
        self.orig = orig_types
        self.kept = kept
        self.originals = originals
        self.keep_io = keep_io
        self.schemas = _Schemas(model)
        self.types: Dict[str, int] = {}
        self.casts_added = 0
        self.fresh = _Names(model).fresh

    def run(self) -> None:
        self.graph(self.model.graph, {}, top=True)

    def _cast(self, src: str, to: int, hint: str):
        from onnx import helper

        out = self.fresh(f"{src}_to_{_short(to)}")
        node = helper.make_node("Cast", [src], [out], name=self.fresh(f"{hint}_cast_{out}"), to=to)
        self.types[out] = to
        self.casts_added += 1
        return node, out

    def graph(self, graph, outer: Dict[str, int], top: bool) -> None:
        types = dict(outer)
        for vi in graph.input:
            if vi.type.tensor_type.elem_type:
                types[vi.name] = vi.type.tensor_type.elem_type
        for t in graph.initializer:
            types[t.name] = t.data_type
        declared = {
            vi.name: vi.type.tensor_type.elem_type for vi in graph.value_info if vi.type.tensor_type.elem_type
        }
        new_nodes: list = []
        made: Dict[Tuple[str, int], str] = {}
        for node in graph.node:
            kept = node.name in self.kept
            for sub in node_subgraphs(node):
                self.graph(sub, types, top=False)
            schema = self.schemas.get(node)
            if node.name in self.originals and not kept:
                self._retarget(node)
            self._cast_inputs(node, schema, kept, types, made, new_nodes)
            new_nodes.append(node)
            self._type_outputs(node, schema, kept, types, declared, new_nodes)
        self._fix_graph_outputs(graph, top, types, new_nodes)
        del graph.node[:]
        graph.node.extend(new_nodes)
        self.types.update(types)

    def _cast_inputs(self, node, schema, kept: bool, types: Dict[str, int], made: dict, new_nodes: list) -> None:
        """Casts in front of ``node`` for the float inputs it wants in the other precision."""
        for i, name in enumerate(node.input):
            have = types.get(name) if name else None
            if have not in self.floats:
                continue
            want = self._wanted_input(node, schema, i, name, kept, have)
            if want is not None and want != have:
                out = made.get((name, want))  # one Cast per tensor and type, shared by its readers
                if out is None:
                    cast, out = self._cast(name, want, node.name)
                    new_nodes.append(cast)
                    made[(name, want)] = out
                node.input[i] = out

    def _type_outputs(self, node, schema, kept: bool, types: Dict[str, int], declared, new_nodes: list) -> None:
        """Record ``node``'s output types; a converted node's output that ended fp32 where it was
        fp32 gets a Cast to fp16."""
        from onnx import helper

        outs = self._output_types(node, schema, types, declared)
        for j, name in enumerate(node.output):
            if not name or outs.get(name) is None:
                continue
            have = outs[name]
            types[name] = have
            if (
                not kept
                and node.name in self.originals
                and have == FLOAT
                and self.orig.get(name) == FLOAT
                and node.op_type not in ("Shape", "Size")
            ):
                raw = self.fresh(f"{name}_fp32")
                node.output[j] = raw
                self.types[raw] = FLOAT
                new_nodes.append(
                    helper.make_node("Cast", [raw], [name], name=self.fresh(f"{node.name}_cast_out{j}"), to=self.low)
                )
                self.casts_added += 1
                types[name] = self.low

    def _fix_graph_outputs(self, graph, top: bool, types: Dict[str, int], new_nodes: list) -> None:
        """Graph outputs: the declared type wins (I/O types kept at the top; the library's fp16 bodies below)."""
        from onnx import helper

        for vi in graph.output:
            want = vi.type.tensor_type.elem_type
            have = types.get(vi.name)
            if top and self.keep_io and self.orig.get(vi.name) in self.floats:
                want = self.orig[vi.name]
                vi.type.tensor_type.elem_type = want
            if have in self.floats and want in self.floats and have != want:
                raw = self.fresh(f"{vi.name}_{_short(have)}")
                for n in new_nodes:
                    for k, o in enumerate(n.output):
                        if o == vi.name:
                            n.output[k] = raw
                    for k, i in enumerate(n.input):
                        if i == vi.name:
                            n.input[k] = raw
                _rename_in_subgraphs(new_nodes, vi.name, raw)
                new_nodes.append(helper.make_node("Cast", [raw], [vi.name], name=self.fresh(f"{vi.name}_cast_io"), to=want))
                self.casts_added += 1
                types[raw] = have
                types[vi.name] = want

    def _retarget(self, node) -> None:
        """Attribute-typed outputs of converted nodes: FLOAT -> the reduced precision."""
        if node.domain not in _STD_DOMAINS:
            return
        if node.op_type == "Cast":
            for a in node.attribute:
                if a.name == "to" and a.i == FLOAT:
                    a.i = self.low
        elif node.op_type in _DTYPE_OPS:
            for a in node.attribute:
                if a.name == "dtype" and a.i == FLOAT:
                    a.i = self.low

    def _wanted_input(self, node, schema, i: int, name: str, kept: bool, have: int) -> Optional[int]:
        orig = self.orig.get(name, have)
        if kept:
            return orig if orig in self.floats else None
        if orig != FLOAT:
            return None
        if schema is None or node.op_type == "Cast":  # Cast takes any type
            return None
        formal = _formal(schema.inputs, i)
        if formal is None:
            return None
        allowed = _allowed(schema, formal.type_str)
        if _TENSOR_STR[self.low] in allowed:
            return self.low
        if _TENSOR_STR[FLOAT] in allowed:
            return FLOAT
        return None

    def _output_types(self, node, schema, types: Dict[str, int], declared: Dict[str, int]) -> Dict[str, int]:
        out: Dict[str, int] = {}
        if schema is not None and not node_subgraphs(node):
            out.update(self._schema_types(node, schema, types))
        out.update({k: v for k, v in _body_output_types(node).items() if k not in out})
        for o in node.output:
            if o and o not in out and o in declared:
                out[o] = declared[o]
        return out

    def _schema_types(self, node, schema, types: Dict[str, int]) -> Dict[str, int]:
        """Output element types from the operator's schema, when every input's type is known."""
        import onnx

        if not all((not i) or i in types for i in node.input):
            return {}
        tps = {}
        for i in node.input:
            if i:
                tp = onnx.TypeProto()
                tp.tensor_type.elem_type = types[i]
                tps[i] = tp
        try:
            res = onnx.shape_inference.infer_node_outputs(
                schema, node, tps, opset_imports=list(self.model.opset_import), ir_version=self.model.ir_version
            )
        except Exception:
            return {}
        return {k: tp.tensor_type.elem_type for k, tp in res.items() if tp.HasField("tensor_type") and tp.tensor_type.elem_type}

    def write_value_info(self) -> None:
        for graph in iter_graphs(self.model.graph):
            keep = []
            for vi in graph.value_info:
                t = self.types.get(vi.name)
                if not t:  # unknown (None or 0): a value_info typed 0 does not load in ONNX-Runtime
                    continue
                if vi.type.HasField("tensor_type"):
                    vi.type.tensor_type.elem_type = t
                keep.append(vi)
            _replace_repeated(graph.value_info, keep)


def _short(onnx_type: int) -> str:
    return {FLOAT16: "fp16", BFLOAT16: "bf16"}.get(onnx_type, "fp32")


def _rename_in_subgraphs(nodes, old: str, new: str) -> None:
    for n in nodes:
        for sub in node_subgraphs(n):
            for g in iter_graphs(sub):
                for m in g.node:
                    for k, i in enumerate(m.input):
                        if i == old:
                            m.input[k] = new


def _drop_round_trips(model, originals: Set[str], types: Dict[str, int]) -> None:
    """Remove converter-made Cast pairs that go fp32 -> fp16 -> fp32 (or back), and no-op casts.

    Consumers of the second Cast read the source directly, so two fp32 nodes exchange
    fp32 values, as keeping them fp32 promises.
    """
    for graph in iter_graphs(model.graph):
        rename = _round_trip_renames(graph, originals, types)
        if not rename:
            continue
        for g in iter_graphs(graph):  # readers in the graph and in its bodies
            for n in g.node:
                for k, i in enumerate(n.input):
                    if i in rename:
                        n.input[k] = rename[i]
        _drop_dead_casts(graph, originals)


def _round_trip_renames(graph, originals: Set[str], types: Dict[str, int]) -> Dict[str, str]:
    """Output of a removable Cast -> the tensor its readers should read instead."""
    outputs = {vi.name for vi in graph.output}
    produced = {o: n for n in graph.node for o in n.output}
    rename: Dict[str, str] = {}
    for n in graph.node:
        if n.op_type != "Cast" or n.name in originals or not n.input:
            continue
        to = next((a.i for a in n.attribute if a.name == "to"), None)
        src = rename.get(n.input[0], n.input[0])
        target = None
        if types.get(src) == to:
            target = src  # no-op cast
        else:
            first = produced.get(src)
            if first is not None and first.op_type == "Cast" and first.name not in originals:
                if types.get(first.input[0]) == to:
                    target = first.input[0]
        if target is not None and n.output[0] not in outputs:
            rename[n.output[0]] = rename.get(target, target)
    return rename


def _used_names(graph) -> Set[str]:
    used = {vi.name for vi in graph.output}
    for g in iter_graphs(graph):
        for n in g.node:
            used.update(i for i in n.input if i)
        if g is not graph:
            used.update(vi.name for vi in g.output)
    return used


def _drop_dead_casts(graph, originals: Set[str]) -> None:
    while True:
        used = _used_names(graph)
        dead = [
            k
            for k, n in enumerate(graph.node)
            if n.op_type == "Cast" and n.name not in originals and all(o not in used for o in n.output)
        ]
        if not dead:
            return
        for k in reversed(dead):
            del graph.node[k]


# ---------------------------------------------------------------------- emulation


@dataclass
class Emulation:
    model: object
    kept: Dict[str, str]
    rounded: int  # tensors rounded to fp16


def emulate(
    model,
    keep_fp32: Iterable[str] = (),
    *,
    auto_keep: bool = True,
    inplace: bool = False,
    types: Optional[Dict[str, int]] = None,
    cache: Optional[Dict[str, bytes]] = None,
    dtype: str = "float16",
) -> Emulation:
    """Rewrite a float32 model so that it stores every tensor the fp16 conversion would
    store in fp16 rounded to fp16, computing in fp32 (see the module docstring).

    ``dtype="bfloat16"``: the same for the bfloat16 conversion (tensors rounded to bfloat16
    by ``Cast`` to bfloat16 and back, weights as :func:`to_bf16` stores them).

    Graph inputs and outputs stay float32 (the outputs hold fp16-rounded values); nodes
    kept in fp32 (``keep_fp32``, and the automatic ones unless ``auto_keep=False``) read
    and write unrounded values, as in the converted model. Weights are rounded as the
    conversion writes them (clamped to +-65504, tiny values to +-2**-24).

    ``cache``: a dict kept between calls on the same model (``debug precision`` emulates it
    once per check): the rounded weights, by name, so each is rounded once.
    """
    upgraded = None
    if _low_type(dtype) == BFLOAT16:
        model, upgraded = bf16_ready(model)
    model = _copy_model(model, inplace or upgraded is not None)
    _normalize_constants(model)
    if types is None:
        types = tensor_types(infer_types(model))
    decision = decide(model, keep_fp32, auto=auto_keep, types=types, dtype=dtype)
    em = _Emulator(model, set(decision.kept), types, cache, dtype)
    em.graph(model.graph, top=True)
    return Emulation(model, dict(decision.kept), em.rounded)


def _round_chain(fresh, src: str, dst: str, hint: str, low: int) -> list:
    """``dst`` = ``src`` rounded to ``low`` (FLOAT16 or BFLOAT16): a Cast to it and back to float32."""
    from onnx import helper

    short = _short(low)
    mid = fresh(f"{dst}::{short}")
    return [
        helper.make_node("Cast", [src], [mid], name=fresh(f"{hint}::to_{short}"), to=low),
        helper.make_node("Cast", [mid], [dst], name=fresh(f"{hint}::to_fp32"), to=FLOAT),
    ]


def _readers(g) -> Dict[str, list]:
    """name -> the nodes that read it, in ``g`` and in the subgraphs below it."""
    out: Dict[str, list] = {}
    for sub in iter_graphs(g):
        for n in sub.node:
            for i in n.input:
                if i:
                    out.setdefault(i, []).append(n)
    return out


class _Emulator:
    """The rewrite behind :func:`emulate`, one graph at a time."""

    def __init__(
        self, model, kept: Set[str], types: Dict[str, int], cache: Optional[Dict[str, bytes]], dtype: str = "float16"
    ):
        self.kept = kept
        self.types = types
        self.cache = cache
        self.dtype = dtype
        self.low = _low_type(dtype)
        self.fresh = _Names(model).fresh
        self.rounded = 0

    def round_chain(self, src: str, dst: str, hint: str) -> list:
        self.rounded += 1
        return _round_chain(self.fresh, src, dst, hint, self.low)

    def repoint(self, rmap, old: str, new: str) -> None:
        """The converted readers of ``old`` read ``new`` instead."""
        for n in rmap.get(old, ()):
            if n.name not in self.kept:
                for k, i in enumerate(n.input):
                    if i == old:
                        n.input[k] = new

    def users(self, rmap, name: str) -> Tuple[bool, bool]:
        """(read by a converted node, read by a kept node), subgraphs included."""
        readers = rmap.get(name, ())
        return any(n.name not in self.kept for n in readers), any(n.name in self.kept for n in readers)

    def rounded_copy(self, rmap, src: str) -> list:
        """Converted readers of fp32 tensor ``src`` read it rounded (the Casts that do it)."""
        if not self.users(rmap, src)[0]:
            return []
        dst = self.fresh(f"{src}::rounded")
        self.repoint(rmap, src, dst)
        return self.round_chain(src, dst, src)

    def weights(self, g, rmap) -> None:
        """Weights read by converted nodes: rounded (a rounded twin when kept nodes read them too)."""
        import onnx

        new_inits = []
        for t in g.initializer:
            conv, keep = self.users(rmap, t.name) if t.data_type == FLOAT else (False, False)
            if not conv:
                continue
            data = self.cache.get(t.name) if self.cache is not None else None
            if data is None:
                data = round_values(_weight_array(t), self.dtype).astype("<f4").tobytes()
                if self.cache is not None:
                    self.cache[t.name] = data
            target = t
            if keep:
                target = onnx.TensorProto(name=self.fresh(f"{t.name}::fp16"), data_type=FLOAT, dims=t.dims)
                new_inits.append(target)
                self.repoint(rmap, t.name, target.name)
            else:
                del t.float_data[:]
                t.ClearField("data_location")
                del t.external_data[:]
            target.raw_data = data
            self.rounded += 1
        g.initializer.extend(new_inits)

    def constant(self, node) -> None:
        import numpy as np
        from onnx import numpy_helper

        for a in node.attribute:
            if a.name == "value" and a.t.data_type == FLOAT:
                arr = round_values(numpy_helper.to_array(a.t), self.dtype).astype(np.float32)
                a.t.CopyFrom(numpy_helper.from_array(arr, a.t.name))
                self.rounded += 1

    def node(self, node, rmap) -> list:
        """``node`` and the Casts after it."""
        outs = [(j, o) for j, o in enumerate(node.output) if o and self.types.get(o) == FLOAT]
        if node.name in self.kept:  # its outputs stay fp32; converted readers get them rounded
            return [node] + [c for _, o in outs for c in self.rounded_copy(rmap, o)]
        for sub in node_subgraphs(node):
            self.graph(sub, top=False)
        if node.op_type == "Constant" and node.domain in _STD_DOMAINS:
            self.constant(node)
            return [node]
        tail = []
        for j, o in outs:
            raw = self.fresh(f"{o}::fp32")
            node.output[j] = raw
            tail += self.round_chain(raw, o, o)
        return [node] + tail

    def graph(self, g, top: bool) -> None:
        rmap = _readers(g)
        self.weights(g, rmap)
        new_nodes: list = []
        if top:  # float32 graph inputs: rounded for converted readers
            for vi in g.input:
                if self.types.get(vi.name) == FLOAT:
                    new_nodes += self.rounded_copy(rmap, vi.name)
        for node in list(g.node):
            new_nodes += self.node(node, rmap)
        del g.node[:]
        g.node.extend(new_nodes)


def emulate_fp16(model, keep_fp32: Iterable[str] = (), **kw):
    """:func:`emulate` returning only the model."""
    return emulate(model, keep_fp32, **kw).model


def reduced_types(model) -> Set[str]:
    """The reduced precisions (``float16``, ``bfloat16``) the model's weights, inputs, outputs,
    value types or Casts hold (empty for a float32 model)."""
    by_type = {t: name for name, (t, _short) in PRECISIONS.items()}
    found: Set[str] = set()
    for graph in iter_graphs(model.graph):
        found.update(by_type[t.data_type] for t in graph.initializer if t.data_type in by_type)
        for coll in (graph.input, graph.output, graph.value_info):
            found.update(
                by_type[vi.type.tensor_type.elem_type] for vi in coll if vi.type.tensor_type.elem_type in by_type
            )
        for node in graph.node:
            if node.op_type == "Cast":
                found.update(by_type[a.i] for a in node.attribute if a.name == "to" and a.i in by_type)
    return found


def has_fp16(model) -> bool:
    """Does the model already hold float16 weights, inputs, outputs or Casts (a mixed model)?"""
    for graph in iter_graphs(model.graph):
        if any(t.data_type == FLOAT16 for t in graph.initializer):
            return True
        for coll in (graph.input, graph.output, graph.value_info):
            if any(vi.type.tensor_type.elem_type == FLOAT16 for vi in coll):
                return True
        for node in graph.node:
            if node.op_type == "Cast" and any(a.name == "to" and a.i == FLOAT16 for a in node.attribute):
                return True
    return False


_LOWS = (FLOAT16, BFLOAT16)


def emulate_mixed(model, *, inplace: bool = False) -> Emulation:
    """Emulate a model that already holds float16 or bfloat16 tensors (a converted, mixed model).

    Every float16 (bfloat16) tensor becomes a float32 tensor rounded to fp16 (bf16) after the
    node that produces it (weights and Constants: their values, exactly), so the reduced parts
    run in fp32 with reduced storage; float32 tensors stay as they are. Reduced graph inputs
    are read as given; reduced graph outputs keep their type.
    """
    model = _copy_model(model, inplace)
    name_nodes(model)
    emulator = _MixedEmulator(model, tensor_types(infer_types(model)))
    emulator.graph(model.graph, top=True)
    return Emulation(model, {}, emulator.rounded)


def _repoint(nodes, old: str, new: str) -> None:
    """Nodes (and their bodies) that read ``old`` read ``new``."""
    for n in nodes:
        for k, i in enumerate(n.input):
            if i == old:
                n.input[k] = new
        for sub in node_subgraphs(n):
            _repoint(sub.node, old, new)


def _retype_attrs(node) -> None:
    """Attributes that make float16/bfloat16 values: make float32 ones (rounded afterwards)."""
    import numpy as np
    import onnx
    from onnx import numpy_helper

    for a in node.attribute:
        if a.name in ("to", "dtype") and a.i in _LOWS and (node.op_type == "Cast" or node.op_type in _DTYPE_OPS):
            a.i = FLOAT
        if a.type == onnx.AttributeProto.TENSOR and a.t.data_type in _LOWS:
            arr = numpy_helper.to_array(a.t).astype(np.float32)
            a.t.CopyFrom(numpy_helper.from_array(arr, a.t.name))


class _MixedEmulator:
    """:func:`emulate_mixed`'s rewrite, one graph (and its bodies) at a time."""

    def __init__(self, model, types: Dict[str, int]):
        self.types = types
        self.fresh = _Names(model).fresh
        self.rounded = 0

    def graph(self, g, top: bool) -> None:
        import numpy as np
        from onnx import numpy_helper

        for t in g.initializer:
            if t.data_type in _LOWS:
                t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float32), t.name))
        new_nodes = self._inputs(g, top)
        out_types = {vi.name: vi.type.tensor_type.elem_type for vi in g.output}
        for node in list(g.node):
            for sub in node_subgraphs(node):
                self.graph(sub, top=False)
            _retype_attrs(node)
            new_nodes.append(node)
            new_nodes += self._round_outputs(node, top, out_types)
        del g.node[:]
        g.node.extend(new_nodes)
        for vi in list(g.output if not top else []) + list(g.value_info):
            if vi.type.tensor_type.elem_type in _LOWS:
                vi.type.tensor_type.elem_type = FLOAT
        # value_info of renamed tensors would now be wrong: drop what is not an input/output
        del g.value_info[:]

    def _inputs(self, g, top: bool) -> list:
        """Casts that read the top graph's reduced inputs as fp32; bodies' inputs retyped."""
        from onnx import helper

        nodes = []
        for vi in g.input:
            if vi.type.tensor_type.elem_type in _LOWS:
                if top:
                    up = self.fresh(f"{vi.name}::fp32")
                    _repoint(g.node, vi.name, up)
                    nodes.append(helper.make_node("Cast", [vi.name], [up], name=self.fresh(f"{vi.name}::to_fp32"), to=FLOAT))
                else:  # a body's input: its values come from fp32 (rounded) tensors now
                    vi.type.tensor_type.elem_type = FLOAT
        return nodes

    def _round_outputs(self, node, top: bool, out_types: Dict[str, int]) -> list:
        """The node's reduced outputs computed in fp32 and rounded (Cast to fp16/bf16 and back)."""
        from onnx import helper

        fresh = self.fresh
        tail = []
        for j, o in enumerate(node.output):
            low = self.types.get(o) if o else None
            if low not in _LOWS:
                continue
            raw = fresh(f"{o}::fp32")
            node.output[j] = raw
            if top and out_types.get(o) == low:
                tail.append(helper.make_node("Cast", [raw], [o], name=fresh(f"{o}::to_{_short(low)}"), to=low))
            else:
                tail += _round_chain(fresh, raw, o, o, low)
            self.rounded += 1
        return tail


def emulate_any(model, keep_fp32: Iterable[str] = (), **kw) -> Emulation:
    """:func:`emulate_mixed` for a model that already holds float16 or bfloat16, else :func:`emulate`
    (``dtype=`` in ``kw``: the precision a float32 model is emulated in)."""
    if reduced_types(model):
        if keep_fp32:
            from toolkit.core.errors import UsageError

            raise UsageError("the model is already mixed precision: its float32 nodes stay float32; drop --keep-fp32")
        return emulate_mixed(model, inplace=kw.get("inplace", False))
    return emulate(model, keep_fp32, **kw)

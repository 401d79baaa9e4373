"""Element types and operator schemas for the mixed-precision conversion: shape inference on a
copy without the large weights (works past 2 GB), the types every tensor holds, what an
operator's schema accepts, the bfloat16 opset upgrade, and the final type check.

No Typer or Rich here.
"""

from __future__ import annotations

import re
import warnings
from itertools import chain
from typing import Dict, Iterator, Optional, Set, Tuple

import onnx
from onnx import version_converter

from toolkit.convert.common import BFLOAT16, FLOAT, FLOAT16, STD_DOMAINS, TENSOR_STR, iter_graphs, onnx_errors
from toolkit.core.errors import ExitCode, InputError, ToolkitError
from toolkit.core.graph.graphs import element_count
from toolkit.core.process.interrupt import ChildDied, call_in_child

STRIPPED = "stripped"  # the external-data location of the weights a light copy leaves out
_STRIP_BYTES = 4096  # weights larger than this are left out of the copy given to shape inference


def _stripped_copy(model):
    """A copy of ``model`` without the data of its large weights (for shape inference)."""

    light = onnx.ModelProto()
    light.CopyFrom(without_big_data(model))
    return light


def without_big_data(model):
    """``model`` itself when small; else a shallow rebuild whose big initializers are empty."""

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
            e.key, e.value = "location", STRIPPED
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

    light = _stripped_copy(model)
    try:
        return _inferred(light, strict, False, "ONNX shape inference")
    except onnx_errors() as exc:
        if strict:
            raise
        warnings.warn(f"shape inference failed: {exc}")
        return light


def tensor_types(model) -> Dict[str, int]:
    """Element type of every tensor the model declares (inputs, initializers, value_info, outputs),
    across all its graphs (names are unique in valid models)."""
    types: Dict[str, int] = {}
    for graph in iter_graphs(model.graph):
        for name, kind in _declared_types(graph):
            types.setdefault(name, kind)
    return types


def _declared_types(graph) -> Iterator[Tuple[str, int]]:
    """(name, element type) of a graph's inputs, value infos and outputs (those typed), its
    initializers and the values of its Constant nodes, in that order."""
    for vi in chain(graph.input, graph.value_info, graph.output):
        if vi.type.tensor_type.elem_type:  # (0 for the other kinds of type: reading sets no field)
            yield vi.name, vi.type.tensor_type.elem_type
    for t in graph.initializer:
        yield t.name, t.data_type
    for node in graph.node:
        kind = _constant_type(node)
        if kind is not None:
            yield node.output[0], kind


def _constant_type(node) -> Optional[int]:
    """The element type of a standard ``Constant`` node's value (its tensor's, FLOAT for
    ``value_float(s)``); None for the other kinds of value and the other nodes."""
    if node.op_type != "Constant" or node.domain not in STD_DOMAINS or not node.output:
        return None
    for attr in node.attribute:
        if attr.name == "value":
            return attr.t.data_type
        if attr.name in ("value_float", "value_floats"):
            return FLOAT
    return None


def opset_version(model, domain: str = "") -> int:
    for o in model.opset_import:
        if o.domain in ((domain,) if domain else STD_DOMAINS):
            return o.version
    return 0


BF16_MIN_OPSET = 13  # Cast and Constant accept bfloat16 from opset 13 on


def bf16_ready(model):
    """(``model`` at opset 13 or later, the opset it had or None): bfloat16 needs Cast and
    Constant of opset 13, so an older model is upgraded with onnx's version converter (a new
    model; tensor names are kept)."""
    opset = opset_version(model)
    if not opset or opset >= BF16_MIN_OPSET:
        return model, None

    try:
        upgraded = version_converter.convert_version(model, BF16_MIN_OPSET)
    except onnx_errors() as exc:  # (the converter raises on ops it has no adapter for)
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise InputError(
            f"bfloat16 needs opset {BF16_MIN_OPSET} (Cast and Constant accept bfloat16 from it), the model is at "
            f"opset {opset}, and onnx's version converter could not upgrade it ({first}); upgrade the model first"
        ) from None
    upgraded.ir_version = model.ir_version
    return upgraded, opset


class Schemas:
    def __init__(self, model):
        self.opset = opset_version(model)
        self._cache: Dict[str, object] = {}

    def get(self, node):
        if node.domain not in STD_DOMAINS:
            return None
        key = node.op_type
        if key not in self._cache:
            import onnx

            try:
                self._cache[key] = onnx.defs.get_schema(node.op_type, self.opset, "")
            except onnx.defs.SchemaError:  # not an op this onnx knows
                self._cache[key] = None
        return self._cache[key]


def allowed_types(schema, type_str: str) -> Set[str]:
    for c in schema.type_constraints:
        if c.type_param_str == type_str:
            return set(c.allowed_type_strs)
    return {type_str}


def formal_param(params, i: int):
    if not params:
        return None
    if i < len(params):
        return params[i]
    last = params[-1]
    variadic = getattr(last.option, "name", "") == "Variadic" or str(last.option).endswith("Variadic")
    return last if variadic else None


def schema_lacks(schema, low: int = FLOAT16) -> bool:
    """Does a type constraint of ``schema`` allow float32 but not the ``low`` precision?"""
    want = TENSOR_STR[low]
    for c in schema.type_constraints:
        allowed = set(c.allowed_type_strs)
        if "tensor(float)" in allowed and want not in allowed:
            return True
    return False


def bf16_opset(op_type: str, after: int) -> Optional[int]:
    """The first opset past ``after`` whose schema of ``op_type`` (standard domain) accepts
    bfloat16 wherever it accepts float32; None when no opset this onnx knows does."""

    for version in range(after + 1, onnx.defs.onnx_opset_version() + 1):
        try:
            schema = onnx.defs.get_schema(op_type, version, "")
        except onnx.defs.SchemaError:
            continue
        if schema.since_version > after and not schema_lacks(schema, BFLOAT16):
            return schema.since_version
    return None


def check_types(model, what: str = "fp16") -> None:
    """ConversionFailed (exit 1, the node named) unless ONNX type inference accepts ``model``
    (checked without big weights): the input was valid, the conversion broke it."""

    try:
        _inferred(without_big_data(model), True, True, "ONNX type inference")
    except ChildDied as exc:
        raise ToolkitError(f"{exc}; the converted model was not type-checked", ExitCode.FAILED) from None
    except onnx_errors() as exc:
        msg = str(exc).strip().splitlines()
        first = msg[0] if msg else type(exc).__name__
        found = re.search(r"node name: ([^)]*)\)", first)
        node = found.group(1) if found else None
        fix = f"--keep-fp32 '{node}'" if node else "--keep-fp32 with the node it names"
        raise ConversionFailed(
            f"the {what} conversion of this model does not type-check ({first}): a limit of the conversion, not of "
            f"the model; keep that node in fp32 with {fix}",
            node=node,
        ) from None


# Inference of a model without local functions visits each node once (data propagation off): up
# to this many nodes, graphs and bodies together, it takes well under a second and runs here; a
# bigger model, or one with functions (inlined: 2^depth nodes from a few), runs in a child.
IN_PROCESS_NODES = 20000


def _inferred(model, strict: bool, check_type: bool, what: str):
    """:func:`_infer`, in a forked child where it could run long (onnx holds the GIL for the whole
    inference, so no signal would end it here)."""
    if not model.functions and sum(len(g.node) for g in iter_graphs(model.graph)) <= IN_PROCESS_NODES:
        return _infer(model, strict, check_type)
    return call_in_child(_infer, model, strict, check_type, what=what)


def _infer(model, strict: bool, check_type: bool):
    """onnx's shape inference (run in a child: see :func:`toolkit.core.process.interrupt.call_in_child`);
    with ``check_type`` only the check matters (nothing comes back)."""
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=strict, check_type=check_type, data_prop=False)
    return None if check_type else inferred


class ConversionFailed(ToolkitError):
    """The conversion of a valid model gave a model that does not type-check (exit code 1):
    ``node`` names where, when known."""

    exit_code = ExitCode.FAILED

    def __init__(self, message: str, node: Optional[str] = None):
        super().__init__(message)
        self.node = node

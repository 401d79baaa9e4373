"""Mixed precision: convert a model to fp16 (or bf16).

:func:`convert_to_fp16` writes a mixed fp16/fp32 model. The conversion itself is
onnxconverter-common's ``convert_float_to_float16`` (weights, value types, the casts
around nodes kept in fp32, If/Loop bodies); around it, this package:

- decides which nodes stay fp32 (:mod:`toolkit.convert.placement`), and keeps in fp32 every
  weight, ``Constant`` and value computed from constants that fp16 cannot hold (past 65504,
  or lost to underflow), with the nodes that read it (:mod:`toolkit.convert.ranges`);
- runs shape inference itself on a copy without the large weights (works past 2 GB;
  the library would serialize the whole model);
- converts weights itself (the library's own default clips at 1e4, which changes weights
  that fp16 holds fine, and copies every weight several times);
- repairs what the library leaves inconsistent (:mod:`toolkit.convert.repair`);
- checks the result with ONNX type inference, so a broken model is never written;
- and (:mod:`toolkit.convert.validate`) runs the result against the original on several input sets.

bfloat16: ``convert(..., dtype="bfloat16")`` does the same with bfloat16. The library only
writes fp16, so it runs as for fp16 (same placement of the fp32 nodes and Casts) on tensors
that already hold bfloat16 bits rounded once from their float32 values (:func:`to_bf16`), and
every float16 type is then made bfloat16 (:func:`_retype_bf16`) before the repair; the
automatic fp32 set asks the ONNX schemas for bfloat16 instead of float16 (``Conv`` has it
only from opset 22).

The names of the package's other modules that callers use (emulation, placement, rounding)
are importable from here too.

No Typer or Rich here.
"""

from __future__ import annotations

import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import chain
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional, Set, Tuple

import onnx
from onnx import numpy_helper

from toolkit.convert.common import (
    BF16_MAX,
    BFLOAT16,
    DOUBLE,
    FLOAT,
    FLOAT16,
    FP16_MAX,
    FP16_TINY,
    PRECISIONS,
    STD_DOMAINS,
    attr_tensors,
    bf16_values,
    copy_model,
    float16_library,
    has_fp16,
    iter_graphs,
    iter_nodes,
    low_type,
    name_nodes,
    normalize_constants,
    reduced_types,
    replace_repeated,
    retype_attribute,
    round_values,
    to_bf16,
    to_fp16,
    weight_array,
)
from toolkit.convert.emulate import Emulation, emulate, emulate_any, emulate_fp16, emulate_mixed
from toolkit.convert.onnx_types import (
    BF16_MIN_OPSET,
    bf16_opset,
    bf16_ready,
    check_types,
    infer_types,
    opset_version,
    tensor_types,
)
from toolkit.convert.placement import (
    QUANT_OPS,
    REASON_CAST_OUT,
    REASON_CONSTANT,
    REASON_DOMAIN,
    REASON_NO_KERNEL,
    REASON_ACCUMULATOR,
    REASON_QUANT,
    REASON_SCHEMA,
    REASON_SCHEMA_BF16,
    REASON_SHAPE,
    REASON_USER,
    Decision,
    automatic_keep,
    decide,
    default_block_list,
    resolve_keep,
    split_specs,
)
from toolkit.convert.ranges import REASON_RANGE, REASON_RANGE_BF16, risky_values, value_problem
from toolkit.convert.repair import Repair, drop_round_trips, sort_all, toposort
from toolkit.core.errors import LIBRARY_ERRORS, PYTHON_ERRORS, ExitCode, InputError, ToolkitError, one_line, reraise_bug
from toolkit.core.graph.constants import constant_nodes
from toolkit.core.graph.graphs import fed_inputs, refuse_damaged

# the package's public names, importable from here (this module is its entry point)
__all__ = [
    "BF16_MAX",
    "BF16_MIN_OPSET",
    "BFLOAT16",
    "FLOAT",
    "FLOAT16",
    "FP16_MAX",
    "FP16_TINY",
    "PRECISIONS",
    "REASON_CAST_OUT",
    "REASON_CONSTANT",
    "REASON_DOMAIN",
    "REASON_NO_KERNEL",
    "REASON_SCHEMA",
    "REASON_SCHEMA_BF16",
    "REASON_SHAPE",
    "REASON_USER",
    "REASON_RANGE",
    "REASON_RANGE_BF16",
    "risky_values",
    "value_problem",
    "REASON_ACCUMULATOR",
    "REASON_QUANT",
    "QUANT_OPS",
    "Conversion",
    "Decision",
    "Emulation",
    "InputError",
    "attr_tensors",
    "automatic_keep",
    "bf16_opset",
    "bf16_ready",
    "bf16_values",
    "check_types",
    "convert",
    "convert_to_fp16",
    "decide",
    "default_block_list",
    "emulate",
    "emulate_any",
    "emulate_fp16",
    "emulate_mixed",
    "has_fp16",
    "infer_types",
    "iter_graphs",
    "iter_nodes",
    "name_nodes",
    "opset_version",
    "reduced_types",
    "resolve_keep",
    "round_values",
    "split_specs",
    "tensor_types",
    "to_bf16",
    "to_fp16",
    "toposort",
]

# What onnxconverter-common raises on a graph it cannot convert: its asserts, the Python errors of
# its code and ONNX's.
CONVERTER_ERRORS = LIBRARY_ERRORS + PYTHON_ERRORS + (AssertionError, ArithmeticError, onnx.checker.ValidationError)


@dataclass
class Conversion:
    model: object
    kept: Dict[str, str]  # node name -> why it stays fp32
    clamped: List[str]  # weights with values past +-65504 (clamped to it)
    casts_added: int
    already_mixed: bool = False  # the model held float16 already: returned as it was
    upgraded_from: Optional[int] = None  # the opset a bfloat16 conversion upgraded the model from
    # values the reduced precision cannot hold, kept in fp32 with their readers: name -> why
    out_of_range: Dict[str, str] = field(default_factory=dict)


def _convert_weights(
    model, kept: Set[str], low: int = FLOAT16, arrays: Optional[Dict[str, object]] = None
) -> List[str]:
    """Convert the float32 weights no kept node reads to fp16 (:func:`to_fp16`), before the
    library runs (its own conversion makes several masked copies of every weight: 6x slower).
    Returns the names of the weights that had values past 65504.

    ``low=BFLOAT16``: the weights get :func:`to_bf16`'s bit patterns (rounded once from their
    float32 values) but stay typed FLOAT16 while the library runs (see :func:`_retype_bf16`).
    ``arrays``: weights already read (by the range check), by name: used, and dropped, instead of
    reading them again (reading a weight copies its bytes)."""
    arrays = {} if arrays is None else arrays
    clamped = []
    for t, top in _weights_to_convert(model, kept):
        if _store_rounded(t, arrays.pop(t.name, None) if top else None, low):
            clamped.append(t.name)
    return clamped


def _weights_to_convert(model, kept: Set[str]) -> Iterator[Tuple[Any, bool]]:
    """(weight, whether in the top graph) of the float32 weights that nodes read, none of them ``kept``
    (the library keeps those a kept node reads in fp32)."""
    read_by_kept = _read_by_kept(model, kept)
    for graph in iter_graphs(model.graph):
        for t in graph.initializer:
            if t.data_type == FLOAT and not read_by_kept.get(t.name, True):
                yield t, graph is model.graph


def _store_rounded(t, arr, low: int) -> bool:
    """In place: the float32 tensor ``t`` holds its values (``arr`` when read already) rounded by
    :func:`to_fp16` (:func:`to_bf16`), typed FLOAT16 while the library runs. Returns whether a value was
    clamped."""
    arr = weight_array(t) if arr is None else arr
    bits, over = to_bf16(arr) if low == BFLOAT16 else to_fp16(arr)
    del arr
    del t.float_data[:]
    t.raw_data = bits.tobytes()
    t.data_type = FLOAT16
    return over


def _read_by_kept(model, kept: Set[str]) -> Dict[str, bool]:
    """Each tensor a node reads -> whether a node of ``kept`` reads it."""
    read_by_kept: Dict[str, bool] = {}
    for node in iter_nodes(model):
        k = node.name in kept
        for i in node.input:
            if i:
                read_by_kept[i] = read_by_kept.get(i, False) or k
    return read_by_kept


def _normalize_float_data(model) -> None:
    """float_data -> raw_data (the library converts float_data element by element in Python)."""

    for graph in iter_graphs(model.graph):
        for t in graph.initializer:
            if t.data_type == FLOAT and len(t.float_data) > 64:
                arr = numpy_helper.to_array(t)
                t.raw_data = arr.astype("<f4").tobytes()
                del t.float_data[:]


def _initializers_as_weights(model) -> None:
    """Initializers also listed as graph inputs (IR version 3 and older models) -> plain weights.

    Such an input is a default a caller may override; its declared type would stay float32
    while its weight becomes fp16, a model no runtime loads. The fp16 model reads them as
    weights (IR version 4 at least, where an initializer need not be an input)."""
    for graph in iter_graphs(model.graph):
        inputs = fed_inputs(graph)
        if len(inputs) < len(graph.input):
            replace_repeated(graph.input, inputs)
            model.ir_version = max(model.ir_version, 4)


class ConverterError(ToolkitError):
    """onnxconverter-common failed on a valid model: a limit of the conversion, not bad input (exit
    code 1, the node named when the library's traceback shows it)."""

    exit_code = ExitCode.FAILED


def _failing_node(exc: BaseException, originals: Optional[Set[str]] = None):
    """The ONNX node the library was working on when it raised (the innermost frame with a local
    ``node`` that is a NodeProto), or None. ``originals``: the model's node names; a node the library
    made (a Cast it added) is not named (``--keep-fp32`` cannot select it)."""
    found = None
    tb = exc.__traceback__
    while tb is not None:
        node: object = tb.tb_frame.f_locals.get("node")
        if hasattr(node, "op_type") and hasattr(node, "input"):
            if originals is None or getattr(node, "name", None) in originals:
                found = node
        tb = tb.tb_next
    return found


def _placeholder(tensor, low: int, clamped: List[str], protected: Set[str] = frozenset()):  # type: ignore[assignment]
    """In place: a float32 tensor -> :func:`to_fp16`'s (:func:`to_bf16`'s) values, typed FLOAT16 while the
    library runs; the tensor's name is appended to ``clamped`` when a value was clamped. A weight named
    in ``protected`` stays as it is (:func:`_convert_weights` left it float32 for its kept readers)."""
    if tensor.data_type == FLOAT and tensor.name not in protected and _store_rounded(tensor, None, low):
        clamped.append(tensor.name or "(a Constant's value)")
    return tensor


def _no_prune(graph) -> None:
    """Stands in for the library's Cast-pair removal (see :func:`_library_convert`)."""


def _library_convert(
    f16, model, kept: Set[str], keep_io_types: bool, low: int, clamped: List[str], originals: Optional[Set[str]] = None
) -> None:
    """onnxconverter-common's conversion of ``model`` in place, nodes ``kept`` left in fp32.

    The tensors the library converts (``Constant`` values) are rounded by :func:`to_fp16` (or
    get bfloat16 bits rounded from their float32 values, typed FLOAT16 until
    :func:`_retype_bf16`); the names of those clamped are appended to ``clamped``.
    A failure inside the library is a :class:`ConverterError`."""
    # the weights still float32 are read by kept nodes (_convert_weights): the library would
    # convert those read only inside an If/Loop body, whose kept node would then read them rounded
    protected = {t.name for g in iter_graphs(model.graph) for t in g.initializer if t.data_type == FLOAT}
    replacements = {
        "convert_tensor_float_to_float16": lambda t, *a: _placeholder(t, low, clamped, protected),
        # the library's topological sort is quadratic (10k nodes: seconds) and ignores what
        # If/Loop bodies read; ours (below) runs instead, for the duration of the call
        "sort_topology": sort_all,
        # its last pass removes Cast pairs fp32 -> fp16 -> fp32, taking the model's own Cast(to=float) for
        # one of its own: when that Cast has several readers it fails (AttributeError), and with a graph
        # output a ValueError; drop_round_trips does that work after it, on the Casts it made only
        "remove_unnecessary_cast_node": _no_prune,
    }
    with warnings.catch_warnings(), _replaced(f16, replacements):
        warnings.simplefilter("ignore")
        try:
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
        except CONVERTER_ERRORS as exc:
            reraise_bug(exc)
            raise _converter_error(exc, _failing_node(exc, originals)) from None


@contextmanager
def _replaced(module, replacements: Mapping[str, object]) -> Iterator[None]:
    """The functions of ``module`` named in ``replacements`` (those it has) replaced while the block runs."""
    saved = {name: getattr(module, name) for name in replacements if hasattr(module, name)}
    for name in saved:
        setattr(module, name, replacements[name])
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(module, name, value)


def _converter_error(exc: BaseException, node) -> ConverterError:
    """The error of a failure inside the library, naming the node it failed at (when known) and
    how to keep it in fp32."""
    if node is None:
        at = ""
        fix = "keep the op types around the failing node in fp32 with --keep-fp32 OP (several: --keep-fp32 OP1,OP2)"
    else:
        at = f" at node {node.name} ({node.op_type})"
        fix = f"keep it in fp32 with --keep-fp32 '{node.name}' (or its op type: --keep-fp32 {node.op_type})"
    return ConverterError(
        f"the fp16 conversion failed inside onnxconverter-common{at} ({type(exc).__name__}: "
        f"{one_line(exc, first_line=True, limit=200)}): a limit of that library on this graph, not of the "
        f"model; {fix}"
    )


def _fp16_attr_tensors(model) -> Set[Tuple[str, str, int]]:
    """Attribute tensors already float16 in the original model (they stay float16)."""
    return {(n.name, name, k) for n in iter_nodes(model) for name, k, t in attr_tensors(n) if t.data_type == FLOAT16}


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
        for vi in chain(graph.input, graph.output, graph.value_info):
            if vi.type.tensor_type.elem_type == FLOAT16:  # (reading tensor_type sets no field)
                vi.type.tensor_type.elem_type = BFLOAT16
        for node in graph.node:
            _retype_node_bf16(node, original_fp16)


def _retype_node_bf16(node, original_fp16: Set[Tuple[str, str, int]]) -> None:
    """A standard Cast to FLOAT16 casts to BFLOAT16; FLOAT16 attribute tensors not in ``original_fp16`` become BFLOAT16."""
    if node.op_type == "Cast" and node.domain in STD_DOMAINS:
        retype_attribute(node, "to", FLOAT16, BFLOAT16)
    for name, k, t in attr_tensors(node):
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
    check_data: bool = True,
) -> Conversion:
    """Convert a float32 model to mixed fp16 (see the module docstring); returns the details.

    ``dtype="bfloat16"``: mixed bfloat16 instead, by the same conversion (same placement of
    the nodes kept in fp32 and of the Casts, decided with bfloat16's ONNX schemas), with
    every weight rounded once from its float32 value to bfloat16 (no fp16 clamping);
    ``clamped`` then lists weights past bfloat16's range (3.39e38).

    A model that already holds float16 or bfloat16 (mixed precision, e.g. written by this
    function) is not converted again: that would turn its deliberate float32 nodes into
    reduced precision. With ``if_mixed="keep"`` it is returned as it is (``already_mixed``);
    with ``"error"`` that is an InputError. So is a damaged model (a tensor whose data does not fill
    its dims, of any type), before any work; ``check_data=False`` leaves that out, for a caller that
    converts one model many times and checked it once (reading every weight again copies it).
    """
    low = low_type(dtype)
    short = PRECISIONS["bfloat16" if low == BFLOAT16 else "float16"][1]
    if check_data:
        refuse_damaged(model, "converted")
    held = reduced_types(model)
    if held:
        return _already_mixed(model, held, if_mixed == "error" or bool(keep_fp32), short, inplace)
    f16 = float16_library()
    model, upgraded_from = _working_copy(model, low, inplace)
    inferred = infer_types(model)
    types = tensor_types(inferred)
    arrays: Dict[str, object] = {}
    risky = risky_values(model, types, low, arrays) if auto_keep else {}
    decision = decide(model, keep_fp32, auto=auto_keep, types=types, dtype=dtype, risky=risky)
    # the library needs value types in value_info: take them from the light copy
    _copy_value_info(inferred, model)
    del inferred
    kept = set(decision.kept)
    clamped = _convert_weights(model, kept, low, arrays)
    arrays.clear()
    casts_added = _convert_nodes(f16, model, kept, keep_io_types, low, clamped, types)
    if validate:
        check_types(model, short)
    return Conversion(
        model, dict(decision.kept), clamped, casts_added, upgraded_from=upgraded_from, out_of_range=risky
    )


def _already_mixed(model, held: Set[str], refuse: bool, short: str, inplace: bool) -> Conversion:
    """The result for a model that holds the reduced precisions ``held`` already: itself (a copy unless
    ``inplace``), or an InputError when ``refuse``."""
    if refuse:
        names = " and ".join(sorted(held))
        raise InputError(
            f"the model already holds {names} tensors (mixed precision); converting it again would turn its "
            f"float32 nodes to {short}: convert the float32 original (with --keep-fp32 for the nodes to keep)"
        )
    return Conversion(copy_model(model, inplace), {}, [], 0, already_mixed=True)


def _working_copy(model, low: int, inplace: bool):
    """(the model to convert: a copy unless ``inplace``, upgraded to bf16's opset for bfloat16 and
    normalized; the opset it was upgraded from, or None)."""
    upgraded_from = None
    if low == BFLOAT16:
        model, upgraded_from = bf16_ready(model)
    model = copy_model(model, inplace or upgraded_from is not None)
    normalize_constants(model)
    _normalize_float_data(model)
    _initializers_as_weights(model)
    return model, upgraded_from


def _convert_nodes(f16, model, kept: Set[str], keep_io_types: bool, low: int, clamped: List[str], types) -> int:
    """The library's conversion of the nodes not ``kept`` (weights converted already), then the
    repair of its types and Casts; returns the number of Casts the repair added."""
    original_fp16 = _fp16_attr_tensors(model) if low == BFLOAT16 else set()
    originals = {n.name for n in iter_nodes(model)}
    hidden = _hide_kept_outputs(model, kept) if keep_io_types else set()
    _name_constant_values(model)
    _library_convert(f16, model, kept, keep_io_types, low, clamped, originals)
    sort_all(model.graph)
    if low == BFLOAT16:
        _retype_bf16(model, original_fp16)
    _show_kept_outputs(model, hidden)
    repair = Repair(model, types, kept, originals, keep_io_types, low)
    repair.run()
    drop_round_trips(model, originals, repair.types)
    repair.write_value_info()
    return repair.casts_added


def _name_constant_values(model) -> None:
    """Unnamed ``Constant`` value tensors get their node's output name (so a clamped one is named)."""
    for graph in iter_graphs(model.graph):
        for node, tensor in constant_nodes(graph):
            if not tensor.name:
                tensor.name = node.output[0]


def _hide_kept_outputs(model, kept: Set[str]) -> Set[str]:
    """float32 graph outputs produced by kept nodes, typed DOUBLE while the library runs (it would wrap
    them in a Cast16/Cast32 pair and then fail on it); the repair keeps them fp32. Returns their names."""
    producers = {o: n.name for n in model.graph.node for o in n.output}
    hidden = set()
    for vi in model.graph.output:
        if producers.get(vi.name) in kept and vi.type.tensor_type.elem_type == FLOAT:
            vi.type.tensor_type.elem_type = DOUBLE
            hidden.add(vi.name)
    return hidden


def _show_kept_outputs(model, hidden: Set[str]) -> None:
    """The graph outputs :func:`_hide_kept_outputs` typed DOUBLE (``hidden``) are FLOAT again."""
    for vi in model.graph.output:
        if vi.name in hidden:
            vi.type.tensor_type.elem_type = FLOAT


def convert_to_fp16(model, keep_fp32: Iterable[str] = (), keep_io_types: bool = True, **kw):
    """Mixed-precision copy of ``model`` (an onnx ModelProto): fp16 where safe, fp32 kept for
    ``keep_fp32`` (node names, glob patterns over node names, op types) and for nodes that
    need it (see :func:`automatic_keep`). Graph inputs/outputs keep their types unless
    ``keep_io_types=False``. Raises InputError when a ``keep_fp32`` word selects no node.
    A model that already holds float16 comes back unchanged (see :func:`convert`).
    """
    return convert(model, keep_fp32, keep_io_types=keep_io_types, **kw).model


def _copy_value_info(src, dst) -> None:
    """value_info of every graph of ``src`` into the matching graph of ``dst`` (same structure)."""
    for gs, gd in zip(iter_graphs(src.graph), iter_graphs(dst.graph)):
        del gd.value_info[:]
        gd.value_info.extend(gs.value_info)

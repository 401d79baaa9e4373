"""onnx-graphsurgeon plumbing shared by extract, fold and optimize: importing it quietly,
exporting a graph with the input model's fields, node counts, tensor walks."""

from __future__ import annotations

import contextlib
import difflib
import io
from typing import Callable, Iterable, Optional, Sequence

import onnx
from onnx import ValueInfoProto, helper

from toolkit.core.contain import optional
from toolkit.core.errors import (
    PYTHON_ERRORS,
    DependencyError,
    InputError,
    ToolkitError,
    UsageError,
    one_line,
    ort_errors,
    reraise_bug,
)
from toolkit.core.graph.graphs import walk_graphs
from toolkit.core.meta import TensorMeta, dtype_to_numpy, dtype_to_onnx
from toolkit.core.io.model import infer_shapes
from toolkit.core.shapes import STUB_BYTES, STUB_LOCATION, light_copy
from toolkit.surgeon.fold_noops import bodies

LogFn = Callable[[str], None]


def nolog(_msg: str) -> None:
    pass


@contextlib.contextmanager
def quiet_gs():
    """onnx-graphsurgeon prints its log with print(); keep it off our stdout (``-o -``)."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        yield buf


def symbolic_shape_inference(model):
    """``model`` (weights shared as stubs) through ONNX-Runtime's symbolic shape inference, which
    follows dims through ops ONNX's own inference does not; None where it cannot run (sympy is
    optional, opset below 7), fails, or leaves shapes unknown. Callers use it only to refine
    shapes they already have.

    Its ``infer_shapes`` saves ``sym_shape_infer_temp.onnx`` and a data file into the current
    folder when shapes stay unknown: that loop is run here instead, writing nothing."""
    try:
        import sympy  # noqa: F401  (symbolic inference needs it; optional)
        from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference, get_opset
    except ImportError:
        return None
    with quiet_ort(), contextlib.redirect_stdout(io.StringIO()):
        copy = light_copy(model)
        opset = get_opset(copy)
        if not opset or opset < 7:
            return None
        # (pure-Python inference over sympy fails in any way on ops it does not know: a refinement only)
        return optional(_symbolic, SymbolicShapeInference(2**31 - 1, True, False, 0), copy)


def _symbolic(sym, model):
    """ONNX-Runtime's symbolic shape inference loop over ``model``: the model, or None where shapes
    stay unknown."""
    sym._preprocess(model)
    complete = False
    while sym.run_:
        complete = sym._infer_impl()
    sym._update_output_from_vi()
    return sym.out_mp_ if complete else None


@contextlib.contextmanager
def quiet_ort():
    """ONNX-Runtime sessions made by graphsurgeon's folding log optimizer warnings; hide them.

    Those sessions (graphsurgeon passes no options) also run on one thread that does not spin,
    without graph optimizations: a folding run executes each constant node once, so ONNX-Runtime
    folding the same constants while it builds the session is the work done twice, and spinning
    threads take the CPU from the validation running beside folding."""
    try:
        import onnxruntime as ort
    except ImportError:  # folding then fails and says so
        yield
        return
    ort.set_default_logger_severity(4)
    plain = ort.InferenceSession
    ort.InferenceSession = _with_folding_options(plain, ort)
    try:
        yield
    finally:
        ort.InferenceSession = plain
        ort.set_default_logger_severity(2)  # ONNX-Runtime's default (warnings)


def _with_folding_options(plain, ort):
    """``plain`` (InferenceSession), with folding's session options where the caller gives none."""
    def session(model, sess_options=None, *args, **kwargs):
        if sess_options is None:
            sess_options = ort.SessionOptions()
            sess_options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
            sess_options.intra_op_num_threads = 1
            sess_options.inter_op_num_threads = 1
            sess_options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        return plain(model, sess_options, *args, **kwargs)

    return session


def import_gs():
    try:
        import onnx_graphsurgeon as gs
    except ImportError:  # pragma: no cover - a declared dependency

        raise DependencyError("onnx-graphsurgeon is needed for surgery; pip install onnx-graphsurgeon") from None
    gs.logger.G_LOGGER.severity = gs.logger.G_LOGGER.WARNING
    return gs


def restore_model_fields(new, original) -> None:
    """Keep what export would lose or change: IR version, opsets, producer, metadata."""
    new.ir_version = original.ir_version
    del new.opset_import[:]
    new.opset_import.extend(original.opset_import)
    new.producer_name = original.producer_name
    new.producer_version = original.producer_version
    new.domain = original.domain
    new.model_version = original.model_version
    new.doc_string = original.doc_string
    del new.metadata_props[:]
    new.metadata_props.extend(original.metadata_props)
    if new.ir_version < 4:
        _list_initializers_as_inputs(new.graph)


def _list_initializers_as_inputs(graph) -> None:
    """List every initializer of ``graph`` as a graph input too, as IR versions before 4 require."""
    have = {i.name for i in graph.input}
    for t in graph.initializer:
        if t.name not in have:
            graph.input.append(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))


def _constant_nbytes(tensor) -> int:
    nbytes = getattr(tensor._values, "nbytes", None)  # numpy arrays and graphsurgeon's LazyValues
    return int(nbytes) if nbytes is not None else 0


@contextlib.contextmanager
def stubbed_constants(graph, limit: int):
    """While active, onnx-graphsurgeon exports the top graph's Constants over ``limit``
    bytes as shape-only stubs (dims and type, no data). Yields {name: Constant} of those.

    Exporting a big constant copies its bytes four times (tobytes, make_tensor, the
    graph's initializer list, the model's graph); shape inference needs none of them."""
    from onnx_graphsurgeon.exporters import onnx_exporter  # sanitize without folding loads no graphsurgeon

    stubbed = _big_constants(graph, limit)
    exporter = onnx_exporter.OnnxExporter
    original = exporter.__dict__["export_tensor_proto"]

    def export_tensor_proto(tensor):
        if id(tensor) not in stubbed:
            return original.__func__(tensor)
        return _stub(tensor, onnx_exporter)

    exporter.export_tensor_proto = staticmethod(export_tensor_proto)
    try:
        yield {t.name: t for t in stubbed.values()}
    finally:
        exporter.export_tensor_proto = original


def _big_constants(graph, limit: int) -> dict:
    """{id: Constant} of the dense constants of the gs ``graph`` (top level) over ``limit`` bytes."""
    from onnx_graphsurgeon.ir.tensor import Constant, SparseValues

    return {id(t): t for t in graph.tensors().values()
            if isinstance(t, Constant) and not isinstance(t._values, SparseValues) and _constant_nbytes(t) > limit}


def _stub(tensor, onnx_exporter):
    """A TensorProto of gs Constant ``tensor``'s name, type and dims whose data is the stub location."""
    stub = onnx.TensorProto()
    stub.name = tensor.name
    lazy = getattr(tensor._values, "tensor", None)
    if lazy is not None:
        stub.data_type = lazy.data_type
        stub.dims.extend(lazy.dims)
    else:
        stub.data_type = onnx_exporter.dtype_to_onnx(tensor.export_dtype)
        stub.dims.extend(int(d) for d in tensor.shape)
    stub.data_location = onnx.TensorProto.EXTERNAL
    entry = stub.external_data.add()
    entry.key = "location"
    entry.value = STUB_LOCATION
    return stub


def fill_stubs(model, constants) -> None:
    """Give the stubs that :func:`stubbed_constants` exported their data (one copy each)."""
    from onnx_graphsurgeon.exporters import onnx_exporter

    for t in model.graph.initializer:
        if t.external_data and t.external_data[0].value == STUB_LOCATION:
            _fill_stub(t, constants[t.name], onnx_exporter)


def _fill_stub(t, tensor, onnx_exporter) -> None:
    """Stub initializer ``t`` takes the data of graphsurgeon Constant ``tensor``: its TensorProto
    where it was loaded lazily from one, else its values."""
    lazy = getattr(tensor._values, "tensor", None)
    if lazy is not None:
        t.CopyFrom(lazy)
        t.name = tensor.name
        return
    if tensor.dtype != tensor.export_dtype:
        t.CopyFrom(onnx_exporter.constant_to_onnx_tensor(tensor))
    else:
        del t.external_data[:]
        t.ClearField("data_location")
        t.raw_data = tensor.values.tobytes()
    if tensor.data_location is not None:
        t.data_location = tensor.data_location


def export_graph(gs, graph, original):
    with quiet_gs(), stubbed_constants(graph, STUB_BYTES) as big:
        model = gs.export_onnx(graph, do_type_check=False)
    fill_stubs(model, big)
    restore_model_fields(model, original)
    return model


def count_nodes(graph) -> int:
    """Nodes of a gs graph including those inside subgraphs (If/Loop/Scan bodies)."""
    n = len(graph.nodes)
    for node in graph.nodes:
        for sub in bodies(node):
            n += count_nodes(sub)
    return n


def has_graph_attributes(graph) -> bool:
    """A node of ``graph``'s top level has a graph attribute (an If branch, a Loop/Scan body...)."""
    kinds = (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
    return any(attr.type in kinds for n in graph.node for attr in n.attribute)


def count_model_nodes(model) -> int:
    """Nodes of an ONNX model including those inside subgraphs."""

    def count(g) -> int:
        n = len(g.node)
        for node in g.node:
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.GRAPH:
                    n += count(attr.g)
                elif attr.type == onnx.AttributeProto.GRAPHS:
                    n += sum(count(s) for s in attr.graphs)
        return n

    return count(model.graph)


def graphsurgeon_errors() -> tuple:
    """What onnx-graphsurgeon raises on a model it cannot take: its own exception, the asserts
    and Python errors of its code (an UnboundLocalError on some graphs, PYTHON_ERRORS: catch them
    with :func:`~toolkit.core.errors.reraise_bug` first), and what ONNX and ONNX-Runtime (it folds
    with them) raise."""
    from onnx_graphsurgeon.util.exception import OnnxGraphSurgeonException

    onnx_own = (onnx.checker.ValidationError, onnx.shape_inference.InferenceError)
    return (OnnxGraphSurgeonException, AssertionError, ArithmeticError, NameError) + onnx_own + ort_errors() + PYTHON_ERRORS


class GraphSurgeonError(InputError):
    """onnx-graphsurgeon failed on the model (exit 3, as bad input)."""


@contextlib.contextmanager
def gs_step(what: str):
    """onnx-graphsurgeon fails on some malformed models in ways the checks above do not
    foresee; say so in one line (GraphSurgeonError, exit 3) instead of as an unexpected exception."""
    try:
        yield
    except (ToolkitError, MemoryError):
        raise
    except graphsurgeon_errors() as exc:
        reraise_bug(exc)
        raise GraphSurgeonError(
            f"onnx-graphsurgeon cannot {what} this model ({one_line(exc, first_line=True, limit=300)}); the model may be malformed "
            "(onnx.checker.check_model tells what is wrong)"
        ) from None


def all_tensors(graph) -> dict:
    """{name: tensor} of a gs graph, including outer tensors only If/Loop/Scan bodies use."""
    tensors: dict = {}
    for node in all_nodes(graph):
        for t in list(node.inputs) + list(node.outputs):
            tensors.setdefault(t.name, t)
    tensors.update(graph.tensors())
    return tensors


def model_shell(model):
    """A ModelProto with the model-level fields only (no graph), to restore after export."""

    shell = onnx.ModelProto()
    restore_model_fields(shell, model)
    return shell


def np_dtype(name: Optional[str]):
    if name is None:
        return None

    try:
        return dtype_to_numpy(name)
    except UsageError:
        return None


def all_nodes(graph):
    for node in graph.nodes:
        yield node
        for sub in bodies(node):
            yield from all_nodes(sub)


def initializer_named(graph, name: str):
    """The initializer ``name`` of ONNX ``graph``, or None."""
    return next((t for t in graph.initializer if t.name == name), None)


def copied(message):
    copy = type(message)()
    copy.CopyFrom(message)
    return copy


def tensor_value_info(name: str, meta: Optional[TensorMeta]):
    if meta is None or not meta.dtype or meta.dtype.endswith("_type"):
        vi = ValueInfoProto()
        vi.name = name
        return vi
    shape = None if meta.shape is None else [d if d is not None else "" for d in meta.shape]
    vi = helper.make_tensor_value_info(name, dtype_to_onnx(meta.dtype), shape)
    return vi


def check_known(names: Iterable[str], known: Sequence[str], what: str) -> None:
    """InputError (naming the closest of ``known``) for the first of ``names`` that is none of them."""
    known_set = set(known)
    for name in names:
        if name not in known_set:
            raise unknown_name_error(name, known, what)


def unknown_name_error(name: str, known: Sequence[str], what: str) -> InputError:
    close = difflib.get_close_matches(name, known, n=3)
    hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else "; `toolkit inspect model` lists tensor names"
    return InputError(f"{what} '{name}' is not a tensor of the model's top graph{hint}")


_NON_TENSOR = ("sequence_type", "map_type", "optional_type", "sparse_tensor_type")


def non_tensor_types(model) -> dict:
    """{name: TypeProto} of every value of ``model`` (any graph) whose type is not a plain tensor:
    sequences, maps, optionals, sparse tensors. onnx-graphsurgeon exports those as tensors of no
    element type (a model ONNX-Runtime refuses); :func:`keep_non_tensor_types` puts them back."""
    types: dict = {}
    for g in walk_graphs(model.graph):
        for vi in list(g.input) + list(g.output) + list(g.value_info):
            if vi.type.WhichOneof("value") in _NON_TENSOR:
                types.setdefault(vi.name, vi.type)
    return types


def _undefined(type_proto) -> bool:
    """No type, or a tensor of no element type anywhere inside (``seq(tensor(undefined))``)."""
    kind = type_proto.WhichOneof("value")
    if kind is None:
        return True
    if kind == "tensor_type":
        return type_proto.tensor_type.elem_type == 0
    if kind in _INNER_TYPE:
        return _undefined(getattr(getattr(type_proto, kind), _INNER_TYPE[kind]))
    return False


# TypeProto kind -> the field holding the type it contains
_INNER_TYPE = {"sequence_type": "elem_type", "optional_type": "elem_type", "map_type": "value_type"}


def keep_non_tensor_types(result, types: dict) -> None:
    """Give the values of ``result`` named in ``types`` (from :func:`non_tensor_types` of the
    model it came from) their type again, in every graph (in place): rewrites change no
    sequence or map. value_info entries left with no type at all are dropped (they say nothing,
    and ONNX-Runtime refuses them)."""
    for g in walk_graphs(result.graph):
        for vi in list(g.input) + list(g.output) + list(g.value_info):
            if vi.name in types and vi.type != types[vi.name]:  # graphsurgeon keeps no more than seq(tensor)
                vi.type.CopyFrom(types[vi.name])
        _drop_untyped_value_info(g)


def _drop_untyped_value_info(g) -> None:
    """Remove the value_info entries of graph ``g`` that have no type (see :func:`_undefined`)."""
    kept = [vi for vi in g.value_info if not _undefined(vi.type)]
    if len(kept) != len(g.value_info):
        del g.value_info[:]
        g.value_info.extend(kept)


def is_non_tensor(meta) -> bool:
    """``meta`` (a TensorMeta or None) describes a sequence, map or optional value."""
    return meta is not None and bool(meta.dtype) and meta.dtype.endswith("_type")


def has_tensor_dtype(meta) -> bool:
    """``meta`` (a TensorMeta or None) describes a tensor whose dtype is known."""
    return meta is not None and bool(meta.dtype) and not meta.dtype.endswith("_type")


def non_tensor_value_types(model, names: Sequence[str]) -> dict:
    """{name: TypeProto} for the sequence/map values ``names``: as the model states them, else as
    ONNX shape inference finds them (graph inputs and outputs need a type)."""
    if not names:
        return {}
    types = non_tensor_types(model)
    if any(n not in types for n in names):
        types = {**non_tensor_types(infer_shapes(light_copy(model))), **types}
    return {n: types[n] for n in names if n in types}

"""Graph surgery on onnx-graphsurgeon: cut subgraphs out (extract) and simplify (sanitize).

- :func:`extract` cuts the subgraph between given tensors, giving its new inputs and
  outputs shapes and dtypes by shape inference (with an ONNX-Runtime fallback), and
  refuses cuts that would leave a needed tensor without producer.
- :func:`sanitize` folds constants (repeating until nothing changes, one failing node
  not stopping the rest), freezes input shapes, cleans up and sorts the graph.

Models are changed in place where that saves copies; callers pass a model they own.
The input model's IR version, opset imports and metadata are kept on export. No Typer
or Rich here: progress goes through the ``log`` callback.
"""

from __future__ import annotations

import contextlib
import io
import re
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

from toolkit.core.errors import InputError, UsageError, one_line
from toolkit.surgeon.fold_noops import bodies, constant_reshape_targets, eliminate_noops
from toolkit.core.graphs import damaged_tensor, fresh_name, has_external_data, node_subgraphs, walk_graphs
from toolkit.core.meta import TensorMeta, format_meta, format_spec_shape, parse_size  # noqa: F401  (parse_size: re-exported)
from toolkit.core.shapes import (
    infer_tensor_meta,
    is_complete,
    light_copy,
    node_reads,
    override_input_shapes,
    top_tensor_names,
)

LogFn = Callable[[str], None]

PARTITIONING_MODES = ("auto", "none", "basic", "recursive")


def check_sanitize_options(partitioning: str = "auto", num_passes: Optional[int] = None) -> None:
    """UsageError for a ``sanitize`` option value that cannot work (checked before any work)."""
    if partitioning not in PARTITIONING_MODES:
        raise UsageError(f"--partitioning must be one of {', '.join(PARTITIONING_MODES)}, not '{partitioning}'")
    if num_passes is not None and num_passes < 1:
        raise UsageError("--num-passes must be at least 1")


def _nolog(_msg: str) -> None:
    pass


@contextlib.contextmanager
def _quiet_gs():
    """onnx-graphsurgeon prints its log with print(); keep it off our stdout (``-o -``)."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        yield buf


@contextlib.contextmanager
def _quiet_ort():
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


def _import_gs():
    try:
        import onnx_graphsurgeon as gs
    except ImportError:  # pragma: no cover - a declared dependency
        from toolkit.core.errors import DependencyError

        raise DependencyError("onnx-graphsurgeon is needed for surgery; pip install onnx-graphsurgeon") from None
    gs.logger.G_LOGGER.severity = gs.logger.G_LOGGER.WARNING
    return gs


def _restore_model_fields(new, original) -> None:
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
        # Before IR 4 every initializer must also be listed as a graph input.
        from onnx import helper

        have = {i.name for i in new.graph.input}
        for t in new.graph.initializer:
            if t.name not in have:
                new.graph.input.append(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))


def _constant_nbytes(tensor) -> int:
    nbytes = getattr(tensor._values, "nbytes", None)  # numpy arrays and graphsurgeon's LazyValues
    return int(nbytes) if nbytes is not None else 0


@contextlib.contextmanager
def _stubbed_constants(graph, limit: int):
    """While active, onnx-graphsurgeon exports the top graph's Constants over ``limit``
    bytes as shape-only stubs (dims and type, no data). Yields {name: Constant} of those.

    Exporting a big constant copies its bytes four times (tobytes, make_tensor, the
    graph's initializer list, the model's graph); shape inference needs none of them."""
    import onnx
    from onnx_graphsurgeon.exporters import onnx_exporter
    from onnx_graphsurgeon.ir.tensor import Constant, SparseValues

    from toolkit.core.shapes import _STUB_LOCATION

    stubbed = {}
    for tensor in graph.tensors().values():
        if (isinstance(tensor, Constant) and not isinstance(tensor._values, SparseValues)
                and _constant_nbytes(tensor) > limit):
            stubbed[id(tensor)] = tensor
    exporter = onnx_exporter.OnnxExporter
    original = exporter.__dict__["export_tensor_proto"]

    def export_tensor_proto(tensor):
        if id(tensor) not in stubbed:
            return original.__func__(tensor)
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
        entry.value = _STUB_LOCATION
        return stub

    exporter.export_tensor_proto = staticmethod(export_tensor_proto)
    try:
        yield {t.name: t for t in stubbed.values()}
    finally:
        exporter.export_tensor_proto = original


def _fill_stubs(model, constants) -> None:
    """Give the stubs that :func:`_stubbed_constants` exported their data (one copy each)."""
    from onnx_graphsurgeon.exporters import onnx_exporter

    from toolkit.core.shapes import _STUB_LOCATION

    for t in model.graph.initializer:
        if not (t.external_data and t.external_data[0].value == _STUB_LOCATION):
            continue
        tensor = constants[t.name]
        lazy = getattr(tensor._values, "tensor", None)
        if lazy is not None:
            t.CopyFrom(lazy)
            t.name = tensor.name
            continue
        if tensor.dtype != tensor.export_dtype:
            t.CopyFrom(onnx_exporter.constant_to_onnx_tensor(tensor))
        else:
            del t.external_data[:]
            t.ClearField("data_location")
            t.raw_data = tensor.values.tobytes()
        if tensor.data_location is not None:
            t.data_location = tensor.data_location


def _export(gs, graph, original):
    from toolkit.core.shapes import _STUB_BYTES

    with _quiet_gs(), _stubbed_constants(graph, _STUB_BYTES) as big:
        model = gs.export_onnx(graph, do_type_check=False)
    _fill_stubs(model, big)
    _restore_model_fields(model, original)
    return model


def count_nodes(graph) -> int:
    """Nodes of a gs graph including those inside subgraphs (If/Loop/Scan bodies)."""
    n = len(graph.nodes)
    for node in graph.nodes:
        for sub in bodies(node):
            n += count_nodes(sub)
    return n


def count_model_nodes(model) -> int:
    """Nodes of an ONNX model including those inside subgraphs."""
    import onnx

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


def check_model(model, original=None) -> None:
    """Run onnx.checker on ``model``; raise InputError if it fails where ``original`` passes."""
    import onnx

    from toolkit.core.model import PROTOBUF_LIMIT

    if model.ByteSize() > PROTOBUF_LIMIT:
        return  # the checker needs a path for such models; skip rather than copy gigabytes

    def fails(m) -> Optional[str]:
        try:
            onnx.checker.check_model(m)
        except Exception as exc:  # onnx raises ValidationError and friends
            return one_line(exc, first_line=True)
        return None

    err = fails(model)
    if err is None:
        return
    if original is not None and original.ByteSize() <= PROTOBUF_LIMIT and fails(original) is not None:
        return  # the input model already fails the checker the same way; not our doing
    raise InputError(f"the resulting model fails onnx.checker ({err}); nothing was written")


# ---------------------------------------------------------------------- loading weights lazily

# External tensors up to this size are loaded at once (shape tensors and the like, which
# shape inference and folding may read); bigger ones only when something needs them.
EAGER_EXTERNAL_BYTES = 1 << 20
_SHAPE_OPS = {"Shape", "Size"}


def load_for_surgery(
    path: str, external_data_dir: Optional[str] = None, *, fold_constants: bool = False, files: Optional[list] = None
):
    """Load a model for extract/sanitize without reading weights that may not be needed.

    Returns ``(model, base_dir)``. Big external weights stay references into their files
    in ``base_dir`` (None when the model has none): those that constant folding reads are
    loaded now, the rest are copied when the result is saved, and only if the result
    keeps them (:func:`toolkit.core.model.save_model` with ``external_base_dir``). A
    missing external file is an InputError at once, before any work. ``files``, if given,
    receives the paths of the model's external data files.
    """
    from toolkit.core.weights import load_lazily

    needed = _initializers_read_by_constant_nodes if fold_constants else None
    return load_lazily(path, external_data_dir, needed=needed, eager_bytes=EAGER_EXTERNAL_BYTES, files=files)


def _initializers_read_by_constant_nodes(graph) -> set:
    """Initializers that folding may compute with: inputs of nodes whose every input is
    constant (initializers, constant outputs, and Shape/Size results, which folding
    turns into constants when shapes are known). An over-estimate is harmless."""
    inits = {t.name for t in graph.initializer}
    const = set(inits)
    folded = [False] * len(graph.node)
    changed = True
    while changed:
        changed = False
        for i, node in enumerate(graph.node):
            if folded[i]:
                continue
            reads = node_reads(node)
            if node.op_type in _SHAPE_OPS or all(r in const for r in reads):
                folded[i] = True
                changed = True
                const.update(o for o in node.output if o)
    needed: set = set()
    for i, node in enumerate(graph.node):
        if folded[i] and node.op_type not in _SHAPE_OPS:
            needed.update(r for r in node_reads(node) if r in inits)
    return needed


# ---------------------------------------------------------------------- malformed models


def check_structure(model) -> None:
    """Raise InputError for what graphsurgeon cannot import or sort: unknown element types,
    a tensor defined twice, a cycle. Cheap (no weights read); the message names the tensor."""
    import onnx

    valid = set(onnx.TensorProto.DataType.values())
    for g in walk_graphs(model.graph):
        for t in g.initializer:
            if t.data_type not in valid or t.data_type == onnx.TensorProto.UNDEFINED:
                raise InputError(f"initializer '{t.name}' has an invalid data type ({t.data_type}); the model is corrupt")
        for vi in list(g.input) + list(g.output) + list(g.value_info):
            if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type not in valid:
                raise InputError(
                    f"tensor '{vi.name}' has an invalid element type ({vi.type.tensor_type.elem_type}); the model is corrupt"
                )
        inits = {t.name for t in g.initializer}
        producer: Dict[str, str] = {}
        for name in [i.name for i in g.input if i.name not in inits] + list(inits):
            producer.setdefault(name, "a graph input or initializer")
        for node in g.node:
            for name in node.output:
                if not name:
                    continue
                if name in producer:
                    raise InputError(
                        f"tensor '{name}' is defined twice (by {producer[name]} and by node '{node.name}' "
                        f"({node.op_type})); tensor names in a graph must be unique"
                    )
                producer[name] = f"node '{node.name}' ({node.op_type})"
    _check_acyclic(model.graph)


def _check_acyclic(g) -> None:
    """Kahn's algorithm on the top graph: every node must be reachable in some order."""
    produced_by: Dict[str, int] = {}
    for i, node in enumerate(g.node):
        for name in node.output:
            if name:
                produced_by[name] = i
    waiting = []
    readers: Dict[int, List[int]] = {}
    for i, node in enumerate(g.node):
        deps = {produced_by[n] for n in node_reads(node) if n in produced_by}
        waiting.append(len(deps))
        for dep in deps:
            readers.setdefault(dep, []).append(i)
    ready = [i for i, w in enumerate(waiting) if w == 0]
    done = 0
    while ready:
        i = ready.pop()
        done += 1
        for r in readers.get(i, ()):
            waiting[r] -= 1
            if waiting[r] == 0:
                ready.append(r)
    if done < len(g.node):
        stuck = next(g.node[i] for i, w in enumerate(waiting) if w > 0)
        raise InputError(
            f"the graph has a cycle: node '{stuck.name}' ({stuck.op_type}) depends, directly or not, on its own output; "
            "the model is corrupt"
        )


@contextlib.contextmanager
def _gs_step(what: str):
    """onnx-graphsurgeon fails on some malformed models in ways the checks above do not
    foresee; say so in one line (exit 3) instead of as an unexpected exception."""
    from toolkit.core.errors import ToolkitError

    try:
        yield
    except (ToolkitError, MemoryError):
        raise
    except Exception as exc:  # graphsurgeon raises its own exception, KeyError, ValueError...
        raise InputError(
            f"onnx-graphsurgeon cannot {what} this model ({one_line(exc, first_line=True, limit=300)}); the model may be malformed "
            "(onnx.checker.check_model tells what is wrong)"
        ) from None


# ---------------------------------------------------------------------- extract


def _unknown_name_error(name: str, known: Sequence[str], what: str) -> InputError:
    import difflib

    close = difflib.get_close_matches(name, known, n=3)
    hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else "; `toolkit inspect model` lists tensor names"
    return InputError(f"{what} '{name}' is not a tensor of the model's top graph{hint}")


def dangling_tensors(model) -> List[tuple]:
    """[(tensor, node name, op)] for tensors that nodes read but nothing defines.

    Defined are graph inputs, initializers and node outputs (topological order is not
    required). Reads include what If/Loop/Scan bodies read from the outer graph.
    """
    g = model.graph
    defined = {i.name for i in g.input} | {t.name for t in g.initializer}
    defined |= {t.values.name for t in g.sparse_initializer}
    for node in g.node:
        defined.update(o for o in node.output if o)
    out = []
    seen = set()
    for node in g.node:
        for name in node_reads(node):
            if name not in defined and name not in seen:
                seen.add(name)
                out.append((name, node.name, node.op_type))
    for o in g.output:
        if o.name not in defined and o.name not in seen:
            seen.add(o.name)
            out.append((o.name, "", "graph output"))
    return out


def _check_cut_names(model, inputs, outputs) -> None:
    """InputError for a cut naming no tensor of the model, or an initializer as an input."""
    known = top_tensor_names(model)
    known_set = set(known)
    inits = {t.name for t in model.graph.initializer}
    for spec in list(inputs or []) + list(outputs or []):
        if spec.name not in known_set:
            what = "input" if inputs and spec in inputs else "output"
            raise _unknown_name_error(spec.name, known, what)
    for spec in inputs or []:
        if spec.name in inits:
            raise InputError(
                f"'{spec.name}' is a constant (initializer) of the model and cannot be a subgraph input; "
                "cut at a tensor that a node computes"
            )


def _set_cut(gs, graph, model, in_specs, out_specs, metas: Dict[str, TensorMeta]) -> None:
    """Make the cut's tensors the graphsurgeon ``graph``'s inputs and outputs, with their metadata."""
    tensors = _all_tensors(graph)
    if in_specs is not None:
        new_inputs = []
        for spec in in_specs:
            t = tensors[spec.name]
            meta = metas[spec.name]
            if isinstance(t, gs.Constant):
                raise InputError(
                    f"'{spec.name}' is a constant of the model and cannot be a subgraph input; "
                    "cut at a tensor that a node computes"
                )
            t.inputs.clear()
            t.shape = list(meta.shape) if meta.shape is not None else None
            t.dtype = _np_dtype(meta.dtype)
            new_inputs.append(t)
        graph.inputs = new_inputs
    if out_specs is not None:
        new_outputs = []
        for spec in out_specs:
            t = tensors.get(spec.name)
            if t is None:  # an initializer that nothing reads: not in graphsurgeon's graph
                t = _import_unused_initializer(model, spec.name)
            meta = metas[spec.name]
            if not isinstance(t, gs.Constant):
                t.dtype = _np_dtype(meta.dtype)
                t.shape = list(meta.shape) if meta.shape is not None else None
            new_outputs.append(t)
        graph.outputs = new_outputs


def extract(
    model,
    *,
    inputs: Optional[Sequence[TensorMeta]] = None,
    outputs: Optional[Sequence[TensorMeta]] = None,
    input_shapes: Optional[Mapping[str, Sequence]] = None,
    force_fallback: bool = False,
    external_data_dir: Optional[str] = None,
    log: LogFn = _nolog,
):
    """Cut the subgraph from ``inputs`` to ``outputs`` out of ``model`` and return it.

    ``None`` for inputs/outputs keeps the model's own. A TensorMeta with shape/dtype None
    means ``auto``: found by ONNX shape inference, falling back to ONNX-Runtime (always
    with ``force_fallback``; ``input_shapes`` fixes dynamic model inputs for that).
    Unknown tensor names, constants given as inputs, and cuts that leave a needed tensor
    without producer and without being an input raise InputError naming the tensor.
    ``model`` is modified (its graph is rebuilt); pass a copy to keep it.
    """
    gs = _import_gs()
    _check_cut_names(model, inputs, outputs)
    check_structure(model)
    if force_fallback:
        # ONNX-Runtime needs every input dim: unknown ones are taken as 1 (said in one line),
        # and the result's inputs get the shapes it ran with.
        input_shapes = assume_dynamic_dims(model, input_shapes, log)
        if input_shapes:
            override_input_shapes(model, input_shapes, inplace=True)
    in_specs = _dedupe(inputs) if inputs is not None else None
    out_specs = _dedupe(outputs) if outputs is not None else None
    metas = _resolve_auto(model, in_specs, out_specs, input_shapes, force_fallback, external_data_dir, log)

    original_fields = _model_shell(model)
    with _quiet_gs(), _gs_step("import"):
        graph = gs.import_onnx(model)
    _set_cut(gs, graph, model, in_specs, out_specs, metas)
    with _quiet_gs(), _gs_step("clean up and sort"):
        graph.cleanup(remove_unused_graph_inputs=False)
        graph.toposort()
    with _gs_step("export"):
        result = _export(gs, graph, original_fields)
    del graph

    dangling = dangling_tensors(result)
    if dangling:
        raise InputError(_dangling_message(result, dangling))
    _complete_output_shapes(result, external_data_dir, log)
    return result


def _complete_output_shapes(result, external_data_dir, log: LogFn) -> None:
    """Outputs whose shape inference on the whole model left unknown: infer them on the
    subgraph, whose inputs are now the cut's; run it on ONNX-Runtime if needed."""
    from toolkit.core.model import value_info_meta

    todo = [o.name for o in result.graph.output
            if o.type.HasField("tensor_type") and not is_complete(value_info_meta(o))]
    if not todo:
        return
    metas = infer_tensor_meta(result, fallback=True, names=todo, external_data_dir=external_data_dir)
    for o in result.graph.output:
        m = metas.get(o.name)
        if o.name not in todo or m is None or m.shape is None:
            continue
        old = value_info_meta(o)
        if old.shape is not None and len(old.shape) == len(m.shape):
            # keep the model's names for dims the subgraph cannot fix
            shape = [d if d is not None else od for d, od in zip(m.shape, old.shape)]
        else:
            shape = list(m.shape)
        o.type.CopyFrom(_value_info(o.name, TensorMeta(o.name, tuple(shape), m.dtype or old.dtype)).type)
        log(f"Subgraph output {format_meta(o.name, tuple(shape), m.dtype or old.dtype)} (found on the subgraph)")
    _name_unknown_output_dims(result, log)
    missing = [o.name for o in result.graph.output
               if o.type.HasField("tensor_type") and value_info_meta(o).shape is None]
    if missing:
        raise InputError(
            f"cannot find the shape of output '{missing[0]}', even by running the subgraph; "
            "give the model's input shapes with --model-input-shapes"
        )


_DIM_NAME = re.compile(r"[A-Za-z_][\w.]*\Z")


def _name_unknown_output_dims(result, log: LogFn) -> None:
    """Output dims still unknown after ONNX inference: ONNX-Runtime's symbolic shape inference
    (when sympy is installed) follows dims through ops ONNX's does not (Pad with computed pads,
    ...), giving a number or the model's own dim name (``sequence_length``). Expressions it
    builds (``floor(n/2)``) are not written; unknown stays unknown there."""
    from toolkit.core.model import value_info_meta

    todo = {o.name: value_info_meta(o) for o in result.graph.output if o.type.HasField("tensor_type")}
    todo = {k: m for k, m in todo.items() if m.shape is None or any(d is None for d in m.shape)}
    if not todo:
        return
    try:
        import sympy  # noqa: F401  (symbolic inference needs it; optional)
        from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference
    except ImportError:
        return
    try:
        with _quiet_ort(), contextlib.redirect_stdout(io.StringIO()):
            inferred = SymbolicShapeInference.infer_shapes(light_copy(result), auto_merge=True)
    except Exception:  # noqa: BLE001 - an optional refinement; the shapes found so far stand
        return
    if inferred is None:
        return
    found = {o.name: value_info_meta(o) for o in inferred.graph.output}
    for o in result.graph.output:
        old, new = todo.get(o.name), found.get(o.name)
        if old is None or new is None or new.shape is None or (old.shape is not None and len(old.shape) != len(new.shape)):
            continue
        base = old.shape if old.shape is not None else (None,) * len(new.shape)
        shape = tuple(d if d is not None else _plain_dim(n) for d, n in zip(base, new.shape))
        if shape == tuple(base):
            continue
        o.type.CopyFrom(_value_info(o.name, TensorMeta(o.name, shape, old.dtype)).type)
        log(f"Subgraph output {format_meta(o.name, shape, old.dtype)} (symbolic shape inference)")


def _plain_dim(dim):
    """``dim`` as symbolic shape inference gave it, where it is a number or a plain dim name (not
    an expression, not one of its own ``unk__`` names); else None."""
    if isinstance(dim, int) or (isinstance(dim, str) and _DIM_NAME.match(dim) and not dim.startswith("unk__")):
        return dim
    return None


def _import_unused_initializer(model, name: str):
    init = next((t for t in model.graph.initializer if t.name == name), None)
    try:
        from onnx_graphsurgeon.importers.onnx_importer import OnnxImporter

        if init is not None:
            return OnnxImporter.import_tensor(init)
    except Exception:  # noqa: BLE001 - graphsurgeon internals; fall through to the message
        pass
    raise InputError(f"'{name}' is not connected to any node of the model and cannot be a subgraph output")


def _all_tensors(graph) -> dict:
    """{name: tensor} of a gs graph, including outer tensors only If/Loop/Scan bodies use."""
    tensors: dict = {}
    for node in _all_nodes(graph):
        for t in list(node.inputs) + list(node.outputs):
            tensors.setdefault(t.name, t)
    tensors.update(graph.tensors())
    return tensors


def _dangling_message(model, dangling) -> str:
    """Name the tensor left without producer, and where the cut should be widened."""
    name, node, op = dangling[0]
    by = f"node '{node}' ({op})" if node else "the outputs"
    more = ""
    if len(dangling) > 1:
        others = ", ".join(repr(d[0]) for d in dangling[1:5])
        more = f" (also: {others}{', ...' if len(dangling) > 5 else ''})"
    msg = f"the cut leaves tensor '{name}', needed by {by}, without a producer and it is not an input{more}"
    border = _cut_border(model, {d[0] for d in dangling})
    if border and border[0][0] != name:
        t, n, o = border[0]
        msg += f"; node '{n}' ({o}) reads '{t}', which depends on it: add '{t}' to --inputs"
        if len(border) > 1:
            msg += f" (and {', '.join(repr(b[0]) for b in border[1:4])}{', ...' if len(border) > 4 else ''})"
    else:
        msg += f"; add '{name}' (or a tensor between it and the outputs) to --inputs"
    return msg


def _cut_border(model, dangling: set) -> List[tuple]:
    """[(tensor, node, op)]: tensors that depend on a dangling tensor and are read by nodes fed by the inputs.

    Those are where the user most likely meant to cut.
    """
    g = model.graph
    tainted = set(dangling)
    fed = {i.name for i in g.input} - {t.name for t in g.initializer}
    fed_nodes = []
    for node in g.node:  # topologically sorted by extract
        reads = node_reads(node)
        outs = [o for o in node.output if o]
        if any(r in tainted for r in reads):
            tainted.update(outs)
        if any(r in fed for r in reads):
            fed.update(outs)
            fed_nodes.append((node, reads))
    border = []
    seen = set()
    for node, reads in fed_nodes:
        for r in reads:
            if r in tainted and r not in fed and r not in seen:
                seen.add(r)
                border.append((r, node.name, node.op_type))
    return border


def _model_shell(model):
    """A ModelProto with the model-level fields only (no graph), to restore after export."""
    import onnx

    shell = onnx.ModelProto()
    _restore_model_fields(shell, model)
    return shell


def _dedupe(specs: Sequence[TensorMeta]) -> List[TensorMeta]:
    out: Dict[str, TensorMeta] = {}
    for s in specs:
        if s.name in out and out[s.name] != s:
            raise UsageError(f"tensor '{s.name}' is given twice with different shapes or dtypes")
        out[s.name] = s
    return list(out.values())


def _np_dtype(name: Optional[str]):
    if name is None:
        return None
    from toolkit.core.meta import dtype_to_numpy

    try:
        return dtype_to_numpy(name)
    except UsageError:
        return None


def _cut_fully_given(in_specs) -> bool:
    """Every subgraph input is given with a static shape and a dtype."""
    return bool(in_specs) and all(
        s.dtype and s.shape is not None and all(isinstance(d, int) and d >= 0 for d in s.shape) for s in in_specs
    )


def _check_explicit(in_specs, out_specs, metas, *, dims: bool = True) -> None:
    """InputError when a shape or dtype given for a cut contradicts what inference knows."""
    for s, kind in [(s, "input") for s in in_specs] + [(s, "output") for s in out_specs]:
        m = metas.get(s.name)
        if m is None:
            continue
        shape_txt = format_spec_shape(tuple(m.shape)) if m.shape is not None else "auto"
        known = f"{s.name}:{shape_txt}:{m.dtype or 'auto'}"
        flag = "--inputs" if kind == "input" else "--outputs"
        if s.dtype and m.dtype and not m.dtype.endswith("_type") and s.dtype != m.dtype:
            raise InputError(
                f"{kind} '{s.name}' is given as {s.dtype}, but the model computes {known}; "
                f"fix the dtype in {flag} (or write auto)"
            )
        if kind == "input" and s.shape is not None and m.shape is not None:
            bad = len(s.shape) != len(m.shape) or (dims and any(
                isinstance(a, int) and isinstance(b, int) and a != b for a, b in zip(s.shape, m.shape)))
            if bad:
                raise InputError(
                    f"input '{s.name}' is given the shape {format_spec_shape(tuple(s.shape))}, but the model computes "
                    f"{known}; fix the shape in --inputs (or write auto)"
                )


def _filled_specs(in_specs, out_specs, metas: Dict[str, TensorMeta]) -> Dict[str, TensorMeta]:
    """The cut's inputs and outputs with what was ``auto`` taken from ``metas`` (InputError when no dtype is known)."""
    result: Dict[str, TensorMeta] = {}
    for s in in_specs or []:
        m = metas.get(s.name, TensorMeta(s.name))
        shape = s.shape if s.shape is not None else m.shape
        dtype = s.dtype or m.dtype
        if not dtype:
            raise InputError(
                f"cannot find the dtype of input '{s.name}'; give it, e.g. --inputs {s.name}:auto:float32"
            )
        result[s.name] = TensorMeta(s.name, shape, dtype)
    for s in out_specs or []:
        m = metas.get(s.name, TensorMeta(s.name))
        dtype = s.dtype or m.dtype
        if not dtype:
            raise InputError(f"cannot find the dtype of output '{s.name}'; give it, e.g. --outputs {s.name}:float32")
        result[s.name] = TensorMeta(s.name, m.shape, dtype)
    return result


def _resolve_auto(model, in_specs, out_specs, input_shapes, force_fallback, external_data_dir, log):
    """Fill ``auto`` shapes/dtypes: {name: TensorMeta} for every given input and output."""
    need_in = [s for s in in_specs or [] if s.shape is None or s.dtype is None]
    metas: Dict[str, TensorMeta] = {}
    if force_fallback:
        metas = infer_tensor_meta(
            model, input_shapes=input_shapes, force_fallback=True, external_data_dir=external_data_dir
        )
        # Dims come from a run at assumed input shapes: only ranks and dtypes can be checked.
        _check_explicit(in_specs or [], out_specs or [], metas, dims=False)
    elif in_specs or out_specs:
        from toolkit.core.shapes import declared_tensor_meta

        declared = {} if input_shapes else declared_tensor_meta(model)
        explicit = [s for s in in_specs or [] if s.shape is not None or s.dtype is not None]
        explicit += [s for s in out_specs or [] if s.dtype is not None]
        if all(is_complete(declared.get(s.name)) for s in list(need_in) + list(out_specs or []) + explicit):
            metas = declared  # the model already describes every cut tensor: no inference needed
        else:
            metas = infer_tensor_meta(model, input_shapes=input_shapes, fallback=False)
            known = sum(1 for m in metas.values() if is_complete(m))
            log(f"Shape inference completed successfully: {known} of {len(metas)} tensors fully known")
        _check_explicit(in_specs or [], out_specs or [], metas)
        # What ONNX inference left unknown: input dtype/rank/dims; output dtype and rank
        # (onnx.checker wants a shape on every graph output).
        missing = [s.name for s in need_in if s.dtype is None and not metas[s.name].dtype]
        missing += [s.name for s in need_in if s.shape is None and metas[s.name].shape is None]
        missing += [s.name for s in out_specs or [] if not (s.dtype or metas[s.name].dtype)]
        if not _cut_fully_given(in_specs):
            missing += [s.name for s in out_specs or [] if metas[s.name].shape is None]
        # else: output shapes unknown here are found on the subgraph itself, whose inputs are
        # the cut's (static) inputs (see extract); no model input shapes are needed.
        partial = [s.name for s in need_in if s.shape is None and not is_complete(metas[s.name])]
        if missing or partial:
            if missing:
                log(f"ONNX shape inference left {', '.join(repr(m) for m in missing[:3])} unknown; "
                    "running ONNX-Runtime to find them")
            metas = infer_tensor_meta(
                model, input_shapes=input_shapes, fallback=True,
                names=list(dict.fromkeys(missing + partial)), external_data_dir=external_data_dir,
            )
    result = _filled_specs(in_specs, out_specs, metas)
    for s in in_specs or []:
        meta = result[s.name]
        log(f"Subgraph input  {format_meta(meta.name, meta.shape, meta.dtype)}")
    for s in out_specs or []:
        meta = result[s.name]
        log(f"Subgraph output {format_meta(meta.name, meta.shape, meta.dtype)}")
    return result


# ---------------------------------------------------------------------- sanitize


@dataclass
class FoldPass:
    index: int
    nodes_before: int
    nodes_after: int
    seconds: float
    partitioning: str


@dataclass
class SanitizeReport:
    nodes_before: int = 0
    nodes_after: int = 0
    passes: List[FoldPass] = field(default_factory=list)
    converged: bool = True
    seconds: float = 0.0


def _apply_inferred(model, inferred, *, outputs: bool) -> None:
    """Copy value_info (and optionally graph output types) from a shape-inferred light copy."""
    del model.graph.value_info[:]
    model.graph.value_info.extend(inferred.graph.value_info)
    # If/Loop/Scan bodies too (the light copy has the same graphs, in the same order).
    bodies = list(walk_graphs(model.graph))[1:]
    inferred_bodies = list(walk_graphs(inferred.graph))[1:]
    if len(bodies) == len(inferred_bodies):
        for g, ig in zip(bodies, inferred_bodies):
            if ig.value_info:
                del g.value_info[:]
                g.value_info.extend(ig.value_info)
    if outputs:
        by_name = {o.name: o for o in inferred.graph.output}
        for o in model.graph.output:
            new = by_name.get(o.name)
            if new is not None and new.type.HasField("tensor_type") and new.type.tensor_type.HasField("shape"):
                o.type.CopyFrom(new.type)


def _clear_negative_dims(value_infos) -> None:
    """Dims written as -1 (some exporters' "unknown") become unknown dims, which inference may
    fill (it keeps a stated value, even an invalid one)."""
    for vi in value_infos:
        if vi.type.HasField("tensor_type"):
            for d in vi.type.tensor_type.shape.dim:
                if d.HasField("dim_value") and d.dim_value < 0:
                    d.Clear()


def infer_shapes_in_place(model, *, reset_outputs: bool = False) -> None:
    """Re-infer every intermediate shape of ``model`` (weights are not copied)."""
    from toolkit.core.model import infer_shapes

    light = light_copy(model)
    _clear_negative_dims(light.graph.output)
    # Existing value_info is kept as a hint (exporters annotate what inference cannot derive);
    # override_input_shapes has already dropped it where input shapes changed.
    if reset_outputs:
        for o in light.graph.output:
            if o.type.HasField("tensor_type"):
                o.type.tensor_type.ClearField("shape")
    inferred = infer_shapes(light, data_prop=True)
    _apply_inferred(model, inferred, outputs=reset_outputs)


def _all_shapes_static(gs, graph) -> bool:
    """Every tensor of ``graph`` (and its subgraphs) has a shape of fixed dims: shape
    inference cannot teach it anything more."""
    for tensor in _all_tensors(graph).values():
        if isinstance(tensor, gs.Constant) or not tensor.name:  # constants, omitted optional inputs
            continue
        shape = tensor.shape
        if shape is None or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
            return False
    return True


def _refresh_gs_shapes(gs, graph, original) -> int:
    """Re-run ONNX shape inference on the current gs graph and write shapes back to its tensors.

    Folding a shape computation turns e.g. a Reshape's target into a constant; only a new
    inference then tells the next Shape node its input's shape. Returns how many tensors
    learned something.
    """
    from toolkit.core.model import infer_shapes, value_info_meta

    from toolkit.core.shapes import _STUB_BYTES

    with _quiet_gs(), _stubbed_constants(graph, _STUB_BYTES):
        model = gs.export_onnx(graph, do_type_check=False)
    _restore_model_fields(model, original)
    light = light_copy(model)
    del model
    _clear_negative_dims(light.graph.output)
    inferred = infer_shapes(light, data_prop=True)
    # Inside If/Loop/Scan bodies too: folding there needs the body's shapes (names are unique
    # across scopes in ONNX).
    metas: dict = {}
    for g in walk_graphs(inferred.graph):
        for vi in list(g.value_info) + (list(g.output) if g is inferred.graph else []):
            metas.setdefault(vi.name, value_info_meta(vi))
    input_names = {t.name for t in graph.inputs}
    changed = 0
    for name, tensor in _all_tensors(graph).items():
        if isinstance(tensor, gs.Constant) or name in input_names:
            continue
        meta = metas.get(name)
        if meta is None or meta.shape is None:
            continue
        old = tuple(tensor.shape) if tensor.shape is not None else None
        new_shape = tuple(meta.shape)
        if old == new_shape:
            continue
        known_old = sum(1 for d in old if isinstance(d, int)) if old is not None else -1
        known_new = sum(1 for d in new_shape if isinstance(d, int))
        if old is not None and (len(old) != len(new_shape) or known_new < known_old):
            continue
        tensor.shape = list(new_shape)
        if tensor.dtype is None and meta.dtype:
            tensor.dtype = _np_dtype(meta.dtype)
        changed += 1
    return changed


_NODE_NAME_PATTERNS = (
    re.compile(r"Name:'([^']+)'"),
    re.compile(r'In Node, \("([^"]+)"'),
    re.compile(r"Node \(([^)]+)\) Op \("),
    re.compile(r"node '([^']+)'"),
)
_OP_PATTERNS = (
    re.compile(r"([\w.]*):(\w+)\(-?\d+\) is not a registered function/op"),
    re.compile(r"No Op registered for (\w+) with domain_version"),
)
_MAX_EXCLUSIONS = 32


def _failing_part(message: str, names: set):
    """(kind, key) naming what ONNX-Runtime failed on: ("node", name) or ("op", op_type)."""
    for pat in _NODE_NAME_PATTERNS:
        for m in pat.finditer(message):
            if m.group(1) in names:
                return "node", m.group(1)
    for pat in _OP_PATTERNS:
        found = pat.search(message)
        if found:
            return "op", found.groups()[-1]
    return None


def _all_nodes(graph):
    for node in graph.nodes:
        yield node
        for sub in bodies(node):
            yield from _all_nodes(sub)


# ---------------------------------------------------------------------- onnx-graphsurgeon workarounds

_HIDDEN_PREFIX = "__toolkit_hidden__"


def _shape_attr_slice(node, rank: int):
    """(start, end) of a Shape node's ``start``/``end`` attributes, clamped like ONNX does."""
    start = int(node.attrs.get("start", 0))
    end = node.attrs.get("end", None)
    end = rank if end is None else int(end)
    if start < 0:
        start += rank
    if end < 0:
        end += rank
    return max(0, min(start, rank)), max(0, min(end, rank))


def _prepare_shape_slices(gs, graph) -> List:
    """Shape nodes with ``start``/``end``: folded here, correctly, where the dims they take are
    known; hidden from onnx-graphsurgeon otherwise (it folds them to the whole shape).

    Returns the hidden nodes, for :func:`_unhide`.
    """
    import numpy as np

    hidden = []
    for node in list(_all_nodes(graph)):
        if node.op != "Shape" or not ("start" in node.attrs or "end" in node.attrs):
            continue
        inp = node.inputs[0] if node.inputs else None
        shape = None
        if isinstance(inp, gs.Constant):
            shape = list(inp.shape)
        elif inp is not None and inp.shape is not None:
            shape = list(inp.shape)
        if shape is not None:
            start, end = _shape_attr_slice(node, len(shape))
            dims = shape[start:end]
            if all(isinstance(d, int) and d >= 0 for d in dims):
                out = node.outputs[0]
                out.to_constant(np.array(dims, dtype=np.int64))
                out.inputs.clear()
                continue
        node.op = _HIDDEN_PREFIX + node.op
        hidden.append(node)
    return hidden


def _is_hidden(node) -> bool:
    return node.op.startswith(_HIDDEN_PREFIX)


def _hide(nodes) -> List:
    for node in nodes:
        node.op = _HIDDEN_PREFIX + node.op
    return list(nodes)


def _unhide(nodes) -> None:
    for node in nodes:
        if node.op.startswith(_HIDDEN_PREFIX):
            node.op = node.op[len(_HIDDEN_PREFIX):]


def _flatten_constant_ifs(gs, graph) -> int:
    """Inline the taken branch of every If whose condition is a constant (bodies included).

    onnx-graphsurgeon's own flattening loses If outputs after the first (it edits the
    output list it iterates) and leaves outputs that a branch passes through from outside
    without producer; this version keeps every output. Returns how many were inlined.
    """
    count = 0
    used_names = {t.name for t in _all_tensors(graph).values()}

    def unique(name: str) -> str:
        return fresh_name(name, used_names)

    def visit(g) -> None:
        nonlocal count
        index = 0
        while index < len(g.nodes):
            node = g.nodes[index]
            for sub in bodies(node):
                visit(sub)
            cond = node.inputs[0] if node.op == "If" and node.inputs else None
            if not isinstance(cond, gs.Constant) or cond.values.size != 1:
                index += 1
                continue
            branch = node.attrs["then_branch" if bool(cond.values.reshape(-1)[0]) else "else_branch"]
            if len(node.outputs) != len(branch.outputs):
                index += 1
                continue
            new_nodes = _inline_branch(gs, g, node, branch, unique)
            g.nodes[index:index + 1] = new_nodes
            index += len(new_nodes)
            count += 1

    visit(graph)
    return count


def _inline_branch(gs, g, node, branch, unique) -> list:
    """The nodes that replace If ``node`` of graph ``g`` by its ``branch`` (names made unique);
    an Identity keeps each If output defined where no branch node produces it."""
    outer_outs = list(node.outputs)
    branch_outs = list(branch.outputs)
    body_nodes = list(branch.nodes)
    produced = {id(t) for n in body_nodes for t in n.outputs}
    outer_tensors = g.tensors()
    for n in body_nodes:
        for t in n.outputs:
            if not t.is_empty():
                t.name = unique(t.name)
        for t in n.inputs:
            if isinstance(t, gs.Constant) and outer_tensors.get(t.name, t) is not t:
                t.name = unique(t.name)  # a branch constant whose name the outer graph uses
    node.inputs.clear()
    node.outputs.clear()
    extra = []
    rebound: dict = {}
    for outer, inner in zip(outer_outs, branch_outs):
        if id(inner) in rebound:
            src = rebound[id(inner)]
        elif id(inner) in produced and inner.inputs:
            producer = inner.inputs[0]
            producer.outputs[producer.outputs.index(inner)] = outer
            rebound[id(inner)] = outer
            continue
        else:
            src = inner  # passed through from outside, or a constant
        # An Identity keeps the If's output defined.
        extra.append(gs.Node("Identity", name=unique(f"{outer.name}_identity"), inputs=[src], outputs=[outer]))
    return body_nodes + extra


# ---------------------------------------------------------------------- validating a folded model

# Models bigger than this are not validated by running them (the cost would be the run itself).
_VALIDATE_MAX_BYTES = 1 << 30


def _spread(shape):
    """Values spread over [0, 1) without a random generator (importing numpy.random costs more
    than validation's inputs need): the golden-ratio sequence, deterministic and not periodic."""
    import numpy as np

    n = int(np.prod(shape, dtype=np.int64))
    return ((np.arange(1, n + 1, dtype=np.float64) * 0.6180339887498949) % 1.0).reshape(shape)


class _Validation:
    """Runs the original model once on generated inputs; checks candidate results against it."""

    def __init__(self, original, external_data_dir: Optional[str], inputs_before_override=None):
        self.original = original
        self.external_data_dir = external_data_dir
        # the graph inputs as the model stated them before --override-input-shapes (or None)
        self.inputs_before_override = inputs_before_override
        self.load_error: Optional[Exception] = None  # why ONNX-Runtime did not load the input model
        # With If/Loop/Scan bodies, models are loaded with basic optimizations, which inline
        # constant-condition branches and then check them (a plain load does not); without bodies
        # those optimizations cannot make a load fail, and cost time.
        self.bodies = any(node_subgraphs(n) for n in original.graph.node)
        self.feed: Any = None
        self.expected: Any = None
        self.skip_reason: Optional[str] = None
        self.compare_reason: Optional[str] = None  # why outputs are not compared (load check only)
        self.all_values: Any = None  # values of the tensors folding may replace, on the generated inputs
        self.structural_only = False
        self.unchecked: set = set()  # big folded tensors whose values are not compared
        self._prepared = False

    # -- sessions
    def _session(self, model, extra_outputs: Sequence[str] = (), only_outputs: Optional[Sequence[str]] = None,
                 optimized: bool = False):
        """An ONNX-Runtime session on a light copy of ``model``: its big top-level weights
        become graph inputs fed with the model's own arrays (no copy), so creating the
        session costs the graph, not the weights."""
        import onnx
        import onnxruntime as ort

        light, stubbed = _without_big_weights(model)
        if only_outputs is not None:
            _prune_to(light.graph, only_outputs)
        if extra_outputs:
            have = {o.name for o in light.graph.output}
            for name in extra_outputs:
                if name not in have:
                    light.graph.output.add().name = name
        g = light.graph
        weights = []
        if stubbed:
            read = {r for n in g.node for r in node_reads(n)} if only_outputs is not None else None
            listed = {i.name for i in g.input}
            for t in stubbed:
                if read is not None and t.name not in read:
                    continue  # the pruned graph does not need it
                weights.append(t.name)
                if t.name not in listed:
                    g.input.append(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
        so = ort.SessionOptions()
        # ``optimized``: ONNX-Runtime's basic level, as users load models (it inlines constant-condition
        # If branches and folds constants, which meets checks a plain load does not).
        so.graph_optimization_level = (
            ort.GraphOptimizationLevel.ORT_ENABLE_BASIC if optimized else ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        )
        so.log_severity_level = 4
        # One thread that does not spin: validation runs beside folding and must not slow it.
        so.intra_op_num_threads = 1
        so.inter_op_num_threads = 1
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
        if self.external_data_dir:
            so.add_session_config_entry("session.model_external_initializers_file_folder_path", self.external_data_dir)
        sess = ort.InferenceSession(light.SerializeToString(), so, providers=["CPUExecutionProvider"])
        return _Session(sess, model, weights)

    def start(self) -> None:
        """Run the input model for the expected outputs in the background (ONNX-Runtime releases
        the GIL), while folding goes on."""
        import threading

        self._thread: Optional[threading.Thread] = threading.Thread(target=self._prepare_safely, daemon=True)
        self._thread.start()

    def _prepare_safely(self) -> None:
        try:
            self._prepare()
        except Exception as exc:  # noqa: BLE001 - never let the helper thread die silently
            self.skip_reason = f"validation could not run ({one_line(exc, first_line=True, limit=300)})"

    def prepare(self) -> None:
        thread = getattr(self, "_thread", None)
        if thread is not None:
            thread.join()
            self._thread = None
        if not self._prepared:
            self._prepare()

    def _prepare(self) -> None:
        if self._prepared:
            return
        self._prepared = True
        try:
            import onnxruntime  # noqa: F401
        except ImportError:
            self.skip_reason = "onnxruntime is not installed"
            return
        from toolkit.core.shapes import _tensor_nbytes

        # (ByteSize() would walk every weight's bytes: slow on big models)
        if sum(_tensor_nbytes(t) for t in self.original.graph.initializer) > _VALIDATE_MAX_BYTES:
            self.skip_reason = "the model is over 1 GiB"
            return
        if has_external_data(self.original):
            # Running would read every weight from disk: check the structure only (ONNX's
            # checker with strict shape inference, which is where loading fails).
            self.structural_only = True
            self.compare_reason = "its weights stay on disk"
            return
        g = self.original.graph
        self.output_names = [o.name for o in g.output]
        # Every intermediate tensor's value too, when the model has no subgraphs and they fit:
        # then a folded model is checked by comparing its new constants with them, without
        # running it (folding only replaces tensors by constants and removes dead nodes).
        self.has_subgraphs = any(attr.type in (5, 10) for n in g.node for attr in n.attribute)  # GRAPH, GRAPHS
        self.feed = self._make_feed()
        if self.feed is None:
            return
        if not self.has_subgraphs:
            # Only the part of the model that folding may replace runs here (shape computations
            # and constant subgraphs, with what they read): not the whole model.
            # Big folded tensors (weights made by ConstantOfShape, Transpose of a weight...) are
            # not checked: holding them twice costs more than the risk, which is in shape values.
            foldable = _foldable_tensors(g)
            big = _big_tensors(g, _CHECK_MAX_BYTES)
            extra = [t for t in foldable if t not in big]
            self.unchecked = set(foldable) - set(extra)
            try:
                cone = self._session(self.original, only_outputs=extra)
                self.all_values = self._run(cone, self.feed, extra)
                return
            except Exception:  # noqa: BLE001 - e.g. a tensor that cannot be an output; run it all
                self.all_values = None
        self._ensure_expected()

    def _ensure_expected(self) -> bool:
        """The input model's outputs on the generated inputs (a full run, done once)."""
        if self.expected is not None:
            return True
        if self.feed is None:
            return False
        try:
            sess = self._session(self.original)
        except Exception as exc:  # noqa: BLE001 - ORT's own exception types
            self.load_error = exc
            self.skip_reason = f"ONNX-Runtime cannot load the input model ({one_line(exc, first_line=True, limit=300)})"
            return False
        try:
            self.expected = self._run(sess, self.feed, self.output_names)
        except Exception as exc:  # noqa: BLE001
            self.compare_reason = (
                f"the input model does not run on generated inputs ({one_line(exc, first_line=True, limit=300)})"
            )
            self.feed = None
            return False
        return True

    def _make_feed(self):
        import numpy as np

        from toolkit.core.meta import dtype_to_numpy
        from toolkit.core.model import graph_io_meta

        ins, _ = graph_io_meta(self.original)
        metas = {m.name: m for m in ins}
        feed = {}
        total = 0
        for i in ins:  # graph inputs that are not initializers
            m = metas.get(i.name)
            if m is None or not m.dtype or m.shape is None or m.dtype.endswith("_type"):
                self.compare_reason = f"input '{i.name}' is not a tensor with known rank"
                return None
            try:
                dtype = dtype_to_numpy(m.dtype)
            except Exception:  # noqa: BLE001
                self.compare_reason = f"input '{i.name}' has dtype {m.dtype}"
                return None
            shape = tuple(d if isinstance(d, int) and d >= 0 else 1 for d in m.shape)
            total += int(np.prod(shape, dtype=np.int64)) * max(dtype.itemsize, 1)
            if total > (64 << 20):
                self.compare_reason = "generated inputs would be over 64 MiB"
                return None
            if dtype.kind == "f":
                feed[i.name] = _spread(shape).astype(dtype)
            elif dtype.kind == "b":
                feed[i.name] = _spread(shape) < 0.5
            elif dtype.kind in "iu":
                feed[i.name] = np.ones(shape, dtype=dtype)
            elif dtype.kind == "O" or dtype.kind == "U":
                feed[i.name] = np.full(shape, "a", dtype=object)
            else:
                feed[i.name] = np.zeros(shape, dtype=dtype)
        return feed

    @staticmethod
    def _run(sess, feed, names=None):
        names = names or [o.name for o in sess.get_outputs()]
        return dict(zip(names, sess.run(names, feed)))


    # -- checks
    def check(self, result) -> Optional[str]:
        """None if ``result`` loads and (where inputs could be generated) gives the original's outputs."""
        self.prepare()
        if self.load_error is not None:
            self._raise_if_override_broke(self.load_error)
        if self.skip_reason:
            return None
        if self.structural_only:
            err = _strict_check(result)
            return None if err is None or _strict_check(self.original) is not None else f"it fails ONNX's checker: {err}"
        try:
            sess = self._session(result, optimized=self.bodies)
        except Exception as exc:  # noqa: BLE001
            try:
                self._session(self.original, optimized=self.bodies)
            except Exception as orig_exc:  # noqa: BLE001 - the input model does not load either
                self._raise_if_override_broke(orig_exc)
                self.skip_reason = (
                    f"ONNX-Runtime cannot load the input model ({one_line(orig_exc, first_line=True, limit=300)})"
                )
                return None
            return f"ONNX-Runtime cannot load it: {one_line(exc, first_line=True, limit=300)}"
        if self.feed is None:
            return None
        if self.all_values is not None and _same_outputs(result, self.original) and self._predicted(result):
            wrong = self.wrong_constants(result)
            if wrong:
                wrong = {name for name in wrong if not self._same_reshape_target(result, name)}
            if not wrong:
                return None
            if self._nondeterministic():
                self.compare_reason = "the input model's outputs change from run to run"
                return None
            return f"folded tensor '{sorted(wrong)[0]}' differs from what the input model computes"
        if not self._ensure_expected():
            return None
        try:
            got = self._run(sess, self.feed, list(self.expected))
        except Exception as exc:  # noqa: BLE001
            return f"it fails to run on ONNX-Runtime: {one_line(exc, first_line=True, limit=300)}"
        bad = [n for n in self.expected if not _same_value(self.expected[n], got.get(n))]
        if not bad:
            return None
        if self._nondeterministic():
            self.compare_reason = "the input model's outputs change from run to run"
            return None
        return f"output '{bad[0]}' differs from the input model's"

    def check_override(self) -> None:
        """InputError when the model with overridden input shapes does not load while it did
        with its own (see :meth:`_raise_if_override_broke`)."""
        try:
            import onnxruntime  # noqa: F401
        except ImportError:
            return
        try:
            self._session(self.original, optimized=True)
        except Exception as exc:  # noqa: BLE001 - ORT's own exception types
            self._raise_if_override_broke(exc)

    def _raise_if_override_broke(self, exc: Exception) -> None:
        """InputError when the input model loads with its own input shapes but not with the
        overridden ones (``exc``): no folding can make such a model load."""
        if self._loads_before_override():
            raise InputError(
                "with the input shapes given (--override-input-shapes) the model no longer loads in "
                f"ONNX-Runtime, folded or not ({one_line(exc, first_line=True, limit=300)}); some part "
                "of it (an If branch, say) cannot take these shapes: choose shapes every part accepts, "
                "or give --no-validate to write it anyway"
            ) from None

    def _loads_before_override(self) -> bool:
        """The input model, with the input shapes it stated (no inferred shapes), loads."""
        if self.inputs_before_override is None:
            return False
        before = light_copy(self.original)  # a copy of its own (the original is untouched)
        del before.graph.input[:]
        before.graph.input.extend(self.inputs_before_override)
        for g in walk_graphs(before.graph):
            del g.value_info[:]
        try:
            self._session(before, optimized=True)
        except Exception:  # noqa: BLE001 - ORT's own exception types
            return False
        return True

    def _same_reshape_target(self, result, name: str) -> bool:
        """Folded tensor ``name`` is read only as a Reshape target (no allowzero) and equals the
        value the input model computes except for one -1 (inferred, so the same dim) where the
        input model has a positive dim: the same Reshape."""
        import numpy as np
        import onnx

        readers = [n for n in result.graph.node if name in n.input]
        for n in readers:
            allowzero = any(a.name == "allowzero" and a.i for a in n.attribute)
            if n.op_type != "Reshape" or list(n.input).index(name) != 1 or allowzero:
                return False
        got = next((t for t in result.graph.initializer if t.name == name), None)
        want = (self.all_values or {}).get(name)
        if not readers or got is None or want is None:
            return False
        got_v, want_v = np.asarray(_raw_array(got, onnx)).reshape(-1), np.asarray(want).reshape(-1)
        if got_v.shape != want_v.shape or want_v.dtype.kind not in "iu" or np.count_nonzero(got_v == -1) != 1:
            return False
        differ = got_v != want_v
        return bool(np.all(got_v[differ] == -1) and np.all(want_v[differ] > 0) and not np.any(want_v == -1))

    def _predicted(self, result) -> bool:
        """Every tensor folding made constant had its value computed in the input model's run
        (or is one of the big ones left unchecked)."""
        computed = {o for n in self.original.graph.node for o in n.output if o}
        return all(t.name in self.all_values or t.name in self.unchecked
                   for t in result.graph.initializer if t.name in computed)

    def _nondeterministic(self) -> bool:
        """The input model gives different values from run to run (random ops)."""
        if self.all_values is not None:
            names = list(self.all_values)
            try:
                again = self._run(self._session(self.original, only_outputs=names), self.feed, names)
            except Exception:  # noqa: BLE001
                return True
            return any(not _same_value(self.all_values[n], again.get(n)) for n in names)
        try:
            again = self._run(self._session(self.original), self.feed, self.output_names)
        except Exception:  # noqa: BLE001
            return True
        return any(not _same_value(self.expected[n], again.get(n)) for n in self.expected)

    def wrong_constants(self, result) -> Optional[set]:
        """Names of tensors that folding made constant with values the input model does not compute.

        None when that cannot be told (no generated inputs)."""
        self.prepare()
        if self.feed is None:
            return None
        from onnx import numpy_helper

        computed = {o for n in self.original.graph.node for o in n.output if o}
        folded = [t for t in result.graph.initializer if t.name in computed]
        if not folded:
            return set()
        if self.all_values is not None and all(t.name in self.all_values or t.name in self.unchecked for t in folded):
            import onnx

            return {t.name for t in folded if t.name in self.all_values
                    and not _same_value(self.all_values.get(t.name), _raw_array(t, onnx))}
        try:
            sess = self._session(self.original, [t.name for t in folded])
            values = self._run(sess, self.feed, [t.name for t in folded])
        except Exception:  # noqa: BLE001
            return None
        return {t.name for t in folded if not _same_value(values.get(t.name), numpy_helper.to_array(t))}


def _foldable_tensors(graph) -> List[str]:
    """Outputs of the top-graph nodes that folding could turn into constants: those computed
    from initializers, constants and Shape/Size results only (an over-estimate)."""
    const = {t.name for t in graph.initializer}
    out: List[str] = []
    for node in graph.node:  # in the model's order; nodes out of order are simply not predicted
        if node.op_type in _SHAPE_OPS or all(r in const for r in node_reads(node)):
            names = [o for o in node.output if o]
            const.update(names)
            out.extend(names)
    return out


# Folded tensors bigger than this are not compared with the input model's values (bytes).
_CHECK_MAX_BYTES = 4 << 20


def _big_tensors(graph, limit: int) -> set:
    """Top-graph tensors whose inferred size is over ``limit`` bytes (dynamic dims as 1)."""
    from toolkit.core.meta import dtype_to_numpy
    from toolkit.core.model import value_info_meta

    big = set()
    for vi in list(graph.value_info) + list(graph.output):
        m = value_info_meta(vi)
        if m.shape is None or not m.dtype or m.dtype.endswith("_type"):
            continue
        n = 1
        for d in m.shape:
            n *= d if isinstance(d, int) and d > 0 else 1
        try:
            itemsize = dtype_to_numpy(m.dtype).itemsize
        except Exception:  # noqa: BLE001
            itemsize = 4
        if n * itemsize > limit:
            big.add(vi.name)
    return big


def _without_big_weights(model):
    """(copy of ``model`` without its big top-level initializers, those initializers): the
    copy shares nothing with the model, and the big weights are not copied."""
    import onnx

    from toolkit.core.shapes import _STUB_BYTES, _copy_field, _tensor_nbytes

    light = onnx.ModelProto()
    for f, value in model.ListFields():
        if f.name != "graph":
            _copy_field(light, f.name, value)
    g = light.graph
    for f, value in model.graph.ListFields():
        if f.name != "initializer":
            _copy_field(g, f.name, value)
    big = []
    for t in model.graph.initializer:
        if _tensor_nbytes(t) > _STUB_BYTES or t.data_location == onnx.TensorProto.EXTERNAL:
            big.append(t)
        else:
            g.initializer.append(t)
    return light, big


def _prune_to(graph, outputs: Sequence[str]) -> None:
    """Make ``outputs`` the graph's outputs and drop the nodes they do not need (in place)."""
    needed = set(outputs)
    keep = set()
    changed = True
    while changed:  # nodes need not be sorted
        changed = False
        for i, node in enumerate(graph.node):
            if i not in keep and any(o in needed for o in node.output):
                keep.add(i)
                needed.update(node_reads(node))
                changed = True
    kept = [n for i, n in enumerate(graph.node) if i in keep]
    copies = []
    for n in kept:
        c = type(n)()
        c.CopyFrom(n)
        copies.append(c)
    del graph.node[:]
    graph.node.extend(copies)
    del graph.output[:]
    for name in outputs:
        graph.output.add().name = name


def _strict_check(model) -> Optional[str]:
    """onnx.checker with strict shape inference on a light copy (no weights read); the error or None."""
    import onnx

    try:
        onnx.checker.check_model(light_copy(model, stub_bytes=0), full_check=True)
    except Exception as exc:  # noqa: BLE001 - onnx raises several types
        return one_line(exc, first_line=True, limit=300)
    return None


def _same_outputs(a, b) -> bool:
    return [o.name for o in a.graph.output] == [o.name for o in b.graph.output]


class _Session:
    """An ONNX-Runtime session whose weight inputs are fed automatically (read from the
    model only when it runs: a load check costs no weight bytes)."""

    def __init__(self, sess, model, weight_names):
        self.sess = sess
        self.model = model
        self.weight_names = set(weight_names)

    def get_inputs(self):
        return [i for i in self.sess.get_inputs() if i.name not in self.weight_names]

    def get_outputs(self):
        return self.sess.get_outputs()

    def run(self, names, feed):
        import onnx

        weights = {t.name: _raw_array(t, onnx) for t in self.model.graph.initializer if t.name in self.weight_names}
        return self.sess.run(names, {**feed, **weights})


def _raw_array(t, onnx):
    """The array of an in-memory initializer, without a copy where it is stored as raw bytes."""
    import numpy as np
    from onnx import numpy_helper

    if t.HasField("raw_data") and t.data_type not in (onnx.TensorProto.STRING,):
        try:
            dtype = onnx.helper.tensor_dtype_to_np_dtype(t.data_type)
            if dtype.itemsize and dtype.kind in "biufc":
                return np.frombuffer(t.raw_data, dtype=dtype).reshape(tuple(t.dims))
        except Exception:  # noqa: BLE001 - unusual types: the slow path below
            pass
    return numpy_helper.to_array(t)


def _same_value(a, b) -> bool:
    import numpy as np

    if a is None or b is None:
        return a is b
    if isinstance(a, list) or isinstance(b, list):
        if not (isinstance(a, list) and isinstance(b, list)) or len(a) != len(b):
            return False
        return all(_same_value(x, y) for x, y in zip(a, b))
    a = np.asarray(a)
    b = np.asarray(b)
    if a.shape != b.shape:
        return False
    if a.dtype == b.dtype and a.dtype.kind in "biufc" and a.tobytes() == b.tobytes():
        return True  # the same bytes (the usual case; cheaper than array_equal on small arrays)
    if a.dtype == b.dtype and np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"):
        return True
    if a.dtype.kind in "fc" and b.dtype.kind in "fc":
        return bool(np.allclose(a.astype(np.float64), b.astype(np.float64), rtol=1e-4, atol=1e-4, equal_nan=True))
    try:
        return bool(np.array_equal(a, b))
    except Exception:  # noqa: BLE001
        return False


def _fold_once(
    graph,
    *,
    partitioning: str,
    size_threshold: Optional[int],
    fold_shapes: bool,
    log: LogFn,
    bad_nodes: Optional[set] = None,
    bad_ops: Optional[set] = None,
    recurse_subgraphs: bool = True,
) -> str:
    """One graphsurgeon folding run; returns how it folded.

    ``auto`` folds everything in one ONNX-Runtime run. When that fails, the node (or op
    type) that failed is read from the error, excluded, and the rest folded again, so one
    bad node does not stop the rest. Only when the error names nothing does it fall back
    to graphsurgeon's recursive partitioning (correct, but slow on big graphs).
    """
    # Constant-condition If nodes are inlined by _flatten_constant_ifs, not by graphsurgeon.
    kwargs = dict(
        fold_shapes=fold_shapes, size_threshold=size_threshold, recurse_subgraphs=recurse_subgraphs,
        flatten_subgraphs=False,
    )
    if partitioning != "auto":
        mode = None if partitioning == "none" else partitioning
        with _quiet_gs() as buf, _quiet_ort(), _gs_step("fold constants in"):
            graph.fold_constants(partitioning=mode, error_ok=True, should_exclude_node=_is_hidden, **kwargs)
        if "failed" in buf.getvalue().lower():
            log(f"Folding constants | some nodes could not be folded (partitioning={partitioning}); kept as they are")
        return partitioning

    # Unnamed nodes get a temporary name so that errors can point at them.
    renamed = []
    for i, node in enumerate(_all_nodes(graph)):
        if not node.name:
            node.name = f"__toolkit_unnamed_{i}"
            renamed.append(node)
    # What failed in earlier passes stays excluded (the sets are updated in place).
    bad_nodes = set() if bad_nodes is None else bad_nodes
    bad_ops = set() if bad_ops is None else bad_ops

    def exclude(node) -> bool:
        return node.name in bad_nodes or node.op in bad_ops or _is_hidden(node)

    try:
        for _ in range(_MAX_EXCLUSIONS + 1):
            try:
                with _quiet_gs() as buf, _quiet_ort():
                    graph.fold_constants(partitioning=None, error_ok=False, should_exclude_node=exclude, **kwargs)
                if "large outputs" in buf.getvalue():
                    log("Folding constants | some folded tensors are over 1 MiB; --fold-size-threshold keeps "
                        "such tensors computed at run time instead")
                return "none" if not (bad_nodes or bad_ops) else "none, excluding failing nodes"
            except Exception as exc:  # ONNX-Runtime or graphsurgeon failed on some node
                names = {n.name for n in _all_nodes(graph)}
                part = _failing_part(str(exc), names - bad_nodes)
                if part is None or (part[0] == "op" and part[1] in bad_ops):
                    log(f"Folding constants | folding failed ({one_line(exc, first_line=True, limit=300)}); "
                        "falling back to folding part by part (slow on big graphs)")
                    break
                kind, key = part
                (bad_nodes if kind == "node" else bad_ops).add(key)
                shown = key if not key.startswith("__toolkit_unnamed_") else "(unnamed)"
                log(f"Folding constants | {'node' if kind == 'node' else 'op type'} {shown} cannot be folded "
                    f"({one_line(exc, first_line=True, limit=300)}); folding the rest without it")
        else:
            log("Folding constants | too many nodes fail to fold; falling back to folding part by part")
        with _quiet_gs() as buf, _quiet_ort(), _gs_step("fold constants in"):
            graph.fold_constants(partitioning="recursive", error_ok=True, should_exclude_node=exclude, **kwargs)
        return "recursive"
    finally:
        for node in renamed:
            node.name = ""


# Fallbacks when a folded model fails validation, in order (see sanitize()).
_FOLD_LEVELS = (
    ("full", ""),
    ("no-inline", "without inlining constant-condition If branches"),
    ("top-only", "folding only outside If/Loop/Scan bodies"),
    ("skip-wrong", "skipping the nodes whose folded values are wrong"),
)


def _has_non_tensor_types(model) -> bool:
    for g in walk_graphs(model.graph):
        for vi in list(g.input) + list(g.output) + list(g.value_info):
            if vi.type.WhichOneof("value") not in (None, "tensor_type"):
                return True
    return False


def _fold_passes(gs, graph, shell, report, *, level, num_passes, partitioning, size_threshold, fold_shapes,
                 excluded: set, log: LogFn, per_pass_shapes: bool = True) -> None:
    """Fold ``graph`` in place, pass after pass, until nothing changes (or ``num_passes``)."""
    index = 0
    report.passes = []
    report.converged = False
    bad_nodes: set = set()
    bad_ops: set = set()
    inline = level == "full"
    while num_passes is None or index < num_passes:
        index += 1
        t0 = time.perf_counter()
        before = count_nodes(graph)
        hidden = _prepare_shape_slices(gs, graph)
        if excluded:
            hidden += _hide([n for n in _all_nodes(graph) if not _is_hidden(n)
                             and any(o.name in excluded for o in n.outputs)])
        try:
            used = _fold_once(
                graph,
                partitioning=partitioning,
                size_threshold=size_threshold,
                fold_shapes=fold_shapes,
                log=log,
                bad_nodes=bad_nodes,
                bad_ops=bad_ops,
                recurse_subgraphs=level in ("full", "no-inline"),
            )
        finally:
            _unhide(hidden)
        ifs = _flatten_constant_ifs(gs, graph) if inline else 0
        inlined = ifs + eliminate_noops(gs, graph) + constant_reshape_targets(gs, graph)
        with _quiet_gs(), _gs_step("clean up"):
            graph.cleanup()
        after = count_nodes(graph)
        changed = after != before or inlined > 0
        unlocked = True
        if changed and per_pass_shapes:
            # Shapes unlocked by this pass, for the next one.
            learned = 0
            if not _all_shapes_static(gs, graph):
                with _gs_step("export"):
                    learned = _refresh_gs_shapes(gs, graph, shell)
            # One folding run folds everything computable from the constants and the shapes
            # it is given: with no shape learned and no If branch inlined, another pass would
            # see the same graph facts and fold nothing (it is not run).
            unlocked = learned > 0 or ifs > 0
        secs = time.perf_counter() - t0
        report.passes.append(FoldPass(index, before, after, secs, used))
        log(f"Folding constants | pass {index} | nodes {before} -> {after} ({before - after} folded) | {secs:.2f} s")
        if not changed or not unlocked:
            report.converged = True
            break
    if not report.converged:
        log(f"Folding constants | stopped after {index} passes (--num-passes); more folding may be possible")


def sanitize(
    model,
    *,
    fold_constants: bool = False,
    num_passes: Optional[int] = None,
    fold_size_threshold: Optional[int] = None,
    partitioning: str = "auto",
    fold_shapes: bool = True,
    input_shapes: Optional[Mapping[str, Sequence]] = None,
    cleanup: bool = False,
    toposort: bool = False,
    validate: bool = True,
    per_pass_shape_inference: bool = True,
    external_data_dir: Optional[str] = None,
    log: LogFn = _nolog,
):
    """Simplify ``model``; returns (new model, SanitizeReport). ``model`` may be modified.

    ``input_shapes`` freezes graph input shapes and re-infers every shape. With
    ``fold_constants``, folding repeats until a pass changes nothing (at most
    ``num_passes``); each pass re-infers shapes (with data propagation) so shape
    computations unlocked by the previous fold fold in the next one; graph inputs keep
    their dynamic dims. ``partitioning``: ``auto`` (whole graph at once, then part by
    part if that fails), ``none``, ``basic``, ``recursive``. ``fold_size_threshold``
    (bytes) keeps bigger tensors computed at run time. Without ``per_pass_shape_inference``
    shapes are inferred once, before the first pass. ``input_shapes`` naming a tensor that
    is not a graph input is ignored, with a warning.

    With ``validate`` (the default), the folded model must load in ONNX-Runtime and give
    the input model's outputs on generated inputs; when it does not, folding is redone
    with less (no If inlining; then only outside subgraphs; then without the nodes whose
    folded values are wrong; at last not at all), and one log line says what was left
    unfolded and why. ``external_data_dir`` is where weights not loaded live.
    """
    check_sanitize_options(partitioning, num_passes)
    t_start = time.perf_counter()
    report = SanitizeReport(nodes_before=count_model_nodes(model))
    shell = _model_shell(model)

    if input_shapes:
        input_shapes = _only_graph_inputs(model, input_shapes, log)
    inputs_before = None
    if input_shapes:
        inputs_before = [_copied(vi) for vi in model.graph.input]
        override_input_shapes(model, dict(input_shapes), inplace=True)
        infer_shapes_in_place(model, reset_outputs=True)
        log(f"Input shapes overridden: {', '.join(f'{k}:{list(v)}' for k, v in input_shapes.items())}; "
            "shapes re-inferred")
        if validate and not fold_constants:  # (with folding, the folded model's validation checks this)
            _Validation(model, external_data_dir, inputs_before).check_override()
    elif fold_constants:
        infer_shapes_in_place(model)

    if not (fold_constants or cleanup or toposort):
        report.nodes_after = count_model_nodes(model)
        report.seconds = time.perf_counter() - t_start
        return model, report

    gs = _import_gs()
    check_structure(model)

    def finish(graph):
        if cleanup or fold_constants:
            with _quiet_gs(), _gs_step("clean up"):
                graph.cleanup()
        if toposort:
            with _quiet_gs(), _gs_step("sort"):
                graph.toposort()
        with _gs_step("export"):
            return _export(gs, graph, shell)

    def build(level: Optional[str], excluded: set):
        with _quiet_gs(), _gs_step("import"):
            graph = gs.import_onnx(model)
        if level is not None:
            _fold_passes(gs, graph, shell, report, level=level, num_passes=num_passes, partitioning=partitioning,
                         size_threshold=fold_size_threshold, fold_shapes=fold_shapes, excluded=excluded, log=log,
                         per_pass_shapes=per_pass_shape_inference)
        return finish(graph)

    _refuse_damaged(model, fold_constants, external_data_dir)
    try:
        if not fold_constants:
            result = build(None, set())
        else:
            result = _fold_validated(model, build, validate, external_data_dir, log, inputs_before)
    except InputError:
        if not _has_non_tensor_types(model):
            raise
        # onnx-graphsurgeon cannot export optional/sequence values in some models.
        log("Folding constants | onnx-graphsurgeon cannot handle this model's optional/sequence values; "
            "the model is written unfolded")
        result = model
    report.nodes_after = count_model_nodes(result)
    report.seconds = time.perf_counter() - t_start
    return result, report


def _refuse_damaged(model, folding: bool, external_data_dir: Optional[str]) -> None:
    """Folding reads weights: a tensor whose data does not fill its dims is the input's fault,
    said in one line before any work (ONNX-Runtime would refuse the model too). Weights still in
    their external file are measured there (a missing or truncated file is its own error)."""
    if not folding:
        return
    sizer = None
    if external_data_dir is not None:
        base = external_data_dir

        def sizer(tensor) -> int:
            from toolkit.core.weights import ref_source

            return ref_source(tensor, base)[2]

    damaged = damaged_tensor(model, sizer)
    if damaged:
        raise InputError(f"the model's data is damaged: {damaged}; re-export the model (nothing was folded)")


def _copied(message):
    copy = type(message)()
    copy.CopyFrom(message)
    return copy


def _only_graph_inputs(model, input_shapes: Mapping[str, Sequence], log: LogFn) -> Dict[str, Sequence]:
    inits = {t.name for t in model.graph.initializer}
    inputs = [i.name for i in model.graph.input if i.name not in inits]
    kept = {k: v for k, v in input_shapes.items() if k in inputs}
    for name in input_shapes:
        if name not in kept:
            log(f"warning: '{name}' is not an input of the model (its inputs: {', '.join(inputs) or 'none'}); "
                "its shape override is ignored")
    return kept


def _fold_validated(model, build, validate: bool, external_data_dir: Optional[str], log: LogFn,
                    inputs_before_override=None):
    """Fold with ``build(level, excluded)``; validate and fall back level by level."""
    if not validate:
        return build("full", set())
    check = _Validation(model, external_data_dir, inputs_before_override)
    check.start()
    failures: list = []
    result = None
    for level, how in _FOLD_LEVELS:
        if level == "skip-wrong":
            excluded: set = set()
            for _ in range(4):
                wrong = check.wrong_constants(result)
                if not wrong or wrong <= excluded:
                    break
                excluded |= wrong
                result = build("top-only", excluded)
                err = check.check(result)
                if err is None:
                    shown = ", ".join(sorted(excluded)[:3]) + (", ..." if len(excluded) > 3 else "")
                    log(f"Folding constants | left unfolded: {len(excluded)} tensor(s) whose folded values were "
                        f"wrong ({shown}), and everything inside If/Loop/Scan bodies; first try: {failures[0]}")
                    return result
            continue
        if failures:
            log(f"Folding constants | the folded model failed validation ({failures[-1]}); folding again {how}")
        result = build(level, set())
        err = check.check(result)
        if err is None:
            if check.skip_reason:
                log(f"Folding constants | the folded model was not validated: {check.skip_reason}")
            elif failures:
                what = "constant-condition If branches" if level == "no-inline" else "everything inside If/Loop/Scan bodies"
                log(f"Folding constants | left unfolded: {what}; folding them broke the model ({failures[0]})")
            return result
        failures.append(err)
    log(f"Folding constants | left unfolded: everything; every folded model failed validation ({failures[0]}); "
        "the model is written without folding")
    return build(None, set())


# ---------------------------------------------------------------------- graph outputs, DDS bounds, fallback shapes


def mark_outputs(model, names: Sequence[str]) -> None:
    """Make ``names`` the graph outputs of ``model`` (in place); ``["mark", "all"]`` marks every
    tensor a node of the top graph computes. Types come from shape inference where known."""
    known = top_tensor_names(model)
    g = model.graph
    if list(names) == ["mark", "all"]:
        names = [o for n in g.node for o in n.output if o]
    else:
        for name in names:
            if name not in set(known):
                raise _unknown_name_error(name, known, "output")
    names = list(dict.fromkeys(names))
    metas = infer_tensor_meta(model, fallback=False, names=names)
    old = {o.name: o for o in g.output}
    new = []
    for name in names:
        if name in old:
            new.append(old[name])
            continue
        new.append(_value_info(name, metas.get(name)))
    del g.output[:]
    g.output.extend(new)


def _value_info(name: str, meta: Optional[TensorMeta]):
    from onnx import ValueInfoProto, helper

    from toolkit.core.meta import dtype_to_onnx

    if meta is None or not meta.dtype or meta.dtype.endswith("_type"):
        vi = ValueInfoProto()
        vi.name = name
        return vi
    shape = None if meta.shape is None else [d if d is not None else "" for d in meta.shape]
    vi = helper.make_tensor_value_info(name, dtype_to_onnx(meta.dtype), shape)
    return vi


# Ops whose output size a runtime value decides: op -> indices of those inputs.
_DDS_INPUTS = {"Range": (1,), "Pad": (1,), "Resize": (3,), "Tile": (1,), "Expand": (1,)}


def unbounded_dds_tensors(model) -> List[str]:
    """Tensors that decide a data-dependent output size with no upper bound.

    A node of ``_DDS_INPUTS`` whose output has a dim that shape inference cannot tie to the
    inputs' dims (unknown, or a new symbol) gets its size from a runtime input; that input
    is unbounded unless it is a constant or already goes through a ``Min``.
    """
    from toolkit.core.model import infer_shapes, value_info_meta

    inferred = infer_shapes(light_copy(model), data_prop=True)
    g = inferred.graph
    metas = {vi.name: value_info_meta(vi) for vi in list(g.value_info) + list(g.output)}
    symbols: set = set()
    for vi in g.input:
        m = value_info_meta(vi)
        symbols.update(d for d in (m.shape or ()) if isinstance(d, str))
    const = {t.name for t in g.initializer}
    producer = {}
    for node in g.node:
        for o in node.output:
            producer[o] = node
        if node.op_type == "Constant":
            const.update(node.output)
    found: List[str] = []
    for node in g.node:
        new_dims = False
        for o in node.output:
            m = metas.get(o)
            if m is None or m.shape is None:
                new_dims = True
                continue
            for d in m.shape:
                if d is None or (isinstance(d, str) and d not in symbols):
                    new_dims = True
                if isinstance(d, str):
                    symbols.add(d)
        if not new_dims or node.op_type not in _DDS_INPUTS:
            continue
        for idx in _DDS_INPUTS[node.op_type]:
            if idx >= len(node.input) or not node.input[idx]:
                continue
            name = node.input[idx]
            prod = producer.get(name)
            if name in const or prod is None or prod.op_type == "Min" or name in found:
                continue
            found.append(name)
    return found


def parse_upper_bounds(specs: Sequence[str]) -> Dict[str, int]:
    """``["1000", "t:4000"]`` -> ``{"": 1000, "t": 4000}`` ("" is every other tensor)."""
    bounds: Dict[str, int] = {}
    for spec in specs:
        name, _, value = spec.rpartition(":")
        try:
            bound = int(value)
        except ValueError:
            raise UsageError(
                f"--set-unbounded-dds-upper-bound: '{spec}' is not BOUND or TENSOR:BOUND (an integer)"
            ) from None
        bounds[name] = bound
    return bounds


def set_unbounded_dds_upper_bounds(model, bounds: Mapping[str, int], log: LogFn = _nolog) -> Dict[str, int]:
    """Bound each unbounded data-dependent-shape tensor with a ``Min`` (in place); returns what was set."""
    import numpy as np
    from onnx import helper, numpy_helper

    from toolkit.core.meta import dtype_to_numpy

    targets = unbounded_dds_tensors(model)
    named = [n for n in bounds if n]
    for name in named:
        if name not in targets:
            shown = ", ".join(targets) or "none"
            raise InputError(
                f"'{name}' is not a tensor with an unbounded data-dependent shape; those are: {shown} "
                "(`toolkit inspect model --list-unbounded-dds` lists them)"
            )
    metas = infer_tensor_meta(model, fallback=False, names=targets)
    g = model.graph
    taken = set(top_tensor_names(model))
    applied: Dict[str, int] = {}
    for name in targets:
        bound = bounds.get(name, bounds.get(""))
        if bound is None:
            continue
        meta = metas.get(name)
        dtype = dtype_to_numpy(meta.dtype) if meta is not None and meta.dtype else np.int64
        values = np.array(bound, dtype=dtype)
        if meta is not None and meta.shape:
            values = np.full(len(meta.shape), bound, dtype=dtype)
        copy = fresh_name(name + "_unbounded", taken)
        const = fresh_name(name + "_upper_bound", taken)
        pos = next(i for i, n in enumerate(g.node) if name in n.output)
        producer = g.node[pos]
        producer.output[list(producer.output).index(name)] = copy
        g.initializer.append(numpy_helper.from_array(values, const))
        g.node.insert(pos + 1, helper.make_node("Min", [copy, const], [name], name=fresh_name(name + "_min", taken)))
        applied[name] = bound
    log(f"Upper bounds set: {', '.join(f'{k}<={v}' for k, v in applied.items()) or 'none needed'}")
    return applied


def assume_dynamic_dims(model, input_shapes: Optional[Mapping[str, Sequence]], log: LogFn) -> Dict[str, list]:
    """Input shapes for running the model: ``input_shapes``, and 1 for every other dynamic dim
    (said in one line)."""
    from toolkit.core.model import graph_io_meta

    shapes = {k: list(v) for k, v in (input_shapes or {}).items()}
    assumed = []
    ins, _ = graph_io_meta(model)
    for m in ins:
        if m.name in shapes or m.shape is None or not m.dtype or m.dtype.endswith("_type"):
            continue
        if any(not isinstance(d, int) for d in m.shape):
            shapes[m.name] = [d if isinstance(d, int) else 1 for d in m.shape]
            assumed.append(f"{m.name}:{format_spec_shape(tuple(shapes[m.name]))}")
    if assumed:
        log(f"warning: dynamic input dims assumed to be 1 for shape inference: {', '.join(assumed)} "
            "(--model-input-shapes / --override-input-shapes set them)")
    return shapes


def apply_fallback_shapes(model, *, input_shapes=None, external_data_dir=None, log: LogFn = _nolog) -> None:
    """Run the model on ONNX-Runtime and write every tensor's real shape into it (in place):
    graph inputs (dynamic dims assumed 1 unless given), intermediate value_info, outputs."""
    shapes = assume_dynamic_dims(model, input_shapes, log)
    if shapes:
        override_input_shapes(model, shapes, inplace=True)
    metas = infer_tensor_meta(model, force_fallback=True, external_data_dir=external_data_dir)
    g = model.graph
    outputs = {o.name for o in g.output}
    inputs = {i.name for i in g.input}
    inits = {t.name for t in g.initializer}
    del g.value_info[:]
    for name, meta in metas.items():
        if name in inits or name in inputs or not is_complete(meta) or not meta.dtype or meta.dtype.endswith("_type"):
            continue
        vi = _value_info(name, meta)
        if name in outputs:
            for o in g.output:
                if o.name == name:
                    o.type.CopyFrom(vi.type)
        else:
            g.value_info.append(vi)
    log(f"Shapes of {len(metas)} tensors found by running ONNX-Runtime")


# ---------------------------------------------------------------------- --optimize


def optimize(model, *, validate: bool = True, external_data_dir: Optional[str] = None, log: LogFn = _nolog):
    """ONNX-Runtime's basic-level graph optimizations (constant folding, redundant node
    elimination, Conv+BatchNorm/Add/Mul fusions into standard ops), saved back as ONNX.

    Basic level is the one ONNX-Runtime documents as hardware-independent: its result uses
    only standard ops. A result with ops of a domain the input model does not import, or one
    that fails validation, is not used (the input is returned, and a line says why).
    """
    import os
    import tempfile

    import onnx

    from toolkit.core.model import PROTOBUF_LIMIT

    try:
        import onnxruntime as ort
    except ImportError:
        from toolkit.core.errors import DependencyError

        raise DependencyError("--optimize needs onnxruntime; pip install onnxruntime") from None
    if model.ByteSize() > PROTOBUF_LIMIT:
        log("Optimizing | skipped: the model is over 2 GB")
        return model
    before = count_model_nodes(model)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="toolkit_optimize_") as tmp:
        out = os.path.join(tmp, "optimized.onnx")
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        so.optimized_model_filepath = out
        so.log_severity_level = 4
        if external_data_dir:
            so.add_session_config_entry("session.model_external_initializers_file_folder_path", external_data_dir)
        try:
            ort.InferenceSession(_constant_initializers(model).SerializeToString(), so,
                                 providers=["CPUExecutionProvider"])
            result = onnx.load(out)
        except Exception as exc:  # noqa: BLE001 - ORT's own exception types
            log(f"Optimizing | skipped: ONNX-Runtime cannot optimize this model ({one_line(exc, first_line=True)})")
            return model
    allowed = {o.domain for o in model.opset_import} | {"", "ai.onnx"}
    foreign = sorted({n.domain for g in walk_graphs(result.graph) for n in g.node} - allowed)
    if foreign:
        log(f"Optimizing | skipped: the optimized model uses ops of {', '.join(foreign)}, which the model does not import")
        return model
    _restore_model_fields(result, model)
    done: Dict[str, int] = {}
    if not any(attr.type in (5, 10) for n in result.graph.node for attr in n.attribute):  # no subgraphs
        done, result = _after_optimizer(result, model)
    if validate:
        err = _Validation(model, external_data_dir).check(result)
        if err is not None:
            log(f"Optimizing | skipped: the optimized model failed validation ({err})")
            return model
    also = "".join(f", {n} {what}" for what, n in done.items())
    log(f"Optimizing | ONNX-Runtime basic level{also} | nodes {before} -> {count_model_nodes(result)} | "
        f"{time.perf_counter() - t0:.2f} s")
    return result


SYMBOLIC_SHAPES_MAX_NODES = 5000  # --optimize's Reshape-target rule runs symbolic shape inference up to this size


def _after_optimizer(result, model):
    """What ``--optimize`` adds to ONNX-Runtime's basic level (top graph): duplicate nodes merged,
    Reshape targets computed from a dim the data copies with 0 made constant (see
    :func:`toolkit.surgeon.fold_noops.constant_reshape_targets`; the shapes that decides on come
    from symbolic shape inference, and are not written), and :mod:`toolkit.surgeon.fusions`.
    Returns ``({what was done: how many}, model)``."""
    from toolkit.surgeon.fold_noops import computed_reshape_targets, constant_reshape_targets
    from toolkit.surgeon.fusions import optimizer_rewrites

    gs = _import_gs()
    with _quiet_gs(), _gs_step("import"):
        graph = gs.import_onnx(result)
    merged = _eliminate_common_subexpressions(gs, graph)
    small = len(graph.nodes) <= SYMBOLIC_SHAPES_MAX_NODES  # its cost grows with the graph (~2 ms a node)
    inferred = _symbolic_shapes(result) if small and computed_reshape_targets(gs, graph) else {}
    lent = {}
    for name, tensor in graph.tensors().items():
        if name in inferred and not isinstance(tensor, gs.Constant):
            lent[name] = tensor.shape
            tensor.shape = inferred[name]
    targets = constant_reshape_targets(gs, graph, copy_dynamic=True)
    tensors = graph.tensors()
    for name, shape in lent.items():
        if name in tensors:
            tensors[name].shape = shape
    rewrites = optimizer_rewrites(gs, graph)
    done = {"duplicate node(s) merged": merged, "Reshape target(s) made constant": targets, **rewrites}
    done = {what: n for what, n in done.items() if n}
    if not done:
        return done, result
    with _quiet_gs(), _gs_step("clean up"):
        graph.cleanup()
    with _gs_step("export"):
        return done, _export(gs, graph, model)


def _symbolic_shapes(model) -> Dict[str, tuple]:
    """Shapes of the top graph's tensors by ONNX-Runtime's symbolic shape inference: numbers
    where known, other dims as None (empty when it cannot run)."""
    try:
        import sympy  # noqa: F401  (symbolic inference needs it)
        from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference
    except ImportError:
        return {}
    try:
        with _quiet_ort(), contextlib.redirect_stdout(io.StringIO()):
            inferred = SymbolicShapeInference.infer_shapes(light_copy(model), auto_merge=True)
    except Exception:  # noqa: BLE001 - an optional help; without it fewer targets are made constant
        return {}
    if inferred is None:
        return {}
    found: Dict[str, tuple] = {}
    for vi in list(inferred.graph.value_info) + list(inferred.graph.output):
        t = vi.type.tensor_type
        if vi.type.HasField("tensor_type") and t.HasField("shape"):
            found[vi.name] = tuple(d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim)
    return found


def _constant_initializers(model):
    """``model`` with its initializers constant for ONNX-Runtime's optimizer.

    Before IR version 4 every initializer is also listed as a graph input, which makes it an
    input with a default value: ONNX-Runtime then fuses nothing that reads one (Conv +
    BatchNormalization...). Folding already treated them as constants; the copy given to the
    optimizer says so (IR 4, initializers not listed as inputs). The IR version and the
    input list are restored on the result."""
    if model.ir_version >= 4:
        return model
    from toolkit.core.shapes import light_copy

    light = light_copy(model, stub_bytes=1 << 62)  # every weight shared, none copied
    inits = {t.name for t in light.graph.initializer}
    kept = [i for i in light.graph.input if i.name not in inits]
    del light.graph.input[:]
    light.graph.input.extend(kept)
    light.ir_version = 4
    return light


# Ops whose two calls on the same inputs may differ, or that have effects.
_NOT_MERGED = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial", "Bernoulli",
               "Dropout"}


def _array_key(values):
    import hashlib

    import numpy as np

    arr = np.ascontiguousarray(values)
    digest = hashlib.blake2b(memoryview(arr).cast("B"), digest_size=16).hexdigest() if arr.size else ""
    return ("a", str(arr.dtype), arr.shape, digest)


class _NodeKeys:
    """Keys that are equal for nodes computing the same thing: op, attributes, inputs (constants
    by value; hashed only when another constant has the same dtype and shape)."""

    def __init__(self, gs, graph):
        self.gs = gs
        self.by_shape: Dict[Any, int] = {}
        for t in graph.tensors().values():
            if isinstance(t, gs.Constant):
                k = (str(t.dtype), tuple(t.shape or ()))
                self.by_shape[k] = self.by_shape.get(k, 0) + 1
        self.const_keys: Dict[int, Any] = {}

    def tensor(self, t):
        if not isinstance(t, self.gs.Constant):
            return ("v", t.name)
        key = self.const_keys.get(id(t))
        if key is None:
            lazy = getattr(t._values, "tensor", None)
            external = lazy is not None and lazy.data_location == 1  # EXTERNAL: not read here
            if external or self.by_shape.get((str(t.dtype), tuple(t.shape or ())), 0) < 2:
                key = ("c", t.name)  # nothing else can equal it (or it is not read)
            else:
                key = _array_key(t.values)
            self.const_keys[id(t)] = key
        return key

    def attr(self, value):
        import numpy as np

        if isinstance(value, self.gs.Constant):
            return _array_key(value.values)
        if isinstance(value, np.ndarray):
            return _array_key(value)
        if isinstance(value, (list, tuple)):
            return tuple(self.attr(v) for v in value)
        if isinstance(value, (int, float, str, bytes, type(None), np.generic)):
            return (type(value).__name__, repr(value))
        raise TypeError(type(value).__name__)  # graphs, refs...: not merged

    def node(self, node):
        """The node's key, or None for a node never merged."""
        if node.domain not in ("", "ai.onnx", None) or node.op in _NOT_MERGED or not node.outputs:
            return None
        try:
            return (node.op, tuple(self.tensor(t) for t in node.inputs),
                    tuple(sorted((k, self.attr(v)) for k, v in node.attrs.items())), len(node.outputs))
        except TypeError:
            return None


def _eliminate_common_subexpressions(gs, graph) -> int:
    """Merge nodes that compute the same thing: same op, attributes and inputs, constant
    inputs compared by value (two Convs reading equal weights from the same tensor).
    Top graph only, standard ops only, never a node whose output is a graph output.
    Returns how many nodes were merged away (graph.cleanup() removes them)."""
    keys = _NodeKeys(gs, graph)
    with _quiet_gs(), _gs_step("sort"):
        graph.toposort()
    graph_outputs = {id(t) for t in graph.outputs}
    seen: Dict[Any, Any] = {}
    merged = 0
    for node in graph.nodes:
        if any(id(o) in graph_outputs for o in node.outputs):
            continue
        key = keys.node(node)
        if key is None:
            continue
        kept = seen.setdefault(key, node)
        if kept is node:
            continue
        for dup, same in zip(node.outputs, kept.outputs):
            for consumer in list(dup.outputs):
                for i, t in enumerate(consumer.inputs):
                    if t is dup:
                        consumer.inputs[i] = same
        node.outputs.clear()
        merged += 1
    return merged

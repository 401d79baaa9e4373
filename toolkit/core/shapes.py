"""Shapes and dtypes of every tensor of a model's top graph.

:func:`infer_tensor_meta` asks ONNX shape inference first (with data propagation) and,
where that leaves tensors unknown, runs the model once on ONNX-Runtime with every tensor
marked as an output and reads the real shapes and dtypes.
:func:`override_input_shapes` fixes the dims of (dynamic) graph inputs.

Neither function modifies the model it is given. Weights are never deep-copied for
shape inference: big initializers are replaced by shape-only stubs in a light copy.
No Typer or Rich here.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Set, Tuple

import numpy as np
import onnx

from toolkit.core.errors import DependencyError, InputError, one_line, ort_errors
from toolkit.core.process.interrupt import interruptible_run
from toolkit.core.graph.graphs import (
    attribute_graphs,
    copy_field,
    fed_inputs,
    has_external_data,
    node_outputs,
    tensor_nbytes,
)
from toolkit.core.meta import TensorMeta, dtype_from_numpy, dtype_from_onnx, dtype_to_numpy, format_spec_shape, is_fixed_dim
from toolkit.core.io.model import PROTOBUF_LIMIT, graph_io_meta, value_info_meta

# Initializers bigger than this are replaced by shape-only stubs for shape inference.
STUB_BYTES = 1 << 16
STUB_LOCATION = "__toolkit_shape_stub__"


# ---------------------------------------------------------------------- graph helpers


def subgraph_outer_reads(node) -> List[str]:
    """Names of outer-scope tensors that the subgraphs (If/Loop/Scan bodies) of ``node`` read.

    A body may read any tensor visible in an enclosing scope without listing it as a node
    input; a cut that keeps ``node`` must keep those tensors too. Nested bodies are
    followed; names defined inside a body (its inputs, initializers, node outputs) are
    not reported.
    """
    reads: List[str] = []
    seen: Set[str] = set()

    def visit_graph(g, outer_defined: Set[str]) -> None:
        local = set(outer_defined)
        local.update(i.name for i in g.input)
        local.update(t.name for t in g.initializer)
        local.update(t.values.name for t in g.sparse_initializer)
        for n in g.node:
            for name in n.input:
                if name and name not in local and name not in seen:
                    seen.add(name)
                    reads.append(name)
            for attr in n.attribute:
                for sub in attribute_graphs(attr):
                    visit_graph(sub, local)
            local.update(o for o in n.output if o)

    for attr in node.attribute:
        for sub in attribute_graphs(attr):
            visit_graph(sub, set())
    return reads


def node_reads(node) -> List[str]:
    """Every tensor ``node`` needs: its non-empty inputs, then what its bodies read from outside."""
    out = [n for n in node.input if n]
    for name in subgraph_outer_reads(node):
        if name not in out:
            out.append(name)
    return out


def top_tensor_names(model) -> List[str]:
    """Names of every tensor of the top graph: inputs, initializers, node outputs (in order)."""
    g = model.graph
    names: List[str] = []
    seen: Set[str] = set()
    for name in [i.name for i in g.input] + [t.name for t in g.initializer] + [
        t.values.name for t in g.sparse_initializer
    ]:
        if name not in seen:
            seen.add(name)
            names.append(name)
    for node in g.node:
        for name in node.output:
            if name and name not in seen:
                seen.add(name)
                names.append(name)
    return names


# ---------------------------------------------------------------------- copies


def _stub_tensor(t):
    """A shape-only stand-in for a big initializer (dims and type, no data)."""

    stub = onnx.TensorProto()
    stub.name = t.name
    stub.dims.extend(t.dims)
    stub.data_type = t.data_type
    stub.data_location = onnx.TensorProto.EXTERNAL
    entry = stub.external_data.add()
    entry.key = "location"
    entry.value = STUB_LOCATION
    return stub


def light_copy(model, stub_bytes: int = STUB_BYTES):
    """A copy of ``model`` whose big top-level initializers are shape-only stubs.

    Good for shape inference and structure edits; not runnable. The original is untouched
    and its weights are not copied.
    """

    new = onnx.ModelProto()
    for field, value in model.ListFields():
        if field.name == "graph":
            continue
        copy_field(new, field.name, value)
    g = new.graph
    for field, value in model.graph.ListFields():
        if field.name == "initializer":
            continue
        copy_field(g, field.name, value)
    for t in model.graph.initializer:
        if tensor_nbytes(t) > stub_bytes or t.data_location == onnx.TensorProto.EXTERNAL:
            g.initializer.append(_stub_tensor(t))
        else:
            g.initializer.append(t)
    return new




# ---------------------------------------------------------------------- input shapes


def override_input_shapes(model, input_shapes: Mapping[str, Sequence], *, inplace: bool = False):
    """Fix the dims of graph inputs: ``{"x": (1, 3, 224, 224)}``.

    Returns the updated model (a copy unless ``inplace``). A name that is not a graph
    input, or a shape whose rank differs from the input's known rank, is an InputError.
    Dims may be ints, names (symbolic) or None (unknown). Stale shapes of intermediate
    tensors (``value_info``) are dropped so that shape inference recomputes them.
    """
    if not input_shapes:
        return model if inplace else _copy(model)
    _check_input_shapes(model, input_shapes)
    out = model if inplace else _copy(model)
    g = out.graph
    for vi in fed_inputs(g):
        if vi.name in input_shapes:
            _set_shape(vi.type.tensor_type, input_shapes[vi.name])
    del g.value_info[:]
    return out


def _check_input_shapes(model, input_shapes: Mapping[str, Sequence]) -> None:
    """InputError unless every shape of ``input_shapes`` can be set on its graph input (not an initializer)."""
    inputs = {vi.name: vi for vi in fed_inputs(model.graph)}
    for name, shape in input_shapes.items():
        _check_input_shape(inputs, name, shape)


def _check_input_shape(inputs: Mapping[str, Any], name: str, shape: Optional[Sequence]) -> None:
    """InputError unless ``shape`` can be set on graph input ``name`` (of ``inputs``)."""
    if name not in inputs:
        known = ", ".join(inputs) or "(none)"
        raise InputError(f"'{name}' is not an input of the model; its inputs are: {known}")
    if shape is None:
        raise InputError(f"input '{name}': a shape is needed, e.g. {name}:[1,3,224,224]")
    vi = inputs[name]
    if vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape"):
        rank = len(vi.type.tensor_type.shape.dim)
        if rank != len(shape):
            raise InputError(
                f"input '{name}' has rank {rank} but the shape given, {format_spec_shape(tuple(shape))}, "
                f"has rank {len(shape)}"
            )
    if vi.type.WhichOneof("value") not in (None, "tensor_type"):
        raise InputError(f"input '{name}' is not a tensor; its shape cannot be set")


def _set_shape(tt, shape: Sequence) -> None:
    """``shape`` into tensor type ``tt``: ints as values, names as parameters, anything else unknown."""
    tt.ClearField("shape")
    tshape = tt.shape
    tshape.SetInParent()
    for d in shape:
        dim = tshape.dim.add()
        if is_fixed_dim(d):
            dim.dim_value = int(d)
        elif isinstance(d, str) and d:
            dim.dim_param = d


def _copy(model):

    new = onnx.ModelProto()
    new.CopyFrom(model)
    return new


# ---------------------------------------------------------------------- inference


def _meta_of_initializer(t) -> TensorMeta:

    return TensorMeta(t.name, tuple(int(d) for d in t.dims), dtype_from_onnx(t.data_type))


def collect_inferred(inferred) -> Dict[str, TensorMeta]:

    g = inferred.graph
    metas: Dict[str, TensorMeta] = {}
    for vi in list(g.value_info) + list(g.output) + list(g.input):
        meta = _forget_generated_dims(value_info_meta(vi))
        old = metas.get(vi.name)
        if old is None or _score(meta) > _score(old):
            metas[vi.name] = meta
    for t in g.initializer:
        metas[t.name] = _meta_of_initializer(t)
    for st in g.sparse_initializer:
        from toolkit.core.meta import dtype_from_onnx

        metas[st.values.name] = TensorMeta(st.values.name, tuple(int(d) for d in st.dims), dtype_from_onnx(st.values.data_type))
    return metas


def _forget_generated_dims(meta: TensorMeta) -> TensorMeta:
    """Dims named ``unk__N`` are placeholders ONNX shape inference invents for unknown dims:
    they are unknown (None), so that a model's own names (``sequence_length``) and values win."""
    if meta.shape is None or not any(isinstance(d, str) and d.startswith("unk__") for d in meta.shape):
        return meta
    shape = tuple(None if isinstance(d, str) and d.startswith("unk__") else d for d in meta.shape)
    return TensorMeta(meta.name, shape, meta.dtype)


def declared_tensor_meta(model) -> Dict[str, TensorMeta]:
    """Shapes and dtypes the model itself states (inputs, outputs, value_info, initializers)."""
    return collect_inferred(model)


def _score(meta: TensorMeta) -> int:
    s = 0
    if meta.dtype:
        s += 1
    if meta.shape is not None:
        s += 2 + sum(1 for d in meta.shape if d is not None)
    return s


_NON_TENSOR_KINDS = ("sequence_type", "map_type", "optional_type", "sparse_tensor_type", "opaque_type")


def is_complete(meta: Optional[TensorMeta]) -> bool:
    """True when dtype, rank and every dim are known (symbolic dims count as known).

    Non-tensor values (sequences, maps, optionals) count as complete: they have no shape.
    """
    if meta is not None and meta.dtype in _NON_TENSOR_KINDS:
        return True
    return bool(meta and meta.dtype and meta.shape is not None and all(d is not None for d in meta.shape))


def _is_missing(meta: Optional[TensorMeta]) -> bool:
    """Rank or dtype unknown (non-tensor values are never missing)."""
    if meta is not None and meta.dtype in _NON_TENSOR_KINDS:
        return False
    return meta is None or not meta.dtype or meta.shape is None


def infer_tensor_meta(
    model,
    *,
    input_shapes: Optional[Mapping[str, Sequence]] = None,
    force_fallback: bool = False,
    fallback: bool = True,
    names: Optional[Iterable[str]] = None,
    external_data_dir: Optional[str] = None,
    feed: Optional[Mapping[str, object]] = None,
) -> Dict[str, TensorMeta]:
    """Shape and dtype of every tensor of the top graph, keyed by name.

    Graph inputs, initializers and every node output are included. ``input_shapes``
    (``{name: shape}``) fixes dynamic graph inputs first. ONNX shape inference with data
    propagation runs first; where it leaves a tensor's rank or dtype unknown (or an
    unnamed dim unknown), or always with ``force_fallback``, and ``fallback`` is True,
    the model runs once on ONNX-Runtime on generated inputs with every tensor marked as
    an output, and the real shapes and dtypes are read back.

    ``names`` limits which tensors must be known to avoid the fallback (default: all).
    The fallback needs every graph input's shape to be fixed; a dynamic input without a
    shape in ``input_shapes`` is an InputError naming it when the fallback is forced or a
    tensor's rank or dtype is still unknown (unknown single dims are then left as None).
    Tensors nothing could describe stay with shape/dtype None. Never modifies ``model``.
    ``external_data_dir`` is where weights live for models loaded without their
    external data (needed only by the fallback). ``feed`` (input name -> array) is what
    the fallback runs on instead of generated inputs.
    """
    work = light_copy(model)
    if input_shapes:
        override_input_shapes(work, dict(input_shapes), inplace=True)
    all_names = top_tensor_names(work)
    metas = collect_inferred(work) if force_fallback else _inferred_metas(work)
    wanted = list(names) if names is not None else all_names
    if fallback:
        _fill_by_running(model, work, metas, wanted, force_fallback, input_shapes, external_data_dir, feed)
    # Every tensor of the top graph appears in the result.
    return {name: metas.get(name) or TensorMeta(name) for name in all_names}


def _inferred_metas(work) -> Dict[str, TensorMeta]:
    """What ONNX shape inference (with data propagation) says of ``work``'s tensors."""
    from toolkit.core.io.model import infer_shapes

    return collect_inferred(infer_shapes(work, data_prop=True))


def _fill_by_running(model, work, metas: Dict[str, TensorMeta], wanted: Sequence[str], force_fallback: bool,
                     input_shapes, external_data_dir: Optional[str], feed) -> None:
    """The fallback of :func:`infer_tensor_meta`: when a ``wanted`` tensor is not fully known (or
    always with ``force_fallback``), run ``model`` on ONNX-Runtime and take the shapes it gives."""
    need_missing = [n for n in wanted if _is_missing(metas.get(n))]
    if not (force_fallback or any(not is_complete(metas.get(n)) for n in wanted)):
        return
    must = force_fallback or bool(need_missing)
    dynamic = _unfixed_inputs(work)
    if dynamic:
        if must:
            raise _dynamic_input_error(dynamic[0], force_fallback, need_missing)
        return
    try:
        found = _run_for_shapes(model, work, input_shapes, external_data_dir, feed)
    except InputError:
        if must:
            raise
        return
    _take_found(metas, found, force_fallback)


def _take_found(metas: Dict[str, TensorMeta], found: Mapping[str, TensorMeta], force: bool) -> None:
    """The shapes a run ``found`` into ``metas``: in place of those not fully known (of all, with ``force``)."""
    for name, meta in found.items():
        old = metas.get(name)
        if force or old is None or not is_complete(old):
            metas[name] = meta


def _dynamic_input_error(dynamic, force_fallback: bool, need_missing: Sequence[str]) -> InputError:
    name, shape = dynamic
    why = "to run ONNX-Runtime for shapes" if force_fallback else (
        f"to find the shape of '{need_missing[0]}' by running ONNX-Runtime"
    )
    return InputError(
        f"input '{name}' has a dynamic shape {format_spec_shape(shape)}; give it {why} with "
        f"--model-input-shapes {name}:[...]"
    )


def _unfixed_inputs(model):
    """Graph inputs (not initializers) whose shape is not fully static: [(name, shape)]."""

    ins, _ = graph_io_meta(model)
    out = []
    for m in ins:
        if m.shape is None or any(not isinstance(d, int) for d in m.shape):
            out.append((m.name, m.shape))
    return out


# Generated inputs for a shape-finding run bigger than this are refused (bytes).
_MAX_FEED_BYTES = 4 * 2**30


def _generate_feed(model, seed: int = 1) -> Dict[str, object]:


    rng = np.random.default_rng(seed)
    feed: Dict[str, object] = {}
    ins, _ = graph_io_meta(model)
    for m in ins:
        if not m.dtype:
            raise InputError(f"input '{m.name}' has no tensor type; cannot run ONNX-Runtime for shapes")
        dtype = dtype_to_numpy(m.dtype)
        shape = tuple(int(d) for d in m.shape)
        if any(d < 0 for d in shape):
            raise InputError(f"input '{m.name}' has a negative dimension {list(shape)}; the model is corrupt")
        nbytes = int(np.prod(shape, dtype=object)) * max(dtype.itemsize, 1)
        if nbytes > _MAX_FEED_BYTES:
            raise InputError(
                f"input '{m.name}' of shape {list(shape)} would need {nbytes / 2**30:.1f} GiB to run ONNX-Runtime "
                "for shapes; give smaller shapes with --model-input-shapes"
            )
        feed[m.name] = _shape_finding_values(rng, shape, dtype)
    return feed


# the value every element of a generated input of this numpy kind holds (floats: random; others: zero)
_FILL_BY_KIND = {"b": True, "i": 1, "u": 1, "O": "a"}


def _shape_finding_values(rng, shape, dtype):
    if dtype.kind == "f":
        return rng.random(shape, dtype=np.float64).astype(dtype)
    if dtype.kind not in _FILL_BY_KIND:
        return np.zeros(shape, dtype=dtype)
    return np.full(shape, _FILL_BY_KIND[dtype.kind], dtype=dtype)


def _ort_session(runnable, external_data_dir: Optional[str]):
    """An ONNX-Runtime CPU session without graph optimizations for ``runnable`` (consumed):
    weights left external are read from ``external_data_dir``; a model over protobuf's limit
    goes through a temporary external-data file."""
    import onnxruntime as ort  # inspect and surgeon load this module without running a model

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 4  # its errors come back as exceptions, reported once
    if external_data_dir is not None:
        # weights stay on disk: ONNX-Runtime reads them from their folder itself
        so.add_session_config_entry("session.model_external_initializers_file_folder_path", external_data_dir)
    elif runnable.ByteSize() > PROTOBUF_LIMIT:
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "model.onnx")
            onnx.save_model(runnable, path, save_as_external_data=True, location="weights.data")
            return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    return ort.InferenceSession(runnable.SerializeToString(), so, providers=["CPUExecutionProvider"])


def run_on_ort(
    model,
    names: Optional[Sequence[str]] = None,
    *,
    purpose: str,
    feed: Optional[Mapping[str, object]] = None,
    input_shapes: Optional[Mapping[str, tuple]] = None,
    external_data_dir: Optional[str] = None,
):
    """Run a copy of ``model`` once on ONNX-Runtime (CPU, no graph optimization): returns
    ``(feed, {name: value})`` for tensors ``names`` (None: every output of every node).

    ``feed`` defaults to generated inputs of the (``input_shapes``-overridden) input shapes.
    ``purpose`` ends the error messages ("... to {purpose} failed: ...")."""

    _require_ort(purpose)
    runnable, external_refs = _runnable_copy(model, input_shapes, external_data_dir, purpose)
    _mark_outputs(runnable.graph, names)
    feed = dict(feed) if feed is not None else _generate_feed(runnable)
    try:
        sess = _ort_session(runnable, external_data_dir if external_refs else None)
        del runnable
        out_names = [o.name for o in sess.get_outputs()] if names is None else list(names)
        values = interruptible_run(sess, out_names, feed)
    except InputError:
        raise
    except ort_errors() as exc:
        msg = one_line(exc, first_line=True)
        raise InputError(f"running the model on ONNX-Runtime to {purpose} failed: {msg}") from None
    return feed, dict(zip(out_names, values))


def _require_ort(purpose: str) -> None:
    """DependencyError when ONNX-Runtime is not installed (it is needed to ``purpose``)."""
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        raise DependencyError(f"ONNX-Runtime is needed to {purpose}; install onnxruntime") from None


def _runnable_copy(model, input_shapes: Optional[Mapping[str, tuple]], external_data_dir: Optional[str],
                   purpose: str) -> Tuple[Any, bool]:
    """A copy of ``model`` that shares nothing mutable with it, its inputs of ``input_shapes``, and
    whether its weights are external (InputError when they are and no folder says where)."""
    runnable = onnx.ModelProto()
    runnable.CopyFrom(model)
    if input_shapes:
        override_input_shapes(runnable, dict(input_shapes), inplace=True)
    external_refs = has_external_data(runnable)
    if external_refs and external_data_dir is None:
        raise InputError(
            f"the model's weights are stored outside it and were not loaded; pass --external-data-dir "
            f"so ONNX-Runtime can run it to {purpose}"
        )
    return runnable, external_refs


def _mark_outputs(g, names: Optional[Sequence[str]]) -> None:
    """Tensors ``names`` (None: every output of every node) as outputs of graph ``g`` (not its inputs
    or initializers)."""
    skip = {o.name for o in g.output} | {i.name for i in g.input} | {t.name for t in g.initializer}
    wanted = node_outputs(g) if names is None else list(names)
    for name in wanted:
        if name and name not in skip:
            skip.add(name)
            g.output.add().name = name


def _run_for_shapes(original, work, input_shapes, external_data_dir, feed=None) -> Dict[str, TensorMeta]:
    """Run ``original`` (with ``work``'s input shapes) on ORT, every tensor an output.

    ``feed`` (input name -> array) replaces the generated inputs when given."""

    feed, values = run_on_ort(
        original, purpose="find tensor shapes", feed=feed, input_shapes=input_shapes, external_data_dir=external_data_dir
    )
    found: Dict[str, TensorMeta] = {}
    for name, value in values.items():
        if isinstance(value, np.ndarray):
            found[name] = TensorMeta(name, tuple(int(d) for d in value.shape), dtype_from_numpy(value.dtype))
    for name, value in feed.items():
        found[name] = TensorMeta(name, tuple(int(d) for d in value.shape), dtype_from_numpy(value.dtype))
    return found

"""`surgeon extract`: cut the subgraph between given tensors out of a model."""

from __future__ import annotations

import re
from typing import Dict, List, Mapping, Optional, Sequence

from toolkit.core.errors import InputError, UsageError, reraise_bug
from toolkit.core.meta import TensorMeta, format_meta, format_spec_shape
from toolkit.core.io.model import value_info_meta
from toolkit.core.shapes import (
    declared_tensor_meta,
    infer_tensor_meta,
    is_complete,
    node_reads,
    override_input_shapes,
    top_tensor_names,
)
from toolkit.surgeon.fold_noops import is_static_dim
from toolkit.surgeon.load import check_structure
from toolkit.surgeon.outputs import assume_dynamic_dims
from toolkit.surgeon.plumbing import (
    LogFn,
    all_tensors,
    check_known,
    export_graph,
    graphsurgeon_errors,
    gs_step,
    has_tensor_dtype,
    import_gs,
    initializer_named,
    is_non_tensor,
    keep_non_tensor_types,
    model_shell,
    nolog,
    non_tensor_types,
    non_tensor_value_types,
    np_dtype,
    quiet_gs,
    symbolic_shape_inference,
    tensor_value_info,
)


def dangling_tensors(model) -> List[tuple]:
    """[(tensor, node name, op)] for tensors that nodes read but nothing defines.

    Defined are graph inputs, initializers and node outputs (topological order is not
    required). Reads include what If/Loop/Scan bodies read from the outer graph.
    """
    g = model.graph
    defined = set(top_tensor_names(model))
    reads = [(name, node.name, node.op_type) for node in g.node for name in node_reads(node)]
    reads += [(o.name, "", "graph output") for o in g.output]
    out: Dict[str, tuple] = {}
    for read in reads:
        if read[0] not in defined:
            out.setdefault(read[0], read)
    return list(out.values())


def _check_cut_names(model, inputs, outputs) -> None:
    """InputError for a cut naming no tensor of the model, or an initializer as an input."""
    known = top_tensor_names(model)
    check_known([s.name for s in inputs or ()], known, "input")
    check_known([s.name for s in outputs or ()], known, "output")
    _check_not_initializers(model, inputs)


def _check_not_initializers(model, inputs: Optional[Sequence[TensorMeta]]) -> None:
    """InputError for a cut input that is an initializer (a constant, which no cut can feed)."""
    inits = {t.name for t in model.graph.initializer}
    for spec in inputs or ():
        if spec.name in inits:
            raise InputError(
                f"'{spec.name}' is a constant (initializer) of the model and cannot be a subgraph input; "
                "cut at a tensor that a node computes"
            )


def _set_cut(gs, graph, model, in_specs, out_specs, metas: Dict[str, TensorMeta]) -> None:
    """Make the cut's tensors the graphsurgeon ``graph``'s inputs and outputs, with their metadata."""
    tensors = all_tensors(graph)
    if in_specs is not None:
        graph.inputs = [_cut_input(gs, tensors[spec.name], metas[spec.name]) for spec in in_specs]
    if out_specs is not None:
        graph.outputs = [_cut_output(gs, tensors.get(spec.name), model, metas[spec.name]) for spec in out_specs]


def _cut_input(gs, t, meta: TensorMeta):
    """The gs tensor ``t`` made a graph input (its producer cut off) of ``meta``'s shape and dtype."""
    if isinstance(t, gs.Constant):
        raise InputError(
            f"'{meta.name}' is a constant of the model and cannot be a subgraph input; "
            "cut at a tensor that a node computes"
        )
    t.inputs.clear()
    _give_meta(t, meta)
    return t


def _cut_output(gs, t, model, meta: TensorMeta):
    """The gs tensor ``t`` (None: an initializer that nothing reads, not in graphsurgeon's graph)
    as a graph output; computed ones get ``meta``'s dtype and shape."""
    if t is None:
        t = _import_unused_initializer(model, meta.name)
    if not isinstance(t, gs.Constant):
        _give_meta(t, meta)
    return t


def _give_meta(t, meta: TensorMeta) -> None:
    """The gs tensor ``t`` takes ``meta``'s dtype and shape (unknown rank: None)."""
    t.dtype = np_dtype(meta.dtype)
    t.shape = list(meta.shape) if meta.shape is not None else None


def extract(
    model,
    *,
    inputs: Optional[Sequence[TensorMeta]] = None,
    outputs: Optional[Sequence[TensorMeta]] = None,
    input_shapes: Optional[Mapping[str, Sequence]] = None,
    force_fallback: bool = False,
    external_data_dir: Optional[str] = None,
    log: LogFn = nolog,
):
    """Cut the subgraph from ``inputs`` to ``outputs`` out of ``model`` and return it.

    ``None`` for inputs/outputs keeps the model's own. A TensorMeta with shape/dtype None
    means ``auto``: found by ONNX shape inference, falling back to ONNX-Runtime (always
    with ``force_fallback``; ``input_shapes`` fixes dynamic model inputs for that).
    Unknown tensor names, constants given as inputs, and cuts that leave a needed tensor
    without producer and without being an input raise InputError naming the tensor.
    ``model`` is modified (its graph is rebuilt); pass a copy to keep it.
    """
    gs = import_gs()
    _check_cut_names(model, inputs, outputs)
    check_structure(model)
    if force_fallback:
        input_shapes = _fix_input_shapes(model, input_shapes, log)
    in_specs, out_specs = _dedupe(inputs), _dedupe(outputs)
    metas = _resolve_auto(model, in_specs, out_specs, input_shapes, force_fallback, external_data_dir, log)
    result = _cut_model(gs, model, in_specs, out_specs, metas)
    dangling = dangling_tensors(result)
    if dangling:
        raise InputError(_dangling_message(result, dangling))
    _complete_output_shapes(result, external_data_dir, log)
    return result


def _fix_input_shapes(model, input_shapes, log: LogFn) -> Dict[str, list]:
    """ONNX-Runtime needs every input dim: give ``model``'s inputs ``input_shapes`` and 1 for the
    other unknown dims (said in one line), in place, so that the result's inputs get the shapes
    it ran with; returns those shapes."""
    shapes = assume_dynamic_dims(model, input_shapes, log)
    if shapes:
        override_input_shapes(model, shapes, inplace=True)
    return shapes


def _cut_model(gs, model, in_specs, out_specs, metas: Dict[str, TensorMeta]):
    """``model`` rebuilt by graphsurgeon with the cut's inputs and outputs (``None``: the model's
    own), what they do not need removed, sorted; sequence and map types kept."""
    original_fields = model_shell(model)
    cut = [name for name, meta in metas.items() if is_non_tensor(meta)]  # (metas: the cut's tensors)
    types = {**non_tensor_types(model), **non_tensor_value_types(model, cut)}
    with quiet_gs(), gs_step("import"):
        graph = gs.import_onnx(model)
    _set_cut(gs, graph, model, in_specs, out_specs, metas)
    with quiet_gs(), gs_step("clean up and sort"):
        graph.cleanup(remove_unused_graph_inputs=False)
        graph.toposort()
    with gs_step("export"):
        result = export_graph(gs, graph, original_fields)
    del graph
    keep_non_tensor_types(result, types)
    return result


def _complete_output_shapes(result, external_data_dir, log: LogFn) -> None:
    """Outputs whose shape inference on the whole model left unknown: infer them on the
    subgraph, whose inputs are now the cut's; run it on ONNX-Runtime if needed."""
    todo = [name for name, m in _tensor_outputs(result).items() if not is_complete(m)]
    if not todo:
        return
    _take_found_shapes(result, _found_on_subgraph(result, todo, external_data_dir), log)
    _name_unknown_output_dims(result, log)
    _check_output_ranks_known(result)


def _found_on_subgraph(result, todo: List[str], external_data_dir) -> Dict[str, TensorMeta]:
    """{name: meta} of the outputs ``todo`` whose rank inference on the subgraph ``result`` finds
    (running it on ONNX-Runtime where needed)."""
    metas = infer_tensor_meta(result, fallback=True, names=todo, external_data_dir=external_data_dir)
    return {k: m for k, m in metas.items() if k in todo and m.shape is not None}


def _check_output_ranks_known(result) -> None:
    """InputError for a tensor output of the subgraph whose rank is still unknown."""
    missing = [name for name, m in _tensor_outputs(result).items() if m.shape is None]
    if missing:
        raise InputError(
            f"cannot find the shape of output '{missing[0]}', even by running the subgraph; "
            "give the model's input shapes with --model-input-shapes"
        )


def _tensor_outputs(model) -> Dict[str, TensorMeta]:
    """{name: declared meta} of ``model``'s graph outputs that are tensors."""
    return {o.name: value_info_meta(o) for o in model.graph.output if o.type.HasField("tensor_type")}


def _take_found_shapes(result, found: Dict[str, TensorMeta], log: LogFn) -> None:
    """The graph outputs of ``result`` named in ``found`` take the shape (and dtype) found on the
    subgraph, keeping the model's dim names where the subgraph leaves a dim unknown."""
    for o in result.graph.output:
        m = found.get(o.name)
        if m is not None:
            old = value_info_meta(o)
            _set_output_type(o, _keep_dim_names(old.shape, m.shape), m.dtype or old.dtype, "found on the subgraph", log)


def _keep_dim_names(old, found) -> tuple:
    """The ``found`` shape, keeping the model's names for dims the subgraph cannot fix."""
    if old is None or len(old) != len(found):
        return tuple(found)
    return tuple(d if d is not None else od for d, od in zip(found, old))


def _set_output_type(o, shape: tuple, dtype, source: str, log: LogFn) -> None:
    """Give graph output ``o`` this shape and dtype, and say where they came from."""
    o.type.CopyFrom(tensor_value_info(o.name, TensorMeta(o.name, shape, dtype)).type)
    log(f"Subgraph output {format_meta(o.name, shape, dtype)} ({source})")


_DIM_NAME = re.compile(r"[A-Za-z_][\w.]*\Z")


def _name_unknown_output_dims(result, log: LogFn) -> None:
    """Output dims still unknown after ONNX inference: ONNX-Runtime's symbolic shape inference
    (when sympy is installed) follows dims through ops ONNX's does not (Pad with computed pads,
    ...), giving a number or the model's own dim name (``sequence_length``). Expressions it
    builds (``floor(n/2)``) are not written; unknown stays unknown there."""
    todo = _outputs_with_unknown_dims(result)
    if not todo:
        return
    inferred = symbolic_shape_inference(result)
    if inferred is not None:
        _take_symbolic_dims(result, inferred, todo, log)


def _take_symbolic_dims(result, inferred, todo: Dict[str, TensorMeta], log: LogFn) -> None:
    """The outputs of ``result`` in ``todo`` ({name: meta}) take the dims symbolic inference
    (``inferred``) gives where theirs are unknown (see :func:`_symbolic_dims`)."""
    found = {o.name: value_info_meta(o) for o in inferred.graph.output}
    named = _input_dim_names(result, inferred)
    for o in result.graph.output:
        old = todo.get(o.name)
        if old is None:
            continue
        shape = _symbolic_dims(old.shape, found.get(o.name))
        if shape is None:
            continue
        _name_input_dims(shape, named)
        _set_output_type(o, shape, old.dtype, "symbolic shape inference", log)


def _name_input_dims(shape: tuple, named: dict) -> None:
    """The input dims (of ``named``: {name: dim}) whose name symbolic inference gave a dim of the
    output ``shape`` take that name too (they are the same dim)."""
    for d in shape:
        if isinstance(d, str) and d in named:
            named.pop(d).dim_param = d


def _outputs_with_unknown_dims(model) -> Dict[str, TensorMeta]:
    """{name: meta} of the tensor outputs whose rank or some dim is unknown."""
    return {k: m for k, m in _tensor_outputs(model).items() if m.shape is None or any(d is None for d in m.shape)}


def _symbolic_dims(old, new: Optional[TensorMeta]) -> Optional[tuple]:
    """The ``old`` shape with its unknown dims taken from symbolic inference's ``new`` where
    those are plain; None when that adds nothing (or the ranks differ)."""
    if new is None or new.shape is None:
        return None
    base = tuple(old) if old is not None else (None,) * len(new.shape)
    if len(base) != len(new.shape):
        return None
    shape = tuple(d if d is not None else _plain_dim(n) for d, n in zip(base, new.shape))
    return None if shape == base else shape


def _input_dim_names(result, inferred) -> dict:
    """{name: the dim of ``result``'s graph input} for the names symbolic inference gave input dims
    that have none (``x_d0``): an output dim it names so equals that input dim, which then carries
    the name too (else the output would name a dim that appears nowhere)."""
    by_name = {i.name: i for i in result.graph.input if i.type.HasField("tensor_type")}
    out = {}
    for vi in inferred.graph.input:
        mine = by_name.get(vi.name)
        if mine is not None:  # (a value of no tensor type, or of no shape, has no dims: nothing is named)
            out.update(_names_for_unknown_dims(vi, mine))
    return out


def _names_for_unknown_dims(vi, mine) -> dict:
    """{name: dim of input ``mine``} for its dims of neither name nor value that symbolic
    inference's ``vi`` of the same input names."""
    dims = zip(vi.type.tensor_type.shape.dim, mine.type.tensor_type.shape.dim)
    return {d.dim_param: m for d, m in dims if d.dim_param and not m.dim_param and not m.HasField("dim_value")}


def _plain_dim(dim):
    """``dim`` as symbolic shape inference gave it, where it is a number or a plain dim name (not
    an expression, not one of its own ``unk__`` names); else None."""
    if isinstance(dim, int) or (isinstance(dim, str) and _DIM_NAME.match(dim) and not dim.startswith("unk__")):
        return dim
    return None


def _import_unused_initializer(model, name: str):
    init = initializer_named(model.graph, name)
    try:
        from onnx_graphsurgeon.importers.onnx_importer import OnnxImporter

        if init is not None:
            return OnnxImporter.import_tensor(init)
    except (ImportError,) + graphsurgeon_errors() as exc:  # graphsurgeon internals; fall through to the message
        reraise_bug(exc)
    raise InputError(f"'{name}' is not connected to any node of the model and cannot be a subgraph output")


def _dangling_message(model, dangling) -> str:
    """Name the tensor left without producer, and where the cut should be widened."""
    name, node, op = dangling[0]
    by = f"node '{node}' ({op})" if node else "the outputs"
    more = f" (also: {_names_after_first(dangling, 4)})" if len(dangling) > 1 else ""
    msg = f"the cut leaves tensor '{name}', needed by {by}, without a producer and it is not an input{more}"
    return msg + _where_to_cut(model, dangling)


def _where_to_cut(model, dangling) -> str:
    """The end of :func:`_dangling_message`: which tensor to add to --inputs."""
    name = dangling[0][0]
    border = _cut_border(model, {d[0] for d in dangling})
    if not border or border[0][0] == name:
        return f"; add '{name}' (or a tensor between it and the outputs) to --inputs"
    t, n, o = border[0]
    more = f" (and {_names_after_first(border, 3)})" if len(border) > 1 else ""
    return f"; node '{n}' ({o}) reads '{t}', which depends on it: add '{t}' to --inputs{more}"


def _names_after_first(rows: List[tuple], shown: int) -> str:
    """The tensor names of ``rows[1:]``, at most ``shown`` of them, then ``, ...`` if there are more."""
    names = ", ".join(repr(r[0]) for r in rows[1:shown + 1])
    return names + (", ..." if len(rows) > shown + 1 else "")


def _cut_border(model, dangling: set) -> List[tuple]:
    """[(tensor, node, op)]: tensors that depend on a dangling tensor and are read by nodes fed by the inputs.

    Those are where the user most likely meant to cut.
    """
    tainted, fed, fed_nodes = _reach(model.graph, dangling)
    border: Dict[str, tuple] = {}
    for node, reads in fed_nodes:
        for r in reads:
            if r in tainted and r not in fed:
                border.setdefault(r, (r, node.name, node.op_type))
    return list(border.values())


def _reach(g, dangling: set):
    """``(tainted, fed, fed_nodes)``: the tensors of graph ``g`` that depend on a ``dangling`` tensor,
    those computed from the graph inputs, and [(node, its reads)] of the nodes that read the latter."""
    tainted, _ = _downstream(g, set(dangling))
    fed, fed_nodes = _downstream(g, {i.name for i in g.input} - {t.name for t in g.initializer})
    return tainted, fed, fed_nodes


def _downstream(g, start: set):
    """``(tensors, readers)``: the tensors of graph ``g`` computed from ``start`` (included), and
    [(node, its reads)] of the nodes that read them."""
    reached = set(start)
    readers = []
    for node in g.node:  # topologically sorted by extract
        reads = node_reads(node)
        if not reached.isdisjoint(reads):
            reached.update(o for o in node.output if o)
            readers.append((node, reads))
    return reached, readers


def _dedupe(specs: Optional[Sequence[TensorMeta]]) -> Optional[List[TensorMeta]]:
    """``specs`` once each (None stays None: the model's own); UsageError for a tensor given twice
    with different shapes or dtypes."""
    if specs is None:
        return None
    out: Dict[str, TensorMeta] = {}
    for s in specs:
        if s.name in out and out[s.name] != s:
            raise UsageError(f"tensor '{s.name}' is given twice with different shapes or dtypes")
        out[s.name] = s
    return list(out.values())


def _cut_fully_given(in_specs) -> bool:
    """Every subgraph input is given with a static shape and a dtype."""
    return bool(in_specs) and all(s.dtype and s.shape is not None and all(map(is_static_dim, s.shape)) for s in in_specs)


def _check_explicit(in_specs, out_specs, metas, *, dims: bool = True) -> None:
    """InputError when a shape or dtype given for a cut contradicts what inference knows."""
    for s in in_specs:
        m = metas.get(s.name)
        if m is not None:
            _check_given_dtype(s, "input", m)
            _check_given_shape(s, m, dims)
    for s in out_specs:
        m = metas.get(s.name)
        if m is not None:
            _check_given_dtype(s, "output", m)


def _computed_text(name: str, m: TensorMeta) -> str:
    """``name:shape:dtype`` as inference knows the tensor, for messages."""
    shape_txt = format_spec_shape(tuple(m.shape)) if m.shape is not None else "auto"
    return f"{name}:{shape_txt}:{m.dtype or 'auto'}"


def _check_given_dtype(s: TensorMeta, kind: str, m: TensorMeta) -> None:
    """InputError when the dtype given for a cut tensor is not the tensor type the model computes."""
    if not s.dtype or not has_tensor_dtype(m) or s.dtype == m.dtype:
        return
    flag = "--inputs" if kind == "input" else "--outputs"
    raise InputError(
        f"{kind} '{s.name}' is given as {s.dtype}, but the model computes {_computed_text(s.name, m)}; "
        f"fix the dtype in {flag} (or write auto)"
    )


def _check_given_shape(s: TensorMeta, m: TensorMeta, dims: bool) -> None:
    """InputError when the shape given for a cut input has another rank than the model computes
    (or, with ``dims``, another static dim)."""
    if s.shape is None or m.shape is None:
        return
    if len(s.shape) == len(m.shape) and not (dims and _static_dims_differ(s.shape, m.shape)):
        return
    raise InputError(
        f"input '{s.name}' is given the shape {format_spec_shape(tuple(s.shape))}, but the model computes "
        f"{_computed_text(s.name, m)}; fix the shape in --inputs (or write auto)"
    )


def _static_dims_differ(a, b) -> bool:
    """Shapes ``a`` and ``b`` (of one rank) have another number at some dim."""
    return any(isinstance(x, int) and isinstance(y, int) and x != y for x, y in zip(a, b))


def _filled_specs(in_specs, out_specs, metas: Dict[str, TensorMeta]) -> Dict[str, TensorMeta]:
    """The cut's inputs and outputs with what was ``auto`` taken from ``metas`` (InputError when no dtype is known)."""
    result: Dict[str, TensorMeta] = {}
    for s in in_specs:
        m = metas.get(s.name, TensorMeta(s.name))
        shape = s.shape if s.shape is not None else m.shape
        result[s.name] = TensorMeta(s.name, shape, _known_dtype(s, m, "input", f"--inputs {s.name}:auto:float32"))
    for s in out_specs:
        m = metas.get(s.name, TensorMeta(s.name))
        result[s.name] = TensorMeta(s.name, m.shape, _known_dtype(s, m, "output", f"--outputs {s.name}:float32"))
    return result


def _known_dtype(s: TensorMeta, m: TensorMeta, kind: str, example: str) -> str:
    """The dtype given for cut tensor ``s``, else the one ``m`` knows; InputError (showing how to
    give it: ``example``) when neither does."""
    dtype = s.dtype or m.dtype
    if not dtype:
        raise InputError(f"cannot find the dtype of {kind} '{s.name}'; give it, e.g. {example}")
    return dtype


def _resolve_auto(model, in_specs, out_specs, input_shapes, force_fallback, external_data_dir, log):
    """Fill ``auto`` shapes/dtypes: {name: TensorMeta} for every given input and output."""
    in_specs, out_specs = in_specs or [], out_specs or []
    metas: Dict[str, TensorMeta] = {}
    if force_fallback:
        metas = infer_tensor_meta(
            model, input_shapes=input_shapes, force_fallback=True, external_data_dir=external_data_dir
        )
        # Dims come from a run at assumed input shapes: only ranks and dtypes can be checked.
        _check_explicit(in_specs, out_specs, metas, dims=False)
    elif in_specs or out_specs:
        metas = _inferred_cut_metas(model, in_specs, out_specs, input_shapes, external_data_dir, log)
    result = _filled_specs(in_specs, out_specs, metas)
    _log_cut(result, in_specs, "input ", log)
    _log_cut(result, out_specs, "output", log)
    return result


def _log_cut(metas: Dict[str, TensorMeta], specs, kind: str, log: LogFn) -> None:
    """One log line for each cut tensor of ``specs``, as ``metas`` describe it."""
    for s in specs:
        meta = metas[s.name]
        log(f"Subgraph {kind} {format_meta(meta.name, meta.shape, meta.dtype)}")


def _inferred_cut_metas(model, in_specs, out_specs, input_shapes, external_data_dir, log) -> Dict[str, TensorMeta]:
    """The cut tensors' metadata from the model's declarations or ONNX shape inference, checked
    against what was given; ONNX-Runtime runs for what those leave unknown."""
    metas = _declared_or_inferred(model, in_specs + out_specs, input_shapes, log)
    _check_explicit(in_specs, out_specs, metas)
    missing = _left_unknown(in_specs, out_specs, metas)
    partial = _partly_known_inputs(in_specs, metas)
    if not missing and not partial:
        return metas
    if missing:
        log(f"ONNX shape inference left {', '.join(repr(m) for m in missing[:3])} unknown; "
            "running ONNX-Runtime to find them")
    return infer_tensor_meta(
        model, input_shapes=input_shapes, fallback=True,
        names=list(dict.fromkeys(missing + partial)), external_data_dir=external_data_dir,
    )


def _partly_known_inputs(in_specs, metas) -> List[str]:
    """The ``auto`` cut inputs of which ``metas`` know the rank but not every dim (or dtype)."""
    return [s.name for s in in_specs if s.shape is None and not is_complete(metas[s.name])]


def _declared_or_inferred(model, cut: List[TensorMeta], input_shapes, log) -> Dict[str, TensorMeta]:
    """The model's own value infos when they describe every ``cut`` tensor fully (and no input
    shape is overridden); else ONNX shape inference's metadata."""
    declared = {} if input_shapes else declared_tensor_meta(model)
    if all(is_complete(declared.get(s.name)) for s in cut):
        return declared
    metas = infer_tensor_meta(model, input_shapes=input_shapes, fallback=False)
    known = sum(1 for m in metas.values() if is_complete(m))
    log(f"Shape inference completed successfully: {known} of {len(metas)} tensors fully known")
    return metas


def _left_unknown(in_specs, out_specs, metas) -> List[str]:
    """Cut tensors whose ``auto`` ONNX inference left unknown: input dtype, rank and dims; output
    dtype and rank (onnx.checker wants a shape on every graph output)."""
    # with the cut's inputs fully given, output shapes unknown here are found on the subgraph
    # itself, whose inputs are those (static) inputs (see extract); no model input shapes are needed
    return _unknown_inputs(in_specs, metas) + _unknown_outputs(out_specs, metas, shapes=not _cut_fully_given(in_specs))


def _unknown_inputs(in_specs, metas) -> List[str]:
    """The ``auto`` cut inputs whose dtype, then those whose rank, ``metas`` leave unknown."""
    missing = [s.name for s in in_specs if s.dtype is None and not metas[s.name].dtype]
    return missing + [s.name for s in in_specs if s.shape is None and metas[s.name].shape is None]


def _unknown_outputs(out_specs, metas, shapes: bool) -> List[str]:
    """The cut outputs whose dtype, then (with ``shapes``) those tensors whose rank, neither the
    spec nor ``metas`` gives."""
    missing = [s.name for s in out_specs if not (s.dtype or metas[s.name].dtype)]
    if shapes:
        missing += [s.name for s in out_specs if metas[s.name].shape is None and not is_non_tensor(metas[s.name])]
    return missing

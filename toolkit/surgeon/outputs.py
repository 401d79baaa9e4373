"""Graph outputs (`--outputs`, `mark all`), data-dependent-shape bounds and shapes found by
running the model."""

from __future__ import annotations

from typing import Dict, List, Mapping, Optional, Sequence

import numpy as np
from onnx import helper, numpy_helper

from toolkit.core.errors import InputError, UsageError
from toolkit.core.graph.constants import constant_names
from toolkit.core.graph.graphs import fresh_name, node_outputs
from toolkit.core.meta import dtype_to_numpy, format_spec_shape
from toolkit.core.io.model import graph_io_meta, infer_shapes, value_info_meta
from toolkit.core.shapes import infer_tensor_meta, is_complete, light_copy, override_input_shapes, top_tensor_names
from toolkit.surgeon.plumbing import (
    LogFn,
    check_known,
    has_tensor_dtype,
    is_non_tensor,
    nolog,
    non_tensor_value_types,
    tensor_value_info,
)


def mark_outputs(model, names: Sequence[str]) -> None:
    """Make ``names`` the graph outputs of ``model`` (in place); ``["mark", "all"]`` marks every
    tensor a node of the top graph computes. Types come from shape inference where known."""

    g = model.graph
    names = _names_to_mark(model, names)
    infos = {o.name: o for o in g.output}
    infos = {**_new_output_infos(model, [n for n in names if n not in infos]), **infos}
    outputs = [infos[name] for name in names]
    del g.output[:]
    g.output.extend(outputs)


def _new_output_infos(model, names: List[str]) -> dict:
    """{name: value info} for tensors ``names`` that become graph outputs: their types from shape
    inference (sequence and map types kept)."""
    metas = infer_tensor_meta(model, fallback=False, names=names)
    others = non_tensor_value_types(model, [n for n in names if is_non_tensor(metas.get(n))])
    infos = {name: tensor_value_info(name, metas.get(name)) for name in names}
    infos.update({name: helper.make_value_info(name, t) for name, t in others.items()})
    return infos


def _names_to_mark(model, names: Sequence[str]) -> List[str]:
    """``names`` once each (every tensor a top-graph node computes for ``mark all``); InputError
    for a name that is no tensor of the top graph."""
    if list(names) == ["mark", "all"]:
        names = node_outputs(model.graph)
    else:
        check_known(names, top_tensor_names(model), "output")
    return list(dict.fromkeys(names))


_DDS_INPUTS = {"Range": (1,), "Pad": (1,), "Resize": (3,), "Tile": (1,), "Expand": (1,)}


def unbounded_dds_tensors(model) -> List[str]:
    """Tensors that decide a data-dependent output size with no upper bound.

    A node of ``_DDS_INPUTS`` whose output has a dim that shape inference cannot tie to the
    inputs' dims (unknown, or a new symbol) gets its size from a runtime input; that input
    is unbounded unless it is a constant or already goes through a ``Min``.
    """
    g = infer_shapes(light_copy(model), data_prop=True).graph
    const = constant_names(g)
    producer = {o: node for node in g.node for o in node.output}
    found = (name for node in _sized_by_data(g) for name in _computed_size_inputs(node, const, producer))
    return list(dict.fromkeys(found))


def _sized_by_data(g) -> list:
    """The nodes of ``_DDS_INPUTS`` in inferred graph ``g`` whose output has a dim shape inference
    cannot tie to the graph inputs' dims or to earlier outputs' (see :func:`_has_new_dims`)."""
    metas = {vi.name: value_info_meta(vi) for vi in list(g.value_info) + list(g.output)}
    symbols = _input_dim_symbols(g)
    # (every node's dims are seen, in order, so that a later node's symbols are only new once)
    return [node for node in g.node if _has_new_dims(node, metas, symbols) and node.op_type in _DDS_INPUTS]


def _input_dim_symbols(g) -> set:
    """The dim names of graph ``g``'s inputs."""
    return {d for vi in g.input for d in (value_info_meta(vi).shape or ()) if isinstance(d, str)}


def _computed_size_inputs(node, const: set, producer: dict) -> List[str]:
    """The inputs that set the output size of ``node`` (an op of ``_DDS_INPUTS``) and that a node
    other than a ``Min`` computes at run time."""
    names = [node.input[i] for i in _DDS_INPUTS[node.op_type] if i < len(node.input) and node.input[i]]
    return [n for n in names if n not in const and n in producer and producer[n].op_type != "Min"]


def _has_new_dims(node, metas, symbols: set) -> bool:
    """An output of ``node`` has an unknown rank or dim, or a dim symbol not in ``symbols`` (the
    symbols seen so far, to which those of ``node``'s outputs are added)."""
    new_dims = False
    for o in node.output:
        new_dims |= _adds_dims(metas.get(o), symbols)
    return new_dims


def _adds_dims(m, symbols: set) -> bool:
    """Tensor ``m`` (None: not inferred) has an unknown rank or dim, or a dim symbol not in
    ``symbols``, to which its symbols are added."""
    if m is None or m.shape is None:
        return True
    new_dims = any(d is None or (isinstance(d, str) and d not in symbols) for d in m.shape)
    symbols.update(d for d in m.shape if isinstance(d, str))
    return new_dims


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


def set_unbounded_dds_upper_bounds(model, bounds: Mapping[str, int], log: LogFn = nolog) -> Dict[str, int]:
    """Bound each unbounded data-dependent-shape tensor with a ``Min`` (in place); returns what was set."""

    targets = unbounded_dds_tensors(model)
    _check_bound_names(bounds, targets)
    metas = infer_tensor_meta(model, fallback=False, names=targets)
    taken = set(top_tensor_names(model))
    applied: Dict[str, int] = {}
    for name in targets:
        bound = bounds.get(name, bounds.get(""))
        if bound is not None:
            _insert_min(model.graph, name, _bound_values(bound, metas.get(name)), taken)
            applied[name] = bound
    log(f"Upper bounds set: {', '.join(f'{k}<={v}' for k, v in applied.items()) or 'none needed'}")
    return applied


def _check_bound_names(bounds: Mapping[str, int], targets: List[str]) -> None:
    """InputError for a tensor named in ``bounds`` that is not one of the unbounded ``targets``."""
    unknown = [name for name in bounds if name and name not in targets]
    if unknown:
        shown = ", ".join(targets) or "none"
        raise InputError(
            f"'{unknown[0]}' is not a tensor with an unbounded data-dependent shape; those are: {shown} "
            "(`toolkit inspect model --list-unbounded-dds` lists them)"
        )


def _bound_values(bound: int, meta):
    """The constant ``bound`` in the dtype of the tensor ``meta`` describes (int64 if unknown), one
    per element when the tensor is 1-D."""
    dtype = dtype_to_numpy(meta.dtype) if meta is not None and meta.dtype else np.int64
    if meta is not None and meta.shape:
        return np.full(len(meta.shape), bound, dtype=dtype)
    return np.array(bound, dtype=dtype)


def _insert_min(g, name: str, values, taken: set) -> None:
    """Make tensor ``name`` the ``Min`` of what its producer computes and the constant ``values``."""
    copy = fresh_name(name + "_unbounded", taken)
    const = fresh_name(name + "_upper_bound", taken)
    pos = next(i for i, n in enumerate(g.node) if name in n.output)
    producer = g.node[pos]
    producer.output[list(producer.output).index(name)] = copy
    g.initializer.append(numpy_helper.from_array(values, const))
    g.node.insert(pos + 1, helper.make_node("Min", [copy, const], [name], name=fresh_name(name + "_min", taken)))


def assume_dynamic_dims(model, input_shapes: Optional[Mapping[str, Sequence]], log: LogFn) -> Dict[str, list]:
    """Input shapes for running the model: ``input_shapes``, and 1 for every other dynamic dim
    (said in one line)."""
    shapes = {k: list(v) for k, v in (input_shapes or {}).items()}
    assumed = []
    ins, _ = graph_io_meta(model)
    for m in ins:
        ones = None if m.name in shapes else _dynamic_dims_as_one(m)
        if ones is not None:
            shapes[m.name] = ones
            assumed.append(f"{m.name}:{format_spec_shape(tuple(ones))}")
    if assumed:
        log(f"warning: dynamic input dims assumed to be 1 for shape inference: {', '.join(assumed)} "
            "(--model-input-shapes / --override-input-shapes set them)")
    return shapes


def _dynamic_dims_as_one(m) -> Optional[list]:
    """The shape of tensor input ``m`` with its dynamic dims as 1; None where it has none (or its
    rank is unknown)."""
    if m.shape is None or not has_tensor_dtype(m) or all(isinstance(d, int) for d in m.shape):
        return None
    return [d if isinstance(d, int) else 1 for d in m.shape]


def apply_fallback_shapes(model, *, input_shapes=None, external_data_dir=None, log: LogFn = nolog) -> None:
    """Run the model on ONNX-Runtime and write every tensor's real shape into it (in place):
    graph inputs (dynamic dims assumed 1 unless given), intermediate value_info, outputs."""
    shapes = assume_dynamic_dims(model, input_shapes, log)
    if shapes:
        override_input_shapes(model, shapes, inplace=True)
    metas = infer_tensor_meta(model, force_fallback=True, external_data_dir=external_data_dir)
    _write_found_shapes(model.graph, metas)
    log(f"Shapes of {len(metas)} tensors found by running ONNX-Runtime")


def _write_found_shapes(g, metas) -> None:
    """Graph ``g``'s value_info becomes the complete tensor ``metas`` of what its nodes compute;
    graph outputs among them take theirs as their type."""
    found = _computed_value_infos(g, metas)
    for o in g.output:
        if o.name in found:
            o.type.CopyFrom(found[o.name].type)
    outputs = {o.name for o in g.output}
    del g.value_info[:]
    g.value_info.extend(vi for name, vi in found.items() if name not in outputs)


def _computed_value_infos(g, metas) -> dict:
    """{name: value info} of the tensors of ``metas`` that graph ``g``'s nodes compute (not its
    inputs nor initializers) whose dtype and every dim are known."""
    given = {i.name for i in g.input} | {t.name for t in g.initializer}
    return {name: tensor_value_info(name, meta) for name, meta in metas.items()
            if name not in given and is_complete(meta) and has_tensor_dtype(meta)}

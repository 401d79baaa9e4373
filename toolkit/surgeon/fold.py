"""Constant folding on onnx-graphsurgeon: passes until nothing changes, shapes refreshed
between passes, graphsurgeon's folding bugs worked around, and the fallback levels taken when
a folded model fails validation."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import List, Optional

import numpy as np

from toolkit.core.errors import one_line, reraise_bug
from toolkit.core.graph.graphs import fresh_name, walk_graphs
from toolkit.core.io.model import infer_shapes, value_info_meta
from toolkit.core.shapes import STUB_BYTES, light_copy
from toolkit.surgeon.fold_bounds import UNKNOWN_SIZE, note_kept, oversized_nodes
from toolkit.surgeon.fold_noops import bodies, constant_reshape_targets, eliminate_noops, is_static_dim
from toolkit.surgeon.plumbing import (
    LogFn,
    all_nodes,
    all_tensors,
    count_nodes,
    graphsurgeon_errors,
    gs_step,
    np_dtype,
    quiet_gs,
    quiet_ort,
    restore_model_fields,
    stubbed_constants,
)
from toolkit.surgeon.validate import Validation


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
    _apply_body_value_infos(model, inferred)
    if outputs:
        _apply_output_shapes(model.graph, inferred.graph)


def _apply_body_value_infos(model, inferred) -> None:
    """If/Loop/Scan bodies take the value_info inference found in them, where it found some (the
    light copy has the same graphs, in the same order)."""
    bodies = list(walk_graphs(model.graph))[1:]
    inferred_bodies = list(walk_graphs(inferred.graph))[1:]
    if len(bodies) != len(inferred_bodies):
        return
    for g, ig in zip(bodies, inferred_bodies):
        if ig.value_info:
            del g.value_info[:]
            g.value_info.extend(ig.value_info)


def _apply_output_shapes(graph, inferred_graph) -> None:
    """Graph outputs take the type inference found for them, where that is a tensor with a shape."""
    by_name = {o.name: o for o in inferred_graph.output}
    for o in graph.output:
        new = by_name.get(o.name)
        if new is not None and new.type.tensor_type.HasField("shape"):  # (False for other types)
            o.type.CopyFrom(new.type)


def _clear_negative_dims(value_infos) -> None:
    """Dims written as -1 (some exporters' "unknown") become unknown dims, which inference may
    fill (it keeps a stated value, even an invalid one)."""
    for vi in value_infos:
        for d in vi.type.tensor_type.shape.dim:  # (no dims for other types; a dim name reads as value 0)
            if d.dim_value < 0:
                d.Clear()


def infer_shapes_in_place(model, *, reset_outputs: bool = False) -> None:
    """Re-infer every intermediate shape of ``model`` (weights are not copied)."""
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
    computed = (t for t in all_tensors(graph).values() if t.name and not isinstance(t, gs.Constant))
    # (constants and omitted optional inputs are skipped)
    return all(t.shape is not None and all(map(is_static_dim, t.shape)) for t in computed)


def _refresh_gs_shapes(gs, graph, original) -> int:
    """Re-run ONNX shape inference on the current gs graph and write shapes back to its tensors.

    Folding a shape computation turns e.g. a Reshape's target into a constant; only a new
    inference then tells the next Shape node its input's shape. Returns how many tensors
    learned something.
    """

    metas = _inferred_metas(gs, graph, original)
    input_names = {t.name for t in graph.inputs}
    changed = 0
    for name, tensor in all_tensors(graph).items():
        if not isinstance(tensor, gs.Constant) and name not in input_names:
            changed += _learn_shape(tensor, metas.get(name))
    return changed


def _inferred_metas(gs, graph, original) -> dict:
    """{name: TensorMeta} from ONNX shape inference on the gs ``graph`` exported (weights
    stubbed), inside If/Loop/Scan bodies too: folding there needs the body's shapes (names are
    unique across scopes in ONNX)."""
    with quiet_gs(), stubbed_constants(graph, STUB_BYTES):
        model = gs.export_onnx(graph, do_type_check=False)
    restore_model_fields(model, original)
    light = light_copy(model)
    del model
    _clear_negative_dims(light.graph.output)
    inferred = infer_shapes(light, data_prop=True)
    metas: dict = {}
    for g in walk_graphs(inferred.graph):
        for vi in list(g.value_info) + (list(g.output) if g is inferred.graph else []):
            metas.setdefault(vi.name, value_info_meta(vi))
    return metas


def _learn_shape(tensor, meta) -> bool:
    """Give the gs ``tensor`` the inferred shape of ``meta`` (and its dtype, where it has none)
    when that shape is new and no less known (same rank, no fewer static dims)."""
    if meta is None or meta.shape is None or not _adds_knowledge(tensor.shape, tuple(meta.shape)):
        return False
    tensor.shape = list(meta.shape)
    if tensor.dtype is None and meta.dtype:
        tensor.dtype = np_dtype(meta.dtype)
    return True


def _adds_knowledge(old, new: tuple) -> bool:
    """Shape ``new`` differs from ``old`` (None: rank unknown) and is no less known: same rank, no
    fewer static dims."""
    if old is None:
        return True
    return tuple(old) != new and len(old) == len(new) and _static_dims(new) >= _static_dims(old)


def _static_dims(shape) -> int:
    return sum(1 for d in shape if isinstance(d, int))


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


def _failing_part(message: str, names: set, excluded_ops: set):
    """(kind, key) naming what ONNX-Runtime failed on: ("node", one of ``names``) or ("op", op_type);
    None where the message names neither (or an op of ``excluded_ops``)."""
    for pat in _NODE_NAME_PATTERNS:
        for m in pat.finditer(message):
            if m.group(1) in names:
                return "node", m.group(1)
    op = _failing_op(message)
    return None if op is None or op in excluded_ops else ("op", op)


def _failing_op(message: str) -> Optional[str]:
    """The op type an ONNX-Runtime error ``message`` says has no kernel or schema, or None."""
    for pat in _OP_PATTERNS:
        found = pat.search(message)
        if found:
            return found.groups()[-1]
    return None


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

    hidden = []
    for node in list(all_nodes(graph)):
        if _is_shape_slice(node) and not _fold_shape_slice(node):
            node.op = _HIDDEN_PREFIX + node.op
            hidden.append(node)
    return hidden


def _is_shape_slice(node) -> bool:
    """``node`` is a Shape node with ``start`` or ``end`` (it gives some dims only)."""
    return node.op == "Shape" and ("start" in node.attrs or "end" in node.attrs)


def _fold_shape_slice(node) -> bool:
    """Make the output of Shape ``node`` (with start/end) the constant dims it takes, where its
    input's shape is known and those dims are static; else False."""
    inp = node.inputs[0] if node.inputs else None
    if inp is None or inp.shape is None:
        return False
    shape = list(inp.shape)
    start, end = _shape_attr_slice(node, len(shape))
    dims = shape[start:end]
    if not all(map(is_static_dim, dims)):
        return False
    out = node.outputs[0]
    out.to_constant(np.array(dims, dtype=np.int64))
    out.inputs.clear()
    return True


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
    used_names = {t.name for t in all_tensors(graph).values()}

    def unique(name: str) -> str:
        return fresh_name(name, used_names)

    def visit(g) -> None:
        nonlocal count
        index = 0
        while index < len(g.nodes):
            node = g.nodes[index]
            for sub in bodies(node):
                visit(sub)
            branch = _taken_branch(gs, node)
            if branch is None:
                index += 1
                continue
            new_nodes = inline_branch(gs, g, node, branch, unique)
            g.nodes[index:index + 1] = new_nodes
            index += len(new_nodes)
            count += 1

    visit(graph)
    return count


def _taken_branch(gs, node):
    """The branch an If ``node`` with a constant condition takes, where it gives as many
    outputs as the If; else None."""
    taken = _constant_condition(gs, node)
    if taken is None:
        return None
    branch = node.attrs["then_branch" if taken else "else_branch"]
    return branch if len(node.outputs) == len(branch.outputs) else None


def _constant_condition(gs, node) -> Optional[bool]:
    """The condition of ``node`` where it is an If whose condition is a one-element constant; else None."""
    cond = node.inputs[0] if node.op == "If" and node.inputs else None
    if not isinstance(cond, gs.Constant) or cond.values.size != 1:
        return None
    return bool(cond.values.reshape(-1)[0])


def inline_branch(gs, g, node, branch, unique) -> list:
    """The nodes that replace If ``node`` of graph ``g`` by its ``branch`` (names made unique);
    an Identity keeps each If output defined where no branch node produces it."""
    outer_outs = list(node.outputs)
    branch_outs = list(branch.outputs)
    body_nodes = list(branch.nodes)
    produced = {id(t) for n in body_nodes for t in n.outputs}
    _rename_branch_tensors(gs, body_nodes, g.tensors(), unique)
    node.inputs.clear()
    node.outputs.clear()
    extra = []
    rebound: dict = {}
    for outer, inner in zip(outer_outs, branch_outs):
        src = _bind_if_output(outer, inner, produced, rebound)
        if src is not None:  # an Identity keeps the If's output defined
            extra.append(gs.Node("Identity", name=unique(f"{outer.name}_identity"), inputs=[src], outputs=[outer]))
    return body_nodes + extra


def _bind_if_output(outer, inner, produced: set, rebound: dict):
    """Make If output ``outer`` the branch output ``inner``: the branch node computing ``inner`` (in
    ``produced``) writes ``outer`` instead (None is returned), once per ``inner`` (``rebound``:
    {id(inner): the If output it became}); else the tensor an Identity must copy into ``outer``."""
    if id(inner) in rebound:
        return rebound[id(inner)]
    if id(inner) in produced and inner.inputs:
        producer = inner.inputs[0]
        producer.outputs[producer.outputs.index(inner)] = outer
        rebound[id(inner)] = outer
        return None
    return inner  # passed through from outside, or a constant


def _rename_branch_tensors(gs, body_nodes, outer_tensors: dict, unique) -> None:
    """Give what the branch's nodes compute, and the branch constants whose names the outer
    graph (``outer_tensors``) uses for another tensor, names of their own there."""
    for n in body_nodes:
        for t in n.outputs:
            if not t.is_empty():
                t.name = unique(t.name)
        for t in n.inputs:
            if isinstance(t, gs.Constant) and outer_tensors.get(t.name, t) is not t:
                t.name = unique(t.name)


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
        return _fold_partitioned(graph, partitioning, kwargs, log)
    renamed = _name_unnamed(graph)
    # What failed in earlier passes stays excluded (the sets are updated in place).
    try:
        return _fold_excluding_failures(
            graph, kwargs, set() if bad_nodes is None else bad_nodes, set() if bad_ops is None else bad_ops, log
        )
    finally:
        for node in renamed:
            node.name = ""


def _fold_partitioned(graph, partitioning: str, kwargs: dict, log: LogFn) -> str:
    """One graphsurgeon folding run with ``partitioning`` (``none``, ``basic``, ``recursive``),
    failing nodes kept as they are (said)."""
    mode = None if partitioning == "none" else partitioning
    with quiet_gs() as buf, quiet_ort(), gs_step("fold constants in"):
        graph.fold_constants(partitioning=mode, error_ok=True, should_exclude_node=_is_hidden, **kwargs)
    if "failed" in buf.getvalue().lower():
        log(f"Folding constants | some nodes could not be folded (partitioning={partitioning}); kept as they are")
    return partitioning


def _name_unnamed(graph) -> list:
    """Give the unnamed nodes of ``graph`` (bodies too) a temporary name, so that errors can point
    at them; returns those nodes."""
    renamed = []
    for i, node in enumerate(all_nodes(graph)):
        if not node.name:
            node.name = f"__toolkit_unnamed_{i}"
            renamed.append(node)
    return renamed


def _fold_excluding_failures(graph, kwargs: dict, bad_nodes: set, bad_ops: set, log: LogFn) -> str:
    """Fold in one ONNX-Runtime run; where that fails, exclude the node or op type the error
    names and fold again; part by part (recursive partitioning) when it names nothing new."""

    def exclude(node) -> bool:
        return node.name in bad_nodes or node.op in bad_ops or _is_hidden(node)

    for _ in range(_MAX_EXCLUSIONS + 1):
        exc = _fold_at_once(graph, kwargs, exclude, log)
        if exc is None:
            return "none" if not (bad_nodes or bad_ops) else "none, excluding failing nodes"
        if not _exclude_failing_part(graph, exc, bad_nodes, bad_ops, log):
            break
    else:
        log("Folding constants | too many nodes fail to fold; falling back to folding part by part")
    return _fold_part_by_part(graph, kwargs, exclude)


def _fold_part_by_part(graph, kwargs: dict, exclude) -> str:
    """One graphsurgeon folding run with recursive partitioning: the parts that fail stay unfolded
    (slow on big graphs); returns how it folded."""
    with quiet_gs(), quiet_ort(), gs_step("fold constants in"):
        graph.fold_constants(partitioning="recursive", error_ok=True, should_exclude_node=exclude, **kwargs)
    return "recursive"


def _fold_at_once(graph, kwargs: dict, exclude, log: LogFn) -> Optional[Exception]:
    """One graphsurgeon folding run, no partitioning; the error where ONNX-Runtime or
    graphsurgeon failed on some node, else None."""
    try:
        with quiet_gs() as buf, quiet_ort():
            graph.fold_constants(partitioning=None, error_ok=False, should_exclude_node=exclude, **kwargs)
    except graphsurgeon_errors() as exc:
        reraise_bug(exc)
        return exc
    if "large outputs" in buf.getvalue():
        log("Folding constants | some folded tensors are over 1 MiB; --fold-size-threshold keeps "
            "such tensors computed at run time instead")
    return None


def _exclude_failing_part(graph, exc: Exception, bad_nodes: set, bad_ops: set, log: LogFn) -> bool:
    """Add the node or op type that folding failed on (read from ``exc``) to ``bad_nodes`` or
    ``bad_ops``; False (said) when the error names nothing not excluded yet."""
    names = {n.name for n in all_nodes(graph)}
    part = _failing_part(str(exc), names - bad_nodes, bad_ops)
    if part is None:
        log(f"Folding constants | folding failed ({one_line(exc, first_line=True, limit=300)}); "
            "falling back to folding part by part (slow on big graphs)")
        return False
    kind, key = part
    (bad_nodes if kind == "node" else bad_ops).add(key)
    log(_excluded_line(kind, key, exc))
    return True


def _excluded_line(kind: str, key: str, exc: Exception) -> str:
    """The log line for a node (``kind`` "node") or op type that folding goes on without."""
    shown = key if not key.startswith("__toolkit_unnamed_") else "(unnamed)"
    return (f"Folding constants | {'node' if kind == 'node' else 'op type'} {shown} cannot be folded "
            f"({one_line(exc, first_line=True, limit=300)}); folding the rest without it")


# Fallbacks when a folded model fails validation, in order (see sanitize()); after them, folding
# outside bodies while skipping the nodes whose folded values are wrong (_fold_skipping_wrong).
_FOLD_LEVELS = (
    ("full", ""),
    ("no-inline", "without inlining constant-condition If branches"),
    ("top-only", "folding only outside If/Loop/Scan bodies"),
)


def fold_passes(gs, graph, shell, report, *, level, num_passes, partitioning, size_threshold, fold_shapes,
                 excluded: set, log: LogFn, per_pass_shapes: bool = True, remove_noops: bool = False) -> None:
    """Fold ``graph`` in place, pass after pass, until nothing changes (or ``num_passes``); with
    ``remove_noops``, each pass also removes pass-through nodes (which may let more fold)."""
    report.passes = []
    report.converged = False
    # (bad_nodes, bad_ops: what failed to fold stays excluded in the later passes)
    fold_args = dict(partitioning=partitioning, size_threshold=size_threshold, fold_shapes=fold_shapes, log=log,
                     bad_nodes=set(), bad_ops=set(), recurse_subgraphs=level in ("full", "no-inline"))
    kept: list = []
    while num_passes is None or len(report.passes) < num_passes:
        done, kept, again = _fold_pass(gs, graph, shell, len(report.passes) + 1, level=level, excluded=excluded,
                                       fold_args=fold_args, per_pass_shapes=per_pass_shapes, remove_noops=remove_noops)
        report.passes.append(done)
        if not again:
            report.converged = True
            break
    if not report.converged:
        log(f"Folding constants | stopped after {len(report.passes)} passes (--num-passes); more folding may be possible")
    if report.passes:
        note_kept(gs, kept, log)


def _fold_pass(gs, graph, shell, index: int, *, level, excluded: set, fold_args: dict, per_pass_shapes: bool,
               remove_noops: bool):
    """Pass ``index`` of :func:`fold_passes`: ``(FoldPass, the nodes kept unfolded, whether another
    pass may fold more)``."""
    t0 = time.perf_counter()
    before = count_nodes(graph)
    kept = oversized_nodes(gs, graph, fold_args["size_threshold"])  # (before anything is computed)
    used = _fold_hiding(gs, graph, [n for n, _ in kept], excluded, fold_args)
    ifs, inlined = _rewrite_folded(gs, graph, level, remove_noops)
    after = count_nodes(graph)
    changed = after != before or inlined > 0
    unlocked = _unlocks_more(gs, graph, shell, ifs, kept) if changed and per_pass_shapes else True
    secs = time.perf_counter() - t0
    fold_args["log"](f"Folding constants | pass {index} | nodes {before} -> {after} ({before - after} folded) | {secs:.2f} s")
    return FoldPass(index, before, after, secs, used), kept, changed and unlocked


def _rewrite_folded(gs, graph, level: str, remove_noops: bool):
    """After a fold: constant-condition If branches inlined (level ``full``), pass-through nodes
    removed (with ``remove_noops``), Reshape targets made constant, dead nodes cleaned up.
    Returns (Ifs inlined, nodes rewritten in all)."""
    ifs = _flatten_constant_ifs(gs, graph) if level == "full" else 0
    inlined = ifs + (eliminate_noops(gs, graph) if remove_noops else 0) + constant_reshape_targets(gs, graph)
    with quiet_gs(), gs_step("clean up"):
        graph.cleanup()
    return ifs, inlined


def _fold_hiding(gs, graph, kept: list, excluded: set, fold_args: dict) -> str:
    """:func:`_fold_once`, with what must not fold hidden from graphsurgeon: Shape nodes with
    start/end it would fold wrong, the ``kept`` nodes, and the producers of ``excluded`` tensors."""
    hidden = _prepare_shape_slices(gs, graph) + _hide(kept) + _hide(_producers(graph, excluded))
    try:
        return _fold_once(graph, **fold_args)
    finally:
        _unhide(hidden)


def _producers(graph, tensors: set) -> list:
    """The nodes of ``graph`` (bodies included) not hidden yet that compute one of ``tensors``."""
    if not tensors:
        return []
    return [n for n in all_nodes(graph) if not _is_hidden(n) and any(o.name in tensors for o in n.outputs)]


def _unlocks_more(gs, graph, shell, ifs: int, kept) -> bool:
    """Learn the shapes this pass unlocked (written into ``graph``, for the next pass); whether
    another pass may fold more. One folding run folds everything computable from the constants
    and the shapes it is given: with no shape learned and no If branch inlined (``ifs``),
    another pass would see the same graph facts and fold nothing (it is not run)."""
    learned = 0
    if not _all_shapes_static(gs, graph):
        with gs_step("export"):
            learned = _refresh_gs_shapes(gs, graph, shell)
    # (a node whose size was not known may be sized now that its inputs are constants)
    return learned > 0 or ifs > 0 or any(why == UNKNOWN_SIZE for _, why in kept)


def fold_validated(model, build, validate: bool, external_data_dir: Optional[str], log: LogFn,
                    inputs_before_override=None):
    """Fold with ``build(level, excluded)`` (a :class:`toolkit.surgeon.fold_child.FoldInChild`);
    validate and fall back level by level."""
    if not validate:
        return build("full", set())
    # (a fold in a child starts before the validation's thread: see toolkit.surgeon.fold_child)
    first = build.start("full", set())
    try:
        check = Validation(model, external_data_dir, inputs_before_override)
        check.start()
    except BaseException:
        build.kill(first)  # (waiting, it would be killed too: this is the way out before waiting)
        raise
    return _fallbacks(model, build, check, log, build.finish(first))


def _fallbacks(model, build, check, log: LogFn, full):
    """The first level of :data:`_FOLD_LEVELS` whose folded model passes ``check`` (``full``: the
    first level's folded model), else the fold that skips wrong values, else no folding."""
    failures: list = []
    result = full
    for level, how in _FOLD_LEVELS:
        if failures:
            log(f"Folding constants | the folded model failed validation ({failures[-1]}); folding again {how}")
            result = build(level, set())
        err = check.check(result)
        if err is None:
            _say_passed(check, level, failures, log)
            return result
        failures.append(err)
    skipping = _fold_skipping_wrong(build, check, log, result, failures[0])
    if skipping is not None:
        return skipping
    log(f"Folding constants | left unfolded: everything; every folded model failed validation ({failures[0]}); "
        "the model is written without folding")
    return build(None, set())


def _say_passed(check, level: str, failures: list, log: LogFn) -> None:
    """Log what the folded model that passed ``check`` at ``level`` was not checked for, and what
    was left unfolded after the ``failures`` of the levels before."""
    if check.limits():
        log(f"Folding constants | the folded model {check.limits()}")
    if failures and not check.skip_reason:
        what = "constant-condition If branches" if level == "no-inline" else "everything inside If/Loop/Scan bodies"
        log(f"Folding constants | left unfolded: {what}; folding them broke the model ({failures[0]})")


def _fold_skipping_wrong(build, check, log: LogFn, result, first_failure: str):
    """Fold outside bodies, leaving unfolded the tensors whose folded values in ``result`` (then
    in each new try) are wrong; the first folded model that passes ``check``, or None."""
    excluded: set = set()
    for _ in range(4):
        wrong = check.wrong_constants(result)
        if not wrong or wrong <= excluded:
            return None
        excluded |= wrong
        result = build("top-only", excluded)
        if check.check(result) is None:
            log(_skipped_wrong_line(excluded, first_failure))
            return result
    return None


def _skipped_wrong_line(excluded: set, first_failure: str) -> str:
    """The log line for a fold that left the ``excluded`` tensors (wrong when folded) unfolded."""
    shown = ", ".join(sorted(excluded)[:3]) + (", ..." if len(excluded) > 3 else "")
    return (f"Folding constants | left unfolded: {len(excluded)} tensor(s) whose folded values were "
            f"wrong ({shown}), and everything inside If/Loop/Scan bodies; first try: {first_failure}")

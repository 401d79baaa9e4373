"""`surgeon sanitize`: fold constants, freeze input shapes, clean up and sort a model."""

from __future__ import annotations

import difflib
import time
from typing import Dict, List, Mapping, Optional, Sequence

from toolkit.core.errors import InputError, UsageError
from toolkit.core.graph.graphs import node_outputs, walk_graphs
from toolkit.core.io.model import graph_io_meta
from toolkit.core.shapes import override_input_shapes, top_tensor_names
from toolkit.surgeon.fold import SanitizeReport, fold_passes, fold_validated, infer_shapes_in_place
from toolkit.surgeon.fold_child import FoldInChild, LogRelay
from toolkit.surgeon.fold_noops import eliminate_noops
from toolkit.surgeon.load import check_structure, refuse_damaged
from toolkit.surgeon.plumbing import (
    GraphSurgeonError,
    LogFn,
    copied,
    count_model_nodes,
    export_graph,
    gs_step,
    import_gs,
    keep_non_tensor_types,
    model_shell,
    nolog,
    non_tensor_types,
    quiet_gs,
)
from toolkit.surgeon.validate import Validation

PARTITIONING_MODES = ("auto", "none", "basic", "recursive")


def check_sanitize_options(partitioning: str = "auto", num_passes: Optional[int] = None) -> None:
    """UsageError for a ``sanitize`` option value that cannot work (checked before any work)."""
    if partitioning not in PARTITIONING_MODES:
        raise UsageError(f"--partitioning must be one of {', '.join(PARTITIONING_MODES)}, not '{partitioning}'")
    if num_passes is not None and num_passes < 1:
        raise UsageError("--num-passes must be at least 1")


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
    remove_noops: bool = False,
    validate: bool = True,
    per_pass_shape_inference: bool = True,
    external_data_dir: Optional[str] = None,
    log: LogFn = nolog,
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
    is not a graph input is ignored, with a warning. ``remove_noops`` removes nodes that pass
    their input through unchanged (``x * 1``, identity ``Transpose``...; see
    :mod:`toolkit.surgeon.fold_noops`): folding alone never removes a node that reads a runtime
    value. Types of graph inputs and outputs (sequences and maps included) are kept.

    With ``validate`` (the default), the folded model must load in ONNX-Runtime and give
    the input model's outputs on generated inputs; when it does not, folding is redone
    with less (no If inlining; then only outside subgraphs; then without the nodes whose
    folded values are wrong; at last not at all), and one log line says what was left
    unfolded and why. A model rebuilt without folding (cleanup, sort, pass-through removal)
    must load and compute the same too (InputError otherwise). ``external_data_dir`` is where
    weights not loaded live.
    """
    check_sanitize_options(partitioning, num_passes)
    t_start = time.perf_counter()
    report = SanitizeReport(nodes_before=count_model_nodes(model))
    shell = model_shell(model)
    inputs_before = _override_shapes(model, input_shapes, fold_constants, validate, external_data_dir, log)
    if not (fold_constants or cleanup or toposort or remove_noops):
        return model, _finished(report, model, t_start)

    gs = import_gs()
    check_structure(model)
    types = non_tensor_types(model)

    def finish(graph, noops: bool):
        if noops and not fold_constants:  # (folding removes them in each pass)
            log(f"Pass-through nodes removed: {eliminate_noops(gs, graph)}")
        if cleanup or fold_constants or noops:
            with quiet_gs(), gs_step("clean up"):
                graph.cleanup()
        if toposort:
            with quiet_gs(), gs_step("sort"):
                graph.toposort()
        with gs_step("export"):
            result = export_graph(gs, graph, shell)
        keep_non_tensor_types(result, types)
        return result

    relay = LogRelay(log)  # (a fold in a child logs through it)

    def build(level: Optional[str], excluded: set, noops: bool = remove_noops):
        with quiet_gs(), gs_step("import"):
            graph = gs.import_onnx(model)
        if level is not None:
            fold_passes(gs, graph, shell, report, level=level, num_passes=num_passes, partitioning=partitioning,
                        size_threshold=fold_size_threshold, fold_shapes=fold_shapes, excluded=excluded, log=relay,
                        per_pass_shapes=per_pass_shape_inference, remove_noops=noops)
        else:  # (the model unfolded: the passes of the levels tried before are not its)
            report.passes = []
        return finish(graph, noops)

    refuse_damaged(model, fold_constants, external_data_dir)
    try:
        if fold_constants:
            result = fold_validated(model, FoldInChild(build, report, model, relay), validate, external_data_dir, log,
                                    inputs_before)
        else:
            result = _rewritten(model, build, validate, remove_noops, external_data_dir, log)
    except GraphSurgeonError as exc:
        result = _kept_as_it_was(model, exc, types, log)
    return result, _finished(report, result, t_start)


def _finished(report: SanitizeReport, result, t_start: float) -> SanitizeReport:
    """``report`` with the node count of ``result`` and the time since ``t_start``."""
    report.nodes_after = count_model_nodes(result)
    report.seconds = time.perf_counter() - t_start
    return report


def _kept_as_it_was(model, exc: GraphSurgeonError, types: dict, log: LogFn):
    """``model`` as it was (said) where onnx-graphsurgeon failed (``exc``) on a model with
    optional/sequence values (``types``), which it cannot import or export in some models; else
    ``exc`` raised."""
    if not types:
        raise exc
    log(f"warning: onnx-graphsurgeon cannot rewrite this model's optional/sequence values ({exc}); "
        "the model is written as it was")
    return model


def _rewritten(model, build, validate: bool, remove_noops: bool, external_data_dir, log: LogFn):
    """``model`` rebuilt without folding (``build``: cleaned up, sorted, pass-through nodes
    removed), validated unless not ``validate``."""
    result = build(None, set())
    if validate:
        result = _validated_rewrite(model, result, build, remove_noops, external_data_dir, log)
    return result


def _override_shapes(model, input_shapes, fold_constants: bool, validate: bool, external_data_dir, log: LogFn):
    """Apply ``--override-input-shapes`` (in place) and re-infer shapes; returns the graph inputs
    as they were before (None without overrides)."""
    if input_shapes:
        input_shapes = _only_graph_inputs(model, input_shapes, log)
    if not input_shapes:
        if fold_constants:
            infer_shapes_in_place(model)
        return None
    inputs_before = _overridden(model, input_shapes, log)
    if validate and not fold_constants:  # (with folding, the folded model's validation checks this)
        Validation(model, external_data_dir, inputs_before).check_override()
    return inputs_before


def _overridden(model, input_shapes: Mapping[str, Sequence], log: LogFn) -> list:
    """Give ``model``'s graph inputs ``input_shapes`` and re-infer its shapes (in place); returns
    the graph inputs as they were."""
    inputs_before = [copied(vi) for vi in model.graph.input]
    override_input_shapes(model, dict(input_shapes), inplace=True)
    infer_shapes_in_place(model, reset_outputs=True)
    log(f"Input shapes overridden: {', '.join(f'{k}:{list(v)}' for k, v in input_shapes.items())}; "
        "shapes re-inferred")
    return inputs_before


def _validated_rewrite(model, result, build, remove_noops: bool, external_data_dir, log: LogFn):
    """``result`` (``model`` cleaned up, sorted, pass-through nodes removed) once it loads in
    ONNX-Runtime and computes what ``model`` does; without the pass-through removal when that is
    what breaks it. InputError when even the plain rewrite does not load (nothing is written)."""
    check = Validation(model, external_data_dir)
    err = check.check(result)
    if err is None:
        if check.limits():
            log(f"The rewritten model {check.limits()}")
        return result
    if remove_noops:
        log(f"Pass-through nodes kept: the model without them failed validation ({err})")
        plain = build(None, set(), noops=False)
        if check.check(plain) is None:
            return plain
    raise InputError(
        f"the rewritten model fails validation ({err}); nothing was written (--no-validate writes it anyway)"
    )


def _only_graph_inputs(model, input_shapes: Mapping[str, Sequence], log: LogFn) -> Dict[str, Sequence]:
    """The overrides that name graph inputs. A name that is no tensor of the model is a typo:
    InputError (nothing is written); a tensor that is not a graph input is ignored, with a warning."""
    inputs = [m.name for m in graph_io_meta(model)[0]]
    known = set(top_tensor_names(model))
    for name in (n for n in input_shapes if n not in inputs):
        _ignore_override(model, name, known, inputs, log)
    return {k: v for k, v in input_shapes.items() if k in inputs}


def _ignore_override(model, name: str, known: set, inputs: List[str], log: LogFn) -> None:
    """Warn that the override of ``name``, a tensor that is not one of the graph ``inputs``, is
    ignored; InputError where it is no tensor of the model (``known``: the top graph's)."""
    shown = ", ".join(inputs) or "none"
    if not _names_a_tensor(model, name, known):
        raise _no_tensor_error(name, inputs, shown)
    log(f"warning: '{name}' is not an input of the model (its inputs: {shown}); its shape override is ignored")


def _no_tensor_error(name: str, inputs: List[str], shown: str) -> InputError:
    """The error for an override of ``name``, no tensor of the model: the closest input named."""
    close = difflib.get_close_matches(name, inputs, n=1)
    hint = f"did you mean '{close[0]}'? " if close else ""
    return InputError(f"--override-input-shapes: '{name}' is not a tensor of the model; {hint}its inputs: {shown}")


def _names_a_tensor(model, name: str, top_names: set) -> bool:
    """``name`` is a tensor of the top graph (``top_names``) or of an If/Loop/Scan body."""
    return name in top_names or any(name in g_names for g_names in _body_tensor_names(model))


def _body_tensor_names(model):
    """The names each If/Loop/Scan body defines (inputs and node outputs), body by body."""
    for g in list(walk_graphs(model.graph))[1:]:
        yield {i.name for i in g.input} | set(node_outputs(g))

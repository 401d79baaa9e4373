"""`surgeon sanitize`: fold constants, freeze input shapes, clean up and sort a model."""

from __future__ import annotations

import time
from typing import Dict, Mapping, Optional, Sequence

from toolkit.core.errors import InputError, UsageError
from toolkit.core.graphs import walk_graphs
from toolkit.core.shapes import override_input_shapes
from toolkit.surgeon.fold import SanitizeReport, fold_passes, fold_validated, infer_shapes_in_place
from toolkit.surgeon.load import check_structure, refuse_damaged
from toolkit.surgeon.plumbing import (
    LogFn,
    copied,
    count_model_nodes,
    export_graph,
    gs_step,
    import_gs,
    model_shell,
    nolog,
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


def _has_non_tensor_types(model) -> bool:
    for g in walk_graphs(model.graph):
        for vi in list(g.input) + list(g.output) + list(g.value_info):
            if vi.type.WhichOneof("value") not in (None, "tensor_type"):
                return True
    return False


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
    shell = model_shell(model)

    if input_shapes:
        input_shapes = _only_graph_inputs(model, input_shapes, log)
    inputs_before = None
    if input_shapes:
        inputs_before = [copied(vi) for vi in model.graph.input]
        override_input_shapes(model, dict(input_shapes), inplace=True)
        infer_shapes_in_place(model, reset_outputs=True)
        log(f"Input shapes overridden: {', '.join(f'{k}:{list(v)}' for k, v in input_shapes.items())}; "
            "shapes re-inferred")
        if validate and not fold_constants:  # (with folding, the folded model's validation checks this)
            Validation(model, external_data_dir, inputs_before).check_override()
    elif fold_constants:
        infer_shapes_in_place(model)

    if not (fold_constants or cleanup or toposort):
        report.nodes_after = count_model_nodes(model)
        report.seconds = time.perf_counter() - t_start
        return model, report

    gs = import_gs()
    check_structure(model)

    def finish(graph):
        if cleanup or fold_constants:
            with quiet_gs(), gs_step("clean up"):
                graph.cleanup()
        if toposort:
            with quiet_gs(), gs_step("sort"):
                graph.toposort()
        with gs_step("export"):
            return export_graph(gs, graph, shell)

    def build(level: Optional[str], excluded: set):
        with quiet_gs(), gs_step("import"):
            graph = gs.import_onnx(model)
        if level is not None:
            fold_passes(gs, graph, shell, report, level=level, num_passes=num_passes, partitioning=partitioning,
                         size_threshold=fold_size_threshold, fold_shapes=fold_shapes, excluded=excluded, log=log,
                         per_pass_shapes=per_pass_shape_inference)
        return finish(graph)

    refuse_damaged(model, fold_constants, external_data_dir)
    try:
        if not fold_constants:
            result = build(None, set())
        else:
            result = fold_validated(model, build, validate, external_data_dir, log, inputs_before)
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


def _only_graph_inputs(model, input_shapes: Mapping[str, Sequence], log: LogFn) -> Dict[str, Sequence]:
    inits = {t.name for t in model.graph.initializer}
    inputs = [i.name for i in model.graph.input if i.name not in inits]
    kept = {k: v for k, v in input_shapes.items() if k in inputs}
    for name in input_shapes:
        if name not in kept:
            log(f"warning: '{name}' is not an input of the model (its inputs: {', '.join(inputs) or 'none'}); "
                "its shape override is ignored")
    return kept

"""What ``debug precision`` is asked: :class:`PrecisionConfig` (the fp16/bf16 search) and
:class:`QdqConfig` (the search over a quantized model's Q/DQ pairs).

Each option the command line sets is declared on its field (:mod:`toolkit.core.declare`): the
command binds these classes, so there is one field list. Nothing heavy is imported here (the
command's ``--help`` reads these declarations).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List, Optional

from toolkit.core import shared_options as S
from toolkit.core.compare.tolerances import ToleranceOptions, Tolerances
from toolkit.core.declare import declared, option, shown_as, switch
from toolkit.core.shared_options import ClusterOptions, InputData, ModelFiles, ReplayFiles

DEFAULT_TOLERANCE = 1e-2  # the atol and the rtol of a search, for every output none is given for


def search_tolerances(given: ToleranceOptions) -> Optional[Tolerances]:
    """The tolerance options of ``debug precision`` as one Tolerances (the atol and rtol default to
    1e-2 here, for every output a value given for some outputs only does not name); None when none
    is given (the search's defaults)."""
    return given.combined(default=DEFAULT_TOLERANCE) if given.tolerances_given() else None


@shown_as(save_replay=dict(after="load_outputs"), load_replay=dict(after="save_replay"))
@dataclass
class PrecisionConfig(ReplayFiles, InputData, ClusterOptions, ModelFiles):
    """The fp16/bf16 search. Inherited: ``model``, ``external_data_dir``, the inputs (``load_inputs``,
    ``seed``, ``val_range``) and the cluster the checks may run on (``cluster``: "ray[:ADDRESS]";
    ``gpus_per_check``: None is 1 for a TensorRT candidate, else 0; ``cpus_per_check``)."""

    output: Optional[str] = option(
        "-o", "--output", metavar="PATH",
        help="Where to write the result: the mixed-precision model (fp16/bf16, the nodes found in fp32), or for "
        "a quantized model, the model with the Q/DQ pairs found in float.",
    )
    reference: str = "onnxrt"
    candidate: str = "onnxrt:fp16"
    tolerances: Optional[Tolerances] = None  # None: atol and rtol 1e-2 (search_tolerances)
    keep_fp32: List[str] = option("--keep-fp32", metavar="NAMES...", factory=list,
                                  help="Nodes kept in fp32 in every check (names, globs, op types).")
    mode: Optional[str] = option(  # None/"default", "bisect", "linear"
        "--mode", metavar="MODE", complete=("bisect", "linear"),
        help="bisect (fewest checks, not 1-minimal) or linear; default: bisect + 1-minimal.",
    )
    load_outputs: Optional[str] = option(  # reference outputs from a file instead of the reference runner
        "--load-outputs", "--load-results", metavar="PATH",
        help="Reference outputs from this file (its first runner) instead of running the reference.",
    )
    input_shapes: List[str] = declared(S.INPUT_SHAPES, factory=list)
    iterations: int = option("--iterations", "--iters", metavar="N", default=1, help='Generated input sets to compare on.')


@shown_as(cluster=dict(after="apply_scales"), gpus_per_check=dict(after="cluster"), cpus_per_check=dict(after="gpus_per_check"))
@dataclass
class QdqConfig(PrecisionConfig):
    """The search over a quantized model's Q/DQ pairs: the fp16 search's options, and its own
    (each one's help says "Quantized models")."""

    candidate: str = "onnxrt"  # the quantized model as it is
    reference_model: Optional[str] = option(  # the float model; None: the QDQ model with every pair bypassed
        "--reference-model", metavar="PATH",
        help="Quantized models: the float model to compare with (default: the model with every Q/DQ pair in float).",
    )
    weights: bool = switch("--qdq-weights", help="Quantized models: search the weight Q/DQ pairs too.")
    suggest_scales: bool = True
    table: bool = switch(  # also every activation pair's local/upstream error, ranked (the reference's tensors)
        "--qdq-table",
        help="Quantized models: also print every pair's own error against the error it receives, ranked.",
    )
    validate_inputs: List[str] = option(  # held-out input files (else split or generated)
        "--validate-inputs", metavar="PATH...", factory=list,
        help="Quantized models: held-out inputs the result is checked on (default: a quarter of four or more "
        "--load-inputs sets, or further generated sets).",
    )
    held_out: Optional[int] = option(  # loaded input sets held out (None: a quarter of four or more)
        "--held-out", metavar="N", help="Quantized models: how many of the --load-inputs sets to hold out (0: none).",
    )
    # the pass rule: None (the tolerances), a metric name (toolkit.quant.metrics), or a
    # callable fn(reference_outputs, candidate_outputs) -> bool, judged per input set
    metric: Any = option(
        "--metric", metavar="METRIC", complete=("top1", "topk:5", "argmax-agreement", "cosine", "snr-db"),
        takes=Optional[str],
        help="Quantized models: the pass rule in place of the tolerances: top1, topk:K, argmax-agreement, cosine "
        "or snr-db (docs/quantization.md).",
    )
    metric_tolerance: Optional[float] = option(
        "--metric-tolerance", metavar="X",
        help="Quantized models: the metric's tolerance (share of samples differing; 1 - cosine; least SNR in dB).",
    )
    metric_outputs: List[str] = option(  # the outputs the metric judges (none: all)
        "--metric-outputs", metavar="NAMES...", factory=list,
        help="Quantized models: the outputs --metric judges (default: every output).",
    )
    float_op_types: List[str] = option(  # pairs at these ops' inputs/outputs always in float
        "--float-op-types", metavar="TYPES...", factory=list,
        help="Quantized models: keep the pairs at these ops' inputs and outputs in float in every check "
        "(e.g. LayerNormalization,Softmax).",
    )
    order: str = option(  # the order the units are searched in: "error" (most error added first) or "graph"
        "--order", metavar="ORDER", complete=("graph", "error"), default="error", takes=Optional[str],
        parse=lambda given: given or "error",
        help="Quantized models: search the pairs most error first (error, the default) or in node order (graph).",
    )
    singles: bool = switch(  # each unit alone before the search (a minimum that rests on no assumption)
        "--singles", help="Quantized models: check each pair alone first (one check per pair, stopping at the "
        "first that passes): a proved minimum even where more pairs in float can fail.",
    )
    apply_scales: bool = switch(  # -o gets the model with every passing suggested scale (when it passes)
        "--apply-scales", help="Quantized models: -o gets the model with every passing suggested scale applied "
        "(the other pairs found in float), when it passes.",
    )

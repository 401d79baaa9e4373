"""What ``toolkit run`` can be asked to do, as typed by the user, and the progress interface.

Each option of ``toolkit run`` is declared once, on its :class:`RunOptions` field (flags, help,
help panel, metavar; for a runner's option, its kind and runner-spec name): the command line,
its help, the runner kinds' options and the "ignored without --trt" warnings are read from
there (:mod:`toolkit.core.declare`). Nothing here imports numpy, onnx or a backend library:
the CLI builds a :class:`RunOptions` and hands it to :func:`toolkit.run.pipeline.execute`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence

from toolkit.backends.onnxrt import OPTIMIZATION_LEVELS, PROVIDER_ALIASES, provider_list
from toolkit.core import shared_options as S
from toolkit.core.declare import declared, option, shown_as, switch
from toolkit.core.compare.tolerances import ComparisonOptions, Tolerances
from toolkit.core.shared_options import DataLoaderOptions, InputData, ModelFiles, TrtPrecision
from toolkit.core.progress import Messages

_INPUTS = "Inputs"
_OUTPUTS = "Outputs and comparison"
_ORT = "ONNX-Runtime"
_TRT = "TensorRT"


def _list(*flags: str, **kw):
    return option(*flags, factory=list, **kw)


@shown_as(
    model=dict(help="Path to the ONNX model (or TensorRT engine), or '-' to read it from stdin.", required=False),
    seed=dict(panel=_INPUTS, after="ort_optimization"),
    val_range=dict(
        panel=_INPUTS, after="seed",
        help="Range of generated values: [lo,hi] for every input, name:[lo,hi] for one (also name:lo,hi "
        "without brackets). Integers get the integers in [lo,hi] (default [0,1]).",
    ),
    load_inputs=dict(
        panel=_INPUTS, after="iterations",
        help="Inputs file(s) (JSON or .npz) to feed instead of generated data; their iterations are used in "
        "order. Files may hold more tensors than the model needs.",
    ),
    atol=dict(panel=_OUTPUTS, after="onnx_exclude_outputs"),
    rtol=dict(panel=_OUTPUTS, after="atol"),
    check_error_stat=dict(panel=_OUTPUTS, after="rtol"),
    error_quantile=dict(panel=_OUTPUTS, after="check_error_stat"),
    postprocess=dict(panel=_OUTPUTS, after="error_quantile"),
    compare_func=dict(panel=_OUTPUTS, after="postprocess"),
    index_tolerance=dict(panel=_OUTPUTS, after="compare_func"),
    no_shape_check=dict(panel=_OUTPUTS, after="index_tolerance"),
    data_loader_script=dict(panel=_INPUTS, after="save_onnx"),
    data_loader_func_name=dict(panel=_INPUTS, after="data_loader_script"),
    external_data_dir=dict(panel=_ORT, after="save_report"),
    fp16=dict(after="trt_exclude_outputs"),
    bf16=dict(after="fp16"),
    int8=dict(after="bf16"),
    tf32=dict(after="int8"),
)
@dataclass
class RunOptions(TrtPrecision, DataLoaderOptions, ComparisonOptions, InputData, ModelFiles):
    """Everything ``toolkit run`` can be asked to do (option lists as typed by the user).

    Inherited, each declared once: ``model`` and ``external_data_dir``, the inputs (``load_inputs``,
    ``seed``, ``val_range``), the comparison options, ``--data-loader-script`` and TensorRT's
    precision flags (``fp16``, ``bf16``, ``int8``, ``tf32``); ``shown_as`` places them in this
    command's help sections, in the order its help has always had.

    ``runners`` holds runner specs (``onnxrt``, ``trt``, ``onnxrt:opt=disable``, see
    :mod:`toolkit.run.specs`); a spec's options override the flags below for that runner.
    The runner kind of each flag is declared on its field (``runner=``).
    """

    providers: List[str] = _list(
        "--providers", "--execution-providers", metavar="PROVIDERS...", panel=_ORT, runner="onnxrt", spec="providers", convert=provider_list,
        complete=tuple(PROVIDER_ALIASES),
        help="ONNX-Runtime execution providers in priority order: cpu (default), cuda, trt, ... or full names "
        "such as CUDAExecutionProvider.",
    )
    ort_optimization: Optional[str] = option(
        "--ort-optimization", "--graph-optimization-level", metavar="LEVEL", panel=_ORT, runner="onnxrt", spec="opt",
        choices=tuple(OPTIMIZATION_LEVELS), complete=tuple(OPTIMIZATION_LEVELS),
        help="ONNX-Runtime graph optimization level: disable, basic, extended or all (default); "
        "ORT_DISABLE_ALL, ORT_ENABLE_BASIC, ... are accepted too.",
    )
    input_shapes: List[str] = declared(S.INPUT_SHAPES.replace(panel=_INPUTS), factory=list)
    iterations: Optional[int] = option("--iterations", "--iters", metavar="N", panel=_INPUTS,
                                       help="Number of inference iterations (default 1; 0 runs nothing).")
    save_inputs: Optional[str] = option("--save-inputs", "--save-input-data", metavar="PATH", panel=_INPUTS,
                                        help="Save the inputs fed to the model (.json or .npz).")
    load_outputs: List[str] = _list(
        "--load-outputs", "--load-results", metavar="PATH...", panel=_OUTPUTS,
        help="Outputs file(s) (JSON or .npz) to compare against; outputs are matched by name.",
    )
    save_outputs: Optional[str] = option("--save-outputs", "--save-results", metavar="PATH", panel=_OUTPUTS,
                                         help="Save the outputs (.json or .npz; '-' writes JSON to stdout).")
    onnx_outputs: List[str] = _list("--onnx-outputs", metavar="NAMES...", panel=_ORT, runner="onnxrt", complete="mark-all",
                                    help="Tensors to return instead of the model's outputs: 'mark all' or '*' "
                                    "(every output of every node of the top graph), names, or glob patterns.")
    onnx_exclude_outputs: List[str] = _list("--onnx-exclude-outputs", metavar="NAMES...", panel=_ORT, runner="onnxrt",
                                            help="Names or glob patterns to leave out of the outputs.")
    # --fp-to-fp16: convert the ONNX model to mixed fp16 before running it
    fp_to_fp16: bool = switch(
        "--fp-to-fp16",
        help="Convert the ONNX model to mixed fp16 before running it (as toolkit convert --fp-to-fp16; graph "
        "inputs and outputs keep their types).",
    )
    # --save-onnx: the ONNX model as it ran (outputs marked)
    save_onnx: Optional[str] = option(
        "--save-onnx", metavar="PATH", help="Save the ONNX model as it runs (--onnx-outputs marked)."
    )
    # accepted for Polygraphy command lines; no effect on a run
    use_subprocess: bool = switch(
        "--use-subprocess", "--sequential-runners",
        help="Accepted for Polygraphy command lines; has no effect (runners run one after another in this "
        "process, each released before the next starts).",
    )
    infinities_equal: bool = switch(
        "--infinities-compare-equal", panel=_OUTPUTS,
        help="Accepted for Polygraphy command lines: equal infinities always compare equal here.",
    )
    shape_inference: bool = switch(
        "--shape-inference", "--do-shape-inference", "--no-onnxruntime-shape-inference", panel=_ORT,
        help="Accepted for Polygraphy command lines; has no effect (ONNX-Runtime needs no shape "
        "inference to run the model).",
    )
    validate: bool = switch("--validate", panel=_OUTPUTS, help="Fail when an output holds NaN or Inf values.")
    save_report: Optional[str] = option(  # the layerwise diagnosis as .json or .html
        "--save-report", metavar="PATH", panel=_OUTPUTS,
        help="Write the layerwise diagnosis of the comparisons (first tensor out of tolerance, nodes ranked "
        "by error amplification, error by depth): .json for scripts, .html to read.",
    )
    # TensorRT (used when a "trt" runner is among the runners)
    trt_outputs: List[str] = _list(
        "--trt-outputs", metavar="NAMES...", panel=_TRT, runner="trt",
        help="Tensors TensorRT returns instead of the model's outputs: 'mark all' or '*' (every layer "
        "output), names, or glob patterns.",
    )
    trt_exclude_outputs: List[str] = _list("--trt-exclude-outputs", metavar="NAMES...", panel=_TRT, runner="trt",
                                           help="Names or glob patterns to leave out of the TensorRT outputs.")
    calibration_cache: Optional[str] = option(
        "--calibration-cache", metavar="PATH", panel=_TRT, runner="trt",
        help="INT8 calibration cache: read if it exists (no calibration), else written.",
    )
    pool_limit: List[str] = _list("--pool-limit", "--memory-pool-limit", metavar="POOL:SIZE...", panel=_TRT, runner="trt",
                                  help="TensorRT memory pool limits as pool:size, e.g. workspace:1G tactic_dram:512M.")
    # one list of "name:shape" per occurrence of the flag; occurrence k is profile k
    trt_min_shapes: List[List[str]] = _list(
        "--trt-min-shapes", metavar="NAME:SHAPE...", panel=_TRT, runner="trt",
        help="Minimum shapes of a TensorRT profile: name:[1,3,224,224] ...; repeat the flag for more profiles.",
    )
    trt_opt_shapes: List[List[str]] = _list(
        "--trt-opt-shapes", metavar="NAME:SHAPE...", panel=_TRT, runner="trt",
        help="Shapes TensorRT optimizes for (and generated inputs use); repeat for more profiles.",
    )
    trt_max_shapes: List[List[str]] = _list(
        "--trt-max-shapes", metavar="NAME:SHAPE...", panel=_TRT, runner="trt",
        help="Maximum shapes of a TensorRT profile; repeat the flag for more profiles.",
    )
    save_engine: Optional[str] = option(
        "--save-engine", metavar="PATH", panel=_TRT, runner="trt", help="Save the TensorRT engine built."
    )
    runners: List[str] = option(
        "--runners", metavar="SPEC...", factory=lambda: ["onnxrt"], complete="runner-spec",
        help="Runner specs to run after the runners of the flags, in order: onnxrt:providers=cuda, onnxrt:opt=disable, "
        "trt:fp16, ... (two runners of one kind side by side).",
    )
    # ---- set by the command or the library, not by a flag of their own
    # ONNX-Runtime: emulate fp16 / bf16 storage on the CPU (runner specs onnxrt:fp16, onnxrt:bf16)
    onnxrt_fp16: bool = switch(runner="onnxrt", spec="fp16")
    onnxrt_bf16: bool = switch(runner="onnxrt", spec="bf16")
    # library use: the comparison as one typed value (Tolerances.of(atol=1e-3, rtol={"out": 1e-2}));
    # None: the comparison options' (inherited, typed where the command line reads them) combined
    tolerances: Optional[Tolerances] = None
    # library use: the nodes kept fp32 when onnxrt:fp16/bf16 emulates (None: chosen for the model); a
    # subgraph cut from a model keeps the model's choice (debug reduce --compare)
    fp32_nodes: Optional[List[str]] = None
    diagnose: bool = True  # gather tensor errors for the diagnosis of a failing many-tensor comparison
    command: str = ""  # the command line, recorded in reports
    # library use: keep every live runner's outputs in the report (memory then grows with iterations)
    keep_outputs: bool = False
    model_type: Optional[str] = None  # --model-type: "engine" loads MODEL as a TensorRT engine whatever its suffix
    # the options a runner kind declares itself (RunnerKind.declares): kind name -> its options
    # object; a kind missing here has its defaults (see :meth:`of`)
    kind_options: Dict[str, Any] = field(default_factory=dict)

    def of(self, kind: str) -> Any:
        """The options object of runner kind ``kind``'s own declarations (``opts.of("openvino").device``),
        its defaults when none was given; None for a kind that declares none."""
        own = self.kind_options.get(kind)
        if own is None and kind in KIND_DECLARATIONS:
            own = self.kind_options[kind] = KIND_DECLARATIONS[kind]()
        return own


# kind name -> the dataclass of the options that runner kind declares itself (filled by
# toolkit.run.registry.register, which imports this module: never the other way)
KIND_DECLARATIONS: Dict[str, Any] = {}


class Reporter(Messages):
    """Receives progress while a run goes on (and ``info``/``warn``). Every method may be
    overridden; all are no-ops."""

    def runner_start(self, runner) -> None:
        pass

    def iterations_start(self, runner_name: str, total: int) -> None:
        pass

    def iteration(self, runner_name: str, index: int, feed: Mapping, outputs: Mapping, seconds: float) -> None:
        pass

    def runner_done(self, runner_name: str, times: Sequence[float]) -> None:
        pass

    def saved(self, what: str, path: str) -> None:
        pass

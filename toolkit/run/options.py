"""What ``toolkit run`` can be asked to do, as typed by the user, and the progress interface.

Nothing here imports numpy, onnx or a backend: the CLI builds a :class:`RunOptions` and
hands it to :func:`toolkit.run.pipeline.execute`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Mapping, Optional, Sequence

from toolkit.core.progress import Messages


@dataclass
class RunOptions:
    """Everything ``toolkit run`` can be asked to do (option lists as typed by the user).

    ``runners`` holds runner specs (``onnxrt``, ``trt``, ``onnxrt:opt=disable``, see
    :mod:`toolkit.run.specs`); a spec's options override the flags below for that runner.
    Which flags belong to which runner kind is declared in :mod:`toolkit.run.registry`.
    """

    model: str
    runners: List[str] = field(default_factory=lambda: ["onnxrt"])
    providers: List[str] = field(default_factory=list)
    onnx_outputs: List[str] = field(default_factory=list)
    onnx_exclude_outputs: List[str] = field(default_factory=list)
    external_data_dir: Optional[str] = None
    ort_optimization: Optional[str] = None
    seed: Optional[int] = None
    val_range: List[str] = field(default_factory=list)
    input_shapes: List[str] = field(default_factory=list)
    iterations: Optional[int] = None
    load_inputs: List[str] = field(default_factory=list)
    save_inputs: Optional[str] = None
    load_outputs: List[str] = field(default_factory=list)
    save_outputs: Optional[str] = None
    atol: List[str] = field(default_factory=list)
    rtol: List[str] = field(default_factory=list)
    check_error_stat: List[str] = field(default_factory=list)
    error_quantile: List[str] = field(default_factory=list)
    # comparison: --postprocess top-K (global or name:top-K), --compare-func simple|indices
    postprocess: List[str] = field(default_factory=list)
    compare_func: List[str] = field(default_factory=list)
    index_tolerance: List[str] = field(default_factory=list)
    no_shape_check: bool = False
    validate: bool = False
    # --save-onnx: the ONNX model as it ran (outputs marked)
    save_onnx: Optional[str] = None
    # --fp-to-fp16: convert the ONNX model to mixed fp16 before running it
    fp_to_fp16: bool = False
    # --data-loader-script SCRIPT[:FUNC]: feeds from a Python function (instead of --load-inputs)
    data_loader_script: Optional[str] = None
    data_loader_func_name: Optional[str] = None
    save_report: Optional[str] = None  # --save-report: the layerwise diagnosis as .json or .html
    diagnose: bool = True  # gather tensor errors for the diagnosis of a failing many-tensor comparison
    command: str = ""  # the command line, recorded in reports
    # library use: keep every live runner's outputs in the report (memory then grows with iterations)
    keep_outputs: bool = False
    # TensorRT (used when a "trt" runner is among the runners)
    trt_outputs: List[str] = field(default_factory=list)
    trt_exclude_outputs: List[str] = field(default_factory=list)
    fp16: bool = False
    # ONNX-Runtime: emulate fp16 / bf16 storage on the CPU (runner specs onnxrt:fp16, onnxrt:bf16)
    onnxrt_fp16: bool = False
    onnxrt_bf16: bool = False
    bf16: bool = False
    int8: bool = False
    tf32: bool = False
    pool_limit: List[str] = field(default_factory=list)
    # one list of "name:shape" per occurrence of the flag; occurrence k is profile k
    trt_min_shapes: List[List[str]] = field(default_factory=list)
    trt_opt_shapes: List[List[str]] = field(default_factory=list)
    trt_max_shapes: List[List[str]] = field(default_factory=list)
    save_engine: Optional[str] = None
    calibration_cache: Optional[str] = None
    # OpenVINO (used when an "openvino" runner is among the runners)
    openvino_outputs: List[str] = field(default_factory=list)
    openvino_exclude_outputs: List[str] = field(default_factory=list)
    openvino_device: Optional[str] = None
    openvino_precision: Optional[str] = None
    model_type: Optional[str] = None  # --model-type: "engine" loads MODEL as a TensorRT engine whatever its suffix

    def trt_options_given(self) -> List[str]:
        """The TensorRT-only options that were set (to warn when --trt is not)."""
        from toolkit.run.registry import options_given

        return options_given(self, "trt")


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

"""Polygraphy options that toolkit refuses on purpose, each with what to do instead.

An option Polygraphy knows never gets the generic "No such option": the error boundary
(toolkit.cli.errors) looks the option up here and prints its advice instead (exit 2), and a
prefix of one of them and of an option of the command is ambiguous, as in Polygraphy
(toolkit.cli.grammar.expand_prefixes). Add an entry when a Polygraphy option is refused on
purpose; remove it when it is supported. Keys are option names; values are one sentence saying
what to do instead. ``docs/compatibility.md`` lists them per command.
"""

from __future__ import annotations

from typing import Optional

from toolkit.core.shared_options import ATOL_FLAG, RTOL_FLAG, STAT_FLAG, TOLERANCE_OPTIONS

_TF = "toolkit runs ONNX models only: convert the TensorFlow model to ONNX first (e.g. with tf2onnx)"
_SCRIPT = "toolkit writes no Python scripts: the command line is the interface, and toolkit's library API is described in docs/api.md"
_TRT_BUILDER = (
    "this TensorRT builder setting is not exposed by toolkit; build the engine with trtexec or Polygraphy "
    "and run it with toolkit run ENGINE --trt"
)
_TRT_PRECISION = (
    "per-layer precision lives in the model (TensorRT 11 builds strongly typed networks and has no precision "
    "constraints): keep layers in fp32 with toolkit convert MODEL --fp-to-fp16 --keep-fp32 NAMES (toolkit debug "
    "precision finds them), then run the converted model with --trt; this works the same on TensorRT 10"
)
_TRT_TACTICS = (
    "tactic replay needs TensorRT's algorithm selector, which TensorRT 11 removed: for identical tactics, save the "
    "engine once with --save-engine and run it again with toolkit run ENGINE --trt"
)
_VISUAL = "toolkit draws no plots: save the outputs (--save-outputs) and inspect them with toolkit inspect data"
_TF32_CKPT = "toolkit reads ONNX models only; TensorFlow checkpoints are not supported"

UNSUPPORTED_OPTIONS = {
    # models other than ONNX
    **{o: _TF for o in ("--tf", "--tftrt", "--use-tftrt", "--minimum-segment-size", "--dynamic-op", "--tf-outputs",
                        "--save-pb", "--save-tensorboard", "--freeze-graph", "--gpu-memory-fraction", "--allow-growth",
                        "--xla", "--save-timeline", "--opset")},
    "--ckpt": _TF32_CKPT,
    "--gen": _SCRIPT,
    "--gen-script": _SCRIPT,
    "--pluginref": "the plugin reference runner is not supported: compare --trt against --onnxrt instead",
    "--trt-network-postprocess-script": _SCRIPT,
    "--trt-npps": _SCRIPT,
    "--trt-config-script": _SCRIPT,
    "--trt-config-postprocess-script": _SCRIPT,
    "--trt-cpps": _SCRIPT,
    "--data-loader-backend-module": "generated data always comes from numpy; use --data-loader-script for your own data",
    "--compare-func-script": f"custom comparison scripts are not supported: use {TOLERANCE_OPTIONS}, or compare saved outputs in Python",
    "--postprocess-func-script": "custom post-processing scripts are not supported: use --postprocess top-K, or post-process saved outputs in Python",
    # plots and heatmaps
    **{o: _VISUAL for o in ("--save-heatmaps", "--show-heatmaps", "--save-error-metrics-plot",
                            "--show-error-metrics-plot", "--visual", "--visual-port", "--save-visual", "--histogram")},
    # comparison metrics toolkit does not compute
    **{o: f"this comparison metric is not supported: use {ATOL_FLAG}/{RTOL_FLAG} with {STAT_FLAG} elemwise, max, mean, median or quantile"
       for o in ("--l2-threshold", "--l2-tolerance", "--cosine-similarity-threshold", "--psnr-threshold",
                 "--psnr-tolerance", "--snr-threshold", "--snr-tolerance", "--lpips-threshold", "--lpips-tolerance")},
    "--warm-up": "time with --iterations N and read the average inference time",
    "--ignore-external-data": "this command needs the model's weights; --ignore-external-data applies to inspect model, surgeon and debug reduce",
    "--fp-to-fp16": "convert the model first with toolkit convert --fp-to-fp16 (toolkit run accepts --fp-to-fp16 itself)",
    **{o: "run --save-onnx writes the model as one file (with external data only over 2 GB); re-save it with "
          "toolkit surgeon sanitize MODEL -o OUT --save-external-data" for o in (
        "--save-external-data", "--external-data-path", "--external-data-size-threshold")},
    "--no-save-all-tensors-to-one-file": "external weights always go to one file (--external-data-path)",
    "--check-inference": "give the check command instead: --check toolkit run polygraphy_debug.onnx --onnxrt",
    # (options other commands take; the advice is what this command does instead)
    "--list-unbounded-dds": "listing unbounded data-dependent shapes is not supported by this command",
    "--shape-inference": "shapes are always inferred with ONNX shape inference here; drop the option",
    "--do-shape-inference": "shapes are always inferred with ONNX shape inference here; drop the option",
    "--no-onnxruntime-shape-inference": "ONNX-Runtime is used for shapes only with --force-fallback-shape-inference; drop the option",
    "--no-shape-inference": "this command needs shape inference; drop the option",
    "--no-per-pass-shape-inference": "drop the option: shape inference runs between folding passes",
    "--force-fallback-shape-inference": "this command uses ONNX shape inference; toolkit surgeon extract and debug reduce take --force-fallback-shape-inference",
    "--set-unbounded-dds-upper-bound": "bounding data-dependent shapes is not supported by this command",
    "--model-inputs": "use --model-input-shapes, the newer name of this option",
    "--outputs": "this command keeps the model's outputs; choose other outputs with toolkit surgeon extract --outputs",
    "--exclude-outputs": "this command keeps the model's outputs; choose other outputs with toolkit surgeon extract --outputs",
    "--seed": "this command generates no input data; give shapes instead (--model-input-shapes / --override-input-shapes)",
    "--val-range": "this command generates no input data; give shapes instead (--model-input-shapes / --override-input-shapes)",
    "--iterations": "this command uses one set of inputs; iterate in the check command (toolkit run --iterations N)",
    "--iters": "this command uses one set of inputs; iterate in the check command (toolkit run --iterations N)",
    "--load-inputs": "this command infers shapes without data; give shapes with --model-input-shapes or --override-input-shapes",
    "--load-input-data": "this command infers shapes without data; give shapes with --model-input-shapes or --override-input-shapes",
    "--data-loader-script": "save the script's data first (toolkit run MODEL --onnxrt --data-loader-script SCRIPT --save-inputs inputs.json) and pass inputs.json with --load-inputs",
    "--save-accuracy-results": "save the outputs (--save-outputs) instead; the comparison is printed and its verdict is the exit code",
    "--check-average": "each iteration is checked on its own; use --check-error-stat mean for an average over elements",
    "--fail-fast": "every output is compared and reported; the exit code is 1 as soon as one fails",
    "--save-input-blob": "save inputs with --save-inputs (JSON or .npz) instead",
    "--onnx-outputs-by-type": "mark outputs by name or glob pattern with --onnx-outputs instead",
    "--trt-outputs-by-type": "mark outputs by name or glob pattern with --trt-outputs instead",
    "--outputs-by-type": "name the outputs (or 'mark all') with --outputs instead",
    "--ext": "toolkit loads no ONNX extension libraries (onnxruntime-extensions); register custom ops in the model's runtime instead",
    "--onnx-flags": "TensorRT's ONNX parser flags are not exposed by toolkit",
    "--plugin-instancenorm": "TensorRT's ONNX parser flags are not exposed by toolkit",
    "--convert-to": "inspect model prints text or --json; use onnx.helper / netron for other views",
    "--combine-tensor-info": "use inspect model --json, which includes every tensor's dtype and shape",
    # TensorRT builder knobs not exposed
    **{o: _TRT_BUILDER for o in (
        "--fp8", "--sparse-weights", "--version-compatible", "--exclude-lean-runtime", "--calib-base-cls",
        "--calibration-base-class", "--quantile", "--regression-cutoff", "--load-timing-cache",
        "--error-on-timing-cache-miss", "--disable-compilation-cache", "--tactic-sources", "--trt-safety-restricted",
        "--refittable", "--strip-plan", "--use-dla", "--allow-gpu-fallback", "--preview-features",
        "--builder-optimization-level", "--hardware-compatibility-level", "--max-aux-streams", "--quantization-flags",
        "--profiling-verbosity", "--weight-streaming", "--runtime-platform", "--direct-io",
        "--tiling-optimization-level", "--plugins", "--enable-uint8-asymmetric-quantization-dla",
        "--decomposable-attentions", "--tensor-dtypes", "--tensor-datatypes", "--all-tensor-dtypes",
        "--all-tensor-datatypes", "--tensor-formats", "--all-tensor-formats", "--strongly-typed", "--mark-debug",
        "--mark-unfused-tensors-as-debug-tensors", "--save-timing-cache", "--load-runtime",
        "--dla-workspace-allocation-strategy", "--optimization-profile", "--allocation-strategy",
        "--weight-streaming-budget")},
    # TensorRT recipe options, decided one by one (docs/compatibility.md): TensorRT 11 is strongly typed
    **{o: _TRT_PRECISION for o in ("--layer-precisions", "--precision-constraints")},
    **{o: _TRT_TACTICS for o in ("--save-tactics", "--save-tactic-replay", "--load-tactics", "--load-tactic-replay")},
    "--display-as": "toolkit shows the TensorRT view of a model from its engine: build it with toolkit run MODEL "
    "--trt --save-engine model.engine, then run toolkit inspect model model.engine --show layers",
}


def unsupported_advice(option: str) -> Optional[str]:
    """The advice for a Polygraphy option toolkit refuses on purpose, or None."""
    return UNSUPPORTED_OPTIONS.get(option.split("=", 1)[0])

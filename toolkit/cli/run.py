"""``toolkit run``: run a model on ONNX-Runtime and/or TensorRT, save and compare results.

Thin layer: options -> :class:`toolkit.run.RunOptions` -> :func:`toolkit.run.execute` -> render.
Logs, tables and the final PASSED/FAILED line go to stderr; stdout only carries data
(``--save-outputs -`` / ``--save-inputs -``).
"""

# (no `from __future__ import annotations`: Typer would have to eval every annotation string)

import shlex
import sys
from typing import TYPE_CHECKING, List, Optional, Tuple

import typer

from toolkit.cli.options import (
    Annotated, AtolOpt, CheckErrorStatOpt, DataLoaderFuncOpt, DataLoaderScriptOpt, ExternalDataDirOpt, InputShapesOpt,
    ListOpt, RtolOpt, SeedOpt, ToolkitCommand, check_data_output, command_kwargs, from_params, option,
    split_group,
)
from toolkit.cli.output import err_console, is_terminal, log, result, warn

if TYPE_CHECKING:
    from rich.console import JustifyMethod

_ARGV_KEY = "toolkit.run.argv"


# Help sections of `run` (options not listed stay under "Options": what to run).
_PANELS = {
    "Inputs": ("--seed", "--val-range", "--input-shapes", "--iterations", "--load-inputs", "--data-loader-script",
               "--data-loader-func-name", "--save-inputs"),
    "Outputs and comparison": ("--load-outputs", "--save-outputs", "--atol", "--rtol", "--check-error-stat",
                               "--error-quantile", "--postprocess", "--compare-func", "--index-tolerance",
                               "--no-shape-check", "--infinities-compare-equal", "--validate", "--save-report"),
    "ONNX-Runtime": ("--providers", "--ort-optimization", "--onnx-outputs", "--onnx-exclude-outputs",
                     "--external-data-dir", "--shape-inference"),
    "TensorRT": ("--trt-outputs", "--trt-exclude-outputs", "--fp16", "--bf16", "--int8", "--tf32", "--calibration-cache",
                 "--pool-limit", "--trt-min-shapes", "--trt-opt-shapes", "--trt-max-shapes", "--save-engine"),
    "OpenVINO": ("--openvino-device", "--openvino-precision", "--openvino-outputs", "--openvino-exclude-outputs"),
}


class RunCommand(ToolkitCommand):
    """Remembers the command line (for the final PASSED/FAILED line and runner order)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        panel_of = {opt: panel for panel, opts in _PANELS.items() for opt in opts}
        for param in self.params:
            for opt in getattr(param, "opts", ()):
                if opt in panel_of:
                    param.rich_help_panel = panel_of[opt]

    def parse_args(self, ctx, args):
        ctx.meta[_ARGV_KEY] = list(args)
        return super().parse_args(ctx, args)




# The help text of each option of `run`, by its first flag.
_RUN_OPTS = {
    "--onnxrt": "Run the model with ONNX-Runtime.",
    "--trt": "Run the model with TensorRT (needs TensorRT and cuda-python: the [trt] extra).",
    "--runners": "Runner specs to run after the runners of the flags, in order: onnxrt:providers=cuda, "
        "openvino:precision=f32, onnxrt:opt=disable, trt:fp16, ... (two runners of one kind side by side).",
    "--openvino": "Run the model with OpenVINO (the [openvino] extra); its log line names the precision it infers in.",
    "--providers": "ONNX-Runtime execution providers in priority order: cpu (default), cuda, trt, ... or full names "
        "such as CUDAExecutionProvider.",
    "--ort-optimization": "ONNX-Runtime graph optimization level: disable, basic, extended or all (default); "
        "ORT_DISABLE_ALL, ORT_ENABLE_BASIC, ... are accepted too.",
    "--val-range": "Range of generated values: [lo,hi] for every input, name:[lo,hi] for one (also name:lo,hi "
        "without brackets). Integers get the integers in [lo,hi] (default [0,1]).",
    "--iterations": "Number of inference iterations (default 1; 0 runs nothing).",
    "--load-inputs": "Inputs file(s) (JSON or .npz) to feed instead of generated data; their iterations are used in "
        "order. Files may hold more tensors than the model needs.",
    "--save-inputs": "Save the inputs fed to the model (.json or .npz).",
    "--load-outputs": "Outputs file(s) (JSON or .npz) to compare against; outputs are matched by name.",
    "--save-outputs": "Save the outputs (.json or .npz; '-' writes JSON to stdout).",
    "--onnx-outputs": "Tensors to return instead of the model's outputs: 'mark all' or '*' (every output of every "
        "node of the top graph), names, or glob patterns.",
    "--onnx-exclude-outputs": "Names or glob patterns to leave out of the outputs.",
    "--error-quantile": "The quantile --check-error-stat quantile checks (0..1, default 0.99); also name:Q.",
    "--postprocess": "Compare the indices of the K largest values instead of the values (along the last axis, or "
        "axis N), for every output or one (name:top-5).",
    "--compare-func": "simple (tolerances, the default) or indices (index arrays such as top-K results must hold the "
        "same indices, each at most --index-tolerance positions away).",
    "--index-tolerance": "With --compare-func indices: how far an index may move (default 0); also name:N.",
    "--no-shape-check": "Compare outputs whose shapes differ but hold the same number of elements, element by "
        "element (the reference reshaped).",
    "--fp-to-fp16": "Convert the ONNX model to mixed fp16 before running it (as toolkit convert --fp-to-fp16; graph "
        "inputs and outputs keep their types).",
    "--save-onnx": "Save the ONNX model as it runs (--onnx-outputs marked).",
    "--use-subprocess": "Accepted for Polygraphy command lines; has no effect (runners run one after another in this "
        "process, each released before the next starts).",
    "--infinities-compare-equal": "Accepted for Polygraphy command lines: equal infinities always compare equal here.",
    "--shape-inference": "Accepted for Polygraphy command lines; has no effect (ONNX-Runtime needs no shape "
        "inference to run the model).",
    "--validate": "Fail when an output holds NaN or Inf values.",
    "--save-report": "Write the layerwise diagnosis of the comparisons (first tensor out of tolerance, nodes ranked "
        "by error amplification, error by depth): .json for scripts, .html to read, .model-explorer.json for the error "
        "of every tensor as node data for Google's Model Explorer.",
    "--trt-outputs": "Tensors TensorRT returns instead of the model's outputs: 'mark all' or '*' (every layer "
        "output), names, or glob patterns.",
    "--trt-exclude-outputs": "Names or glob patterns to leave out of the TensorRT outputs.",
    "--fp16": "Let TensorRT use float16 kernels (TensorRT 10). With --onnxrt and no --trt: run fp32 and fp16 storage "
        "emulated on the CPU (runner onnxrt:fp16), and compare.",
    "--bf16": "Let TensorRT use bfloat16 kernels (TensorRT 10; TensorRT 11: the model is converted to mixed bf16 "
        "first). With --onnxrt and no --trt: run fp32 and bf16 storage emulated on the CPU (runner onnxrt:bf16), and "
        "compare.",
    "--int8": "Let TensorRT use int8 kernels, calibrated on this run's inputs (TensorRT 10).",
    "--tf32": "Let TensorRT use TF32 for float32 math (off by default).",
    "--calibration-cache": "INT8 calibration cache: read if it exists (no calibration), else written.",
    "--pool-limit": "TensorRT memory pool limits as pool:size, e.g. workspace:1G tactic_dram:512M.",
    "--trt-min-shapes": "Minimum shapes of a TensorRT profile: name:[1,3,224,224] ...; repeat the flag for more "
        "profiles.",
    "--trt-opt-shapes": "Shapes TensorRT optimizes for (and generated inputs use); repeat for more profiles.",
    "--trt-max-shapes": "Maximum shapes of a TensorRT profile; repeat the flag for more profiles.",
    "--save-engine": "Save the TensorRT engine built.",
    "--openvino-device": "OpenVINO device: cpu (default), gpu, npu or auto.",
    "--openvino-precision": "OpenVINO inference precision: f32, bf16 or f16 (default: the device's choice, bf16 on "
        "CPUs with bfloat16 support).",
    "--openvino-outputs": "Tensors OpenVINO returns instead of the model's outputs: 'mark all' or '*' (every output "
        "of every node of the top graph), names, or glob patterns.",
    "--openvino-exclude-outputs": "Names or glob patterns to leave out of the OpenVINO outputs.",
}


def register(app: typer.Typer) -> None:
    @app.command("run", **command_kwargs(cls=RunCommand))
    def run_command(
        ctx: typer.Context,
        model: Annotated[
            Optional[str],
            typer.Argument(help="Path to the ONNX model (or TensorRT engine), or '-' to read it from stdin.", metavar="MODEL"),
        ] = None,
        onnxrt: Annotated[bool, option(_RUN_OPTS, "--onnxrt")] = False,
        trt: Annotated[bool, option(_RUN_OPTS, "--trt")] = False,
        openvino: Annotated[bool, option(_RUN_OPTS, "--openvino")] = False,
        runner_specs: Annotated[ListOpt, option(_RUN_OPTS, "--runners", metavar="SPEC...")] = None,
        providers: Annotated[ListOpt, option(_RUN_OPTS, "--providers", "--execution-providers")] = None,
        ort_optimization: Annotated[
            Optional[str], option(_RUN_OPTS, "--ort-optimization", "--graph-optimization-level", metavar="LEVEL")
        ] = None,
        seed: SeedOpt = None,
        val_range: Annotated[ListOpt, option(_RUN_OPTS, "--val-range")] = None,
        input_shapes: InputShapesOpt = None,
        iterations: Annotated[Optional[int], option(_RUN_OPTS, "--iterations", "--iters", metavar="N")] = None,
        load_inputs: Annotated[ListOpt, option(_RUN_OPTS, "--load-inputs", "--load-input-data")] = None,
        save_inputs: Annotated[
            Optional[str], option(_RUN_OPTS, "--save-inputs", "--save-input-data", metavar="PATH")
        ] = None,
        load_outputs: Annotated[ListOpt, option(_RUN_OPTS, "--load-outputs", "--load-results")] = None,
        save_outputs: Annotated[
            Optional[str], option(_RUN_OPTS, "--save-outputs", "--save-results", metavar="PATH")
        ] = None,
        onnx_outputs: Annotated[ListOpt, option(_RUN_OPTS, "--onnx-outputs")] = None,
        onnx_exclude_outputs: Annotated[ListOpt, option(_RUN_OPTS, "--onnx-exclude-outputs")] = None,
        atol: AtolOpt = None,
        rtol: RtolOpt = None,
        check_error_stat: CheckErrorStatOpt = None,
        error_quantile: Annotated[ListOpt, option(_RUN_OPTS, "--error-quantile", metavar="Q...")] = None,
        postprocess: Annotated[
            ListOpt, option(_RUN_OPTS, "--postprocess", "--postprocess-func", metavar="[NAME:]top-K[,axis=N]...")
        ] = None,
        compare_func: Annotated[ListOpt, option(_RUN_OPTS, "--compare-func", "--compare", metavar="FUNC")] = None,
        index_tolerance: Annotated[ListOpt, option(_RUN_OPTS, "--index-tolerance", metavar="N...")] = None,
        no_shape_check: Annotated[bool, option(_RUN_OPTS, "--no-shape-check")] = False,
        fp_to_fp16: Annotated[bool, option(_RUN_OPTS, "--fp-to-fp16")] = False,
        save_onnx: Annotated[Optional[str], option(_RUN_OPTS, "--save-onnx", metavar="PATH")] = None,
        data_loader_script: DataLoaderScriptOpt = None,
        data_loader_func_name: DataLoaderFuncOpt = None,
        use_subprocess: Annotated[bool, option(_RUN_OPTS, "--use-subprocess", "--sequential-runners")] = False,
        infinities_equal: Annotated[bool, option(_RUN_OPTS, "--infinities-compare-equal")] = False,
        shape_inference: Annotated[
            bool, option(_RUN_OPTS, "--shape-inference", "--do-shape-inference", "--no-onnxruntime-shape-inference")
        ] = False,
        validate: Annotated[bool, option(_RUN_OPTS, "--validate")] = False,
        save_report: Annotated[Optional[str], option(_RUN_OPTS, "--save-report", metavar="PATH")] = None,
        external_data_dir: ExternalDataDirOpt = None,
        trt_outputs: Annotated[ListOpt, option(_RUN_OPTS, "--trt-outputs")] = None,
        trt_exclude_outputs: Annotated[ListOpt, option(_RUN_OPTS, "--trt-exclude-outputs")] = None,
        fp16: Annotated[bool, option(_RUN_OPTS, "--fp16")] = False,
        bf16: Annotated[bool, option(_RUN_OPTS, "--bf16")] = False,
        int8: Annotated[bool, option(_RUN_OPTS, "--int8")] = False,
        tf32: Annotated[bool, option(_RUN_OPTS, "--tf32")] = False,
        calibration_cache: Annotated[Optional[str], option(_RUN_OPTS, "--calibration-cache", metavar="PATH")] = None,
        pool_limit: Annotated[ListOpt, option(_RUN_OPTS, "--pool-limit", "--memory-pool-limit")] = None,
        trt_min_shapes: Annotated[ListOpt, option(_RUN_OPTS, "--trt-min-shapes")] = None,
        trt_opt_shapes: Annotated[ListOpt, option(_RUN_OPTS, "--trt-opt-shapes")] = None,
        trt_max_shapes: Annotated[ListOpt, option(_RUN_OPTS, "--trt-max-shapes")] = None,
        save_engine: Annotated[Optional[str], option(_RUN_OPTS, "--save-engine", metavar="PATH")] = None,
        openvino_device: Annotated[Optional[str], option(_RUN_OPTS, "--openvino-device", metavar="DEVICE")] = None,
        openvino_precision: Annotated[
            Optional[str], option(_RUN_OPTS, "--openvino-precision", metavar="PRECISION")
        ] = None,
        openvino_outputs: Annotated[ListOpt, option(_RUN_OPTS, "--openvino-outputs")] = None,
        openvino_exclude_outputs: Annotated[ListOpt, option(_RUN_OPTS, "--openvino-exclude-outputs")] = None,
    ) -> None:
        """Run a model on ONNX-Runtime, TensorRT and/or OpenVINO with generated or loaded inputs, save
        inputs and outputs, and compare results (several runners and/or loaded outputs files
        are compared in consecutive pairs). MODEL may also be a TensorRT engine
        (.engine/.plan/.trt) for --trt.

        Exit codes: 0 passed; 1 a comparison or --validate failed, or inference (or the
        TensorRT build) failed; 2 bad options; 3 bad model or data file; 4 missing backend,
        TensorRT, cuda-python, OpenVINO or device.
        """
        from toolkit.run.registry import runner_order

        from toolkit.cli.output import is_quiet

        ort_optimization = _ort_level(ort_optimization)
        for flag, path in (("--save-inputs", save_inputs), ("--save-outputs", save_outputs)):
            if not _reads(path, [model or ""] + list(load_inputs or []) + list(load_outputs or [])):
                check_data_output(flag, path)  # (overwriting a file this run reads is reported first)
        if use_subprocess:
            from toolkit.cli.output import verbose

            verbose("run | --use-subprocess has no effect: runners run in this process, one after another")
        if shape_inference:
            from toolkit.cli.output import verbose

            verbose("run | shape inference options have no effect on a run")

        quiet = is_quiet()
        argv = ctx.meta.get(_ARGV_KEY) or []
        command = "toolkit run " + " ".join(shlex.quote(a) for a in _typed_argv(argv))
        runners = runner_order(argv, {"onnxrt": onnxrt, "trt": trt, "openvino": openvino}) + list(runner_specs or [])
        runners, fp16, bf16 = _fp16_emulation(runners, fp16, bf16)
        if model is None:
            from toolkit.core.errors import UsageError

            if runners or load_inputs or save_inputs or save_outputs or save_onnx or data_loader_script:
                raise UsageError("give MODEL, the ONNX model to run (e.g. toolkit run model.onnx --onnxrt)")
            if not load_outputs:
                # nothing asked for (e.g. only logging options): like Polygraphy, nothing to do is not an error
                from toolkit.cli.output import warn

                warn("nothing to run: give MODEL and a runner (e.g. toolkit run model.onnx --onnxrt)")
                return
            model = ""
        # the parameters as refined above (model, runners, ort_optimization, fp16, bf16) and the command line
        opts = _run_options(locals(), diagnose=not quiet, model_type=_model_type())
        _describe_plan(opts)
        code = run_and_render(opts, command, quiet=quiet)
        if code:
            raise typer.Exit(code)


_SHAPE_GROUPS = ("trt_min_shapes", "trt_opt_shapes", "trt_max_shapes")


def _run_options(params: dict, **overrides):
    """The :class:`~toolkit.run.options.RunOptions` of the command's parameters, with ``overrides``."""
    from toolkit.run.options import RunOptions

    groups = {name: [split_group(g) for g in params.get(name) or []] for name in _SHAPE_GROUPS}
    return from_params(RunOptions, params, **groups, **overrides)


def _fp16_emulation(runners: List[str], fp16: bool, bf16: bool = False):
    """--onnxrt --fp16 (--bf16) without --trt: fp32 and fp16 (bf16) storage emulated on the CPU
    (onnxrt:fp16, onnxrt:bf16), compared."""
    if (fp16 or bf16) and "onnxrt" in runners and "trt" not in runners:
        return ["onnxrt"] + (["onnxrt:fp16"] if fp16 else []) + (["onnxrt:bf16"] if bf16 else []), False, False
    return runners, fp16, bf16


_ORT_LEVELS = {
    "ORT_DISABLE_ALL": "disable",
    "ORT_ENABLE_BASIC": "basic",
    "ORT_ENABLE_EXTENDED": "extended",
    "ORT_ENABLE_ALL": "all",
}


def _reads(path: Optional[str], sources: List[str]) -> bool:
    """Whether ``path`` names one of the files this run reads."""
    import os

    if not path or path == "-":
        return False
    for src in sources:
        if src and src != "-" and os.path.exists(path) and os.path.exists(src):
            if os.path.samefile(path, src):
                return True
        elif src and os.path.abspath(src) == os.path.abspath(path):
            return True
    return False


def _ort_level(value: Optional[str]) -> Optional[str]:
    """ONNX-Runtime's own level names (as Polygraphy's --graph-optimization-level takes them) -> ours."""
    if value is None:
        return None
    return _ORT_LEVELS.get(value.strip().upper(), value)


def _describe_plan(opts) -> None:
    """What the run will do, for -v."""
    from toolkit.cli.output import verbose

    verbose(f"run | model: {opts.model or '(none)'} | runners: {', '.join(opts.runners) or 'none'}")
    if opts.load_inputs:
        verbose(f"run | inputs from: {', '.join(opts.load_inputs)}")
    else:
        seed = "random" if opts.seed is None else opts.seed
        verbose(
            f"run | generated inputs: {opts.iterations or 1} iteration(s), seed {seed}, "
            f"value range {' '.join(opts.val_range) or '[0,1]'}"
            + (f", shapes {' '.join(opts.input_shapes)}" if opts.input_shapes else "")
        )
    if opts.load_outputs:
        verbose(f"run | outputs to compare against: {', '.join(opts.load_outputs)}")
    tol = [f"atol {' '.join(opts.atol)}" if opts.atol else "", f"rtol {' '.join(opts.rtol)}" if opts.rtol else ""]
    if any(tol) or opts.check_error_stat:
        verbose(f"run | tolerances: {' '.join(t for t in tol if t)} {' '.join(opts.check_error_stat)}".rstrip())


def _typed_argv(parsed: List[str]) -> List[str]:
    """The run's arguments as typed (common options such as -q included), when known."""
    from toolkit.cli.output import state

    typed = state.argv
    if typed and "run" in typed:
        return typed[typed.index("run") + 1 :]
    return parsed


def run_and_render(opts, command: str, *, quiet: bool = False) -> int:
    """Execute ``opts``, print logs/tables to stderr, return the exit code (0 or 1)."""
    from toolkit.core.errors import InferenceError
    from toolkit.run import execute

    from toolkit.backends.onnxrt import set_log_severity
    from toolkit.cli.output import ort_log_sink, ort_severity

    set_log_severity(ort_severity(), ort_log_sink())
    from toolkit.cli.reporters import CliReporter

    reporter = CliReporter(quiet=quiet)
    try:
        report = execute(opts, reporter)
    except InferenceError as exc:
        reporter.close()
        result(f"error: {exc.message}", style="red")
        _final(False, command, [])
        return 1
    finally:
        reporter.close()
    for k, pair in enumerate(report.comparisons):
        render_comparison(pair, quiet=quiet)
        diag = report.diagnoses[k] if k < len(report.diagnoses) else None
        if diag is not None and not diag.passed and not quiet:
            from toolkit.cli.diagnosis import render_diagnosis

            render_diagnosis(diag, rich=is_terminal(sys.stderr))
    for problem in report.problems:
        result(f"FAILED | validation | {problem.describe()}", style="red")
    if opts.validate and not report.problems and not quiet:
        log("PASSED | validation | no NaN or Inf in any output", style="green")
    _final(report.passed, command, report.mismatched())
    return 0 if report.passed else 1


def _final(passed: bool, command: str, mismatched: List[str]) -> None:
    if passed:
        result(f"PASSED | Command: {command}", style="bold green")
    else:
        tail = f" | mismatched: {_names(mismatched)}" if mismatched else ""
        result(f"FAILED | Command: {command}{tail}", style="bold red")


def _names(names: List[str], limit: int = 20) -> str:
    """Tensor names for a summary line: all of them up to ``limit``, else the first ones and a count
    (each failing tensor has its own line above)."""
    if len(names) <= limit:
        return ", ".join(names)
    return f"{', '.join(names[:10])}, ... ({len(names)} in all)"


# --------------------------------------------------------------------------- comparisons


def _g(x: Optional[float]) -> str:
    if x is None:
        return "-"
    return f"{x:.5g}"


def render_comparison(pair, *, quiet: bool = False) -> None:
    """One comparison (A vs B) as a Rich table per iteration on a terminal, else plain lines."""
    rich = is_terminal(sys.stderr)
    for note in pair.notes:
        warn(note)
    header = f"Comparing {pair.label_a} vs {pair.label_b}"
    if not quiet:
        log(header, style="bold")
    for it in pair.iterations:
        rows = it.outputs if not quiet else [o for o in it.outputs if not o.passed]
        if not quiet:
            extra = []
            if it.only_a:
                shown = ", ".join(it.only_a[:5]) + (" ..." if len(it.only_a) > 5 else "")
                extra.append(f"{len(it.only_a)} only in {pair.label_a}: {shown}")
            if it.only_b:
                extra.append(f"{len(it.only_b)} only in {pair.label_b}")
            tail = f" (not compared: {'; '.join(extra)})" if extra else ""
            log(f"  Iteration {it.index} | {len(it.outputs)} output(s) compared{tail}")
        if not rows:
            continue
        if quiet and rows:
            result(header if len(pair.iterations) == 1 else f"{header} | iteration {it.index}", style="bold")
        if rich:
            _rich_table(rows)
        else:
            for o in rows:
                (log if o.passed else result)("    " + _plain_row(o))
    n_it = len(pair.iterations)
    ok_it = sum(1 for it in pair.iterations if it.passed)
    if pair.passed:
        if not quiet:
            log(f"  PASSED | {pair.label_a} vs {pair.label_b} | {ok_it}/{n_it} iteration(s) matched | Difference is within tolerance", style="green")
    else:
        result(
            f"  FAILED | {pair.label_a} vs {pair.label_b} | {ok_it}/{n_it} iteration(s) matched | "
            f"mismatched: {_names(pair.mismatched())}",
            style="red",
        )


def _quantile_name(o) -> str:
    return f"q{o.quantile:g}" if o.quantile is not None else "quantile"


def _verdict(o) -> str:
    return "PASSED" if o.passed else "FAILED"


def _plain_row(o) -> str:
    head = f"{_verdict(o)} | {o.name}"
    if o.message:
        return f"{head} | {o.message}"
    dt = "" if o.dtype_a == o.dtype_b else f" | dtypes {o.dtype_a} vs {o.dtype_b}"
    med = ""
    if o.stat == "median":
        med = f", median abs {_g(o.median_abs)}, median rel {_g(o.median_rel)}"
    elif o.stat == "quantile":
        med = f", {_quantile_name(o)} abs {_g(o.quantile_abs)}, {_quantile_name(o)} rel {_g(o.quantile_rel)}"
    bad = f" | {o.mismatches} of {o.size} element(s) out of tolerance" if o.mismatches and not o.passed else ""
    return (
        f"{head} | max abs {_g(o.max_abs)}, mean abs {_g(o.mean_abs)}, max rel {_g(o.max_rel)}, "
        f"mean rel {_g(o.mean_rel)}{med} | would pass with atol {_g(o.required_atol)} or rtol "
        f"{_g(o.required_rtol)} ({o.stat}) | tolerance atol {_g(o.atol)}, rtol {_g(o.rtol)}{dt}{bad}"
    )


def _rich_table(rows) -> None:
    from rich.table import Table
    from rich.text import Text

    console = err_console()
    longest = max((len(o.name) for o in rows), default=0)
    if console.width < 110 + longest:
        # too narrow for nine columns and whole names (names are never wrapped: they are
        # copied and grepped): plain lines, which the terminal may wrap but Rich never breaks
        for o in rows:
            console.print("    " + _plain_row(o), style=None if o.passed else "red", markup=False, highlight=False)
        return
    table = Table(box=None, pad_edge=False, padding=(0, 1), show_edge=False)
    columns: Tuple[Tuple[str, JustifyMethod], ...] = (
        ("", "left"),
        ("Output", "left"),
        ("Max abs", "right"),
        ("Mean abs", "right"),
        ("Max rel", "right"),
        ("Mean rel", "right"),
        ("Passes with", "left"),
        ("Tolerance", "left"),
        ("Notes", "left"),
    )
    for col, just in columns:
        # names, numbers and verdicts never wrap; only the notes may
        table.add_column(
            col,
            justify=just,
            no_wrap=col != "Notes",
            overflow="fold" if col == "Notes" else "ignore",
            min_width=longest if col == "Output" else None,
        )
    for o in rows:
        verdict = Text(_verdict(o), style="green" if o.passed else "bold red")
        if o.message:
            table.add_row(verdict, Text(o.name), "-", "-", "-", "-", "-", "-", Text(o.message, style="red"))
            continue
        notes = []
        if o.dtype_a != o.dtype_b:
            notes.append(f"dtypes {o.dtype_a} vs {o.dtype_b}")
        if o.mismatches and not o.passed:
            notes.append(f"{o.mismatches}/{o.size} elements off")
        if o.stat == "median":
            notes.append(f"median abs {_g(o.median_abs)}, rel {_g(o.median_rel)}")
        elif o.stat == "quantile":
            notes.append(f"{_quantile_name(o)} abs {_g(o.quantile_abs)}, rel {_g(o.quantile_rel)}")
        table.add_row(
            verdict,
            Text(o.name),
            _g(o.max_abs),
            _g(o.mean_abs),
            _g(o.max_rel),
            _g(o.mean_rel),
            Text(f"atol {_g(o.required_atol)} | rtol {_g(o.required_rtol)} ({o.stat})"),
            Text(f"atol {_g(o.atol)}, rtol {_g(o.rtol)}"),
            Text("; ".join(notes)),
        )
    console.print(table)


def _model_type():
    """--model-type as given (None: by the file's suffix)."""
    from toolkit.cli.output import state

    return state.model_type

"""``toolkit run``: run a model on one or more backends (ONNX-Runtime, TensorRT, OpenVINO), save and compare results.

Thin layer: options -> :class:`toolkit.run.RunOptions` -> :func:`toolkit.run.execute` -> render.
Every option is declared on its :class:`~toolkit.run.options.RunOptions` field; the runner
flags (``--onnxrt``, ``--trt``) come from the registered runner kinds.
Logs, tables and the final PASSED/FAILED line go to stderr; stdout only carries data
(``--save-outputs -`` / ``--save-inputs -``).
"""

# (no `from __future__ import annotations`: Typer would have to eval every annotation string)

import inspect
import shlex
import sys
from typing import TYPE_CHECKING, List, Optional, Tuple

import typer

from toolkit.cli.options import Annotated, ToolkitCommand, bind, check_data_output, command_kwargs, values_for
from toolkit.cli.output import err_console, is_terminal, log, pass_verdict, result, warn
from toolkit.cli.supervisor import run_supervised
from toolkit.core.shared_options import ATOL_FLAG

if TYPE_CHECKING:
    from rich.console import JustifyMethod
import os

import toolkit.run
from toolkit.backends.onnxrt import set_log_severity
from toolkit.cli.output import is_quiet, ort_log_sink, ort_severity, state, verbose
from toolkit.core.errors import InferenceError, UsageError
from toolkit.core.text import shown_name
from toolkit.run import options as run_options
from toolkit.run import registry  # registry.KINDS, looked up when used: kinds register late

_ARGV_KEY = "toolkit.run.argv"


EXAMPLES = (
    "toolkit run model.onnx --onnxrt --save-inputs inputs.json --save-outputs golden.json",
    f"toolkit run model.onnx --onnxrt --load-inputs inputs.json --load-outputs golden.json {ATOL_FLAG} 1e-4",
    "toolkit run model.onnx --trt --onnxrt --input-shapes x:[1,3,224,224]",
)


class RunCommand(ToolkitCommand):
    """Remembers the command line (for the final PASSED/FAILED line and runner order)."""

    def parse_args(self, ctx, args):
        ctx.meta[_ARGV_KEY] = list(args)
        return super().parse_args(ctx, args)


def _selector(kind) -> str:
    """The parameter name of a runner kind's flag (``--onnxrt`` -> ``onnxrt``)."""
    return kind.flag.lstrip("-").replace("-", "_")


def _kind_flags() -> List[inspect.Parameter]:
    """One switch per registered runner kind (``--onnxrt``, ``--trt``), in registration order."""

    return [
        inspect.Parameter(_selector(k), inspect.Parameter.KEYWORD_ONLY, default=False,
                          annotation=Annotated[bool, typer.Option(k.flag, help=k.help)])
        for k in registry.KINDS.values()
    ]


def _kind_options():
    """The options each registered kind declares itself, as ``bind``'s ``more``: parameters named
    ``<kind>_<field>`` (``openvino_device``), in the kind's help panel."""

    return [(k.declares, f"{k.name}_", k.panel) for k in registry.KINDS.values() if k.declares is not None]


def register(app: typer.Typer) -> None:
    more = _kind_options()
    declares = [run_options.RunOptions] + [m[0] for m in more]

    @app.command("run", **command_kwargs(_help(), cls=RunCommand, declares=declares, examples=EXAMPLES))
    @bind(run_options.RunOptions, extra=_kind_flags(), more=more)
    def run_command(ctx: typer.Context, **params) -> None:
        """``toolkit run`` (its help: :func:`_help`)."""
        _run(ctx, params)


def _help() -> str:
    """``run``'s help, naming every registered runner kind (the root help's list matches it)."""
    from toolkit.cli.app import backends_text

    on = backends_text([k.panel for k in registry.KINDS.values()])
    return f"""Run a model on {on} with generated or loaded inputs, save
        inputs and outputs, and compare results (several runners and/or loaded outputs files
        are compared in consecutive pairs). MODEL may also be a TensorRT engine
        (.engine/.plan/.trt) for --trt.

        Exit codes: 0 passed; 1 a comparison or --validate failed, or inference (or the
        TensorRT build) failed; 2 bad options; 3 bad model or data file; 4 missing backend,
        TensorRT, cuda-python or GPU; 70 an internal error (a bug: please report it).
        """


def _run(ctx: typer.Context, params: dict) -> None:
    from toolkit.run.plan import tolerances_of  # (numpy: loaded when the command runs, not for --help)

    opts = _options(params)
    _check_data_outputs(opts)
    _note_no_effect(opts)
    quiet = is_quiet()
    argv = ctx.meta.get(_ARGV_KEY) or []
    opts.command = "toolkit run " + shlex.join(_typed_argv(argv))
    opts.runners, opts.fp16, opts.bf16 = _fp16_emulation(_runners(argv, params), opts.fp16, opts.bf16)
    opts.tolerances = tolerances_of(opts)  # the tolerance options: one typed value from here on
    if params["model"] is None and not _nothing_but_outputs(opts):
        return
    opts.diagnose, opts.model_type = not quiet, _model_type()
    _describe_plan(opts)
    code = run_supervised(lambda: run_and_render(opts, opts.command, quiet=quiet))
    if code:
        raise typer.Exit(code)


def _check_data_outputs(opts) -> None:
    """--save-inputs and --save-outputs can be written (overwriting a file this run reads is reported first)."""
    reads = [opts.model] + opts.load_inputs + opts.load_outputs
    for flag, path in (("--save-inputs", opts.save_inputs), ("--save-outputs", opts.save_outputs)):
        if not _reads(path, reads):
            check_data_output(flag, path)


def _note_no_effect(opts) -> None:
    """-v says which Polygraphy options given have no effect on a run."""
    if opts.use_subprocess:
        verbose("run | --use-subprocess has no effect: runners run in this process, one after another")
    if opts.shape_inference:
        verbose("run | shape inference options have no effect on a run")


def _runners(argv: List[str], params: dict) -> List[str]:
    """The runner specs in the order typed: the runner flags (--onnxrt, --trt), then --runners."""
    chosen = {k.name: params[_selector(k)] for k in registry.KINDS.values()}
    return registry.runner_order(argv, chosen) + list(params["runners"] or [])


def _options(params: dict) -> "run_options.RunOptions":
    """The run's options from the command's parameters, each runner kind's own options with them
    (their choice flags, such as --openvino-precision, checked)."""
    opts = run_options.RunOptions(**values_for(run_options.RunOptions, {**params, "model": params["model"] or ""}))
    for kind in registry.KINDS.values():
        if kind.declares:
            opts.kind_options[kind.name] = kind.declares(**values_for(kind.declares, params, f"{kind.name}_"))
    for kind in registry.KINDS.values():  # choice flags (--openvino-precision) become checked values here
        if kind.declares:
            opts = registry.check_choices(kind, opts)
    opts.ort_optimization = _ort_level(opts.ort_optimization)
    return opts


# The run's options that need MODEL.
_NEED_MODEL = ("runners", "load_inputs", "save_inputs", "save_outputs", "save_onnx", "data_loader_script")


def _nothing_but_outputs(opts) -> bool:
    """Without MODEL: True when only outputs files are compared; UsageError when something
    needs the model; False (a warning) when nothing at all is asked for."""
    if any(getattr(opts, name) for name in _NEED_MODEL):
        raise UsageError("give MODEL, the ONNX model to run (e.g. toolkit run model.onnx --onnxrt)")
    if not opts.load_outputs:
        # nothing asked for (e.g. only logging options): like Polygraphy, nothing to do is not an error
        warn("nothing to run: give MODEL and a runner (e.g. toolkit run model.onnx --onnxrt)")
        return False
    return True


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

    if not path or path == "-":
        return False
    return any(_same_file(path, src) for src in sources if src)


def _same_file(path: str, src: str) -> bool:
    """Whether ``path`` and ``src`` name one file: the same file on disk when both exist, else the same path."""
    if src != "-" and os.path.exists(path) and os.path.exists(src):
        return os.path.samefile(path, src)
    return os.path.abspath(src) == os.path.abspath(path)


def _ort_level(value: Optional[str]) -> Optional[str]:
    """ONNX-Runtime's own level names (as Polygraphy's --graph-optimization-level takes them) -> ours."""
    if value is None:
        return None
    return _ORT_LEVELS.get(value.strip().upper(), value)


def _describe_plan(opts) -> None:
    """What the run will do, for -v."""

    verbose(f"run | model: {opts.model or '(none)'} | runners: {', '.join(opts.runners) or 'none'}")
    verbose(_inputs_plan(opts))
    if opts.load_outputs:
        verbose(f"run | outputs to compare against: {', '.join(opts.load_outputs)}")
    if opts.tolerances is not None and opts.tolerances_given():
        verbose(f"run | tolerances: {' '.join(opts.tolerances.spelled())}")


def _inputs_plan(opts) -> str:
    """Where the run's inputs come from: the files loaded, or how they are generated."""
    if opts.load_inputs:
        return f"run | inputs from: {', '.join(opts.load_inputs)}"
    from toolkit.core.inputs import DEFAULT_SEED

    seed = f"{DEFAULT_SEED} (the default)" if opts.seed is None else opts.seed
    shapes = f", shapes {' '.join(opts.input_shapes)}" if opts.input_shapes else ""
    return (f"run | generated inputs: {opts.iterations or 1} iteration(s), seed {seed}, "
            f"value range {' '.join(opts.val_range) or '[0,1]'}{shapes}")


def _typed_argv(parsed: List[str]) -> List[str]:
    """The run's arguments as typed (common options such as -q included), when known."""

    typed = state.argv
    if typed and "run" in typed:
        return typed[typed.index("run") + 1 :]
    return parsed


def run_and_render(opts, command: str, *, quiet: bool = False, on_report=None) -> int:
    """Execute ``opts``, print logs/tables to stderr, return the exit code (0 or 1);
    ``on_report(report)``: handed the report first (a caller that needs the comparisons typed)."""

    set_log_severity(ort_severity(), ort_log_sink())
    from toolkit.cli.reporters import CliReporter

    reporter = CliReporter(quiet=quiet)
    try:
        report = toolkit.run.execute(opts, reporter)
    except InferenceError as exc:
        reporter.close()
        result(f"error: {exc.message}", style="red")
        _final(False, command, [])
        return 1
    finally:
        reporter.close()
    if on_report is not None:
        on_report(report)
    _render_comparisons(report, quiet)
    _render_validation(report, opts.validate, quiet)
    _final(report.passed, command, report.mismatched())
    return 0 if report.passed else 1


def _render_comparisons(report, quiet: bool) -> None:
    """Each comparison of ``report``, with what explains it (unless ``quiet``)."""
    for k, pair in enumerate(report.comparisons):
        render_comparison(pair, quiet=quiet)
        if not quiet:
            _render_explanations(report, k)


def _render_validation(report, validate: bool, quiet: bool) -> None:
    """--validate's verdict: each NaN or Inf problem found, or that there was none."""
    for problem in report.problems:
        result(f"FAILED | validation | {problem.describe()}", style="red")
    if validate and not report.problems and not quiet:
        log("PASSED | validation | no NaN or Inf in any output", style="green")


def _render_explanations(report, k: int) -> None:
    """What explains comparison ``k`` of ``report``: the diagnosis of a failure, the Q/DQ table."""
    diag = report.diagnoses[k] if k < len(report.diagnoses) else None
    if diag is not None and not diag.passed:
        from toolkit.cli.diagnosis import render_diagnosis

        render_diagnosis(diag, rich=is_terminal(sys.stderr))
    if k < len(report.qdq_tables) and report.qdq_tables[k]:
        from toolkit.cli.qdq_report import render_table

        pair = report.comparisons[k]
        render_table(report.qdq_tables[k], pair.label_a, pair.label_b)


def _final(passed: bool, command: str, mismatched: List[str]) -> None:
    if passed:
        pass_verdict(f"PASSED | Command: {command}", style="bold green")
    else:
        tail = f" | mismatched: {_names(mismatched)}" if mismatched else ""
        result(f"FAILED | Command: {command}{tail}", style="bold red")


def _names(names: List[str], limit: int = 20) -> str:
    """Tensor names for a summary line: all of them up to ``limit``, else the first ones and a count
    (each failing tensor has its own line above)."""
    names = [shown_name(n) for n in names]
    if len(names) <= limit:
        return ", ".join(names)
    return f"{', '.join(names[:10])}, ... ({len(names)} in all)"


# --------------------------------------------------------------------------- comparisons


def _g(x: Optional[float]) -> str:
    if x is None:
        return "-"
    return f"{x:.5g}"


def _marking_hint(label: str) -> str:
    """Which option makes the runner ``label`` (``trt-runner``, ``openvino:precision=f32``) return
    every tensor too, so that tensors only the other side returns are compared."""
    name = label.split(":")[0].split("-runner")[0]
    kind = registry.KINDS.get(name)
    if kind is None or not kind.outputs_field:
        return ""
    flag = kind.option(kind.outputs_field).flag
    return f"; {flag} mark all makes {label} return them too" if flag else ""


def render_comparison(pair, *, quiet: bool = False) -> None:
    """One comparison (A vs B) as a Rich table per iteration on a terminal, else plain lines."""
    for note in pair.notes:
        warn(note)
    header = f"Comparing {pair.label_a} vs {pair.label_b}"
    if not quiet:
        log(header, style="bold")
    for it in pair.iterations:
        if not quiet:
            log(f"  Iteration {it.index} | {len(it.outputs)} output(s) compared{_not_compared(pair, it)}")
            _render_rows(it.outputs)
        else:
            _render_failures(pair, it, header)
    _render_verdict(pair, quiet)


def _render_failures(pair, it, header: str) -> None:
    """Quiet: the failing outputs of iteration ``it`` alone, under a header (nothing when none failed)."""
    failing = [o for o in it.outputs if not o.passed]
    if not failing:
        return
    result(header if len(pair.iterations) == 1 else f"{header} | iteration {it.index}", style="bold")
    _render_rows(failing)


def _not_compared(pair, it) -> str:
    """What an iteration's header says of the outputs only one side has ('' when none)."""
    extra = []
    if it.only_a:
        shown = ", ".join(map(shown_name, it.only_a[:5])) + (" ..." if len(it.only_a) > 5 else "")
        extra.append(f"{len(it.only_a)} only in {pair.label_a}: {shown}{_marking_hint(pair.label_b)}")
    if it.only_b:
        extra.append(f"{len(it.only_b)} only in {pair.label_b}{_marking_hint(pair.label_a)}")
    return f" (not compared: {'; '.join(extra)})" if extra else ""


def _render_rows(rows) -> None:
    """Compared outputs: a Rich table on a terminal, else a line each (failures as results)."""
    if not rows:
        return
    if is_terminal(sys.stderr):
        _rich_table(rows)
        return
    for o in rows:
        (log if o.passed else result)("    " + _plain_row(o))


def _render_verdict(pair, quiet: bool) -> None:
    matched = f"{sum(1 for it in pair.iterations if it.passed)}/{len(pair.iterations)} iteration(s) matched"
    if not pair.passed:
        result(f"  FAILED | {pair.label_a} vs {pair.label_b} | {matched} | mismatched: {_names(pair.mismatched())}",
               style="red")
    elif not quiet:
        log(f"  PASSED | {pair.label_a} vs {pair.label_b} | {matched} | Difference is within tolerance", style="green")


def _quantile_name(o) -> str:
    return f"q{o.quantile:g}" if o.quantile is not None else "quantile"


def _verdict(o) -> str:
    return "PASSED" if o.passed else "FAILED"


def _stat_values(o) -> Optional[Tuple[str, Optional[float], Optional[float]]]:
    """(name, abs, rel) of the statistic checked besides the maximum (median, a quantile), or None."""
    if o.stat == "median":
        return "median", o.median_abs, o.median_rel
    if o.stat == "quantile":
        return _quantile_name(o), o.quantile_abs, o.quantile_rel
    return None


def _plain_row(o) -> str:
    head = f"{_verdict(o)} | {shown_name(o.name)}"
    if o.message:
        return f"{head} | {o.message}"
    dt = "" if o.dtype_a == o.dtype_b else f" | dtypes {o.dtype_a} vs {o.dtype_b}"
    stat = _stat_values(o)
    med = f", {stat[0]} abs {_g(stat[1])}, {stat[0]} rel {_g(stat[2])}" if stat else ""
    bad = f" | {o.mismatches} of {o.size} element(s) out of tolerance" if o.mismatches and not o.passed else ""
    return (
        f"{head} | max abs {_g(o.max_abs)}, mean abs {_g(o.mean_abs)}, max rel {_g(o.max_rel)}, "
        f"mean rel {_g(o.mean_rel)}{med} | would pass with atol {_g(o.required_atol)} or rtol "
        f"{_g(o.required_rtol)} ({o.stat}) | tolerance atol {_g(o.atol)}, rtol {_g(o.rtol)}{dt}{bad}{_skipped(o)}"
    )


def _skipped(o) -> str:
    """How many elements were compared (and why some were not)."""
    n = getattr(o, "skipped", 0)
    note = f" | {o.note}" if getattr(o, "note", "") else ""
    if n:
        return f" | {o.size - n} of {o.size} element(s) compared; {n} of {o.size} element(s) not compared: {o.skipped_why}{note}"
    return f" | {o.size} element(s) compared{note}"


def _row_notes(o) -> list:
    """The Notes column of a numeric row."""
    notes = []
    if o.dtype_a != o.dtype_b:
        notes.append(f"dtypes {o.dtype_a} vs {o.dtype_b}")
    if o.mismatches and not o.passed:
        notes.append(f"{o.mismatches}/{o.size} elements off")
    stat = _stat_values(o)
    if stat:
        notes.append(f"{stat[0]} abs {_g(stat[1])}, rel {_g(stat[2])}")
    notes.append(f"{o.size - o.skipped}/{o.size} compared")
    if getattr(o, "skipped", 0):
        notes.append(f"{o.skipped}/{o.size} not compared: {o.skipped_why}")
    if getattr(o, "note", ""):
        notes.append(o.note)
    return notes


# The comparison table's columns: (header, justification). Names, numbers and verdicts never wrap; only the notes may.
_COLUMNS: Tuple[Tuple[str, "JustifyMethod"], ...] = (
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


def _rich_table(rows) -> None:
    console = err_console()
    longest = max((len(shown_name(o.name)) for o in rows), default=0)
    if console.width < 110 + longest:
        # too narrow for nine columns and whole names (names are never wrapped: they are
        # copied and grepped): plain lines, which the terminal may wrap but Rich never breaks
        for o in rows:
            console.print("    " + _plain_row(o), style=None if o.passed else "red", markup=False, highlight=False)
        return
    table = _comparison_table(longest)
    for o in rows:
        table.add_row(*_table_cells(o))
    console.print(table)


def _comparison_table(longest: int):
    """An empty table of :data:`_COLUMNS`, the Output column ``longest`` wide."""
    from rich.table import Table

    table = Table(box=None, pad_edge=False, padding=(0, 1), show_edge=False)
    for col, just in _COLUMNS:
        table.add_column(
            col,
            justify=just,
            no_wrap=col != "Notes",
            overflow="fold" if col == "Notes" else "ignore",
            min_width=longest if col == "Output" else None,
        )
    return table


def _table_cells(o) -> tuple:
    """The cells of one output's row."""
    from rich.text import Text

    verdict = Text(_verdict(o), style="green" if o.passed else "bold red")
    if o.message:
        return verdict, Text(shown_name(o.name)), "-", "-", "-", "-", "-", "-", Text(o.message, style="red")
    return (
        verdict,
        Text(shown_name(o.name)),
        _g(o.max_abs),
        _g(o.mean_abs),
        _g(o.max_rel),
        _g(o.mean_rel),
        Text(f"atol {_g(o.required_atol)} | rtol {_g(o.required_rtol)} ({o.stat})"),
        Text(f"atol {_g(o.atol)}, rtol {_g(o.rtol)}"),
        Text("; ".join(_row_notes(o))),
    )


def _model_type():
    """--model-type as given (None: by the file's suffix)."""

    return state.model_type

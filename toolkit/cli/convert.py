"""``toolkit convert``: write a converted copy of a model (mixed fp16 with --fp-to-fp16, mixed bf16 with --fp-to-bf16)."""

# (no `from __future__ import annotations`: Typer would have to eval every annotation string)

import collections
import itertools
import os
import time
from dataclasses import dataclass, field
from typing import List, Optional

import typer

from toolkit.cli.options import bind, command_kwargs, values_for
from toolkit.cli.output import echo, log, warn
from toolkit.core.files import paths
from toolkit.core import shared_options as S
from toolkit.core.declare import declared, option, required, switch
from toolkit.core.errors import ExitCode, InferenceError, InputError, UsageError

HELP = "Convert a model: mixed fp16 with --fp-to-fp16, mixed bf16 with --fp-to-bf16."


@dataclass
class ConvertArgs:
    """The options of ``convert``, each declared once."""

    model: str = declared(S.MODEL)
    output: str = required("-o", "--output", metavar="PATH", help="Where to write the converted model.")
    fp_to_fp16: bool = switch("--fp-to-fp16",
                              help="Convert float32 to float16 where it is safe (mixed precision; I/O types kept).")
    fp_to_bf16: bool = switch("--fp-to-bf16", help="Convert float32 to bfloat16 where it is safe (mixed precision; I/O "
                              "types kept), by the same rules as --fp-to-fp16.")
    keep_fp32: List[str] = option("--keep-fp32", metavar="NAMES...", factory=list, help="Nodes to keep in fp32: node names, glob patterns "
                                  "over node names, or op types (Pow, ReduceMean). Several after one flag, or "
                                  "comma-separated.")
    keep_fp32_from: Optional[str] = option(
        "--keep-fp32-from", metavar="PATH", help="Also keep in fp32 the nodes named in this text file, one per line "
        "(what `debug precision` prints; blank lines and lines starting with # skipped; an empty file keeps none).")
    fp16_io: bool = switch("--fp16-io", help="Make float32 graph inputs and outputs float16 too (default: keep them).")
    bf16_io: bool = switch("--bf16-io", help="With --fp-to-bf16: make float32 graph inputs and outputs bfloat16 too "
                           "(default: keep them).")
    external_data: Optional[bool] = option("--external-data/--no-external-data", help="Write weights to a separate "
                                           "file <OUT>.data (default: only when the model is over 2 GB).")
    json_out: bool = switch("--json", help="Print what was kept in fp32 and why, and the check against the original, "
                            "as JSON on stdout.")
    external_data_dir: Optional[str] = declared(S.EXTERNAL_DATA_DIR)
    validate: bool = option("--validate/--no-validate", default=True, help="Run the converted model against the "
                            "original in ONNX-Runtime on several input sets and report the worst: its largest error "
                            "and the first tensor that differs; on unless --no-validate.")
    load_inputs: Optional[str] = option("--load-inputs", "--load-input-data", metavar="PATH", help="Inputs file (JSON or .npz) for that check (every input "
                                        "set in it); default: 3 generated sets.")
    seed: Optional[int] = declared(S.SEED)
    val_range: List[str] = option("--val-range", metavar="[NAME:]RANGE...", factory=list, help="Value range of the generated inputs of that "
                                  "check: [name:][lo,hi]; [0,1] if not given.")
    input_shapes: List[str] = declared(S.INPUT_SHAPES, factory=list)
    ort_optimization: Optional[str] = option("--ort-optimization", "--graph-optimization-level", metavar="LEVEL",
                                             help="Also check the written model in an ONNX-Runtime session at this "
                                             "graph optimization level (disable, basic, extended, all); the "
                                             "session with the default options is always checked.")
    repair: bool = switch("--repair", help="When ONNX-Runtime crashes or fails on the written model, search for the "
                          "op type that, kept in fp32, avoids it, and write that model instead.")


def register(app: typer.Typer) -> None:
    @app.command("convert", **command_kwargs(declares=[ConvertArgs], examples=(
        "toolkit convert model.onnx --fp-to-fp16 -o model_fp16.onnx",
        "toolkit convert model.onnx --fp-to-fp16 --keep-fp32 'Softmax*' LayerNormalization -o mixed.onnx",
        "toolkit convert model.onnx --fp-to-fp16 --keep-fp32-from keep.txt -o mixed.onnx  "
        "# keep.txt: toolkit debug precision model.onnx > keep.txt",
    )))
    @bind(ConvertArgs)
    def convert_command(ctx: typer.Context, **params) -> None:
        """Convert a model: mixed fp16 with --fp-to-fp16, mixed bf16 with --fp-to-bf16.

        Float32 weights and tensors become float16 (bfloat16), except nodes that must stay
        fp32: the ones named with --keep-fp32, ops without fp16 kernels in ONNX-Runtime
        (Resize, Range, TopK, ...), ops whose ONNX schema at the model's opset has no fp16
        (bf16) type, custom-domain ops and shape computations. Graph inputs and outputs keep
        their types. Weights, Constants and values computed from constants that fp16 cannot
        hold (past 65504, or lost to underflow) stay fp32 with the nodes that read them; Q/DQ
        and integer ops of quantized models stay as they are. The result is checked with ONNX
        type inference before it is written, then run against the original in ONNX-Runtime
        on several input sets (--no-validate skips that). Built on onnxconverter-common's float16
        conversion; for bfloat16 the same conversion places the casts and every weight is
        rounded once from its float32 value.
        """
        a = ConvertArgs(**values_for(ConvertArgs, params))
        if a.fp_to_fp16 and a.fp_to_bf16:
            raise UsageError("--fp-to-fp16 and --fp-to-bf16 exclude each other: give one")
        if a.bf16_io and not a.fp_to_bf16:
            raise UsageError("--bf16-io needs --fp-to-bf16")
        if a.fp16_io and a.fp_to_bf16:
            raise UsageError("--fp16-io goes with --fp-to-fp16; with --fp-to-bf16 use --bf16-io")
        dtype = "bfloat16" if a.fp_to_bf16 else ("float16" if a.fp_to_fp16 else None)
        if a.keep_fp32_from is not None:
            a.keep_fp32 = a.keep_fp32 + names_in_file(a.keep_fp32_from, "--keep-fp32-from")
        check = _Check(a.validate, a.load_inputs, a.seed, a.val_range, a.input_shapes, a.ort_optimization, a.repair)
        _convert(
            a.model, a.output, dtype, a.keep_fp32, a.fp16_io or a.bf16_io, a.external_data_dir, a.external_data,
            a.json_out, check,
        )


def names_in_file(path: str, flag: str) -> List[str]:
    """The names in a text file, one per line (stripped; blank lines and ``#`` comments skipped)."""
    from toolkit.core.io.model import check_readable_file

    check_readable_file(path)
    try:
        with open(path, encoding="utf-8") as fh:
            lines = fh.read().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{flag} {path}: cannot read the names in it ({exc}); give a text file, one name a line") \
            from None
    return [line.strip() for line in lines if line.strip() and not line.strip().startswith("#")]


@dataclass
class _Check:
    """The run against the original after converting (--validate) and its inputs."""

    enabled: bool
    load_inputs: Optional[str]
    seed: Optional[int]
    val_range: List[str]
    input_shapes: List[str]
    ort_optimization: Optional[str] = None
    repair: bool = False
    guessed: List[str] = field(default_factory=list)  # notes: inputs whose dynamic dims were set to 1
    hinted: List[str] = field(default_factory=list)  # shapes taken from the model's metadata


def _convert(
    model_path: str,
    output: str,
    dtype: Optional[str],
    keep_fp32: List[str],
    reduced_io: bool,
    external_data_dir: Optional[str],
    external_data: Optional[bool],
    json_out: bool,
    check: _Check,
) -> None:
    from toolkit.core.io.model import load_model, save_model

    _check_args(model_path, output, dtype, keep_fp32, json_out, check)
    _check_files(model_path, output, external_data_dir, check.load_inputs)
    from toolkit.convert import fp16

    assert dtype is not None
    t0 = time.perf_counter()
    model = load_model(model_path, external_data_dir=external_data_dir)
    feeds, original = _check_inputs(model, model_path, external_data_dir, check)
    result = fp16.convert(model, keep_fp32, keep_io_types=not reduced_io, inplace=True, if_mixed="error", dtype=dtype)
    hint = _opset_hint(result.model, result.kept) if dtype == "bfloat16" else ""
    del model
    seconds = time.perf_counter() - t0
    _report(result, dtype, output, seconds, hint)
    # (checked before saving: saving with external data moves the weights out of the model)
    again = _Again(model_path, external_data_dir, keep_fp32, reduced_io, dtype)
    result, runtime, validation, feeds = _check_conversion(original, result, feeds, dtype, check, again)
    del original
    save_model(result.model, output, external_data=external_data)
    if json_out:
        _print_json(output, dtype, result, seconds, _validation_info(validation, feeds, check), runtime)
    if runtime is not None and runtime.failure:
        raise InferenceError(runtime.failure)


def _check_inputs(model, model_path: str, external_data_dir: Optional[str], check: "_Check"):
    """(the check's input sets, the original it runs against); (None, None) with --no-validate."""
    if not check.enabled:
        return None, None
    feeds = _check_feeds(model, check)
    return feeds, _original(model, model_path, external_data_dir)


def _check_conversion(original, result, feeds, dtype: str, check: "_Check", again: "_Again"):
    """(the conversion to write, its runtime checks, the numeric check, the input sets as a list); the
    checks are None when there are no input sets (--no-validate)."""
    if original is None or feeds is None:
        return result, None, None, feeds
    feeds = list(feeds)
    return (*_checks(original, result, feeds, dtype, check, again), feeds)


def _print_json(output: str, dtype: str, result, seconds: float, validation: Optional[dict], runtime) -> None:
    """--json: what was written and kept in fp32, and the checks."""
    import json  # (--json only)

    info = {
        "output": output,
        "precision": dtype,
        "kept_fp32": result.kept,
        "clamped_weights": result.clamped,
        "out_of_range": result.out_of_range,
        "seconds": seconds,
        "validation": validation,
        "runtime_checks": runtime.as_dict() if runtime is not None else None,
    }
    echo(json.dumps(info, indent=2))


def _check_files(model_path: str, output: str, external_data_dir: Optional[str], load_inputs: Optional[str]) -> None:
    """The files read and written, checked before the model is loaded: none written over the model
    or its data, the inputs file readable."""
    from toolkit.core.io.model import check_readable_data

    reads = [("--load-inputs", load_inputs)] if load_inputs else []
    writes = [("-o", output)] + ([("-o's external data file", output + ".data")] if output != "-" else [])
    paths.check_with_model(model_path, reads, writes, external_data_dir)
    if load_inputs and load_inputs != "-":
        check_readable_data(load_inputs)  # a missing file is said before the model is loaded (a folder is read)


def _validation_info(validation, feeds, check: "_Check") -> Optional[dict]:
    """The check's numbers, with the input sets' shapes and where they came from (--json)."""
    if validation is None:
        return None
    info = validation.as_dict()
    first = feeds[0] if feeds else {}
    info["input_shapes"] = {name: list(getattr(v, "shape", ())) for name, v in first.items()}
    info["shapes_from"] = _shapes_from(check)
    info["representative"] = not check.guessed
    info["input_set_source"] = _input_set_source(check, len(feeds))
    return info


def _shapes_from(check: "_Check") -> str:
    """Where the shapes of the check's inputs came from."""
    if check.load_inputs:
        return "--load-inputs"
    if check.guessed:
        return "dynamic dims set to 1"
    if check.input_shapes:
        return "--input-shapes"
    return "the model's metadata" if check.hinted else "the model"


def _input_set_source(check: "_Check", count: int) -> str:
    """The inputs file of the check, or the generated sets (their seed and value ranges)."""
    if check.load_inputs:
        return f"--load-inputs {check.load_inputs}"
    seed = check.seed if check.seed is not None else "default"
    ranges = f", ranges {' '.join(check.val_range)}" if check.val_range else ", range [0,1]"
    return f"generated: iterations 0 to {count - 1} of seed {seed}{ranges}"


@dataclass
class _Again:
    """How to convert the model again with more nodes kept in fp32 (--repair)."""

    model_path: str
    external_data_dir: Optional[str]
    keep_fp32: List[str]
    reduced_io: bool
    dtype: str

    def __call__(self, more: List[str]):
        from toolkit.convert import fp16
        from toolkit.core.io.model import load_model

        model = load_model(self.model_path, external_data_dir=self.external_data_dir)
        return fp16.convert(model, list(self.keep_fp32) + more, keep_io_types=not self.reduced_io, inplace=True,
                            if_mixed="error", dtype=self.dtype, check_data=False)  # (the first conversion checked it)


def _check_args(model_path, output, dtype, keep_fp32, json_out: bool, check: _Check) -> None:
    """Usage errors, before anything is read or written."""
    from toolkit.core.io.model import check_output_path

    if dtype is None:
        if keep_fp32:
            raise UsageError("--keep-fp32 needs --fp-to-fp16 or --fp-to-bf16")
        raise UsageError("nothing to convert: give --fp-to-fp16 or --fp-to-bf16")
    if json_out and output == "-":
        raise UsageError("--json prints to stdout; write the model to a file with -o")
    _check_usage(check)
    if check.repair and model_path == "-":
        raise UsageError("--repair converts the model again: give it as a file, not '-'")
    check_output_path(output, binary=True)


def _check_usage(check: _Check) -> None:
    """Usage errors of the options of the check: given with --no-validate, or against each other."""
    if not check.enabled:
        _refuse_check_options(check)
    if check.ort_optimization:
        _check_level(check.ort_optimization)
    if check.load_inputs and (check.val_range or check.input_shapes):
        raise UsageError("--val-range and --input-shapes shape generated inputs; with --load-inputs none are generated")


def _refuse_check_options(check: _Check) -> None:
    """With --no-validate: a usage error for each option that only sets the check."""
    if any((check.load_inputs, check.val_range, check.input_shapes, check.seed is not None)):
        raise UsageError("--load-inputs, --val-range, --input-shapes and --seed set the check that --no-validate skips")
    if check.ort_optimization or check.repair:
        raise UsageError("--ort-optimization and --repair set the check that --no-validate skips")


def _check_level(level: str) -> None:
    """--ort-optimization names one of ONNX-Runtime's levels."""
    from toolkit.convert.runtime_check import LEVELS

    if level.lower() not in LEVELS:
        raise UsageError(f"unknown --ort-optimization level '{level}'; use one of: {', '.join(LEVELS)}")


def _original(model, model_path: str, external_data_dir: Optional[str]):
    """What the check runs as the original: the model file itself when ONNX-Runtime can read it as
    it is (no copy, no serialization), else a copy of the loaded model."""

    from toolkit.convert.common import copy_model

    if model_path != "-" and external_data_dir is None and os.path.isfile(model_path):
        return model_path
    return copy_model(model, inplace=False)


def _check_feeds(model, check: _Check):
    """The input sets of the check, checked before converting: every set of --load-inputs, or
    INPUT_SETS generated ones (iterations 0, 1, ... of the seed, as `toolkit run --iterations`
    generates them; made one at a time while the check runs)."""
    from toolkit.convert.validate import INPUT_SETS
    from toolkit.core.inputs import guessed_shapes, parse_val_ranges, plan_generation
    from toolkit.core.io.model import graph_io_meta

    metas, _ = graph_io_meta(model)
    if check.load_inputs:
        return _loaded_feeds(check.load_inputs, metas)
    plan = plan_generation(metas, ranges=parse_val_ranges(check.val_range), shapes=_shapes(model, metas, check))
    check.guessed = guessed_shapes(plan.notes)
    for note in plan.notes:
        (warn if note in check.guessed else log)(note)
    first = plan.feed(0, check.seed)  # (a range the dtype cannot hold fails here, before converting)
    return itertools.chain([first], (plan.feed(k, check.seed) for k in range(1, INPUT_SETS)))


def _loaded_feeds(src: str, metas) -> list:
    """Every input set of the inputs file ``src``, each checked against the model's inputs."""
    from toolkit.core.inputs import select_feed
    from toolkit.core.io.datafiles import load_inputs

    feeds = [select_feed(loaded, metas, source=src, iteration=k) for k, loaded in enumerate(load_inputs(src))]
    if not feeds:
        raise InputError(f"{src}: no input sets")
    return feeds


def _shapes(model, metas, check: _Check):
    """The shapes of the generated inputs: --input-shapes, then the model's own hints for the inputs it
    leaves out (its metadata; see toolkit.convert.shapes)."""
    from toolkit.convert.shapes import model_shape_hints
    from toolkit.core.meta import parse_shape_specs

    given = parse_shape_specs(check.input_shapes)
    specs, keys = model_shape_hints(model, [m for m in metas if m.name not in given])
    if specs:
        log(f"Input shapes from the model's metadata ({', '.join(keys)}): {' '.join(specs)}")
        check.hinted = specs
        given.update(parse_shape_specs(specs))
    return given


def _report(result, dtype: str, output: str, seconds: float, hint: str) -> None:
    from toolkit.convert import fp16

    short = fp16.PRECISIONS[dtype][1]
    if result.clamped:
        _warn_clamped(result.clamped, dtype, short)
    where = "<stdout>" if output == "-" else output
    log(f"Converted to mixed {short} in {seconds:.2f} s: {where}")
    if result.upgraded_from is not None:
        log(f"Upgraded from opset {result.upgraded_from} to {fp16.BF16_MIN_OPSET} first (bfloat16 Casts need it)")
    _kept_lines(result)
    if hint:
        log(hint)


def _warn_clamped(clamped: List[str], dtype: str, short: str) -> None:
    """The weights whose values were clamped to the range of ``dtype``."""
    shown = ", ".join(clamped[:5]) + (" ..." if len(clamped) > 5 else "")
    limits = "+-65504 or +-2**-24" if dtype == "float16" else "+-3.39e38 (the largest bfloat16)"
    warn(f"{len(clamped)} weight(s) had values outside {short}'s range, clamped to {limits}: {shown}")


def _kept_lines(result) -> None:
    """How many nodes were kept in fp32 for each reason, and the values out of range kept with their readers."""
    if result.kept:
        log(f"Kept in fp32: {len(result.kept)} node(s)")
        for reason, n in collections.Counter(result.kept.values()).items():
            log(f"  {n:>5} {reason}")
    for name, why in list(result.out_of_range.items())[:10]:
        log(f"  kept in fp32 with its readers: {name} ({why})")
    if len(result.out_of_range) > 10:
        log(f"  ... and {len(result.out_of_range) - 10} more such value(s) (--json lists them)")


def _checks(original, result, feeds: list, dtype: str, check: _Check, again: "_Again"):
    """(the conversion to write, its runtime checks, the numeric check): the session with the default
    options runs in a forked child while the numeric check runs here."""
    from toolkit.cli.convert_check import check_runtime
    from toolkit.convert.runtime_check import start_session

    pending = start_session(result.model, feeds)
    res = _validate(original, result.model, feeds, dtype, pending.outputs, real=bool(check.load_inputs))
    repaired, runtime = check_runtime(
        result, feeds, check.ort_optimization, check.repair, again, pending.result(), dtype=dtype, original=original
    )
    if repaired is not result:
        res = _validate(original, repaired.model, feeds, dtype, runtime.measured(), real=bool(check.load_inputs))
    if check.repair and res is not None and not res.passed and not runtime.failure:
        repaired, runtime, res = _repair_accuracy(original, repaired, feeds, dtype, check, again, runtime, res)
    if res is not None:
        _report_check(res, dtype, bool(runtime.failure), check.guessed)
    return repaired, runtime, res


def _repair_accuracy(original, result, feeds: list, dtype: str, check: _Check, again: "_Again", runtime, res):
    """--repair of a model that differs from the original beyond the check's tolerances: the nodes to keep in fp32
    searched and the model converted again with them; one that still differs is a failure (written, exit 1)."""
    from toolkit.cli.convert_check import check_runtime, repair_accuracy

    extra = [runtime.repaired_op] if runtime.repaired_op else []  # (the op type a crash repair kept)
    conversion = repair_accuracy(again, feeds, dtype, again.model_path, again.external_data_dir, again.keep_fp32,
                                 extra)
    if conversion is not None:
        result = conversion
        result, runtime = check_runtime(result, feeds, check.ort_optimization, False, again, dtype=dtype,
                                        original=original)
        res = _validate(original, result.model, feeds, dtype, runtime.measured(), real=bool(check.load_inputs))
    if res is not None and not res.passed and not runtime.failure:
        short = "fp16" if dtype == "float16" else "bf16"
        runtime.failure = (
            f"--repair found no set of nodes to keep in fp32 that brings the {short} model within the check's "
            f"tolerances (largest error {res.max_error:.3g} at {res.worst}); the model was written: `toolkit debug "
            f"precision MODEL --compare onnxrt onnxrt:{short}` with the tolerances you need shows where it differs"
        )
    return result, runtime, res


def _validate(original, converted, feed, dtype: str, measured=None, real: bool = False):
    """The check against the original (a warning, never a failure: the model is written); None when
    it could not run."""
    from toolkit.convert.validate import OriginalLoadError, validate

    short = "fp16" if dtype == "float16" else "bf16"
    try:
        res = validate(original, converted, feed, measured=measured)
    except OriginalLoadError as exc:  # (the written model's own check says what follows for it)
        warn(f"the {short} model was not checked against the original: {exc.message}")
        return None
    except InferenceError as exc:
        if exc.exit_code == ExitCode.FAILED:  # the original runs on these inputs, the converted model does not
            warn(
                f"the {short} model was not checked against the original: {exc.message}; keep the node it names "
                "in fp32 with --keep-fp32"
            )
        elif real:  # (the inputs are the user's: the original itself does not run on them here)
            warn(f"the {short} model was not checked against the original: {exc.message}; skip the check with "
                 "--no-validate")
        else:
            warn(
                f"the {short} model was not checked against the original: {exc.message}; give the inputs' real "
                "shapes with --input-shapes (or --load-inputs), or skip the check with --no-validate"
            )
        return None
    return res


def _report_check(res, dtype: str, runtime_failed: bool, guessed) -> None:
    """The check's line: a log line when it passed on the shapes the model will meet, else a warning."""
    short = "fp16" if dtype == "float16" else "bf16"
    tol = f"atol {res.atol:g}, rtol {res.rtol:g}"
    if not res.passed:
        warn(_differs_line(res, short, tol))
    elif guessed:
        # (inputs at size 1 in their dynamic dims: not the shapes the model will meet, no verdict)
        warn(_guessed_line(res, short))
    elif res.measured_differing:
        warn(
            f"the written model differs from the original beyond {tol} as ONNX-Runtime's CPU provider computes it "
            f"(outputs {', '.join(res.measured_differing)}){_measured(res)}; with {short} storage emulated the "
            f"largest error is {res.max_error:.3g}"
        )
    else:
        log(_passed_line(res, short, tol, runtime_failed))


def _guessed_line(res, short: str) -> str:
    """A check that passed on inputs whose dynamic dims were set to 1: what it found, and that it is no verdict."""
    return (
        f"compared with the original in ONNX-Runtime on {_sets(len(res.set_errors))} whose dynamic dims were set "
        f"to 1: largest error {res.max_error:.3g} with {short} storage emulated (output {res.worst}{_which_set(res)})"
        f"{_measured(res)}; that is not a check of the shapes the model will meet: give them with --input-shapes "
        "(or real data with --load-inputs)"
    )


def _passed_line(res, short: str, tol: str, runtime_failed: bool) -> str:
    """A check that passed (with graph optimizations off when the session with the default options failed)."""
    head = "With graph optimizations off, compared" if runtime_failed else "Checked"
    return (
        f"{head} against the original in ONNX-Runtime on {_sets(len(res.set_errors))} ({res.seconds:.2f} s): "
        f"largest error {res.max_error:.3g} with {short} storage emulated (output {res.worst}{_which_set(res)})"
        f"{_measured(res)}, within {tol}"
    )


def _differs_line(res, short: str, tol: str) -> str:
    """A check that failed: where the largest error is, the first tensor that differs, and what finds the nodes."""
    first = (
        f"; the first tensor that differs (topological order) is {res.first_tensor} (error {res.first_error:.3g})"
        if res.first_tensor
        else ""
    )
    return (
        f"the {short} model differs from the original beyond {tol} on {_sets(len(res.set_errors))}: largest error "
        f"{res.max_error:.3g} with {short} storage emulated at output {res.worst}{_which_set(res)}{_measured(res)}"
        f"{first}; `toolkit debug precision MODEL --compare onnxrt onnxrt:{short}` finds the nodes to keep in fp32 "
        "(--keep-fp32)"
    )


def _measured(res) -> str:
    """'; ONNX-Runtime's CPU provider as it runs the written model: E' (nothing when not measured)."""
    if res.measured_max is None:
        return ""
    return f"; {res.measured_max:.3g} as ONNX-Runtime's CPU provider computes the written model"


def _sets(n: int) -> str:
    return "1 input set" if n == 1 else f"{n} input sets"


def _which_set(res) -> str:
    """', input set K; the others E1 to E2' (nothing for a single set)."""
    others = [e for k, e in enumerate(res.set_errors) if k != res.input_set]
    if not others:
        return ""
    span = f"{min(others):.3g}" if len(others) == 1 else f"{min(others):.3g} to {max(others):.3g}"
    return f", input set {res.input_set}; the other set{'s' if len(others) > 1 else ''} {span}"


def _opset_hint(model, kept: dict) -> str:
    """For nodes kept fp32 because their schema at the model's opset has no bfloat16: the op
    types and the opset that gives them bfloat16 ('' when there are none)."""
    from toolkit.convert import fp16

    by_name = {n.name: n.op_type for n in fp16.iter_nodes(model)}
    ops = sorted({by_name[n] for n, why in kept.items() if why == fp16.REASON_SCHEMA_BF16 and n in by_name})
    opset = fp16.opset_version(model)
    later = {op: fp16.bf16_opset(op, opset) for op in ops}
    upgradable = [f"{op} (opset {v})" for op, v in later.items() if v]
    if not upgradable:
        return ""
    return (
        f"At opset {opset}, {', '.join(upgradable)} accept no bfloat16: convert the model to a newer opset "
        "first (onnx.version_converter) to have them in bf16"
    )

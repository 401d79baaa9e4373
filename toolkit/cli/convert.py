"""``toolkit convert``: write a converted copy of a model (mixed fp16 with --fp-to-fp16, mixed bf16 with --fp-to-bf16)."""

# (no `from __future__ import annotations`: Typer would have to eval every annotation string)

import itertools
import os
import time
from dataclasses import dataclass
from typing import List, Optional

import typer

from toolkit.cli.options import bind, command_kwargs, values_for
from toolkit.cli.output import echo, log, warn
from toolkit.core import paths
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


def register(app: typer.Typer) -> None:
    @app.command("convert", **command_kwargs(declares=[ConvertArgs], examples=(
        "toolkit convert model.onnx --fp-to-fp16 -o model_fp16.onnx",
        "toolkit convert model.onnx --fp-to-fp16 --keep-fp32 'Softmax*' LayerNormalization -o mixed.onnx",
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
        check = _Check(a.validate, a.load_inputs, a.seed, a.val_range, a.input_shapes)
        _convert(
            a.model, a.output, dtype, a.keep_fp32, a.fp16_io or a.bf16_io, a.external_data_dir, a.external_data,
            a.json_out, check,
        )


@dataclass
class _Check:
    """The run against the original after converting (--validate) and its inputs."""

    enabled: bool
    load_inputs: Optional[str]
    seed: Optional[int]
    val_range: List[str]
    input_shapes: List[str]


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
    from toolkit.core.model import load_model, save_model
    _check_args(model_path, output, dtype, keep_fp32, json_out, check)

    reads = [("--load-inputs", check.load_inputs)] if check.load_inputs else []
    writes = [("-o", output)] + ([("-o's external data file", output + ".data")] if output != "-" else [])
    paths.check_with_model(model_path, reads, writes, external_data_dir)
    from toolkit.convert import fp16

    assert dtype is not None
    t0 = time.perf_counter()
    model = load_model(model_path, external_data_dir=external_data_dir)
    feeds = _check_feeds(model, check) if check.enabled else None
    original = _original(model, model_path, external_data_dir) if feeds is not None else None
    result = fp16.convert(model, keep_fp32, keep_io_types=not reduced_io, inplace=True, if_mixed="error", dtype=dtype)
    hint = _opset_hint(result.model, result.kept) if dtype == "bfloat16" else ""
    del model
    seconds = time.perf_counter() - t0
    _report(result, dtype, output, seconds, hint)
    # (checked before saving: saving with external data moves the weights out of the model)
    validation = _validate(original, result.model, feeds, dtype) if original is not None else None
    del original
    save_model(result.model, output, external_data=external_data)
    if json_out:
        info = {
            "output": output,
            "precision": dtype,
            "kept_fp32": result.kept,
            "clamped_weights": result.clamped,
            "out_of_range": result.out_of_range,
            "seconds": seconds,
            "validation": validation.as_dict() if validation is not None else None,
        }
        import json  # (--json only)

        echo(json.dumps(info, indent=2))


def _check_args(model_path, output, dtype, keep_fp32, json_out: bool, check: _Check) -> None:
    """Usage errors, before anything is read or written."""
    from toolkit.core.model import check_output_path

    if dtype is None:
        if keep_fp32:
            raise UsageError("--keep-fp32 needs --fp-to-fp16 or --fp-to-bf16")
        raise UsageError("nothing to convert: give --fp-to-fp16 or --fp-to-bf16")
    if json_out and output == "-":
        raise UsageError("--json prints to stdout; write the model to a file with -o")
    if not check.enabled and (check.load_inputs or check.val_range or check.input_shapes or check.seed is not None):
        raise UsageError("--load-inputs, --val-range, --input-shapes and --seed set the check that --no-validate skips")
    if check.load_inputs and (check.val_range or check.input_shapes):
        raise UsageError("--val-range and --input-shapes shape generated inputs; with --load-inputs none are generated")
    check_output_path(output, binary=True)


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
    from toolkit.core.inputs import parse_val_ranges, plan_generation, select_feed
    from toolkit.core.meta import parse_shape_specs
    from toolkit.core.model import graph_io_meta

    metas, _ = graph_io_meta(model)
    if check.load_inputs:
        from toolkit.core.datafiles import load_inputs

        src = check.load_inputs
        feeds = [select_feed(loaded, metas, source=src, iteration=k) for k, loaded in enumerate(load_inputs(src))]
        if not feeds:
            raise InputError(f"{src}: no input sets")
        return feeds
    plan = plan_generation(metas, ranges=parse_val_ranges(check.val_range), shapes=parse_shape_specs(check.input_shapes))
    for note in plan.notes:
        log(note)
    first = plan.feed(0, check.seed)  # (a range the dtype cannot hold fails here, before converting)
    return itertools.chain([first], (plan.feed(k, check.seed) for k in range(1, INPUT_SETS)))


def _report(result, dtype: str, output: str, seconds: float, hint: str) -> None:
    from toolkit.convert import fp16

    short = fp16.PRECISIONS[dtype][1]
    if result.clamped:
        shown = ", ".join(result.clamped[:5]) + (" ..." if len(result.clamped) > 5 else "")
        limits = "+-65504 or +-2**-24" if dtype == "float16" else "+-3.39e38 (the largest bfloat16)"
        warn(f"{len(result.clamped)} weight(s) had values outside {short}'s range, clamped to {limits}: {shown}")
    counts: dict = {}
    for reason in result.kept.values():
        counts[reason] = counts.get(reason, 0) + 1
    where = "<stdout>" if output == "-" else output
    log(f"Converted to mixed {short} in {seconds:.2f} s: {where}")
    if result.upgraded_from is not None:
        log(f"Upgraded from opset {result.upgraded_from} to {fp16.BF16_MIN_OPSET} first (bfloat16 Casts need it)")
    if result.kept:
        log(f"Kept in fp32: {len(result.kept)} node(s)")
        for reason, n in counts.items():
            log(f"  {n:>5} {reason}")
    for name, why in list(result.out_of_range.items())[:10]:
        log(f"  kept in fp32 with its readers: {name} ({why})")
    if len(result.out_of_range) > 10:
        log(f"  ... and {len(result.out_of_range) - 10} more such value(s) (--json lists them)")
    if hint:
        log(hint)


def _validate(original, converted, feed, dtype: str):
    """The check against the original (a warning, never a failure: the model is written)."""
    from toolkit.convert.validate import validate

    short = "fp16" if dtype == "float16" else "bf16"
    try:
        res = validate(original, converted, feed)
    except InferenceError as exc:
        if exc.exit_code == ExitCode.FAILED:  # the original runs on these inputs, the converted model does not
            warn(
                f"the {short} model was not checked against the original: {exc.message}; keep the node it names "
                "in fp32 with --keep-fp32"
            )
        else:
            warn(
                f"the {short} model was not checked against the original: {exc.message}; give the inputs' real "
                "shapes with --input-shapes (or --load-inputs), or skip the check with --no-validate"
            )
        return None
    tol = f"atol {res.atol:g}, rtol {res.rtol:g}"
    where = _which_set(res)
    if res.passed:
        log(
            f"Checked against the original in ONNX-Runtime on {_sets(len(res.set_errors))} ({res.seconds:.2f} s): "
            f"largest error {res.max_error:.3g} (output {res.worst}{where}), within {tol}"
        )
        return res
    first = (
        f"; the first tensor that differs (topological order) is {res.first_tensor} (error {res.first_error:.3g})"
        if res.first_tensor
        else ""
    )
    warn(
        f"the {short} model differs from the original beyond {tol} on {_sets(len(res.set_errors))}: largest error "
        f"{res.max_error:.3g} at output {res.worst}{where}{first}; `toolkit debug precision MODEL` finds the nodes "
        "to keep in fp32 (--keep-fp32)"
    )
    return res


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
    if not ops:
        return ""
    opset = fp16.opset_version(model)
    later = {op: fp16.bf16_opset(op, opset) for op in ops}
    upgradable = [f"{op} (opset {v})" for op, v in later.items() if v]
    if not upgradable:
        return ""
    return (
        f"At opset {opset}, {', '.join(upgradable)} accept no bfloat16: convert the model to a newer opset "
        "first (onnx.version_converter) to have them in bf16"
    )

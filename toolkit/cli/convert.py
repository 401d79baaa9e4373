"""``toolkit convert``: write a converted copy of a model (mixed fp16 with --fp-to-fp16, mixed bf16 with --fp-to-bf16)."""

# (no `from __future__ import annotations`: Typer would have to eval every annotation string)

from typing import List, Optional

import typer

from toolkit.cli.options import Annotated, ExternalDataDirOpt, ListOpt, ModelArg, command_kwargs, option
from toolkit.cli.output import log, warn

HELP = "Convert a model: mixed fp16 with --fp-to-fp16, mixed bf16 with --fp-to-bf16."


# The help text of each option of `convert`, by its first flag.
_CONVERT_OPTS = {
    "-o": "Where to write the converted model.",
    "--fp-to-fp16": "Convert float32 to float16 where it is safe (mixed precision; I/O types kept).",
    "--fp-to-bf16": "Convert float32 to bfloat16 where it is safe (mixed precision; I/O types kept), by the same "
        "rules as --fp-to-fp16.",
    "--keep-fp32": "Nodes to keep in fp32: node names, glob patterns over node names, or op types (Pow, ReduceMean). "
        "Several after one flag, or comma-separated.",
    "--fp16-io": "Make float32 graph inputs and outputs float16 too (default: keep them).",
    "--bf16-io": "With --fp-to-bf16: make float32 graph inputs and outputs bfloat16 too (default: keep them).",
    "--external-data/--no-external-data": "Write weights to a separate file <OUT>.data (default: only when the model "
        "is over 2 GB).",
    "--json": "Print what was kept in fp32 and why as JSON on stdout.",
}


def register(app: typer.Typer) -> None:
    @app.command("convert", **command_kwargs())
    def convert_command(
        model: ModelArg,
        output: Annotated[str, option(_CONVERT_OPTS, "-o", "--output")],
        fp_to_fp16: Annotated[bool, option(_CONVERT_OPTS, "--fp-to-fp16")] = False,
        fp_to_bf16: Annotated[bool, option(_CONVERT_OPTS, "--fp-to-bf16")] = False,
        keep_fp32: Annotated[ListOpt, option(_CONVERT_OPTS, "--keep-fp32")] = None,
        fp16_io: Annotated[bool, option(_CONVERT_OPTS, "--fp16-io")] = False,
        bf16_io: Annotated[bool, option(_CONVERT_OPTS, "--bf16-io")] = False,
        external_data: Annotated[Optional[bool], option(_CONVERT_OPTS, "--external-data/--no-external-data")] = None,
        json_out: Annotated[bool, option(_CONVERT_OPTS, "--json")] = False,
        external_data_dir: ExternalDataDirOpt = None,
    ) -> None:
        """Convert a model: mixed fp16 with --fp-to-fp16, mixed bf16 with --fp-to-bf16.

        Float32 weights and tensors become float16 (bfloat16), except nodes that must stay
        fp32: the ones named with --keep-fp32, ops without fp16 kernels in ONNX-Runtime
        (Resize, Range, TopK, ...), ops whose ONNX schema at the model's opset has no fp16
        (bf16) type, custom-domain ops and shape computations. Graph inputs and outputs keep
        their types. The result is checked with ONNX type inference before it is written.
        Built on onnxconverter-common's float16 conversion; for bfloat16 the same conversion
        places the casts and every weight is rounded once from its float32 value.
        """
        if fp_to_fp16 and fp_to_bf16:
            from toolkit.core.errors import UsageError

            raise UsageError("--fp-to-fp16 and --fp-to-bf16 exclude each other: give one")
        if bf16_io and not fp_to_bf16:
            from toolkit.core.errors import UsageError

            raise UsageError("--bf16-io needs --fp-to-bf16")
        if fp16_io and fp_to_bf16:
            from toolkit.core.errors import UsageError

            raise UsageError("--fp16-io goes with --fp-to-fp16; with --fp-to-bf16 use --bf16-io")
        dtype = "bfloat16" if fp_to_bf16 else ("float16" if fp_to_fp16 else None)
        _convert(
            model, output, dtype, keep_fp32 or [], fp16_io or bf16_io, external_data_dir, external_data, json_out
        )


def _convert(
    model_path: str,
    output: str,
    dtype: Optional[str],
    keep_fp32: List[str],
    reduced_io: bool,
    external_data_dir: Optional[str],
    external_data: Optional[bool],
    json_out: bool,
) -> None:
    import time

    from toolkit.core.errors import UsageError
    from toolkit.core.model import check_output_path, load_model, save_model

    if dtype is None:
        if keep_fp32:
            raise UsageError("--keep-fp32 needs --fp-to-fp16 or --fp-to-bf16")
        raise UsageError("nothing to convert: give --fp-to-fp16 or --fp-to-bf16")
    if json_out and output == "-":
        raise UsageError("--json prints to stdout; write the model to a file with -o")
    check_output_path(output, binary=True)
    from toolkit.core import paths

    writes = [("-o", output)] + ([("-o's external data file", output + ".data")] if output != "-" else [])
    paths.check_with_model(model_path, [], writes, external_data_dir)
    from toolkit.convert import fp16

    t0 = time.perf_counter()
    model = load_model(model_path, external_data_dir=external_data_dir)
    short = fp16.PRECISIONS[dtype][1]
    result = fp16.convert(model, keep_fp32, keep_io_types=not reduced_io, inplace=True, if_mixed="error", dtype=dtype)
    hint = _opset_hint(result.model, result.kept) if dtype == "bfloat16" else ""
    del model
    save_model(result.model, output, external_data=external_data)
    seconds = time.perf_counter() - t0
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
    if hint:
        log(hint)
    if json_out:
        import json

        from toolkit.cli.output import echo

        echo(
            json.dumps(
                {
                    "output": output,
                    "precision": dtype,
                    "kept_fp32": result.kept,
                    "clamped_weights": result.clamped,
                    "seconds": seconds,
                },
                indent=2,
            )
        )


def _opset_hint(model, kept: dict) -> str:
    """For nodes kept fp32 because their schema at the model's opset has no bfloat16: the op
    types and the opset that gives them bfloat16 ('' when there are none)."""
    from toolkit.convert import fp16

    by_name = {n.name: n.op_type for n in fp16.iter_nodes(model)}
    ops = sorted({by_name[n] for n, why in kept.items() if why == fp16.REASON_SCHEMA_BF16 and n in by_name})
    if not ops:
        return ""
    opset = fp16._opset(model)
    later = {op: fp16.bf16_opset(op, opset) for op in ops}
    upgradable = [f"{op} (opset {v})" for op, v in later.items() if v]
    if not upgradable:
        return ""
    return (
        f"At opset {opset}, {', '.join(upgradable)} accept no bfloat16: convert the model to a newer opset "
        "first (onnx.version_converter) to have them in bf16"
    )

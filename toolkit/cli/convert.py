"""``toolkit convert``: write a converted copy of a model (mixed fp16 with --fp-to-fp16)."""

# (no `from __future__ import annotations`: Typer would have to eval every annotation string)

from typing import List, Optional

import typer

from toolkit.cli.options import Annotated, ExternalDataDirOpt, ListOpt, ModelArg, command_kwargs
from toolkit.cli.output import log, warn

HELP = "Convert a model: mixed fp16 with --fp-to-fp16."


def register(app: typer.Typer) -> None:
    @app.command("convert", **command_kwargs())
    def convert_command(
        model: ModelArg,
        output: Annotated[str, typer.Option("-o", "--output", help="Where to write the converted model.")],
        fp_to_fp16: Annotated[
            bool,
            typer.Option(
                "--fp-to-fp16",
                help="Convert float32 to float16 where it is safe (mixed precision; I/O types kept).",
            ),
        ] = False,
        keep_fp32: Annotated[
            ListOpt,
            typer.Option(
                "--keep-fp32",
                help="Nodes to keep in fp32: node names, glob patterns over node names, or op types "
                "(Pow, ReduceMean). Several after one flag, or comma-separated.",
            ),
        ] = None,
        fp16_io: Annotated[
            bool,
            typer.Option("--fp16-io", help="Make float32 graph inputs and outputs float16 too (default: keep them)."),
        ] = False,
        external_data_dir: ExternalDataDirOpt = None,
        external_data: Annotated[
            Optional[bool],
            typer.Option(
                "--external-data/--no-external-data",
                help="Write weights to a separate file <OUT>.data (default: only when the model is over 2 GB).",
            ),
        ] = None,
        json_out: Annotated[
            bool, typer.Option("--json", help="Print what was kept in fp32 and why as JSON on stdout.")
        ] = False,
    ) -> None:
        """Convert a model: mixed fp16 with --fp-to-fp16.

        Float32 weights and tensors become float16, except nodes that must stay fp32: the
        ones named with --keep-fp32, ops without fp16 kernels (Resize, Range, TopK, ...),
        ops whose ONNX schema has no fp16 type, custom-domain ops and shape computations.
        Graph inputs and outputs keep their types. The result is checked with ONNX type
        inference before it is written. Built on onnxconverter-common's float16 conversion.
        """
        _convert(model, output, fp_to_fp16, keep_fp32 or [], fp16_io, external_data_dir, external_data, json_out)


def _convert(
    model_path: str,
    output: str,
    fp_to_fp16: bool,
    keep_fp32: List[str],
    fp16_io: bool,
    external_data_dir: Optional[str],
    external_data: Optional[bool],
    json_out: bool,
) -> None:
    import os
    import time

    from toolkit.core.errors import UsageError
    from toolkit.core.model import check_output_path, load_model, save_model

    if not fp_to_fp16:
        raise UsageError("nothing to convert: give --fp-to-fp16")
    if keep_fp32 and not fp_to_fp16:
        raise UsageError("--keep-fp32 needs --fp-to-fp16")
    if json_out and output == "-":
        raise UsageError("--json prints to stdout; write the model to a file with -o")
    check_output_path(output, binary=True)
    if output != "-" and model_path != "-" and os.path.exists(output) and os.path.samefile(output, model_path):
        raise UsageError(f"{output}: the output would overwrite the input model; choose another -o")
    from toolkit.core import fp16

    t0 = time.perf_counter()
    model = load_model(model_path, external_data_dir=external_data_dir)
    result = fp16.convert(model, keep_fp32, keep_io_types=not fp16_io, inplace=True, if_mixed="error")
    del model
    save_model(result.model, output, external_data=external_data)
    seconds = time.perf_counter() - t0
    if result.clamped:
        shown = ", ".join(result.clamped[:5]) + (" ..." if len(result.clamped) > 5 else "")
        warn(
            f"{len(result.clamped)} weight(s) had values outside fp16's range, clamped to +-65504 "
            f"or +-2**-24: {shown}"
        )
    counts: dict = {}
    for reason in result.kept.values():
        counts[reason] = counts.get(reason, 0) + 1
    where = "<stdout>" if output == "-" else output
    log(f"Converted to mixed fp16 in {seconds:.2f} s: {where}")
    if result.kept:
        log(f"Kept in fp32: {len(result.kept)} node(s)")
        for reason, n in counts.items():
            log(f"  {n:>5} {reason}")
    if json_out:
        import json

        from toolkit.cli.output import echo

        echo(
            json.dumps(
                {"output": output, "kept_fp32": result.kept, "clamped_weights": result.clamped, "seconds": seconds},
                indent=2,
            )
        )

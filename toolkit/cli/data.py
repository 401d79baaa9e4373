"""``toolkit data``: work with inputs and outputs files (JSON or .npz)."""

# (no `from __future__ import annotations`: Typer would have to eval every annotation string)

from dataclasses import dataclass
from typing import List

import typer

from toolkit.cli.app_settings import SUBAPP_SETTINGS
from toolkit.cli.options import bind, check_data_output, command_kwargs, values_for
from toolkit.cli.output import log, warn
from toolkit.core.files import paths
from toolkit.core.declare import argument, required
from toolkit.core.errors import UsageError

app = typer.Typer(help="Work with inputs and outputs data files (JSON or .npz).", **SUBAPP_SETTINGS)


@dataclass
class MergeArgs:
    """The options of ``data to-input`` (and ``data merge``), each declared once."""

    files: List[str] = argument("Inputs files and/or outputs files (JSON or .npz; '-' for stdin).", "FILE...")
    output: str = required("-o", "--output", metavar="PATH",
                           help="Where to write the merged inputs file (.json or .npz; '-' for stdout).")


def _to_input(args: MergeArgs) -> None:
    from toolkit.core.io.datafiles import load_data, merge_to_inputs, save_inputs
    from toolkit.core.io.model import check_output_path

    files, output = args.files, args.output
    if not files:
        raise UsageError("give at least one inputs or outputs file")
    if files.count("-") > 1:
        raise UsageError("stdin ('-') can be read only once")
    check_data_output("-o", output)
    check_output_path(output)

    # (the one rule: -o is none of the files read, nor the log file)
    paths.check([("FILE", f) for f in files], [("-o", output)])
    datasets = [load_data(f) for f in files]
    _warn_uneven(files, datasets)
    merged = merge_to_inputs(datasets)
    save_inputs(output, merged)
    names = {n for feed in merged for n in feed}
    where = "<stdout>" if output == "-" else output
    log(f"Merged {len(files)} file(s) into {len(merged)} iteration(s) of {len(names)} tensor(s): {where}")


def _warn_uneven(files: List[str], datasets: list) -> None:
    """Warn when the files hold different numbers of iterations: the later feeds then lack the
    tensors of the shorter files (a layerwise check on them would miss its inputs)."""
    from toolkit.core.io.datafiles import RunResults

    counts = [
        max((len(iters) for _r, iters in d.runs), default=0) if isinstance(d, RunResults) else len(d)
        for d in datasets
    ]
    if len(set(counts)) > 1:
        held = ", ".join(f"{f}: {n}" for f, n in zip(files, counts))
        warn(
            f"the files hold different numbers of iterations ({held}); iterations {min(counts)} and later hold "
            "only the tensors of the files that have them"
        )


@app.command("to-input", **command_kwargs(declares=[MergeArgs], examples=(
    "toolkit data to-input inputs.json layerwise.json -o layerwise_inputs.json",
)))
@bind(MergeArgs)
def to_input(ctx: typer.Context, **params) -> None:
    """Merge inputs files and outputs files into one inputs file.

    Iteration k of every file goes into feed k (later files win when a name appears
    twice); an outputs file contributes each of its runners' iteration k. Use it to turn
    saved inputs plus layerwise outputs into inputs for any subgraph of the model.
    """
    _to_input(MergeArgs(**values_for(MergeArgs, params)))


@app.command("merge", **command_kwargs(declares=[MergeArgs], examples=(
    "toolkit data merge inputs.json layerwise.json -o layerwise_inputs.json",
)))
@bind(MergeArgs)
def merge(ctx: typer.Context, **params) -> None:
    """The same command as `data to-input`."""
    _to_input(MergeArgs(**values_for(MergeArgs, params)))

"""`toolkit inspect model` and `toolkit inspect data`."""

from __future__ import annotations

import json
from typing import List, Optional

import typer

from toolkit.cli.app_settings import SUBAPP_SETTINGS
from toolkit.cli.options import Annotated, ExternalDataDirOpt, IgnoreExternalDataOpt, ModelArg, command_kwargs

app = typer.Typer(help="Inspect models and data files.", **SUBAPP_SETTINGS)


def _emit(lines: List[str]) -> None:
    import sys

    sys.stdout.write("\n".join(lines) + "\n")


@app.command("model", **command_kwargs())
def inspect_model(
    model: ModelArg,
    mode: Annotated[
        str,
        typer.Option(
            "--mode",
            help="What to show: none (inputs, outputs, initializers), basic (+ nodes), "
            "attrs (+ node attributes), full (+ weight values, summarised).",
        ),
    ] = "none",
    show: Annotated[
        Optional[List[str]],
        typer.Option("--show", help="Newer spelling, several values after one flag: layers attrs weights."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the description as JSON on stdout.")] = False,
    external_data_dir: ExternalDataDirOpt = None,
    ignore_external_data: IgnoreExternalDataOpt = False,
) -> None:
    """Show a model: name, opsets, graph inputs and outputs, initializers, and optionally nodes,
    attributes and weights (subgraphs of If/Loop/Scan nested under their node)."""
    from toolkit.core.describe import Show, describe_model, model_text
    from toolkit.core.model import load_model

    shown = Show.from_mode(mode).union(Show.from_words(show))
    base_dir = None
    if shown.weights and not ignore_external_data:
        from toolkit.core.weights import load_lazily

        # weights stay on disk and are read one at a time for their statistics
        proto, base_dir = load_lazily(model, external_data_dir, eager_bytes=0)
    else:
        proto = load_model(model, external_data_dir=external_data_dir, load_external_data=False)
    desc = describe_model(proto, shown, external_base_dir=base_dir)
    if as_json:
        _emit([json.dumps(desc, indent=2)])
    else:
        _emit(model_text(desc, shown))


@app.command("data", **command_kwargs())
def inspect_data(
    path: Annotated[str, typer.Argument(help="Inputs or outputs file (JSON or .npz), or '-' for stdin.", metavar="FILE")],
    show_values: Annotated[bool, typer.Option("--show-values", help="Print every value of every tensor.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the description as JSON on stdout.")] = False,
) -> None:
    """Show an inputs or outputs file: iterations, and per tensor dtype, shape and statistics."""
    from toolkit.core.datafiles import load_data
    from toolkit.core.describe import data_text, describe_data

    desc = describe_data(load_data(path), show_values)
    if as_json:
        _emit([json.dumps(desc, indent=2)])
    else:
        _emit(data_text(desc, show_values))

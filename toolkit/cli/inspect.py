"""`toolkit inspect model` and `toolkit inspect data`."""

from __future__ import annotations

import json
import sys
from typing import List, Optional

import typer

from toolkit.cli import output
from toolkit.cli.app_settings import SUBAPP_SETTINGS
from toolkit.cli.options import (
    Annotated,
    ExternalDataDirOpt,
    IgnoreExternalDataOpt,
    ModelArg,
    command_kwargs,
    completes,
    option,
)
from toolkit.cli.output import warn

app = typer.Typer(help="Inspect models and data files.", **SUBAPP_SETTINGS)


def _emit(lines: List[str]) -> None:
    sys.stdout.write("\n".join(lines) + "\n")


def _is_engine(model: str) -> bool:
    """A TensorRT engine: by its suffix (.engine/.plan/.trt) or --model-type engine."""
    from toolkit.backends.trt.options import is_engine_path

    return is_engine_path(model) or (output.state.model_type or "").lower() == "engine"


# The help text of each option of `inspect model`, by its first flag.
_MODEL_OPTS = {
    "--mode": "What to show: none (inputs, outputs, initializers), basic (+ nodes), attrs (+ node attributes), full "
        "(+ weight values, summarised).",
    "--show": "Newer spelling, several values after one flag: layers attrs weights.",
    "--json": "Print the description as JSON on stdout.",
    "--list-unbounded-dds": "List the tensors that set a data-dependent output size without an upper bound (bound "
        "them with `surgeon sanitize --set-unbounded-dds-upper-bound`).",
    "--shape-inference": "Run ONNX shape inference first, so intermediate tensors show the dtypes and shapes it "
        "finds (without it: only those the model records).",
}


@app.command("model", **command_kwargs())
def inspect_model(
    model: ModelArg,
    mode: Annotated[str, option(_MODEL_OPTS, "--mode", autocompletion=completes(("none", "basic", "attrs", "full")))] = "none",
    show: Annotated[Optional[List[str]], option(_MODEL_OPTS, "--show")] = None,
    as_json: Annotated[bool, option(_MODEL_OPTS, "--json")] = False,
    external_data_dir: ExternalDataDirOpt = None,
    ignore_external_data: IgnoreExternalDataOpt = False,
    list_unbounded_dds: Annotated[bool, option(_MODEL_OPTS, "--list-unbounded-dds")] = False,
    shape_inference: Annotated[bool, option(_MODEL_OPTS, "--shape-inference")] = False,
) -> None:
    """Show a model: name, opsets, graph inputs and outputs, initializers, and optionally nodes,
    attributes and weights (subgraphs of If/Loop/Scan nested under their node)."""
    from toolkit.core.model import load_model
    from toolkit.inspect.describe import Show, describe_model, model_text

    if list_unbounded_dds:
        from toolkit.surgeon.outputs import unbounded_dds_tensors

        names = unbounded_dds_tensors(load_model(model, external_data_dir=external_data_dir, load_external_data=False))
        _emit([f"Tensors with unbounded data-dependent shapes: {len(names)}"] + [f"  {n}" for n in names])
        return

    shown = Show.from_mode(mode).union(Show.from_words(show))
    if _is_engine(model):
        from toolkit.backends.trt.inspect import describe_engine, engine_text

        desc = describe_engine(model, layers=shown.layers)
        _emit([json.dumps(desc, indent=2)] if as_json else engine_text(desc))
        return
    base_dir = None
    if shown.weights and not ignore_external_data:
        from toolkit.core.model import load_lazily

        # weights stay on disk and are read one at a time for their statistics
        proto, base_dir = load_lazily(model, external_data_dir, eager_bytes=0)
    else:
        proto = load_model(model, external_data_dir=external_data_dir, load_external_data=False)
    # intermediate tensors show the dtype and shape the model records (value_info), and with
    # --shape-inference what ONNX shape inference finds (run on a copy without the weights' data)
    desc = describe_model(proto, shown, infer=shape_inference, external_base_dir=base_dir)
    if as_json:
        _emit([json.dumps(desc, indent=2)])
    else:
        _emit(model_text(desc, shown))


# The help text of each option of `inspect data`, by its first flag.
_DATA_OPTS = {
    "-s": "Print every value of every tensor.",
    "-a": "Accepted for Polygraphy command lines: every iteration is always shown.",
    "-n": "With --show-values: print N values at each end of every dimension, '...' between (-1: all; default all).",
    "--line-width": "With --show-values: wrap printed arrays at CHARS characters (-1: one line per row; default 110).",
    "--json": "Print the description as JSON on stdout.",
}


@app.command("data", **command_kwargs())
def inspect_data(
    path: Annotated[str, typer.Argument(help="Inputs or outputs file (JSON or .npz), or '-' for stdin.", metavar="FILE")],
    show_values: Annotated[bool, option(_DATA_OPTS, "-s", "--show-values")] = False,
    show_all: Annotated[bool, option(_DATA_OPTS, "-a", "--all")] = False,
    num_items: Annotated[Optional[int], option(_DATA_OPTS, "-n", "--num-items", metavar="N")] = None,
    line_width: Annotated[Optional[int], option(_DATA_OPTS, "--line-width", metavar="CHARS")] = None,
    as_json: Annotated[bool, option(_DATA_OPTS, "--json")] = False,
) -> None:
    """Show an inputs or outputs file: iterations, and per tensor dtype, shape and statistics
    (mean, std, min, max, median, 90th/95th/99th percentiles, NaN/Inf counts)."""
    from toolkit.core.datafiles import load_data
    from toolkit.inspect.describe import data_text, describe_data

    if (num_items is not None or line_width is not None) and not show_values:

        warn("--num-items and --line-width only change how --show-values prints arrays")
    desc = describe_data(load_data(path), show_values)
    if as_json:
        _emit([json.dumps(desc, indent=2)])
    else:
        _emit(data_text(desc, show_values, num_items=num_items, line_width=line_width))

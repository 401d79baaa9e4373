"""`toolkit inspect model` and `toolkit inspect data`."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from typing import List, Optional

import typer

from toolkit.core.text import escape_controls
from toolkit.cli import output
from toolkit.cli.app_settings import SUBAPP_SETTINGS
from toolkit.cli.options import bind, command_kwargs, values_for
from toolkit.cli.output import warn
from toolkit.core import shared_options as S
from toolkit.core.declare import argument, declared, option, switch

app = typer.Typer(help="Inspect models and data files.", **SUBAPP_SETTINGS)


def _emit(lines: List[str], plain: bool = True) -> None:
    """Lines on stdout; plain text has every control character of a name escaped (one line per
    node, nothing a terminal would act on). JSON (``plain=False``) escapes them itself."""
    if plain:
        lines = [escape_controls(line) for line in lines]
    sys.stdout.write("\n".join(lines) + "\n")


def _is_engine(model: str) -> bool:
    """A TensorRT engine: by its suffix (.engine/.plan/.trt) or --model-type engine."""
    from toolkit.backends.trt.options import is_engine_path

    return is_engine_path(model) or (output.state.model_type or "").lower() == "engine"


@dataclass
class InspectModelArgs:
    """The options of ``inspect model``, each declared once."""

    model: str = declared(S.MODEL)
    mode: str = option("--mode", metavar="MODE", default="none", complete=("none", "basic", "attrs", "full"), help="What to show: none "
                       "(inputs, outputs, initializers), basic (+ nodes), attrs (+ node attributes), full (+ weight "
                       "values, summarised).")
    show: List[str] = option("--show", metavar="SHOW...", factory=list,
                             help="Newer spelling, several values after one flag: layers attrs weights.")
    as_json: bool = switch("--json", help="Print the description as JSON on stdout.")
    external_data_dir: Optional[str] = declared(S.EXTERNAL_DATA_DIR)
    ignore_external_data: bool = declared(S.IGNORE_EXTERNAL_DATA, default=False)
    list_unbounded_dds: bool = switch("--list-unbounded-dds", help="List the tensors that set a data-dependent output "
                                      "size without an upper bound (bound them with `surgeon sanitize "
                                      "--set-unbounded-dds-upper-bound`).")
    shape_inference: bool = switch("--shape-inference", "--do-shape-inference", help="Run ONNX shape inference first, so intermediate tensors "
                                   "show the dtypes and shapes it finds (without it: only those the model records).")


@app.command("model", **command_kwargs(declares=[InspectModelArgs], examples=(
    "toolkit inspect model model.onnx --mode=basic",
    "toolkit inspect model model.onnx --show layers attrs --json > model.json",
)))
@bind(InspectModelArgs)
def inspect_model(ctx: typer.Context, **params) -> None:
    """Show a model: name, opsets, graph inputs and outputs, initializers, and optionally nodes,
    attributes and weights (subgraphs of If/Loop/Scan nested under their node)."""
    from toolkit.inspect.describe import Show, describe_model, model_text

    args = InspectModelArgs(**values_for(InspectModelArgs, params))
    model, as_json = args.model, args.as_json
    if args.list_unbounded_dds:
        _list_unbounded_dds(args)
        return

    shown = Show.from_mode(args.mode).union(Show.from_words(args.show))
    if _is_engine(model):
        from toolkit.backends.trt.inspect import describe_engine, engine_text

        desc = describe_engine(model, layers=shown.layers)
        _emit([json.dumps(desc, indent=2)] if as_json else engine_text(desc), plain=not as_json)
        return
    proto, base_dir = _load_to_describe(args, shown.weights)
    # intermediate tensors show the dtype and shape the model records (value_info), and with
    # --shape-inference what ONNX shape inference finds (run on a copy without the weights' data)
    desc = describe_model(proto, shown, infer=args.shape_inference, external_base_dir=base_dir)
    if as_json:
        _emit([json.dumps(desc, indent=2)], plain=False)
    else:
        _emit(model_text(desc, shown))


def _list_unbounded_dds(args: InspectModelArgs) -> None:
    """--list-unbounded-dds: the tensors that set a data-dependent output size without a bound."""
    from toolkit.core.io.model import load_model
    from toolkit.surgeon.outputs import unbounded_dds_tensors

    names = unbounded_dds_tensors(load_model(args.model, external_data_dir=args.external_data_dir,
                                             load_external_data=False))
    _emit([f"Tensors with unbounded data-dependent shapes: {len(names)}"] + [f"  {n}" for n in names])


def _load_to_describe(args: InspectModelArgs, weights: bool):
    """(the model, the folder its external weights are read from or None): with the weights shown, they stay
    on disk and are read one at a time for their statistics; else they are not loaded."""
    from toolkit.core.io.model import load_lazily, load_model

    if weights and not args.ignore_external_data:
        return load_lazily(args.model, args.external_data_dir, eager_bytes=0, bounded=args.shape_inference)
    proto = load_model(args.model, external_data_dir=args.external_data_dir, load_external_data=False,
                       bounded=args.shape_inference)  # (shape inference inlines local functions)
    return proto, None


@dataclass
class InspectDataArgs:
    """The options of ``inspect data``, each declared once."""

    path: str = argument("Inputs or outputs file (JSON or .npz), or '-' for stdin.", "FILE")
    show_values: bool = switch("-s", "--show-values", help="Print the values of every tensor: 3 at each end of every "
                               "dimension, '...' between (--num-items to choose, -1 for all).")
    show_all: bool = switch("-a", "--all",
                            help="Accepted for Polygraphy command lines: every iteration is always shown.")
    num_items: Optional[int] = option("-n", "--num-items", metavar="N", help="With --show-values: print N values at "
                                      "each end of every dimension, '...' between (-1: all; default 3).")
    line_width: Optional[int] = option("--line-width", metavar="CHARS", help="With --show-values: wrap printed arrays "
                                       "at CHARS characters (-1: one line per row; default 110).")
    as_json: bool = switch("--json", help="Print the description as JSON on stdout.")


@app.command("data", **command_kwargs(declares=[InspectDataArgs], examples=(
    "toolkit inspect data golden.json",
    "toolkit inspect data inputs.json --show-values --num-items 5",
)))
@bind(InspectDataArgs)
def inspect_data(ctx: typer.Context, **params) -> None:
    """Show an inputs or outputs file: iterations, and per tensor dtype, shape and statistics
    (mean, std, min, max, median, 90th/95th/99th percentiles, NaN/Inf counts)."""
    from toolkit.core.io.datafiles import load_data
    from toolkit.inspect.data import data_lines, describe_data

    args = InspectDataArgs(**values_for(InspectDataArgs, params))
    show_values, num_items, line_width = args.show_values, args.num_items, args.line_width
    if (num_items is not None or line_width is not None) and not show_values:
        warn("--num-items and --line-width only change how --show-values prints arrays")
    data = load_data(args.path, cache=False)
    if args.as_json:
        _emit([json.dumps(describe_data(data, show_values, num_items, line_width), indent=2)], plain=False)
        return
    for lines in data_lines(data, show_values, num_items, line_width):  # streamed: one tensor at a time
        _emit(lines)
        sys.stdout.flush()

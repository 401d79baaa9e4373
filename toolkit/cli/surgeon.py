"""`toolkit surgeon`: cut subgraphs out of models (extract) and simplify them (sanitize).

Thin layer: parse options, call toolkit.surgeon (extract, sanitize, optimize), save. Nothing heavy is imported at
module level (numpy/onnx/graphsurgeon load inside the command bodies).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import List, Optional

import typer

from toolkit.cli.app_settings import SUBAPP_SETTINGS
from toolkit.cli.options import ToolkitCommand, bind, command_kwargs, values_for
from toolkit.cli.output import log, warn
from toolkit.core.files import inplace
from toolkit.core.files import paths
from toolkit.core import shared_options as S
from toolkit.core.declare import declared, option, switch
from toolkit.core.errors import UsageError

app = typer.Typer(help="Cut subgraphs out of ONNX models and simplify them (fold constants, freeze shapes).", **SUBAPP_SETTINGS)


class SurgeonCommand(ToolkitCommand):
    """``--save-external-data [PATH]``: the file name may follow the flag, as in Polygraphy."""

    def parse_args(self, ctx, args):
        out = []
        args = list(args)
        i = 0
        while i < len(args):
            tok = args[i]
            if tok == "--":
                out.extend(args[i:])
                break
            if tok.startswith("--save-external-data="):
                out += ["--save-external-data", "--external-data-path", tok.split("=", 1)[1]]
            elif tok == "--save-external-data" and i + 1 < len(args) and not args[i + 1].startswith("-"):
                out += [tok, "--external-data-path", args[i + 1]]
                i += 1
            else:
                out.append(tok)
            i += 1
        return super().parse_args(ctx, out)


def _kwargs(args: type, *examples: str) -> dict:
    return command_kwargs(cls=SurgeonCommand, declares=[args, ExternalData], examples=examples)


@dataclass
class ExternalData:
    """Where both surgeon commands read the model's external weights and how they save them:
    options both take, after their own (``bind(..., more=[(ExternalData, "", None)])``)."""

    external_data_dir: Optional[str] = declared(S.EXTERNAL_DATA_DIR)
    save_external_data: bool = switch("--save-external-data", help="Save weights in a separate file beside the "
                                      "output model (automatic for models over ~1.8 GB). May be followed by the file "
                                      "name (as --external-data-path).")
    external_data_path: Optional[str] = option("--external-data-path", metavar="PATH", help="File name for saved external weights, "
                                               "relative to the output's folder (default: OUTPUT.data). Implies "
                                               "--save-external-data.")
    external_data_threshold: str = option("--external-data-size-threshold", metavar="SIZE", default="1024", help="With external "
                                          "data, tensors smaller than this stay inside the model (bytes, or 4K, "
                                          "1M...).")


_MORE = [(ExternalData, "", None)]


def _save(model, output: str, data: ExternalData, base_dir: Optional[str]) -> None:
    from toolkit.core.meta import parse_size
    from toolkit.core.io.model import save_model

    external = True if (data.save_external_data or data.external_data_path) else None
    save_model(
        model,
        output,
        external_data=external,
        external_data_path=data.external_data_path,
        size_threshold=parse_size(data.external_data_threshold),
        external_base_dir=base_dir,
    )


def _check_data_file_clash(model_path: str, output: str, external_path: Optional[str], files) -> None:
    """Refuse to write the output's weights over the input's external data file, unless the
    output replaces the input model itself (then both are rewritten together)."""
    from toolkit.core.io.model import STDIO

    if not files or output == STDIO:
        return
    same_model = model_path != STDIO and os.path.realpath(model_path) == os.path.realpath(output)
    if same_model:
        return
    location = external_path or (os.path.basename(output) + ".data")
    target = os.path.realpath(os.path.join(os.path.dirname(os.path.abspath(output)), location))
    for path in files:
        if os.path.realpath(path) == target:
            raise UsageError(
                f"the output's external data file {location} is the input model's weights file; writing it "
                f"would break {model_path}: choose another --external-data-path"
            )


def _check_paths(model_path: str, output: str, external_path: Optional[str], external_data_dir: Optional[str]) -> None:
    """The one rule (toolkit.core.files.paths): -o and its data file are not files this command reads,
    except that -o may replace MODEL itself (its data file then goes with it)."""
    from toolkit.core.io.model import STDIO, data_file_path

    writes = []
    if output != STDIO:
        writes.append(("-o", output))
        if external_path:
            writes.append(("--external-data-path", data_file_path(output, external_path)))
    if paths.same_file(model_path, output):
        paths.check([], writes)
        paths.check_with_model(model_path, [], [], external_data_dir)
        inplace.lock_for_rewrite(model_path)  # one in-place rewrite of a model at a time
        return
    paths.check_with_model(model_path, [], writes, external_data_dir)


def _load(model_path: str, external_data_dir: Optional[str], output: str, external_path: Optional[str],
          fold_constants: bool = False):
    """(model, base_dir): big external weights are read later, only if the result keeps them."""
    from toolkit.surgeon.load import load_for_surgery

    _check_paths(model_path, output, external_path, external_data_dir)
    files: list = []
    loaded = load_for_surgery(model_path, external_data_dir, fold_constants=fold_constants, files=files)
    if inplace.is_locked(model_path):
        inplace.watch(model_path, files)  # its data files: re-checked before the rename
    _check_data_file_clash(model_path, output, external_path, files)
    return loaded


def _log(msg: str) -> None:
    if msg.startswith("warning: "):
        warn(msg[len("warning: "):])
    else:
        log(msg)


def _describe_out(output: str) -> str:
    return "stdout" if output == "-" else output


@dataclass
class ExtractArgs:
    """The options of ``surgeon extract``, each declared once."""

    model: str = declared(S.MODEL)
    output: str = declared(S.SURGEON_OUTPUT, required=True)
    inputs: List[str] = option("--inputs", metavar="INPUTS...", factory=list, help="Inputs of the subgraph as name:shape:dtype; shape and "
                               "dtype may be 'auto' (e.g. x:auto:auto, x:[1,3,224,224]:float32). Several after one "
                               "flag. Default: the model's inputs.")
    outputs: List[str] = option("--outputs", metavar="NAMES...", factory=list, help="Outputs of the subgraph as name:dtype (dtype may be "
                                "'auto', or left out). Several after one flag. Default: the model's outputs.")
    model_input_shapes: List[str] = declared(S.MODEL_INPUT_SHAPES, factory=list)
    force_fallback: bool = declared(S.FORCE_FALLBACK, default=False)


@app.command("extract", **_kwargs(
    ExtractArgs, "toolkit surgeon extract model.onnx --inputs x:auto:auto --outputs y:auto -o sub.onnx",
))
@bind(ExtractArgs, more=_MORE)
def extract_command(ctx: typer.Context, **params) -> None:
    """Cut the subgraph between --inputs and --outputs out of MODEL.

    'auto' shapes and dtypes come from ONNX shape inference, or from running
    ONNX-Runtime where that is not enough (always with --force-fallback-shape-inference).
    An unknown tensor name, or a cut that leaves a needed tensor without producer, is an
    error (exit 3); nothing is written then.
    """
    from toolkit.core.meta import parse_shape_specs, parse_size, parse_tensor_spec
    from toolkit.core.io.model import check_output_path
    from toolkit.core.shapes import top_tensor_names
    from toolkit.surgeon.extract import extract
    from toolkit.surgeon.plumbing import count_model_nodes
    from toolkit.surgeon.validate import check_model

    a, d = ExtractArgs(**values_for(ExtractArgs, params)), ExternalData(**values_for(ExternalData, params))
    check_output_path(a.output, binary=True)
    parse_size(d.external_data_threshold)  # a bad value is a usage error before any work
    shapes = parse_shape_specs(a.model_input_shapes) if a.model_input_shapes else None
    m, base_dir = _load(a.model, d.external_data_dir, a.output, d.external_data_path)
    names = top_tensor_names(m)
    in_specs = [parse_tensor_spec(s, known_names=names) for s in a.inputs] if a.inputs else None
    out_specs = [parse_tensor_spec(s, allow_shape=False, known_names=names) for s in a.outputs] if a.outputs else None
    result = extract(
        m,
        inputs=in_specs,
        outputs=out_specs,
        input_shapes=shapes,
        force_fallback=a.force_fallback,
        external_data_dir=base_dir or d.external_data_dir,
        log=_log,
    )
    check_model(result, m)
    n_before = count_model_nodes(m)
    del m
    _save(result, a.output, d, base_dir)
    _log(f"Extracted subgraph: nodes {n_before} -> {count_model_nodes(result)}; saved to {_describe_out(a.output)}")


@dataclass
class SanitizeArgs:
    """The options of ``surgeon sanitize``, each declared once."""

    model: str = declared(S.MODEL)
    output: str = declared(S.SURGEON_OUTPUT, required=True)
    fold_constants: bool = switch("--fold-constants", help="Fold constant subgraphs, repeating until nothing changes. "
                                  "Nodes that read a runtime value stay (x*1 too: see --remove-noops).")
    num_passes: Optional[int] = option("--num-passes", "--num-const-fold-passes", metavar="N",
                                       help="At most this many folding passes.")
    fold_size_threshold: Optional[str] = option("--fold-size-threshold", metavar="SIZE", help="Do not fold tensors bigger than this "
                                                "(bytes, or 16K, 4M, 1G): keep them computed at run time.")
    partitioning: str = option("--partitioning", metavar="PARTITIONING", default="auto", help="How to fold when some node cannot be: auto "
                               "(all at once, then part by part if that fails), none, basic, recursive.")
    no_fold_shapes: bool = switch("--no-fold-shapes",
                                  help="Do not fold Shape nodes (and Shape->Gather/Slice) on known dims.")
    override_input_shapes: List[str] = option("--override-input-shapes", "--override-inputs", metavar="NAME:SHAPE...", factory=list,
                                              help="Freeze input shapes, then re-infer every shape: name:[1,3,224,224] "
                                              "(several after one flag).")
    cleanup: bool = switch("--cleanup", help="Remove nodes and tensors that no output needs.")
    toposort: bool = switch("--toposort", help="Sort nodes topologically.")
    outputs: List[str] = option("--outputs", metavar="NAMES...", factory=list, help="Make these tensors the model's outputs (several after "
                                "one flag); 'mark all' marks every tensor a node computes.")
    no_per_pass_shape_inference: bool = switch("--no-per-pass-shape-inference",
                                               help="Infer shapes once, not again after each folding pass.")
    no_onnxruntime_shape_inference: bool = switch("--no-onnxruntime-shape-inference", help="Accepted for "
                                                  "compatibility: shapes come from ONNX shape inference already "
                                                  "(ONNX-Runtime runs only with --force-fallback-shape-inference).")
    force_fallback: bool = declared(S.FORCE_FALLBACK, default=False)
    remove_noops: bool = switch("--remove-noops", help="Remove nodes that pass their input through unchanged "
                                "(Identity, x*1, x+0, identity Transpose, same-type Cast, whole-axis Slice...). "
                                "--optimize does this too.")
    upper_bounds: List[str] = option("--set-unbounded-dds-upper-bound", metavar="[NAME:]N...", factory=list, help="Bound tensors that set a "
                                     "data-dependent output size (Range limits, Tile repeats...) with a Min: BOUND for "
                                     "all, TENSOR:BOUND for one (several after one flag). `toolkit inspect model "
                                     "--list-unbounded-dds` lists them.")
    optimize_graph: bool = switch("--optimize", help="After folding, remove pass-through nodes (as --remove-noops), "
                                  "apply ONNX-Runtime's basic-level graph optimizations (Conv+BatchNorm fusion, "
                                  "redundant node elimination...), then merge duplicate nodes and Slice chains and "
                                  "fold Add/BatchNorm into ConvTranspose; the model stays standard ONNX and never gets "
                                  "more nodes.")
    no_validate: bool = switch("--no-validate", help="Do not check the folded model on ONNX-Runtime (by default it "
                               "must load and give the input model's outputs on generated inputs, or folding is redone "
                               "with less).")


@app.command("sanitize", **_kwargs(
    SanitizeArgs,
    "toolkit surgeon sanitize model.onnx --fold-constants -o folded.onnx",
    "toolkit surgeon sanitize model.onnx --override-input-shapes x:[1,3,224,224] -o fixed.onnx",
))
@bind(SanitizeArgs, more=_MORE)
def sanitize_command(ctx: typer.Context, **params) -> None:
    """Simplify MODEL: fold constants, freeze input shapes, clean up, sort.

    Folded models are checked before they are written: they must load in ONNX-Runtime and
    give the input model's outputs on generated inputs. When a check fails, folding is
    redone with less (no If inlining, then nothing inside subgraphs, then without the
    nodes whose folded values are wrong), and one line says what was left unfolded.
    """
    from toolkit.surgeon.outputs import mark_outputs
    from toolkit.surgeon.plumbing import count_model_nodes
    from toolkit.surgeon.sanitize import sanitize

    a, d = SanitizeArgs(**values_for(SanitizeArgs, params)), ExternalData(**values_for(ExternalData, params))
    threshold, shapes, bounds = _sanitize_options(a, d)
    m, base_dir = _load(a.model, d.external_data_dir, a.output, d.external_data_path, fold_constants=a.fold_constants)
    if a.outputs:
        mark_outputs(m, a.outputs)
    if not any((a.fold_constants, shapes, a.cleanup, a.toposort, a.outputs, bounds, a.force_fallback,
                a.optimize_graph, a.remove_noops)):
        _log("nothing to do: no --fold-constants, --override-input-shapes, --cleanup, --remove-noops or --toposort; "
             "the model is written unchanged")

    data_dir = base_dir or d.external_data_dir
    t0 = time.perf_counter()  # the summary's time: folding and everything after it, not loading
    result, report = sanitize(
        m,
        fold_constants=a.fold_constants,
        num_passes=a.num_passes,
        fold_size_threshold=threshold,
        partitioning=a.partitioning,
        fold_shapes=not a.no_fold_shapes,
        input_shapes=shapes,
        cleanup=a.cleanup,
        toposort=a.toposort,
        remove_noops=a.remove_noops or a.optimize_graph,
        validate=not a.no_validate,
        per_pass_shape_inference=not a.no_per_pass_shape_inference,
        external_data_dir=data_dir,
        log=_log,
    )
    del m
    result = _after_folding(result, a, shapes, bounds, data_dir)
    report.nodes_after = count_model_nodes(result)
    _save(result, a.output, d, base_dir)
    n = len(report.passes)
    passes = f" in {n} folding pass{'es' if n != 1 else ''}" if n else ""
    _log(
        f"Sanitized: nodes {report.nodes_before} -> {report.nodes_after}{passes} ({time.perf_counter() - t0:.2f} s); "
        f"saved to {_describe_out(a.output)}"
    )


def _sanitize_options(a: SanitizeArgs, d: ExternalData):
    """Usage errors before the model is read; the parsed --fold-size-threshold,
    --override-input-shapes and --set-unbounded-dds-upper-bound (None when not given)."""
    from toolkit.core.io.model import check_output_path
    from toolkit.core.meta import parse_shape_specs, parse_size
    from toolkit.surgeon.outputs import parse_upper_bounds
    from toolkit.surgeon.sanitize import check_sanitize_options

    check_sanitize_options(a.partitioning, a.num_passes)
    check_output_path(a.output, binary=True)
    threshold = parse_size(a.fold_size_threshold) if a.fold_size_threshold is not None else None
    shapes = parse_shape_specs(a.override_input_shapes) if a.override_input_shapes else None
    parse_size(d.external_data_threshold)
    bounds = parse_upper_bounds(a.upper_bounds) if a.upper_bounds else None
    return threshold, shapes, bounds


def _after_folding(result, a: SanitizeArgs, shapes, bounds, data_dir: Optional[str]):
    """--optimize, --set-unbounded-dds-upper-bound and --force-fallback-shape-inference on the folded model."""
    from toolkit.surgeon.optimize import optimize
    from toolkit.surgeon.outputs import apply_fallback_shapes, set_unbounded_dds_upper_bounds

    if a.optimize_graph:
        result = optimize(result, validate=not a.no_validate, external_data_dir=data_dir, log=_log)
    if bounds:
        set_unbounded_dds_upper_bounds(result, bounds, log=_log)
    if a.force_fallback:
        apply_fallback_shapes(result, input_shapes=shapes, external_data_dir=data_dir, log=_log)
    return result

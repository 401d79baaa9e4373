"""Options -> a typed plan: every option parsed and every runner preflighted before any work.

Usage errors (exit 2) come first, then unwritable outputs (exit 3), then missing backends or
devices (exit 4): a bad command line costs nothing, and no data file is loaded in vain.
"""

from __future__ import annotations

import difflib
import os
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Optional, Tuple

from toolkit.core.compare.tolerances import Tolerances
from toolkit.core.errors import UsageError
from toolkit.core.inputs import parse_val_ranges
from toolkit.core.meta import parse_shape_specs
from toolkit.core.io.model import check_output_path, check_readable_file
from toolkit.core.shared_options import PER_NAME_FLAGS
from toolkit.run.diagnose import check_report_option
from toolkit.run.options import Reporter, RunOptions
from toolkit.run.registry import RunnerKind, get_kind, unused_options, with_values
from toolkit.run.specs import RunnerSpec, parse_runner_spec


@dataclass
class PlannedRunner:
    """One runner of the plan: its spec, kind, options (spec applied) and preflight result."""

    spec: RunnerSpec
    kind: RunnerKind
    opts: RunOptions
    config: Any = None
    label: Optional[str] = None  # set when the same spec runs more than once

    @property
    def name(self) -> Optional[str]:
        """The runner's name: the spec's text when it has options, else the backend's default;
        the second and later runs of one spec get a number (``onnxrt-runner-2``)."""
        if self.label:
            return self.label
        return self.spec.text if self.spec.options else None

    def make(self, reporter: Reporter):
        return self.kind.factory(self.opts, self.config, reporter, self.name)


@dataclass
class RunPlan:
    opts: RunOptions
    runners: List[PlannedRunner]
    tolerances: Optional[Tolerances] = None  # None when nothing is compared
    ranges: Any = None  # toolkit.core.inputs.ValueRanges
    shapes: Dict[str, tuple] = field(default_factory=dict)


def _script_path(script: Optional[str]) -> str:
    """The file of --data-loader-script (``FILE`` or ``FILE:FUNCTION``)."""
    if not script or os.path.exists(script):
        return script or ""
    return script.rsplit(":", 1)[0]


# The options that write a file, and the attribute of RunOptions holding each one's path.
_WRITES = (("--save-inputs", "save_inputs"), ("--save-outputs", "save_outputs"), ("--save-onnx", "save_onnx"),
           ("--save-report", "save_report"), ("--save-engine", "save_engine"))


def check_output_paths(opts: RunOptions) -> None:
    """--save-inputs/--save-outputs/--save-onnx/--save-report/--save-engine: distinct, writable,
    and none of them a file this run reads (the model and its external data included)."""
    from toolkit.core.files import paths

    if opts.save_inputs == "-" and opts.save_outputs == "-":
        raise UsageError("only one of --save-inputs and --save-outputs can write to stdout ('-')")
    paths.check_with_model(opts.model, _reads(opts), _writes(opts), opts.external_data_dir)
    for path in filter(None, (opts.save_inputs, opts.save_outputs, opts.save_onnx)):
        check_output_path(path)


def _reads(opts: RunOptions) -> List[Tuple[str, str]]:
    """The files the run reads besides the model, each with the option naming it."""
    reads = [("--load-inputs", p) for p in opts.load_inputs]
    reads += [("--load-outputs", p) for p in opts.load_outputs]
    return reads + [("--data-loader-script", _script_path(opts.data_loader_script))]


def _writes(opts: RunOptions) -> List[Tuple[str, str]]:
    """The files the run writes, each with the option naming it (--save-onnx's external data file too)."""
    writes = [(flag, getattr(opts, attr)) for flag, attr in _WRITES if getattr(opts, attr)]
    if opts.save_onnx and opts.save_onnx != "-":
        writes.append(("--save-onnx's external data file", opts.save_onnx + ".data"))
    return writes


def tolerances_of(opts: RunOptions) -> Optional[Tolerances]:
    """What the run compares with: ``opts.tolerances`` (the library's), else the comparison options
    combined; None when the run compares nothing (one result, no comparison option)."""
    if opts.tolerances is not None:
        return opts.tolerances
    if opts.asks_comparison() or len(opts.runners) + len(opts.load_outputs) > 1:
        return opts.combined()
    return None


# The per-output fields of a Tolerances and the command-line flag that sets each.
TOLERANCE_FLAGS = PER_NAME_FLAGS + (
    ("per_quantile", "--error-quantile"), ("per_topk", "--postprocess"), ("per_index_tolerance", "--index-tolerance"),
)


def require_known_names(tol: Tolerances, known: Iterable[str], flags=TOLERANCE_FLAGS, *,
                        tensors: bool = False) -> None:
    """UsageError for a per-output tolerance whose name no output has (``nosuch:1e-3``),
    naming the outputs there are; nothing to say when no output is known (nothing ran).
    ``flags``: (field of Tolerances, how the caller spells it); ``tensors``: ``known`` is every
    tensor of the model (a reduce compares intermediate tensors too), and the sentence says so."""
    names = sorted(set(known))
    if not names:
        return
    for attr, flag in flags:
        unknown = sorted(set(getattr(tol, attr)) - set(names))
        if unknown:
            raise _unknown_name(flag, unknown[0], names, tensors)


def _unknown_name(flag: str, name: str, names: List[str], tensors: bool) -> UsageError:
    """The error of ``flag`` naming ``name``, which none of ``names`` is: the closest name, and the names."""
    close = difflib.get_close_matches(name, names, n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    shown = ", ".join(names[:12]) + (f" and {len(names) - 12} more" if len(names) > 12 else "")
    what = ("no tensor of the model", "its tensors") if tensors else ("no output", "the outputs")
    return UsageError(f"{flag} names '{name}', which {what[0]} has{hint}; {what[1]} are: {shown}")


def share_onnx_outputs(opts: RunOptions, kinds: List[str]) -> RunOptions:
    """``--onnx-outputs`` (``--onnx-exclude-outputs``) chooses the ONNX model's tensors for OpenVINO
    too, which runs the same ONNX model, unless ``--openvino-outputs`` (``--openvino-exclude-outputs``)
    chooses its own: one ``--onnx-outputs mark all`` compares every tensor of both."""
    if "openvino" not in kinds or not (opts.onnx_outputs or opts.onnx_exclude_outputs):
        return opts
    kind = get_kind("openvino")
    own = opts.of("openvino")
    if own.outputs or own.exclude_outputs:
        return opts
    return with_values(opts, {kind.option("outputs"): list(opts.onnx_outputs),
                              kind.option("exclude_outputs"): list(opts.onnx_exclude_outputs)})


def make_plan(opts: RunOptions, reporter: Reporter) -> RunPlan:
    """Parse and check every option, preflight every runner (raises ToolkitError subclasses)."""
    specs = [parse_runner_spec(text) for text in opts.runners]
    opts = share_onnx_outputs(opts, [s.kind for s in specs])
    plan = RunPlan(opts, [], tolerances_of(opts), parse_val_ranges(opts.val_range), parse_shape_specs(opts.input_shapes))
    _check_options(opts)
    plan.runners = _preflight(specs, opts, reporter)  # fails now (before loading data) when a backend or device is missing
    for note in unused_options(opts, [s.kind for s in specs]):
        reporter.warn(note)
    _check_work(opts)
    return plan


def _check_options(opts: RunOptions) -> None:
    """Usage errors of the inputs options, unwritable outputs, a missing model, a bad --save-report."""
    _check_inputs_options(opts)
    check_output_paths(opts)
    if opts.model and opts.model != "-" and opts.runners:
        check_readable_file(opts.model)  # a missing model is said before any work starts
    check_report_option(opts)


def _check_inputs_options(opts: RunOptions) -> None:
    if opts.iterations is not None and opts.iterations < 0:
        raise UsageError("--iterations must be 0 or more (0 runs nothing)")
    if opts.data_loader_script and opts.load_inputs:
        raise UsageError("give --load-inputs or --data-loader-script, not both")


def _check_work(opts: RunOptions) -> None:
    """Usage errors of a run with nothing to do, or with inputs to save and no runner."""
    if not opts.runners and not opts.load_outputs:
        raise UsageError("nothing to run or compare; pass --onnxrt, or --load-outputs files to compare")
    if opts.save_inputs and not opts.runners:
        raise UsageError("--save-inputs needs a runner (e.g. --onnxrt)")


def _preflight(specs: List[RunnerSpec], opts: RunOptions, reporter: Reporter) -> List[PlannedRunner]:
    """The runners of ``specs``, each prepared in turn."""
    runners: List[PlannedRunner] = []
    seen: Counter = Counter()
    for spec in specs:
        runners.append(_planned(spec, opts, reporter, seen[spec.text]))
        seen[spec.text] += 1
    return runners


def _planned(spec, opts: RunOptions, reporter: Reporter, seen: int) -> PlannedRunner:
    """The runner of ``spec``, prepared (its preflight); ``seen``: runners of the same spec before
    it, which its label counts (``onnxrt-runner-2``)."""
    runner_opts = spec.apply(opts)
    kind = get_kind(spec.kind)
    planned = PlannedRunner(spec, kind, runner_opts, kind.prepare(runner_opts, reporter))
    if seen:
        planned.label = f"{spec.text}-{seen + 1}" if spec.options else f"{spec.text}-runner-{seen + 1}"
    return planned

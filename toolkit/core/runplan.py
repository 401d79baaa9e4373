"""``toolkit run`` as a library call: runners, iterations, data files, comparisons.

::

    from toolkit.core.runplan import RunOptions, execute
    report = execute(RunOptions("model.onnx", runners=["onnxrt"], load_outputs=["golden.json"]))
    report.passed, report.mismatched()

Order of work: parse every option (usage errors before any work) -> load data files ->
for each runner: activate, get its inputs (generated once, or taken from the loaded
feeds), run every iteration, deactivate -> save inputs/outputs -> ``--validate`` ->
compare consecutive result sets (live runners first, in order, then loaded files).

Progress and logs go through a :class:`Reporter` (the CLI renders them; the default
does nothing). Nothing here keeps global state, so it is safe in forked workers;
data files go through :func:`toolkit.core.datafiles.load_data` (cached per process).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from toolkit.core.errors import DependencyError, InputError, UsageError
from toolkit.core.meta import TensorMeta

RUNNER_KINDS = ("onnxrt", "trt")
TRT_MISSING = "TensorRT is not installed; install it with: pip install 'toolkit[trt]'"


@dataclass
class RunOptions:
    """Everything ``toolkit run`` can be asked to do (option lists as typed by the user)."""

    model: str
    runners: List[str] = field(default_factory=lambda: ["onnxrt"])
    providers: List[str] = field(default_factory=list)
    onnx_outputs: List[str] = field(default_factory=list)
    onnx_exclude_outputs: List[str] = field(default_factory=list)
    external_data_dir: Optional[str] = None
    ort_optimization: Optional[str] = None
    seed: Optional[int] = None
    val_range: List[str] = field(default_factory=list)
    input_shapes: List[str] = field(default_factory=list)
    iterations: Optional[int] = None
    load_inputs: List[str] = field(default_factory=list)
    save_inputs: Optional[str] = None
    load_outputs: List[str] = field(default_factory=list)
    save_outputs: Optional[str] = None
    atol: List[str] = field(default_factory=list)
    rtol: List[str] = field(default_factory=list)
    check_error_stat: List[str] = field(default_factory=list)
    validate: bool = False


class Reporter:
    """Receives progress while a run goes on. Every method may be overridden; all are no-ops."""

    def note(self, message: str) -> None:
        """A warning worth showing."""

    def info(self, message: str) -> None:
        """An informational line."""

    def runner_start(self, runner) -> None:
        pass

    def iterations_start(self, runner_name: str, total: int) -> None:
        pass

    def iteration(self, runner_name: str, index: int, feed: Mapping, outputs: Mapping, seconds: float) -> None:
        pass

    def runner_done(self, runner_name: str, times: Sequence[float]) -> None:
        pass

    def saved(self, what: str, path: str) -> None:
        pass


@dataclass
class ResultSet:
    """One runner's iterations, live or loaded from a file."""

    label: str
    iterations: List[Mapping]
    runtimes: List[float] = field(default_factory=list)
    runner_name: str = ""
    source: Optional[str] = None  # the file it was loaded from


@dataclass
class RunReport:
    results: List[ResultSet]  # live runs first, then loaded ones
    comparisons: List["PairComparison"]  # toolkit.core.compare
    problems: List["ValidationProblem"]
    inputs: List[Dict[str, object]]

    @property
    def passed(self) -> bool:
        return not self.problems and all(c.passed for c in self.comparisons)

    def mismatched(self) -> List[str]:
        names: Dict[str, None] = {}
        for c in self.comparisons:
            for n in c.mismatched():
                names.setdefault(n, None)
        for p in self.problems:
            names.setdefault(p.name, None)
        return list(names)


def make_runner(kind: str, opts: RunOptions):
    """A runner for ``kind`` (``onnxrt``; ``trt`` once TensorRT support lands)."""
    if kind == "onnxrt":
        from toolkit.backends.onnxrt import OnnxrtRunner

        return OnnxrtRunner(
            opts.model,
            providers=opts.providers,
            outputs=opts.onnx_outputs,
            exclude_outputs=opts.onnx_exclude_outputs,
            external_data_dir=opts.external_data_dir,
            graph_optimization=opts.ort_optimization,
        )
    if kind == "trt":
        import importlib.util

        if importlib.util.find_spec("tensorrt") is None:
            raise DependencyError(TRT_MISSING)
        raise DependencyError("the TensorRT runner is not available in this version of toolkit yet")
    raise UsageError(f"unknown runner '{kind}'; use one of: {', '.join(RUNNER_KINDS)}")


def _load_feeds(paths: Sequence[str]) -> Tuple[List[Mapping], List[Tuple[str, int]]]:
    """Concatenate the iterations of every inputs file; remember each one's (file, index)."""
    from toolkit.core.datafiles import load_inputs

    feeds: List[Mapping] = []
    where: List[Tuple[str, int]] = []
    for path in paths:
        data = load_inputs(path)
        if not data:
            raise InputError(f"{path}: holds no iterations")
        for k, feed in enumerate(data):
            feeds.append(feed)
            where.append((path, k))
    return feeds, where


def _load_result_sets(paths: Sequence[str]) -> List[ResultSet]:
    from toolkit.core.datafiles import load_outputs

    sets = []
    for path in paths:
        data = load_outputs(path)
        if not data.runs:
            raise InputError(f"{path}: holds no results")
        base = "<stdin>" if path == "-" else os.path.basename(path)
        for runner_name, iters in data.runs:
            sets.append(
                ResultSet(
                    f"{runner_name} (from {base})",
                    [it.outputs for it in iters],
                    [it.runtime for it in iters],
                    runner_name,
                    path,
                )
            )
    return sets


def _check_outputs_paths(opts: RunOptions) -> None:
    from toolkit.core.model import check_output_path

    if opts.save_inputs and opts.save_outputs and opts.save_inputs == opts.save_outputs and opts.save_inputs != "-":
        raise UsageError("--save-inputs and --save-outputs name the same file")
    if opts.save_inputs == "-" and opts.save_outputs == "-":
        raise UsageError("only one of --save-inputs and --save-outputs can write to stdout ('-')")
    for path in (opts.save_inputs, opts.save_outputs):
        if path:
            check_output_path(path)


def execute(opts: RunOptions, reporter: Optional[Reporter] = None) -> RunReport:
    """Run ``opts`` and return the report (raises ToolkitError subclasses for bad input)."""
    from toolkit.core.inputs import generate_inputs, parse_val_ranges, select_feed
    from toolkit.core.meta import parse_shape_specs

    rep = reporter or Reporter()
    # -- 1. options (usage errors before any work)
    for kind in opts.runners:
        if kind not in RUNNER_KINDS:
            raise UsageError(f"unknown runner '{kind}'; use one of: {', '.join(RUNNER_KINDS)}")
    tol = None
    if opts.atol or opts.rtol or opts.check_error_stat or len(opts.runners) + len(opts.load_outputs) > 1:
        from toolkit.core.compare import Tolerances  # only when something may be compared

        tol = Tolerances.parse(opts.atol, opts.rtol, opts.check_error_stat)
    ranges = parse_val_ranges(opts.val_range)
    shapes = parse_shape_specs(opts.input_shapes)
    if opts.iterations is not None and opts.iterations < 1:
        raise UsageError("--iterations must be at least 1")
    _check_outputs_paths(opts)
    if "trt" in opts.runners:
        make_runner("trt", opts)  # fails now (before loading data) when TensorRT is missing
    if not opts.runners and not opts.load_outputs:
        raise UsageError("nothing to run or compare; pass --onnxrt, or --load-outputs files to compare")
    if opts.save_inputs and not opts.runners:
        raise UsageError("--save-inputs needs a runner (e.g. --onnxrt)")

    # -- 2. data files
    loaded_feeds: Optional[List[Mapping]] = None
    where: List[Tuple[str, int]] = []
    if opts.load_inputs and opts.runners:
        loaded_feeds, where = _load_feeds(opts.load_inputs)
        if opts.iterations is not None and opts.iterations != len(loaded_feeds):
            rep.note(
                f"--iterations {opts.iterations} ignored: the loaded inputs hold {len(loaded_feeds)} iteration(s)"
            )
        if opts.val_range or opts.seed is not None or opts.input_shapes:
            rep.note("--seed, --val-range and --input-shapes are ignored when inputs are loaded")
    loaded_sets = _load_result_sets(opts.load_outputs) if opts.load_outputs else []

    # -- 3. runners
    live: List[ResultSet] = []
    used_feeds: Optional[List[Dict[str, object]]] = None
    for kind in opts.runners:
        runner = make_runner(kind, opts)
        rep.runner_start(runner)
        runner.activate()
        try:
            summary = runner.summary()
            if summary:
                rep.info(f"{runner.name} | {summary}")
            for note in getattr(runner, "notes", ()):
                rep.note(f"{runner.name}: {note}")
            metas: List[TensorMeta] = runner.input_metadata()
            if loaded_feeds is not None:
                feeds = [
                    select_feed(f, metas, source=w[0] if w[0] != "-" else "<stdin>", iteration=w[1])
                    for f, w in zip(loaded_feeds, where)
                ]
            elif used_feeds is None:
                feeds, notes = generate_inputs(
                    metas, iterations=opts.iterations or 1, seed=opts.seed, ranges=ranges, shapes=shapes
                )
                for n in notes:
                    rep.note(n)
            else:
                feeds = [
                    select_feed(f, metas, source="generated inputs", iteration=k) for k, f in enumerate(used_feeds)
                ]
            if used_feeds is None:
                used_feeds = feeds
            rep.iterations_start(runner.name, len(feeds))
            outs_list: List[Mapping] = []
            times: List[float] = []
            for k, feed in enumerate(feeds):
                outs = runner.infer(feed)
                secs = runner.last_inference_time
                outs_list.append(outs)
                times.append(secs)
                rep.iteration(runner.name, k, feed, outs, secs)
            rep.runner_done(runner.name, times)
            live.append(ResultSet(runner.name, outs_list, times, runner.name))
        finally:
            runner.deactivate()

    # -- 4. save
    if opts.save_inputs and used_feeds is not None:
        from toolkit.core.datafiles import save_inputs

        save_inputs(opts.save_inputs, used_feeds)
        rep.saved("inputs", opts.save_inputs)
    if opts.save_outputs:
        from toolkit.core.datafiles import IterationResult, RunResults, save_outputs

        if not live:
            rep.note("--save-outputs ignored: no runner ran")
        else:
            results = RunResults(
                [
                    (rs.label, [IterationResult(o, t, rs.label) for o, t in zip(rs.iterations, rs.runtimes)])
                    for rs in live
                ]
            )
            save_outputs(opts.save_outputs, results)
            rep.saved("outputs", opts.save_outputs)

    # -- 5. validate and compare
    all_sets = live + loaded_sets
    problems: list = []
    if opts.validate:
        from toolkit.core.compare import validate_outputs

        for rs in live:
            problems.extend(validate_outputs(rs.label, rs.iterations))
    comparisons: list = []
    if len(all_sets) > 1:
        from toolkit.core.compare import Tolerances, check_tolerance_names, compare_pair

        tol = tol or Tolerances()
    for a, b in zip(all_sets, all_sets[1:]):
        pair = compare_pair(a.label, a.iterations, b.label, b.iterations, tol)
        if pair.iterations and pair.compared == 0:
            names_a = list(a.iterations[0]) if a.iterations else []
            names_b = list(b.iterations[0]) if b.iterations else []
            raise InputError(
                f"nothing to compare between {a.label} and {b.label}: no output name in common "
                f"({_short(names_a)} vs {_short(names_b)})"
            )
        comparisons.append(pair)
    if comparisons:
        compared_names = {o.name for c in comparisons for it in c.iterations for o in it.outputs}
        for n in check_tolerance_names(tol, compared_names):
            rep.note(n)
    return RunReport(all_sets, comparisons, problems, used_feeds or [])


def _short(names: Sequence[str], n: int = 6) -> str:
    if not names:
        return "none"
    shown = ", ".join(names[:n])
    return shown + (f", ... ({len(names)} in all)" if len(names) > n else "")

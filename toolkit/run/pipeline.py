"""``toolkit run`` as a library call: a short pipeline of named steps.

::

    from toolkit.run import RunOptions, execute
    report = execute(RunOptions("model.onnx", runners=["onnxrt"], load_outputs=["golden.json"]))
    report.passed, report.mismatched()

1. :func:`~toolkit.run.plan.make_plan`: parse every option, preflight every runner (usage
   errors and missing backends before any work);
2. :func:`load_data_files`: the inputs to feed and the outputs files to compare against;
3. :func:`run_runner` for each runner in order: activate, then one iteration at a time
   (make or read the feed, infer, save, validate, compare with what came before), deactivate;
4. :func:`finish`: compare loaded files with each other, check tolerance names, report.

Memory stays flat in the number of iterations: a feed and its outputs live for one
iteration. Only what a later comparison needs is kept: a runner's outputs until the next
runner has been compared with them (with one live runner, nothing). Progress and logs go
through a :class:`~toolkit.run.options.Reporter`. Nothing here keeps global state, so it is
safe in forked workers; data files go through :func:`toolkit.core.io.datafiles.load_data`
(cached per process).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from typing import Any, Iterator, List, Mapping, Optional, Sequence, Tuple

from toolkit.core.compare import undefined
from toolkit.core.compare.arrays import PairComparison, compare_iteration, validate_outputs
from toolkit.core.io.datafiles import RunResults, inputs_writer, load_data, load_outputs, outputs_writer
from toolkit.core.io.datahead import first_feed_names
from toolkit.core.compare.tolerances import Tolerances, check_tolerance_names
from toolkit.core.io.dataloader import load_script_feeds, split_script_spec
from toolkit.core.errors import InputError, ToolkitError
from toolkit.core.graph.graphs import external_data_folder, fed_inputs, has_external_data
from toolkit.core.graph.layerwise import select_outputs, set_outputs
from toolkit.core.io.model import load_model, save_model
from toolkit.run import diagnose
from toolkit.run import qdq_table as qdq_rows
from toolkit.run.feeds import FeedSource, infer_explained, load_feeds
from toolkit.run.options import Reporter, RunOptions
from toolkit.run.plan import PlannedRunner, RunPlan, make_plan, require_known_names
from toolkit.run.results import ResultSet, RunReport


def execute(opts: RunOptions, reporter: Optional[Reporter] = None) -> RunReport:
    """Run ``opts`` and return the report (raises ToolkitError subclasses for bad input)."""
    rep = reporter or Reporter()
    plan = make_plan(opts, rep)
    with contextlib.ExitStack() as cleanup:
        if opts.fp_to_fp16 and plan.runners:
            converted = cleanup.enter_context(fp16_model(opts, rep))
            for planned in plan.runners:
                planned.opts = dataclasses.replace(planned.opts, model=converted, external_data_dir=None)
            opts = dataclasses.replace(opts, model=converted, external_data_dir=None)
        if opts.save_onnx:
            save_onnx(opts, rep)
        feeds, loaded_sets = load_data_files(plan, rep)
        stream = Streams(plan, loaded_sets)
        cleanup.callback(stream.qdq.close)  # (the Q/DQ table's own run of the model)
        with open_writers(plan, rep) as writers:
            for index, planned in enumerate(plan.runners):
                stream.live.append(run_runner(planned, index, feeds, writers, stream, rep))
    report_saved(plan, stream.live, rep)
    return finish(plan, stream, rep)


@contextlib.contextmanager
def fp16_model(opts: RunOptions, rep: Reporter) -> Iterator[str]:
    """--fp-to-fp16: the model converted to mixed fp16 (graph inputs and outputs keep their
    types), in a temporary file that lives as long as the run."""
    from toolkit.convert import fp16  # (a large module: loaded for --fp-to-fp16 only)

    model = load_model(opts.model, external_data_dir=opts.external_data_dir)
    result = fp16.convert(model, [], keep_io_types=True, inplace=True)
    del model
    folder = tempfile.mkdtemp(prefix="toolkit-fp16-")
    try:
        path = os.path.join(folder, "model_fp16.onnx")
        save_model(result.model, path)
        kept = len(result.kept)
        rep.info(f"Converted the model to fp16 for this run (--fp-to-fp16){f'; {kept} node(s) kept in fp32' if kept else ''}")
        del result
        yield path
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def save_onnx(opts: RunOptions, rep: Reporter) -> None:
    """--save-onnx: the ONNX model as ONNX-Runtime runs it (the outputs --onnx-outputs marks)."""
    model = load_model(opts.model, external_data_dir=opts.external_data_dir, load_external_data=False)
    if opts.onnx_outputs or opts.onnx_exclude_outputs:
        set_outputs(model, select_outputs(model, opts.onnx_outputs, opts.onnx_exclude_outputs))
    base = None
    if has_external_data(model):
        base = external_data_folder(opts.model, opts.external_data_dir)
    assert opts.save_onnx
    save_model(model, opts.save_onnx, external_base_dir=base)
    rep.saved("the ONNX model that runs", opts.save_onnx)


# ---------------------------------------------------------------------------- 2. data files


def _model_input_names(model: str) -> List[str]:
    """The graph input names of an ONNX model file (weights not loaded); [] if it cannot say."""
    if not model or model == "-":
        return []
    try:
        graph = load_model(model, load_external_data=False).graph
        return [i.name for i in fed_inputs(graph)]
    except ToolkitError:  # an engine, or a model the runner will report on
        return []


def _refuse_inputs_files(paths: Sequence[str], model: str) -> None:
    """An inputs file given to --load-outputs holds this model's inputs, which no output can match:
    say so before anything runs."""
    names: Optional[List[str]] = None
    for path in paths:
        held = set(_first_names(path))
        if not held:
            continue
        if names is None:
            names = _model_input_names(model)
        if names and held <= set(names):
            raise InputError(
                f"{path} is an inputs file (it holds the model's inputs {', '.join(sorted(held))}), not outputs; "
                "give it to --load-inputs, and compare against an outputs file saved with --save-outputs"
            )


def _first_names(path: str) -> List[str]:
    """The tensor names of the first iteration of data file ``path`` ([] for an outputs file or none)."""
    head = first_feed_names(path)  # (an inputs file is known from its first iteration: JSON or .npz)
    if head is not None:
        return head
    data = load_data(path)
    if isinstance(data, RunResults) or not data:
        return []
    head = list(data[0])
    if head:
        data[0][head[0]]  # a file that cannot be read at all says so first
    return head


def _load_result_sets(paths: Sequence[str], model: str = "") -> List[ResultSet]:
    _refuse_inputs_files(paths, model)
    sets = []
    for path in paths:
        data = load_outputs(path)
        if not data.runs:
            raise InputError(f"{path}: holds no results")
        base = "<stdin>" if path == "-" else os.path.basename(path)
        for runner_name, iters in data.runs:
            label = f"{runner_name} (from {base})"
            sets.append(ResultSet(label, [it.outputs for it in iters], [it.runtime for it in iters], runner_name, path))
    return sets


def load_data_files(plan: RunPlan, rep: Reporter) -> Tuple[FeedSource, List[ResultSet]]:
    """The feeds every runner gets (loaded or to generate) and the loaded result sets."""
    opts = plan.opts
    loaded, where = _loaded_feeds(opts)
    if loaded is not None:
        _warn_ignored(opts, len(loaded), rep)
    feeds = FeedSource(
        loaded, where, iterations=opts.iterations, seed=opts.seed, ranges=plan.ranges, shapes=plan.shapes, notes=rep.warn
    )
    for planned in plan.runners:  # backends that take the inputs early (TensorRT --int8 calibration)
        if planned.kind.connect is not None:
            for name, shape in planned.kind.connect(planned.config, feeds).items():
                feeds.preferred.setdefault(name, shape)
    sets = _load_result_sets(opts.load_outputs, opts.model) if opts.load_outputs else []
    return feeds, sets


def _loaded_feeds(opts) -> Tuple[Optional[Sequence[Mapping]], List[Tuple[str, int]]]:
    """The feeds a data loader script or --load-inputs gives (None: generate them), and where each
    came from (file, iteration). Nothing is loaded when no runner runs. (The plan refuses the two
    sources together.)"""
    if not opts.runners:
        return None, []
    if opts.load_inputs:
        return load_feeds(opts.load_inputs)
    if opts.data_loader_script:
        loaded = load_script_feeds(opts.data_loader_script, opts.data_loader_func_name)
        script = split_script_spec(opts.data_loader_script, opts.data_loader_func_name)[0]
        return loaded, [(script, k) for k in range(len(loaded))]
    return None, []


def _warn_ignored(opts, count: int, rep: Reporter) -> None:
    """The options that generate inputs, given with loaded ones: ignored, said once."""
    if opts.iterations is not None and opts.iterations != count:
        rep.warn(f"--iterations {opts.iterations} ignored: the loaded inputs hold {count} iteration(s)")
    if opts.val_range or opts.seed is not None or opts.input_shapes:
        rep.warn("--seed, --val-range and --input-shapes are ignored when inputs are loaded")


# ---------------------------------------------------------------------------- 3. streaming


@dataclass
class Writers:
    inputs: Any = None  # toolkit.core.io.datafiles.InputsWriter
    outputs: Any = None  # toolkit.core.io.datafiles.OutputsWriter

    def begin_runner(self, name: str) -> None:
        if self.outputs is not None:
            self.outputs.begin_runner(name)

    def add(self, index: int, feed: Mapping, outs: Mapping, secs: float, name: str) -> None:
        """Write one iteration: its inputs (the first runner's only) and runner ``name``'s outputs."""
        if index == 0 and self.inputs is not None:
            self.inputs.add(feed)
        if self.outputs is not None:
            self.outputs.add(outs, secs, name)


@contextlib.contextmanager
def open_writers(plan: RunPlan, rep: Reporter) -> Iterator[Writers]:
    """The --save-inputs/--save-outputs files, written as the run goes (complete only on success)."""
    opts = plan.opts
    with contextlib.ExitStack() as stack:
        writers = Writers()
        if opts.save_inputs and plan.runners:
            writers.inputs = stack.enter_context(inputs_writer(opts.save_inputs))
        if opts.save_outputs:
            if plan.runners:
                writers.outputs = stack.enter_context(outputs_writer(opts.save_outputs))
            else:
                rep.warn("--save-outputs ignored: no runner ran")
        yield writers


@dataclass
class Streams:
    """Result sets in comparison order (live runners, then loaded files) and what is compared so far."""

    plan: RunPlan
    loaded: List[ResultSet]
    live: List[ResultSet] = field(default_factory=list)
    pairs: dict = field(default_factory=dict)  # index of the first set of a pair -> [IterationComparison]
    problems: list = field(default_factory=list)
    kept: List[Mapping] = field(default_factory=list)  # the previous live runner's outputs
    errors: dict = field(default_factory=dict)  # pair index -> tensor errors, for the diagnosis (toolkit.run.diagnose)
    qdq: qdq_rows.QdqTables = field(default_factory=qdq_rows.QdqTables)  # Q/DQ pairs' local/propagated error
    names: set = field(default_factory=set)  # the output names of the live runners' first iterations
    _casts: Optional[dict] = None  # the model's float-to-int Casts (see toolkit.core.compare.undefined)

    def casts(self) -> dict:
        """The model's float-to-int Casts (read once, without its weights, when first needed)."""
        if self._casts is None:
            self._casts = {}
            model = self.plan.opts.model
            if model and model != "-" and os.path.isfile(model):
                try:
                    self._casts = undefined.float_to_int_casts(load_model(model, load_external_data=False))
                except ToolkitError:  # (InputError) not an ONNX file (an engine): nothing to skip
                    self._casts = {}
        return self._casts

    def compare(self, pair: int, k: int, outs_a: Mapping, outs_b: Mapping, tol, feed: Optional[Mapping] = None) -> None:
        """Compare iteration ``k`` of pair ``pair`` (its input set ``feed``, None for two loaded files);
        gather its tensor errors when a diagnosis may need them."""

        it = compare_iteration(k, outs_a, outs_b, tol)
        if undefined.may_skip(it):  # (a failing integer output: perhaps a Cast the spec leaves undefined)
            # the reference decides: a loaded file (B), else the earlier runner (A)
            ref = "b" if pair + 1 >= len(self.plan.runners) else "a"
            it = undefined.skip_undefined(it, self.casts(), outs_a, outs_b, tol, reference=ref)
        self.pairs.setdefault(pair, []).append(it)
        if diagnose.wanted(self.plan.opts, it):
            diagnose.collect(self.errors, pair, it, outs_a, outs_b)
            if self.qdq.pairs is None:  # (the first iteration gathered: the tables read the model)
                self.qdq.model_path, self.qdq.external_data_dir = self.plan.opts.model, self.plan.opts.external_data_dir
            qdq_rows.collect(self.qdq, pair, k, outs_a, outs_b, feed)

    def on_iteration(self, index: int, label: str, k: int, outs: Mapping, keep: List[Mapping], feed: Mapping) -> None:
        """Validate and compare iteration ``k`` of live runner ``index`` (its input set ``feed``); keep it
        if a later runner needs it."""
        if self.plan.opts.validate:
            self._validate(label, k, outs)
        tol = self.plan.tolerances or Tolerances()
        last = index == len(self.plan.runners) - 1
        if k == 0:
            self._first_names(outs, tol, last)
        if index > 0 and k < len(self.kept):
            self.compare(index - 1, k, self.kept[k], outs, tol, feed)
        if not last:
            keep.append(outs)
        elif self.loaded and k < self.loaded[0].count:
            self.compare(index, k, outs, self.loaded[0].iterations[k], tol, feed)


    def _validate(self, label: str, k: int, outs: Mapping) -> None:
        """--validate: NaN/inf in iteration ``k``'s outputs."""
        for problem in validate_outputs(label, [outs]):
            problem.iteration = k
            self.problems.append(problem)

    def _first_names(self, outs: Mapping, tol: Tolerances, last: bool) -> None:
        """A first iteration's output names; after the last runner's, every name a tolerance gives
        is checked (a bad name says so now, see _check_names)."""
        self.names.update(outs)
        if last and not tol.names_checked:
            require_known_names(tol, self.names.union(*(s.names for s in self.loaded)))


def _start(runner, rep: Reporter) -> None:
    summary = runner.summary()
    if summary:
        rep.info(f"{runner.name} | {summary}")
    for note in runner.notes:
        rep.warn(f"{runner.name}: {note}")


def run_runner(
    planned: PlannedRunner, index: int, feeds: FeedSource, writers: Writers, stream: Streams, rep: Reporter
) -> ResultSet:
    """Activate one runner and stream every iteration through it (see :class:`Streams`)."""
    runner = planned.make(rep)
    rep.runner_start(runner)
    runner.activate()
    try:
        _start(runner, rep)
        result = ResultSet(runner.name, [], [], runner.name, precision=runner.precision)
        writers.begin_runner(runner.name)
        rep.iterations_start(runner.name, feeds.count())
        keep: List[Mapping] = []
        metas = runner.input_metadata()
        for k, feed in enumerate(feeds.feeds(metas, runner.preferred_shapes(), runner.preferred_values())):
            outs = infer_explained(runner, feed, feeds)
            secs = runner.last_inference_time
            rep.iteration(runner.name, k, feed, outs, secs)
            writers.add(index, feed, outs, secs, runner.name)
            result.add(k, outs, secs, keep=planned.opts.keep_outputs)
            stream.on_iteration(index, runner.name, k, outs, keep, feed)
            del feed, outs  # before the next feed is made: one iteration in memory at a time
        result.count = len(result.runtimes)
        stream.kept = keep
        rep.runner_done(runner.name, result.runtimes)
        return result
    finally:
        runner.deactivate()


def report_saved(plan: RunPlan, live: List[ResultSet], rep: Reporter) -> None:
    if plan.opts.save_inputs and live:
        rep.saved("inputs", plan.opts.save_inputs)
    if plan.opts.save_outputs and live:
        rep.saved("outputs", plan.opts.save_outputs)


# ---------------------------------------------------------------------------- 4. comparisons


def _short(names: Sequence[str], n: int = 6) -> str:
    if not names:
        return "none"
    shown = ", ".join(names[:n])
    return shown + (f", ... ({len(names)} in all)" if len(names) > n else "")


def _pair(a: ResultSet, b: ResultSet, its: list):
    notes = []
    if a.count != b.count:
        notes.append(
            f"{a.label} has {a.count} iteration(s) and {b.label} has {b.count}; comparing the first {min(a.count, b.count)}"
        )
    pair = PairComparison(a.label, b.label, its, notes)
    if pair.iterations and pair.compared == 0:
        raise InputError(
            f"nothing to compare between {a.label} and {b.label}: no output name in common "
            f"({_short(a.names)} vs {_short(b.names)})"
        )
    return pair


def _check_names(tol: Tolerances, sets: List[ResultSet], comparisons: list, rep: Reporter) -> None:
    """A per-output tolerance naming no output: a usage error (exit 2); naming an output of one
    set only: a warning. Neither where the names were checked against a whole model of which
    this model is a part (``tol.names_checked``: a check of ``debug reduce --compare``)."""
    if tol.names_checked:
        return
    require_known_names(tol, [n for s in sets for n in s.names])
    if comparisons:
        for note in check_tolerance_names(tol, _compared_names(comparisons)):  # (an output of one set only)
            rep.warn(note)


def _compared_names(comparisons: list) -> set:
    """The names of the outputs the comparisons compared (in any iteration)."""
    return {o.name for c in comparisons for it in c.iterations for o in it.outputs}


def _add_qdq_tables(plan: RunPlan, stream: Streams, report: RunReport) -> None:
    """The Q/DQ pairs' tables into the report (and into --save-report's file, unless node data)."""
    report.qdq_tables = qdq_rows.finish(stream.qdq, len(report.comparisons))
    from toolkit.run.node_data import is_node_data_path  # (loaded with the statistics, not for every run)

    if plan.opts.save_report and not is_node_data_path(plan.opts.save_report):  # (node data: left as it is)
        from toolkit.quant.table import add_to_report

        add_to_report(plan.opts.save_report, report.qdq_tables)


def _comparisons(sets: List[ResultSet], stream: Streams, tol: Tolerances) -> List:
    """The comparison of every two consecutive result sets (two loaded files compared here)."""
    comparisons = []
    for i, (a, b) in enumerate(zip(sets, sets[1:])):
        if i not in stream.pairs:  # not streamed: two loaded files
            for k, (x, y) in enumerate(zip(a.iterations, b.iterations)):
                stream.compare(i, k, x, y, tol)
        comparisons.append(_pair(a, b, stream.pairs.get(i, [])))
    return comparisons


def finish(plan: RunPlan, stream: Streams, rep: Reporter) -> RunReport:
    """The comparisons of consecutive result sets, in order (loaded files compared here)."""

    sets = stream.live + stream.loaded
    tol = plan.tolerances or Tolerances()
    comparisons = _comparisons(sets, stream, tol)
    _check_names(tol, sets, comparisons, rep)
    report = RunReport(sets, comparisons, stream.problems)
    precisions = {s.label: s.precision for s in sets if s.precision}
    report.diagnoses = diagnose.diagnoses(plan.opts, comparisons, stream.errors, precisions)
    if stream.qdq.left_out:
        rep.warn(stream.qdq.left_out)
    if stream.qdq.rows:  # (the Q/DQ statistics load onnx: only when a diagnosis gathered pairs)
        _add_qdq_tables(plan, stream, report)
    if plan.opts.save_report:
        rep.saved("report", plan.opts.save_report)
    return report

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

from toolkit.core.errors import InputError, UsageError
from toolkit.core.meta import TensorMeta

RUNNER_KINDS = ("onnxrt", "trt")


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
    # TensorRT (used when "trt" is among the runners)
    trt_outputs: List[str] = field(default_factory=list)
    trt_exclude_outputs: List[str] = field(default_factory=list)
    fp16: bool = False
    bf16: bool = False
    int8: bool = False
    tf32: bool = False
    pool_limit: List[str] = field(default_factory=list)
    # one list of "name:shape" per occurrence of the flag; occurrence k is profile k
    trt_min_shapes: List[List[str]] = field(default_factory=list)
    trt_opt_shapes: List[List[str]] = field(default_factory=list)
    trt_max_shapes: List[List[str]] = field(default_factory=list)
    save_engine: Optional[str] = None
    calibration_cache: Optional[str] = None
    model_type: Optional[str] = None  # --model-type: "engine" loads MODEL as a TensorRT engine whatever its suffix

    def trt_options_given(self) -> List[str]:
        """The TensorRT-only options that were set (to warn when --trt is not)."""
        named = {
            "--trt-outputs": self.trt_outputs,
            "--trt-exclude-outputs": self.trt_exclude_outputs,
            "--fp16": self.fp16,
            "--bf16": self.bf16,
            "--int8": self.int8,
            "--tf32": self.tf32,
            "--pool-limit": self.pool_limit,
            "--trt-min-shapes": self.trt_min_shapes,
            "--trt-opt-shapes": self.trt_opt_shapes,
            "--trt-max-shapes": self.trt_max_shapes,
            "--save-engine": self.save_engine,
            "--calibration-cache": self.calibration_cache,
        }
        return [k for k, v in named.items() if v]


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


def trt_config(opts: RunOptions):
    """The :class:`toolkit.backends.trt.TrtConfig` for ``opts`` (UsageError for malformed values)."""
    from toolkit.backends.trt import TrtConfig, parse_pool_limits, parse_profile_groups
    from toolkit.core.meta import parse_shape_specs

    return TrtConfig(
        fp16=opts.fp16,
        bf16=opts.bf16,
        int8=opts.int8,
        tf32=opts.tf32,
        pool_limits=parse_pool_limits(opts.pool_limit),
        profiles=parse_profile_groups(opts.trt_min_shapes, opts.trt_opt_shapes, opts.trt_max_shapes),
        fallback_shapes=parse_shape_specs(opts.input_shapes),
        save_engine=opts.save_engine,
        calibration_cache=opts.calibration_cache,
        mark_outputs=list(opts.trt_outputs) or None,
        exclude_outputs=list(opts.trt_exclude_outputs),
        external_data_dir=opts.external_data_dir,
    )


def model_is_engine(opts: RunOptions) -> bool:
    """MODEL is a TensorRT engine: by --model-type, else by its suffix (.engine/.plan/.trt)."""
    from toolkit.backends.trt import is_engine_path

    kind = (opts.model_type or "").lower()
    return kind == "engine" if kind in ("engine", "onnx") else is_engine_path(opts.model)


def check_trt(opts: RunOptions):
    """Fail early (before any data is loaded) when the TensorRT run cannot happen.

    Usage errors first (exit 2), then a missing TensorRT / cuda-python / GPU (exit 4).
    Returns the parsed TrtConfig.
    """
    from toolkit.backends.trt import check_available, check_config
    from toolkit.core.model import check_output_path

    engine = model_is_engine(opts)
    if engine and "onnxrt" in opts.runners:
        raise UsageError(
            f"{opts.model} is a TensorRT engine, which ONNX-Runtime cannot run; "
            "give the ONNX model to compare --onnxrt with --trt"
        )
    if opts.model == "-" and len(opts.runners) > 1:
        raise UsageError("a model read from stdin ('-') can feed only one runner; save it to a file to compare runners")
    config = trt_config(opts)
    if opts.save_engine:
        if opts.save_engine == "-":
            raise UsageError("--save-engine needs a file name, not stdout ('-')")
        if opts.save_engine in (opts.save_inputs, opts.save_outputs):
            raise UsageError("--save-engine names the same file as --save-inputs/--save-outputs")
        if os.path.abspath(opts.save_engine) == os.path.abspath(opts.model):
            raise UsageError("--save-engine would overwrite MODEL")
        check_output_path(opts.save_engine)
    if opts.calibration_cache:
        if not opts.int8:
            raise UsageError("--calibration-cache is only used with --int8")
        if not os.path.isfile(opts.calibration_cache):
            check_output_path(opts.calibration_cache)
    trt, _cudart = check_available()
    if not engine:
        check_config(trt, config)
    return config


def make_runner(kind: str, opts: RunOptions, *, config=None, reporter: Optional["Reporter"] = None):
    """A runner for ``kind`` (``onnxrt`` or ``trt``)."""
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
        from toolkit.backends.trt import TrtRunner

        on_message = None
        if reporter is not None:

            def on_message(severity: str, text: str) -> None:
                reporter.info(f"[TensorRT] {severity}: {' '.join(text.split())}")

        return TrtRunner(
            opts.model,
            config if config is not None else trt_config(opts),
            on_message=on_message,
            engine_file=model_is_engine(opts),
        )
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
    readers = [("MODEL", opts.model)]
    readers += [("--load-inputs", p) for p in opts.load_inputs]
    readers += [("--load-outputs", p) for p in opts.load_outputs]
    for flag, path in (("--save-inputs", opts.save_inputs), ("--save-outputs", opts.save_outputs)):
        if not path or path == "-":
            continue
        for what, src in readers:
            if src and src != "-" and _same_file(path, src):
                raise UsageError(
                    f"{flag} {path} would overwrite {what} {src}, which this run reads; choose another file name"
                )
    for path in (opts.save_inputs, opts.save_outputs):
        if path:
            check_output_path(path)


def _same_file(a: str, b: str) -> bool:
    """Whether paths ``a`` and ``b`` name one file (same real path, or hard links to one inode)."""
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


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
    if opts.ort_optimization:
        from toolkit.backends.onnxrt import check_optimization_level

        check_optimization_level(opts.ort_optimization)
    _check_outputs_paths(opts)
    trt_cfg = None
    if "trt" in opts.runners:
        trt_cfg = check_trt(opts)  # fails now (before loading data) when TensorRT or a GPU is missing
    elif opts.trt_options_given():
        rep.note(f"{', '.join(opts.trt_options_given())} ignored without --trt")
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
    # The first runner's inputs (generated, or selected from the loaded files) are fed to
    # every runner; TensorRT may ask for them early, to calibrate --int8 while it builds.
    state: Dict[str, Optional[List[Dict[str, object]]]] = {"used": None}
    trt_opt: Dict[str, tuple] = {}
    if trt_cfg is not None and trt_cfg.profiles:
        trt_opt = {name: mid for name, (_lo, mid, _hi) in trt_cfg.profiles[0].items()}

    def feeds_for(
        metas: Sequence[TensorMeta],
        preferred: Optional[Mapping[str, tuple]] = None,
        values: Optional[Mapping[str, object]] = None,
    ):
        if loaded_feeds is not None:
            feeds = [
                select_feed(f, metas, source=w[0] if w[0] != "-" else "<stdin>", iteration=w[1])
                for f, w in zip(loaded_feeds, where)
            ]
        elif state["used"] is None:
            gen_shapes = dict(shapes)
            names = {m.name for m in metas}
            for extra in (preferred or {}, trt_opt):  # a TensorRT profile's opt shapes, for dynamic inputs
                for name, shp in extra.items():
                    if name in names and name not in gen_shapes and name not in (values or {}):
                        gen_shapes[name] = shp
            feeds, notes = generate_inputs(
                metas, iterations=opts.iterations or 1, seed=opts.seed, ranges=ranges, shapes=gen_shapes
            )
            for n in notes:
                rep.note(n)
            for feed in feeds:  # shape-tensor inputs get valid shapes (a TensorRT profile's opt values)
                for name, value in (values or {}).items():
                    if name in feed and name not in ranges.per_input:
                        feed[name] = value.copy()
        else:
            feeds = [
                select_feed(f, metas, source="generated inputs", iteration=k) for k, f in enumerate(state["used"])
            ]
        if state["used"] is None:
            state["used"] = feeds
        return feeds

    if trt_cfg is not None:
        trt_cfg.sample_feeds = loaded_feeds
        trt_cfg.calibration_data = feeds_for

    live: List[ResultSet] = []
    for kind in opts.runners:
        runner = make_runner(kind, opts, config=trt_cfg, reporter=rep)
        rep.runner_start(runner)
        runner.activate()
        try:
            summary = runner.summary()
            if summary:
                rep.info(f"{runner.name} | {summary}")
            for note in getattr(runner, "notes", ()):
                rep.note(f"{runner.name}: {note}")
            metas: List[TensorMeta] = runner.input_metadata()
            preferred = runner.preferred_shapes() if hasattr(runner, "preferred_shapes") else None
            values = runner.preferred_values() if hasattr(runner, "preferred_values") else None
            feeds = feeds_for(metas, preferred, values)
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
    used_feeds = state["used"]

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

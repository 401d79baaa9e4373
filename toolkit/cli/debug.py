"""``toolkit debug`` commands: ``reduce`` (shrink a failing model to a minimal failing subgraph).

Thin layer: options -> :class:`toolkit.reduce.session.ReduceConfig` -> ``Reducer.run`` ->
render. Everything it prints is a log, so it goes to stderr: one line per iteration
(``Iteration 3 | 37 nodes | FAIL | 0.05 s | ...``), a progress bar on a terminal, the
check's captured output when asked for, and a summary.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any, Dict, List, Optional

import typer

from toolkit.core.text import escape_controls
from toolkit.cli.app import worker_entry
from toolkit.cli.app_settings import SUBAPP_SETTINGS
from toolkit.cli.options import ToolkitCommand, bind, command_kwargs, values_for
from toolkit.cli.output import interrupted_by, log, plural, result, state, warn
from toolkit.core.declare import option, shown_as, switch
from toolkit.core.errors import ExitCode, ToolkitError, UsageError
from toolkit.core.files.scratch import temp_folder
from toolkit.core.shared_options import ClusterOptions, DataLoaderOptions, ToleranceOptions
from toolkit.reduce.config import DEFAULT_REPLAY, ReduceConfig

app = typer.Typer(
    help="Debug failing models: reduce them to minimal failing subgraphs; find the nodes that must stay fp32.",
    **SUBAPP_SETTINGS,
)

_REDUCE_HELP = """Reduce a failing model to a minimal subgraph that still fails.

Each iteration writes a subgraph to the iteration artifact (polygraphy_debug.onnx) and runs
the --check command on it (or asks you, without --check). The full model is checked first;
-o gets the smallest subgraph the check failed on, --min-good the closest one it passed on.

Without --mode, one run bisects and then verifies that dropping any end node makes the
subgraph pass (1-minimal). --mode=bisect only bisects; --mode=linear drops one node at a time.

Without --check, the full model is taken to fail (you know it does) and you are asked about
each smaller subgraph.

Each check is classified: pass, fail, timeout (counted as a failure) or broken (the check
failed on its own: a toolkit check exiting 2, 3, 4 or 70, a command that cannot start, a
traceback or usage error from its argument parsing). A check broken on the full model stops
the run; later, a broken check counts as a pass and is reported.

Exit codes: 0 reduced, or the full model passes the check (nothing written, with a warning);
2 usage error; 3 bad input, or the check command itself fails on the full model (4 when it
lacks a dependency or program; 3 too when the input ends while asking for a verdict); 130
interrupted (Ctrl-C; the smallest failing model so far is written to -o and the verdicts to
the replay file, as they are at the end of input).

--json prints a summary object on stdout (see docs/debug-reduce.md).

Example (a simulated failure):

  toolkit debug reduce model.onnx -o reduced.onnx --fail-regex "Op: Mul" \\
      --check toolkit inspect model polygraphy_debug.onnx --mode=basic
"""


_CHECK_GIVEN = "toolkit.reduce.check_given"


class ReduceCommand(ToolkitCommand):
    """Notes whether --check was given at all (an empty --check is a usage error, not interactive)."""

    def parse_args(self, ctx, args):
        for tok in args:
            if tok == "--":
                break
            if tok == "--check" or tok.startswith("--check="):
                ctx.meta[_CHECK_GIVEN] = True
                break
        return super().parse_args(ctx, args)


def summary_json(outcome, cfg) -> dict:
    """The --json summary (schema in docs/debug-reduce.md)."""
    return {
        "status": outcome.status,
        "model": cfg.model,
        "nodes_before": outcome.nodes_before,
        "nodes_after": outcome.nodes_after,
        "result_nodes": outcome.final_nodes,
        "one_minimal": outcome.one_minimal,
        "checks": outcome.checks,
        "remembered": outcome.remembered,
        "broken": outcome.broken,
        "other_failures": outcome.other_failures,
        "signature": outcome.signature,
        "first_alone": outcome.first_alone,
        "timeouts": outcome.timeouts,
        "seconds": round(outcome.seconds, 3),
        "phases": outcome.phases,
        "runner": outcome.runner,
        "evidence": _evidence_json(outcome),
        "artifacts": _artifacts_json(outcome, cfg),
        "stopped_by": outcome.stopped_by,
    }


def _evidence_json(outcome) -> dict:
    """The summary's evidence: the errors of the full and the reduced model, the noise warning."""
    return {
        "full_model": outcome.full_evidence.to_json() if outcome.full_evidence is not None else None,
        "reduced": outcome.reduced_evidence.to_json() if outcome.reduced_evidence is not None else None,
        "noise_warning": outcome.noise,
    }


def _artifacts_json(outcome, cfg) -> dict:
    """The summary's files: those written (None for one not written)."""
    return {
        "output": cfg.output if outcome.output_written else None,
        "min_good": cfg.min_good if outcome.min_good_written else None,
        "min_good_nodes": outcome.min_good_nodes,
        "replay": outcome.replay_path or (cfg.save_replay if outcome.status != "passed" else None),
        "iter_artifact": cfg.iter_artifact if not cfg.remove_intermediate else None,
    }


def _summary(outcome, cfg) -> int:
    stats = (
        f"{plural(outcome.checks, 'check')} run, {outcome.remembered} answered from memory, "
        f"{outcome.seconds:.2f} s"
    )
    _counted_otherwise(outcome)
    if outcome.status == "passed":
        warn(
            f"the full model passes the check ({stats}), so there is nothing to reduce; "
            f"{cfg.output} was not written"
        )
        return int(ExitCode.OK)
    if outcome.status == "interrupted" and outcome.stopped_by == "eof":
        return _end_of_input(outcome, cfg, stats)
    if outcome.status == "interrupted":
        return _interrupted(outcome, cfg, stats)
    _summary_reduced(outcome, cfg, stats)
    return int(ExitCode.OK)


def _counted_otherwise(outcome) -> None:
    """The warnings about checks counted as passes (broken, other failures) or as failures (timeouts)."""
    own = outcome.broken - outcome.other_failures
    if own:
        warn(
            f"{plural(own, 'check')} failed on {'its' if own == 1 else 'their'} own (broken: "
            "usage error, bad input or missing program) and counted as passes, so the result may keep nodes it "
            "does not need; see the warnings above, and make the check work on every subgraph (e.g. give it "
            "layerwise --load-inputs and --onnx-outputs mark all golden values)"
        )
    if outcome.other_failures:
        warn(
            f"{plural(outcome.other_failures, 'subgraph')} failed otherwise than the full model (other failures: "
            "not the failure being reduced, so counted as passes; the result may keep nodes it does not need). "
            "The iteration lines say how each failed; --artifacts keeps them, --any-failure reduces on any failure"
        )
    if outcome.timeouts:
        log(f"{plural(outcome.timeouts, 'check')} timed out (--check-timeout) and counted as a failure")


def _interrupted(outcome, cfg, stats: str) -> int:
    """Ctrl-C (or a signal): what was written so far, and how to resume; exit 130."""
    state.interrupt_reported = True
    why = "I" + interrupted_by()[1:]
    if outcome.output_written:
        log(
            f"{why}: the smallest failing model so far ({plural(outcome.nodes_after, 'node')}) "
            f"was written to {cfg.output} ({stats})."
        )
    else:
        log(f"{why} before any failing model was found; {cfg.output} was not written ({stats}).")
    if outcome.replay_path:
        log(f"Verdicts saved to {outcome.replay_path}; resume with --load-debug-replay {outcome.replay_path}")
    return int(ExitCode.INTERRUPTED)


def _end_of_input(outcome, cfg, stats: str) -> int:
    """The answers ran out (stdin ended) while asking for a verdict: exit 3, one error line."""
    if outcome.output_written:
        kept = f"the smallest failing model so far ({plural(outcome.nodes_after, 'node')}) was written to {cfg.output}"
    else:
        kept = f"no failing model was found yet, so {cfg.output} was not written"
    resume = f"; resume with --load-debug-replay {outcome.replay_path}" if outcome.replay_path else ""
    result(
        f"error: end of input while asking whether a subgraph passes ({stats}): {kept}{resume}; answer every question, "
        "or give --check COMMAND to decide without asking"
    )
    return int(ExitCode.BAD_INPUT)


def _summary_reduced(outcome, cfg, stats: str) -> None:
    log(f"Reduced {outcome.nodes_before} -> {plural(outcome.nodes_after, 'node')}: {stats}.")
    shown = outcome.final_nodes[:20]
    for desc in shown:
        log(f"  {escape_controls(desc)}")  # (one line per node, whatever its name holds)
    if len(outcome.final_nodes) > len(shown):
        log(f"  ... and {len(outcome.final_nodes) - len(shown)} more")
    if outcome.one_minimal and outcome.nodes_after > 1:
        log("1-minimal: dropping any node at either end makes it pass (each drop checked).")
    if outcome.first_alone:
        log(f"note: {outcome.first_alone}")
    if outcome.body_nodes:
        log(
            f"note: the failure is inside this node's bodies ({plural(outcome.body_nodes, 'node')}); debug reduce "
            "cuts the top graph only. An If is replaced by its taken branch when its condition is a constant of "
            "the model, or is known for the data (--compare, or --load-inputs); not with --no-inline-branches"
        )
    _written(outcome, cfg)


def _written(outcome, cfg) -> None:
    """The files written and the evidence of the full and the reduced model."""
    if outcome.output_written:
        log(f"Wrote the reduced model to {cfg.output}")
    _evidence_lines(outcome)
    if outcome.noise:
        warn(outcome.noise)
    if cfg.min_good and outcome.min_good_written:
        log(f"Wrote the closest passing model ({plural(outcome.min_good_nodes, 'node')}) to {cfg.min_good}")
    if cfg.save_replay:
        log(f"Verdicts saved to {cfg.save_replay} (reuse them with --load-debug-replay {cfg.save_replay})")


def _evidence_lines(outcome) -> None:
    """The largest error of the full and of the reduced model, where known."""
    for label, evidence in (("Full model", outcome.full_evidence), ("Reduced model", outcome.reduced_evidence)):
        if evidence is not None and evidence.worst is not None:
            log(f"{label}: {evidence.describe()}")


def _script_inputs(spec: str, func_name: Optional[str]) -> str:
    """Run a --data-loader-script and save its feeds to a temporary .npz removed at exit."""

    from toolkit.core.io.datafiles import save_inputs
    from toolkit.core.io.dataloader import load_script_feeds

    feeds = load_script_feeds(spec, func_name)
    folder = temp_folder("toolkit-loader-")
    path = os.path.join(folder, "data_loader_inputs.npz")
    save_inputs(path, feeds)
    return path


def _cluster_usage(cfg: ReduceConfig, a: "ReduceArgs") -> None:
    """Usage errors of --cluster and its options, before anything runs."""

    if a.cluster is None:
        if a.gpus_per_check is not None or a.cpus_per_check is not None:
            raise UsageError("--gpus-per-check and --cpus-per-check need --cluster ray")
        return
    if a.compare is not None:
        raise UsageError("--cluster runs --check commands; --compare runs in this process (use --check toolkit run ...)")
    from toolkit.reduce.cluster import reduce_usage

    reduce_usage(a.cluster, check=cfg.check, devices=",".join(cfg.devices) or None, iter_info=bool(cfg.iter_info))


def _open_cluster(cfg: ReduceConfig, a: "ReduceArgs"):
    """``--cluster``: the Ray cluster the checks run on (None without it). Connected first,
    before the model is read, so that Ray starts its worker processes meanwhile."""
    if a.cluster is None:
        return None
    from toolkit.core.io.model import check_readable_data, check_readable_file
    from toolkit.reduce.cluster import open_for_reduce

    check_readable_file(cfg.model)  # a missing file is exit 3 before Ray starts or connects
    for path in cfg.load_inputs:
        check_readable_data(path)  # (a per-iteration folder too)

    return open_for_reduce(
        a.cluster, check=list(cfg.check or ()), iter_artifact=cfg.iter_artifact, check_timeout=cfg.check_timeout,
        jobs=a.jobs, gpus=a.gpus_per_check, cpus=a.cpus_per_check, log=log,
    )


def _reduce(cfg: ReduceConfig, a: "ReduceArgs", cluster=None):
    """Run the reduction of ``cfg`` (with ``--compare``/``--all-faults`` when ``a`` asks, on a Ray
    ``cluster`` when given): (outcome, reducer, compare runner or None)."""
    from toolkit.reduce.session import Reducer

    runner, reducer_cls, reducer_kw = _compare_reducer(cfg, a, a.compare) if a.compare is not None else (None, Reducer, {})
    from toolkit.cli.search_reporters import ReduceReporter

    reporter = ReduceReporter(a.show_output, a.hide_fail_output)
    # The question of interactive mode goes to stdout (as a prompt does), unless stdout carries --json.
    prompt_stream = sys.stderr if a.json_summary else sys.stdout
    try:
        reducer_kw.update(_runner_keywords(runner, cluster, cfg.iter_artifact))
        reducer = reducer_cls(cfg, reporter, prompt_stream=prompt_stream, **reducer_kw)
        if cluster is not None:
            cluster.bind(lambda: reducer.index.data_files() if reducer.index is not None else [])
        outcome = reducer.run()
    finally:
        reporter.stop()
    if runner is not None:
        _compare_warnings(outcome, runner, cfg)
    return outcome, reducer, runner


def _runner_keywords(runner, cluster, iter_artifact: str) -> Dict[str, Any]:
    """The reducer's check runner and the factory of its workers' runners: the cluster's, else the
    --compare runner's, else the reducer's own (runner None)."""
    if cluster is not None:
        return {"runner": cluster.runner(0, iter_artifact), "runner_factory": cluster.runner}
    if runner is not None:
        return {"runner": runner, "runner_factory": lambda _k, artifact, env: runner.sibling(artifact, env)}
    return {"runner": None}


def _compare_reducer(cfg: ReduceConfig, a: "ReduceArgs", compare: List[str]):
    """--compare: its runner (``cfg.check`` becomes its command), the reducer class (--all-faults
    goes on after the first fault) and that class's keywords."""
    from toolkit.cli.reduce_compare import make_compare_runner
    from toolkit.reduce.faults import CompareReducer

    runner = make_compare_runner(
        cfg.model, cfg.iter_artifact, compare, reference_model=a.reference_model,
        tolerances=a.combined(),
        load_inputs=list(cfg.load_inputs), seed=cfg.seed, val_range=list(cfg.val_range),
        input_shapes=dict(cfg.input_shapes), external_data_dir=cfg.external_data_dir,
        timeout=cfg.check_timeout, tensors=a.compare_tensors or "outputs",
    )
    cfg.check = runner.check_argv
    if cfg.given_reference_model:  # (--json names the reference model given, not its inlined rewrite)
        runner.info["reference_model"] = cfg.given_reference_model
    if not a.all_faults:  # (--all-faults without --compare is a usage error, checked before)
        return runner, CompareReducer, {}
    from toolkit.reduce.accuracy import describe_faults, rest_is_noise
    from toolkit.reduce.faults import AllFaultsReducer

    reducer_kw: Dict[str, Any] = {
        "describe_faults": lambda red, faults: describe_faults(runner, red, faults),
        "judge_rest": lambda red, allowed: rest_is_noise(runner, red, allowed),
    }
    return runner, AllFaultsReducer, reducer_kw


def _compare_warnings(outcome, runner, cfg) -> None:
    """The rounding warning of a --compare result (its storage's, or the step's on the written model)."""
    _storage_warning(outcome, runner, cfg)
    if not outcome.noise and outcome.output_written and outcome.reduced_evidence:
        outcome.noise = _step_warning(outcome, cfg.output)


def _storage_warning(outcome, runner, cfg) -> None:
    """The rounding warning of a --compare result, named as its runner's storage (fp16, bf16)."""
    from toolkit.reduce.evidence import noise_warning, storage_rounding_warning
    from toolkit.run.registry import get_kind
    from toolkit.run.specs import parse_runner_spec

    spec = parse_runner_spec(runner.opts.test)
    precision = next(iter(get_kind(spec.kind).reduced(spec.options)), None)
    if precision is None and spec.kind == "openvino":  # (the device may pick bf16 itself)
        from toolkit.backends.openvino import runs_reduced

        precision = runs_reduced(spec.options)
    storage = storage_rounding_warning(outcome.reduced_evidence, precision, outcome.reduced_scale,
                                       some_passed=outcome.passing > 0)
    if storage or (precision and outcome.noise):  # (rounding named as the storage's, not the kernels')
        outcome.noise = storage or noise_warning(outcome.full_evidence, outcome.reduced_evidence, cfg.check, precision)


def _step_warning(outcome, output: str) -> "str | None":
    """:func:`toolkit.reduce.evidence.step_warning` on the reduced model written to ``output``."""
    from toolkit.core.io.model import load_model
    from toolkit.reduce.evidence import step_warning

    try:
        model = load_model(output, load_external_data=False)
    except ToolkitError:  # (an unreadable file: InputError) a note only; the result stands without it
        return None
    return step_warning(outcome.reduced_evidence, model)


def _inline_branches(cfg: ReduceConfig, a: "ReduceArgs"):
    """Replace the top-level Ifs of the model (and of --reference-model) by their taken branches:
    those with a constant condition always, the others with concrete data (--compare, or
    --load-inputs); ``cfg`` and ``a`` then name the inlined models."""

    from toolkit.reduce.accuracy import CompareOptions
    from toolkit.reduce.branches import inline_for_reduce

    if cfg.model == "-":
        return None  # a model read from stdin is read once, by the reduce itself
    with_data = a.compare is not None or bool(cfg.load_inputs)
    opts = CompareOptions(
        reference_model=a.reference_model if a.compare is not None else None,
        load_inputs=list(cfg.load_inputs),
        seed=cfg.seed,
        val_range=list(cfg.val_range),
        input_shapes=dict(cfg.input_shapes),
        external_data_dir=cfg.external_data_dir,
    )
    folder = temp_folder("toolkit-branches-")
    inlined = inline_for_reduce(cfg.model, opts, folder, log, with_data=with_data)
    if inlined is not None:
        _use_inlined(cfg, a, inlined, opts.reference_model)
    return inlined


def _use_inlined(cfg: ReduceConfig, a: "ReduceArgs", inlined, reference_model: Optional[str]) -> None:
    """``cfg`` and ``a`` name the models with their Ifs inlined (``reference_model``: the one --compare runs)."""
    cfg.model = inlined.model
    if reference_model:
        a.reference_model = inlined.reference_model
    if not (reference_model and inlined.reference_model == reference_model):
        # the rewritten models carry their weights; a reference model left as it is still reads from there
        cfg.external_data_dir = None


def inlined_note(inlined) -> str:
    """The result log's reminder that inlined branches tie the result to the given inputs."""
    mine = [f"{d.node}: {d.branch}" for d in inlined.decisions if d.model == "model" and not d.constant]
    taken = ", ".join(mine[:4]) + (f" and {len(mine) - 4} more" if len(mine) > 4 else "")
    return (
        f"note: the reduced model is only valid for inputs that take the same If branches ({taken}); "
        "--no-inline-branches keeps each If whole"
    )


def _given(inlined, name: str) -> Dict[str, Any]:
    """The config's fields naming what was given where the reduce runs on rewrites of it (If
    branches inlined, ``inlined``): how logs name the model (given as ``name``) and the files a
    replay is bound to."""
    if inlined is None:
        return {"label": None, "given_files": (), "given_reference_model": None}  # (the model's own)
    return {
        "label": f"{name} (If branches inlined: {inlined.model})",
        "given_files": list(inlined.given_files),
        "given_reference_model": inlined.given_reference_model,
    }


def _complete(cfg: ReduceConfig, a: "ReduceArgs", inlined=None, name: str = "") -> None:
    """Fill in what the command line does not set directly (``inlined``, ``name``: see :func:`_given`)."""
    cfg.worker = worker_entry()
    cfg.save_replay = cfg.save_replay or os.path.join(os.path.dirname(cfg.iter_artifact), DEFAULT_REPLAY)
    cfg.jobs = a.jobs if a.jobs is not None else 1
    for key, value in _given(inlined, name).items():
        setattr(cfg, key, value)


@shown_as(
    cluster=dict(after="jobs"), gpus_per_check=dict(after="cluster"), cpus_per_check=dict(after="gpus_per_check"),
    atol=dict(after="reference_model"), rtol=dict(after="atol"), check_error_stat=dict(after="rtol"),
    data_loader_script=dict(after="load_inputs"), data_loader_func_name=dict(after="data_loader_script"),
)
@dataclass
class ReduceArgs(ToleranceOptions, ClusterOptions, DataLoaderOptions):
    """The options of ``debug reduce`` that its library config does not take (the command binds
    :class:`toolkit.reduce.config.ReduceConfig`, which declares the others): what decides a
    verdict (made a ``FailureRule``), what is printed, the built-in comparison, a cluster."""

    fail_regex: List[str] = option(
        "--fail-regex", metavar="REGEX", factory=list, after="min_good",
        help="Count a check as failed only when one of these regular expressions matches its stdout or stderr.",
    )
    fail_code: List[int] = option("--fail-code", "--fail-returncode", metavar="CODE", factory=list, after="fail_regex",
                                  help="Exit codes of the check that count as failures.")
    ignore_fail_code: List[int] = option(
        "--ignore-fail-code", "--ignore-fail-returncode", metavar="CODE", factory=list, after="fail_code",
        help="Exit codes of the check that count as passes.",
    )
    show_output: bool = switch("--show-output", after="check_timeout",
                               help="Show the check's output for passing iterations too.")
    hide_fail_output: bool = switch("--hide-fail-output", after="show_output",
                                    help="Do not show the check's output for failing iterations.")
    json_summary: bool = switch("--json", after="load_replay",
                                help="Print a summary as JSON on stdout (result, checks, phases, evidence, files).")
    no_inline_branches: bool = switch(
        "--no-inline-branches", after="reduce_outputs",
        help="Keep each top-level If whole, even when its condition is a constant or is known for the inputs "
        "(--compare, --load-inputs); by default it is replaced by its taken branch.",
    )
    jobs: Optional[int] = option(
        "--jobs", "-j", metavar="N", after="no_inline_branches",
        help="Checks run at once. Each round checks JOBS split points (k-ary search); each worker has its own "
        "iteration artifact (worker k: <artifact>.worker<k>/, its path replaced in the check command) and "
        "TOOLKIT_WORKER=k in its environment. Same result as --jobs 1 for a check that always answers the "
        "same. With --cluster: the most checks at once (default: what fits on the cluster).",
    )
    compare: Optional[List[str]] = option(
        "--compare", metavar="[REF] TEST", complete="runner-spec", after="devices",
        help="The built-in accuracy check instead of --check: the reference runner (default onnxrt) and the runner"
        " under test, as runner specs (onnxrt, trt, trt:fp16, onnxrt:opt=disable, ...). The reference "
        "computes every tensor once; each subgraph runs on the runner under test, fed the reference's values,"
        " and its outputs are compared with them.",
    )
    compare_tensors: Optional[str] = option(
        "--compare-tensors", metavar="outputs|all", complete=("outputs", "all"), after="compare",
        help="With --compare: what a subgraph is judged on: its outputs (default), or all of its tensors that the "
        "reference has (a subgraph fails when any of them is out of tolerance, so a fault is found even where the "
        "model's outputs hide it, e.g. behind a saturating Sigmoid).",
    )
    reference_model: Optional[str] = option(
        "--reference-model", metavar="PATH", after="compare_tensors",
        help="With --compare: the model the reference runs (default MODEL), e.g. the original of an optimized, "
        "quantized or converted MODEL; tensors are matched by name.",
    )
    all_faults: bool = switch(
        "--all-faults", after="check_error_stat",
        help="With --compare: after a minimal failing subgraph is found, replace its outputs by reference values "
        "and go on with the rest of the model until it passes; each fault is written to OUT with a numbered "
        "suffix (reduced_1.onnx, ...).",
    )


@app.command("reduce", **command_kwargs(_REDUCE_HELP, cls=ReduceCommand, declares=[ReduceConfig, ReduceArgs], examples=(
    "toolkit debug reduce model.onnx -o reduced.onnx --check toolkit run polygraphy_debug.onnx --onnxrt",
    "toolkit debug reduce model.onnx -o reduced.onnx --mode=bisect --load-inputs layerwise_inputs.json "
    "--check toolkit run polygraphy_debug.onnx --onnxrt --load-inputs layerwise_inputs.json "
    "--load-outputs layerwise_golden.json",
)))
@bind(ReduceConfig, more=[(ReduceArgs, "", None)])
def reduce_command(ctx: typer.Context, **params) -> None:
    _reduce_command(ctx, ReduceConfig(**values_for(ReduceConfig, params)), ReduceArgs(**values_for(ReduceArgs, params)))


def _reduce_command(ctx: typer.Context, cfg: ReduceConfig, a: ReduceArgs) -> None:
    from toolkit.reduce.verdict import FailureRule

    _usage(ctx, cfg, a)
    _check_compare(cfg, a)
    cfg.rule = FailureRule(a.fail_regex, a.fail_code, a.ignore_fail_code)
    _inputs_files(cfg, a)
    model = cfg.model
    if model == "-" and a.compare is not None:
        from toolkit.core.io.model import spool_stdin

        cfg.model = spool_stdin()  # the reference and every check read the model again
    _cluster_usage(cfg, a)
    outcome, reducer, runner, inlined = _reduce_where_asked(cfg, a, model)
    cfg.model = model
    code = _summary(outcome, cfg)
    if _input_dependent(inlined) and outcome.output_written:
        log(inlined_note(inlined))
    _report_outcome(outcome, cfg, a, (reducer, runner, inlined))
    raise typer.Exit(code)


def _inputs_files(cfg: ReduceConfig, a: ReduceArgs) -> None:
    """--data-loader-script's feeds and --load-inputs '-' (stdin), each saved once as an inputs file that the
    reduction and every check read like --load-inputs."""
    if a.data_loader_script:
        cfg.load_inputs = cfg.load_inputs + [_script_inputs(a.data_loader_script, a.data_loader_func_name)]
    if "-" in cfg.load_inputs:
        _spool_stdin_inputs(cfg)


def _spool_stdin_inputs(cfg: ReduceConfig) -> None:
    """--load-inputs '-': stdin saved to a file, read in its place."""
    from toolkit.core.io.model import spool_stdin

    if cfg.model == "-":
        raise UsageError("the model and --load-inputs cannot both be read from stdin ('-'): give one as a file")
    cfg.load_inputs = [spool_stdin(data_file=True) if p == "-" else p for p in cfg.load_inputs]


def _report_outcome(outcome, cfg: ReduceConfig, a: ReduceArgs, ran) -> None:
    """--compare's report and the --json summary (``ran``: the reducer, the compare runner or None, the
    inlined branches or None)."""
    reducer, runner, inlined = ran
    summary = _summary_with_branches(outcome, cfg, inlined) if a.json_summary else {}
    if runner is not None:
        from toolkit.cli.reduce_compare import report_compare

        report_compare(runner, reducer, summary, passed=outcome.status == "passed")
    if a.json_summary:
        import json  # (--json only)

        sys.stdout.write(json.dumps(summary, indent=1) + "\n")
        sys.stdout.flush()


def _usage(ctx: typer.Context, cfg: ReduceConfig, a: ReduceArgs) -> None:
    """Usage errors (and the --fail-regex warning) before anything runs."""
    if not cfg.shape_inference and cfg.force_fallback:
        raise UsageError("--no-shape-inference and --force-fallback-shape-inference cannot be used together")
    if a.show_output and a.hide_fail_output:
        raise UsageError("--show-output and --hide-fail-output cannot be used together")
    if ctx.meta.get(_CHECK_GIVEN) and not cfg.check:
        raise UsageError("--check needs a command after it, e.g. --check toolkit inspect model polygraphy_debug.onnx")
    if cfg.check is None and a.fail_regex:
        warn("--fail-regex has no effect without --check")


def _check_compare(cfg: ReduceConfig, a: ReduceArgs) -> None:
    """The --compare options checked, and the files it reads, before anything runs."""
    from toolkit.cli.reduce_compare import check_options, preflight_compare  # loaded when it runs, not for --help

    check_options(
        a.compare,
        cfg.check,
        all_faults=a.all_faults or bool(a.compare_tensors),
        reference_model=a.reference_model,
        tolerances_given=a.tolerances_given(),
    )
    preflight_compare(cfg.model, a.compare, a.reference_model, cfg.load_inputs)


def _reduce_where_asked(cfg: ReduceConfig, a: ReduceArgs, model: str):
    """Inline the If branches and run the reduction, on the Ray cluster when --cluster asks
    (closed after): (outcome, reducer, compare runner or None, inlined branches or None)."""
    ray_cluster = _open_cluster(cfg, a)
    try:
        inlined = None if a.no_inline_branches else _inline_branches(cfg, a)
        _complete(cfg, a, inlined, model)
        if ray_cluster is not None:
            cfg.jobs = ray_cluster.jobs
        outcome, reducer, runner = _reduce(cfg, a, ray_cluster)
    finally:
        if ray_cluster is not None:
            ray_cluster.close()
    return outcome, reducer, runner, inlined


def _input_dependent(inlined) -> bool:
    """Whether an If was inlined by the data's condition (the result holds for such inputs only)."""
    return inlined is not None and inlined.input_dependent


def _summary_with_branches(outcome, cfg, inlined) -> dict:
    """:func:`summary_json` with the If branches inlined and the inputs the result is valid for."""
    summary = summary_json(outcome, cfg)
    summary["inlined_branches"] = [d.to_json() for d in inlined.decisions] if inlined is not None else []
    summary["valid_for"] = "inputs that take the same If branches" if _input_dependent(inlined) else "any input"
    return summary


# `debug precision` lives in its own module
from toolkit.cli.precision import register as _register_precision  # noqa: E402

_register_precision(app)

from toolkit.cli.llm import register as _register_llm  # noqa: E402

_register_llm(app)

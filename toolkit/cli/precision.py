"""``toolkit debug precision``: the fewest nodes to keep in fp32 so the fp16 model passes.

Thin layer: options -> :class:`toolkit.precision.search.PrecisionConfig` -> search -> render.
Logs (one line per check, a summary) go to stderr; the node names found go to stdout, one
per line (or a JSON object with ``--json``), ready for ``convert --keep-fp32``.
"""

# (no `from __future__ import annotations`: Typer would have to eval every annotation string)

import dataclasses
import re
from dataclasses import dataclass
from typing import List, Optional

import typer

from toolkit.cli.options import bind, command_kwargs, values_for
from toolkit.cli.output import echo, interrupted, log, warn
from toolkit.core import shared_options as S
from toolkit.core.declare import declarations, option, shown_as, switch
from toolkit.core.errors import ExitCode, InputError, UsageError
from toolkit.core.shared_options import ToleranceOptions
from toolkit.precision.config import PrecisionConfig, QdqConfig, search_tolerances

_HELP = f"""Find a minimal set of nodes to keep in fp32 so that the fp16 model passes the comparison.

The reference runner runs the float32 model once; each check runs the model with a set of
nodes kept in fp32 (the rest fp16) and compares. While a check shows an overflow (a tensor
infinite where the reference is finite), the node producing the first one is kept in fp32;
then debug reduce's engine checks that moving any node found back to fp16 fails (1-minimal).
When no overflow explains the failure, its default search (bisect, QuickXplain) runs over the
nodes. -o gets the mixed-precision model (fp16 with the nodes found in fp32), ready for a
strongly typed TensorRT build. The node names go to stdout, one per line.

With --compare onnxrt onnxrt:fp16 (the default) each check emulates fp16 storage on the
CPU: every tensor an fp16 model stores is rounded to fp16 (see docs/precision.md).
--compare onnxrt onnxrt:bf16 (or trt:bf16) searches a mixed bf16 model the same way.
Tolerances default to {S.ATOL_FLAG} 1e-2 {S.RTOL_FLAG} 1e-2 here (fp16 keeps 11 significant bits, bf16 8:
loosen them for bf16).

No node is kept in fp32 for rounding alone: a check whose outputs are off by no more than
fp16 (bf16) storage rounds through the graph's depth fails, labelled "(fp16 rounding)", and the
search goes on as if it had passed (docs/noise.md); when the result fails that way, the
verdict is a failure (status "rounding", exit 1) and the log says which {S.ATOL_FLAG} would pass.

On a quantized model (QDQ), it finds the fewest Q/DQ pairs to take back to float instead (the
tensor skips Q and DQ): reference --reference-model FLOAT_MODEL, or the model with every pair in
float; --compare defaults to onnxrt onnxrt; -o gets the model with those pairs in float; the log
says why each pair costs accuracy (clipping, saturation, a coarse scale) and whether the scale its
observed range gives passes (docs/quantization.md).

Exit codes: 0 found (or nothing needs fp32); 1 the comparison fails even with every node in fp32, or
what remains fails by fp16 (bf16) rounding alone; 2 usage error; 3 bad input; 130 interrupted (the smallest passing set found so far
is printed and written to -o).

Example:

  toolkit debug precision model.onnx -o mixed.onnx {S.ATOL_FLAG} 1e-2 {S.RTOL_FLAG} 1e-2
"""


def _summary_json(outcome, cfg, code: int) -> dict:
    """``--json``: the outcome for scripts."""
    return {
        "status": outcome.status,
        "keep_fp32": outcome.kept,
        "also_fp32": {**{n: "--keep-fp32" for n in outcome.user_kept}, **outcome.auto_kept},
        "searched_nodes": outcome.candidates,
        "checks": outcome.checks,
        "broken_checks": outcome.broken,
        "remembered": outcome.remembered,
        "seconds": round(outcome.seconds, 3),
        "precision": outcome.precision,
        "error_all_fp16": outcome.error_fp16,
        "error_result": outcome.error_result,
        "one_minimal": outcome.one_minimal,
        "passing_atol": outcome.passing_atol,
        "noise_bound": outcome.noise_bound,
        "shapes_guessed": outcome.shapes_guessed,
        "cost_bound": outcome.cost_bound,
        "output": cfg.output if outcome.output_written else None,
        "exit_code": code,
    }


def _none_needed(outcome, stats: str, model: str) -> int:
    """The line for a model that passes with no node in fp32 (no verdict on inputs at size 1), or
    that computes nothing in float32."""
    if outcome.status == "nothing-to-search" and (outcome.auto_kept or outcome.user_kept):
        log(f"Nothing to search: every node of {model} that computes in float32 stays fp32 anyway "
            f"({len(outcome.auto_kept) + len(outcome.user_kept)} node(s): --json lists them with the reasons), so "
            f"no other node can need fp32 for {outcome.precision}; nothing was written")
    elif outcome.status == "nothing-to-search":
        log(f"Nothing to search: {model} computes no float32 tensor (its float work is in double or integers), "
            f"so no node needs fp32 for {outcome.precision}; nothing was written")
    elif outcome.shapes_guessed:
        warn(
            f"the {outcome.precision} model passes as it is on inputs whose dynamic dims were set to 1 "
            f"({outcome.error_fp16}; {stats}); that is not a check of the shapes the model will meet: give them "
            "with --input-shapes (or real data with --load-inputs)"
        )
    else:
        log(f"The {outcome.precision} model passes as it is ({outcome.error_fp16}); no node needs fp32 ({stats}).")
    return int(ExitCode.OK)


def _summary(outcome, cfg, json_out: bool, emit_options: bool = False) -> int:
    from toolkit.precision import search as S

    stats = f"{outcome.checks} check(s) run, {outcome.remembered} more answered from memory, {outcome.seconds:.2f} s"
    by_status = {S.STATUS_NONE_NEEDED: _none_needed, S.STATUS_NOTHING: _none_needed,
                 S.STATUS_FAILS_FP32: _fails_fp32, S.STATUS_INTERRUPTED: _interrupted}
    code = by_status.get(outcome.status, _found)(outcome, stats, cfg.model)
    _check_notes(outcome)
    if outcome.output_written:
        code = _written(cfg, code)
    if outcome.replay_path and outcome.checks:
        log(f"Verdicts saved to {outcome.replay_path}; resume with --load-debug-replay {outcome.replay_path}")
    _print_result(outcome, cfg, code, json_out, emit_options)
    return code


def _check_notes(outcome) -> None:
    """The notes on the checks: more than the search's bound, broken ones."""
    from toolkit.precision import search as S

    if outcome.status != S.STATUS_INTERRUPTED and outcome.checks > outcome.cost_bound:
        log(
            f"note: {outcome.checks} checks, more than the search's bound of {outcome.cost_bound} (a bisect over "
            f"{outcome.candidates} nodes, {outcome.bisect_checks} checks, plus twice the {len(outcome.kept)} node(s) "
            "found): the failure needs nodes that are not contiguous in topological order, each found by a search "
            "of its own (see docs/precision.md)"
        )
    if outcome.broken:
        warn(f"{outcome.broken} check(s) could not build, load or run their mixed model; they counted as failing")


def _print_result(outcome, cfg, code: int, json_out: bool, emit_options: bool) -> None:
    """stdout: the --json summary, else the nodes found (their names, or convert's option)."""
    from toolkit.precision import search as S

    if json_out:
        import json  # (--json only)

        echo(json.dumps(_summary_json(outcome, cfg, code), indent=2))
    elif outcome.status in ("found", "interrupted", S.STATUS_ROUNDING):
        _print_names(outcome.kept, emit_options)


def _fails_fp32(outcome, stats: str, model: str) -> int:
    log(
        f"The comparison fails even with every node in fp32 ({outcome.error_result}): the difference is not "
        f"{outcome.precision}'s. Loosen the tolerances or compare other runners ({stats})."
    )
    return int(ExitCode.FAILED)


def _interrupted(outcome, stats: str, model: str) -> int:
    return interrupted(bool(outcome.kept or outcome.output_written), f"{len(outcome.kept)} node(s)", stats)


def _found(outcome, stats: str, model: str) -> int:
    """The lines of a result (found, or what remains fails by rounding alone); its exit code."""
    log(
        f"Keep {len(outcome.kept)} of {outcome.candidates} node(s) in fp32: {outcome.error_fp16} -> "
        f"{outcome.error_result} ({stats})."
    )
    code = int(ExitCode.FAILED) if _rounding_lines(outcome) else int(ExitCode.OK)
    for name in outcome.kept[:20]:
        log(f"  {name}")
    if len(outcome.kept) > 20:
        log(f"  ... and {len(outcome.kept) - 20} more")
    if outcome.one_minimal and len(outcome.kept) > 0:
        log(f"1-minimal: moving any one of them back to {outcome.precision} makes the comparison fail (each checked).")
    return code


_SHELL_SPLITS = re.compile(r"[\s*?\[]")  # what word splitting and pathname expansion of $(...) change


def _print_names(names: List[str], emit_options: bool) -> None:
    """The nodes found on stdout: one per line, or (``--emit-options``) one line of convert's option,
    nothing when there are none."""
    if not emit_options:
        for name in names:
            echo(name)
        return
    _check_emittable(names)
    if names:
        echo("--keep-fp32 " + " ".join(names))


def _check_emittable(names: List[str]) -> None:
    """An InputError naming the first node name that convert would not get intact from the shell's $(...)."""
    odd = [n for n in names if _SHELL_SPLITS.search(n)]
    if odd:
        raise InputError(
            f"node name {odd[0]!r} has a space or a glob character, which the shell's $(...) would split or "
            "expand: print the names without --emit-options to a file and give it to convert --keep-fp32-from FILE")
    dashed = [n for n in names if n.startswith("-") or not n]
    if dashed:
        raise InputError(
            f"node name {dashed[0]!r} {'starts with -' if dashed[0] else 'is empty'}, which convert would read as "
            "an option (or lose): print the names without --emit-options to a file and give it to convert "
            "--keep-fp32-from FILE")


def _written(cfg, code: int) -> int:
    """The written model, said and run with the default session options: exit code 1 when it fails there."""
    log(f"Wrote the mixed-precision model to {cfg.output}")
    crash = _default_session_fails(cfg)
    if crash:
        warn(crash)
        return int(ExitCode.FAILED)
    return code


def _default_session_fails(cfg) -> str:
    """Why the written model does not run in an ONNX-Runtime session with the default options
    (created in a forked child, so a crash is a finding), with the setting that avoids it; ''
    when it runs, or when no setting runs it (an error at every level: kernels ONNX-Runtime
    lacks, as bf16 on the CPU)."""
    from toolkit.convert.runtime_check import run_session, working_level
    from toolkit.convert.shapes import hinted_shapes
    from toolkit.core.inputs import generate_inputs
    from toolkit.core.io.model import graph_io_meta, load_model

    model = load_model(cfg.output, external_data_dir=cfg.external_data_dir)
    metas, _ = graph_io_meta(model)
    feeds, _notes = generate_inputs(metas, iterations=1, seed=cfg.seed, shapes=hinted_shapes(model, metas, cfg.input_shapes))
    run = run_session(model, feeds)
    if run.ok:
        return ""
    level = working_level(model, feeds, None)
    if run.error and level is None:
        return ""  # (no setting runs it: ONNX-Runtime lacks the kernels, as for bf16 on the CPU)
    fix = f"; with graph_optimization_level {level} it runs" if level else ""
    return run.sentence(f"the written model {cfg.output}") + fix + (
        "; `toolkit convert --fp-to-fp16 --repair` searches for the op type to keep in fp32"
    )


def _rounding_lines(outcome) -> bool:
    """What is left fails by the rounding of reduced-precision storage: say so, and what would pass.
    True when it does (the verdict is then a failure)."""
    from toolkit.precision.search import STATUS_ROUNDING

    if outcome.status != STATUS_ROUNDING:
        return False
    error = outcome.error_result.replace(f" ({outcome.precision} rounding)", "")
    log(
        f"FAILED at the tolerances given: what remains ({error}) is {outcome.precision} rounding, within the noise "
        f"bound of {outcome.noise_bound:.3g} of each output's largest value for a graph {outcome.depth} nodes deep "
        f"(docs/noise.md). No node is kept in fp32 for rounding alone; the comparison passes with "
        f"{S.ATOL_FLAG} {outcome.passing_atol:g}."
        + (f" The model written keeps the nodes printed in fp32: it passes at that {S.ATOL_FLAG}, not at the "
           "tolerances given."
           if outcome.output_written else "")
    )
    return True


@shown_as(atol=dict(after="keep_fp32"), rtol=dict(after="atol"), check_error_stat=dict(after="rtol"))
@dataclass
class PrecisionArgs(ToleranceOptions):
    """The options of ``debug precision`` that its library configs do not take (the command binds
    :class:`toolkit.precision.config.QdqConfig`, which declares the others): the runners, the
    tolerances as given (parsed once, by :func:`toolkit.precision.config.search_tolerances`), what
    is printed."""

    compare: Optional[List[str]] = option(
        "--compare", metavar="COMPARE...", complete="runner-spec", after="output",
        help="Two runner specs: the fp32 reference and the reduced-precision candidate (default: onnxrt "
        "onnxrt:fp16, fp16 emulated on the CPU; or onnxrt:bf16, trt:fp16, trt:bf16).",
    )
    json_out: bool = switch("--json", after="load_replay",
                            help='Print the result as JSON on stdout (instead of node names).')
    emit_options: bool = switch(
        "--emit-options", after="json_out", help="Print the nodes found as convert's option, one line `--keep-fp32 NAMES...`, "
        "or nothing when no node needs fp32: `toolkit convert MODEL --fp-to-fp16 $(toolkit debug precision MODEL "
        "--emit-options) -o mixed.onnx`.")


# the options of the Q/DQ pair search alone, each declared on its QdqConfig field
PAIR_FIELDS = [(f.name, d.flags[0]) for f, d in declarations(QdqConfig)
               if d.flags and f.name not in {g.name for g in dataclasses.fields(PrecisionConfig)}]
PAIR_OPTIONS = tuple(flag for _name, flag in PAIR_FIELDS)

def _no_pairs(path: str, weights: bool) -> str:
    """Why the quantized model at ``path`` has no Q/DQ pair to search ('' when it has one): its
    quantization is in integer ops (``quantize_dynamic``, ``QuantFormat.QOperator``: a Q/DQ pair
    there only quantizes an integer op's input or dequantizes its output) or on weights alone."""
    from toolkit.quant import qdq
    from toolkit.core.io.model import load_model

    model = load_model(path, load_external_data=False)
    if qdq.find_pairs(model, weights=weights):
        return ""
    ops = qdq.integer_ops(model)
    return f"is quantized in integer ops ({', '.join(ops)})" if ops else "holds no activation Q/DQ pair"


def _reduced(spec: str) -> bool:
    """Whether runner spec ``spec`` runs reduced precision (fp16/bf16)."""
    from toolkit.run.registry import get_kind
    from toolkit.run.specs import parse_runner_spec

    parsed = parse_runner_spec(spec)
    return bool(get_kind(parsed.kind).reduced(dict(parsed.options)))


def register(app: typer.Typer) -> None:
    @app.command("precision", **command_kwargs(_HELP, declares=[QdqConfig, PrecisionArgs], examples=(
        "toolkit debug precision model.onnx -o mixed.onnx",
        f"toolkit debug precision model.onnx -o mixed.onnx --load-inputs inputs.json {S.ATOL_FLAG} 1e-2 {S.RTOL_FLAG} 1e-2",
    )))
    @bind(QdqConfig, more=[(PrecisionArgs, "", None)])
    def precision_command(ctx: typer.Context, **params) -> None:
        given = [flag for name, flag in PAIR_FIELDS if ctx.params.get(name) not in (None, False, [], ())]  # (as given)
        _run(QdqConfig(**values_for(QdqConfig, params)), PrecisionArgs(**values_for(PrecisionArgs, params)), given)


def _run(q: QdqConfig, args: PrecisionArgs, pair_options: List[str]) -> None:
    """``debug precision`` with its options ``q`` (the fp16 search takes those of PrecisionConfig)
    and ``args``; ``pair_options``: the flags of the Q/DQ pair search given."""
    from toolkit.precision.search import PrecisionSearch

    compare = args.compare
    _check_args(args)
    if q.model == "-":  # (read twice: whether it is quantized, then by the search)
        from toolkit.core.io.model import spool_stdin

        q.model = spool_stdin()
    quantized = _searches_pairs(q, compare, pair_options)
    q.reference, q.candidate = _runners(compare, quantized)
    _cluster_usage(q)
    q.tolerances = search_tolerances(args)
    if quantized:
        from toolkit.cli.qdq_report import run_qdq

        run_qdq(q, args.json_out)
    cfg = PrecisionConfig(**{f.name: getattr(q, f.name) for f in dataclasses.fields(PrecisionConfig)})
    from toolkit.cli.search_reporters import PrecisionReporter

    from toolkit.cli.supervisor import run_supervised

    # (in a forked child when supervised: a runtime crash is one sentence and exit 1)
    raise typer.Exit(run_supervised(lambda: _summary(PrecisionSearch(cfg, PrecisionReporter()).run(), cfg,
                                                     args.json_out, args.emit_options)))


def _check_args(args: PrecisionArgs) -> None:
    """Usage errors of what is printed and of --compare."""
    if args.json_out and args.emit_options:
        raise UsageError("--json and --emit-options both say what is printed on stdout: give one")
    if args.compare and len(args.compare) != 2:
        raise UsageError("--compare takes two runner specs: the fp32 reference and the candidate, e.g. onnxrt onnxrt:fp16")


def _runners(compare: Optional[List[str]], quantized: bool):
    """(reference, candidate): --compare's, else onnxrt against itself for a quantized model (its pairs in float
    are the reference), onnxrt against fp16 emulated on the CPU for the others."""
    if compare:
        return compare
    return ("onnxrt", "onnxrt") if quantized else ("onnxrt", "onnxrt:fp16")


def _searches_pairs(q: QdqConfig, compare: Optional[List[str]], pair_options: List[str]) -> bool:
    """Whether the Q/DQ pairs of the model are searched (else its nodes to keep in fp32).

    A quantized model: its Q/DQ pairs are searched, unless the candidate asks for fp16/bf16; a model
    quantized in integer ops only has no pairs: its fp16 nodes are searched, unless a pair option asks."""
    from toolkit.precision.qdq_search import quantization_of

    kind = quantization_of(q.model)
    quantized = kind is not None and not (compare and _reduced(compare[1]))
    why = _no_pairs(q.model, q.weights) if quantized and not pair_options and not compare else ""
    if why:
        log(f"{q.model} {why}, which cannot be taken back to float pair by pair: searching "
            "the nodes to keep in fp32 for fp16 instead (quantize it in QDQ format to search its pairs)")
        quantized = False
    if not quantized and pair_options:
        raise UsageError(f"the options of the Q/DQ pair search ({', '.join(PAIR_OPTIONS)}) are for the Q/DQ pairs of "
                         f"a quantized model; {q.model} has none, or --compare asks for an fp16/bf16 search")
    return quantized


def _cluster_usage(q: QdqConfig) -> None:
    """Usage errors of --cluster and its options, before anything runs."""
    if q.cluster is None and (q.gpus_per_check is not None or q.cpus_per_check is not None):
        raise UsageError("--gpus-per-check and --cpus-per-check need --cluster ray")
    if q.cluster is not None:
        from toolkit.reduce.cluster import parse_cluster

        parse_cluster(q.cluster)  # a usage error before anything runs

"""``convert``'s runtime check: the written model in ONNX-Runtime with the default session
options (and the level the user names), each session in a forked child, so a crash is reported
as a finding; ``--repair`` searches for the op type to keep in fp32 that avoids it."""

from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from toolkit.cli.output import log, warn
from toolkit.core.errors import ExitCode, ToolkitError

REASON_CRASH = "kept fp32 by --repair: ONNX-Runtime's session with {options} failed with it in reduced precision ({how})"
REASON_ACCURACY = (
    "kept fp32 by --repair: in reduced precision the model differed from the original beyond the check's tolerances "
    "(debug precision's search on the check's input sets)"
)


@dataclass
class RuntimeChecks:
    """The sessions the written model got, what avoids a failure, and the failure to report."""

    runs: list = field(default_factory=list)  # RuntimeRun, default options first
    fallback: Optional[str] = None  # the optimization level that avoids the failure
    repaired_op: Optional[str] = None  # the op type --repair kept in fp32
    failure: str = ""  # the sentence to exit 1 with ('' when none)

    def measured(self) -> Optional[list]:
        """The outputs of the first session that ran (the default options when they work)."""
        for run in self.runs:
            if run.ok:
                return run.outputs
        return None

    def as_dict(self) -> dict:
        return {
            "sessions": [r.as_dict() for r in self.runs],
            "works_with_graph_optimization_level": self.fallback,
            "repaired_by_keeping_fp32": self.repaired_op,
            "failure": self.failure or None,
        }


def _sessions(model, feeds, level: Optional[str], first=None) -> list:
    from toolkit.convert.runtime_check import run_session

    runs = [first if first is not None else run_session(model, feeds)]
    if level and level.lower() != "all":
        runs.append(run_session(model, feeds, level.lower()))
    return runs


def _original_failure(original, feeds):
    """The original model's (a path or a model) failing run on ``feeds`` with the default options
    (a RuntimeRun; None when it runs)."""
    from toolkit.core.io.model import load_model

    model = load_model(original) if isinstance(original, str) else original
    return _first_failing(_sessions(model, feeds, None))


def _first_failing(runs: list):
    """The first of ``runs`` (RuntimeRun) that failed, or None."""
    return next((r for r in runs if not r.ok), None)


def check_runtime(
    result, feeds: list, level: Optional[str], repair: bool, again: Callable, first=None, dtype: str = "float16",
    original=None,
):
    """(the conversion to write, RuntimeChecks) for ``result``: see the module docstring.

    ``again(more)`` converts the model again with the op types ``more`` kept in fp32 too; ``first``:
    the session with the default options, already run (a RuntimeRun)."""

    from toolkit.convert.runtime_check import runtime_name, working_level

    checks = RuntimeChecks(runs=_sessions(result.model, feeds, level, first))
    bad = _first_failing(checks.runs)
    if bad is None:
        shown = " and ".join(_options(r.level) for r in checks.runs)
        log(f"Runs in {runtime_name()} (CPU) with {shown}: session created and {_sets(len(feeds))} run "
            f"({sum(r.seconds for r in checks.runs):.2f} s)")
        return result, checks
    checks.fallback = working_level(result.model, feeds, bad.level)
    sentence = _failure_sentence(bad, checks, dtype, original, feeds)
    if sentence is None:
        return result, checks
    if repair:
        return _repaired(result, checks, feeds, bad, again, level, sentence)
    setting = "create its session with that setting, or " if checks.fallback is not None else ""
    checks.failure = (
        f"{sentence}; the model was written: {setting}rerun with --repair to search for the op type to keep in "
        "fp32 (--keep-fp32 OP)"
    )
    return result, checks


def _failure_sentence(bad, checks: "RuntimeChecks", dtype: str, original, feeds) -> Optional[str]:
    """What the failing session ``bad`` says, with what avoids it; None when --repair cannot help (``checks.failure``
    then holds the failure to report, '' when there is none: an error expected, or the inputs')."""
    if not bad.error or checks.fallback is not None:
        return bad.sentence() + _fallback_text(checks.fallback)
    unavoidable, inherited = _error_at_every_level(bad, dtype, original, feeds)
    if unavoidable is None or inherited:  # (a model the original's fault keeps from loading: --repair cannot help)
        checks.failure = unavoidable or ""
        return None
    return unavoidable


def _error_at_every_level(bad, dtype: str, original, feeds) -> Tuple[Optional[str], bool]:
    """An error at every optimization level: the failure's sentence when the original model runs on
    the same inputs, or when it fails the same way creating its session (no inputs would make either
    load: then True, the failure is the original's); None (a note or a warning said) when the error
    is expected (bf16 on the CPU) or the original fails on these inputs too (the inputs, not the
    conversion)."""
    if dtype == "bfloat16":  # (expected: the CPU provider has almost no bfloat16 kernels)
        log(f"{bad.sentence()} (its CPU provider has almost no bfloat16 kernels: run it where bf16 runs)")
        return None, False
    failing = _original_failure(original, feeds) if original is not None else None
    if failing is not None and "session creation" == failing.phase == bad.phase:
        return (f"{bad.sentence().rstrip('. ')}, and so does the original model: the model was written, fix what "
                "keeps the original from loading"), True
    if original is None or failing is not None:
        warn(bad.sentence())  # the original fails on these inputs too: the inputs, not the conversion
        return None, False
    return f"{bad.sentence().rstrip('. ')}, where the original model runs on the same inputs", False


def _repaired(result, checks: "RuntimeChecks", feeds: list, bad, again: Callable, level: Optional[str], sentence: str):
    """--repair of a runtime failure: (the conversion that runs, or ``result`` with the failure in
    ``checks``; ``checks``)."""
    found = _repair(result, feeds, bad, again)
    if found is None:
        checks.failure = sentence + "; --repair found no single op type whose fp32 copy avoids it"
        return result, checks
    op, result = found
    checks.repaired_op = op
    warn(f"{sentence}; --repair kept the {op} nodes in fp32, and it runs")
    checks.runs += _sessions(result.model, feeds, level)
    return result, checks


def _repair(result, feeds, bad, again: Callable):
    """(op type, conversion) that avoids ``bad``'s failure; None when no single op type does."""
    from toolkit.convert.runtime_check import find_fp32_ops

    ops = _converted_ops(result)
    log(f"--repair: trying {len(ops)} op type(s) in fp32, most frequent first: {', '.join(ops)}")
    found = find_fp32_ops(again, ops, feeds, bad.level)
    if found is None:
        return None
    op, conversion = found
    how = bad.crash or "an error"
    why = REASON_CRASH.format(options=_options(bad.level), how=how)
    user = "kept by --keep-fp32"
    by_name = {n.name: n.op_type for n in conversion.model.graph.node}
    for name, reason in conversion.kept.items():
        if reason == user and by_name.get(name) == op:
            conversion.kept[name] = why
    return op, conversion


def _converted_ops(result) -> List[str]:
    """Op types of the nodes that were converted (not kept in fp32), most frequent first."""
    counts: Dict[str, int] = {}
    for node in result.model.graph.node:
        if node.name in result.kept or node.op_type in ("Cast", "Constant"):
            continue
        counts[node.op_type] = counts.get(node.op_type, 0) + 1
    return sorted(counts, key=lambda op: (-counts[op], op))


def _fallback_text(level: Optional[str]) -> str:
    if level is None:
        return "; no lower graph_optimization_level avoids it"
    return f"; with graph_optimization_level {level} it runs"


def _options(level: Optional[str]) -> str:
    from toolkit.convert.runtime_check import options_text

    return options_text(level)


def _sets(n: int) -> str:
    return "1 input set" if n == 1 else f"{n} input sets"


def repair_accuracy(again: Callable, feeds: list, dtype: str, model_path: str, external_data_dir: Optional[str],
                    keep_fp32: List[str], extra: Sequence[str] = ()):
    """--repair when the converted model differs from the original beyond the check's tolerances:
    ``debug precision``'s search (its fp16/bf16 emulation, which computes what the written model
    stores) on the check's input sets finds the nodes to keep in fp32; returns the conversion with
    them kept (None when the search finds no such set: the difference is not the reduced precision's).
    ``keep_fp32``: the user's words; ``extra``: what ``again`` adds to them (the op type a crash repair kept)."""
    from toolkit.convert.validate import ATOL, RTOL
    from toolkit.core.compare.tolerances import Tolerances
    from toolkit.precision import search as S

    short = "bf16" if dtype == "bfloat16" else "fp16"
    log(f"--repair: searching the nodes to keep in fp32 on the check's input sets (debug precision, onnxrt:{short}, "
        f"atol {ATOL:g}, rtol {RTOL:g} on every element)")
    config = S.PrecisionConfig(model=model_path, candidate=f"onnxrt:{short}", tolerances=Tolerances.of(atol=ATOL, rtol=RTOL),
                               keep_fp32=list(keep_fp32) + list(extra), external_data_dir=external_data_dir)
    kept = _nodes_to_keep(config, feeds)
    if kept is None:
        return None
    conversion = again(list(extra) + kept)
    for name in kept:
        conversion.kept[name] = REASON_ACCURACY
    log(f"--repair kept {len(kept)} node(s) in fp32: {', '.join(kept[:10])}" + (" ..." if len(kept) > 10 else ""))
    return conversion


def _nodes_to_keep(config, feeds: list) -> Optional[List[str]]:
    """The nodes ``debug precision``'s search (``config``) keeps in fp32 on ``feeds``; None when it finds
    none, or cannot search (a warning says why)."""
    from toolkit.cli.search_reporters import PrecisionReporter
    from toolkit.precision import search as S

    try:
        outcome = S.PrecisionSearch(config, PrecisionReporter(), feeds=feeds).run()
    except ToolkitError as exc:
        if exc.exit_code == ExitCode.INTERNAL:
            raise
        warn(f"--repair could not search: {exc.message}")
        return None
    if outcome.status == S.STATUS_INTERRUPTED:
        raise KeyboardInterrupt
    if outcome.status not in (S.STATUS_FOUND, S.STATUS_ROUNDING) or not outcome.kept:
        return None
    return list(outcome.kept)

"""``debug reduce --compare``: the built-in accuracy check, and ``--all-faults``.

The CLI side: options into :class:`toolkit.reduce.accuracy.CompareOptions`, the check runner
with the CLI's own ``run`` injected as its entry point, and the summary of every fault.
"""

from __future__ import annotations

import os

from typing import List, Optional, Sequence

from toolkit.cli import output
from toolkit.cli.app import worker_entry
from toolkit.cli.errors import run_with_boundary
from toolkit.cli.output import log, plural
from toolkit.cli.run import run_and_render
from toolkit.core.errors import UsageError
from toolkit.core.graph.graphs import node_outputs
from toolkit.core.shared_options import PER_NAME_FLAGS, TOLERANCE_OPTIONS


def check_options(
    compare: Optional[Sequence[str]],
    check: Optional[Sequence[str]],
    *,
    all_faults: bool,
    reference_model: Optional[str],
    tolerances_given: bool,
) -> None:
    """Usage errors for option combinations, before any work."""

    if compare is None:
        for given, flag in ((all_faults, "--all-faults/--compare-tensors"), (reference_model, "--reference-model"),
                            (tolerances_given, TOLERANCE_OPTIONS)):
            if given:
                raise UsageError(
                    f"{flag} belongs to the built-in comparison: add --compare REF TEST "
                    "(e.g. --compare onnxrt onnxrt:opt=disable), or give tolerances to your --check command"
                )
        return
    if check is not None:
        raise UsageError("--compare is the check: give --compare or --check, not both")


def preflight_compare(model: str, compare: Optional[Sequence[str]], reference_model: Optional[str],
                      load_inputs: Sequence[str]) -> None:
    """Before the model is loaded or anything computed: both runner specs of ``--compare`` (a
    missing backend, provider or device: exit 4) and every file it reads."""
    if compare is None:
        return
    from toolkit.core.io.model import check_readable_file
    from toolkit.reduce.accuracy import CompareOptions
    from toolkit.run.specs import preflight_specs

    opts = CompareOptions.from_words(compare)
    for path in [model, reference_model or ""] + list(load_inputs):
        if _read_as_file(path, load_inputs):
            check_readable_file(path)
    preflight_specs([opts.reference, opts.test], model)


def _read_as_file(path: str, load_inputs: Sequence[str]) -> bool:
    """Whether ``path`` is a file to check before reading it: not stdin ('-'), nor a per-iteration
    folder of --load-inputs."""
    return bool(path) and path != "-" and not (path in load_inputs and os.path.isdir(path))


def make_compare_runner(model: str, artifact: str, words: Sequence[str], *, timeout=None, **kw):
    """The warm-worker check for ``--compare`` (the reference is computed on its first run)."""
    from toolkit.reduce.accuracy import CompareOptions, CompareRunner

    if timeout is not None and timeout <= 0:
        raise UsageError(f"--check-timeout must be positive, got {timeout}")
    opts = CompareOptions.from_words(words, **kw)
    opts.validate()
    opts.tolerances = _subgraph_tolerances(model, opts.tolerances)
    if opts.reference_model:
        from toolkit.core.io.model import check_readable_file

        check_readable_file(opts.reference_model)
    from toolkit.cli import run as _run  # noqa: F401 - imported once here, inherited by every forked check

    return CompareRunner(model, artifact, opts, run_entry, worker_entry(), notes=log, timeout=timeout)


def _subgraph_tolerances(model: str, tol):
    """The tolerances of every check: a per-tensor tolerance (``c3:1e-3``) must name a
    tensor of the full model, which a subgraph can output (exit 2 before any work, naming the
    tensors there are); a check of a subgraph then applies those its tensors have and ignores
    the others (those tensors are not in that subgraph)."""
    from toolkit.core.io.model import load_model
    from toolkit.run.plan import require_known_names

    if not (tol.per_atol or tol.per_rtol or tol.per_stat):
        return tol
    graph = load_model(model, load_external_data=False).graph  # (a file: preflight_compare read it)
    require_known_names(tol, _comparable(graph), PER_NAME_FLAGS, tensors=True)
    return tol.for_parts()


def _comparable(graph) -> List[str]:
    """The tensors a check can compare: every node's outputs and the graph's outputs (not its inputs)."""
    return node_outputs(graph) + [o.name for o in graph.output]


def run_entry(options, on_report=None) -> int:
    """Run ``options`` as ``toolkit run`` would, quietly (the check's output; in the forked worker);
    ``on_report(report)`` is handed the run's report, typed, before it is printed."""

    output._consoles.clear()  # the forked child has new stdio objects
    # errors end as they end a `toolkit run`: one error line and the exit code (4: TensorRT missing)
    command = "toolkit run " + options.model + " (built-in comparison)"
    return run_with_boundary(run_and_render, options, command, quiet=True, on_report=on_report)


def _storage_words(noise) -> str:
    """"fp16 storage " when the noise evidence names a reduced storage, else ""."""
    ev = getattr(noise, "evidence", noise) if noise is not None else None
    storage = ev.get("storage") if isinstance(ev, dict) else None
    return f"{storage} storage " if storage and storage != "fp32" else ""


def summarize_faults(faults: List, log_fn=log, noise=None, noise_windows=()) -> None:
    n = len(faults)
    rest = (
        f"the rest of the model fails by {_storage_words(noise)}rounding noise only (docs/noise.md)" if noise is not None
        else "the rest of the model passes"
    )
    log_fn(
        f"Found {n} faulty subgraph{'s' if n != 1 else ''}, each minimal; with their outputs"
        f"{_noise_windows_note(noise_windows)} replaced by reference values {rest}:"
    )
    for f in faults:
        log_fn(_fault_line(f))


def _noise_windows_note(noise_windows) -> str:
    """' (and those of K subgraphs failing by rounding noise alone, ...)' ('' when there are none)."""
    k = len(noise_windows)
    if not k:
        return ""
    return (f" (and those of {k} subgraph{'s' if k != 1 else ''} failing by rounding noise alone, not faults: "
            f"{', '.join(w.nodes[0] for w in noise_windows[:3])}{', ...' if k > 3 else ''})")


def _fault_line(f) -> str:
    """One fault: its nodes, its error and amplification, and the file it was written to."""
    from toolkit.core.compare.noise import times
    from toolkit.run.diagnosis import g

    ev = f.evidence
    err = "error ?"
    if "max_abs" in ev:
        err = f"max abs {g(ev.get('max_abs'))} ({g(ev.get('tol_ratio'))}x the tolerance)"
    amp = f"amplification {times(ev.get('amplification'))}" if "amplification" in ev else "amplification ?"
    return f"  {f.number}. {', '.join(f.nodes)} | {err} | {amp} | {f.path}"


def faults_json(faults: List) -> List[dict]:
    from toolkit.run.diagnosis import jsonable

    return [
        jsonable({"number": f.number, "nodes": [d.split(" [")[0] for d in f.nodes], "path": f.path, **f.evidence})
        for f in faults
    ]


def report_hidden(runner, reducer, summary: dict) -> None:
    """The full model passes on what the check compares: say how many of the tensors the reference
    has differ beyond tolerance, the first one (topological order) and how to reduce on it."""
    seen = getattr(reducer, "hidden", None)
    if seen is None:
        return
    compared, bad = seen
    summary["compare"]["differing_tensors"] = {"compared": compared, "differing": len(bad), "first": None}
    if not bad:
        log(f"Every one of the {compared} tensors the reference has is within tolerance too.")
        return
    index = reducer.index
    where = {t: i for i in range(index.size) for t in index.writes[i]}
    first = min(bad, key=lambda t: where.get(t, index.size))
    node = f", produced by {index.describe(where[first])}" if first in where else ""
    summary["compare"]["differing_tensors"]["first"] = first
    log(
        f"The outputs pass, but {len(bad)} of the {compared} tensors the reference has differ beyond tolerance; "
        f"the first is '{first}'{node}. To reduce on it, add --compare-tensors all (a subgraph then fails when "
        "any of its tensors differs)"
    )


def report_compare(runner, reducer, summary: dict, passed: bool = False) -> None:
    """The faults found (``--all-faults``) on stderr; ``compare`` and ``faults`` in the --json summary;
    when the full model passes, what the comparison sees beyond its outputs."""
    faults = getattr(reducer, "faults", None)
    noise = getattr(reducer, "noise", None)
    if faults:
        summarize_faults(faults, noise=noise, noise_windows=getattr(reducer, "noise_windows", []))
    summary["compare"] = dict(runner.info)
    guide = getattr(reducer, "guide", None)
    if guide is not None:
        summary["compare"]["search"] = guide_json(guide, reducer)
        _guide_line(guide, bool(faults))
    if passed and getattr(reducer, "index", None) is not None:
        report_hidden(runner, reducer, summary)
    if faults is not None:
        _faults_summary(summary, faults, noise, getattr(reducer, "noise_windows", []))


def _faults_summary(summary: dict, faults: List, noise, noise_windows: List) -> None:
    """--all-faults in the --json summary: the faults, the noise that remains, the subgraphs failing by noise."""
    summary["faults"] = faults_json(faults)
    summary["noise_remaining"] = faults_json([noise])[0] if noise is not None else None
    summary["noise_windows"] = faults_json(noise_windows)


def _guide_line(guide: dict, faults: bool) -> None:
    """How the guided search went: its hinted node found the fault, or the hinted nodes passed alone."""
    tried = guide.get("tried", 0)
    if guide.get("found_by") == "guided" and not faults:
        log(
            f"Found by the guided search: the node ranked by error amplification fails alone, fed the "
            f"reference's inputs (a single node: minimal); {plural(tried, 'check')} of hinted nodes"
        )
    elif tried and guide.get("found_by") == "search":
        log(f"The hinted nodes passed alone ({plural(tried, 'check')}); found by the localized search")


def guide_json(guide: dict, reducer) -> dict:
    """How the search went: ``found_by`` "guided" (a hinted node failed alone) or "search" (the
    normal search, after the hinted nodes passed alone or without a hint), the hint and the
    number of hinted nodes checked."""
    from toolkit.run.diagnosis import jsonable

    mode = reducer.cfg.mode
    out = {"found_by": guide.get("found_by", "search" if mode is None else mode), "hinted_checks": guide.get("tried", 0)}
    if "ranked" in guide:
        out.update(hint_seconds=guide["hint_seconds"], ranked=guide["ranked"])
    return jsonable(out)

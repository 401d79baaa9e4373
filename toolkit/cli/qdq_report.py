"""``debug precision`` on a quantized model: progress lines and the summary of the pairs found.

The pair names go to stdout, one per line (or a JSON object with ``--json``); everything else
to stderr.
"""

# (no `from __future__ import annotations`: kept like the other CLI modules)

import json
from typing import Any, Dict, List

import typer

from toolkit.cli.output import echo, interrupted, log, state, warn
from toolkit.cli.search_reporters import PrecisionReporter
from toolkit.core.errors import ExitCode


_SOURCES = {"file": "--validate-inputs", "split": "of --load-inputs; --held-out N to choose how many",
            "generated": "further generated sets"}


class QdqReporter(PrecisionReporter):
    """One line per check: how many pairs are in float."""

    counted = "pair(s) in float"

    def start(self, search) -> None:
        c = search.config
        pairs = sum(len(search.members.get(u, [u])) for u in search.universe)
        units = "" if pairs == len(search.universe) else (
            f", searched as {len(search.universe)} unit(s) (a pair with the pairs after a Slice, Reshape, ... that "
            "only re-quantize its values on its grid)")
        self.counted = "unit(s) in float" if units else "pair(s) in float"
        weights = any(search.by_name[n].weight for u in search.universe for n in search.members.get(u, [u]))
        log(
            f"Searching {c.model}: {pairs} Q/DQ pair(s) that could go back to float"
            f"{' (weights included)' if weights else ''}{units}; reference: "
            f"{search.reference_label()}; --compare {c.reference} {c.candidate}"
        )
        _search_notes(search)
        self.total = len(search.universe)


def _search_notes(search) -> None:
    """What the search leaves out or fixes, its pass rule, and its held-out input sets."""
    from toolkit.quant.qdq import absent_op_types as qdq_absent_op_types

    c = search.config
    if search.integer_ops:
        log(f"note: integer ops ({', '.join(search.integer_ops)}) are not searched: they cannot be taken "
            "back to float pair by pair")
    if c.weights and not any(p.weight for p in search.pairs):
        warn("--qdq-weights: no weight is searched: a weight stored quantized has no float values to go back to "
             "without --reference-model FLOAT_MODEL")
    for op_type, spelled in qdq_absent_op_types(search.model, c.float_op_types):
        warn(f"--float-op-types {op_type}: the model has no node of that type"
             + (f" (it has {spelled}: op types are case-sensitive)" if spelled else "") + "; it keeps no pair in float")
    if search.fixed:
        log(f"{len(search.fixed)} pair(s) at --float-op-types {','.join(c.float_op_types)} in float in every "
            f"check: {', '.join(search.by_name[n].shown for n in search.fixed_order)}")
    if search.metric is not None:
        from toolkit.quant.metrics import summary as metric_summary

        log(f"Pass rule: {metric_summary(search.metric)}, on every input set")
    held = getattr(search, "held_out_feeds", [])
    if held:
        log(f"{len(search.feeds)} input set(s) to search on, {len(held)} held out to check the result on "
            f"({_SOURCES[search.held_source]})")


def run_qdq(cfg, json_out: bool) -> None:
    """Search the Q/DQ pairs of ``cfg.model`` (a QdqConfig); exits with the search's code."""
    from toolkit.precision.qdq_search import QdqSearch

    outcome = QdqSearch(cfg, QdqReporter()).run()
    raise typer.Exit(summary(outcome, cfg, json_out))


def _pair(outcome, name: str):
    return next(p for p in outcome.pairs if p.name == name)


def _suggestion(outcome, name: str):
    """The scale suggested for pair ``name`` (None without one)."""
    return next((s for s in outcome.suggestions if s.pair == name), None)


def _pair_json(outcome, name: str) -> Dict[str, Any]:
    pair = _pair(outcome, name)
    st = outcome.stats.get(name)
    row: Dict[str, Any] = {
        "pair": name, "tensor": pair.tensor, "shown": pair.shown, "weight": pair.weight,
        "scale": [float(v) for v in pair.scale.ravel()], "zero_point": [int(v) for v in pair.zero_point.ravel()],
    }
    if st is not None:
        row.update({
            "local_max_error": st.local_max, "local_sqnr_db": round(st.local_sqnr, 3), "clipped": st.clipped,
            "saturated": st.saturated, "range": [st.lo, st.hi], "int_range": [st.grid_lo, st.grid_hi],
            "levels": round(st.levels, 2), "why": st.reasons, "sentinels": st.sentinels,
            "channel_spread": st.spread,
        })
    sug = _suggestion(outcome, name)
    if sug is not None:
        row["suggested"] = {"scale": sug.scale, "zero_point": sug.zero_point, "passes": sug.passes,
                            "margin": sug.margin, "robust": sug.robust, "fails_at": sug.fails_at}
    return row


def _summary_json(outcome, cfg, code: int) -> Dict[str, Any]:
    return {
        "status": outcome.status, "precision": "int8", "float_pairs": [_pair_json(outcome, n) for n in outcome.kept],
        "searched_pairs": outcome.candidates, "reference": outcome.reference, "integer_ops": outcome.integer_ops,
        "checks": outcome.checks, "scale_checks": len(outcome.suggestions), "broken_checks": outcome.broken, "remembered": outcome.remembered,
        "seconds": round(outcome.seconds, 3), "error_quantized": outcome.error_fp16,
        "error_result": outcome.error_result, "one_minimal": outcome.one_minimal, "minimum": outcome.minimum,
        "optimality": optimality(outcome), "not_monotone": outcome.not_monotone,
        "pass_rule": outcome.pass_rule, "scaled": outcome.scaled, "float_by_op_type": outcome.fixed,
        "held_out": outcome.held_out.as_dict() if outcome.held_out is not None else None,
        "held_out_note": outcome.held_out_note or None,  # (why there is no held-out check)
        "output": cfg.output if outcome.output_written else None, "exit_code": code,
    }


def _cause_lines(outcome) -> List[str]:
    from toolkit.quant.stats import causes

    stats = [outcome.stats[n] for n in outcome.kept if n in outcome.stats]
    found = causes(stats, outcome.inputs) or _diffuse_cause(stats)
    return ["Causes:"] + [f"  {line}" for line in found] if found else []


def _diffuse_cause(stats) -> List[str]:
    """The cause when every kept pair only rounds: their rounding together (none without stats)."""
    if stats and all(st.rounding_only for st in stats):
        return ["no kept pair clips or is coarse: each only rounds (half a step), and together their rounding "
                "exceeds the tolerance (diffuse error: keep them in float, or loosen the tolerance)"]
    return []


def _pair_lines(outcome) -> List[str]:
    lines = []
    for name in outcome.kept:
        lines.append(f"  {_pair(outcome, name).describe()}")
        st = outcome.stats.get(name)
        lines.extend(f"      {why}" for why in (st.reasons if st is not None else []))
        sug = _suggestion(outcome, name)
        if sug is not None:
            lines.append(f"      {_suggestion_text(sug)}")
    return lines


def _robust_text(sug) -> str:
    """Whether a passing suggestion still passes with its scale 2% smaller and larger."""
    if sug.robust is None:
        return ""
    if sug.robust:
        return "; it passes at -2% and +2% of the scale too"
    return f"; but not at {' or '.join(sug.fails_at)} of the scale: a fragile fix"


def _suggestion_text(sug) -> str:
    """A pair's suggested scale, and whether the model passes requantized with it."""
    verdict = "passes" if sug.passes else "still fails"
    margin = f", {sug.margin}" if sug.margin and sug.passes else ""
    return (f"{_suggested_text(sug)} (the observed range): "
            f"requantized with it, the model {verdict} ({sug.detail}{margin}){_robust_text(sug)}")


def _minimum_proof(outcome) -> str:
    if len(outcome.kept) == 1:
        return "the quantized model as it is fails"
    return "no pair passes alone: each was checked alone"


def optimality(outcome) -> str:
    """ "minimum" (proved), "1-minimal", or "" (neither known)."""
    return "minimum" if outcome.minimum else ("1-minimal" if outcome.one_minimal else "")


def _found(outcome, cfg, stats: str) -> int:
    """The log of a search that found its pairs: causes first, then each pair, then how small."""
    log(f"Take {len(outcome.kept)} of {outcome.candidates} Q/DQ pair(s) back to float: {outcome.error_fp16} -> "
        f"{outcome.error_result} ({stats}).")
    for line in _cause_lines(outcome) + _pair_lines(outcome):
        log(line)
    if outcome.kept:
        _how_small(outcome, cfg)
    return int(ExitCode.OK)


def _how_small(outcome, cfg) -> None:
    """Whether the pairs found are proved a minimum, or 1-minimal."""
    if outcome.minimum:
        log(f"Minimum: no set of fewer pairs passes ({_minimum_proof(outcome)}).")
    elif outcome.one_minimal:
        log("1-minimal: quantizing any one of them again makes the comparison fail (each checked); a set of "
            "fewer, other pairs may pass (not proved minimum"
            + (": --singles checks each pair alone" if len(outcome.kept) == 2 else "") + ").")
    _not_monotone_line(outcome, cfg)


def _not_monotone_line(outcome, cfg) -> None:
    """Where a passing set of pairs lies inside a failing one: what the search assumes does not hold."""
    seen = outcome.not_monotone
    if not seen or outcome.minimum:
        return
    fewer = ("a set of fewer pairs (two or more: none passes alone) may pass" if cfg.singles else
             "a set of fewer pairs may pass: --singles checks each pair alone first (one check per pair)")
    log(f"Not monotone here: with {seen['passing']} pair(s) in float the model passes, and with those and "
        f"{seen['failing'] - seen['passing']} more it fails (quantization errors that cancel), so a failing set "
        f"does not rule out the pairs in it, and {fewer}.")


def _scaled_line(outcome, cfg) -> None:
    scaled = outcome.scaled
    held = outcome.held_out
    if not scaled["passes"]:
        warn(f"with every passing suggested scale applied together the model fails ({scaled['detail']})"
             + (f"; wrote the model with the pairs in float to {cfg.output} instead" if outcome.output_written else ""))
    elif _scales_fail_held_out(held):
        warn(f"with every passing suggested scale applied the model passes the search's input sets "
             f"({scaled['detail']}) but not the held-out ones ({held.passed} of {held.count})"
             + (f"; wrote it to {cfg.output} all the same (rerun without --apply-scales for the model with "
                f"only the pairs found taken back to float, its scales unchanged)" if scaled["written"] else ""))
    else:
        log(f"With every passing suggested scale applied (the other pairs found in float) the model passes "
            f"({scaled['detail']})" + (f"; wrote it to {cfg.output}" if scaled["written"] else ""))


def _scales_fail_held_out(held) -> bool:
    """Whether the model with the suggested scales was checked on held-out inputs and fails there."""
    return held is not None and held.scaled and not held.holds


def _held_out_lines(outcome) -> None:
    """Whether the result holds on the held-out inputs, and whether they are enough to say so."""
    from toolkit.quant.validate import needed

    held = outcome.held_out
    if held is None:
        if outcome.held_out_note and outcome.status in ("found", "none-needed"):
            log(f"No held-out check: {outcome.held_out_note}.")
        return
    _held_out_verdict(outcome, held)
    if held.few:
        warn(f"{held.count} held-out input set(s) are few: passing all of them bounds the failure rate only below "
             f"{100 * held.bound:.0f}% (95% confidence); {needed()} are needed to bound it below 5% "
             "(--validate-inputs FILE)")


def _held_out_verdict(outcome, held) -> None:
    """Whether the result (or the model as it is) passes on the held-out inputs, and if not, why."""
    what = _held_out_subject(outcome, held)
    before = f"; the quantized model as it is: {held.before_passed} of {held.count}" if outcome.kept else ""
    if held.holds:
        log(f"Held out: {what} passes on {held.passed} of {held.count} input set(s) the search did not use "
            f"({held.detail}{before}): it holds.")
    elif held.reachable:
        warn(f"{what} does not hold on inputs the search did not use: it passes on {held.passed} of {held.count} "
             f"held-out input set(s) ({held.detail}{before}); search on more, and more varied, inputs")
    else:
        warn(f"{what} does not hold on inputs the search did not use: it passes on {held.passed} of {held.count} "
             f"held-out input set(s) ({held.detail}{before}); with every pair the search can take in float the "
             f"model passes on only {held.all_float_passed} of them: what fails there is not the pairs but "
             f"{_held_out_cause(outcome)} (a set of pairs holds there only where quantization errors cancel)")


def _held_out_subject(outcome, held) -> str:
    """What the held-out check ran: the model with the suggested scales, the result, or the model as it is."""
    if held.scaled:
        return "the model with the suggested scales"
    return "the result" if outcome.kept else "the quantized model"


def _held_out_cause(outcome) -> str:
    """What fails on held-out inputs when every searchable pair in float does."""
    weights_searched = any(p.weight for p in outcome.pairs)
    if outcome.quantized_weights and not weights_searched:
        return ("the quantized weights, which stay quantized (--qdq-weights searches them too), or a tolerance "
                "tighter than they allow on such inputs")
    return "what stays quantized, or a tolerance tighter than the model allows on such inputs"


def summary(outcome, cfg, json_out: bool) -> int:
    from toolkit.precision import search as S

    stats = f"{outcome.checks} check(s) run, {outcome.remembered} more answered from memory, {outcome.seconds:.2f} s"
    by_status = {S.STATUS_NONE_NEEDED: _none_needed, S.STATUS_FAILS_FP32: _fails_fp32,
                 S.STATUS_INTERRUPTED: _interrupted}
    code = by_status.get(outcome.status, _found)(outcome, cfg, stats)
    _held_out_lines(outcome)
    _after_search(outcome)
    if outcome.scaled is not None:
        _scaled_line(outcome, cfg)
    elif outcome.output_written:
        log(f"Wrote the model with those pairs in float to {cfg.output}")
    code = _final_code(outcome, code)
    if outcome.replay_path and outcome.checks:
        log(f"Verdicts saved to {outcome.replay_path}; resume with --load-debug-replay {outcome.replay_path}")
    if outcome.table:
        render_table(outcome.table, cfg.model, cfg.reference_model or "the model with every pair in float")
    _print_result(outcome, cfg, code, json_out)
    return code


def _none_needed(outcome, cfg, stats: str) -> int:
    log(f"The quantized model passes as it is ({outcome.error_fp16}); no pair needs float ({stats}).")
    return int(ExitCode.OK)


def _fails_fp32(outcome, cfg, stats: str) -> int:
    weights = sum(1 for p in outcome.pairs if p.weight)
    what = ("the difference is not the quantization's" if weights or not outcome.quantized_weights else
            f"what is left is the {outcome.quantized_weights} quantized weight(s): search them too with "
            "--qdq-weights" + ("" if cfg.reference_model else " and --reference-model FLOAT_MODEL"))
    log(f"The comparison fails even with every pair in float ({outcome.error_result}): {what}. Loosen the "
        f"tolerances or check the reference ({stats}).")
    return int(ExitCode.FAILED)


def _interrupted(outcome, cfg, stats: str) -> int:
    # (no pair kept: no passing set yet, since the quantized model as it is failed)
    return interrupted(bool(outcome.kept), f"{len(outcome.kept)} pair(s)", stats)


def _after_search(outcome) -> None:
    """The warnings about the checks after the search (interrupted) and during it (broken)."""
    if outcome.after_interrupted:
        state.interrupt_reported = True
        warn("interrupted after the search: the result above stands; the held-out check, reasons, scale "
             "suggestions or table not finished are left out")
    if outcome.broken:
        warn(f"{outcome.broken} check(s) could not build, load or run their model; they counted as failing")


def _final_code(outcome, code: int) -> int:
    """``code`` (the search's) made 130 when the steps after the search were interrupted, and 1 when
    the answer (the model written) fails on inputs the search did not use."""
    if outcome.after_interrupted:
        return int(ExitCode.INTERRUPTED)
    held = outcome.held_out
    if held is not None and not held.holds and code == int(ExitCode.OK):
        return int(ExitCode.FAILED)
    return code


def _print_result(outcome, cfg, code: int, json_out: bool) -> None:
    """stdout: the JSON summary with ``--json``, else the names of the pairs found (one a line)."""
    if json_out:
        echo(json.dumps(_result_json(outcome, cfg, code), indent=2))
    elif outcome.status in ("found", "interrupted"):
        for name in outcome.kept:
            echo(name)


def _result_json(outcome, cfg, code: int) -> Dict[str, Any]:
    """The --json summary, with the table of every pair when it was asked for."""
    data = _summary_json(outcome, cfg, code)
    if outcome.table:
        from toolkit.quant.table import row_dict

        data["table"] = [row_dict(k, st) for k, st in enumerate(outcome.table, 1)]
    return data


def _db(value) -> str:
    return "-" if value is None else f"{value:.1f} dB"


def table_line(rank: int, st) -> str:
    """One pair of the local/propagated table, grep-able."""
    from toolkit.quant.stats import percent

    verdict = "rounding" if st.rounding_only else "ADDS ERROR"
    why = [r.split(":")[0] for r in st.reasons if not r.startswith("local error")]
    return (
        f"  {rank:>3} | {st.pair.shown} | {verdict} | local SQNR {_db(st.local_sqnr)}, max {st.local_max:.3g} "
        f"({st.local_steps:.2g} steps) | upstream SQNR {_db(st.upstream_sqnr)} | after DQ vs float "
        f"{_db(st.xmodel_sqnr)} | clipped {percent(st.clipped)} | {st.levels:.1f} levels | scale {st.pair.scale.ravel()[0]:.4g}"
        + (f" | {', '.join(why)}" if why else "")
    )


def render_table(stats, label_a: str, label_b: str, limit: int = 20) -> None:
    """``run``'s table of where quantization adds error (stderr)."""
    faults = sum(1 for st in stats if not st.rounding_only)
    log(
        f"Q/DQ pairs ({label_a} vs {label_b}): {len(stats)} pair(s), {faults} adding more than rounding; "
        "ranked by the error each pair adds itself (local SQNR: before Q vs after DQ; upstream: before Q vs float); "
        "the pairs' tensors from ONNX-Runtime with graph optimizations off, whatever the runner"
    )
    for rank, st in enumerate(stats[:limit], 1):
        log(table_line(rank, st))
    if len(stats) > limit:
        log(f"  ... and {len(stats) - limit} more pair(s)")


def _suggested_text(sug) -> str:
    """A suggested scale in words: one number, or a per-channel pair's range of them."""
    if isinstance(sug.scale, list):
        zps = sorted(set(sug.zero_point))
        zp = str(zps[0]) if len(zps) == 1 else f"{zps[0]} to {zps[-1]}"
        return (f"suggested per-channel scales {min(sug.scale):.4g} to {max(sug.scale):.4g} ({len(sug.scale)} "
                f"channels), zero point {zp}")
    return f"suggested scale {sug.scale:.4g}, zero point {sug.zero_point}"

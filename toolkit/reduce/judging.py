"""How ``debug reduce`` judges one check's result: its verdict class (a failure otherwise than the
full model's counts as broken), the failure signature the full model's check fixes, and when the
run stops because the checks can no longer judge the model. A part of
:class:`~toolkit.reduce.session.Reducer`."""

from __future__ import annotations

import os
from typing import Any, Callable, Dict, List, Optional, Sequence

from toolkit.core.errors import DependencyError, ExitCode, InputError, ToolkitError
from toolkit.core.progress import Messages
from toolkit.reduce.config import UNJUDGED_MIN, UNJUDGED_SHARE, CannotJudge, Iteration, ReduceConfig
from toolkit.reduce.evidence import Evidence, evidence_of
from toolkit.reduce.graph import GraphIndex
from toolkit.reduce.signature import Signature, feeds_maker, signature_of
from toolkit.reduce.verdict import BROKEN, FAIL, PASS, TIMEOUT, CheckResult, broken_hint, error_line
from toolkit.search.masks import popcount


def passed_masks(memo: Dict[int, bool], broken_masks: set) -> List[int]:
    """The node sets the check passed on, of the verdicts ``memo`` (a check broken on one of
    ``broken_masks``, counted as a pass, judged nothing)."""
    return [m for m, failed in memo.items() if not failed and m not in broken_masks]


class Judging:
    """The judging of :class:`~toolkit.reduce.session.Reducer` (one of its base classes)."""

    cfg: ReduceConfig
    index: GraphIndex
    reporter: Messages  # the session's Reporter
    runner: Any
    workers: list
    toolkit_check: bool
    signature: Optional[Signature]
    evidence: Dict[int, Evidence]
    frozen: bool
    as_given: bool
    checks: int
    broken: int
    broken_masks: set
    other_failures: int
    timeouts: int
    _feeds: Optional[Callable[[str], Optional[bool]]]
    _check_files: List[str]

    def _decisive(self, masks: Sequence[int]):
        """With the full model first in a round, its pass (or a check broken on it) ends the
        reduce: the round's other checks are then moot and cancelled."""
        if masks[0] != self.index.full_mask:
            return None
        rule, toolkit_check, artifact = self.cfg.rule, self.toolkit_check, self.cfg.iter_artifact
        return lambda k, res: k == 0 and rule.classify(res, toolkit_check, artifact) in (PASS, BROKEN)

    def _judge(self, number: int, mask: int, res: CheckResult) -> Iteration:
        """The iteration of one check's result: its verdict class, reason and evidence. A check
        broken on the full model stops the run here (nothing has been written yet)."""
        full = mask == self.index.full_mask
        kind = self.cfg.rule.classify(res, self.toolkit_check, self.cfg.iter_artifact)
        failing = kind in (FAIL, TIMEOUT)
        rows = self._evidence(res) if full or failing else None
        other = self._other_failure(kind, rows, res, full)  # (a different failure: not the one reduced)
        if full and failing:
            self._fix_signature(res, rows)
        kind, reason = self._count(number, mask, res, kind, other)
        it = Iteration(number, popcount(mask), kind in (FAIL, TIMEOUT), res.seconds, "check", reason, res, verdict=kind)
        if rows is not None and other is None:  # (the evidence of a different failure is not kept)
            it.evidence = self.evidence[mask] = rows
        return it

    def _evidence(self, res: CheckResult) -> Optional[Evidence]:
        """What the check's comparison found (the built-in one's findings, or its output parsed)."""
        built_in = getattr(self.runner, "findings", None) is not None
        return evidence_of(res, built_in)

    def _count(self, number: int, mask: int, res: CheckResult, kind: str, other: Optional[str]):
        """Count the check by its verdict class ``kind`` (broken when it showed ``other``, a different
        failure); returns its final (class, reason)."""
        reason = self.cfg.rule.reason(res)
        if other is not None:
            kind, self.other_failures = BROKEN, self.other_failures + 1
        if kind == BROKEN:
            reason = self._note_broken(number, mask, res, mask == self.index.full_mask, other)
        elif kind == TIMEOUT:
            self.timeouts += 1
        return kind, reason

    def _note_broken(self, number: int, mask: int, res: CheckResult, full: bool, other: Optional[str]) -> str:
        """Count a broken check (``other``: the different failure it showed), said the first time;
        on the full model it stops the run. Returns the iteration's reason."""
        line = other or error_line(res)
        if full and other is None:
            self._broken_full_model(res, line)
        self.broken += 1
        self.broken_masks.add(mask)
        reason = f"{res.describe()}: {line}"
        self._say_first_broken(number, other, reason, line)
        return reason

    def _say_first_broken(self, number: int, other: Optional[str], reason: str, line: str) -> None:
        """The warning on the first check broken on its own, and on the first other failure."""
        if other is not None and self.other_failures == 1:
            self.reporter.warn(f"iteration {number}: {other}; a different failure from the one being reduced, "
                               "so it says nothing about this subgraph: counted as a pass (so is every later one)")
        elif other is None and self.broken - self.other_failures == 1:  # later ones: their lines say why
            self.reporter.warn(
                f"iteration {number}: the check itself failed ({reason}), so it says nothing about this "
                "subgraph; counted as a pass (so is every later BROKEN check)" + broken_hint(line)
            )

    def _other_failure(self, kind: str, rows: Optional[Evidence], res: CheckResult, full: bool) -> Optional[str]:
        """Why a failing check (its comparison ``rows``) fails otherwise than the full model (then broken):
        it does not show the failure signature the full model's check fixed."""
        if full or kind not in (FAIL, TIMEOUT) or self.signature is None:
            return None
        feeds = self._feeds = self._feeds or feeds_maker(self.index, self.signature.outputs)
        return self.signature.differs(res, rows, feeds)

    def _fix_signature(self, res: CheckResult, rows: Optional[Evidence]) -> None:
        """The failure this run reduces, from the full model's failing check; said at once."""
        self.signature = signature_of(
            res, rows, self.cfg.rule, any_failure=self.cfg.any_failure, graph_outputs=tuple(self.index.graph_outputs)
        )
        self._feeds = None
        if not ((self.frozen or self.as_given) and self.runner is not None):  # (said by _as_given)
            self.reporter.info(self.signature.announce())

    def _stop_if_unjudgeable(self, line: str) -> None:
        """CannotJudge when the reduce can no longer judge anything: a data file the check reads
        is gone, or most checks after the full model were broken (a result would be noise)."""
        self._stop_if_data_gone(line)
        after_full, broken = self.checks - 1, self.broken - self.other_failures
        if broken >= UNJUDGED_MIN and broken > UNJUDGED_SHARE * after_full:
            raise CannotJudge(
                f"the check could not judge {broken} of the {after_full} subgraphs checked after the full model "
                f"(broken: {line}), so the reduce cannot say which nodes fail: make the check run on subgraphs "
                "(e.g. layerwise --load-inputs and --onnx-outputs mark all golden values)"
            )

    def _stop_if_data_gone(self, line: str) -> None:
        """CannotJudge when a data file the check reads is gone."""
        gone = [p for p in self._check_files or [] if not os.path.exists(p)]
        if gone:
            raise CannotJudge(
                f"{gone[0]}: a data file the check reads disappeared during the reduce, so the checks after it "
                f"cannot judge the model ({line}); put it back"
            )

    def _broken_full_model(self, res: CheckResult, line: str):
        """The check cannot judge even the full model: stop, one error line, nothing written."""
        if res.code == 4 or res.code == 127:
            raise DependencyError(f"the check command itself fails: {line}")
        if res.code == ExitCode.INTERNAL:  # (a bug of toolkit's in the check: never a verdict on the model)
            raise ToolkitError(f"the check command itself fails with an internal error: {line}", ExitCode.INTERNAL)
        raise InputError(f"the check command itself fails: {line}")

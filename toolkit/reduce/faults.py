"""``--all-faults``: every faulty subgraph, not only the first.

After a minimal failing subgraph is found, its nodes leave the model: the tensors they
produced become inputs of what is left, fed with reference values by the built-in
comparison (``--compare``), so the fault no longer shows downstream. The search then runs
again on the remaining nodes, until they pass. Each round is an ordinary search
(:mod:`toolkit.search.strategy`) restricted to the nodes still in play by :func:`within`:
in topological order, the allowed nodes of a prefix still fail exactly when the prefix
holds a fault, so every strategy works unchanged.

No Typer or Rich here.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Callable, List, Optional

from toolkit.core.compare.noise import times
from toolkit.reduce.evidence import Evidence
from toolkit.search.masks import mask_indices, range_mask
from toolkit.reduce.guide import MIN_AMPLIFICATION, TRIES, guided
from toolkit.reduce.session import Reducer
from toolkit.search.strategy import STRATEGIES, Plan, Search, default
from toolkit.reduce.verdict import FAIL, CheckResult, error_line

MAX_FAULTS = 64


def within(search: Search, allowed: int) -> Search:
    """``search`` run on the nodes of ``allowed`` only (an empty set passes unchecked)."""
    try:
        mask = next(search)
        while True:
            if isinstance(mask, list):  # several checks at once (--jobs)
                answer = yield from _batch_within(mask, allowed)
            else:
                sub = mask & allowed
                answer = (yield sub) if sub else False
            mask = search.send(answer)
    except StopIteration as stop:
        return (stop.value or 0) & allowed


def _batch_within(masks: List[int], allowed: int) -> Search:
    """The verdicts on ``masks`` restricted to ``allowed``: those left with nodes checked at once,
    the empty ones passing unchecked."""
    subs = [m & allowed for m in masks]
    ask = [m for m in subs if m]
    got = iter((yield ask) if ask else [])
    return [next(got) if m else False for m in subs]


def localized(plan: Plan) -> Search:
    """The default search for the built-in comparison, where every subgraph is fed exact
    (reference) inputs, so a window of nodes fails exactly when it holds a faulty node.

    Binary search for the first faulty node over windows that halve each time (the half
    after a passing window is known to fail without a check), then the node alone is
    checked. If it passes (a failure that needs several nodes together, such as error that
    only adds up over many of them), the general search takes over; the checks made so far
    are remembered.
    """
    if not plan.free or plan.index.size < 2:
        return (yield from default(plan))
    lo, hi = 0, plan.index.size
    plan.phase = "windows"
    while hi - lo > 1:
        plan.remaining = max(1, (hi - lo - 1).bit_length())
        mid = (lo + hi) // 2
        if (yield range_mask(lo, mid)):
            hi = mid
        else:
            lo = mid
    plan.remaining = 1
    if (yield range_mask(lo, hi)):
        plan.remaining = 0
        return range_mask(lo, hi)
    return (yield from default(plan))


def numbered(path: str, k: int) -> str:
    """``reduced.onnx`` -> ``reduced_1.onnx`` (the k-th fault's model)."""
    stem, ext = os.path.splitext(path)
    return f"{stem}_{k}{ext or '.onnx'}"


@dataclass
class Fault:
    """One minimal failing subgraph."""

    number: int
    mask: int
    nodes: List[str]
    path: str
    context: int = 0  # the nodes still in play when it was found (earlier faults taken out)
    evidence: dict = field(default_factory=dict)  # filled in by the comparison (error, amplification)


class CompareReducer(Reducer):
    """A :class:`Reducer` for the built-in comparison. Its default search is :func:`guided`
    (the nodes that amplify the error most, each checked alone, when the check runner can
    give that hint), then :func:`localized`."""

    default_mode = "guided (the nodes amplifying the error most, each alone), then localized"
    own_check = False

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.guide: dict = {}  # how the search went: hint, nodes tried, found by (see guide.guided)
        self._ranked: Optional[list] = None
        # when the full model passes: (tensors compared, those out of tolerance) of every tensor
        self.hidden: Optional[tuple] = None
        self._full_mismatch = False  # the full model ran and its outputs differed (see _other_failure)

    def _other_failure(self, kind: str, rows: Optional[Evidence], res: CheckResult, full: bool) -> Optional[str]:
        """The full model ran on the runner under test and its outputs differed: a subgraph the
        runner cannot run at all (an error, no comparison ``rows``) fails otherwise, and is not that fault."""
        if full:
            self._full_mismatch = kind == FAIL and rows is not None and bool(rows.failing)
            return None
        if kind != FAIL or not self._full_mismatch or rows is not None:
            return super()._other_failure(kind, rows, res, full)
        return (
            f"a runner could not run this subgraph ({error_line(res)}), where the full model ran and its outputs "
            "differed"
        )

    def strategy(self, allowed: Optional[int] = None) -> Search:
        if self.cfg.mode is not None:
            return STRATEGIES[self.cfg.mode](self.plan)
        if not self.plan.free or self.cfg.min_good:
            return localized(self.plan)  # (--min-good wants the passing subgraphs a search checks)
        return guided(self.plan, lambda: self._tries(allowed), lambda: localized(self.plan), self.guide)

    def _hint(self) -> list:
        """The nodes ranked by error amplification on the runner under test (once; [] without a hint)."""
        if self._ranked is None:

            from toolkit.reduce.guide import rank

            self._ranked = []
            errors_of = getattr(self.runner, "hint_errors", None)
            if errors_of is None or self.workers:
                return self._ranked
            start = time.monotonic()
            errors = errors_of()
            if not errors:
                return self._ranked
            from toolkit.core.compare.noise import storage_floor

            test = getattr(getattr(self.runner, "opts", None), "test", "")
            self._ranked = rank(self.index, errors, storage_floor(test))
            top = self._ranked[:3]
            self.guide.update(
                hint_seconds=round(time.monotonic() - start, 3),
                ranked=[{"node": self.index.names[i], "amplification": amp, "output_error": err} for i, amp, err in top],
            )
            self.reporter.info(
                f"Hint ({time.monotonic() - start:.2f} s, the model under test with every tensor compared): "
                + ", ".join(_amplifies(self.index.names[i], amp) for i, amp, _e in top)
            )
        return self._ranked

    def _tries(self, allowed: Optional[int]) -> List[int]:
        ranked = [
            i for i, amp, _err in self._hint()
            if amp >= MIN_AMPLIFICATION and (allowed is None or (allowed >> i) & 1)
        ]
        return ranked[:TRIES]

    def _search(self, gen=None) -> Optional[int]:
        return super()._search(gen if gen is not None else self.strategy())

    def _search_from_full(self, outcome) -> Optional[int]:
        mask = super()._search_from_full(outcome)
        seen = getattr(self.runner, "differing_tensors", None)
        if outcome.status == "passed" and seen is not None:
            self.hidden = seen()  # (while the reference is still held)
        return mask


def _amplifies(name: str, amp: float) -> str:
    shown = times(amp)
    return f"{name} amplifies the error without bound" if shown == "unbounded" else f"{name} amplifies the error {shown}"


def _rounding(ev: dict) -> str:
    """"rounding noise", named as the runner's storage rounding (fp16, bf16) when it stores so."""
    storage = ev.get("storage") or "fp32"
    return "rounding noise" if storage == "fp32" else f"{storage} storage rounding noise"


def _noise_line(fault: Fault, what: str = "What remains", then: str = "stopping") -> str:
    ev = fault.evidence
    n = len(fault.nodes)
    return (
        f"{what} fails by {_rounding(ev)} only: {n} node{'s' if n != 1 else ''} ({fault.nodes[0]}"
        f"{', ...' if n > 1 else ''}) off by {ev.get('own_error', 0):.3g} (relative L2) fed exact inputs, within the "
        f"noise bound {ev.get('noise_bound', 0):.3g} for {n} node{'s' if n != 1 else ''}, largest amplification "
        f"{times(ev.get('amplification', 0))}: not a fault (see docs/noise.md); {then}"
    )


class AllFaultsReducer(CompareReducer):
    """A :class:`Reducer` that, once a fault is found, takes it out and searches the rest.

    ``describe_faults(reducer, faults)``, when given, is called for each fault as it is found
    (the check runner open) to fill in its evidence; a failing set after the first fault that the
    noise model calls rounding (``evidence["noise"]``) is not a fault: it is taken out as a fault is
    (kept in :attr:`noise_windows`) and the search goes on, since the rest of the model, judged as a
    whole after each fault, fails by more than rounding. The search stops when the rest passes or
    fails by rounding noise only as a whole (:attr:`noise`).
    """

    def __init__(self, *args, describe_faults: Optional[Callable] = None, judge_rest: Optional[Callable] = None, **kw):
        super().__init__(*args, **kw)
        self._judge_rest = judge_rest  # (reducer, allowed) -> evidence when what remains is rounding, else None
        self.faults: List[Fault] = []
        self.noise: Optional[Fault] = None  # what was left when the search stopped at rounding noise
        self.noise_windows: List[Fault] = []  # failing sets that fail by rounding noise alone, taken out
        self._describe = describe_faults

    def _search(self, gen=None) -> Optional[int]:
        """Each fault in turn, the nodes of those found taken out, until the rest passes or is
        rounding noise; the first fault's nodes (the plain search's result when none was found)."""
        allowed = self.index.full_mask
        while allowed and len(self.faults) + len(self.noise_windows) < MAX_FAULTS:
            fault = self._next_fault(allowed)
            if fault is None:
                break  # (a search that ended on no failing set of its own)
            self._keep_fault(fault)
            allowed &= ~fault.mask
            if not allowed or not self.verdict(allowed):
                break
            if self._rest_is_noise(allowed):
                break
        # (the first fault found is always kept: only a later one can be noise)
        return self.faults[0].mask if self.faults else CompareReducer._search(self)

    def _keep_fault(self, fault: Fault) -> None:
        """Keep ``fault`` (said): as a fault, or, after the first, as a window that fails by rounding noise alone."""
        if fault.number > 1 and fault.evidence.get("noise"):  # (the rest as a whole fails by more)
            fault.path = ""  # (not written: -o's k-th file is the next fault's)
            self.noise_windows.append(fault)
            self.reporter.info(_noise_line(fault, "The next failing subgraph", "searching the rest of the model"))
        else:
            self.faults.append(fault)
            self.reporter.info(f"Fault {fault.number}: {', '.join(fault.nodes)}; searching the rest of the model")

    def _next_fault(self, allowed: int) -> Optional[Fault]:
        """The next fault among the nodes of ``allowed``, its evidence described; None when the
        search ended on no failing set of its own."""
        self.guide.pop("found_by", None)
        mask = self._search_within(allowed)
        if not mask or mask & ~allowed or not self.memo.get(mask):
            return None
        k = len(self.faults) + 1
        nodes = [self.index.describe(i) for i in mask_indices(mask)]
        fault = Fault(k, mask, nodes, numbered(self.cfg.output, k), allowed)
        if "found_by" in self.guide:
            fault.evidence["found_by"] = self.guide["found_by"]
        if self._describe is not None:
            self._describe(self, [fault])
        return fault

    def _rest_is_noise(self, allowed: int) -> bool:
        """Whether what remains (``allowed``) is rounding, nothing to search (said, kept as :attr:`noise`)."""
        if self._judge_rest is None:
            return False
        evidence = self._judge_rest(self, allowed)
        if not evidence:
            return False
        rest = [self.index.describe(i) for i in mask_indices(allowed)]
        self.noise = Fault(len(self.faults) + 1, allowed, rest, "", allowed, dict(evidence))
        self.reporter.info(_noise_line(self.noise))
        return True

    def _search_within(self, allowed: int) -> Optional[int]:
        return CompareReducer._search(self, within(self.strategy(allowed), allowed))

    def run(self):
        outcome = super().run()
        if self.faults:
            outcome.output_written = False  # -o itself is not written: OUT_1, OUT_2, ... are
        return outcome

    def _write_output(self, mask: int) -> None:
        for fault in self.faults:
            self.index.write(self.candidate(fault.mask), fault.path)
        if not self.faults:
            super()._write_output(mask)

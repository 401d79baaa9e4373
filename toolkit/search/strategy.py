"""Search strategies: which node sets to check, in which order.

A strategy is a generator: it yields a node set (an int bit mask over the index's
topological order) and is sent back ``True`` if the check *failed* on it. Its return value
is the smallest failing set it found. The session answers repeated sets from memory, so a
strategy may yield a set twice at no cost.

All of them rest on one observation: in topological order, the *prefix* of the first
``k`` nodes contains a failing node exactly when ``k`` is past it, and the range
``j .. k-1`` contains it exactly when ``j`` is at or before it -- also in branching
graphs (cutting at "the outputs of node k" is not monotone there; prefixes are).

- :func:`bisect`: binary search for the shortest failing prefix (that ends on the last
  node the failure needs) -- with checks narrowed to windows once the failure is shown
  to lie after some node, so they stay small -- then an exponential search from the top
  for the latest failing start (the first node it needs). A single failing node costs
  about ``log2(N) + 2`` checks, the first and the last node included.
- :func:`linear`: drop one node at a time, last first, keeping each drop that still
  fails, until no single drop fails (1-minimal; O(N) checks).
- :func:`default`: :func:`bisect`, then, when the range left has nodes between its two
  ends, a divide-and-conquer search (QuickXplain) for the few of them the failure needs,
  then a check that dropping any end node makes it pass (1-minimal).

No Typer or Rich here.
"""

from __future__ import annotations

import math
import os
from typing import Any, Generator, List, Optional, Protocol, Tuple

from toolkit.search.masks import mask_indices, mask_of, popcount, range_mask

# Set to 1: the search plans on fixed check costs (FIXED_COSTS) instead of measured check times, so
# identical runs make identical checks (reproducible logs); see docs/debug-reduce.md.
FIXED_COSTS_ENV = "TOOLKIT_REDUCE_FIXED_COSTS"
FIXED_COSTS = (0.05, 0.001)  # (seconds per check, seconds per node)

# A search yields a node set (an int mask), or a batch of them (a list) to check at once, is sent
# the verdict(s) back (True: the check failed) and returns its result (a mask, or a tuple for helpers).
Search = Generator[Any, Any, Any]


class SearchIndex(Protocol):
    """What the strategies need of an index: its size, and which members may be dropped
    (a :class:`~toolkit.reduce.graph.GraphIndex`, or a plain set such as debug precision's)."""

    size: int
    full_mask: int

    def sinks(self, mask: int) -> List[int]: ...

    def sources(self, mask: int) -> List[int]: ...


class Plan:
    """What a search may do, and its running estimate of the checks still to come."""

    def __init__(self, index: SearchIndex, *, reduce_inputs: bool = True, reduce_outputs: bool = True):
        self.index = index
        self.reduce_inputs = reduce_inputs
        self.reduce_outputs = reduce_outputs
        self.remaining = 0  # estimate, for progress bars
        self.phase = ""
        self.observations: List[tuple] = []  # (nodes, seconds) of checks run
        # Checks that may run at once (--jobs). Above 1 the searches yield *lists* of node
        # sets, to be checked in parallel, and are sent back the list of verdicts.
        self.width = 1
        self.fixed_costs = os.environ.get(FIXED_COSTS_ENV, "").strip() not in ("", "0")

    def observe(self, nodes: int, seconds: float) -> None:
        """Record how long a check of ``nodes`` nodes took (feeds :meth:`cost_model`); with
        ``TOOLKIT_REDUCE_FIXED_COSTS=1``, the time :data:`FIXED_COSTS` gives it instead."""
        if self.fixed_costs:
            seconds = FIXED_COSTS[0] + FIXED_COSTS[1] * nodes
        if seconds is not None and seconds >= 0:
            self.observations.append((nodes, float(seconds)))

    def cost_model(self):
        """(seconds per check, seconds per node) fitted to the checks so far, or None.

        Least squares over (nodes, seconds); None until two different sizes were seen.
        """
        obs = self.observations
        if len({n for n, _ in obs}) < 2:
            return None
        return _fit_line(obs)

    @property
    def free(self) -> bool:
        """Any subset is allowed (inputs and outputs may both change)."""
        return self.reduce_inputs and self.reduce_outputs


def _fit_line(obs: List[tuple]) -> Tuple[float, float]:
    """(seconds per check, seconds per node): the least-squares line through the (nodes, seconds)
    of ``obs`` (no negative cost)."""
    k = len(obs)
    mx = sum(n for n, _ in obs) / k
    my = sum(t for _, t in obs) / k
    sxx = sum((n - mx) ** 2 for n, _ in obs)
    sxy = sum((n - mx) * (t - my) for n, t in obs)
    per_node = max(sxy / sxx, 0.0) if sxx else 0.0
    per_check = max(my - per_node * mx, 0.0)
    return per_check, per_node


def _log2(n: int) -> int:
    return int(math.ceil(math.log2(n))) if n > 1 else 0


# ---------------------------------------------------------------------- bisect


MAX_RAISES = 3


def last_needed_node(plan: Plan) -> Search:
    """Binary search for ``m``, the last node the failure needs; returns (f_lb, m).

    Each check is the range ``f_lb .. k-1``: it fails exactly when ``m < k`` as long as
    the first needed node ``f`` is at or after ``f_lb`` (proven). ``f_lb`` starts at 0 (plain
    prefixes) and is raised when it pays: after a passing check at ``k`` (so ``m >= k``),
    one check of ``k .. m_ub`` tells whether *all* needed nodes are at or after ``k``; if so
    every later check is a window starting at ``k``, much smaller than a prefix (fewer bytes
    to write and for the check to load). Only when the measured check costs say it saves
    time (:func:`_raise_pays`), at most MAX_RAISES times, and never after one showed that
    the needed nodes straddle ``k``.
    """
    f_lb, m_lb, m_ub = 0, 0, plan.index.size - 1
    raises_left = MAX_RAISES if plan.reduce_inputs else 0  # window checks still allowed
    plan.phase = "bisect (last node)"
    gambled = False
    while m_lb < m_ub:
        if plan.width == 1:
            f_lb, m_lb, m_ub, raises_left = yield from _halve(plan, f_lb, m_lb, m_ub, raises_left)
        elif gambled or not plan.reduce_inputs or m_ub - m_lb > plan.width:
            m_lb, m_ub = yield from _split(plan, f_lb, m_lb, m_ub)
        else:
            gambled = True
            found = yield from _single_failing(plan, m_lb, m_ub)
            if found is not None:
                return found, found
    return f_lb, m_ub


def _halve(plan: Plan, f_lb: int, m_lb: int, m_ub: int, raises_left: int) -> Search:
    """One binary step for ``m`` (a check of ``f_lb .. k-1``), then, when it passed and a raise
    pays, a window check of ``k .. m_ub``; returns the new (f_lb, m_lb, m_ub, raises_left)."""
    plan.remaining = _log2(m_ub - m_lb + 1) + 1
    k = (m_lb + m_ub + 1) // 2
    if (yield range_mask(f_lb, k)):
        return f_lb, m_lb, k - 1, raises_left
    if not raises_left or k >= m_ub or not _raise_pays(plan, f_lb, k, m_ub):
        return f_lb, k, m_ub, raises_left
    if (yield range_mask(k, m_ub + 1)):
        return k, k, m_ub, raises_left - 1
    return f_lb, k, m_ub, 0  # the needed nodes straddle k: no window will do


def _split(plan: Plan, f_lb: int, m_lb: int, m_ub: int) -> Search:
    """One k-ary step for ``m``: split points checked at once, the smallest failing one bounds
    ``m`` from above; returns the new (m_lb, m_ub)."""
    plan.remaining = _log_base(m_ub - m_lb + 1, plan.width + 1) + 1
    ks = split_points(m_lb, m_ub, plan.width)
    verdicts = yield [range_mask(f_lb, k) for k in ks]
    for k, failed in zip(ks, verdicts):
        if failed:
            return m_lb, k - 1
        m_lb = k
    return m_lb, m_ub


def _single_failing(plan: Plan, m_lb: int, m_ub: int) -> Search:
    """The last round of a k-ary search: rather than pin ``m`` down and then search for the first
    needed node, bet on the common case of one node failing alone and check single nodes of the
    interval at once. Returns the one that fails (the whole answer: under the monotone failure
    every search here assumes, it is what one job would find), or None (the k-ary rounds then go
    on as if nothing happened)."""
    singles = list(range(m_ub, m_lb - 1, -1))[: plan.width]
    verdicts = yield [range_mask(k, k + 1) for k in singles]
    return next((k for k, failed in zip(singles, verdicts) if failed), None)


def split_points(lo: int, hi: int, width: int) -> List[int]:
    """Up to ``width`` points ``k`` in ``lo+1 .. hi``, evenly spaced: checking "is the
    boundary below k" at all of them leaves an interval ``width + 1`` times smaller."""
    span = hi - lo + 1
    ks: List[int] = []
    for i in range(1, width + 1):
        k = lo + (i * span + width) // (width + 1)
        k = min(max(k, lo + 1), hi)
        if not ks or k > ks[-1]:
            ks.append(k)
    return ks


def _log_base(n: int, base: int) -> int:
    steps = 0
    while n > 1:
        n = -(-n // base)
        steps += 1
    return steps


def _raise_pays(plan: Plan, f_lb: int, k: int, m_ub: int) -> bool:
    """Is one check of ``k .. m_ub`` likely to save more time than it costs?

    It would take ``k - f_lb`` nodes off each of the ~log2(m_ub - k) checks still to come.
    Decided on the costs measured so far (so a slow fixed-cost check, like an interpreter
    start-up or a person answering, never pays for it).
    """
    model = plan.cost_model()
    if model is None:
        return False
    per_check, per_node = model
    steps = _log2(m_ub - k + 1) + 1
    saving = per_node * (k - f_lb) * steps
    cost = per_check + per_node * (m_ub + 1 - k)
    return saving > 2.0 * cost


def latest_failing_start(plan: Plan, lo: int, stop: int) -> Search:
    """Largest ``j`` with range ``j .. stop-1`` failing, knowing ``lo .. stop-1`` fails.

    Exponential search down from ``stop - 1`` (failures usually need few nodes), then
    binary search between the last failing and first passing start (with
    ``plan.width > 1``: several steps of each at once).
    """
    plan.phase = "bisect (first node)"
    lo, hi = yield from _search_down(plan, lo, stop)
    while hi - lo > 1:
        if plan.width > 1:
            lo, hi = yield from _split_start(plan, lo, hi, stop)
            continue
        plan.remaining = _log2(hi - lo)
        mid = (lo + hi) // 2
        if (yield range_mask(mid, stop)):
            lo = mid
        else:
            hi = mid
    return lo


def _search_down(plan: Plan, lo: int, stop: int) -> Search:
    """The exponential search down from ``stop - 1``: starts ``stop - 1, stop - 2, stop - 4, ...``
    above ``lo``, checked in turn (``plan.width`` at once) until one fails; returns (lo, hi):
    the range from ``lo`` fails, the one from ``hi`` passes."""
    starts = [stop - step for step in _powers_of_two(stop - lo - 1)]
    hi = stop  # the empty range passes
    while starts:
        js, starts = starts[: plan.width], starts[plan.width :]
        verdicts = yield from _check_starts(plan, lo, js, stop)
        found = _first_failing_start(js, verdicts, hi)
        if found is not None:
            return found
        hi = js[-1]
    return lo, hi


def _first_failing_start(js: List[int], verdicts: List[bool], hi: int) -> Optional[Tuple[int, int]]:
    """(the first failing start of ``js``, the closest passing start above it, or ``hi``), or None
    when every start of ``js`` passed."""
    failing = [j for j, failed in zip(js, verdicts) if failed]
    if not failing:
        return None
    return failing[0], min([hi] + [j for j, failed in zip(js, verdicts) if not failed and j > failing[0]])


def _check_starts(plan: Plan, lo: int, js: List[int], stop: int) -> Search:
    """The verdicts on the ranges from each start of ``js`` to ``stop`` (checked at once, or the
    one start alone when checks run one at a time)."""
    if plan.width > 1:
        plan.remaining = 1 + _log_base(js[-1] - lo + 1, plan.width + 1)
        return (yield [range_mask(j, stop) for j in js])
    plan.remaining = 1 + _log2(js[0] - lo)
    return [(yield range_mask(js[0], stop))]


def _powers_of_two(limit: int) -> List[int]:
    """1, 2, 4, ... up to ``limit``."""
    return [1 << k for k in range(limit.bit_length())] if limit > 0 else []


def _split_start(plan: Plan, lo: int, hi: int, stop: int) -> Search:
    """One k-ary step between the failing start ``lo`` and the passing start ``hi``; returns the
    new (lo, hi)."""
    plan.remaining = _log_base(hi - lo, plan.width + 1)
    mids = split_points(lo, hi - 1, plan.width)
    verdicts = yield [range_mask(mid, stop) for mid in mids]
    for mid, failed in zip(mids, verdicts):
        if not failed:
            return lo, mid
        lo = mid
    return lo, hi


def bisect(plan: Plan) -> Search:
    """The last needed node (prefix/window search), then the first (search down from it)."""
    n = plan.index.size
    stop = n
    start = 0
    if plan.reduce_outputs and n > 1:
        start, last = yield from last_needed_node(plan)
        stop = last + 1
    if plan.reduce_inputs and stop - start > 1:
        start = yield from latest_failing_start(plan, start, stop)
    plan.remaining = 0
    return range_mask(start, stop)


# ---------------------------------------------------------------------- linear / 1-minimal


def _drop_order(plan: Plan, mask: int, interior: bool) -> List[int]:
    """Nodes to try dropping: last sinks first, then first sources, then (if allowed) the rest."""
    index = plan.index
    sinks = index.sinks(mask) if plan.reduce_outputs else []
    sources = index.sources(mask) if plan.reduce_inputs else []
    inner = mask_indices(mask)[::-1] if interior and plan.free else []
    return list(dict.fromkeys(sorted(sinks, reverse=True) + sorted(sources) + inner))


def drop_loop(plan: Plan, mask: int, *, interior: bool, phase: str = "drop loop") -> Search:
    """Drop single nodes while the rest still fails; ends 1-minimal (every drop verified).

    ``interior``: besides end nodes (sinks and sources), also try inner nodes. Nodes whose
    drop passed are not retried until nothing else is left; then they are re-checked
    against the final set, so the result is verified, not assumed.
    """
    plan.phase = phase
    rejected: dict = {}  # node -> mask at which dropping it passed
    while True:
        fresh, stale = _untried(_drop_order(plan, mask, interior), rejected, mask)
        plan.remaining = len(fresh) + len(stale)
        drops = _drop_batched if plan.width > 1 else _drop_serial
        smaller = yield from drops(plan, mask, fresh or stale, rejected)
        if smaller is not None:
            mask = smaller
        elif not fresh:  # every candidate was tried against this very mask (the stale ones just now)
            plan.remaining = 0
            return mask


def _untried(order: List[int], rejected: dict, mask: int) -> Tuple[List[int], List[int]]:
    """(the nodes of ``order`` never tried, those whose drop passed on another mask than ``mask``)."""
    fresh = [i for i in order if i not in rejected]
    stale = [i for i in order if rejected.get(i, mask) != mask]
    return fresh, stale


def _drop_serial(plan: Plan, mask: int, todo: List[int], rejected: dict) -> Search:
    """Drops of ``todo`` checked one at a time: the first smaller mask that still fails, or
    None (each drop that passed is recorded in ``rejected``)."""
    for i in todo:
        smaller = mask & ~(1 << i)
        if smaller and (yield smaller):
            rejected.pop(i, None)
            return smaller
        rejected[i] = mask
    return None


def _drop_batched(plan: Plan, mask: int, todo: List[int], rejected: dict) -> Search:
    """:func:`_drop_serial` with ``plan.width`` drops checked at once; the first that still
    fails is taken, as one at a time would."""
    tries = _droppable(mask, todo, rejected)
    for start in range(0, len(tries), plan.width):
        batch = tries[start : start + plan.width]
        verdicts = yield [mask & ~(1 << i) for i in batch]
        for i, failed in zip(batch, verdicts):
            if failed:
                rejected.pop(i, None)
                return mask & ~(1 << i)
            rejected[i] = mask
    return None


def _droppable(mask: int, todo: List[int], rejected: dict) -> List[int]:
    """The nodes of ``todo`` whose drop leaves nodes to check; the others are recorded in
    ``rejected`` (nothing left to check)."""
    tries = []
    for i in todo:
        if mask & ~(1 << i):
            tries.append(i)
        else:
            rejected[i] = mask
    return tries


def linear(plan: Plan, mask: Optional[int] = None) -> Search:
    """One node at a time (inner nodes too when allowed), until no single drop fails."""
    if mask is None:
        mask = plan.index.full_mask
    return (yield from drop_loop(plan, mask, interior=True, phase="linear"))


def quickxplain(plan: Plan, background: int, check_background: bool, candidates: List[int]) -> Search:
    """The part of ``candidates`` the failure needs beside ``background`` (Junker's QuickXplain).

    Knowing ``background + candidates`` fails, finds a minimal subset X with
    ``background + X`` failing in about ``2 k log(n/k)`` checks for ``k`` needed nodes.
    Returns X as a list of node positions.
    """
    if check_background and background and (yield background):
        return []
    if len(candidates) <= 1:
        return list(candidates)
    half = len(candidates) // 2
    first, second = candidates[:half], candidates[half:]
    plan.remaining = max(plan.remaining, 2 * _log2(len(candidates)))
    x2 = yield from quickxplain(plan, background | mask_of(first), True, second)
    x1 = yield from quickxplain(plan, background | mask_of(x2), bool(x2), first)
    return x1 + x2


def default(plan: Plan) -> Search:
    """Bisect, keep only the inner nodes the failure needs, then verify 1-minimality."""
    mask = yield from bisect(plan)
    nodes = mask_indices(mask)
    if mask == plan.index.full_mask and len(nodes) > 2 and not (yield mask):
        return mask  # (the bisect assumed the whole set fails: it does not, so there is nothing to thin)
    if plan.free and len(nodes) > 2:
        plan.phase = "QuickXplain"
        ends = mask_of([nodes[0], nodes[-1]])
        inner = nodes[1:-1]
        keep = yield from quickxplain(plan, ends, True, inner)
        smaller = ends | mask_of(keep)
        if smaller != mask and (yield smaller):  # verified, not assumed
            mask = smaller
    if popcount(mask) > 1:
        mask = yield from drop_loop(plan, mask, interior=False)
    plan.remaining = 0
    return mask


STRATEGIES = {"bisect": bisect, "linear": linear, None: default, "default": default}

"""TOOLKIT_REDUCE_FIXED_COSTS=1: the same checks on identical reruns, whatever the check times."""

from __future__ import annotations

from toolkit.search.masks import popcount
from toolkit.search.strategy import FIXED_COSTS_ENV, Plan, default


class Line:
    """A plain set of n nodes (each may be dropped)."""

    def __init__(self, n):
        self.size = n
        self.full_mask = (1 << n) - 1

    def sinks(self, mask):
        return [mask.bit_length() - 1] if mask else []

    def sources(self, mask):
        return [(mask & -mask).bit_length() - 1] if mask else []


def _checks(n, culprit, seconds_of):
    """The node sets a default search checks when only ``culprit`` fails, each check taking
    ``seconds_of(nodes)`` (as measured)."""
    plan = Plan(Line(n))
    search = default(plan)
    asked = []
    mask = next(search)
    try:
        while True:
            asked.append(mask)
            plan.observe(popcount(mask), seconds_of(popcount(mask)))
            mask = search.send(bool((mask >> culprit) & 1))
    except StopIteration as stop:
        assert stop.value == 1 << culprit
    return asked


def _slow_nodes(k):
    return 0.001 + 0.01 * k  # checks cost by the node: narrowing to windows pays


def _slow_start(k):
    return 2.0 + 1e-6 * k  # a fixed start-up: it never pays


def test_measured_times_change_the_checks_and_fixed_costs_do_not(monkeypatch):
    monkeypatch.delenv(FIXED_COSTS_ENV, raising=False)
    assert _checks(512, 300, _slow_nodes) != _checks(512, 300, _slow_start)  # why the count may vary
    monkeypatch.setenv(FIXED_COSTS_ENV, "1")
    assert _checks(512, 300, _slow_nodes) == _checks(512, 300, _slow_start)

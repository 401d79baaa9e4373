"""A check that fails whatever the model: ``--check false``, or golden values of other inputs
than the check feeds. Such a check fails on every subgraph, so a reduce "finds" the first node it
tries. When the search ends at one node without a single passing check, :func:`probe` checks
another node alone and then the model without that node: when both fail too, the result blames nothing and
the run stops (:class:`~toolkit.reduce.config.CannotJudge`, exit 3, ``-o`` not written).

No Typer or Rich here.
"""

from __future__ import annotations

from typing import Optional

from toolkit.core.compare.noise import evidence_is_rounding, precision_of
from toolkit.reduce.config import CannotJudge
from toolkit.reduce.judging import passed_masks
from toolkit.search.masks import mask_indices, popcount, range_mask
from toolkit.reduce.signature import RULE, TIMEOUT_KIND, quoted_few


def probe(reducer, mask: Optional[int]) -> None:
    """Raise CannotJudge when the check fails on node set ``mask`` (one node), on the model
    without it, and on another node alone, having passed nothing."""
    idx = reducer.index
    if mask is None or not _one_node_of_many(reducer, mask) or not _may_fail_anyway(reducer, mask):
        return
    node = mask_indices(mask)[0]
    other = idx.size - 1 if node != idx.size - 1 else 0
    if reducer.plan is not None:
        reducer.plan.phase = "does the check depend on the model"
    if not reducer.verdict(1 << other):
        return  # (one node: a cheap check; and --min-good has a passing model)
    if not reducer.verdict(idx.full_mask & ~mask):
        return
    raise _cannot_judge(reducer, node, other)


def _one_node_of_many(reducer, mask: int) -> bool:
    """Is ``mask`` one node of a model of several, judged by the user's own check that can still run?"""
    return reducer.runner is not None and popcount(mask) == 1 and reducer.index.size >= 2 and reducer.own_check


def _cannot_judge(reducer, node: int, other: int) -> CannotJudge:
    """The error that the check fails on ``node`` alone, on ``other`` alone and on the model without ``node``."""
    names = reducer.index.names
    return CannotJudge(
        f"the check fails on every subgraph tried, down to single nodes ({names[node]} alone, "
        f"{names[other]} alone, the model without {names[node]}; it passed on none): it does not depend on "
        f"the model, so no node can be blamed. What it reported: {_what(reducer)}. A check must pass on a model "
        "without the failure: feed it the inputs its golden values were computed on (--load-inputs), make it "
        "fail only on the failure (--fail-regex, --fail-code), or give tolerances above the rounding every "
        "node does"
    )


def _may_fail_anyway(reducer, mask: int) -> bool:
    """Whether the check's failure on ``mask`` may not depend on the model at all: the check judged
    it itself, not by rounding, and passed on nothing."""
    if reducer.signature is None or reducer.signature.kind in (RULE, TIMEOUT_KIND):
        return False  # (the user said what failing is: --fail-regex, --fail-code, --any-failure; a slow check)
    ev = reducer.evidence.get(mask) or reducer.evidence.get(reducer.index.full_mask)
    w = ev.worst if ev is not None else None
    if w is not None and evidence_is_rounding(w.max_abs, w.max_rel, w.atol):
        return False  # (every node failing by rounding: the noise warnings say so)
    return not passed_masks(reducer.memo, reducer.broken_masks)  # (having passed on something, it depends on the model)


def _what(reducer) -> str:
    ev = reducer.evidence.get(reducer.index.full_mask)
    if ev is not None and ev.worst is not None:
        names = quoted_few([t.name for t in ev.failing])
        return f"it compared {names} and found {ev.describe()}"
    sig = reducer.signature
    return f"{sig.describe()}, with no comparison in its output" if sig is not None else "a failure every time"


def first_alone(reducer, mask: Optional[int]) -> Optional[str]:
    """For a one-node result: whether it is the first node in topological order that fails alone
    (from the verdicts known), else the earlier one that does; None for a larger result."""
    if mask is None or popcount(mask) != 1:
        return None
    idx, node = reducer.index, mask_indices(mask)[0]
    name = idx.names[node]
    if node == 0:
        return f"{name} is the first node in topological order"
    earlier = next((i for i in range(node) if _alone(reducer, i)), None)
    if earlier is not None:
        return (f"{idx.names[earlier]} (node {earlier}) also fails alone and comes before {name} in topological "
                "order: the error may start there")
    return _first_known_alone(reducer, node)


def _first_known_alone(reducer, node: int) -> str:
    """For a failing ``node`` with no earlier node known to fail alone: whether every earlier one is
    known to pass alone (checking the window before it, with exact inputs, when not)."""
    name = reducer.index.names[node]
    exact = not reducer.own_check  # (the built-in comparison feeds exact inputs: a passing set's nodes pass alone)
    unknown = _unjudged_before(reducer, node, exact)
    if not unknown:
        return f"{name} is the first node in topological order that fails alone (every earlier one passes)"
    if exact:
        return _first_by_windows(reducer, node)
    return (f"{name} is the first failing node the search found; {unknown} earlier node(s) were not checked "
            "alone, so one of them may fail alone too")


def _unjudged_before(reducer, node: int, exact: bool) -> int:
    """How many nodes before ``node`` no verdict judged alone (with ``exact`` inputs, a node of a
    passing set passes alone)."""
    passes = passed_masks(reducer.memo, reducer.broken_masks)
    unknown = 0
    for i in range(node):
        judged = _alone(reducer, i) is not None
        if not judged and not (exact and any(m >> i & 1 for m in passes)):
            unknown += 1
    return unknown


def _alone(reducer, i: int) -> Optional[bool]:
    """The verdict on node ``i`` alone (True: it fails), None when no check judged it (a broken
    check judged nothing)."""
    if (1 << i) in reducer.broken_masks:
        return None
    return reducer.memo.get(1 << i)


def _first_by_windows(reducer, node: int) -> str:
    """With exact inputs (the built-in comparison) a window of nodes passes when none of its nodes
    fails alone: check the window before ``node`` (one check)."""
    names = reducer.index.names
    if reducer.plan is not None:
        reducer.plan.phase = "first node failing alone"
    window = range_mask(0, node)
    failed = reducer.verdict(window)
    if window in reducer.broken_masks:  # (counted as a pass, but it judged nothing)
        return (f"{names[node]} is the first failing node the search found; the check could not judge the {node} "
                "node(s) before it (it was broken on them), so one of them may fail alone too")
    if not failed:
        return (f"{names[node]} is the first node in topological order that fails alone (the {node} before it "
                "pass together, fed exact inputs)")
    return (f"the {node} node(s) before {names[node]} fail too, fed exact inputs (another fault, or "
            f"{_rounding_words(reducer)} at these tolerances): --all-faults lists every faulty subgraph")


def _rounding_words(reducer) -> str:
    """"rounding", or the storage's rounding when the runner under test stores fp16/bf16 tensors."""
    opts = getattr(getattr(reducer, "runner", None), "opts", None)
    precision = precision_of(getattr(opts, "test", "") or "")
    return "rounding" if precision == "fp32" else f"{precision} storage rounding (the runner under test stores {precision})"

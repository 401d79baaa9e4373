"""The guided search of ``debug reduce --compare``: try the likeliest culprits first.

The reference already holds every tensor. The model under test runs once more with every
tensor marked and fed the reference's inputs (cheap on ONNX-Runtime); each node gets its
**error amplification** (the relative L2 error of its outputs over that of its inputs, as in
``run``'s layerwise diagnosis, :func:`toolkit.core.compare.noise.amplification`). A faulty node
has exact inputs and a wrong output, so it ranks first.

:func:`guided` then checks the top-ranked nodes, each alone, fed the reference's values. The
first that fails is the result: a single failing node is minimal by itself. The ranking is
only a hint: every answer comes from a real check of the subgraph, and if every hinted node
passes alone (a failure that needs several nodes together, or a misleading hint), the normal
search takes over with every verdict so far remembered.

No Typer or Rich here.
"""

from __future__ import annotations

from typing import Callable, Dict, List, Mapping, Optional, Set, Tuple

from toolkit.core.compare.noise import FLOOR, amplification
from toolkit.search.strategy import Plan, Search

TRIES = 3  # hinted nodes checked alone before the normal search
MIN_AMPLIFICATION = 2.0  # a node amplifying less than this is not worth a check of its own


def rank(index, errors: Mapping[str, float], floor: Optional[float] = None) -> List[Tuple[int, float, float]]:
    """``(node position, amplification, output error)`` for every node of ``index`` with a compared
    output, largest amplification first. ``errors``: ``{tensor: rel_l2}``. A tensor not compared
    carries its producer's input error; graph inputs and weights (fed exactly) have none."""

    floor = FLOOR if floor is None else floor  # (the runner's storage rounding step: storage_floor)

    est: Dict[str, float] = {}
    unseen: Set[str] = set()  # tensors whose error is an estimate (an uncompared producer)
    out: List[Tuple[int, float, float]] = []
    estimated: Set[int] = set()  # nodes that read such tensors
    for i in range(index.size):  # topological order
        in_err, compared, worst = _node_errors(index, i, errors, est)
        if not compared:
            unseen.update(index.writes[i])
            continue
        if any(t in unseen for t in index.reads[i]):
            estimated.add(i)
        out.append((i, amplification(worst, in_err, floor), worst))
    # a node reading uncompared tensors (a converter's Casts) has an estimated, inflated ratio: last
    out.sort(key=lambda r: (r[0] in estimated, -r[1], r[0]))
    return out


def _node_errors(index, i: int, errors: Mapping[str, float], est: Dict[str, float]) -> Tuple[float, list, float]:
    """(input error, compared output errors, output error) of node ``i``: its input error is the
    largest error ``est`` holds of what it reads; each of its outputs gets its compared error
    in ``est``, or (not compared) the worst compared one, or the input error."""
    in_err = max((est.get(t, 0.0) for t in index.reads[i]), default=0.0)
    compared = [errors[t] for t in index.writes[i] if t in errors]
    worst = max(compared, default=in_err)
    for t in index.writes[i]:
        est[t] = errors.get(t, worst)
    return in_err, compared, worst


def guided(plan: Plan, tries: Callable[[], List[int]], then: Callable[[], Search], state: dict) -> Search:
    """Check each node of ``tries()`` alone (computed when the search starts, i.e. once the full
    model is known to fail); the first that fails is the result. Otherwise ``then()`` (the
    normal search). ``state["found_by"]`` says which found it."""
    order = tries()
    state.setdefault("tried", 0)
    if order:
        plan.phase = "guided"
    for k, i in enumerate(order):
        plan.remaining = len(order) - k
        state["tried"] += 1
        if (yield 1 << i):
            plan.remaining = 0
            state["found_by"] = "guided"
            return 1 << i
    state["found_by"] = "search"
    return (yield from then())

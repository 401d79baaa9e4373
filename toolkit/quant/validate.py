"""Held-out validation of a Q/DQ search's result.

A result found on a few input sets may pass them and fail the next one. The inputs are split:
the search runs on one part, and its result (and the quantized model as it is, for comparison) is
checked once on the rest, the *held-out* sets, which the search never saw. Held-out sets come
from ``--validate-inputs FILE`` when given; else from the loaded inputs (every fourth set of four
or more, or ``--held-out N``); else, for generated inputs, from further generated sets (other
seeds).

A result that passes all of n held-out sets bounds its failure rate only below
``1 - 0.05 ** (1 / n)`` at 95% confidence (3/n for large n): 59 sets to bound it below 5%.

No Typer or Rich here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import List, Mapping, Optional, Sequence, Tuple

CONFIDENCE = 0.95
TARGET_RATE = 0.05  # the failure rate a held-out check should be able to bound
GENERATED = 4  # held-out sets generated beside generated search inputs (at least)


def needed(rate: float = TARGET_RATE, confidence: float = CONFIDENCE) -> int:
    """Held-out sets that must all pass to bound the failure rate below ``rate``."""
    return int(math.ceil(math.log(1 - confidence) / math.log(1 - rate)))


def failure_bound(count: int, confidence: float = CONFIDENCE) -> float:
    """The failure rate that ``count`` passing held-out sets bound (at ``confidence``)."""
    return 1.0 if count <= 0 else 1 - (1 - confidence) ** (1 / count)


@dataclass
class HeldOut:
    """The held-out check of a search's result."""

    source: str  # "file" (--validate-inputs), "split" (of the loaded inputs), "generated"
    count: int  # held-out input sets
    passed: int = 0  # of them, where the result passes
    before_passed: int = 0  # where the quantized model as it is passes
    detail: str = ""  # the worst comparison of the result on them
    checked: bool = False
    scaled: bool = False  # the result checked is the model with the suggested scales (--apply-scales)
    # where the result does not hold: on how many the model passes with every searchable pair in float
    # (below ``count``: what stays quantized, or the tolerance, fails there, not the pairs)
    all_float_passed: Optional[int] = None

    @property
    def holds(self) -> bool:
        return self.checked and self.count > 0 and self.passed == self.count

    @property
    def bound(self) -> float:
        return failure_bound(self.count)

    @property
    def reachable(self) -> bool:
        """Whether more pairs in float can be expected to make it hold: every pair in float passes all
        held-out sets (or that was not checked). Else only errors that cancel could."""
        return self.all_float_passed is None or self.all_float_passed >= self.count

    @property
    def few(self) -> bool:
        """Too few to bound the failure rate below :data:`TARGET_RATE`."""
        return self.count < needed()

    def as_dict(self) -> dict:
        return {
            "source": self.source, "count": self.count, "passed": self.passed, "holds": self.holds,
            "quantized_passed": self.before_passed, "detail": self.detail,
            "failure_rate_bound": round(self.bound, 4) if self.holds else None, "needed": needed(),
            "scaled": self.scaled, "all_float_passed": self.all_float_passed,
        }


def split_count(total: int, held_out: Optional[int]) -> int:
    """How many of ``total`` loaded input sets are held out: ``held_out`` when given (at least one
    set is left to search), else a quarter of four or more."""
    if held_out is not None:
        return max(0, min(held_out, total - 1))
    return total // 4 if total >= 4 else 0


def split(feeds: Sequence[Mapping], count: int) -> Tuple[List[Mapping], List[Mapping]]:
    """(search, held-out): ``count`` sets spread evenly over ``feeds`` (the last of each stretch)."""
    if count <= 0:
        return list(feeds), []
    step = len(feeds) / count
    held = {min(len(feeds) - 1, int((j + 1) * step) - 1) for j in range(count)}
    return ([f for k, f in enumerate(feeds) if k not in held], [f for k, f in enumerate(feeds) if k in held])

"""What every search answers besides its result: how it ended and what it cost.

``debug reduce``'s :class:`toolkit.reduce.config.Outcome` and ``debug precision``'s
:class:`toolkit.precision.search.PrecisionOutcome` inherit these fields: one list of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass
class SearchTally:
    status: str  # how the search ended (each search names its own statuses)
    checks: int = 0  # checks run
    remembered: int = 0  # sets answered from memory or a replay file instead of a check
    seconds: float = 0.0
    broken: int = 0  # checks that could not judge (counted as the search says)
    one_minimal: bool = False  # dropping any one element of the result was checked to change the verdict
    output_written: bool = False
    replay_path: Optional[str] = None  # where the verdicts were saved

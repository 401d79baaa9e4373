"""What a run returns: result sets, comparisons, validation problems."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Dict, List, Mapping, Optional

if TYPE_CHECKING:  # pragma: no cover
    from toolkit.core.compare.arrays import PairComparison, ValidationProblem


@dataclass
class ResultSet:
    """One runner's iterations, live or loaded from a file.

    A live runner's outputs are streamed (saved, compared, validated) one iteration at a
    time and not kept: its ``iterations`` is empty unless ``RunOptions.keep_outputs``;
    ``count`` and ``names`` (the first iteration's output names) describe them. A loaded
    set holds its (lazy) iterations.
    """

    label: str
    iterations: List[Mapping]
    runtimes: List[float] = field(default_factory=list)
    runner_name: str = ""
    source: Optional[str] = None  # the file it was loaded from
    count: int = 0
    names: List[str] = field(default_factory=list)
    precision: Optional[str] = None  # the reduced precision the runner computed in ("bf16"), when it says

    def __post_init__(self) -> None:
        if self.iterations:
            self.count = len(self.iterations)
            self.names = list(self.iterations[0])

    def add(self, k: int, outs: Mapping, secs: float, *, keep: bool) -> None:
        """Record live iteration ``k``: its time, its names (the first one's), its outputs when kept."""
        self.runtimes.append(secs)
        if k == 0:
            self.names = list(outs)
        if keep:
            self.iterations.append(outs)


@dataclass
class RunReport:
    results: List[ResultSet]  # live runs first, then loaded ones
    comparisons: List["PairComparison"]
    problems: List["ValidationProblem"]
    diagnoses: List = field(default_factory=list)  # per comparison: toolkit.run.diagnosis.Diagnosis or None
    qdq_tables: List = field(default_factory=list)  # per comparison: Q/DQ pair statistics (toolkit.quant.table)

    @property
    def passed(self) -> bool:
        return not self.problems and all(c.passed for c in self.comparisons)

    def mismatched(self) -> List[str]:
        names: Dict[str, None] = {}
        for c in self.comparisons:
            for n in c.mismatched():
                names.setdefault(n, None)
        for p in self.problems:
            names.setdefault(p.name, None)
        return list(names)

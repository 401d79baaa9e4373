"""Tolerances: what the tolerance options (declared in :mod:`toolkit.core.shared_options`) and their
companions ask for, parsed once into one :class:`Tolerances` (numbers, statistics, per output name).

No numpy here: the command line builds the typed value where it reads the options, before any
comparison module is loaded. :mod:`toolkit.core.compare.arrays` applies it to arrays.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from toolkit.core.errors import UsageError
from toolkit.core.shared_options import ATOL_FLAG, RTOL_FLAG, STAT_FLAG
from toolkit.core.meta import parse_named_values

DEFAULT_ATOL = 1e-5
DEFAULT_RTOL = 1e-5
ERROR_STATS = ("elemwise", "max", "mean", "median", "quantile")
DEFAULT_QUANTILE = 0.99
# The values of one command-line option as given (``["1e-3", "out:1e-2"]``), or None.
OptionValues = Optional[Sequence[str]]
# A typed tolerance: one number for every output, or one per output name (None: the default).
TolValue = Union[None, float, Mapping[str, float]]


def _parse_stat(text: str) -> str:
    key = text.strip().lower()
    if key not in ERROR_STATS:
        raise ValueError(f"use one of: {', '.join(ERROR_STATS)}")
    return key


def _parse_quantile(text: str) -> float:
    val = float(text)
    if not 0 <= val <= 1:
        raise ValueError("quantiles are numbers in [0, 1]")
    return val


COMPARE_FUNCS = ("simple", "indices")


def _parse_compare_func(values) -> str:
    if isinstance(values, str):
        values = [values]
    funcs = [v.strip().lower() for v in values or []]
    for f in funcs:
        if f not in COMPARE_FUNCS:
            raise UsageError(
                f"--compare-func {f}: toolkit compares with 'simple' (tolerances, the default) or 'indices' "
                "(index arrays, e.g. after --postprocess top-K)"
            )
    if len(set(funcs)) > 1:
        raise UsageError("--compare-func: give one comparison function")
    return funcs[0] if funcs else "simple"


def _parse_index_tol(text: str) -> int:
    val = int(text)
    if val < 0:
        raise ValueError("index tolerances are integers >= 0")
    return val


def _parse_topk(text: str) -> Tuple[int, int]:
    """``top-5`` or ``top-5,axis=1`` -> (5, axis)."""

    m = re.fullmatch(r"\s*top-(\d+)\s*(?:,\s*axis\s*=\s*(-?\d+)\s*)?", text)
    if not m or int(m.group(1)) < 1:
        raise ValueError("use top-K or top-K,axis=N (K >= 1)")
    return int(m.group(1)), int(m.group(2)) if m.group(2) is not None else -1


def parse_postprocess(specs: Sequence[str]):
    """``--postprocess`` values: ``top-K[,axis=N]`` for every output, ``name:top-K[,axis=N]`` for one."""

    glob: Optional[Tuple[int, int]] = None
    per: Dict[str, Tuple[int, int]] = {}
    for spec in specs:
        name, sep, func = spec.rpartition(":")
        if not func.strip().startswith("top-") and sep:
            name, func = "", spec
        try:
            value = _parse_topk(func)
        except ValueError as exc:
            raise UsageError(f"--postprocess {spec}: {exc}; toolkit supports the top-K post-processing only") from None
        if name:
            per[name] = value
        else:
            glob = value
    return glob, per


def _parse_tol(text: str) -> float:
    val = float(text)
    if math.isnan(val) or val < 0:
        raise ValueError("tolerances are numbers >= 0")
    return val


def _number_tol(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"tolerances are numbers, not {type(value).__name__}")
    return _parse_tol(value)  # type: ignore[arg-type]


def _typed(value, parse: Callable, what: str) -> Tuple[Any, Dict[str, Any]]:
    """(the value for every output, {name: value}) of a typed option (UsageError when malformed)."""
    pairs = value.items() if isinstance(value, Mapping) else [(None, value)] if value is not None else []
    out: Dict[Optional[str], Any] = {}
    for name, v in pairs:
        try:
            out[name] = parse(v)
        except (TypeError, ValueError) as exc:
            where = f" for '{name}'" if name is not None else ""
            raise UsageError(f"{what}{where}: {v!r}: {exc}") from None
    return out.pop(None, None), {str(k): v for k, v in out.items()}


@dataclass
class Tolerances:
    """Global and per-output tolerances and error statistic."""

    atol: Optional[float] = None  # None: default (DEFAULT_ATOL for floats, exact for ints)
    rtol: Optional[float] = None
    check_error_stat: str = "elemwise"
    per_atol: Dict[str, float] = field(default_factory=dict)
    per_rtol: Dict[str, float] = field(default_factory=dict)
    per_stat: Dict[str, str] = field(default_factory=dict)
    error_quantile: float = DEFAULT_QUANTILE
    per_quantile: Dict[str, float] = field(default_factory=dict)
    # post-processing before comparison: (k, axis) of a top-K, globally and per output
    topk: Optional[Tuple[int, int]] = None
    per_topk: Dict[str, Tuple[int, int]] = field(default_factory=dict)
    compare_func: str = "simple"  # or "indices" (index arrays, e.g. top-K results)
    index_tolerance: int = 0
    per_index_tolerance: Dict[str, int] = field(default_factory=dict)
    # --no-shape-check: outputs of different shapes but the same number of elements are compared
    # element by element (B reshaped to A's shape)
    shape_check: bool = True
    # the per-output names were checked against every tensor of a whole model already (debug reduce
    # --compare): a run of a part of it applies the names its tensors have and ignores the others
    names_checked: bool = False

    @classmethod
    def parse(
        cls,
        atol: OptionValues = None,
        rtol: OptionValues = None,
        check_error_stat: OptionValues = None,
        error_quantile: OptionValues = None,
        postprocess: OptionValues = None,
        compare_func: OptionValues = None,
        index_tolerance: OptionValues = None,
    ) -> "Tolerances":
        """From option lists such as ``["1e-3", "out:1e-2"]`` (UsageError when malformed)."""
        ga, pa = parse_named_values(atol or [], _parse_tol, f"{ATOL_FLAG} value")
        gr, pr = parse_named_values(rtol or [], _parse_tol, f"{RTOL_FLAG} value")
        gs, ps = parse_named_values(check_error_stat or [], _parse_stat, f"{STAT_FLAG} value")
        gq, pq = parse_named_values(error_quantile or [], _parse_quantile, "--error-quantile value")
        gk, pk = parse_postprocess(postprocess or [])
        gi, pi = parse_named_values(index_tolerance or [], _parse_index_tol, "--index-tolerance value")
        func = _parse_compare_func(compare_func)
        return cls(
            atol=ga, rtol=gr, check_error_stat=gs or "elemwise", per_atol=pa, per_rtol=pr, per_stat=ps,
            error_quantile=DEFAULT_QUANTILE if gq is None else gq, per_quantile=pq, topk=gk, per_topk=pk,
            compare_func=func, index_tolerance=gi or 0, per_index_tolerance=pi,
        )

    @classmethod
    def of(
        cls, *, atol: TolValue = None, rtol: TolValue = None,
        check_error_stat: Union[None, str, Mapping[str, str]] = None,
    ) -> "Tolerances":
        """From typed values: a number (a statistic) for every output, or a mapping by output
        name (UsageError for a negative or non-numeric tolerance or an unknown statistic)."""
        ga, pa = _typed(atol, _number_tol, "atol")
        gr, pr = _typed(rtol, _number_tol, "rtol")
        gs, ps = _typed(check_error_stat, _parse_stat, "check_error_stat")
        return cls(atol=ga, rtol=gr, check_error_stat=gs or "elemwise", per_atol=pa, per_rtol=pr, per_stat=ps)

    def for_parts(self) -> "Tolerances":
        """These tolerances for runs of parts (subgraphs) of a model whose tensors the per-output
        names were checked against: such a run ignores a name its part does not have."""
        return replace(self, names_checked=True)

    def topk_for(self, name: str) -> Optional[Tuple[int, int]]:
        return self.per_topk.get(name, self.topk)

    def index_tolerance_for(self, name: str) -> int:
        return self.per_index_tolerance.get(name, self.index_tolerance)

    def quantile_for(self, name: str) -> float:
        return self.per_quantile.get(name, self.error_quantile)

    def for_output(self, name: str, exact_kind: bool) -> Tuple[float, float, str]:
        """(atol, rtol, stat) for output ``name``; ``exact_kind`` for integer/bool outputs."""
        stat = self.per_stat.get(name, self.check_error_stat)
        atol = self.per_atol.get(name, self.atol)
        rtol = self.per_rtol.get(name, self.rtol)
        if exact_kind and atol is None and rtol is None:
            return 0.0, 0.0, stat
        return (DEFAULT_ATOL if atol is None else atol), (DEFAULT_RTOL if rtol is None else rtol), stat

    def spelled(self) -> List[str]:
        """The tolerance options as a command line spells them (for logs
        and replay files: what a check amounts to), global value first, then ``name:value``."""
        out: List[str] = []
        for flag, glob, per in ((ATOL_FLAG, self.atol, self.per_atol), (RTOL_FLAG, self.rtol, self.per_rtol)):
            values = ([repr(glob)] if glob is not None else []) + [f"{n}:{v!r}" for n, v in per.items()]
            out += [flag, *values] if values else []
        stats = ([self.check_error_stat] if self.check_error_stat != "elemwise" else [])
        stats += [f"{n}:{v}" for n, v in self.per_stat.items()]
        return out + ([STAT_FLAG, *stats] if stats else [])

    def names(self) -> List[str]:
        return sorted(
            set(self.per_atol) | set(self.per_rtol) | set(self.per_stat) | set(self.per_quantile)
            | set(self.per_topk) | set(self.per_index_tolerance)
        )


def check_tolerance_names(tol: Tolerances, known: Iterable[str]) -> List[str]:
    """Notes for per-output tolerances that name no compared output."""
    names = set(known)
    return [f"a tolerance is given for '{n}', which no compared result has" for n in tol.names() if n not in names]

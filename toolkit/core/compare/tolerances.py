"""Tolerances: the comparison options, declared here with their parsers, and the one typed value
they make (:class:`Tolerances`: numbers, statistics, per output name).

Each option is parsed where it is declared (``parse=``: the command line's own parser, see
:mod:`toolkit.core.declare`) into a :class:`Named` value; :meth:`ToleranceOptions.combined` (and
:meth:`ComparisonOptions.combined`, ``toolkit run``'s) makes them one :class:`Tolerances`, which
:mod:`toolkit.core.compare.arrays` applies to arrays. No numpy here: the command line builds the
typed value before any comparison module is loaded.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Dict, Generic, Iterable, List, Mapping, Optional, Sequence, Tuple, TypeVar, Union

from toolkit.core.declare import Declared, declared
from toolkit.core.errors import UsageError
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


def parse_compare_func(values: OptionValues) -> Optional[str]:
    """The comparison function given (None: not given, the default "simple")."""
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
    return funcs[0] if funcs else None


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


def parse_topk(specs: OptionValues) -> Named[Tuple[int, int]]:
    """``--postprocess`` values: ``top-K[,axis=N]`` for every output, ``name:top-K[,axis=N]`` for one."""

    glob: Optional[Tuple[int, int]] = None
    per: Dict[str, Tuple[int, int]] = {}
    for spec in specs or ():
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
    return Named(glob, per)


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


V = TypeVar("V")


@dataclass(frozen=True)
class Named(Generic[V]):
    """One comparison option's typed values: ``value`` for every output (None: not given) and one
    per output name (``--atol 1e-3 out:1e-2`` -> ``Named(0.001, {"out": 0.01})``)."""

    value: Optional[V] = None
    per: Mapping[str, V] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return self.value is not None or bool(self.per)


def _named(convert: Callable[[str], V], flag: str) -> Callable[[OptionValues], Named[V]]:
    """The parser of option ``flag``: its values, each ``VALUE`` or ``NAME:VALUE`` read by
    ``convert``, as one :class:`Named` (UsageError for a malformed value, or for two different
    values given for every output or for one name: which one was meant is not known)."""

    def parse(values: OptionValues) -> Named[V]:
        found: Dict[Optional[str], Tuple[str, V]] = {}
        for spec in values or ():
            glob, per = parse_named_values([spec], convert, f"{flag} value")
            for name, value in ([(None, glob)] if not per else list(per.items())):
                if name in found and found[name][1] != value:
                    what = f"'{name}'" if name is not None else "every output"
                    raise UsageError(f"{flag}: two values for {what} ('{found[name][0]}' and '{spec}'): give one")
                found[name] = (spec, value)  # type: ignore[assignment]
        glob_value = found.pop(None, None)
        return Named(glob_value[1] if glob_value else None, {str(k): v for k, (_, v) in found.items()})

    return parse


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
        """From option lists as the command line spells them (``["1e-3", "out:1e-2"]``), each read
        by its option's own parser (UsageError when malformed)."""
        return ComparisonOptions(
            atol=parse_atol(atol), rtol=parse_rtol(rtol), check_error_stat=parse_stats(check_error_stat),
            error_quantile=parse_quantiles(error_quantile), postprocess=parse_topk(postprocess),
            compare_func=parse_compare_func(compare_func), index_tolerance=parse_index_tolerances(index_tolerance),
        ).combined()

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


# ---------------------------------------------------------------- the options, declared with their parsers

ATOL_FLAG, RTOL_FLAG, STAT_FLAG, QUANTILE_FLAG, TOPK_FLAG, COMPARE_FUNC_FLAG, INDEX_TOL_FLAG = (
    "--atol", "--rtol", "--check-error-stat", "--error-quantile", "--postprocess", "--compare-func", "--index-tolerance",
)
parse_atol = _named(_parse_tol, ATOL_FLAG)
parse_rtol = _named(_parse_tol, RTOL_FLAG)
parse_stats = _named(_parse_stat, STAT_FLAG)
parse_quantiles = _named(_parse_quantile, QUANTILE_FLAG)
parse_index_tolerances = _named(_parse_index_tol, INDEX_TOL_FLAG)


ATOL = Declared(
    (ATOL_FLAG, "--abs-tol"), "Absolute tolerance: a value for every output and/or name:value.",
    metavar="[NAME:]VALUE...", parse=parse_atol, takes=List[str],
)
RTOL = Declared(
    (RTOL_FLAG, "--rel-tol"), "Relative tolerance: a value for every output and/or name:value.",
    metavar="[NAME:]VALUE...", parse=parse_rtol, takes=List[str],
)
CHECK_ERROR_STAT = Declared(
    (STAT_FLAG,),
    "What to check against the tolerances: elemwise (default), max, mean, median or quantile; also per output "
    "as name:stat.", metavar="[NAME:]STAT...",
    complete=ERROR_STATS, parse=parse_stats, takes=List[str],
)

@dataclass
class ToleranceOptions:
    """The tolerance options, each typed where the command line reads it."""

    atol: Named[float] = declared(ATOL, factory=Named)
    rtol: Named[float] = declared(RTOL, factory=Named)
    check_error_stat: Named[str] = declared(CHECK_ERROR_STAT, factory=Named)

    def tolerances_given(self) -> bool:
        return bool(self.atol or self.rtol or self.check_error_stat)

    def combined(self, default: Optional[float] = None) -> Tolerances:
        """These options as one :class:`Tolerances`; ``default``: the atol and the rtol of every
        output that none is given for (None: :data:`DEFAULT_ATOL`/:data:`DEFAULT_RTOL` for floats,
        exact for integers)."""
        return Tolerances(
            atol=default if self.atol.value is None else self.atol.value,
            rtol=default if self.rtol.value is None else self.rtol.value,
            check_error_stat=self.check_error_stat.value or "elemwise",
            per_atol=dict(self.atol.per), per_rtol=dict(self.rtol.per), per_stat=dict(self.check_error_stat.per),
        )


@dataclass
class ComparisonOptions(ToleranceOptions):
    """``toolkit run``'s comparison options: the tolerance options, the statistic's quantile, top-K
    post-processing, the comparison function, index tolerances and the shape check."""

    error_quantile: Named[float] = declared(Declared(
        (QUANTILE_FLAG,), "The quantile --check-error-stat quantile checks (0..1, default 0.99); also name:Q.",
        metavar="Q...", parse=parse_quantiles, takes=List[str],
    ), factory=Named)
    postprocess: Named[Tuple[int, int]] = declared(Declared(
        (TOPK_FLAG, "--postprocess-func"),
        "Compare the indices of the K largest values instead of the values (along the last axis, or axis N), for "
        "every output or one (name:top-5).",
        metavar="[NAME:]top-K[,axis=N]...", parse=parse_topk, takes=List[str],
    ), factory=Named)
    compare_func: Optional[str] = declared(Declared(
        (COMPARE_FUNC_FLAG, "--compare"),
        "simple (tolerances, the default) or indices (index arrays such as top-K results must hold the same "
        "indices, each at most --index-tolerance positions away).",
        metavar="FUNC", complete=COMPARE_FUNCS, parse=parse_compare_func, takes=List[str],
    ))
    index_tolerance: Named[int] = declared(Declared(
        (INDEX_TOL_FLAG,), "With --compare-func indices: how far an index may move (default 0); also name:N.",
        metavar="N...", parse=parse_index_tolerances, takes=List[str],
    ), factory=Named)
    no_shape_check: bool = declared(Declared(
        ("--no-shape-check",),
        "Compare outputs whose shapes differ but hold the same number of elements, element by element (the "
        "reference reshaped).",
    ), default=False)

    def asks_comparison(self) -> bool:
        """Whether any comparison option was given."""
        return self.tolerances_given() or self.no_shape_check or self.compare_func is not None or bool(
            self.error_quantile or self.postprocess or self.index_tolerance
        )

    def combined(self, default: Optional[float] = None) -> Tolerances:
        return replace(
            super().combined(default),
            error_quantile=DEFAULT_QUANTILE if self.error_quantile.value is None else self.error_quantile.value,
            per_quantile=dict(self.error_quantile.per), topk=self.postprocess.value, per_topk=dict(self.postprocess.per),
            compare_func=self.compare_func or "simple", index_tolerance=self.index_tolerance.value or 0,
            per_index_tolerance=dict(self.index_tolerance.per), shape_check=not self.no_shape_check,
        )

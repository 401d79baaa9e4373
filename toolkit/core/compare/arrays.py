"""Comparing result sets: tolerances, error statistics, pass/fail per output.

Rules
- Result sets are compared in consecutive pairs (A vs B, B vs C, ...). Within a pair,
  iteration k is compared with iteration k, and an output is compared only when both
  sides have a tensor of that exact name.
- Errors: ``abs = |a - b|`` and ``rel = abs / |b|`` (B, the later set, is the reference,
  e.g. a loaded golden file). Where ``b == 0``: ``rel = 0`` if ``a == 0`` too, else ``inf``.
- Checks (``--check-error-stat``): ``elemwise`` (default) passes when every element has
  ``abs <= atol`` or ``rel <= rtol``; ``max``/``mean``/``median`` pass when that statistic
  of ``abs`` is ``<= atol`` or that statistic of ``rel`` is ``<= rtol``.
  ``quantile`` does the same with the ``--error-quantile`` quantile (default 0.99) of the
  errors: e.g. 0.99 passes when 99% of the elements are within tolerance.
- The tolerance that would have passed is that statistic's ``abs`` (as an atol alone)
  or its ``rel`` (as an rtol alone); for ``elemwise`` it is the maximum.
- Defaults: atol 1e-5 and rtol 1e-5 for floating-point outputs. Integer and bool
  outputs compare exactly unless a tolerance is given (globally or for that output).
- NaN: a NaN on both sides at the same element counts as equal; a NaN on one side only
  is an error of ``inf`` (fails any tolerance). Infinities of the same sign are equal.
- Different shapes fail that output (nothing is broadcast or reshaped). Different dtypes
  are compared by value (both sides promoted), and the dtypes are shown.
- No verdict without evidence: an output with elements of which none was compared (every one
  skipped as undefined, see :mod:`toolkit.core.compare.undefined`) fails; every result counts the
  elements it compared (``compared``). Two empty outputs of the same shape pass (their shape
  is what is compared).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from toolkit.core.meta import dtype_from_numpy
from toolkit.core.compare.judged import JudgedTensor
from toolkit.core.compare.tolerances import DEFAULT_QUANTILE, Tolerances


def topk_indices(arr, k: int, axis: int = -1):
    """The indices of the ``k`` largest values along ``axis`` (largest first; ties keep their
    order; ``k`` is clamped to the axis length)."""

    arr = np.asarray(arr)
    if arr.ndim == 0:
        return arr
    order = np.argsort(-arr, axis=axis, kind="stable")
    return np.take(order, np.arange(min(k, order.shape[axis])), axis=axis)


def compare_indices(name: str, a, b, index_tolerance: int = 0) -> "OutputComparison":
    """Compare two index arrays (e.g. top-K results) along their last axis: every index of ``a``
    must appear in ``b`` at most ``index_tolerance`` positions away (the last ``index_tolerance``
    entries of ``a`` are not checked, since they may have been pushed out of ``b``)."""

    a = np.asarray(a)
    b = np.asarray(b)
    res = OutputComparison(
        name=name, passed=True, max_abs=math.nan, max_rel=math.nan, atol=0.0, rtol=0.0, stat="indices",
        shape_a=tuple(a.shape), shape_b=tuple(b.shape), dtype_a=_dtype_name(a), dtype_b=_dtype_name(b), size=int(b.size),
    )
    res.max_abs = res.mean_abs = res.max_rel = res.mean_rel = 0.0
    if a.shape != b.shape:
        res.passed = False
        res.message = f"shapes differ: {tuple(a.shape)} vs {tuple(b.shape)}"
        return res
    if a.ndim == 0:
        a, b = a.reshape(1), b.reshape(1)
    bad = 0
    worst = 0
    for batch in np.ndindex(a.shape[:-1]):
        row_bad, row_worst = _row_moves(a[batch], b[batch], index_tolerance)
        bad += row_bad
        worst = max(worst, row_worst)
    res.mismatches = bad
    res.passed = bad == 0
    res.max_abs = float(worst)
    if not res.passed:
        res.message = (
            f"{bad} index(es) missing or moved more than the index tolerance ({index_tolerance}); "
            f"largest move {worst}"
        )
    return res


def _row_moves(row_a, row_b, index_tolerance: int) -> Tuple[int, int]:
    """(indices of ``row_a`` missing from ``row_b`` or moved more than ``index_tolerance``, the
    largest move: a missing index counts as the row's length) along one last-axis row."""
    bad = 0
    worst = 0
    checked = row_a[: len(row_a) - index_tolerance] if index_tolerance > 0 else row_a
    for pos, val in enumerate(checked):
        if val == row_b[pos]:
            continue
        where = np.flatnonzero(row_b == val)
        shift = abs(int(where[0]) - pos) if where.size else len(row_b)
        worst = max(worst, shift)
        if where.size == 0 or shift > index_tolerance:
            bad += 1
    return bad, worst


@dataclass
class OutputComparison(JudgedTensor):
    """The comparison of one output of one iteration."""

    shape_a: tuple
    shape_b: tuple
    dtype_a: str
    dtype_b: str
    mean_abs: float = float("nan")
    mean_rel: float = float("nan")
    median_abs: Optional[float] = None
    median_rel: Optional[float] = None
    quantile: Optional[float] = None  # the quantile used by the "quantile" statistic
    quantile_abs: Optional[float] = None
    quantile_rel: Optional[float] = None
    mismatches: int = 0  # elements failing the elementwise check
    size: int = 0
    skipped: int = 0  # elements not compared: their values are undefined (see toolkit.core.compare.undefined)
    skipped_why: str = ""
    message: str = ""  # why it failed when no numbers apply (shape mismatch, nothing compared)
    note: str = ""  # something the reader must know about how it was compared

    @property
    def compared(self) -> int:
        """The elements compared (those not skipped)."""
        return max(self.size - self.skipped, 0)

    @property
    def required_atol(self) -> Optional[float]:
        """The atol that would have passed on its own (for the chosen statistic)."""
        return {"mean": self.mean_abs, "median": self.median_abs, "quantile": self.quantile_abs}.get(
            self.stat, self.max_abs
        )

    @property
    def required_rtol(self) -> Optional[float]:
        return {"mean": self.mean_rel, "median": self.median_rel, "quantile": self.quantile_rel}.get(
            self.stat, self.max_rel
        )


@dataclass
class IterationComparison:
    index: int
    outputs: List[OutputComparison]
    only_a: List[str]
    only_b: List[str]

    @property
    def passed(self) -> bool:
        return all(o.passed for o in self.outputs)


@dataclass
class PairComparison:
    """Result set A against result set B (B is the reference)."""

    label_a: str
    label_b: str
    iterations: List[IterationComparison]
    notes: List[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(it.passed for it in self.iterations)

    @property
    def compared(self) -> int:
        return sum(len(it.outputs) for it in self.iterations)

    def mismatched(self) -> List[str]:
        seen: Dict[str, None] = {}
        for it in self.iterations:
            for o in it.outputs:
                if not o.passed:
                    seen.setdefault(o.name, None)
        return list(seen)


def _dtype_name(arr) -> str:
    return dtype_from_numpy(arr.dtype)


def _work_dtype(a, b):
    """The float dtype both sides are compared in."""

    if a.dtype == np.float64 or b.dtype == np.float64:
        return np.float64
    kinds = {a.dtype.kind, b.dtype.kind}
    if kinds <= {"f", "b"} or (a.dtype.kind == "f" and b.dtype.kind == "f"):
        return np.float32
    # integers (and ints vs floats): float64 keeps every int32 exact and int64 up to 2**53
    return np.float64


def error_arrays(a, b):
    """(abs, rel): elementwise ``|a - b|`` and ``|a - b| / |b|`` of same-shape numeric arrays.

    Equal infinities and NaN against NaN are no error; a NaN on one side only is ``inf``;
    ``rel`` is 0 where both are 0 and ``inf`` where only ``b`` is 0.
    """

    wdt = _work_dtype(a, b)
    fa = a.astype(wdt, copy=False)
    fb = b.astype(wdt, copy=False)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        absd = np.abs(fa - fb)  # new array
        # inf - inf (same sign) gives NaN: equal infinities are equal
        special = ~np.isfinite(absd)
        if special.any():
            same = (fa == fb) | (np.isnan(fa) & np.isnan(fb))
            absd[special & same] = 0
            absd[special & ~same] = np.inf
        absb = np.abs(fb)
        rel = np.divide(absd, absb, out=np.zeros_like(absd), where=absb != 0)
        rel[(absb == 0) & (absd != 0)] = np.inf
        if special.any():
            rel[np.isnan(rel)] = np.inf  # inf / inf: an infinite error against an infinite reference
    return absd, rel


def compare_arrays(
    name: str, a, b, atol: float, rtol: float, stat: str = "elemwise", quantile: float = DEFAULT_QUANTILE,
    skip=None, skip_why: str = "",
) -> OutputComparison:
    """Compare one output (``a`` against the reference ``b``); elements where the boolean array
    ``skip`` is set are not compared (they count in ``skipped``, for the reason ``skip_why``)."""

    a = np.asarray(a)
    b = np.asarray(b)
    res = OutputComparison(
        name=name, passed=True, max_abs=math.nan, max_rel=math.nan, atol=atol, rtol=rtol, stat=stat,
        shape_a=tuple(a.shape), shape_b=tuple(b.shape), dtype_a=_dtype_name(a), dtype_b=_dtype_name(b), size=int(b.size),
    )
    if skip is not None and a.shape == b.shape:
        a = _skipped(res, a, b, skip, skip_why)
        if res.size and res.skipped >= res.size:  # nothing left to judge it on: never a pass
            res.passed = False
            res.message = (
                f"0 of {res.size} element(s) compared: every element was skipped ({skip_why}), so nothing "
                "says it passes"
            )
            return res
    judged = _unmeasurable(res, a, b)
    if judged is not None:
        return judged
    return _judged(res, a, b, stat, quantile)


def _unmeasurable(res: OutputComparison, a, b) -> Optional[OutputComparison]:
    """``res`` judged without error arrays: shapes that differ, strings, no elements; None for
    numeric arrays of one shape with elements."""
    if a.shape != b.shape:
        res.passed = False
        res.message = f"shapes differ: {tuple(a.shape)} vs {tuple(b.shape)}"
        return res
    if a.dtype.kind in "OUS" or b.dtype.kind in "OUS":
        return _compare_strings(res, a, b)
    if a.size == 0:
        res.max_abs = res.mean_abs = res.max_rel = res.mean_rel = 0.0
        res.median_abs = res.median_rel = 0.0
        res.quantile_abs = res.quantile_rel = 0.0
        return res
    return None


def _judged(res: OutputComparison, a, b, stat: str, quantile: float) -> OutputComparison:
    """``res`` with the error statistics of ``a`` against ``b``, passed by ``stat`` against its tolerances."""
    atol, rtol = res.atol, res.rtol
    absd, rel = error_arrays(a, b)
    with np.errstate(invalid="ignore"):
        elem_bad = (absd > atol) & (rel > rtol)
    res.mismatches = int(np.count_nonzero(elem_bad))
    _error_statistics(res, absd, rel, stat, quantile)
    if stat == "elemwise":
        res.passed = res.mismatches == 0
    else:
        sa, sr = res.required_atol, res.required_rtol
        res.passed = bool((sa is not None and sa <= atol) or (sr is not None and sr <= rtol))
    return res


def _skipped(res: OutputComparison, a, b, skip, skip_why: str):
    """``a`` with the ``skip`` elements set to ``b``'s (so they never differ), counted in ``res``."""
    a = a.copy()
    np.copyto(a, b, where=skip, casting="unsafe")
    res.skipped, res.skipped_why = int(np.count_nonzero(skip)), skip_why
    return a


def _error_statistics(res: OutputComparison, absd, rel, stat: str, quantile: float) -> None:
    """Largest and mean errors, and the median or quantile when ``stat`` judges by it."""
    res.max_abs = float(absd.max())
    res.max_rel = float(rel.max())
    with np.errstate(over="ignore", invalid="ignore"):
        res.mean_abs = float(absd.mean(dtype=np.float64))
        res.mean_rel = float(rel.mean(dtype=np.float64))
    if stat == "median":
        res.median_abs = float(np.median(absd))
        res.median_rel = float(np.median(rel))
    if stat == "quantile":
        res.quantile = quantile
        with np.errstate(invalid="ignore"):
            res.quantile_abs = float(np.quantile(absd, quantile))
            res.quantile_rel = float(np.quantile(rel, quantile))


def _short(value, limit: int = 60) -> str:
    text = repr(value.item() if isinstance(value, np.generic) else value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _equal(a, b):
    """Elementwise equality of same-shape arrays of which one at least is not numeric."""
    if (a.dtype.kind in "OUS") != (b.dtype.kind in "OUS"):
        return np.zeros(a.shape, dtype=bool)
    if {a.dtype.kind, b.dtype.kind} == {"U", "S"}:
        eq = np.zeros(0)  # str against bytes: numpy's answer differs by version; compared element by element
    else:
        try:
            eq = np.asarray(a == b)
        except ValueError:  # objects whose comparison is not one truth value (arrays inside)
            eq = np.zeros(0)
    if eq.shape != a.shape or eq.dtype != bool:
        eq = np.vectorize(lambda x, y: bool(x == y) is True, otypes=[bool])(a, b) if a.size else np.ones(a.shape, bool)
    return eq


def _compare_strings(res: OutputComparison, a, b) -> OutputComparison:
    """Strings (and other non-numeric values) are equal or not: the count of differing elements
    and the first one (index and both values); a string against a number always differs."""
    eq = _equal(a, b)
    res.mismatches = int(a.size - np.count_nonzero(eq))
    res.passed = res.mismatches == 0
    err = 0.0 if res.passed else math.inf
    res.max_abs = res.mean_abs = res.max_rel = res.mean_rel = err
    res.median_abs = res.median_rel = err
    res.quantile_abs = res.quantile_rel = err
    if res.passed:
        res.message = f"equal ({a.size} value(s) of {res.dtype_a})"
    else:
        first = tuple(int(i) for i in np.argwhere(~eq.reshape(a.shape))[0]) if a.ndim else ()
        where = "[" + ", ".join(map(str, first)) + "]"
        res.message = (
            f"{res.mismatches} of {a.size} value(s) differ; first at {where}: {_short(a[first])} vs {_short(b[first])}"
        )
    return res


def _exact_kind(a, b) -> bool:
    return a.dtype.kind in "biu" and b.dtype.kind in "biu"


def compare_iteration(index: int, outs_a: Mapping, outs_b: Mapping, tol: Tolerances) -> IterationComparison:
    """Compare the outputs two iterations have in common (by exact name, in A's order)."""

    common = [n for n in outs_a if n in outs_b]
    only_a = [n for n in outs_a if n not in outs_b]
    only_b = [n for n in outs_b if n not in outs_a]
    results = [_compare_output(name, outs_a[name], outs_b[name], tol) for name in common]
    return IterationComparison(index, results, only_a, only_b)


def _compare_output(name: str, a, b, tol: Tolerances):
    """One output of both iterations, compared as ``tol`` says (after --postprocess, a reshape)."""
    a = np.asarray(a)
    b = np.asarray(b)
    topk = tol.topk_for(name)
    if topk is not None:  # --postprocess: compare the indices of the K largest values
        a, b = topk_indices(a, *topk), topk_indices(b, *topk)
    if not tol.shape_check and a.shape != b.shape and a.size == b.size:
        b = b.reshape(a.shape)
    if tol.compare_func == "indices":
        return compare_indices(name, a, b, tol.index_tolerance_for(name))
    atol, rtol, stat = tol.for_output(name, _exact_kind(a, b))
    return compare_arrays(name, a, b, atol, rtol, stat, tol.quantile_for(name))


@dataclass
class ValidationProblem:
    label: str
    iteration: int
    name: str
    nans: int
    infs: int

    def describe(self) -> str:
        parts, detected = [], []
        if self.nans:
            parts.append(f"{self.nans} NaN")
            detected.append("NaN Detected")
        if self.infs:
            parts.append(f"{self.infs} Inf")
            detected.append("Inf Detected")
        return (
            f"{self.label} | iteration {self.iteration} | '{self.name}': {', '.join(detected)} "
            f"({' and '.join(parts)} value(s))"
        )


def validate_outputs(label: str, iterations: Sequence[Mapping]) -> List[ValidationProblem]:
    """NaN/Inf check of every floating-point output (``--validate``)."""

    problems = []
    for k, outs in enumerate(iterations):
        for name in outs:
            arr = np.asarray(outs[name])
            if arr.dtype.kind in "biuOUSM":
                continue  # integers, bools and strings hold no NaN/Inf
            with np.errstate(invalid="ignore"):
                a = arr if arr.dtype.kind in "fc" else arr.astype(np.float32)  # bfloat16/float8
                nans = int(np.count_nonzero(np.isnan(a)))
                infs = int(np.count_nonzero(np.isinf(a)))
            if nans or infs:
                problems.append(ValidationProblem(label, k, name, nans, infs))
    return problems

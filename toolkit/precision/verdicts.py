"""What a check of ``debug precision`` says of its outputs: the worst one in words, whether a
failure is within the rounding of reduced-precision storage, and where values overflow it.

No Typer or Rich here.
"""

from __future__ import annotations

import math

import numpy as np

from toolkit.quant.metrics import worst_output


def describe(comps) -> str:
    """'max error 0.96 at y' for the worst failing (or, when all pass, worst) output (the order of
    :func:`toolkit.quant.metrics.worst_output`: NaN the worst)."""
    worst = worst_output(comps)
    if worst is None:
        return ""
    err = worst.required_atol  # (None where the statistic was not measured: a shape mismatch)
    return f"max error {math.nan if err is None else err:.3g} at {worst.name}"


def within_rounding(ref, o, bound: float) -> bool:
    """Failing output ``o`` is off by no more than ``bound`` times its reference ``ref``'s largest finite value."""
    ref = np.asarray(ref)
    if ref.dtype.kind != "f" or not math.isfinite(o.max_abs):
        return False
    finite = ref[np.isfinite(ref)]
    scale = float(np.abs(finite).max()) if finite.size else 0.0
    return o.max_abs <= bound * scale


def same_shape(got, fin) -> bool:
    """A tensor and the reference's finite-mask, both there and of one shape."""
    return got is not None and fin is not None and got.shape == fin.shape


def not_finite(values):
    return ~np.isfinite(values)


def overflows(values, dtype: str):
    """Where float32 ``values`` become inf (or stay inf/nan) when stored in ``dtype``: past the
    midpoint between its largest finite value and the next power (fp16: 65520)."""
    limit = 3.3961514e38 if dtype == "bfloat16" else 65520.0
    with np.errstate(invalid="ignore"):
        return ~(np.abs(values) < limit)

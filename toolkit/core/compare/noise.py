"""Numerical noise: which error is rounding, decided from dtypes and the runners compared.

One model, used by ``run``'s diagnosis, ``debug reduce`` (evidence, the noise warning,
``--all-faults``) and ``debug precision`` (see docs/noise.md):

- **The rounding step** ``u`` of a comparison is the coarsest storage precision a tensor
  passed through: float32 (:data:`FLOOR`, its epsilon 2^-23: different kernels, fusions and
  summation orders) unless a runner stores tensors in fp16 (2^-11) or bf16 (2^-8), named in
  its spec (``onnxrt:fp16``, ``trt:bf16``; :func:`storage_floor`).
- **Rounding through a subgraph of depth d** adds up like a random walk: its relative error
  stays below ``ULPS * u * sqrt(d)`` (:func:`noise_bound`), measured as the relative L2 error
  or, for the largest element, relative to the tensor's largest magnitude.
- **Amplification** is the relative error of a node's (or subgraph's) outputs over that of
  its inputs, both floored at ``u`` (:func:`amplification`). Rounding alone keeps it below
  ``ULPS * sqrt(d)``; a fault (wrong weights, an overflow, a bad kernel) makes exact inputs
  give wrong outputs, a large ratio.

An error is rounding (:func:`is_rounding`) only when it is within the bound *and* not
amplified: a large, amplified error is never called noise. Infinite or NaN errors never are.

Pure Python; nothing here imports numpy or prints.
"""

from __future__ import annotations

import math
from typing import Optional

FLOOR = 2.0**-23  # float32 epsilon: errors below it count as rounding
# the rounding step of reduced-precision storage (unit roundoff): errors below it are that rounding
STORAGE_FLOOR = {"fp16": 2.0**-11, "bf16": 2.0**-8}
_SPELLED = {"f16": "fp16"}  # a KEY=VALUE spec option naming a precision (``precision=f16``)
# rounding steps per node that rounding may add up to before it counts as more than rounding
ULPS = 8.0
# Evidence without a relative L2 error (a ``--check`` command's printed rows): a largest
# relative error this small is float32 rounding (about 800 ulps: reordered or fused sums).
ROUNDING_RTOL = 1e-4
# ... and a failure within this factor of a tolerance at most NOISE_ATOL is kernel rounding too
NEAR_TOLERANCE = 10.0
NOISE_ATOL = 1e-4


def precision_of(*labels: str) -> str:
    """"fp16", "bf16" or "fp32": the coarsest storage named by runner ``labels`` (specs such as
    ``onnxrt:fp16`` or ``openvino:precision=bf16``, or names)."""
    found = "fp32"
    for label in labels:
        options = label.partition(":")[2].replace(" ", "").split(",")
        options = [_SPELLED.get(o.partition("=")[2], o.partition("=")[2]) or o for o in options]  # precision=f16
        for key in STORAGE_FLOOR:
            if key in options and (found == "fp32" or STORAGE_FLOOR[key] > STORAGE_FLOOR[found]):
                found = key
    return found


def storage_floor(*labels: str) -> float:
    """The rounding step ``u`` for a comparison of runners ``labels``: the coarsest
    reduced-precision rounding step named, else :data:`FLOOR`."""
    precision = precision_of(*labels)
    return STORAGE_FLOOR.get(precision, FLOOR)


def amplification(output_error: float, input_error: float, floor: float = FLOOR) -> float:
    """``max(out, floor) / max(in, floor)`` (1 when both are infinite)."""
    out = max(output_error, floor)
    inp = max(input_error, floor)
    if math.isinf(out) and math.isinf(inp):
        return 1.0
    return out / inp


def times(amp: Optional[float]) -> str:
    """An amplification in words: ``12.5x``, or ``unbounded`` for an infinite output error (never ``infx``)."""
    if amp is None:
        return "?"
    if not math.isfinite(amp):
        return "unbounded"
    return f"{amp:.3g}x"


def noise_bound(floor: float = FLOOR, depth: int = 1) -> float:
    """The largest relative error that rounding at step ``floor`` through ``depth`` nodes makes."""
    return ULPS * floor * math.sqrt(max(depth, 1))


def is_rounding(error: float, amp: Optional[float] = None, depth: int = 1, floor: float = FLOOR) -> bool:
    """Whether a relative ``error`` (with its amplification ``amp``, when known) of a subgraph of
    ``depth`` nodes is rounding at step ``floor``, not a fault."""
    if error is None or not math.isfinite(error):
        return False
    if error > noise_bound(floor, depth):
        return False
    return amp is None or (math.isfinite(amp) and amp <= ULPS * math.sqrt(max(depth, 1)))


# The one classification of a failing node (run's diagnosis and report, debug reduce's evidence,
# --all-faults, debug precision)
OK = "ok"
OVERFLOW = "overflow"  # it holds a value its storage type cannot hold
ROUNDING = "rounding"  # within the noise bound of its storage: not a fault
CARRIED = "carried"  # out of tolerance only by the error of its inputs (not amplified): not where it starts
FAULT = "fault"
STORAGE_MAX = {"fp16": 65504.0, "bf16": 3.3895313892515355e38}


def classify(passed: bool, error: float, amp: Optional[float], depth: int, storage: str, ref_max: float = 0.0) -> str:
    """OK, OVERFLOW (the reference holds a value past ``storage``'s range, "fp16"/"bf16"), ROUNDING
    (within the noise bound of that storage's step through ``depth`` nodes, not amplified), CARRIED
    (not amplified, but its inputs were already off) or FAULT (amplified), for a node whose outputs
    ``passed`` or not, with relative error ``error`` and amplification ``amp``."""
    if passed:
        return OK
    if _past_range(ref_max, storage):
        return OVERFLOW
    own = amp is None or (math.isfinite(amp) and amp <= ULPS)  # (one node's own amplification)
    if not own:
        return FAULT
    if _within_noise(error, storage, depth):
        return ROUNDING
    return CARRIED


def _past_range(ref_max: float, storage: str) -> bool:
    """Whether the magnitude ``ref_max`` is past the range of ``storage`` (fp16, bf16; never for others)."""
    return storage in STORAGE_MAX and ref_max > STORAGE_MAX[storage]


def _within_noise(error: Optional[float], storage: str, depth: int) -> bool:
    """Whether the relative ``error`` is within the noise bound of ``storage``'s rounding step through ``depth`` nodes."""
    floor = STORAGE_FLOOR.get(storage, FLOOR)
    return error is not None and math.isfinite(error) and error <= noise_bound(floor, depth)


def kind_words(kind: str, storage: str = "fp32") -> str:
    """A classification in words: 'fp16 rounding', 'overflow: a value past fp16's range', 'fault'."""
    if kind == ROUNDING:
        return f"{storage} rounding" if storage in STORAGE_FLOOR else "float32 rounding"
    if kind == OVERFLOW:
        return f"overflow: a value past {storage}'s range ({STORAGE_MAX.get(storage, 0):.6g})"
    if kind == CARRIED:
        return "carries the error of its inputs"
    return kind


def evidence_is_rounding(max_abs: float, max_rel: float, atol: float) -> Optional[str]:
    """For printed evidence (no relative L2 error, no depth): why a failure of ``max_abs``
    (largest relative error ``max_rel``) at tolerance ``atol`` is float32 rounding, or None."""
    if not math.isfinite(max_abs) or not math.isfinite(max_rel):
        return None
    if max_rel <= ROUNDING_RTOL:
        return "rel"
    if 0 < atol <= NOISE_ATOL and max_abs <= NEAR_TOLERANCE * atol:
        return "near"
    return None


def passing_tolerance(needed: float) -> float:
    """A tolerance to suggest for an error of ``needed``: 1.5x, rounded up to one significant digit."""
    x = 1.5 * needed
    if not x or not math.isfinite(x) or x <= 0:
        return x
    e = math.floor(math.log10(x))
    return float(f"{math.ceil(round(x / 10**e, 9)) * 10.0**e:.1g}")

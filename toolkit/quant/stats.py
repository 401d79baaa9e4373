"""What each Q/DQ pair's quantization does on given inputs: the error it adds itself (the tensor
before Q against after DQ, as onnxruntime's ``qdq_loss_debug`` computes it), the error arriving
from upstream (before Q against the float model's tensor), the share of values clipped at the
integer range, saturation, and how many integer levels the tensor's range spans.

Statistics are gathered iteration by iteration (:class:`PairAccumulator`: sums and extremes, no
tensor kept), so a run streams as it does without them.

One quantization step is rounding, not a fault: a pair that moves no value by more than one step
(values clipped by less than a step included), on a range spanning enough integer levels, only
rounds (:attr:`PairStats.rounding_only`). A pair that carries a ``Relu`` or ``Clip`` the quantizer
folded into its Q (:meth:`toolkit.quant.qdq.Pair.clamp`) is measured against its input
clamped the same way, which is what the float model computes (onnxruntime's qdq_loss_debug
compares the raw input there).

No Typer or Rich here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import List, Optional, Sequence, Tuple

import numpy as np

from toolkit.quant.qdq import Pair

COARSE_LEVELS = 16  # a tensor spanning fewer integer levels than this is coarsely quantized
SENTINEL = 1e30  # values this large are sentinels (a mask's -3.4e38 fill), not data
SPREAD = 8.0  # a per-tensor weight whose channel ranges differ more than this wants per-channel scales
_EPS = float(np.finfo(float).eps)


def sqnr_db(signal_sq: float, noise_sq: float) -> float:
    """20 log10(|x| / |x - y|) from the two squared norms, as onnxruntime's qdq_loss_debug
    (``compute_signal_to_quantization_noice_ratio``) computes it."""
    return 20 * math.log10(max(math.sqrt(signal_sq), _EPS) / max(math.sqrt(noise_sq), _EPS))


@dataclass
class PairStats:
    """What one pair's quantization does on the given inputs (every iteration together)."""

    pair: Pair
    local_sqnr: float  # dB, tensor before Q against after DQ (qdq_loss_debug's qdq_err)
    local_max: float  # largest |after DQ - before Q|
    local_steps: float  # local_max in units of the scale (0.5: rounding only)
    clipped: float  # share of values outside the integer range (by more than half a step)
    saturated: float  # share of values quantized to qmin or qmax
    lo: float  # observed range of the tensor before Q
    hi: float
    grid_lo: float  # the range the integers cover
    grid_hi: float
    levels: float  # integer levels the observed range spans (inside the integer range)
    upstream_sqnr: Optional[float] = None  # dB, float model against before Q: error arriving from upstream
    upstream_max: Optional[float] = None
    xmodel_sqnr: Optional[float] = None  # dB, float model against after DQ (qdq_loss_debug's xmodel_err)
    after_max: Optional[float] = None
    reasons: List[str] = field(default_factory=list)
    sentinels: float = 0.0  # share of values that are sentinels (|x| >= 1e30, inf, nan): left out of the rest
    sentinel_value: Optional[float] = None  # one of them (-3.4e38: a mask's fill)
    spread: Optional[float] = None  # a per-tensor weight: largest/smallest channel range
    # a per-channel pair: each channel's observed (lo, hi) along its axis (sentinels left out)
    channel_range: Optional[Tuple[np.ndarray, np.ndarray]] = None

    @property
    def sentinel_range(self) -> bool:
        """The integer range or the values hold sentinels (a mask's -3.4e38, inf)."""
        return self.sentinels > 0 or max(abs(self.grid_lo), abs(self.grid_hi)) >= SENTINEL

    @property
    def rounding_only(self) -> bool:
        """No value moved by more than one quantization step, and a range spanning enough levels."""
        return self.local_steps <= 1.0 + 1e-3 and self.levels >= COARSE_LEVELS and not self.sentinel_range


# A value is clipped when it lies past the grid's end by more than half a step, plus this share of a
# step: a tie computed in float64 from a float32 scale (1.0 on an int16 grid of step 1/32767.5) comes out
# a few millionths of a step past it, where the runtime rounds it to the end like any other value.
CLIP_SLACK = 1e-3


class PairAccumulator:
    """Sums and extremes of one pair's tensors, one iteration at a time."""

    def __init__(self, pair: Pair):
        self.pair = pair
        self.n = self.clipped = self.saturated = 0
        self.x_sq = self.local_sq = self.r_sq = self.up_sq = self.after_sq = 0.0
        self.local_max = self.steps = self.up_max = self.after_max = 0.0
        self.lo, self.hi = math.inf, -math.inf
        self.with_reference = True
        self.sentinels = 0
        self.sentinel_value: Optional[float] = None
        self.ch_lo: Optional[np.ndarray] = None
        self.ch_hi: Optional[np.ndarray] = None

    def _channels(self, before, clamp) -> None:
        """A per-channel pair: each channel's extremes along its axis (sentinels and NaN left out)."""
        a = _channel_rows(np.asarray(before, dtype=np.float64), self.pair)
        if a is None:
            return
        if clamp is not None:
            a = np.clip(a, clamp[0], clamp[1])
        a = np.where(np.isfinite(a) & (np.abs(a) < SENTINEL), a, np.nan)
        with np.errstate(all="ignore"):
            lo, hi = np.nanmin(np.where(np.isnan(a), np.inf, a), axis=1), np.nanmax(np.where(np.isnan(a), -np.inf, a), axis=1)
        self.ch_lo = lo if self.ch_lo is None else np.minimum(self.ch_lo, lo)
        self.ch_hi = hi if self.ch_hi is None else np.maximum(self.ch_hi, hi)

    def add(self, before, after, reference=None) -> None:
        x, y = _flat(before), _flat(after)
        if x.shape != y.shape or not x.size:
            return
        clamp = self.pair.clamp()
        if self.pair.scale.size > 1:
            self._channels(before, clamp)
        if clamp is not None:  # a folded Relu/Clip (or a tensor never negative): what the float model computes
            x = np.clip(x, clamp[0], clamp[1])
        lo, hi, s = self._grid(np.shape(before))
        r = None if reference is None else _flat(reference)
        x, y, r, lo, hi, s = self._without_sentinels(x, y, r, lo, hi, s)
        if x.size:
            self._add_local(x, y, lo, hi, s)
            self._add_reference(r, x, y)

    def _grid(self, shape):
        """(lo, hi, step) of the pair's grid: numbers, or per channel every element's own (flat)."""
        lo, hi, s = self.pair.bounds(len(shape))
        if np.ndim(s):
            lo, hi, s = (np.broadcast_to(v, shape).ravel() for v in (lo, hi, s))
        return lo, hi, s

    def _add_local(self, x, y, lo, hi, s) -> None:
        """The pair's own error (``y`` quantized from ``x``, on the grid ``lo``..``hi`` of step ``s``):
        its size in values and steps, clipped and saturated values, the range seen."""
        d = y - x
        ad = np.abs(d)
        self.n += x.size
        self.x_sq += _dot(x, x)
        self.local_sq += _dot(d, d)
        self.local_max = max(self.local_max, float(ad.max()))
        self.steps = max(self.steps, float((ad / s).max()) if np.ndim(s) else float(ad.max()) / float(s))
        edge = s * (0.5 + CLIP_SLACK)  # (a value half a step past the grid's end rounds there: no clipping)
        self.clipped += int(np.count_nonzero(x < lo - edge)) + int(np.count_nonzero(x > hi + edge))
        self.saturated += int(np.count_nonzero(y <= lo + s / 4)) + int(np.count_nonzero(y >= hi - s / 4))
        self.lo, self.hi = min(self.lo, float(x.min())), max(self.hi, float(x.max()))

    def _add_reference(self, r, x, y) -> None:
        """The error against the float model's tensor ``r``: before the pair (``x``) and after it (``y``).
        No such tensor (or not shaped as ``x``): the statistics have no reference."""
        if r is None or r.shape != x.shape:
            self.with_reference = False
            return
        up, after_d = r - x, r - y
        self.r_sq += _dot(r, r)
        self.up_sq += _dot(up, up)
        self.after_sq += _dot(after_d, after_d)
        self.up_max = max(self.up_max, float(np.abs(up).max()))
        self.after_max = max(self.after_max, float(np.abs(after_d).max()))

    def _without_sentinels(self, x, y, r, lo, hi, s):
        """The elements that are data: sentinels (a mask's -3.4e38, inf, nan) counted, then left out."""
        bad = ~np.isfinite(x) | (np.abs(x) >= SENTINEL)
        if not bad.any():
            return x, y, r, lo, hi, s
        self.sentinels += int(np.count_nonzero(bad))
        self.n += int(np.count_nonzero(bad))
        if self.sentinel_value is None:
            self.sentinel_value = float(x[bad][0])
        keep = ~bad
        pick = [v[keep] if np.ndim(v) else v for v in (lo, hi, s)]
        rr = r[keep] if r is not None and r.shape == x.shape else r
        return (x[keep], y[keep], rr, *pick)

    def finish(self) -> PairStats:
        p = self.pair
        zp = p.zero_point.astype(np.float64)
        glo, ghi = float(np.min((p.qmin - zp) * p.scale)), float(np.max((p.qmax - zp) * p.scale))
        lo, hi = (self.lo, self.hi) if self.n else (0.0, 0.0)
        span = max(min(hi, ghi) - max(lo, glo), 0.0)
        st = PairStats(
            p, sqnr_db(self.x_sq, self.local_sq), self.local_max, self.steps, self.clipped / max(self.n, 1),
            self.saturated / max(self.n, 1), lo, hi, glo, ghi, span / float(np.max(p.scale)),
        )
        st.sentinels, st.sentinel_value = self.sentinels / max(self.n, 1), self.sentinel_value
        if self.ch_lo is not None and self.ch_hi is not None:
            seen = self.ch_lo <= self.ch_hi  # (a channel with no data value: no range of its own)
            st.channel_range = (np.where(seen, self.ch_lo, 0.0), np.where(seen, self.ch_hi, 0.0))
        if self.with_reference and self.n:
            st.upstream_sqnr, st.upstream_max = sqnr_db(self.r_sq, self.up_sq), self.up_max
            st.xmodel_sqnr, st.after_max = sqnr_db(self.r_sq, self.after_sq), self.after_max
        st.reasons = reasons(st)
        return st


def _channel_rows(a: np.ndarray, pair: Pair) -> Optional[np.ndarray]:
    """``a`` as one row per channel of ``pair``'s axis (None: ``a`` has no such axis of that many channels)."""
    axis = pair.axis if pair.axis is not None else 1
    if a.ndim == 0 or not -a.ndim <= axis < a.ndim or a.shape[axis] != pair.scale.size:
        return None
    return np.moveaxis(a, axis, 0).reshape(a.shape[axis], -1)


def _flat(arr) -> np.ndarray:
    a = np.asarray(arr)
    return (a if a.dtype == np.float32 or a.dtype == np.float64 else a.astype(np.float32)).reshape(-1)


def _dot(a: np.ndarray, b: np.ndarray) -> float:
    """Sum of products, accumulated in float64 (a float32 BLAS dot loses digits on large tensors;
    a float64 BLAS dot was 30x slower than einsum on a loaded machine)."""
    return float(np.einsum("i,i->", a, b, dtype=np.float64))


def pair_stats(pair: Pair, before: Sequence, after: Sequence, reference: Optional[Sequence] = None) -> PairStats:
    """Statistics of ``pair`` from its tensor before Q and after DQ, per iteration (and the float
    model's tensor, when known)."""
    acc = PairAccumulator(pair)
    for k, (x, y) in enumerate(zip(before, after)):
        acc.add(x, y, None if reference is None else reference[k])
    return acc.finish()


def percent(share: float) -> str:
    """A share as a percentage with two significant digits (0.004%, 12%)."""
    return f"{100 * share:.2g}%"


def reasons(st: PairStats) -> List[str]:
    """Why a pair costs accuracy, in words (sentinel range, clipping, saturation, coarse scale,
    per-tensor weight scale over uneven channels, local error)."""
    said = (reason(st) for reason in _REASONS)
    return [text for text in said if text is not None]


def _spread_reason(st: PairStats) -> Optional[str]:
    if st.spread is not None and st.spread >= SPREAD:
        return (f"per-tensor scale over channels of very different ranges (largest/smallest {st.spread:.0f}x): "
                "use per-channel quantization (quantize_static(..., per_channel=True))")
    return None


def _clipping_reason(st: PairStats) -> Optional[str]:
    if not st.clipped > 0:
        return None
    where = _worst_channel(st) if st.channel_range is not None else f"[{st.grid_lo:.4g}, {st.grid_hi:.4g}]"
    return f"clipping: {percent(st.clipped)} of values outside " + where


def _saturation_reason(st: PairStats) -> Optional[str]:
    if st.saturated > 0.01 and not st.pair.starts_at_zero and not st.sentinel_range:
        return f"saturation: {percent(st.saturated)} of values at the integer limits"
    return None


def _coarse_reason(st: PairStats) -> Optional[str]:
    if st.levels < COARSE_LEVELS and not st.sentinel_range:
        return f"coarse scale: the range [{st.lo:.4g}, {st.hi:.4g}] spans {st.levels:.1f} integer levels"
    return None


def _error_reason(st: PairStats) -> Optional[str]:
    """The pair's own error (always said, last)."""
    what = "weight" if st.pair.weight else "local"
    return (f"{what} error: max {st.local_max:.3g} ({st.local_steps:.2g} steps), SQNR {st.local_sqnr:.1f} dB"
            + (" (sentinels left out)" if st.sentinels else ""))


def _worst_channel(st: PairStats) -> str:
    """A per-channel pair's clipping in words: the channel whose observed range overshoots its own
    integer range the most."""
    p = st.pair
    zp, scale = p.zero_point.astype(np.float64).ravel(), p.scale.astype(np.float64).ravel()
    lo, hi = (p.qmin - zp) * scale, (p.qmax - zp) * scale
    seen_lo, seen_hi = st.channel_range if st.channel_range is not None else (lo, hi)
    over = np.maximum(np.asarray(seen_hi) - hi, lo - np.asarray(seen_lo)) / scale
    k = int(np.argmax(over))
    return (f"their channel's range (most at channel {k} of {scale.size}: observed [{seen_lo[k]:.4g}, "
            f"{seen_hi[k]:.4g}], range [{lo[k]:.4g}, {hi[k]:.4g}])")


def _sentinel_reason(st: PairStats) -> Optional[str]:
    if not st.sentinel_range:
        return None
    value = st.sentinel_value if st.sentinel_value is not None else (
        st.grid_lo if abs(st.grid_lo) >= abs(st.grid_hi) else st.grid_hi)
    share = f"{percent(st.sentinels)} of values are {value:.3g}; " if st.sentinels else ""
    return (f"sentinel range: {share}the range [{st.grid_lo:.3g}, {st.grid_hi:.3g}] holds a mask's fill value "
            f"({value:.3g}), so the scale {float(np.max(st.pair.scale)):.3g} leaves the data "
            f"[{st.lo:.4g}, {st.hi:.4g}] {st.levels:.2g} levels: keep this tensor in float, or quantize before the "
            "mask is applied")


_REASONS = (_sentinel_reason, _spread_reason, _clipping_reason, _saturation_reason, _coarse_reason, _error_reason)


def weight_stats(pair: Pair, weight) -> PairStats:
    """A weight pair's statistics: its weights against their quantized values (weight SQNR), and
    for a per-tensor scale, how unevenly its channels' ranges spread."""
    from toolkit.quant.qdq import fake_quantize

    w = np.asarray(weight, dtype=np.float32)
    st = pair_stats(pair, [w], [fake_quantize(pair, w)])
    st.spread = channel_spread(w) if pair.scale.size == 1 else None
    st.reasons = reasons(st)
    return st


def channel_spread(w: np.ndarray) -> Optional[float]:
    """Largest over smallest channel range (max |w| per output channel: axis 0 of a Conv weight,
    the last axis of a MatMul's); None for fewer than two channels."""
    if w.ndim < 2:
        return None
    axis = 0 if w.ndim >= 3 else w.ndim - 1
    ranges = np.abs(np.moveaxis(w, axis, 0).reshape(w.shape[axis], -1)).max(axis=1)
    ranges = ranges[ranges > 0]
    return float(ranges.max() / ranges.min()) if ranges.size >= 2 else None


def suggested(pair: Pair, st: PairStats):
    """(scale, zero point) the observed range gives: symmetric when the pair is (zero point 0 for
    a signed type, the middle for an unsigned one), asymmetric otherwise. A per-channel pair gets
    one per channel (arrays shaped as its scale and zero point), from each channel's range; a
    channel whose range is 0 keeps its scale."""
    lo, hi = _range_with_zero(pair, st)
    zp = pair.zero_point.astype(np.int64)
    kept = pair.scale.astype(np.float64).ravel() if pair.scale.size > 1 else 1.0  # (where a range is 0)
    if _symmetric(pair, zp):
        scale = np.maximum(np.abs(lo), np.abs(hi)) / (pair.qmax - zp.ravel()[0])
        scale = np.where(scale > 0, scale, kept)
        return np.broadcast_to(np.asarray(scale, np.float32), pair.scale.shape).copy(), pair.zero_point.copy()
    scale = (hi - lo) / (pair.qmax - pair.qmin)
    scale = np.where(scale > 0, scale, kept)
    zero = np.clip(np.round(pair.qmin - lo / scale), pair.qmin, pair.qmax)
    return (np.broadcast_to(np.asarray(scale, np.float32), pair.scale.shape).copy(),
            np.broadcast_to(np.asarray(zero).astype(pair.zero_point.dtype), pair.zero_point.shape).copy())


def _range_with_zero(pair: Pair, st: PairStats):
    """(lo, hi): the observed range widened to hold 0; per channel for a per-channel pair."""
    if pair.scale.size > 1 and st.channel_range is not None:
        return np.minimum(st.channel_range[0], 0.0), np.maximum(st.channel_range[1], 0.0)
    return np.float64(min(st.lo, 0.0)), np.float64(max(st.hi, 0.0))


def _symmetric(pair: Pair, zp: np.ndarray) -> bool:
    """Zero point 0 for a signed type, the middle for an unsigned one."""
    if pair.qmin < 0:
        return bool(np.all(zp == 0))
    return pair.qmin == 0 and bool(np.all(zp == (pair.qmax + 1) // 2))


def needs_scale(st: PairStats) -> bool:
    """A pair kept for clipping or a poor scale (a new scale may fix it without float)."""
    return st.clipped > 0 or st.levels < COARSE_LEVELS


def ranked(stats: Sequence[PairStats]) -> List[PairStats]:
    """Where error is added: faults first (clipping, coarse scale, more than rounding), each
    group by local SQNR, lowest (most error added) first."""
    return sorted(stats, key=lambda st: (st.rounding_only, st.local_sqnr))


def causes(stats: Sequence[PairStats], inputs: Sequence[str], limit: int = 3) -> List[str]:
    """The summary before the pairs: inputs that clip at their pair's range (the calibration did
    not see inputs like these), then the top causes among the other pairs, most error first."""
    return _calibration_mismatch(stats) + _clipping_inputs(stats, inputs) + _top_causes(stats, inputs, limit)


def _calibration_mismatch(stats: Sequence[PairStats]) -> List[str]:
    """Two or more pairs clip (sentinels aside): the calibration data was unlike these inputs."""
    clipping = [st for st in stats if st.clipped > 0 and not st.sentinel_range]
    if len(clipping) < 2:
        return []
    return [f"calibration mismatch: {len(clipping)} of the {len(stats)} pairs clip values outside their "
            "calibrated ranges (the calibration data did not cover inputs like these: recalibrate on them)"]


def _clipping_inputs(stats: Sequence[PairStats], inputs: Sequence[str]) -> List[str]:
    return [_input_clips(st) for st in stats if st.pair.tensor in inputs and st.clipped > 0]


def _top_causes(stats: Sequence[PairStats], inputs: Sequence[str], limit: int) -> List[str]:
    """The first ``limit`` other pairs that add more than rounding, most error first, with their main reason."""
    rest = [st for st in ranked(stats) if st.pair.tensor not in inputs and not st.rounding_only]
    return [f"{st.pair.shown}: {_main_reason(st)}" for st in rest[:limit]]


def _input_clips(st: PairStats) -> str:
    return (f"input {st.pair.tensor}: {percent(st.clipped)} of its values are outside the calibrated range "
            f"[{st.grid_lo:.4g}, {st.grid_hi:.4g}] (observed [{st.lo:.4g}, {st.hi:.4g}]): recalibrate on "
            "inputs like these")


def _main_reason(st: PairStats) -> str:
    """The pair's first reason other than its local error (else its last reason)."""
    return next((r for r in st.reasons if not r.startswith("local error")), st.reasons[-1] if st.reasons else "")

"""One generation step: its feeds, and the comparison of the two sides' outputs.

Step 0 runs the prompt on an empty cache; step k feeds the k-th generated token with the cache
of the step before. The attention mask covers the cache and the new tokens; the positions follow
the cache. A token flip whose logits are within the tolerances is a *near tie*: the reference's
top-2 margin is within the difference the two sides show (counted, never a divergence).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Mapping, Optional, Sequence

import numpy as np

from toolkit.core.compare.arrays import OutputComparison, compare_arrays
from toolkit.core.compare.tolerances import Tolerances
from toolkit.core.errors import InputError
from toolkit.core.meta import dtype_to_numpy
from toolkit.llm.io import DecoderIO

Feed = Dict[str, np.ndarray]


def step_feed(io: DecoderIO, tokens: Sequence[int], cache: Optional[Sequence] = None) -> Feed:
    """The feed of one step: ``tokens`` (the prompt, or one token) after ``cache`` (per layer a
    (key, value) pair of arrays, or None for an empty cache), cast to the model's dtypes."""
    past_len = 0 if cache is None else int(cache[0][0].shape[io.past[0][0].seq_axis])
    n = len(tokens)
    feed: Feed = {io.input_ids: np.asarray([list(tokens)], dtype=dtype_to_numpy(io.ids_dtype))}
    if io.attention_mask:
        feed[io.attention_mask] = np.ones((1, past_len + n), dtype=dtype_to_numpy(io.mask_dtype))
    if io.position_ids:
        feed[io.position_ids] = np.arange(past_len, past_len + n, dtype=dtype_to_numpy(io.position_dtype))[None, :]
    if io.use_cache_branch:
        feed[io.use_cache_branch] = np.array([cache is not None])
    feed.update(_cache_feed(io, cache))
    return feed


def _cache_feed(io: DecoderIO, cache: Optional[Sequence]) -> Feed:
    """Every past key and value input: ``cache``'s arrays in the model's dtypes (empty ones for no cache)."""
    if cache is None:
        return {inp.name: inp.empty() for pair in io.past for inp in pair}
    feed: Feed = {}
    for (key, value), arrays in zip(io.past, cache):
        for inp, arr in zip((key, value), arrays):
            feed[inp.name] = _as_dtype(np.asarray(arr), dtype_to_numpy(inp.dtype))
    return feed


def _as_dtype(arr: np.ndarray, want) -> np.ndarray:
    return arr if arr.dtype == want else arr.astype(want)


def cache_of(io: DecoderIO, outputs: Mapping[str, object], expected: int, where: str = "the model") -> List[tuple]:
    """The present outputs of a step, per layer (key, value): the next step's cache, which must
    hold ``expected`` positions (the cache fed and the new tokens; InputError otherwise: a model
    whose present outputs hold only the new positions, or another layout, cannot be fed back)."""
    cache = [(outputs[k], outputs[v]) for k, v in io.present]
    axis = io.past[0][0].seq_axis
    for name in io.present_names():
        shape = getattr(outputs[name], "shape", ())
        if len(shape) <= axis or shape[axis] != expected:
            raise InputError(
                f"{where}: present output '{name}' has shape {tuple(shape)}, not the {expected} positions of the "
                f"cache fed plus the new tokens on axis {axis}: only caches that the model concatenates and "
                "returns whole can be fed back (map other names with --name)")
    return cache


def last_logits(io: DecoderIO, outputs: Mapping[str, object]) -> np.ndarray:
    """The logits of the last position (a 1-D row over the vocabulary), in float64."""
    arr = np.asarray(outputs[io.logits])
    return arr.reshape(-1, arr.shape[-1])[-1].astype(np.float64)


@dataclass
class NearTie:
    """A token flip the tolerances explain: the reference's top-2 margin is within the difference measured."""

    prompt: int
    step: int
    reference_token: int
    test_token: int
    margin: float  # reference logit of its token minus its logit of the test's token
    difference: float  # how far the two sides moved those two logits apart

    def to_json(self) -> dict:
        return {"prompt": self.prompt, "step": self.step, "reference_token": self.reference_token,
                "test_token": self.test_token, "margin": self.margin, "difference": self.difference}


@dataclass
class StepResult:
    """The comparison of one step: which outputs fail, the tokens each side picks."""

    failed: List[OutputComparison] = field(default_factory=list)
    logits_failed: bool = False
    reference_token: int = -1
    test_token: int = -1
    margin: float = 0.0
    difference: float = 0.0
    compared: int = 0
    nan_in_test: List[str] = field(default_factory=list)  # failed outputs NaN on the test side only
    both_nan: List[str] = field(default_factory=list)  # outputs that pass with NaN on both sides

    @property
    def kind(self) -> Optional[str]:
        """``logits`` (this step's compute differs), ``cache`` (only a present output differs), or None."""
        if self.logits_failed:
            return "logits"
        return "cache" if self.failed else None

    @property
    def flipped(self) -> bool:
        return self.reference_token != self.test_token

    def max_abs_diff(self) -> float:
        """The largest difference among the failed outputs; NaN when the test side has NaN where the
        reference does not (no difference is measured there)."""
        if self.nan_in_test:
            return float("nan")
        values = [c.max_abs for c in self.failed if c.max_abs == c.max_abs]
        return max(values) if values else float("nan")


def has_nan(a: np.ndarray) -> bool:
    return a.dtype.kind in "fc" and bool(np.isnan(a).any())


def nan_only_in(a: np.ndarray, b: np.ndarray) -> bool:
    """``a`` has NaN where ``b`` has not (a compare reports that as an infinite difference)."""
    if not has_nan(a):
        return False
    if a.shape != b.shape or b.dtype.kind not in "fc":
        return True
    return bool((np.isnan(a) & ~np.isnan(b)).any())


def compare_step(test_io: DecoderIO, ref_io: DecoderIO, test_out: Mapping, ref_out: Mapping,
                 tol: Tolerances) -> StepResult:
    """Compare the logits and every present output of one step (test against the reference)."""
    res = StepResult()
    pairs = [(test_io.logits, ref_io.logits)] + list(zip(test_io.present_names(), ref_io.present_names()))
    for test_name, ref_name in pairs:
        a, b = np.asarray(test_out[test_name]), np.asarray(ref_out[ref_name])
        atol, rtol, stat = tol.for_output(test_name, a.dtype.kind in "biu" and b.dtype.kind in "biu")
        cmp = compare_arrays(test_name, a, b, atol, rtol, stat, tol.quantile_for(test_name))
        _record(res, cmp, a, b, test_name == test_io.logits)
    ref_row, test_row = last_logits(ref_io, ref_out), last_logits(test_io, test_out)
    res.reference_token, res.test_token = int(np.argmax(ref_row)), int(np.argmax(test_row))
    if res.flipped:
        r, t = res.reference_token, res.test_token
        res.margin = float(ref_row[r] - ref_row[t])
        res.difference = float(abs(test_row[r] - ref_row[r]) + abs(test_row[t] - ref_row[t]))
    return res


def _record(res: StepResult, cmp, a: np.ndarray, b: np.ndarray, logits: bool) -> None:
    """One output's comparison into ``res``: NaN on both sides, NaN in the test only, a failure."""
    res.compared += 1
    if cmp.passed:
        if has_nan(a) and has_nan(b):
            res.both_nan.append(cmp.name)
        return
    if nan_only_in(a, b):
        res.nan_in_test.append(cmp.name)
    res.failed.append(cmp)
    res.logits_failed = res.logits_failed or logits

"""Task metrics as the pass rule of a Q/DQ search (``--metric``), instead of elementwise tolerances.

Elementwise tolerances make little sense on a classifier's scores or a recognizer's softmax: a
model is good when it picks the same classes. A metric compares each output of the candidate with
the reference's, one input set at a time; the input set passes when every output does:

- ``top1``: the candidate's top class equals the reference's, per sample (the first axis is the
  batch; the rest is flattened). Tolerance: the share of samples allowed to differ (default 0).
- ``topk:K``: the reference's top class is among the candidate's top K, per sample. Same tolerance.
- ``argmax-agreement``: the argmax over the last axis agrees at every position (sequence labels,
  segmentation maps). Tolerance: the share of positions allowed to differ (default 0).
- ``cosine``: the cosine similarity of the flattened outputs is at least ``1 - tolerance``
  (default 0.01).
- ``snr-db``: ``20 log10(|ref| / |ref - candidate|)`` is at least ``tolerance`` dB (default 20).

``--metric-outputs NAME...`` names the outputs judged (default: every output; a recurrent model's
state output has no top class).

A Python callable ``fn(reference, candidate) -> bool`` (each a dict of output name to array, one
input set) is a metric too (the API's ``QdqConfig.metric``).

No Typer or Rich here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from toolkit.core.errors import UsageError

NAMES = ("top1", "topk:K", "argmax-agreement", "cosine", "snr-db")
DEFAULT_TOLERANCE = {"top1": 0.0, "topk": 0.0, "argmax-agreement": 0.0, "cosine": 0.01, "snr-db": 20.0}

MetricFn = Callable[[Mapping[str, np.ndarray], Mapping[str, np.ndarray]], bool]


@dataclass
class MetricOutput:
    """One output under a metric (what the search's wording reads: name, passed, a value)."""

    name: str
    passed: bool
    text: str
    required_atol: float = 0.0  # (the engine's "worst output" ordering: larger is worse)


@dataclass
class MetricIteration:
    """One input set under a metric, shaped as the engine reads a comparison."""

    passed: bool
    outputs: List[MetricOutput] = field(default_factory=list)
    only_a: List[str] = field(default_factory=list)
    only_b: List[str] = field(default_factory=list)


@dataclass
class Metric:
    name: str  # "top1", "topk", "argmax-agreement", "cosine", "snr-db", or "callable"
    tolerance: float
    k: int = 1
    fn: Optional[MetricFn] = None
    outputs: List[str] = field(default_factory=list)  # the outputs judged (none given: every output)

    def label(self) -> str:
        return f"topk:{self.k}" if self.name == "topk" else self.name

    def judged(self, outputs: Mapping[str, Any]) -> Mapping[str, Any]:
        """The outputs the metric judges, of ``outputs`` (by name)."""
        if not self.outputs:
            return outputs
        return {n: v for n, v in outputs.items() if n in self.outputs}

    def iteration(self, ref: Mapping[str, Any], got: Mapping[str, Any]) -> MetricIteration:
        ref = self.judged(ref)
        missing = [n for n in ref if n not in got]
        if self.fn is not None:
            return _judged_by(self.fn, ref, got, missing)
        outs = self._outputs(ref, got)
        return MetricIteration(all(o.passed for o in outs) and not missing, outs, only_a=missing)

    def _outputs(self, ref: Mapping[str, Any], got: Mapping[str, Any]) -> List[MetricOutput]:
        """Each output of ``ref`` that ``got`` has too, judged."""
        return [self._output(n, np.asarray(ref[n]), np.asarray(got[n])) for n in ref if n in got]

    def _output(self, name: str, r: np.ndarray, c: np.ndarray) -> MetricOutput:
        if not _measurable(r, c):
            return _equality(name, r, c)
        value, ok, text = _MEASURES[self.name](r.astype(np.float64), c.astype(np.float64), self)
        return MetricOutput(name, ok, f"{text} at {name}", value)


def _measurable(r: np.ndarray, c: np.ndarray) -> bool:
    """Outputs a metric measures: the same shape, float or complex, not empty."""
    return r.shape == c.shape and r.dtype.kind in "fc" and bool(r.size)


def _equality(name: str, r: np.ndarray, c: np.ndarray) -> MetricOutput:
    """An output no metric measures, judged by equality."""
    ok = r.shape == c.shape and np.array_equal(r, c)
    return MetricOutput(name, ok, f"{'equal' if ok else 'differs'} at {name}", 0.0 if ok else 1.0)


def _judged_by(fn: MetricFn, ref: Mapping[str, Any], got: Mapping[str, Any], missing: List[str]) -> MetricIteration:
    """The user's metric function judges all outputs at once (an output missing: a failure)."""
    ok = bool(fn(ref, got)) if not missing else False
    return MetricIteration(ok, [MetricOutput("outputs", ok, f"metric {'passes' if ok else 'fails'}")], only_a=missing)


def _rows(a: np.ndarray) -> np.ndarray:
    return a.reshape(a.shape[0], -1) if a.ndim >= 2 else a.reshape(1, -1)


def _top1(r, c, m: Metric) -> Tuple[float, bool, str]:
    rr, cc = _rows(r), _rows(c)
    if m.name == "topk":
        top = np.argsort(-cc, axis=1)[:, : m.k]
        differ = float(np.mean([rr[i].argmax() not in top[i] for i in range(rr.shape[0])]))
        what = f"top-{m.k} misses"
    else:
        differ = float(np.mean(rr.argmax(axis=1) != cc.argmax(axis=1)))
        what = "top-1 disagreement"
    return differ, differ <= m.tolerance + 1e-12, f"{what} {100 * differ:.3g}%"


def _argmax(r, c, m: Metric) -> Tuple[float, bool, str]:
    differ = float(np.mean(r.argmax(axis=-1) != c.argmax(axis=-1)))
    return differ, differ <= m.tolerance + 1e-12, f"argmax disagreement {100 * differ:.3g}%"


def _cosine(r, c, m: Metric) -> Tuple[float, bool, str]:
    a, b = r.ravel(), c.ravel()
    na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    cos = 1.0 if na == nb == 0 else (float(a @ b) / (na * nb) if na and nb else 0.0)
    return 1 - cos, cos >= 1 - m.tolerance, f"cosine {cos:.6g}"


def _snr(r, c, m: Metric) -> Tuple[float, bool, str]:
    signal, noise = float(np.linalg.norm(r)), float(np.linalg.norm(r - c))
    db = math.inf if noise == 0 else (20 * math.log10(signal / noise) if signal else -math.inf)
    return -db, db >= m.tolerance, f"SNR {db:.1f} dB"


_MEASURES = {"top1": _top1, "topk": _top1, "argmax-agreement": _argmax, "cosine": _cosine, "snr-db": _snr}


def parse(spec: Union[str, MetricFn, None], tolerance: Optional[float] = None,
          outputs: Sequence[str] = ()) -> Optional[Metric]:
    """The metric of ``--metric SPEC`` (``--metric-tolerance``, ``--metric-outputs``), or a
    callable; None: none."""
    if spec is None or spec == "":
        return None
    if callable(spec):
        return Metric("callable", 0.0 if tolerance is None else tolerance, fn=spec, outputs=list(outputs))
    metric = _parse_name(str(spec), tolerance)
    metric.outputs = list(outputs)
    return metric


def _parse_name(spec: str, tolerance: Optional[float]) -> Metric:
    name, _, arg = str(spec).partition(":")
    k = _k_of(spec, name, arg)
    tol = DEFAULT_TOLERANCE[name] if tolerance is None else float(tolerance)
    if tol < 0 and name != "snr-db":
        raise UsageError(f"--metric-tolerance {tolerance}: must be 0 or more for {name}")
    return Metric(name, tol, k=k)


def _k_of(spec: str, name: str, arg: str) -> int:
    """K of ``topk:K`` (1 for the other metrics, which take no argument); UsageError for an unknown
    name or a bad K."""
    unknown = UsageError(f"--metric {spec}: use one of {', '.join(NAMES)} (K a whole number)")
    if name == "topk":
        if not arg.isdigit():
            raise unknown
        if int(arg) < 1:
            raise UsageError(f"--metric {spec}: K must be at least 1")
        return int(arg)
    if name not in DEFAULT_TOLERANCE or arg:
        raise unknown
    return 1


def classes(metric: Metric, value: np.ndarray) -> Optional[int]:
    """How many classes a ranking metric (top1, topk, argmax-agreement) chooses among in ``value``:
    per sample for top1/topk (every axis after the first), the last axis for argmax-agreement;
    None for other metrics and for outputs judged by equality (not float, or empty)."""
    if metric.name not in ("top1", "topk", "argmax-agreement") or value.dtype.kind not in "fc" or not value.size:
        return None
    if metric.name == "argmax-agreement":
        return int(value.shape[-1]) if value.ndim else 1
    return int(_rows(value).shape[1])


def check_classes(metric: Optional[Metric], outputs: Mapping[str, Any]) -> None:
    """UsageError where a ranking metric would compare nothing: one class (every top1 agrees) or
    ``topk:K`` with K at least the number of classes (every top-K holds the reference's class)."""
    if metric is None:
        return
    for name, value in metric.judged(outputs).items():
        count = classes(metric, np.asarray(value))
        if count is not None:
            _refuse_if_nothing_compared(metric, name, count)


def _refuse_if_nothing_compared(metric: Metric, name: str, count: int) -> None:
    """UsageError when output ``name``'s ``count`` classes leave the ranking metric nothing to compare."""
    if count <= 1:
        raise UsageError(f"--metric {metric.label()}: output {name} has a single class (its "
                         f"{'last axis' if metric.name == 'argmax-agreement' else 'sample'} has size {count}), "
                         "so the metric compares nothing; use cosine or snr-db, or --metric-outputs to leave "
                         "it out")
    if metric.name == "topk" and metric.k >= count:
        raise UsageError(f"--metric {metric.label()}: output {name} has {count} classes, so every top-{metric.k} "
                         f"holds the reference's class and the metric compares nothing; use a K below {count}")


def describe(comps) -> str:
    """The worst input set's worst output, in the metric's words."""
    worst = worst_output(comps)
    return worst.text if worst is not None else ""


def worst_output(comps):
    """The worst output of the comparisons ``comps`` (one per input set; each output with
    ``passed`` and ``required_atol``, larger is worse), None when there is none: a failing output
    before a passing one, then the larger value, a NaN value above every number (an output gone
    NaN where the reference has a value is named before any finite error), the first of equals."""
    outputs = (o for it in comps for o in it.outputs)
    return max(outputs, key=lambda o: (not o.passed, badness(o.required_atol)), default=None)


def badness(value: Optional[float]) -> Tuple[bool, float]:
    """How bad an output's ``required_atol`` is, for ordering: NaN (or no value) above +inf."""
    if value is None or value != value:
        return True, 0.0
    return False, float(value)


def summary(metric: Metric) -> str:
    if metric.fn is not None:
        return "the given metric function"
    bound = {"cosine": f"cosine >= {1 - metric.tolerance:g}", "snr-db": f"SNR >= {metric.tolerance:g} dB"}
    return bound.get(metric.name, f"{metric.label()}, at most {100 * metric.tolerance:g}% differing")


def as_dict(metric: Metric) -> Dict[str, Any]:
    return {"metric": metric.label(), "tolerance": metric.tolerance}

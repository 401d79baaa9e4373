"""How badly a model failed a comparison: the evidence shown with a reduce result.

An :class:`Evidence` is a list of per-tensor errors (:class:`TensorEvidence`): the largest
absolute and relative error, the tolerance each would need to pass, and the tolerance it
was held to. It comes from

- the built-in comparison (``debug reduce --compare``), typed: the check's child keeps its
  comparisons (:class:`Findings`, each row :meth:`TensorEvidence.of` an output's comparison) and
  hands them back through a pipe (``CheckResult.evidence``), or
- the output of a ``--check`` command of the user's, which has only text (:func:`from_check_output`
  reads the per-tensor ``PASSED``/``FAILED | name | max abs ... | would pass with atol A
  or rtol R (stat) | tolerance atol a, rtol r`` lines a ``toolkit run`` check prints).

:func:`noise_warning` says when a reduced model's failure looks like float rounding
(ONNX-Runtime's different fusions on a small subgraph) rather than the fault.

No Typer or Rich here.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Dict, List, Optional, Sequence, Tuple

from toolkit.core.compare.judged import JudgedTensor
from toolkit.core.compare.noise import NEAR_TOLERANCE, STORAGE_FLOOR, evidence_is_rounding, passing_tolerance
from toolkit.core.graph.constants import constant_nodes
from toolkit.core.shared_options import ATOL_FLAG, RTOL_FLAG

if TYPE_CHECKING:
    from toolkit.core.compare.arrays import OutputComparison

_NUM = r"([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|inf|nan)"
_ROW = re.compile(
    r"(?m)^\s*(PASSED|FAILED) \| (.+?) \| max abs " + _NUM + r", mean abs [^,]+, max rel " + _NUM
    + r".*? \| would pass with atol " + _NUM + r" or rtol " + _NUM + r" \((\w+)\) \| tolerance atol "
    + _NUM + r", rtol " + _NUM
)

# A reduced failure this many times smaller than the full model's is suspicious (an addendum
# to a rounding-sized failure, never a reason on its own: a real fault may be smaller than
# the error it causes downstream). What is rounding is decided by toolkit.core.compare.noise.
FAR_SMALLER = 100.0


@dataclass
class TensorEvidence(JudgedTensor):
    """One tensor of the evidence: a judged tensor, and the tolerances that would pass it."""

    needed_atol: float  # passes with this atol (at the rtol given) ...
    needed_rtol: float  # ... or with this rtol (at the atol given)

    @classmethod
    def of(cls, c: "OutputComparison") -> "TensorEvidence":
        """The evidence of one output's comparison."""
        return cls(
            name=str(c.name), passed=bool(c.passed), max_abs=float(c.max_abs), max_rel=float(c.max_rel),
            atol=float(c.atol), rtol=float(c.rtol), stat=str(c.stat),
            needed_atol=_number(c.required_atol), needed_rtol=_number(c.required_rtol),
        )


@dataclass
class Evidence:
    tensors: List[TensorEvidence] = field(default_factory=list)
    source: str = "check output"  # or the name of a built-in comparison

    @property
    def failing(self) -> List[TensorEvidence]:
        return [t for t in self.tensors if not t.passed]

    @property
    def worst(self) -> Optional[TensorEvidence]:
        """The failing tensor with the largest error (relative to its tolerance)."""
        bad = self.failing
        if not bad:
            return None

        def excess(t: TensorEvidence) -> float:
            return t.max_abs / t.atol if t.atol > 0 else t.max_abs

        return max(bad, key=lambda t: (excess(t), t.max_abs))

    def describe(self) -> str:
        w = self.worst
        if w is None:
            return f"{len(self.tensors)} tensor(s) compared, all within tolerance"
        more = len(self.failing) - 1
        tail = f" (+{more} more tensor{'s' if more != 1 else ''} out of tolerance)" if more else ""
        return (
            f"largest error {_g(w.max_abs)} (max rel {_g(w.max_rel)}) on '{w.name}': would need atol "
            f"{_g(w.needed_atol)} or rtol {_g(w.needed_rtol)}; tolerance is atol {_g(w.atol)}, rtol {_g(w.rtol)}{tail}"
        )

    def to_json(self) -> dict:
        w = self.worst
        return {
            "source": self.source,
            "compared": len(self.tensors),
            "failing": len(self.failing),
            "worst": _finite(asdict(w)) if w is not None else None,
        }


class Findings:
    """What a built-in check's runs found, kept as its typed result (never printed and read back):
    its failing outputs (``rows``: what a quiet ``toolkit run`` prints of its comparisons, each
    failing output with numbers, once) and the first diagnosis's tensors (``tensors``: the
    layerwise errors, ``toolkit.run.diagnosis.TensorError``, where the run gathered them: with
    ``--save-report``, or failing with enough tensors)."""

    def __init__(self) -> None:
        self.rows: Dict[tuple, TensorEvidence] = {}
        self.tensors: Optional[list] = None  # None: no diagnosis

    def clear(self) -> None:
        self.rows, self.tensors = {}, None

    def add(self, report) -> None:
        """The comparisons of one run (a ``toolkit.run`` report)."""
        self._add_rows(report.comparisons)
        diagnosed = [d for d in report.diagnoses if d is not None]
        if diagnosed:
            self.tensors = list(diagnosed[0].tensors)

    def _add_rows(self, comparisons) -> None:
        """A row for each tensor that failed a comparison by its values (not with a message), once per error."""
        for pair in comparisons:
            for it in pair.iterations:
                for o in it.outputs:
                    if not o.passed and not o.message:
                        row = TensorEvidence.of(o)
                        self.rows.setdefault((row.name, row.max_abs), row)

    def evidence(self) -> Optional[Evidence]:
        return Evidence(list(self.rows.values()), source="built-in comparison") if self.rows else None


def _number(value: Optional[float]) -> float:
    return float(value) if value is not None else math.nan


def _finite(d: dict) -> dict:
    """Infinite or NaN numbers (a relative error against a reference 0) as null: strict JSON."""

    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in d.items()}


def from_check_output(text: str) -> Optional[Evidence]:
    """The per-tensor comparison rows a ``toolkit run`` check printed, or None."""
    rows = []
    seen = set()
    for m in _ROW.finditer(text):
        verdict, name, max_abs, max_rel, n_atol, n_rtol, stat, atol, rtol = m.groups()
        key = (name, verdict, max_abs)
        if key in seen:
            continue
        seen.add(key)
        rows.append(
            TensorEvidence(
                name=name.strip(), passed=verdict == "PASSED", max_abs=float(max_abs), max_rel=float(max_rel),
                atol=float(atol), rtol=float(rtol), stat=stat, needed_atol=float(n_atol), needed_rtol=float(n_rtol),
            )
        )
    return Evidence(rows) if rows else None


def evidence_of(res, built_in: bool) -> Optional[Evidence]:
    """How badly a check (its ``CheckResult``) failed: the built-in comparison's own, typed (None
    where it compared nothing); a check command's, read from the rows it printed."""
    if built_in or res.findings is not None:
        return res.evidence
    return from_check_output(f"{res.stdout_text}\n{res.stderr_text}")


def noise_warning(
    full: Optional[Evidence], reduced: Optional[Evidence], check: Optional[Sequence[str]] = None,
    precision: Optional[str] = None,
) -> Optional[str]:
    """A warning when the reduced model's failure is the size of float32 rounding (the noise
    model of :mod:`toolkit.core.compare.noise`), else None. ``check``: the check command (its advice
    leaves out what it already does). ``precision``: "fp16" or "bf16" when the runner under test
    stores tensors so: the rounding is then named as that storage's."""

    r = reduced.worst if reduced is not None else None
    if r is None:
        return None
    kind = evidence_is_rounding(r.max_abs, r.max_rel, r.atol)  # (an overflow or NaN never is)
    if kind is None:
        return None
    why = _rounding_why(r, kind, precision) + _far_below_full(r, full)
    return f"{why}, so this result may be noise rather than the fault. To look past it: " + _noise_advice(r, check)


def _far_below_full(r: TensorEvidence, full: Optional[Evidence]) -> str:
    """Words for a reduced model's failure ``r`` far smaller than the full model's ('' otherwise)."""
    f = full.worst if full is not None else None
    if f is not None and f.max_abs > 0 and r.max_abs * FAR_SMALLER <= f.max_abs:
        return f", and far less than the full model's {_g(f.max_abs)} on '{f.name}'"
    return ""


def _rounding_why(r: TensorEvidence, kind: str, precision: Optional[str]) -> str:
    """What makes the failure ``r`` look like rounding (``kind``: "rel", its relative error, else its
    nearness to the tolerance), and whose rounding."""
    source = (
        f"{precision} storage rounding (the runner under test stores tensors in {precision})" if precision
        else "float rounding differences between ONNX-Runtime's kernels on a small subgraph and on the full model"
    )
    if kind == "rel":
        return f"the reduced model fails by {_g(r.max_abs)} (max rel {_g(r.max_rel)}), the size of {source}"
    return f"the reduced model fails by {_g(r.max_abs)}, within {NEAR_TOLERANCE:g}x of the tolerance: the size of {source}"


def _noise_advice(r: TensorEvidence, check: Optional[Sequence[str]]) -> str:
    words = list(check or [])
    advice = [f"raise the check's tolerances above it ({ATOL_FLAG} {_g(_round_up(1.5 * r.needed_atol))})"]
    if "<reference>" in words:  # the built-in comparison: every subgraph is fed the reference's values
        advice.append(
            "or compare with ONNX-Runtime's graph optimizations off on both sides "
            "(--compare onnxrt:opt=disable onnxrt:opt=disable)"
        )
        return ", ".join(advice)
    marked = any(w == "mark" for w in words) and "all" in words
    if not marked:
        advice.append("compare every tensor (--onnx-outputs mark all in the golden run)")
    advice.append(
        "or disable ONNX-Runtime graph optimizations in both the golden run and the check (--ort-optimization disable)"
    )
    return ", ".join(advice)


def storage_rounding_warning(
    reduced: Optional[Evidence], precision: Optional[str], scale: Optional[float] = None, some_passed: bool = False
) -> Optional[str]:
    """A warning when the reduced model fails by no more than the rounding of ``precision``
    ("fp16" or "bf16") storage itself: at such tolerances any node of the model fails alone,
    so the result names the first node tried, not the place where the error grows.

    ``scale``: the largest magnitude of the worst tensor in the reference, where known; the error
    is then also measured against it (a Conv's output crossing 0 has a max rel of 1e3 from
    rounding alone, where its error is 0.5% of its largest value). ``some_passed``: a subgraph
    passed the check (so not every node fails alone)."""

    r = reduced.worst if reduced is not None else None
    # that storage's unit roundoff, twice: an input rounded on its way in, the output on its way out
    step = 2 * STORAGE_FLOOR[precision] if precision in STORAGE_FLOOR else None
    if r is None or step is None:
        return None
    rel, how = _relative_error(r, scale)
    if rel > step:
        return None
    give = _tolerances_past(r, step)
    alone = "a single node can fail by that rounding alone" if some_passed else "every node of the model fails alone"
    return (
        f"the reduced model fails by {_g(r.max_abs)} ({how}), no more than {precision} storage "
        f"rounds any value (relative {_g(step)}): at these tolerances {alone}, so this result shows {precision}'s "
        f"precision rather than where the error grows. Give tolerances above it {give} to find the nodes that "
        "amplify the error"
    )


def _tolerances_past(r: TensorEvidence, step: float) -> str:
    """The tolerances that look past a storage rounding of relative ``step`` (failure ``r``), in words."""
    suggest = _round_up(4 * step)
    if suggest > r.rtol:
        return f"({RTOL_FLAG} {_g(suggest)}, and an {ATOL_FLAG} for values near 0)"
    # (the rtol given is above it already: the elements near 0 need an atol)
    return f"(an {ATOL_FLAG} above {_g(r.max_abs)} for values near 0)"


def _relative_error(r: TensorEvidence, scale: Optional[float]) -> Tuple[float, str]:
    """(the relative error of ``r``, how it is said): its max rel, or its error relative to the
    tensor's largest value ``scale`` where that is known and smaller."""
    rel = r.max_rel if math.isfinite(r.max_rel) else math.inf
    if scale and math.isfinite(scale) and scale > 0 and math.isfinite(r.max_abs) and r.max_abs / scale < rel:
        rel = r.max_abs / scale
        return rel, f"{_g(rel)} of the tensor's largest value, {_g(scale)}"
    return rel, f"max rel {_g(r.max_rel)}"


# ops whose output moves by whole steps: an input off by rounding alone can move it one step
STEP_OPS = frozenset({"Floor", "Ceil", "Round", "Sign", "QuantizeLinear", "DynamicQuantizeLinear"})


def step_warning(reduced: Optional[Evidence], model) -> Optional[str]:
    """A warning when the reduced model's worst tensor comes from a step function (``Floor``,
    ``Round``, ``QuantizeLinear``...) and is off by at most one step: rounding before the step,
    too small to fail anywhere else, is enough for that (a quantizer decomposed into ``Div`` and
    ``Floor`` on two backends, or fp16 storage of the step's input). A ``DequantizeLinear`` of a
    ``QuantizeLinear`` (a QDQ pair) counts, its step being the scale: a value at a half step
    rounds either way on two backends. ``model``: the reduced model."""
    r = reduced.worst if reduced is not None else None
    if r is None or r.passed or not math.isfinite(r.max_abs):
        return None
    producer = _producer(model, r.name)
    found = _step_source(model, producer) if producer is not None else None
    if found is None or r.max_abs > found[1] * (1 + 1e-3):
        return None
    step, _size = found
    return (
        f"'{r.name}' comes from {_step_words(step, producer)}, a step function, and is off by {_g(r.max_abs)}, at "
        "most one step: rounding at its input alone (a few float32 ulps on another backend, fp16 or bf16 storage) "
        "moves it so, and so would a wrong kernel. Look at the elements that differ (--onnx-outputs mark all): when "
        f"their step inputs sit next to a step boundary, this is rounding made visible, not the fault; {ATOL_FLAG} "
        f"{_g(_up(found[1]))} looks past it"
    )


def _step_words(step, producer) -> str:
    """The step-function node named, and the node its value reaches the tensor through."""
    node = f" ({step.name})" if step.name else ""
    if step is producer:
        return f"{step.op_type}{node}"
    return f"{step.op_type}{node} through {producer.op_type}" + (f" ({producer.name})" if producer.name else "")


def _step_source(model, producer):
    """(the step-function node, its step) behind ``producer``'s output: ``producer`` itself when
    it is one (step 1), or the ``QuantizeLinear`` a ``DequantizeLinear`` reads (step: the largest
    scale, from the model's constants); None otherwise."""
    if producer.domain not in ("", "ai.onnx"):
        return None
    if producer.op_type in STEP_OPS:
        return producer, 1.0
    if producer.op_type != "DequantizeLinear" or len(producer.input) < 2:
        return None
    return _quantizer_behind(model, producer)


def _quantizer_behind(model, dq):
    """(the step-function node the DequantizeLinear ``dq`` reads, the largest of its scale), or None."""
    src = _producer(model, dq.input[0])
    if src is None or src.op_type not in STEP_OPS or src.domain not in ("", "ai.onnx"):
        return None
    scale = _constant(model, dq.input[1])
    if scale is None or not scale.size:
        return None
    return src, float(abs(scale).max())


def _producer(model, name: str):
    """The node of ``model`` that makes tensor ``name``, or None."""
    return next((n for n in model.graph.node if name in n.output), None)


def _constant(model, name: str):
    """The value of ``name`` when an initializer or a Constant node of ``model`` holds it, else None."""
    from onnx import numpy_helper

    for t in model.graph.initializer:
        if t.name == name:
            return numpy_helper.to_array(t)
    return _constant_node_value(model, name)


def _constant_node_value(model, name: str):
    """The value a Constant node of ``model`` gives ``name``, else None."""
    from onnx import numpy_helper

    tensor = next((t for n, t in constant_nodes(model.graph) if n.output[0] == name), None)
    return numpy_helper.to_array(tensor) if tensor is not None else None


def _up(x: float) -> float:
    """``x`` rounded up to two significant digits (a tolerance that passes an error of ``x``)."""
    if x <= 0:
        return x
    unit = 10.0 ** (math.floor(math.log10(x)) - 1)
    return math.ceil(x / unit - 1e-9) * unit


def _round_up(x: float) -> float:
    """``x`` rounded up to one significant digit (a tolerance to suggest)."""

    return passing_tolerance(x / 1.5)


def _g(x: float) -> str:
    return f"{x:.3g}"

"""The converted model run against the original in ONNX-Runtime (``convert``'s check).

The reference of every figure is the original as ONNX-Runtime runs it by default (every graph
optimization on: its Q/DQ fusions, for one, change its outputs), never a copy with optimizations
off. Both models run on several input sets (generated: the seed's set and the next ones, as
``toolkit run --iterations N`` generates them; or every loaded set) at their outputs: plain
runs, no tensor marked, one ONNX-Runtime session per model for all the sets (the sessions cost
more than the runs). One set is not enough: whether fp16 rounding overflows a sum, or moves a
value across a quantization step, depends on the values, and one set can show 4e-5 where
another shows 0.07. The set reported is the worst one: the one with the largest error among
those that differ beyond the tolerances, else the one with the largest error.

The converted model runs with its fp16 (bf16) storage emulated
(:func:`toolkit.convert.emulate.emulate_mixed`: every reduced tensor rounded after the node that
makes it, computed in fp32): ONNX-Runtime's CPU kernels compute many fp16 ops in fp32 and drop
the Casts between them, which hides an overflow that a GPU, storing fp16 between nodes, shows.
Only when an output differs beyond the tolerances are both run again, on the worst set, with
every float tensor of the original's top graph marked as an output, to name the first one
(in topological order) that differs: the place to start looking (``toolkit debug precision``
finds the nodes to keep in fp32).

No Typer or Rich here.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import onnxruntime as ort
from onnx import numpy_helper

from toolkit.convert.common import BFLOAT16, FLOAT, FLOAT16, copy_model, iter_nodes, producers, widened
from toolkit.convert.emulate import emulate_mixed
from toolkit.convert.onnx_types import STRIPPED, infer_types, tensor_types, without_big_data
from toolkit.core.compare.arrays import error_arrays
from toolkit.core.errors import ExitCode, InferenceError, one_line, ort_errors
from toolkit.core.process.interrupt import interruptible_run
from toolkit.core.graph.layerwise import set_outputs

# a tensor differs when its largest absolute error is past ATOL + RTOL * its largest magnitude
ATOL = 1e-2
RTOL = 5e-2
# generated input sets the check runs (the seed's set and the next ones): see docs/performance.md
INPUT_SETS = 3


@dataclass
class Validation:
    """How far the converted model's outputs are from the original's: the numbers of the worst
    input set (``input_set``), and the largest error of every set (``set_errors``)."""

    errors: Dict[str, float] = field(default_factory=dict)  # output -> largest absolute error
    worst: str = ""  # the output with the largest error
    max_error: float = 0.0
    differing: List[str] = field(default_factory=list)  # outputs beyond the tolerances
    first_tensor: Optional[str] = None  # first tensor (topological order) beyond the tolerances
    first_error: float = 0.0  # its largest absolute error
    seconds: float = 0.0
    atol: float = ATOL
    rtol: float = RTOL
    input_set: int = 0  # the set (0-based, in the order run) the numbers above come from
    set_errors: List[float] = field(default_factory=list)  # largest error of each set, in order
    # the converted model as ONNX-Runtime's CPU provider computes it (no emulation, the session
    # options of the runtime check): largest error of each set; None when not measured
    measured_errors: Optional[List[float]] = None
    measured_differing: List[str] = field(default_factory=list)  # outputs beyond the tolerances there

    @property
    def measured_max(self) -> Optional[float]:
        return max(self.measured_errors) if self.measured_errors else None

    @property
    def passed(self) -> bool:
        return not self.differing

    def as_dict(self) -> dict:
        return {
            "passed": self.passed,
            "max_error": self.max_error,
            "worst_output": self.worst,
            "output_errors": self.errors,
            "differing_outputs": self.differing,
            "first_differing_tensor": self.first_tensor,
            "first_differing_error": self.first_error if self.first_tensor else None,
            "atol": self.atol,
            "rtol": self.rtol,
            "input_set": self.input_set,
            "input_sets": len(self.set_errors),
            "set_errors": self.set_errors,
            "seconds": self.seconds,
            "figure": "emulated fp16 storage (every reduced tensor rounded after the node that makes it)",
            "runtime": f"ONNX-Runtime {ort.__version__}",
            "provider": "CPUExecutionProvider",
            "session_options": {"graph_optimization_level": "disable"},  # (the emulation's: see _session)
            # the reference of every figure: the original as ONNX-Runtime runs it by default
            "reference_session_options": {"graph_optimization_level": "all (default)"},
            "measured": None
            if self.measured_errors is None
            else {
                "figure": "ONNX-Runtime CPU provider as it computes the written model",
                "max_error": self.measured_max,
                "set_errors": self.measured_errors,
                "differing_outputs": self.measured_differing,
            },
        }


def _session(model_bytes_or_path, weights: Optional[Dict[str, object]] = None, deployed: bool = False):
    """``deployed``: ONNX-Runtime's default session options (every graph optimization: the original
    as the runtime runs it, the reference of the figures); else optimizations off (the emulation)."""
    so = ort.SessionOptions()
    so.log_severity_level = 4  # (its errors come back as exceptions: no log lines of its own)
    if not deployed:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # (one run: set-up costs more)
    values = []
    if weights:
        values = [ort.OrtValue.ortvalue_from_numpy(w) for w in weights.values()]
        so.add_external_initializers(list(weights), values)
    sess = ort.InferenceSession(model_bytes_or_path, so, providers=["CPUExecutionProvider"])
    sess._toolkit_weights = values  # (the session reads the arrays: they live as long as it does)
    return sess


def split_weights(model, emulate: bool):
    """(the model without its large weights' data, those weights as float arrays by name).

    ONNX-Runtime gets the weights as arrays (no serialization, no parsing, no copy of them);
    ``emulate``: the model's float16/bfloat16 storage emulated (:func:`emulate_mixed`), its large
    reduced weights widened to float32 here."""

    light = without_big_data(model)
    light = copy_model(light, inplace=light is not model)
    # the types before the reduced weights below are read as float32 (then a MatMul reads a float16
    # activation and a float32 weight: shape inference fails on that model)
    types = tensor_types(infer_types(light)) if emulate else None
    weights = _stripped_weights(model, light, emulate)
    if emulate:
        light = emulate_mixed(light, inplace=True, types=types).model
    return light, weights


def _stripped_weights(model, light, emulate: bool) -> Dict[str, object]:
    """The arrays of the weights the light copy ``light`` of ``model`` left out, by name (see
    :func:`_session_weight`)."""
    source = {t.name: t for t in model.graph.initializer}
    return {t.name: _session_weight(source[t.name], t, emulate) for t in light.graph.initializer if _stripped(t)}


def _stripped(t) -> bool:
    """Whether a weight of a light copy had its data left out."""
    return any(e.key == "location" and e.value == STRIPPED for e in t.external_data)


def _session_weight(orig, t, emulate: bool):
    """The array ONNX-Runtime gets for weight ``orig`` (``t``: its stripped copy in the light
    model): its float16/bfloat16 values widened to float32 when ``emulate`` (``t`` then retyped
    float32), else its values as they are."""
    if orig.data_type in (FLOAT16, BFLOAT16) and emulate and orig.HasField("raw_data"):
        t.data_type = FLOAT
        return widened(orig.raw_data, orig.data_type).reshape(tuple(orig.dims))
    return np.ascontiguousarray(numpy_helper.to_array(orig))


class _Model:
    """One ONNX-Runtime session of ``model`` (outputs, or ``names`` marked as outputs), run on
    any number of feeds. ``model``: a ModelProto, or the path of a model file (ONNX-Runtime
    reads it, external data included). ``emulate``: the converted model (fp16 storage emulated).
    InferenceError when ONNX-Runtime cannot build or run it: exit code 3 for the original (the
    inputs do not suit it), 1 for the converted model."""

    def __init__(
        self, model, names: Optional[Sequence[str]] = None, emulate: bool = False, deployed: bool = False,
    ) -> None:
        self.emulate = emulate
        with self._errors(loading=True):
            if isinstance(model, str) and names is None:
                self.sess = _session(model, deployed=deployed)
            else:
                light, weights = split_weights(_loaded(model), emulate)
                if names is not None:
                    set_outputs(light, names)
                self.sess = _session(light.SerializeToString(), weights, deployed=deployed)
            self.wanted = {i.name: i.type for i in self.sess.get_inputs()}

    def run(self, feed: Mapping, k: Optional[int] = None) -> Dict[str, object]:
        """The outputs on ``feed`` (input set ``k``, named in an error)."""
        with self._errors("" if k is None else f" on input set {k}"):
            feed = {k: as_input(np.asarray(v), self.wanted[k]) for k, v in feed.items() if k in self.wanted}
            outs = interruptible_run(self.sess, None, feed)
        return {o.name: v for o, v in zip(self.sess.get_outputs(), outs)}

    @contextlib.contextmanager
    def _errors(self, where: str = "", loading: bool = False):
        """ONNX-Runtime's errors while creating the session (``loading``) or running it (``where``:
        the input set) as an InferenceError; OriginalLoadError when the original cannot be loaded."""
        try:
            yield
        except ort_errors() as exc:
            what, code = _SIDES[self.emulate]
            original_load = loading and not self.emulate
            raise (OriginalLoadError if original_load else InferenceError)(
                f"ONNX-Runtime could not {'load' if original_load else 'run'} {what}{where}: "
                f"{one_line(exc, first_line=True, limit=300)}",
                exit_code=code,
            ) from None


# emulated (the converted model) or not (the original) -> (its name in errors, the exit code of its errors)
_SIDES = {True: ("the converted model", ExitCode.FAILED), False: ("the original", ExitCode.BAD_INPUT)}


class OriginalLoadError(InferenceError):
    """ONNX-Runtime cannot create a session for the original model: no input would run it."""


def _loaded(model):
    """``model`` as a ModelProto (loaded when it is a path)."""
    if isinstance(model, str):
        from toolkit.core.io.model import load_model

        return load_model(model)
    return model


def as_input(arr, ort_type: str):
    """A float feed cast to the float type an input asks for (``--fp16-io`` models read float16)."""

    if arr.dtype.kind == "f":
        if ort_type == "tensor(float16)":
            return arr.astype(np.float16)
        if ort_type == "tensor(float)":
            return arr.astype(np.float32)
    return arr


def _worst(got, ref, atol: float, rtol: float):
    """(largest absolute error, differs beyond the tolerances) of one tensor.

    A tensor differs when its largest error is past ``atol + rtol * max|ref|``: the error is
    measured against the tensor's own scale (fp16 rounds every value to about 5e-4 of it, and a
    reduction adds such errors), not element by element (a value near zero has no useful relative
    error). A NaN or infinity on one side only is an infinite error."""

    got = np.asarray(got)
    ref = np.asarray(ref)
    if got.shape != ref.shape:
        return float("inf"), True
    if ref.size == 0 or ref.dtype.kind not in "fiub":
        return 0.0, False
    absd, _rel = error_arrays(got.astype(np.float32), ref.astype(np.float32))
    err = float(absd.max())
    finite = ref[np.isfinite(ref)]
    scale = float(np.abs(finite).max()) if finite.size else 0.0
    return err, not err <= atol + rtol * scale


def validate(
    original,
    converted,
    feeds: Union[Mapping, Iterable[Mapping]],
    *,
    atol: float = ATOL,
    rtol: float = RTOL,
    locate: bool = True,
    measured=None,
) -> Validation:
    """Run ``converted`` against ``original`` on ``feeds`` (one feed, or an iterable of them, run
    one at a time) in ONNX-Runtime on the CPU; see the module docstring.

    InferenceError when either model cannot run: exit code 3 when the original cannot (the
    inputs do not suit it), 1 when only the converted model cannot. ``measured``: the converted
    model's outputs on each set as computed elsewhere (the runtime check), compared too: a sequence,
    or a callable giving it (or None), called once every set has run here."""
    t0 = time.perf_counter()
    sets = [feeds] if isinstance(feeds, Mapping) else feeds
    out, worst_feed, expected_sets = _worst_set(original, converted, sets, atol, rtol, keep=measured is not None)
    _add_measured(out, expected_sets, measured() if callable(measured) else measured, atol, rtol)
    if out.differing and locate:
        out.first_tensor, out.first_error = _first_differing(original, converted, worst_feed, atol, rtol)
    out.seconds = time.perf_counter() - t0
    return out


def _worst_set(
    original, converted, feeds: Iterable[Mapping], atol: float, rtol: float, keep: bool
) -> Tuple[Validation, Mapping, List[Mapping]]:
    """Both models run on each input set, one at a time: (the comparison of the worst set, with every
    set's largest error; that set's feed; the original's outputs on each set when ``keep``)."""
    ref, got = _Model(original, deployed=True), _Model(converted, emulate=True)
    out: Optional[Validation] = None
    worst_feed: Mapping = {}
    errors: List[float] = []
    expected_sets: List[Mapping] = []
    for k, feed in enumerate(feeds):
        expected = ref.run(feed, k)
        if keep:
            expected_sets.append(expected)
        one = _compare(expected, got.run(feed, k), atol, rtol)
        one.input_set = k
        errors.append(one.max_error)
        if out is None or _worse(one, out):
            out, worst_feed = one, feed
    if out is None:
        raise ValueError("validate needs at least one input set")
    out.set_errors = errors
    return out, worst_feed, expected_sets


def _add_measured(out: Validation, expected: Sequence[Mapping], measured, atol: float, rtol: float) -> None:
    """The errors of the outputs computed elsewhere (``measured``, one mapping per set), into ``out``."""
    if measured is None:
        return
    seen = [_compare(e, m, atol, rtol) for e, m in zip(expected, measured)]
    out.measured_errors = [v.max_error for v in seen]
    out.measured_differing = sorted({d for v in seen for d in v.differing})


def _compare(ref: Mapping, got: Mapping, atol: float, rtol: float) -> Validation:
    """The outputs of one input set compared."""
    out = Validation(atol=atol, rtol=rtol)
    for name, r in ref.items():
        if name not in got:
            continue
        err, bad = _worst(got[name], r, atol, rtol)
        out.errors[name] = err
        if bad:
            out.differing.append(name)
        if not out.worst or err > out.max_error:
            out.worst, out.max_error = name, err
    return out


def _worse(a: Validation, b: Validation) -> bool:
    """Whether set ``a`` is worse than set ``b``: it differs and ``b`` does not, or both do (or
    both do not) and its largest error is larger (errors are never NaN: see :func:`_worst`)."""
    if bool(a.differing) != bool(b.differing):
        return bool(a.differing)
    return a.max_error > b.max_error


def _float_tensors(original, converted) -> List[str]:
    """Float tensors of the original's top graph (node order) that the converted model also holds."""
    before = tensor_types(infer_types(original))
    held = producers(iter_nodes(converted))  # (emulated: rounded tensors keep their names; no "")
    return [
        o
        for node in original.graph.node
        if node.op_type != "Constant"
        for o in node.output
        if before.get(o) == FLOAT and o in held
    ]


def _first_differing(original, converted, feed: Mapping, atol: float, rtol: float):
    """(name, largest absolute error) of the first float tensor beyond the tolerances; (None, 0.0) if none."""
    original = _loaded(original)
    names = _float_tensors(original, converted)
    if not names:
        return None, 0.0
    ref = _Model(original, names).run(feed)
    got = _Model(converted, names, emulate=True).run(feed)
    for name in names:
        if name in ref and name in got:
            err, bad = _worst(got[name], ref[name], atol, rtol)
            if bad:
                return name, err
    return None, 0.0

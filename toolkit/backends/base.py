"""The one interface every inference backend implements.

A runner is used like this::

    with runner:                              # activate() ... deactivate()
        metas = runner.input_metadata()       # [TensorMeta(name, shape, dtype), ...]
        outputs = runner.infer(feed)          # {name: ndarray}, feed holds exactly the inputs
        seconds = runner.last_inference_time

``activate`` does the expensive set-up (an ONNX-Runtime session, a TensorRT engine and
context); ``infer`` must not cast or reshape what it is given: the caller
(:mod:`toolkit.run.feeds`) checks names, dtypes and shapes against
``input_metadata`` first. Backends import their heavy modules inside methods, never at
module level, and raise :class:`toolkit.core.errors.ToolkitError` subclasses with one
clear sentence for anything a user can cause.
"""

from __future__ import annotations

from typing import Dict, List, Mapping, Optional

from toolkit.core.errors import ToolkitError
from toolkit.core.meta import TensorMeta
from toolkit.core.process.phases import report_phase


class Runner:
    """Base class of the inference backends (ONNX-Runtime, TensorRT)."""

    #: Short, stable name; used as the runner name in saved outputs files.
    name: str = "runner"
    #: The reduced precision the backend computes in (``"bf16"``, ``"fp16"``) when it chose one
    #: itself (OpenVINO's default), known once active; a diagnosis then judges its rounding so.
    precision: Optional[str] = None
    #: The runtime, as a crash report names it ("ONNX-Runtime").
    runtime: str = "the runtime"

    def __init__(self, name: Optional[str] = None):
        if name:
            self.name = name
        self.is_active = False
        self.last_inference_time = 0.0
        #: Warnings worth showing the user once the runner is active (options ignored, ...).
        self.notes: List[str] = []

    # -------------------------------------------------------------- lifecycle
    def activate(self) -> None:
        """Do the one-off set-up; idempotent."""
        if not self.is_active:
            report_phase(self.runtime_title, "session creation")
            self._activate()
            self.is_active = True

    def deactivate(self) -> None:
        """Release what ``activate`` acquired; safe to call twice."""
        if self.is_active:
            try:
                self._deactivate()
            finally:
                self.is_active = False

    def __enter__(self) -> "Runner":
        self.activate()
        return self

    def __exit__(self, *exc) -> None:
        self.deactivate()

    @property
    def runtime_title(self) -> str:
        """The runtime and its version, as a crash report names them."""
        return self.runtime

    # -------------------------------------------------------------- queries
    def input_metadata(self) -> List[TensorMeta]:
        """The inputs ``infer`` needs, in the model's order (shape/dtype may be partly unknown)."""
        raise NotImplementedError

    def summary(self) -> str:
        """One line describing the active backend (e.g. its providers), or ''."""
        return ""

    def output_names(self) -> List[str]:
        """The names ``infer`` returns, in order."""
        raise NotImplementedError

    def preferred_shapes(self) -> Dict[str, tuple]:
        """Shapes this backend prefers for dynamic inputs (e.g. a TensorRT profile's); {} for none."""
        return {}

    def preferred_values(self) -> Dict[str, object]:
        """Values generated data must take for some inputs (TensorRT shape tensors); {} for none."""
        return {}

    # -------------------------------------------------------------- inference
    def infer(self, feed: Mapping) -> Dict[str, object]:
        """Run one inference; sets ``last_inference_time`` (seconds of the backend call only)."""
        if not self.is_active:
            raise ToolkitError(f"{self.name}: infer() called before activate()")
        report_phase(self.runtime_title, "inference")
        return self._infer(feed)

    # -------------------------------------------------------------- for subclasses
    def _activate(self) -> None:
        raise NotImplementedError

    def _deactivate(self) -> None:
        pass

    def _infer(self, feed: Mapping) -> Dict[str, object]:
        raise NotImplementedError

"""The converted model in ONNX-Runtime the way it will be run: default session options.

``convert``'s numeric check runs the model with graph optimizations off (and its fp16 storage
emulated): set-up is cheaper, and the emulation must not be fused away. A model that computes
right that way can still crash ONNX-Runtime when a user creates a session with the default
options (all graph optimizations: a transformer such as NCHWc rewrites the graph the check never
saw). So the written model also gets a session with the default options (and the level the user
names), in a forked child (:mod:`toolkit.core.process.supervise`), and runs on every input set: a crash
(a signal) is a finding, with the phase it happened in, and the outputs it computes are the
figure ONNX-Runtime's CPU provider measures.

When the default session crashes, the lower optimization levels are tried, each in a child, to
say which setting avoids it; :func:`find_fp32_ops` finds the op types that, kept in fp32, make the
default session work (``convert --repair``).

No Typer or Rich here.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

import numpy as np
import onnxruntime as ort

from toolkit.convert.validate import as_input, split_weights
from toolkit.core.errors import one_line, ort_errors
from toolkit.core.process.supervise import start_child

# --ort-optimization level names -> ONNX-Runtime's GraphOptimizationLevel members
LEVELS = {
    "all": "ORT_ENABLE_ALL",
    "extended": "ORT_ENABLE_EXTENDED",
    "basic": "ORT_ENABLE_BASIC",
    "disable": "ORT_DISABLE_ALL",
}
# lower levels tried, in order, when a level crashes
FALLBACKS = ("extended", "basic", "disable")
RUNTIME = "ONNX-Runtime"


def runtime_name() -> str:
    return f"{RUNTIME} {ort.__version__}"


def options_text(level: Optional[str]) -> str:
    """How the session options read in a sentence."""
    return "default options" if level is None else f"graph_optimization_level {level}"


@dataclass
class RuntimeRun:
    """One session of the converted model in a child process, and its runs."""

    level: Optional[str] = None  # None: the default options
    outputs: List[Dict[str, object]] = field(default_factory=list)  # per input set
    crash: Optional[str] = None  # the signal that killed the child ('SIGSEGV')
    phase: str = ""  # where it crashed or failed: 'session creation' or 'inference on input set K'
    error: Optional[str] = None  # ONNX-Runtime's error (no crash)
    seconds: float = 0.0
    runtime: str = field(default_factory=runtime_name)

    @property
    def ok(self) -> bool:
        return self.crash is None and self.error is None

    def as_dict(self) -> dict:
        return {
            "runtime": self.runtime,
            "provider": "CPUExecutionProvider",
            "session_options": {"graph_optimization_level": self.level or "all (default)"},
            "ok": self.ok,
            "crash": self.crash,
            "phase": self.phase or None,
            "error": self.error,
            "seconds": self.seconds,
        }

    def sentence(self, what: str = "the written model") -> str:
        """What went wrong, in one sentence ('' when nothing did)."""
        if self.crash:
            doing = "creating a session for" if self.phase == "session creation" else f"in {self.phase} of"
            return f"{self.runtime} crashes ({self.crash}) {doing} {what} with {options_text(self.level)}"
        if self.error:
            return f"{self.runtime} fails ({self.phase}) on {what} with {options_text(self.level)}: {self.error}"
        return ""


def _session(model, level: Optional[str]):
    light, weights = split_weights(model, emulate=False)
    so = ort.SessionOptions()
    so.log_severity_level = 4  # (errors come back as exceptions)
    if level is not None:
        so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, LEVELS[level])
    if weights:
        so.add_external_initializers(list(weights), [ort.OrtValue.ortvalue_from_numpy(w) for w in weights.values()])
    return ort.InferenceSession(light.SerializeToString(), so, providers=["CPUExecutionProvider"])


def _in_child(phase: Callable[[str], None], model, feeds: Sequence[Mapping], level: Optional[str]) -> dict:
    """The child's work: a session with ``level`` (None: default options), run on every feed."""
    where = "session creation"
    try:
        phase(where)
        sess = _session(model, level)
        wanted = {i.name: i.type for i in sess.get_inputs()}
        names = [o.name for o in sess.get_outputs()]
        outputs = []
        for k, feed in enumerate(feeds):
            where = f"inference on input set {k}"
            phase(where)
            outs = sess.run(None, {n: as_input(np.asarray(v), wanted[n]) for n, v in feed.items() if n in wanted})
            outputs.append(dict(zip(names, outs)))
        return {"outputs": outputs}
    except ort_errors() as exc:
        return {"error": one_line(exc, first_line=True, limit=300), "phase": where}


def run_session(model, feeds: Sequence[Mapping], level: Optional[str] = None) -> RuntimeRun:
    """``model`` in ONNX-Runtime with ``level`` (None: the default options) on ``feeds``, in a
    forked child: a crash is reported, not suffered."""
    return start_session(model, feeds, level).result()


class PendingRun:
    """A session started in a forked child (:func:`start_session`); :meth:`result` waits for it."""

    def __init__(self, model, feeds: Sequence[Mapping], level: Optional[str]) -> None:
        self.level = level
        self.t0 = time.perf_counter()
        self.child = start_child(_in_child, model, list(feeds), level)
        self._run: Optional[RuntimeRun] = None

    def result(self) -> RuntimeRun:
        if self._run is None:
            self._run = _finished(self.child.wait(), self.level, self.t0)
        return self._run

    def outputs(self) -> Optional[List[Dict[str, object]]]:
        """The outputs of every feed (None when the session crashed or failed)."""
        run = self.result()
        return run.outputs if run.ok else None


def start_session(model, feeds: Sequence[Mapping], level: Optional[str] = None) -> PendingRun:
    """:func:`run_session` started: the child computes while this process goes on (the numeric check
    runs meanwhile)."""
    return PendingRun(model, feeds, level)


def _finished(got, level: Optional[str], t0: float) -> RuntimeRun:
    run = RuntimeRun(level=level)
    value: dict = got.value if isinstance(got.value, dict) else {}
    if got.crashed:
        run.crash, run.phase = got.signal_name, got.phase
    elif "error" in value:
        run.error, run.phase = value["error"], value["phase"]
    else:
        run.outputs = value["outputs"]
    run.seconds = time.perf_counter() - t0
    return run


def working_level(model, feeds: Sequence[Mapping], crashed: Optional[str]) -> Optional[str]:
    """The highest optimization level below ``crashed`` (None: the default, 'all') whose session
    runs ``feeds`` without crashing; None when none does."""
    order = list(FALLBACKS)
    if crashed is not None and crashed in order:
        order = order[order.index(crashed) + 1 :]
    for level in order:
        if run_session(model, feeds[:1], level).ok:
            return level
    return None


def find_fp32_ops(
    convert: Callable[[List[str]], Any], op_types: Sequence[str], feeds: Sequence[Mapping], level: Optional[str]
):
    """(op type, conversion) for the first op type of ``op_types`` that, kept in fp32
    (``convert([op])`` converts again with it kept: a conversion with ``.model``), gives a model
    whose session with ``level`` runs the first feed; None when no single op type does."""
    for op in op_types:
        conversion = convert([op])
        if run_session(conversion.model, feeds[:1], level).ok:
            return op, conversion
    return None

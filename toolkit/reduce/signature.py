"""The failure a ``debug reduce`` run reduces: fixed once, from the full model's check.

Delta debugging is sound only when every candidate is judged against one failure. The
:class:`Signature` records how the full model failed its check:

- ``signal``: the check died by a signal (a crash), and which one;
- ``timeout``: the check ran past ``--check-timeout``;
- ``mismatch``: a comparison failed: which tensors (graph outputs first) and how far;
- ``exit``: a non-zero exit code, and the class of the error the check named (a Python
  exception or ONNX-Runtime status such as ``IndexError`` or ``INVALID_ARGUMENT``). "None"
  is a class of its own: where the full model's check named no error, a check that dies with
  a traceback (``ZeroDivisionError``) fails another way, and so does one that names no error
  where the full model's did;
- ``rule``: the user said what failing means (``--fail-regex``, ``--fail-code``), or asked
  for ``--any-failure``: whatever the rule calls a failure is the failure.

:meth:`Signature.differs` says why a failing candidate fails another way (then it is an
*other failure*: counted and shown, never reduced on), or None when it shows the same failure.

No Typer or Rich here.
"""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

from toolkit.core.process.supervise import signal_name
from toolkit.reduce.evidence import Evidence
from toolkit.reduce.verdict import CheckResult, FailureRule, error_line

SIGNAL = "signal"
TIMEOUT_KIND = "timeout"
MISMATCH = "mismatch"
EXIT = "exit"
RULE = "rule"
_KINDS = (SIGNAL, TIMEOUT_KIND, MISMATCH, EXIT, RULE)

# An exception class in an error line (``IndexError: ...``, ``onnxruntime...InvalidArgument``), or an
# ONNX-Runtime status (``[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : ...``).
_EXC = re.compile(r"\b([A-Z][A-Za-z0-9_]*(?:Error|Exception|Fault|Fail|Failure))\b")
_ORT_STATUS = re.compile(r"\[ONNXRuntimeError\]\s*:\s*\d+\s*:\s*([A-Z_]+)")
_TRACEBACK = "Traceback (most recent call last):"
_RAISED = re.compile(r"^([A-Za-z_][\w.]*)(?::|$)")


def error_class(res: CheckResult) -> str:
    """The class of the error a failing check names ('' when it names none): an ONNX-Runtime
    status, the exception a Python traceback ends with (whatever its name), or an exception
    class named in its error line."""
    text = error_line(res)
    m = _ORT_STATUS.search(text) or _ORT_STATUS.search(res.stderr_text)
    if m:
        return m.group(1)
    raised = _traceback_class(res.stderr_text) or _traceback_class(res.stdout_text)
    if raised:
        return raised
    m = _EXC.search(text)
    return m.group(1) if m else ""


def _traceback_class(text: str) -> str:
    """The class of the exception a Python traceback in ``text`` ends with ('' without one)."""
    at = text.rfind(_TRACEBACK)
    if at < 0:
        return ""
    for line in text[at:].splitlines()[1:]:
        if line[:1].strip() and not line.startswith(("  ", "\t")):
            m = _RAISED.match(line)
            if m:
                return m.group(1).rsplit(".", 1)[-1]
    return "Traceback"


@dataclass
class Signature:
    kind: str
    signal: Optional[int] = None
    code: Optional[int] = None
    error: str = ""  # error class (exit kind)
    outputs: Tuple[str, ...] = ()  # failing tensors of the full model (mismatch kind), graph outputs first
    worst: Optional[float] = None  # the full model's largest error on them
    widened: bool = False  # --any-failure

    def describe(self) -> str:
        described = _DESCRIBED.get(self.kind)
        if described is not None:
            return described(self)
        return "any failure" if self.widened else "a failure by the rule given (--fail-regex / --fail-code)"

    def same(self, other: "Signature") -> bool:
        """The same kind of failure (a mismatch on any outputs; the same signal, code and error class)."""
        return (self.kind, self.signal, self.code, self.error) == (other.kind, other.signal, other.code, other.error)

    def announce(self) -> str:
        """The log line that says what this run reduces."""
        tail = "" if self.kind == RULE else (
            "; a subgraph that fails another way is an other failure (counted as a pass, never reduced on; "
            "--any-failure reduces on any failure)"
        )
        return f"Failure to reduce (the full model's): {self.describe()}{tail}"

    def to_json(self) -> dict:
        return {
            "kind": self.kind,
            "signal": signal_name(self.signal) if self.signal is not None else None,
            "exit_code": self.code,
            "error": self.error or None,
            "outputs": list(self.outputs),
            "max_abs": self.worst,
            "any_failure": self.widened,
        }

    @classmethod
    def from_json(cls, doc: Any) -> Optional["Signature"]:
        """The signature :meth:`to_json` wrote (a replay keeps the full model's); None for anything else."""
        fields = _json_fields(doc)
        return None if fields is None else cls(**fields)

    def differs(self, res: CheckResult, rows: Optional[Evidence], feeds: Callable[[str], Optional[bool]]) -> Optional[str]:
        """Why a failing check ``res`` (its comparison ``rows``) fails otherwise than the full model, or None.

        ``feeds(tensor)``: whether the tensor is (or feeds) one of the full model's failing
        tensors in the full graph; None when the graph has no such tensor."""
        if self.kind == RULE:
            return None
        otherwise = _OTHERWISE.get(self.kind)
        if otherwise is not None:
            return otherwise(self, res)
        return self._mismatch_differs(res, rows, feeds)

    def _mismatch_differs(self, res, rows: Optional[Evidence], feeds) -> Optional[str]:
        if rows is None or not rows.failing:
            return f"{_how(res)} without a numeric mismatch, where the full model showed {self.describe()}"
        failing = {t.name for t in rows.failing}
        passing = self._passing_output(rows, failing)
        if passing is not None:
            return (
                f"a numeric mismatch on '{rows.failing[0].name}' while '{passing}', which fails in the full "
                "model, passes here"
            )
        return self._feeds_none(rows, failing, feeds)

    def _feeds_none(self, rows: Evidence, failing: set, feeds) -> Optional[str]:
        """Why a mismatch on ``failing`` is another failure when none of those tensors feeds the
        full model's failing tensors (a tensor not in the full graph may feed them), else None."""
        answers = [feeds(name) for name in failing]
        if any(a is None or a for a in answers):
            return None
        return (
            f"a numeric mismatch on '{rows.failing[0].name}', which does not feed the full model's failing "
            f"tensor{'s' if len(self.outputs) != 1 else ''} ({', '.join(self.outputs[:3])})"
        )

    def _passing_output(self, rows: Evidence, failing: set) -> Optional[str]:
        """The first of the full model's failing tensors compared in ``rows`` when every one of them
        passes there, else None."""
        kept = [t for t in rows.tensors if t.name in self.outputs]
        if kept and not any(t.name in failing for t in kept):
            return kept[0].name
        return None


def _describe_signal(sig: Signature) -> str:
    return f"a crash (killed by {signal_name(sig.signal)})"


def _describe_timeout(sig: Signature) -> str:
    return "a timeout (--check-timeout)"


def _describe_mismatch(sig: Signature) -> str:
    far = f", max abs error {sig.worst:.4g}" if sig.worst is not None else ""
    return f"a numeric mismatch on {quoted_few(sig.outputs)}{far}"


def _describe_exit(sig: Signature) -> str:
    return f"exit code {sig.code}" + (f" with {sig.error}" if sig.error else "")


# The full model's failure in words, by its kind (a failure by the user's rule: Signature.describe)
_DESCRIBED: Dict[str, Callable[[Signature], str]] = {
    SIGNAL: _describe_signal, TIMEOUT_KIND: _describe_timeout, MISMATCH: _describe_mismatch, EXIT: _describe_exit,
}


def quoted_few(names: Sequence[str]) -> str:
    """The first three of ``names``, quoted (then ', ...' when there are more)."""
    return ", ".join(f"'{n}'" for n in names[:3]) + (", ..." if len(names) > 3 else "")


def _other_signal(sig: Signature, res: CheckResult) -> Optional[str]:
    if res.signal == sig.signal:
        return None
    return f"{_how(res)}, where the full model was killed by {signal_name(sig.signal)}"


def _no_timeout(sig: Signature, res: CheckResult) -> Optional[str]:
    return None if res.timed_out else f"{_how(res)}, where the full model timed out"


def _other_exit(sig: Signature, res: CheckResult) -> Optional[str]:
    # ('' is an error class: no error named)
    if res.signal is None and not res.timed_out and res.code == sig.code and error_class(res) == sig.error:
        return None
    return f"{_how(res)}, where the full model failed with {sig.describe()}"


# How a failing check fails otherwise than the full model, by the kind of the full model's failure
# (a numeric mismatch: Signature._mismatch_differs; a failure by the user's rule: never)
_OTHERWISE: Dict[str, Callable[[Signature, CheckResult], Optional[str]]] = {
    SIGNAL: _other_signal, TIMEOUT_KIND: _no_timeout, EXIT: _other_exit,
}


def _how(res: CheckResult) -> str:
    if res.signal is not None or res.timed_out or res.code is None:
        return res.describe()
    cls = error_class(res)
    return f"exit code {res.code}" + (f" with {cls}" if cls else "") + f" ({error_line(res)[:160]})"


def _json_fields(doc: Any) -> Optional[Dict[str, Any]]:
    """The fields of a :class:`Signature` from what :meth:`Signature.to_json` wrote; None where one is
    missing or out of place."""
    if not isinstance(doc, dict) or doc.get("kind") not in _KINDS:
        return None
    outputs, worst, code = doc.get("outputs") or [], doc.get("max_abs"), doc.get("exit_code")
    numbers = (worst is None or isinstance(worst, (int, float))) and (code is None or isinstance(code, int))
    known, number = _signal_number(doc.get("signal"))
    if not (numbers and known and isinstance(outputs, list) and all(isinstance(o, str) for o in outputs)):
        return None
    return {"kind": doc["kind"], "signal": number, "code": code, "error": str(doc.get("error") or ""),
            "outputs": tuple(outputs), "worst": None if worst is None else float(worst),
            "widened": doc.get("any_failure") is True}


def _signal_number(name: Any) -> Tuple[bool, Optional[int]]:
    """(whether it reads, the number) of a signal as :func:`signal_name` wrote it ('SIGSEGV',
    'signal 99'; None for none)."""
    if name is None:
        return True, None
    text = str(name)
    if text.startswith("signal ") and text[len("signal "):].isdigit():
        return True, int(text[len("signal "):])
    member = signal.Signals.__members__.get(text)
    return member is not None, None if member is None else int(member)


def signature_of(
    res: CheckResult, rows: Optional[Evidence], rule: FailureRule, *, any_failure: bool = False,
    graph_outputs: Tuple[str, ...] = (),
) -> Signature:
    """The signature of the full model's failing check ``res``."""
    if any_failure:
        return Signature(RULE, widened=True)
    if res.timed_out:
        return Signature(TIMEOUT_KIND)
    if res.signal is not None:
        return Signature(SIGNAL, signal=res.signal)
    if rule.patterns or rule.fail_codes is not None:
        return Signature(RULE)
    if rows is not None and rows.failing:
        return _mismatch(rows, graph_outputs)
    return Signature(EXIT, code=res.code, error=error_class(res))


def _mismatch(rows: Evidence, graph_outputs: Tuple[str, ...]) -> Signature:
    """The signature of a numeric mismatch: the failing graph outputs (else every failing tensor)."""
    outs = set(graph_outputs)
    names = [t.name for t in rows.failing]
    first = [n for n in names if n in outs] or names
    worst = max((t.max_abs for t in rows.failing if t.name in first), default=None)
    return Signature(MISMATCH, outputs=tuple(first), worst=worst)


def feeds_maker(index, targets: Tuple[str, ...]) -> Callable[[str], Optional[bool]]:
    """``feeds(tensor)`` for :meth:`Signature.differs` over a :class:`~toolkit.reduce.graph.GraphIndex`:
    whether ``tensor`` is one of ``targets`` or an ancestor of one (None: not a tensor of the graph)."""
    ancestors = _ancestors(index, targets)
    known = set(index.producer) | set(index.graph_inputs) | set(index.initializers)

    def feeds(name: str) -> Optional[bool]:
        if name in ancestors:
            return True
        return False if name in known else None

    return feeds


def _ancestors(index, targets: Tuple[str, ...]) -> set:
    """``targets`` and every tensor of the graph they are computed from."""
    ancestors: set = set()
    todo = [t for t in targets if t]
    while todo:
        t = todo.pop()
        if t in ancestors:
            continue
        ancestors.add(t)
        p = index.producer.get(t)
        if p is not None:
            todo.extend(r for r in index.reads[p] if r not in ancestors)
    return ancestors

"""Deciding what a ``--check`` said: the verdict classes (pass, fail, broken, timeout), the
:class:`CheckResult` of one run, :class:`FailureRule` (see :meth:`FailureRule.classify`), the
line that names why, and :func:`ask_user`, the interactive ``[p]ass or [f]ail?`` prompt.

No Typer or Rich here.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional, Sequence

from toolkit.core.errors import UsageError
from toolkit.core.process.supervise import signal_name

if TYPE_CHECKING:
    from toolkit.reduce.evidence import Evidence, Findings

PASS = "pass"
FAIL = "fail"
BROKEN = "broken"  # the check could not judge the model: it failed on its own (usage, input, missing program)
TIMEOUT = "timeout"  # killed by --check-timeout: counted, and taken as a failure

# Exit codes of a toolkit check that mean the check itself is broken (usage, bad input, missing
# dependency, an internal error of toolkit).
TOOLKIT_BROKEN_CODES = (2, 3, 4, 70)
# Shell exit codes for a program that cannot be executed (126) or is not found (127).
CANNOT_RUN_CODES = (126, 127)

_TRACEBACK = "Traceback (most recent call last):"
_ARGPARSE_FRAME = re.compile(r'File "[^"]*(argparse|click[/\\]\w+|typer[/\\]\w+|optparse)\.py"')
_ARGPARSE_USAGE = re.compile(r"(?m)^usage: .*(\n.*)*?\n\S+: error: .+")



@dataclass
class CheckResult:
    """What one run of the check command did."""

    code: Optional[int]  # exit status; None when killed by a signal or timed out
    stdout: bytes = b""
    stderr: bytes = b""
    signal: Optional[int] = None
    timed_out: bool = False
    seconds: float = 0.0
    lost: str = ""  # why it never ran to an end (its machine was lost): a broken check, never a failure
    found: Optional[frozenset] = None  # --fail-regex patterns seen in the whole output as it streamed
    # what a built-in check (debug reduce --compare) found, typed; None for a command's output
    # (toolkit.reduce.evidence.from_check_output reads that one's printed rows)
    findings: Optional["Findings"] = None

    @property
    def evidence(self) -> Optional["Evidence"]:
        """The built-in check's comparison (None for a command, or where it compared nothing)."""
        return self.findings.evidence() if self.findings is not None else None

    @property
    def stdout_text(self) -> str:
        return self.stdout.decode("utf-8", errors="replace")

    @property
    def stderr_text(self) -> str:
        return self.stderr.decode("utf-8", errors="replace")

    def describe(self) -> str:
        if self.lost:
            return "lost"
        if self.timed_out:
            return "timed out"
        if self.signal is not None:
            return f"killed by {signal_name(self.signal)}"
        return f"exit code {self.code}"


class FailureRule:
    """Pass or fail, the way Polygraphy's debug reduce decides it.

    - ``ignore_codes``: those exit codes always pass.
    - ``fail_codes``: only those exit codes fail (and, with ``fail_regex``, only when a
      pattern also matches).
    - ``fail_regex`` alone: fails exactly when a pattern matches stdout or stderr,
      whatever the exit code (``inspect model`` exits 0 and the pattern decides).
    - otherwise a non-zero exit code fails.

    A check killed by a signal or by ``--check-timeout`` always fails.
    """

    def __init__(
        self,
        fail_regex: Optional[Sequence[str]] = None,
        fail_codes: Optional[Sequence[int]] = None,
        ignore_codes: Optional[Sequence[int]] = None,
    ):
        if fail_codes and ignore_codes:
            raise UsageError("--fail-code and --ignore-fail-code cannot be used together; choose one")
        self.patterns = _compiled(fail_regex or ())
        self.fail_codes = set(fail_codes) if fail_codes else None
        self.ignore_codes = set(ignore_codes) if ignore_codes else set()

    def matched(self, res: CheckResult) -> Optional[str]:
        """The first pattern found in the output, or None."""
        if not self.patterns:
            return None
        if res.found is not None:  # searched in the whole output as it came (only its head and tail are kept)
            return next((p.pattern for p in self.patterns if p.pattern in res.found), None)
        return self._searched(res)

    def _searched(self, res: CheckResult) -> Optional[str]:
        """The first pattern that matches the output kept (stdout or stderr), or None."""
        texts = (res.stdout_text, res.stderr_text)
        for p in self.patterns:
            if any(p.search(t) for t in texts):
                return p.pattern
        return None

    def failed(self, res: CheckResult) -> bool:
        if res.timed_out or res.signal is not None or res.code is None:
            return True
        if res.code in self.ignore_codes:
            return False
        return self._failed_by_rule(res)

    def _failed_by_rule(self, res: CheckResult) -> bool:
        """Whether a check that exited with a code not ignored fails: its code is one of --fail-code
        (with a pattern matching, when --fail-regex is given), a --fail-regex pattern matches, or
        (neither given) its code is not 0."""
        match = self.matched(res) is not None if self.patterns else None  # (None: no pattern given)
        if self.fail_codes is not None:
            return res.code in self.fail_codes and match is not False
        return match if match is not None else res.code != 0

    def named(self, code: Optional[int]) -> bool:
        """The user said what this exit code means (--fail-code / --ignore-fail-code)."""
        return code is not None and (code in self.ignore_codes or (self.fail_codes is not None and code in self.fail_codes))

    def classify(self, res: CheckResult, toolkit_check: bool = False, artifact: Optional[str] = None) -> str:
        """The verdict class of one check: PASS, FAIL, BROKEN or TIMEOUT.

        BROKEN (the check failed on its own, so it says nothing about the model) when,
        unless --fail-code/--ignore-fail-code names the exit code or a --fail-regex
        pattern matches (the user recognises that output as the failure):

        - a toolkit check exits 2, 3, 4 or 70 (usage error, bad input, missing dependency, internal error) --
          except an exit 3 whose error line is about ``artifact`` itself (the model under
          check: a parser or runtime rejecting it is the model failing);
        - the command cannot start (exit 126 or 127);
        - it dies with a Python traceback from its own argument parsing, or an argparse
          usage error (exit 2 after ``usage: ...`` and ``PROG: error: ...``).

        A check that never ran to an end because its machine was lost (``res.lost``) is BROKEN.

        Otherwise the rule decides pass or fail; a timeout is TIMEOUT (and fails).
        """
        if res.lost:
            return BROKEN
        if res.timed_out:
            return TIMEOUT
        if self._unrecognised(res) and _broken_by_itself(res, toolkit_check, artifact):
            return BROKEN
        return FAIL if self.failed(res) else PASS

    def _unrecognised(self, res: CheckResult) -> bool:
        """The check exited with a code the user did not name, and no --fail-regex pattern matched."""
        return res.signal is None and res.code is not None and not self.named(res.code) and self.matched(res) is None

    def reason(self, res: CheckResult) -> str:
        """A few words on why the verdict is what it is."""
        text = res.describe()
        if self.patterns and not res.timed_out and res.signal is None:
            pat = self.matched(res)
            text += f", matched '{pat}'" if pat else ", no pattern matched"
        return text


def _compiled(fail_regex: Sequence[str]) -> list:
    """The --fail-regex patterns, compiled; UsageError for one that is not a regular expression."""
    patterns = []
    for pattern in fail_regex:
        try:
            patterns.append(re.compile(pattern))
        except re.error as exc:
            raise UsageError(f"--fail-regex '{pattern}' is not a valid regular expression: {exc}") from None
    return patterns


def _broken_by_itself(res: CheckResult, toolkit_check: bool, artifact: Optional[str]) -> bool:
    """Whether the exit of a check says it failed on its own (see :meth:`FailureRule.classify`)."""
    if toolkit_check and res.code in TOOLKIT_BROKEN_CODES:
        return not (res.code == 3 and artifact and _about(error_line(res), artifact))
    if res.code in CANNOT_RUN_CODES:
        return True
    return res.code != 0 and _parse_failure(res.stderr_text)


def _about(line: str, artifact: str) -> bool:
    """Whether an error line is about the file ``artifact`` (it starts with its name)."""
    head = line.split(":", 1)[0].strip().strip("'\"")
    names = {artifact, os.path.basename(artifact), os.path.abspath(artifact)}
    return head in names or (os.path.isabs(head) and os.path.abspath(head) == os.path.abspath(artifact))


def _parse_failure(err: str) -> bool:
    """A Python traceback through an argument parser, or an argparse usage error."""
    if _TRACEBACK in err:
        tb = err[err.rindex(_TRACEBACK):]
        return bool(_ARGPARSE_FRAME.search(tb))
    return bool(_ARGPARSE_USAGE.search(err))


def error_line(res: CheckResult) -> str:
    """The one line that says why a check failed on its own: its ``error:`` line, the last
    line of a traceback, or its last line of output."""
    lines = _nonblank(res.stderr_text)
    for ln in lines:
        if ln.startswith("error:"):
            return ln[len("error:"):].strip()
        if re.match(r"^\S+: error: ", ln):
            return ln
    last = lines or _nonblank(res.stdout_text)  # (no error output: the last line of the output)
    return last[-1] if last else f"no output, {res.describe()}"


def _nonblank(text: str) -> list:
    """The lines of ``text`` that are not blank, stripped."""
    return [ln.strip() for ln in text.splitlines() if ln.strip()]


# ---------------------------------------------------------------------- interactive


class AnswersExhausted(Exception):
    """End of input while asking the user for a verdict."""


# The answers ask_user understands: True for a failure
_ANSWERS = {
    **dict.fromkeys(("p", "pass", "passed", "good", "g"), False),
    **dict.fromkeys(("f", "fail", "failed", "bad", "b"), True),
}


def ask_user(artifact: str, stdin=None, stderr=None, stream=None) -> bool:
    """Ask whether ``artifact`` passed; True means it failed. EOF raises AnswersExhausted.

    The question goes to ``stream`` (default stderr)."""
    stdin = stdin or sys.stdin
    stderr = stream or stderr or sys.stderr
    prompt = f"Did '{artifact}' [p]ass or [f]ail? "
    while True:
        stderr.write(prompt)
        stderr.flush()
        line = stdin.readline()
        if not line:
            stderr.write("\n")
            raise AnswersExhausted()
        failed = _ANSWERS.get(line.strip().lower())
        if failed is not None:
            return failed
        prompt = "Please answer 'p' (pass) or 'f' (fail): "


def broken_hint(line: str) -> str:
    """Advice for a check broken in a known way on a subgraph ('' otherwise)."""
    if "not an input of the model" not in line:
        return ""
    if "--input-shapes names" in line:
        return (
            ". Subgraphs have other inputs than the model: give the shapes to debug reduce instead "
            "(--model-input-shapes, written into every subgraph) and leave --input-shapes out of the check"
        )
    if "--val-range names" in line:
        return (
            ". Subgraphs have other inputs than the model: give the check a range for every input ([lo,hi], "
            "no name), or feed it the model's own values (layerwise --load-inputs)"
        )
    return ""

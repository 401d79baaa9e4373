"""The CLI's progress reporters for ``debug reduce`` and ``debug precision``: each implements its
library reporter and renders what it receives on stderr, with Rich on a terminal and plain lines
otherwise. Apart from ``reporters.py`` so that ``run`` does not load the searches.
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Optional

from toolkit.cli.output import is_terminal, log, plural, progress, warn
from toolkit.core.text import escape_controls
from toolkit.precision.search import Reporter as PrecisionProgress
from toolkit.reduce.session import Reporter as ReduceProgress

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

    from toolkit.reduce.session import Reducer


class ReduceReporter(ReduceProgress):
    """Renders the reducer's progress on stderr (Rich bar on a terminal, plain lines otherwise)."""

    def __init__(self, show_output: bool, hide_fail_output: bool):
        self.show_output = show_output
        self.hide_fail_output = hide_fail_output
        self.live = is_terminal(sys.stderr)
        self.progress: Optional[Progress] = None
        self.task: Optional[TaskID] = None
        self.reducer: Optional[Reducer] = None
        self._last_tick = 0.0
        self._output_hint = False

    # -- helpers
    def _print(self, text: str, style: Optional[str] = None) -> None:
        if self.progress is not None:
            text = escape_controls(text, keep_newlines=True)
            self.progress.console.print(text, markup=False, highlight=False, style=style, soft_wrap=True)
            self._refresh()
        else:
            log(text, style=style)

    def _refresh(self) -> None:
        r = self.reducer
        if self.progress is None or self.task is None or r is None:
            return
        left = r.remaining_estimate()
        phase = (r.plan.phase if r.plan and r.checks else "") or "full model"
        self.progress.update(
            self.task,
            completed=r.checks,
            total=r.checks + max(left, 0) or 1,
            eta=_eta(r, left),
            description=f"reduce [{phase}]",
        )
        self.progress.refresh()

    # -- toolkit.reduce.session.Reporter
    def start(self, reducer) -> None:
        self.reducer = reducer
        idx = reducer.index
        cfg = reducer.cfg
        extra = _constants_note(len(idx.const_nodes))
        mode = cfg.mode or getattr(reducer, "default_mode", "default (bisect + 1-minimal)")
        log(f"Reducing {cfg.label or cfg.model}: {plural(idx.size, 'node')}{extra}; mode {mode}; {_how_checked(reducer)}")
        if self.live and reducer.runner is not None:
            self._start_bar()

    def _start_bar(self) -> None:
        """The progress bar of the checks (a terminal, checks that run without asking)."""
        bar = progress(
            "{task.completed}/{task.total} checks",
            "{task.fields[eta]}",
            auto_refresh=False,  # no refresh thread: the check runs in a fork
            redirect_stdout=False,
            redirect_stderr=False,
        )
        self.task = bar.add_task("reduce", total=1, eta="")
        bar.start()
        self.progress = bar

    def loading(self, path: str, nbytes: int) -> None:
        self._print(f"Loading {path} ({_size(nbytes)}) once for all checks...")

    def iteration_start(self, number, cand) -> None:
        self._refresh()

    def iteration_end(self, it) -> None:
        verdict = _VERDICTS.get(it.verdict, "FAIL" if it.failed else "pass")
        style = {"FAIL": "red", "pass": "green"}.get(verdict, "yellow") if self.live else None
        self._print(_iteration_line(it, verdict), style=style)

    def check_output(self, it) -> None:
        if not self._shows_output(it):
            return
        for name, text in (("stdout", it.result.stdout_text), ("stderr", it.result.stderr_text)):
            if text.strip():
                self._print(f"---- check {name} (iteration {it.number}) ----")
                self._print(text.rstrip("\n"))
        if not self.show_output and not self._output_hint:
            self._output_hint = True
            self._print("(output of later checks is hidden; --show-output shows it for every check)")

    def _shows_output(self, it) -> bool:
        """Whether the check's output of iteration ``it`` is shown: every one with --show-output, else the first
        failing one (unless --hide-fail-output)."""
        return bool(self.show_output or (it.failed and it.first_failure and not self.hide_fail_output))

    def tick(self) -> None:
        now = time.monotonic()
        if now - self._last_tick >= 0.1:  # called while the check runs: redraw ~10 times a second
            self._last_tick = now
            self._refresh()

    def warn(self, message: str) -> None:
        if self.progress is not None:
            self._print(f"warning: {message}", style="yellow")
        else:
            warn(message)

    def info(self, message: str) -> None:
        self._print(message)

    def pause(self) -> None:
        pass

    def resume(self) -> None:
        pass

    def stop(self) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None


def _constants_note(consts: int) -> str:
    """' (+N Constant nodes, lowered to constant tensors)' ('' without any)."""
    return f" (+{plural(consts, 'Constant node')}, lowered to constant tensors)" if consts else ""


_RUNS_IN = {"warm": "warm worker", "in-process": "in this process", "ray": "Ray tasks"}


def _how_checked(reducer) -> str:
    """How each subgraph is judged: the check command and where it runs, or asking the user."""
    if reducer.cfg.check is None:
        return "asking you (the full model is taken to fail)"
    return f"check: {' '.join(reducer.cfg.check)} [{_RUNS_IN.get(reducer.runner.kind, 'subprocess')}]"


_VERDICTS = {"fail": "FAIL", "pass": "pass", "broken": "BROKEN", "timeout": "TIMEOUT"}


def _eta(reducer, left: int) -> str:
    """The progress bar's estimate of what is left (``left``: the checks)."""
    if not reducer.checks:
        return "checking the full model"
    if not left:
        return "last checks"
    avg = reducer.average_check_seconds()
    return f"~{left} check{'s' if left != 1 else ''} left" + (f", ~{left * avg:.1f} s" if avg else "")


def _iteration_line(it, verdict: str) -> str:
    """``Iteration 3 | 37 nodes | FAIL | <phase> | <span> | 0.05 s | <reason> | <max error> | ~5 checks left``
    (the parts an iteration has)."""
    secs = "replay" if it.source == "replay" else f"{it.seconds:.2f} s"
    parts = [
        f"Iteration {it.number}",
        plural(it.nodes, "node"),
        verdict,
        it.phase,
        it.span if it.span != "full model" else "",
        secs,
        it.reason if it.source == "check" else "",
        _max_error(it.evidence),
        f"~{plural(it.remaining, 'check')} left" if it.remaining else "",
    ]
    return " | ".join(p for p in parts if p)


def _max_error(evidence) -> str:
    if evidence is None or evidence.worst is None:
        return ""
    return f"max error {evidence.worst.max_abs:.3g} on {evidence.worst.name}"


def _size(nbytes: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if nbytes >= scale:
            return f"{nbytes / scale:.0f} {unit}" if nbytes >= 10 * scale else f"{nbytes / scale:.1f} {unit}"
    return f"{nbytes} bytes"


class PrecisionReporter(PrecisionProgress):
    """Renders the fp32-set search: one line per check on stderr."""

    counted = "node(s) in fp32"  # (what a check's count counts)

    def __init__(self):
        self.live = is_terminal()
        self.total = 0

    def start(self, search) -> None:
        c = search.config
        fixed = len(search.user_kept) + len(search.auto_kept)
        log(
            f"Searching {c.model}: {len(search.universe)} node(s) that could stay fp32"
            + (f" ({fixed} kept in fp32 regardless)" if fixed else "")
            + f"; --compare {c.reference} {c.candidate}; mode "
            + (c.mode if c.mode not in (None, "default") else "default (follow the overflow, then 1-minimal)")
        )
        self.total = len(search.universe)

    def check(self, check) -> None:
        verdict = "pass" if check.passed else ("BROKEN" if check.worst.startswith("broken:") else "FAIL")
        line = (
            f"Check {check.number} | {check.kept} of {self.total} {self.counted} | {verdict} | "
            f"{check.seconds:.2f} s" + (f" | {check.worst}" if check.worst else "")
        )
        log(line, style=("green" if check.passed else "red") if self.live else None)

    def info(self, message: str) -> None:
        log(message)

    def warn(self, message: str) -> None:
        warn(message)

"""What ``debug llm`` prints: progress per step (a bar on a terminal, plain lines otherwise) and
the finding (stderr), or the record as JSON (stdout, ``--json``)."""

from __future__ import annotations

import json
import math
from typing import Any, Optional

from toolkit.cli.output import echo, log, progress, verbose, warn
from toolkit.core.errors import ExitCode
from toolkit.core.text import shown_name
from toolkit.llm.session import Divergence, LlmOutcome, Reporter
from toolkit.llm.steps import StepResult


class LlmReporter(Reporter):
    """A progress bar over every step on a terminal; one line per prompt otherwise."""

    def __init__(self, live: bool):
        self.live = live
        self.bar: Any = None
        self.task: Any = None

    def __enter__(self) -> "LlmReporter":
        return self

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None

    def info(self, message: str) -> None:
        log(message)

    def warn(self, message: str) -> None:
        warn(message)

    def started(self, prompts: int, steps: int) -> None:
        if self.live:
            self.bar = progress("{task.completed}/{task.total} steps")
            self.bar.start()
            self.task = self.bar.add_task("debug llm", total=prompts * steps)

    def step(self, prompt: int, step: int, result: StepResult) -> None:
        if self.bar is not None:
            self.bar.update(self.task, advance=1, description=f"prompt {prompt} step {step}")
        flip = f" token {result.reference_token} vs {result.test_token}" if result.flipped else ""
        verbose(f"prompt {prompt} step {step}: {result.kind or 'ok'}{flip}")

    def prompt_done(self, prompt: int, steps: int, note: str) -> None:
        if self.bar is None:
            log(f"prompt {prompt}: {steps} step(s) compared" + (f"; {note}" if note else ""))


def _g(x: Optional[float], nan: str = "?") -> str:
    if x is None:
        return "?"
    return nan if isinstance(x, float) and math.isnan(x) else f"{x:.3g}"


def _divergence_lines(d: Divergence) -> None:
    shown = [shown_name(o) for o in d.outputs]
    outs = ", ".join(shown[:6]) + (f" and {len(shown) - 6} more" if len(shown) > 6 else "")
    what = "this step's compute differs" if d.kind == "logits" else "only the cache written differs"
    diff = (f"NaN on the test side only in {', '.join(shown_name(o) for o in d.nan_outputs)}" if d.nan_outputs
            else f"max abs diff {_g(d.max_abs_diff)}")
    log(f"First divergence: prompt {d.prompt}, step {d.step} (KV length {d.kv_length}), kind {d.kind} ({what}): "
        f"{outs} ({diff})")
    _location_line(d)
    _reduce_lines(d)


def _location_line(d: Divergence) -> None:
    """The first diverging tensor, or why it was not localized."""
    loc = d.located
    if loc is not None:
        where = shown_name(loc.module) if loc.module else "(no module recorded)"
        layer = f", layer {loc.layer}" if loc.layer is not None else ""
        log(f"  first diverging tensor: {shown_name(loc.tensor)} from node {shown_name(loc.node)} "
            f"[Op: {shown_name(loc.op_type)}] in {where}{layer} "
            f"(max abs diff {_g(loc.max_abs_diff, 'NaN')}; matched by {loc.matched_by})")
    elif d.localize_error:
        log(f"  not localized: {shown_name(d.localize_error)}")


def _reduce_lines(d: Divergence) -> None:
    """Where the step's feeds are, and the debug reduce command that shrinks its graph to the fault."""
    if d.saved_inputs:
        log(f"  the step's feeds are in {shown_name(d.saved_inputs)}")
    if d.reduce_note:
        log(f"  no debug reduce command: {shown_name(d.reduce_note)}")
    elif d.saved_inputs:
        log("  shrink the step's graph to the fault with:")
        log(f"    {shown_name(d.reduce_command)}")
    else:
        log("  add --save-step-inputs FILE to write the step's feeds for `toolkit debug reduce MODEL -o reduced.onnx "
            "--compare REF TEST --load-inputs FILE`, which shrinks the step's graph to the fault")


def render(outcome: LlmOutcome, json_out: bool) -> int:
    """Log the finding; the record on stdout with ``json_out``; the exit code."""
    ties = len(outcome.near_ties)
    log(f"{outcome.steps_checked} step(s) of {outcome.prompts_checked} prompt(s) compared ({outcome.mode}, "
        f"{outcome.seconds:.2f} s; {outcome.description}); {ties} near tie(s)")
    for t in outcome.near_ties[:5]:
        log(f"  near tie: prompt {t.prompt} step {t.step}: token {t.reference_token} vs {t.test_token}, "
            f"margin {_g(t.margin)} within the difference {_g(t.difference)}")
    d = outcome.first_divergence
    if d is not None:
        _divergence_lines(d)
    elif not outcome.interrupted:
        _no_divergence_line(outcome)
    if json_out:
        echo(json.dumps(_finite(outcome.to_json()), indent=2, allow_nan=False))
    return int(ExitCode.FAILED) if d is not None else int(ExitCode.OK)


def _no_divergence_line(outcome: LlmOutcome) -> None:
    """No divergence: said so, or a warning that the steps whose logits are NaN on both sides compare nothing."""
    if not outcome.both_nan_steps:
        log("No divergence.")
        return
    p, s = outcome.first_both_nan or (0, 0)
    warn(f"No divergence found, but the logits are NaN on both sides at {outcome.both_nan_steps} step(s) "
         f"(first: prompt {p}, step {s}): those steps compare nothing")


def _finite(value: Any) -> Any:
    """The record with each NaN or infinite number as a string ("nan", "inf"): strict JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value

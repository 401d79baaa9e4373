"""Rendering a layerwise diagnosis on stderr (imported only when there is one to show).

On a terminal: coloured lines and the error against depth as a sparkline. Otherwise plain
lines, and the error against depth as a compact table (one line per depth or group of
depths), so that logs stay greppable.
"""

from __future__ import annotations

from typing import Optional

from toolkit.cli.output import err_console, log
from toolkit.core.text import escape_controls
from toolkit.run.diagnosis import Diagnosis, depth_line, depth_table, gx, text_lines


def render_diagnosis(diag: Diagnosis, *, rich: bool) -> None:
    lines = text_lines(diag)
    if rich:
        _rich_lines(diag, lines)
    else:
        _plain_lines(diag, lines)


def _plain_lines(diag: Diagnosis, lines) -> None:
    """The diagnosis as log lines, the error by depth as a compact table."""
    for line in lines:
        if "error/tolerance by depth" in line:
            _plain_depth_table(diag)
        else:
            log(line)


def _rich_lines(diag: Diagnosis, lines) -> None:
    """The diagnosis in colour, the error by depth as a sparkline."""
    from rich.text import Text

    con = err_console()
    for line in lines:
        style = _style(line, diag.passed)
        if style is None and "error/tolerance by depth" in line:
            _rich_depth(diag)
            continue
        con.print(Text(escape_controls(line, keep_newlines=True), style=style or ""), highlight=False)


def _style(line: str, passed: bool) -> Optional[str]:
    """The Rich style of the heading ("bold") and of the first fault's lines ("bold red"; "" when
    the diagnosis passed); None for the other lines."""
    if line.startswith("Diagnosis"):
        return "bold"
    if "First out of tolerance" in line or "Error starts at" in line or line.strip().startswith("1. "):
        return "bold red" if not passed else ""
    return None


def _rich_depth(diag: Diagnosis) -> None:
    from rich.text import Text

    line = depth_line(diag)
    if line is None:
        return
    head, _, rest = line.partition(": ")
    spark, _, tail = rest.partition(" ")
    text = Text("  " + head + ": ")
    for ch, row in zip(spark, diag.depth):  # (one character per depth)
        text.append(ch, style="red" if row.failed else "cyan")
    text.append(" " + tail)
    err_console().print(text, highlight=False)


def _plain_depth_table(diag: Diagnosis) -> None:
    rows = depth_table(diag)
    if not rows:
        return
    log("  Error by depth (error / tolerance, largest of each depth):")
    for r in rows:
        depth = f"{r.depth}-{r.last_depth}" if r.last_depth not in (None, r.depth) else f"{r.depth}"
        state = f"{r.failed} out of tolerance" if r.failed else "ok"
        log(f"    depth {depth:<7} | {r.tensors:>4} tensor(s) | {gx(r.max_tol_ratio):>9} | {state}")

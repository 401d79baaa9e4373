"""Accuracy reports: layerwise diagnoses written as JSON (for scripts) or HTML (for people).

- ``.json``: ``{"format": "toolkit-accuracy-report", "version": 1, "model", "command",
  "comparisons": [Diagnosis.to_dict(), ...]}``. Non-finite numbers are the strings
  ``"inf"``/``"nan"``.
- ``.model-explorer.json``: per-node error data for Google's Model Explorer
  (:mod:`toolkit.run.node_data`).
- ``.html``: one self-contained page (inline CSS and SVG, no script, nothing fetched): per
  comparison, a chart of error / tolerance for every tensor in topological order on a log
  scale with the tolerance line and the culprit marked, the ranked nodes and the error by
  depth.

Written atomically (temp file + rename).
"""

from __future__ import annotations

import html
import json
import math
import os
from typing import List, Sequence, Tuple

from toolkit.core.errors import InputError, UsageError
from toolkit.core.io.model import atomic_output, check_output_path
from toolkit.core.text import escape_controls
from toolkit.run.diagnosis import Diagnosis, depth_table, g, gx, times
from toolkit.run.node_data import is_node_data_path, node_data

FORMAT = "toolkit-accuracy-report"
VERSION = 1
REPORT_SUFFIXES = (".json", ".html", ".htm")


def check_report_path(path: str) -> None:
    """UsageError unless ``path`` ends in .json or .html (and InputError if it cannot be written)."""

    if path == "-" or not path.lower().endswith(REPORT_SUFFIXES):
        raise UsageError(f"--save-report {path}: name a .json file (for scripts), an .html file (to read) or a "
                         ".model-explorer.json file (node data for Model Explorer)")
    check_output_path(path)


def report_dict(diagnoses: Sequence[Diagnosis], *, model: str = "", command: str = "") -> dict:
    return {
        "format": FORMAT,
        "version": VERSION,
        "model": model,
        "command": command,
        "comparisons": [d.to_dict() for d in diagnoses],
    }


def save_report(path: str, diagnoses: Sequence[Diagnosis], *, model: str = "", command: str = "") -> None:
    """Write ``diagnoses`` to ``path`` (.json or .html), atomically."""

    if is_node_data_path(path):
        text = json.dumps(node_data(diagnoses, model), indent=1) + "\n"
    elif path.lower().endswith(".json"):
        text = json.dumps(report_dict(diagnoses, model=model, command=command), indent=1) + "\n"
    else:
        text = render_html(diagnoses, model=model, command=command)
    try:
        with atomic_output(path, "w") as fh:
            fh.write(text)
    except OSError as exc:
        raise InputError(f"{path}: cannot write: {exc.strerror or exc}") from None


# ---------------------------------------------------------------------- HTML

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px auto;max-width:1100px;
color:#1d232a;padding:0 16px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:18px;margin:28px 0 6px}h3{font-size:15px;margin:18px 0 6px}
.muted{color:#5b6570}.bad{color:#b3261e;font-weight:600}.ok{color:#1e7b34;font-weight:600}
code{font:12.5px ui-monospace,Menlo,Consolas,monospace;background:#f1f3f5;padding:1px 4px;border-radius:3px}
table{border-collapse:collapse;font-size:13px;margin-top:4px}
th,td{padding:3px 10px;border-bottom:1px solid #e3e6e9;text-align:left}
td.n{text-align:right;font-variant-numeric:tabular-nums}tr.top td{background:#fdecea}
.box{border:1px solid #e3e6e9;border-radius:6px;padding:10px 14px;background:#fafbfc}
svg text{font:11px system-ui,sans-serif;fill:#3c4650}
"""


def _e(text) -> str:
    return html.escape(escape_controls(str(text), keep_newlines=True), quote=True)


def render_html(diagnoses: Sequence[Diagnosis], *, model: str = "", command: str = "") -> str:
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>Accuracy report{(' - ' + _e(os.path.basename(model))) if model else ''}</title>",
        f"<style>{_CSS}</style></head><body>",
        "<h1>Accuracy report</h1>",
    ]
    if model:
        parts.append(f'<div class="muted">Model <code>{_e(model)}</code></div>')
    if command:
        parts.append(f'<div class="muted">Command <code>{_e(command)}</code></div>')
    if not diagnoses:
        parts.append("<p>No comparison was made.</p>")
    for diag in diagnoses:
        parts.extend(_section(diag))
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _section(diag: Diagnosis) -> List[str]:
    verdict = '<span class="ok">PASSED</span>' if diag.passed else '<span class="bad">FAILED</span>'
    out = [
        f"<h2>{_e(diag.label_a)} vs {_e(diag.label_b)} {verdict}</h2>",
        f'<div class="box">{len(diag.tensors)} tensors compared. {_summary_html(diag)}</div>',
        "<h3>Error per tensor, in topological order</h3>",
        _chart(diag),
    ]
    if diag.ranked:
        out += ["<h3>Nodes ranked by error amplification</h3>", _ranked_table(diag)]
    if diag.depth:
        out += ["<h3>Error by depth</h3>", _depth_table(diag)]
    out += [f'<p class="muted">note: {_e(n)}</p>' for n in diag.notes]
    return out


def _summary_html(diag: Diagnosis) -> str:
    text = []
    first = diag.first_failure
    if first is not None:
        where = f" produced by <b>{_e(first.node)}</b> [{_e(first.op)}]" if first.node else ""
        text.append(
            f"First tensor out of tolerance: <code>{_e(first.name)}</code>{where}, "
            f"{_e(gx(first.tol_ratio))} the tolerance (max abs {_e(g(first.max_abs))})."
        )
    else:
        text.append("Every tensor is within tolerance.")
    top = diag.culprit
    if top is not None:
        text.append(
            f" Largest error amplification: <b>{_e(top.node)}</b> [{_e(top.op)}], "
            f"{_e(times(top.amplification))} (input error {_e(g(top.input_error))}, "
            f"output error {_e(g(top.output_error))})."
        )
    return "".join(text)


def _unseen(s) -> str:
    """A note for a node whose inputs were not compared (its input error is an estimate)."""
    return f" (estimated: {s.unseen} uncompared node(s) before)" if s.unseen else ""


def _ranked_table(diag: Diagnosis, limit: int = 30) -> str:
    rows = [
        "<table><tr><th>#</th><th>Node</th><th>Op</th><th>Depth</th><th>Amplification</th>"
        "<th>Input error</th><th>Output error</th><th>Verdict</th></tr>"
    ]
    for k, s in enumerate(diag.ranked[:limit], 1):
        cls = ' class="top"' if k == 1 and diag.culprit is not None else ""
        verdict = '<span class="ok">ok</span>' if s.passed else '<span class="bad">FAILED</span>'
        rows.append(
            f"<tr{cls}><td class=n>{k}</td><td>{_e(s.node)}</td><td>{_e(s.op)}</td><td class=n>{s.depth}</td>"
            f"<td class=n>{_e(times(s.amplification))}</td><td class=n>{_e(g(s.input_error))}{_unseen(s)}</td>"
            f"<td class=n>{_e(g(s.output_error))}</td><td>{verdict}</td></tr>"
        )
    rows.append("</table>")
    if len(diag.ranked) > limit:
        rows.append(f'<p class="muted">{len(diag.ranked) - limit} more nodes in the JSON report.</p>')
    rows.append(
        '<p class="muted">Errors are relative L2 (||a - b|| / max(||a||, ||b||)); amplification is output error over '
        "input error. A faulty node has exact inputs and a wrong output.</p>"
    )
    return "\n".join(rows)


def _depth_table(diag: Diagnosis) -> str:
    rows = [
        "<table><tr><th>Depth</th><th>Tensors</th><th>Out of tolerance</th><th>Max error / tolerance</th>"
        "<th>Max relative L2 error</th></tr>"
    ]
    for r in depth_table(diag, max_rows=40):
        depth = f"{r.depth}-{r.last_depth}" if r.last_depth is not None and r.last_depth != r.depth else f"{r.depth}"
        rows.append(
            f"<tr><td>{depth}</td><td class=n>{r.tensors}</td><td class=n>{r.failed}</td>"
            f"<td class=n>{_e(g(r.max_tol_ratio))}</td><td class=n>{_e(g(r.max_rel_l2))}</td></tr>"
        )
    rows.append("</table>")
    return "\n".join(rows)


# ---------------------------------------------------------------------- the chart (inline SVG)

W, H = 1000, 340
ML, MR, MT, MB = 64, 16, 18, 44


def _log_range(values: Sequence[float]):
    finite = [math.log10(v) for v in values if v > 0 and math.isfinite(v)]
    lo = math.floor(min(finite + [0.0])) - (1 if not finite else 0)
    hi = math.ceil(max(finite + [0.0]))
    if hi - lo < 2:
        lo, hi = lo - 1, hi + 1
    return lo, hi


def _chart(diag: Diagnosis) -> str:
    tensors = diag.tensors
    if not tensors:
        return "<p>No tensors.</p>"
    vals = [t.tol_ratio for t in tensors]
    lo, hi = _log_range(vals)
    n = len(tensors)
    pw, ph = W - ML - MR, H - MT - MB

    def x(i: int) -> float:
        return ML + (i + 0.5) * pw / n

    def y(v: float) -> float:
        if math.isinf(v):
            lv = hi
        elif v <= 0:
            lv = lo
        else:
            lv = min(max(math.log10(v), lo), hi)
        return MT + (hi - lv) * ph / (hi - lo)

    svg = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {H}" width="100%" role="img" '
        f'aria-label="error per tensor">',
        f'<rect x="{ML}" y="{MT}" width="{pw}" height="{ph}" fill="#fff" stroke="#c9ced3"/>',
    ]
    svg += _axes(lo, hi, n, y)
    svg.append(
        f'<line x1="{ML}" x2="{ML + pw}" y1="{y(1.0):.1f}" y2="{y(1.0):.1f}" stroke="#b3261e" '
        'stroke-dasharray="6 4" stroke-width="1.3"/>'
        f'<text x="{ML + pw - 4}" y="{y(1.0) - 5:.1f}" text-anchor="end" style="fill:#b3261e">tolerance</text>'
    )
    svg += _markers(diag, x, MT, MT + ph)
    pts = " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in enumerate(vals))
    svg.append(f'<polyline points="{pts}" fill="none" stroke="#8aa4bf" stroke-width="1"/>')
    svg += _dots(tensors, x, y)
    svg.append("</svg>")
    legend = (
        '<div class="muted">Each point is one tensor (blue within tolerance, red out of it); y is its error '
        "relative to the tolerance that judged it (1 = the tolerance; elementwise: the largest over elements "
        "of min(abs/atol, rel/rtol)). Exact tensors sit on the bottom edge. Hover a point for its numbers.</div>"
    )
    return "\n".join(svg) + "\n" + legend


def _dots(tensors: Sequence, x, y) -> List[str]:
    """One circle per tensor (blue within tolerance, red out of it), smaller and without a tooltip
    when there are many."""
    n = len(tensors)
    radius = 3.0 if n <= 300 else (2.0 if n <= 2000 else 1.2)
    titles = n <= 5000
    out = []
    for i, t in enumerate(tensors):
        color = "#1f5f99" if t.passed else "#d93025"
        tip = f"<title>{_e(_tip(t))}</title>" if titles else ""
        out.append(f'<circle cx="{x(i):.1f}" cy="{y(t.tol_ratio):.1f}" r="{radius}" fill="{color}">{tip}</circle>')
    return out


def _axes(lo: int, hi: int, n: int, y) -> List[str]:
    out = []
    step = max(1, (hi - lo) // 8)
    for p in range(lo, hi + 1, step):
        yy = y(10.0**p)
        out.append(
            f'<line x1="{ML}" x2="{W - MR}" y1="{yy:.1f}" y2="{yy:.1f}" stroke="#eef0f2"/>'
            f'<text x="{ML - 6}" y="{yy + 4:.1f}" text-anchor="end">{_tick(p)}</text>'
        )
    out.append(
        f'<text x="{ML + (W - ML - MR) / 2:.0f}" y="{H - 10}" text-anchor="middle">tensor, in topological '
        f"order (1 to {n})</text>"
        f'<text transform="translate(14 {MT + (H - MT - MB) / 2:.0f}) rotate(-90)" text-anchor="middle">'
        "error / tolerance (log)</text>"
    )
    return out


def _tick(p: int) -> str:
    return f"{10.0**p:g}" if -2 <= p <= 3 else f"1e{p}"


def _marks(diag: Diagnosis) -> List[Tuple[int, str, str]]:
    """(tensor index, label, colour) of the culprit's output and of the first failure (when another tensor)."""
    index = {t.name: i for i, t in enumerate(diag.tensors)}
    first = diag.first_failure
    culprit = diag.culprit
    marks = []
    if culprit is not None and culprit.worst_output in index:
        marks.append((index[culprit.worst_output], f"culprit: {culprit.node} [{culprit.op}]", "#b3261e"))
    if first is not None and first.name in index and (culprit is None or first.name != culprit.worst_output):
        marks.append((index[first.name], f"first out of tolerance: {first.name}", "#e37400"))
    return marks


def _markers(diag: Diagnosis, x, top: float, bottom: float) -> List[str]:
    out = []
    for k, (i, label, color) in enumerate(_marks(diag)):
        xx = x(i)
        anchor = "start" if xx < W * 0.6 else "end"
        dx = 5 if anchor == "start" else -5
        out.append(
            f'<line x1="{xx:.1f}" x2="{xx:.1f}" y1="{top}" y2="{bottom}" stroke="{color}" stroke-width="1.5"/>'
            f'<text x="{xx + dx:.1f}" y="{top + 14 + 14 * k}" text-anchor="{anchor}" '
            f'style="fill:{color};font-weight:600">{_e(label)}</text>'
        )
    return out


def _tip(t) -> str:
    where = f" from {t.node} [{t.op}], depth {t.depth}" if t.node else ""
    return (
        f"{t.name}{where}: {gx(t.tol_ratio)} tolerance, max abs {g(t.max_abs)}, max rel {g(t.max_rel)}, "
        f"relative L2 {g(t.rel_l2)} ({'ok' if t.passed else 'FAILED'})"
    )


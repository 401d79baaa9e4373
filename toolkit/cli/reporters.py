"""The CLI's progress reporter for ``run``: it implements the library reporter (a subclass of
:class:`toolkit.core.progress.Messages`) and renders what it receives on stderr, with Rich
on a terminal and plain lines otherwise (``debug reduce``/``debug precision``: ``search_reporters.py``).

Command bodies import this module when they run, so ``--help`` does not pay for the library
modules the base classes live in.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Optional

from toolkit.cli.output import INFO, VERBOSE, WARNING, emit, enabled, err_console, is_terminal, progress, to_log_file
from toolkit.core.meta import dtype_from_numpy, format_meta
from toolkit.core.text import escape_controls
from toolkit.run.options import Reporter as RunReporter

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID


def _fmt_ms(seconds: float) -> str:
    return f"{seconds * 1000:.3f} ms"


class CliReporter(RunReporter):
    """Renders run progress on stderr: Rich on a terminal, plain lines otherwise."""

    def __init__(self, quiet: bool = False):
        self.quiet = quiet
        self.rich = is_terminal(sys.stderr)
        self._progress: Optional[Progress] = None
        self._task: Optional[TaskID] = None

    # toolkit.run.options.Reporter
    def warn(self, message: str) -> None:
        self._print(f"warning: {message}", style="yellow", level=WARNING)

    def info(self, message: str) -> None:
        if not self.quiet:
            self._print(message)

    def runner_start(self, runner) -> None:
        if self.quiet:
            return
        self._print(f"{runner.name} | Activating and starting inference")
        for attr in ("providers", "graph_optimization", "outputs", "exclude_outputs"):
            value = getattr(runner, attr, None)
            if value:
                self._print(f"{runner.name} | {attr.replace('_', ' ')}: {value}", level=VERBOSE)

    def iterations_start(self, runner_name: str, total: int) -> None:
        if self.rich and total > 1:

            bar = progress("{task.completed}/{task.total}")
            bar.start()
            self._task = bar.add_task(f"{runner_name}", total=total)
            self._progress = bar

    def iteration(self, runner_name, index, feed, outputs, seconds) -> None:
        if not self.quiet:
            self._print_iteration(runner_name, index, feed, outputs, seconds)
        if self._progress is not None and self._task is not None:
            self._progress.advance(self._task)

    def runner_done(self, runner_name, times) -> None:
        self._stop_progress()
        if self.quiet:
            return
        total = sum(times)
        avg = total / len(times) if times else 0.0
        self._print(
            f"{runner_name} | Completed {len(times)} iteration(s) in {_fmt_ms(total)} | "
            f"Average inference time: {_fmt_ms(avg)}"
        )

    def saved(self, what: str, path: str) -> None:
        if not self.quiet:
            self._print(f"Saved {what} to {'<stdout>' if path == '-' else path}")

    def close(self) -> None:
        self._stop_progress()

    # helpers
    def _stop_progress(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
            self._task = None

    def _print(self, text: str, style: Optional[str] = None, level: int = INFO) -> None:
        if self._progress is not None:
            if enabled(level):
                text = escape_controls(text, keep_newlines=True)
                self._progress.console.print(text, style=style, markup=False, highlight=False)
                to_log_file(text)
        else:
            emit(text, level, style)

    def _print_iteration(self, runner_name, index, feed, outputs, seconds) -> None:
        def metas(mapping):
            return [format_meta(n, tuple(v.shape), dtype_from_numpy(v.dtype)) for n, v in mapping.items()]

        lines = [f"{runner_name} | Iteration {index} | {_fmt_ms(seconds)}", "    ---- Inference Input(s) ----"]
        lines += [f"    {m}" for m in metas(feed)]
        lines.append("    ---- Inference Output(s) ----")
        lines += [f"    {m}" for m in metas(outputs)]
        lines = [escape_controls(ln) for ln in lines]  # (names are escaped already: this is the runner's)
        if self.rich:
            from rich.text import Text

            con = self._progress.console if self._progress is not None else err_console()
            text = Text()
            text.append(lines[0] + "\n", style="bold cyan")
            for ln in lines[1:]:
                text.append(ln + "\n", style="dim" if ln.strip().startswith("----") else None)
            con.print(text, end="")
        else:
            sys.stderr.write("\n".join(lines) + "\n")
            sys.stderr.flush()

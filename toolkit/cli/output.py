"""Consoles and printing helpers: data goes to stdout, logs to stderr.

Rich is imported only when something is printed through it. When a stream is not a
terminal, Rich prints plain text (no colour, no progress bars).
"""

from __future__ import annotations

import os
import sys
from typing import Optional

_consoles = {}


def _console(stderr: bool):
    key = "err" if stderr else "out"
    stream = sys.stderr if stderr else sys.stdout
    con = _consoles.get(key)
    # A new console when the stream object changed (tests, forked workers).
    if con is None or con.file is not stream:
        from rich.console import Console

        con = Console(file=stream, highlight=False, soft_wrap=True, emoji=False)
        _consoles[key] = con
    return con


def err_console():
    """Console for logs, progress and tables that are not data (stderr)."""
    return _console(True)


def out_console():
    """Console for data (stdout)."""
    return _console(False)


def is_terminal(stream=None) -> bool:
    stream = stream or sys.stderr
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def log(message: str, style: Optional[str] = None) -> None:
    """A log line on stderr; user text is never parsed as markup."""
    if style and is_terminal(sys.stderr):
        err_console().print(message, style=style, markup=False)
    else:
        sys.stderr.write(message + "\n")
        sys.stderr.flush()


def warn(message: str) -> None:
    log(f"warning: {message}", style="yellow")


def echo(text: str = "") -> None:
    """Data on stdout, plain text."""
    sys.stdout.write(text + "\n")


def debug_enabled() -> bool:
    return os.environ.get("TOOLKIT_DEBUG", "") not in ("", "0")

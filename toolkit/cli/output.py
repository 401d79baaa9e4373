"""Consoles, logging and printing helpers: data goes to stdout, logs to stderr.

Rich is imported only when something is printed through it. When a stream is not a
terminal, Rich prints plain text (no colour, no progress bars).

Logging has one level per process (set by ``-v``/``-q``/``--verbosity``/``--silent``, see
:func:`configure`): :func:`log` prints at INFO, :func:`verbose` at VERBOSE (``-v``),
:func:`warn` at WARNING. ``--log-file`` copies every printed log line (plain text) to a
file, and ``--log-format`` adds timestamps / source locations or turns colour off.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from types import FrameType
from typing import TYPE_CHECKING, List, Optional, TextIO

from toolkit.core.text import escape_controls
from toolkit.core.files import paths
from toolkit.core.errors import ExitCode, UsageError

# Levels: lower numbers are more verbose.
ULTRA_VERBOSE, SUPER_VERBOSE, EXTRA_VERBOSE, VERBOSE = 1, 2, 5, 10
INFO, WARNING, ERROR, CRITICAL = 20, 30, 40, 50
SILENT = 100
LEVEL_NAMES = {
    "ultra_verbose": ULTRA_VERBOSE,
    "super_verbose": SUPER_VERBOSE,
    "extra_verbose": EXTRA_VERBOSE,
    "verbose": VERBOSE,
    "info": INFO,
    "warning": WARNING,
    "error": ERROR,
    "critical": CRITICAL,
}
_MORE = [INFO, VERBOSE, EXTRA_VERBOSE, SUPER_VERBOSE, ULTRA_VERBOSE]
_LESS = [INFO, WARNING, ERROR, CRITICAL]
LOG_FORMATS = ("timestamp", "line-info", "no-colors")


class _State:
    def __init__(self) -> None:
        self.level = INFO
        self.log_file: Optional[TextIO] = None  # an open text file, or None
        self.log_file_path: Optional[str] = None
        self.formats: List[str] = []
        self.argv: Optional[List[str]] = None  # the command line as typed (before common options were taken out)
        self.model_type: Optional[str] = None  # --model-type, when given
        self.signal: Optional[int] = None  # the signal that interrupted the command (SIGINT, SIGTERM, SIGHUP)
        self.interrupt_reported = False  # its one line was printed


state = _State()
_consoles: dict = {}


def level_from_counts(verbose: int = 0, quiet: int = 0) -> int:
    """The level that ``-v`` repeated ``verbose`` times and ``-q`` repeated ``quiet`` times give."""
    if verbose and verbose >= quiet:
        return _MORE[min(verbose - quiet, len(_MORE) - 1)]
    if quiet > verbose:
        return _LESS[min(quiet - verbose, len(_LESS) - 1)]
    return INFO


def reset() -> None:
    """Back to the defaults (a new command in the same process, e.g. a warm worker)."""
    if state.log_file is not None:
        try:
            state.log_file.close()
        except OSError:
            pass
    vars(state).update(vars(_State()))

    paths.reset_process_writes()


def configure(level: Optional[int] = None, log_file: Optional[str] = None, formats=None) -> None:
    """Set the logging level, the log file (created with its folders) and the line formats."""
    if level is not None:
        state.level = level
    if formats:
        state.formats = list(dict.fromkeys(list(state.formats) + list(formats)))
    if log_file and log_file != state.log_file_path:
        _open_log_file(log_file)


def _open_log_file(log_file: str) -> None:
    """The log file open closed; ``log_file`` opened for appending (created with its folders)."""
    if state.log_file is not None:
        state.log_file.close()
    _check_log_file(log_file)
    try:
        folder = os.path.dirname(log_file)
        if folder:
            os.makedirs(folder, exist_ok=True)
        from toolkit.core.files.create import open_append

        state.log_file = open_append(log_file)  # (never through a link left at that name)
    except OSError as exc:
        if os.path.islink(log_file):
            raise UsageError(
                f"--log-file {log_file} is a symbolic link; a log is never written through one: give the file it "
                "points to, or another name"
            ) from None
        raise UsageError(f"--log-file {log_file}: cannot write it ({exc.strerror or exc})") from None
    state.log_file_path = log_file


def _check_log_file(log_file: str) -> None:
    """The log file is a write of every command (toolkit.core.files.paths): it must not be a file the
    command line names (a model, a data file, a script) nor an external data file of a model
    it names. Checked before the file is opened."""

    paths.add_process_write("--log-file", log_file)
    if log_file in ("-", "/dev/stdout", "/dev/stderr") or not os.path.exists(log_file):
        return  # (a new file can clash only with a command's outputs: each command checks those)
    named = _argv_files(state.argv or [], log_file)
    reads = [("input", p) for p in named]
    for p in named:
        reads += [(f"{p}'s external data file", d) for d in paths.model_data_files(p, [("--log-file", log_file)])]
    paths.check(reads, [])


def _argv_files(argv: List[str], log_file: str) -> List[str]:
    """The existing files named on the command line, --log-file's own value left out."""
    out = []
    skip = False
    for tok in argv:
        if skip:
            skip = False
            continue
        name, eq, value = tok.partition("=")
        if name == "--log-file":
            skip = not eq
            continue
        cand = value if eq and name.startswith("-") else tok
        if cand and cand != "-" and os.path.isfile(cand):
            out.append(cand)
    return out


def interrupted_by() -> str:
    """'interrupted' and the signal that did it: 'interrupted (SIGTERM)'."""
    if state.signal is None:
        return "interrupted"

    try:
        return f"interrupted ({signal.Signals(state.signal).name})"
    except ValueError:  # pragma: no cover
        return f"interrupted (signal {state.signal})"


def enabled(level: int) -> bool:
    """Whether a message of ``level`` is printed."""
    return level >= state.level


def is_quiet() -> bool:
    """``-q`` or quieter: only warnings, errors and final verdicts."""
    return state.level > INFO


def is_verbose(level: int = VERBOSE) -> bool:
    return state.level <= level


def ort_severity() -> int:
    """ONNX-Runtime's log severity for our level: silent by default (its errors come back as
    exceptions, reported once), warnings with -v, info with -vv, everything with -vvv."""
    if state.level <= SUPER_VERBOSE:
        return 0
    if state.level <= EXTRA_VERBOSE:
        return 1
    if state.level <= VERBOSE:
        return 2
    return 4


def ort_log_sink():
    """Where ONNX-Runtime's own log lines go: straight to a terminal (its colours are fine
    there), through our log (plain, and into ``--log-file``) everywhere else."""
    if colour_allowed(sys.stderr):
        return None
    return lambda line: emit(f"onnxruntime | {line}", WARNING)


def colour_allowed(stream=None) -> bool:
    return is_terminal(stream) and "no-colors" not in state.formats and not os.environ.get("NO_COLOR")


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


if TYPE_CHECKING:
    from rich.progress import Progress


def progress(counter: str, tail: str = "", **options) -> "Progress":
    """A transient Rich progress bar on stderr: description, bar, ``counter`` (a column
    template such as ``"{task.completed}/{task.total} checks"``), time elapsed, ``tail``."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    columns = [TextColumn("{task.description}"), BarColumn(), TextColumn(counter), TimeElapsedColumn()]
    if tail:
        columns.append(TextColumn(tail))
    return Progress(*columns, console=err_console(), transient=True, **options)


def err_console():
    """Console for logs, progress and tables that are not data (stderr)."""
    return _console(True)


def is_terminal(stream=None) -> bool:
    isatty = getattr(stream or sys.stderr, "isatty", None)  # None: a stream object without it
    try:
        return bool(isatty()) if isatty is not None else False
    except ValueError:  # a closed stream
        return False


def _prefix(depth: int) -> str:
    parts = []
    if "timestamp" in state.formats:
        parts.append(time.strftime("[%Y-%m-%d %H:%M:%S]"))
    if "line-info" in state.formats:
        try:
            frame: Optional[FrameType] = sys._getframe(depth + 1)
            here = os.path.abspath(__file__)
            while frame is not None and os.path.abspath(frame.f_code.co_filename) == here:
                frame = frame.f_back
            if frame is not None:
                parts.append(f"[{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}]")
        except ValueError:  # pragma: no cover - shallow stack
            pass
    return " ".join(parts) + " " if parts else ""


def to_log_file(text: str) -> None:
    """Copy ``text`` (one or more lines, no trailing newline needed) to the ``--log-file``."""
    if state.log_file is None:
        return
    try:
        state.log_file.write(text if text.endswith("\n") else text + "\n")
        state.log_file.flush()
    except (OSError, ValueError) as exc:
        # a full disk: say it once on stderr and stop writing to it
        lost, state.log_file = state.log_file, None
        try:
            lost.close()
        except (OSError, ValueError):
            pass
        why = getattr(exc, "strerror", None) or str(exc)
        sys.stderr.write(f"warning: --log-file {state.log_file_path}: cannot write ({why}); the log goes on only here\n")


def emit(message: str, level: int = INFO, style: Optional[str] = None) -> None:
    """Print a log line at ``level`` on stderr (and to the log file); never parsed as markup."""
    if not enabled(level):
        return
    message = _prefix(1) + escape_controls(message, keep_newlines=True)  # (no escape sequence from a name acts)
    if style and colour_allowed(sys.stderr):
        err_console().print(message, style=style, markup=False)
    else:
        sys.stderr.write(message + "\n")
        sys.stderr.flush()
    to_log_file(message)


def log(message: str, style: Optional[str] = None) -> None:
    """An informational log line on stderr; user text is never parsed as markup."""
    emit(message, INFO, style)


def verbose(message: str, level: int = VERBOSE) -> None:
    """Per-step detail, shown with ``-v`` (or ``--verbosity verbose``) and more."""
    emit(message, level, None)


def warn(message: str) -> None:
    emit(f"warning: {message}", WARNING, "yellow")


def result(message: str, style: Optional[str] = None) -> None:
    """A failing verdict (FAILED, an error): shown even with ``-qq``; hidden only by ``--silent``."""
    emit(message, ERROR, style)


def pass_verdict(message: str, style: Optional[str] = None) -> None:
    """A passing verdict (PASSED): shown with ``-q``; hidden by ``-qq`` (only errors)."""
    emit(message, WARNING, style)


def echo(text: str = "") -> None:
    """Data on stdout, plain text."""
    sys.stdout.write(text + "\n")


def debug_enabled() -> bool:
    return os.environ.get("TOOLKIT_DEBUG", "") not in ("", "0")


def interrupted(found: bool, kept: str, stats: str) -> int:
    """The last line of a search stopped by Ctrl-C (``found``: a passing set was found; ``kept``: its
    size in words), and the exit code."""
    state.interrupt_reported = True
    log(f"Interrupted: the smallest passing set so far has {kept} ({stats})." if found
        else f"Interrupted before any passing set was found ({stats}).")
    return int(ExitCode.INTERRUPTED)


def plural(n: int, word: str) -> str:
    """``n`` and ``word``, with an s unless ``n`` is 1 ("1 check", "3 checks")."""
    return f"{n} {word}{'s' if n != 1 else ''}"

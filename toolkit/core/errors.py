"""Exit codes and the exceptions that map onto them.

Library code raises these; the CLI's single error boundary (``toolkit.cli.errors``)
turns them into one ``error: ...`` line on stderr and the matching exit code.
"""

from __future__ import annotations

import enum
import os


class ExitCode(enum.IntEnum):
    OK = 0
    FAILED = 1  # a check or a comparison failed
    USAGE = 2  # bad command line
    BAD_INPUT = 3  # bad input file or model
    MISSING_DEPENDENCY = 4  # optional dependency or device missing
    INTERNAL = 70  # an unexpected exception: a bug in toolkit (EX_SOFTWARE of sysexits.h)
    INTERRUPTED = 130  # Ctrl-C


class ToolkitError(Exception):
    """An expected failure with a message meant for the user."""

    exit_code: int = ExitCode.BAD_INPUT

    def __init__(self, message: str, exit_code: int | None = None):
        super().__init__(message)
        self.message = message
        if exit_code is not None:
            self.exit_code = int(exit_code)

    def __str__(self) -> str:  # pragma: no cover - trivial
        return self.message


class InputError(ToolkitError):
    """A file, model or data set that cannot be used (exit code 3)."""

    exit_code = ExitCode.BAD_INPUT


class UsageError(ToolkitError):
    """A malformed option value or a bad combination of options (exit code 2)."""

    exit_code = ExitCode.USAGE


class DependencyError(ToolkitError):
    """An optional dependency or a device is missing (exit code 4)."""

    exit_code = ExitCode.MISSING_DEPENDENCY


class InferenceError(ToolkitError):
    """A backend failed while running (or building) the model (exit code 1: the run failed)."""

    exit_code = ExitCode.FAILED


def one_line(exc: BaseException, *, first_line: bool = False, limit: int = 0) -> str:
    """``exc`` as one line of text for an ``error: ...`` message (its type name when it says nothing).

    Whitespace runs (newlines included) collapse to one space; ``first_line`` keeps only the
    first non-empty line (for libraries that append long details); ``limit`` > 0 cuts the text.
    """
    text = str(exc).strip()
    if first_line and text:
        text = text.splitlines()[0]
    text = " ".join(text.split())
    if limit and len(text) > limit:
        text = text[: limit - 3] + "..."
    return text or type(exc).__name__


# What a library raises for a model or value it cannot take, besides its own exception types:
# a runtime failure, a bad value, a file it cannot read, memory. Never the errors Python raises
# for a bug (PYTHON_ERRORS): in toolkit's own code those are exit 70 with a traceback.
LIBRARY_ERRORS = (RuntimeError, ValueError, OSError, MemoryError)

# The errors Python raises for a wrong attribute, key, type or index. Some libraries raise them on a
# graph they cannot take (onnx-graphsurgeon, onnxconverter-common, numpy's file reader): a place that
# catches them around such a library calls :func:`reraise_bug` first, so that one raised by toolkit's
# own code stays a bug.
PYTHON_ERRORS = (AttributeError, KeyError, TypeError, IndexError)

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def raised_in_toolkit(exc: BaseException) -> bool:
    """The innermost frame of ``exc``'s traceback is toolkit's own code (not a library's)."""
    tb = exc.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    return os.path.abspath(tb.tb_frame.f_code.co_filename).startswith(_PACKAGE_DIR + os.sep)


def reraise_bug(exc: BaseException) -> None:
    """Raise ``exc`` again when it is one of PYTHON_ERRORS raised by toolkit's own code (a bug:
    exit 70), not by the library the caller wraps. Call it first in such an ``except`` clause."""
    if isinstance(exc, PYTHON_ERRORS) and raised_in_toolkit(exc):
        raise exc


def ort_errors() -> tuple:
    """What ONNX-Runtime raises for a model or an input it cannot take: its own exception types
    (``Fail``, ``InvalidGraph``, ``InvalidArgument``... derive from ``Exception`` alone) and
    :data:`LIBRARY_ERRORS`. Called in an ``except`` clause, so after ONNX-Runtime was imported."""
    from onnxruntime.capi import onnxruntime_pybind11_state as state

    own = tuple(v for v in vars(state).values() if isinstance(v, type) and issubclass(v, Exception))
    return own + LIBRARY_ERRORS

"""Exit codes and the exceptions that map onto them.

Library code raises these; the CLI's single error boundary (``toolkit.cli.errors``)
turns them into one ``error: ...`` line on stderr and the matching exit code.
"""

from __future__ import annotations

import enum


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
# the errors of its Python layer (a bad argument, a missing key, a file it cannot read).
LIBRARY_ERRORS = (RuntimeError, ValueError, TypeError, KeyError, IndexError, AttributeError, OSError, MemoryError)


def ort_errors() -> tuple:
    """What ONNX-Runtime raises for a model or an input it cannot take: its own exception types
    (``Fail``, ``InvalidGraph``, ``InvalidArgument``... derive from ``Exception`` alone) and
    :data:`LIBRARY_ERRORS`. Called in an ``except`` clause, so after ONNX-Runtime was imported."""
    from onnxruntime.capi import onnxruntime_pybind11_state as state

    own = tuple(v for v in vars(state).values() if isinstance(v, type) and issubclass(v, Exception))
    return own + LIBRARY_ERRORS

"""The two places toolkit catches every exception, each named for why.

Everywhere else an ``except`` clause names what the call it guards raises (docs/architecture.md,
"Errors"); the command line's error boundary (``cli/errors.py``) turns the rest into an exit code.
``tests/architecture/test_rooms.py`` finds a broad ``except`` anywhere else.

- :func:`carried`: a function's value, or whatever it raised, kept for the one that waits on it,
  which raises it (a helper thread's work, a forked child's, a callback foreign code calls and
  that must not raise into it, a read error raised after the lines before it). Nothing is dropped
  by it: its caller hands the exception on.
- :func:`optional`: a step whose failure only leaves an answer less complete (symbolic shape
  inference, a device's precision hint, a warm-up, a Ray node's name, cancelling a task that may
  have ended): whatever the library raises gives ``default``; a bug of toolkit's own code (one of
  ``PYTHON_ERRORS`` raised by toolkit itself, :func:`~toolkit.core.errors.reraise_bug`) is raised
  still.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Generic, Optional, Tuple, Type, TypeVar, Union

from toolkit.core.errors import reraise_bug

T = TypeVar("T")

Catching = Union[Type[BaseException], Tuple[Type[BaseException], ...]]


@dataclass
class Carried(Generic[T]):
    """A call's value, or the exception it raised (``error``), to be raised by whoever waits on it."""

    value: Optional[T] = None
    error: Optional[BaseException] = None

    def get(self) -> T:
        """The value; the exception the call raised is raised here."""
        if self.error is not None:
            raise self.error
        return self.value  # type: ignore[return-value]


def carried(fn: Callable[..., T], *args, catching: Catching = BaseException, **kwargs) -> Carried[T]:
    """``fn(*args, **kwargs)``'s value, or the exception of the types ``catching`` it raised
    (every one by default: Ctrl-C in a helper thread is the waiting thread's to raise)."""
    try:
        return Carried(value=fn(*args, **kwargs))
    except BaseException as exc:  # noqa: BLE001 - carried to whoever waits on it, and raised there
        if not isinstance(exc, catching):
            raise
        return Carried(error=exc)


def optional(fn: Callable[..., T], *args, default: Optional[T] = None, **kwargs) -> Optional[T]:
    """``fn(*args, **kwargs)``, or ``default`` when it raises: a refinement whose failure leaves
    less known and nothing wrong. Ctrl-C, and a bug of toolkit's own code, are raised."""
    try:
        return fn(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - an optional step: any failure of the library it calls is its absence
        reraise_bug(exc)
        return default

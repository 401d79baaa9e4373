"""What library code tells its caller while it works.

Every long step (``toolkit.run``, ``toolkit.reduce``, ``toolkit.precision``) takes a reporter
built on :class:`Messages`; the CLI renders what it receives, a library caller may ignore it
(the default does nothing). Library code never prints.
"""

from __future__ import annotations


class Messages:
    """Info lines and warnings; both methods do nothing unless overridden."""

    def info(self, message: str) -> None:
        """An informational line."""

    def warn(self, message: str) -> None:
        """A warning worth showing (an option ignored, a value guessed, ...)."""

"""Text from a model or a file (node and tensor names, producer strings) made safe to print.

Names are arbitrary strings: an escape sequence in one (``ESC ] 0; ... BEL`` sets a
terminal's title, ``ESC [ 2J`` clears the screen) would act on the terminal, a bidirectional
override (U+202E) would show the text reordered, and a newline would forge whole lines for a reader or for grep (``Node 99 | fake [Op: Evil]``).
:func:`escape_controls` shows every control character as a visible escape (``\\x1b``,
``\\n``) so that each printed name stays one line of plain text.
"""

from __future__ import annotations

import re

# C0 and C1 controls, the line and paragraph separators, and the bidirectional embeddings,
# overrides and isolates (U+202A-U+202E, U+2066-U+2069), which reorder what a terminal shows,
# and lone surrogates (a JSON file may hold one: "\ud800"), which no output encoding can write
_CONTROLS = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028-\u202e\u2066-\u2069\ud800-\udfff]")
_CONTROLS_BUT_NEWLINE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028-\u202e\u2066-\u2069\ud800-\udfff]")
_NAMED = {"\n": "\\n", "\r": "\\r"}


def _shown(m: re.Match) -> str:
    ch = m.group(0)
    return _NAMED.get(ch) or (f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else f"\\u{ord(ch):04x}")


def escape_controls(text: str, keep_newlines: bool = False) -> str:
    """``text`` with its control characters (tab excepted; newlines too with ``keep_newlines``)
    written as visible escapes."""
    pattern = _CONTROLS_BUT_NEWLINE if keep_newlines else _CONTROLS
    if pattern.search(text) is None:
        return text
    return pattern.sub(_shown, text)


def shown_name(name) -> str:
    """A name from a model or a file as one line of plain text (every control character, newlines
    included, written as a visible escape)."""
    return escape_controls(str(name))

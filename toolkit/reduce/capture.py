"""A check's output, streamed: bounded memory whatever it prints.

:class:`Stream` keeps the first :data:`HEAD_BYTES` and the last :data:`TAIL_BYTES` of one
output stream (stdout or stderr) of a check, counts the rest, and searches the
``--fail-regex`` patterns in every chunk as it arrives (with the end of the previous chunk
in front of it, so a match split across two reads is found). A check that prints
gigabytes therefore costs the reduce a few MiB, and its verdict is the one the whole
output gives.

No Typer or Rich here.
"""

from __future__ import annotations

import collections
from typing import Deque, Optional, Pattern, Sequence, Set

HEAD_BYTES = 1 << 20
TAIL_BYTES = 1 << 20
OVERLAP_BYTES = 16 << 10  # a pattern's match up to this long is found across two reads


class Stream:
    """One output stream of a check: head, tail, length, and the patterns seen in it."""

    def __init__(self, patterns: Sequence[Pattern] = ()):
        self.head = bytearray()
        self.tail: Deque[bytes] = collections.deque()
        self.tail_bytes = 0
        self.total = 0
        self.left = list(patterns)  # patterns not found yet
        self.found: Set[str] = set()
        self._carry = b""

    def add(self, data: bytes) -> None:
        self.total += len(data)
        if self.left:
            self._search(data)
        room = HEAD_BYTES - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if not data:
            return
        self.tail.append(data)
        self.tail_bytes += len(data)
        while self.tail_bytes - len(self.tail[0]) >= TAIL_BYTES:
            self.tail_bytes -= len(self.tail.popleft())

    def _search(self, data: bytes) -> None:
        window = self._carry + data
        text = window.decode("utf-8", errors="replace")
        for p in list(self.left):
            if p.search(text):
                self.found.add(p.pattern)
                self.left.remove(p)
        self._carry = window[-OVERLAP_BYTES:]

    @property
    def dropped(self) -> int:
        """Bytes of the middle that were not kept."""
        return self.total - len(self.head) - self.tail_bytes

    def value(self) -> bytes:
        """What was kept: the whole output, or its head and tail around a line saying how
        much was left out."""
        tail = b"".join(self.tail)
        if not self.dropped:
            return bytes(self.head) + tail
        note = f"\n[... {self.dropped} bytes of the check's output not kept ...]\n".encode()
        return bytes(self.head) + note + tail


def found_patterns(streams: Sequence[Stream], patterns: Sequence[Pattern]) -> Optional[frozenset]:
    """The patterns found in any of ``streams`` (None when there were none to search)."""
    if not patterns:
        return None
    return frozenset(set().union(*(s.found for s in streams)))

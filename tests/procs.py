"""Process state read from /proc, for the tests that check no child outlives its command."""

from __future__ import annotations


def alive(pid: int) -> bool:
    """Whether ``pid`` runs: a zombie (Z) or dead (X) process, or none at all, is not alive."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False

"""Temporary folders that live as long as the command: removed when it ends, however it ends
(an error, exit 130 on a signal, success).

The console script leaves with ``os._exit`` (see ``toolkit.cli.app.run``), which skips ``atexit``;
it calls :func:`remove_all` first. ``atexit`` still removes them for a library caller. A forked
child removes only the folders it made itself, never its parent's.

Standard library only.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from typing import List, Tuple

_MADE: List[Tuple[int, str]] = []  # (pid of the process that made it, folder)


def temp_folder(prefix: str) -> str:
    """A new private folder under the temp directory, removed when the command ends."""
    folder = tempfile.mkdtemp(prefix=prefix)
    _MADE.append((os.getpid(), folder))
    return folder


def remove_all() -> None:
    """Remove every folder this process made with :func:`temp_folder` (idempotent)."""
    pid = os.getpid()
    for entry in [e for e in _MADE if e[0] == pid]:
        _MADE.remove(entry)
        shutil.rmtree(entry[1], ignore_errors=True)


atexit.register(remove_all)

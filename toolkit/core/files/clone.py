"""A copy-on-write clone of a file, standard library only (a Ray worker's check task uses it
without importing onnx)."""

from __future__ import annotations

import os

FICLONE = 0x40049409  # Linux ioctl: a copy-on-write clone of a whole file (btrfs, xfs, ...)


def clone_file(src: str, dest: str) -> bool:
    """``dest`` made a copy-on-write clone of ``src`` (no data copied), where the filesystem can."""
    try:
        import fcntl

        from toolkit.core.files.create import open_new

        with open(src, "rb") as fin, open_new(dest, "wb") as fout:  # (never through a link left at dest)
            fcntl.ioctl(fout.fileno(), FICLONE, fin.fileno())
        return True
    except FileExistsError:
        return False
    except (OSError, ImportError):
        if os.path.exists(dest):
            os.unlink(dest)
        return False

"""Which held-out input sets are held out: a set equal to one the search runs on is not.

A held-out check says how a result does on inputs the search never saw. A held-out set whose
arrays equal those of a search set (the same file given to ``--load-inputs`` and
``--validate-inputs``, a copy of it, a file loaded twice, generated values that do not vary) was
seen: it can only repeat the search's verdict, so it is dropped before the check. Sets are
compared by their arrays (names, dtypes, shapes and values; a float ``-0.0`` equals ``0.0``), never by
file names.

No Typer or Rich here.
"""

from __future__ import annotations

import hashlib
from typing import List, Mapping, Sequence, Tuple

import numpy as np


def feed_digest(feed: Mapping) -> bytes:
    """A digest of one input set: each input's name, dtype, shape and values."""
    h = hashlib.blake2b(digest_size=20)
    for name in sorted(feed):
        arr = np.asarray(feed[name])
        h.update(f"{name}\0{arr.dtype.str}\0{arr.shape}\0".encode())
        if arr.dtype.kind == "O":
            h.update(repr(arr.tolist()).encode())
        else:
            h.update(np.ascontiguousarray(_no_negative_zero(arr)).view(np.uint8).data)  # (no copy)
    return h.digest()


def _no_negative_zero(arr: np.ndarray) -> np.ndarray:
    """``arr`` with -0.0 as 0.0 (a copy only where it holds one): equal values, one digest."""
    if arr.dtype.kind != "f":
        return arr
    negative_zero = (arr == 0) & np.signbit(arr)
    return np.where(negative_zero, arr.dtype.type(0), arr) if negative_zero.any() else arr


def drop_seen(held: Sequence[Mapping], seen: Sequence[Mapping]) -> Tuple[List[Mapping], int, int]:
    """(the sets of ``held`` equal to none of ``seen`` nor to an earlier set of ``held``, in order; how
    many equal a set of ``seen``; how many repeat an earlier held-out set). A repeat is no further
    evidence: counted twice it would bound the failure rate tighter than the data does."""
    known = {feed_digest(feed) for feed in seen}
    kept: List[Mapping] = []
    kept_digests: set = set()
    in_search = 0
    for feed in held:
        digest = feed_digest(feed)
        if digest in known:
            in_search += 1
        elif digest not in kept_digests:
            kept.append(feed)
            kept_digests.add(digest)
    return kept, in_search, len(held) - len(kept) - in_search


def dropped_words(in_search: int, repeats: int, total: int, source: str) -> str:
    """The warning for the held-out sets (``total`` from ``source``) that are not held out."""
    parts = [f"{in_search} equal input sets the search runs on"] if in_search else []
    parts += [f"{repeats} repeat other held-out sets"] if repeats else []
    left = total - in_search - repeats
    return (f"of the {total} held-out input set(s) ({source}), {' and '.join(parts)}: "
            + (f"the result is checked on the {left} left" if left else "there is no held-out check"))


def none_left_words(total: int, source: str) -> str:
    """Why there is no held-out check when every one of ``total`` held-out sets was a search set."""
    return (f"each of the {total} held-out input set(s) ({source}) equals an input set the search runs on "
            "(give input sets the search does not use, e.g. --validate-inputs with other data)")

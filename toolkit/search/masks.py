"""Sets of positions as Python int bit masks: the node sets ``debug reduce`` checks and the
sets ``debug precision`` searches (bit ``i`` set: position ``i`` is in the set).

Nothing here knows ONNX: the delta-debugging search (:mod:`toolkit.search.strategy`) works on
these masks alone.
"""

from __future__ import annotations

from typing import List


def mask_indices(mask: int) -> List[int]:
    """Positions of the set bits of ``mask``, ascending."""
    out = []
    base = 0
    while mask:
        low = mask & 0xFFFFFFFFFFFFFFFF
        while low:
            bit = low & -low
            out.append(base + bit.bit_length() - 1)
            low ^= bit
        mask >>= 64
        base += 64
    return out


def mask_of(indices) -> int:
    m = 0
    for i in indices:
        m |= 1 << i
    return m


def range_mask(start: int, stop: int) -> int:
    """Nodes ``start .. stop-1``."""
    if stop <= start:
        return 0
    return ((1 << stop) - 1) ^ ((1 << start) - 1)


def span_words(mask: int, full_mask: int) -> str:
    """The nodes of ``mask`` in words: 'full model', 'node 4', 'nodes 4..9', or
    'nodes 2..40 (3 runs)' for a set with gaps (positions in topological order)."""
    if mask == full_mask:
        return "full model"
    idx = mask_indices(mask)
    if not idx:
        return "no nodes"
    runs = 1 + sum(1 for a, b in zip(idx, idx[1:]) if b != a + 1)
    if len(idx) == 1:
        return f"node {idx[0]}"
    text = f"nodes {idx[0]}..{idx[-1]}"
    return text if runs == 1 else f"{text} ({runs} runs)"


def popcount(mask: int) -> int:
    return bin(mask).count("1")

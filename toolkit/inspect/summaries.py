"""Statistics of many small tensors at once, equal to :func:`summarize_array` of each.

A data file of many iterations holds thousands of small tensors; numpy's cost per call
(about 15 reductions per tensor) then dominates. Tensors of one dtype and shape are stacked
and reduced along the rows: numpy reduces each contiguous row as it reduces a 1-D array
(pairwise summation, the same partition for the median and percentiles), so every figure is
the one :func:`summarize_array` gives, bit for bit (``tests/inspect/test_inspect_summaries.py``).
A tensor with a NaN or an infinity, an empty or a large one, or one of another dtype kind is
summarized alone.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from toolkit.inspect.describe import as_float, exact_value, summarize_array

SMALL_TENSOR = 4096  # elements: tensors up to this size are summarized in batches
VALUES_SHOWN = 12  # (summarize_array's max_elems: a tensor this small lists its values)


def summarize_many(arrays: Sequence) -> List[dict]:
    """``[summarize_array(a) for a in arrays]``, computed a dtype and shape at a time."""
    infos: List[Optional[dict]] = [None] * len(arrays)
    for idx in _groups(arrays).values():
        if len(idx) == 1:
            infos[idx[0]] = summarize_array(arrays[idx[0]])
        else:
            _summarize_group([np.asarray(arrays[i]) for i in idx], idx, infos)
    return [info for info in infos if info is not None]


def _groups(arrays: Sequence) -> Dict[tuple, List[int]]:
    """The indices of ``arrays`` by dtype and shape for the small numeric ones (summarized together);
    each other one alone."""
    groups: Dict[tuple, List[int]] = {}
    for i, arr in enumerate(arrays):
        arr = np.asarray(arr)
        small = arr.dtype.kind in "biuf" and 0 < arr.size <= SMALL_TENSOR
        groups.setdefault((arr.dtype, arr.shape) if small else (i,), []).append(i)
    return groups


def _summarize_group(group: List, idx: List[int], infos: List[Optional[dict]]) -> None:
    """Fill ``infos[idx[k]]`` for ``group[k]`` (arrays of one dtype and shape)."""
    stack = np.stack([arr.ravel(order="K") for arr in group])  # (memory order, as numpy reduces one array)
    data = as_float(stack)
    finite = np.isfinite(data).all(axis=1)
    rows = np.flatnonzero(finite)
    for k in np.flatnonzero(~finite):
        infos[idx[k]] = summarize_array(group[k])
    if not rows.size:
        return
    stats = _row_statistics(stack, data if rows.size == len(group) else data[rows])
    for j, k in enumerate(rows):
        infos[idx[k]] = _row_info(group[k], stats, j)


def _row_info(arr, stats: Dict[str, Tuple[Any, Callable]], j: int) -> dict:
    """The summary of ``arr``, row ``j`` of the statistics ``stats`` (see :func:`_row_statistics`)."""
    info: dict = {"dtype": str(arr.dtype), "shape": list(arr.shape), "size": int(arr.size)}
    info.update({key: convert(values[j]) for key, (values, convert) in stats.items()})
    if arr.size <= VALUES_SHOWN:
        info["values"] = arr.tolist()
    return info


def _row_statistics(stack, vals) -> Dict[str, Tuple[Any, Callable]]:
    """Each statistic of :func:`summarize_array` for each row of ``vals`` (the finite rows of
    ``stack``, as floats), with how one value of it is held in JSON."""
    exact = stack if stack.dtype.kind in "iu" else vals  # (integers, all finite: min and max without rounding)
    p90, p95, p99 = np.percentile(vals, [90, 95, 99], axis=1)
    return {
        "mean": (np.mean(vals, axis=1), float),
        "std": (np.std(vals, axis=1), float),
        "min": (np.min(exact, axis=1), exact_value),
        "max": (np.max(exact, axis=1), exact_value),
        "median": (np.median(vals, axis=1), float),
        "p90": (p90, float),
        "p95": (p95, float),
        "p99": (p99, float),
    }

"""``inspect data``: a data file described tensor by tensor, as text lines or JSON, streamed.

Each tensor is read, summarized and printed before the next one is read (a ``.npz`` file's
members load one at a time), so memory stays near one tensor beyond what loading the file
takes. ``--show-values`` prints ``num_items`` values at each end of every dimension (3 by
default, as Polygraphy does; -1 prints all).
"""

from __future__ import annotations

from typing import Any, Dict, Iterator, List, Mapping, Optional

from toolkit.core.datafiles import RunResults
from toolkit.core.meta import format_shape
from toolkit.inspect.describe import INDENT, stats_text, summarize_array, values_text

DEFAULT_NUM_ITEMS = 3


def tensor_dict(name: str, arr, show_values: bool, num_items: Optional[int], line_width: Optional[int]) -> dict:
    """One tensor's description: dtype, shape, statistics; with ``show_values`` every value when
    ``num_items`` is -1, else ``values_text``, the values printed as text, bounded."""
    info = dict(name=name, **summarize_array(arr))
    if show_values:
        items = DEFAULT_NUM_ITEMS if num_items is None else num_items
        if items < 0:
            info["values"] = _listed(arr)
        else:
            info["values_text"] = values_text(arr, False, items, line_width)
    return info


def _listed(arr) -> Any:
    import numpy as np

    arr = np.asarray(arr)
    return arr.astype(str).tolist() if arr.dtype.kind == "S" else arr.tolist()


def _tensor_lines(name: str, arr, ind: str, show_values: bool, num_items, line_width) -> List[str]:
    info = summarize_array(arr)
    out = [f"{ind}{name} [dtype={info['dtype']}, shape={format_shape(tuple(info['shape']))}] | "
           f"{stats_text(info, percentiles=True)}"]
    if show_values:
        items = DEFAULT_NUM_ITEMS if num_items is None else num_items
        out += [f"{ind}    {line}" for line in values_text(arr, items < 0, items, line_width).splitlines()]
    return out


def data_lines(data, show_values: bool = False, num_items: Optional[int] = None,
               line_width: Optional[int] = None) -> Iterator[List[str]]:
    """The text of a loaded data file, one list of lines at a time: each tensor's lines (after
    the headers before it), read and printed before the next tensor is read."""
    fmt = (show_values, num_items, line_width)
    if not isinstance(data, RunResults):
        yield [f"==== Inputs file: {len(data)} iteration(s) ===="]
        for k, feed in enumerate(data):
            yield [f"{INDENT}---- Iteration {k}: {len(feed)} tensor(s) ----"]
            for name in feed:
                yield _tensor_lines(name, feed[name], INDENT, *fmt)
        return
    yield [f"==== Outputs file: {len(data.runs)} runner(s) ===="]
    for runner, iters in data.runs:
        yield [f"{INDENT}---- {runner}: {len(iters)} iteration(s) ----"]
        for k, it in enumerate(iters):
            yield [f"{INDENT}Iteration {k} ({len(it.outputs)} tensor(s), runtime {it.runtime * 1000:.3f} ms)"]
            for name in it.outputs:
                yield _tensor_lines(name, it.outputs[name], INDENT * 2, *fmt)


def describe_data(data, show_values: bool = False, num_items: Optional[int] = None,
                  line_width: Optional[int] = None) -> Dict[str, Any]:
    """The description of a loaded data file (``--json``): runners and iterations of tensors."""

    def feed_desc(feed: Mapping) -> list:
        return [tensor_dict(name, feed[name], show_values, num_items, line_width) for name in feed]

    if isinstance(data, RunResults):
        return {
            "kind": "outputs",
            "runners": [
                {"runner": runner, "iterations": [{"runtime": it.runtime, "tensors": feed_desc(it.outputs)} for it in iters]}
                for runner, iters in data.runs
            ],
        }
    return {"kind": "inputs", "iterations": [{"tensors": feed_desc(feed)} for feed in data]}

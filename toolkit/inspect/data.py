"""``inspect data``: a data file described tensor by tensor, as text lines or JSON, streamed.

Tensors are read in windows of at most ``WINDOW_TENSORS`` tensors and ``WINDOW_BYTES``
bytes (a ``.npz`` file's members load one at a time), summarized together (small tensors of
one dtype and shape in one numpy call per statistic: :mod:`toolkit.inspect.summaries`) and
printed before the next window is read: memory stays near one window (or one tensor larger
than it) beyond what loading the file takes, and the time per tensor is small and constant.
A tensor that cannot be read is reported after every line before it is printed.
``--show-values`` prints ``num_items`` values at each end of every dimension (3 by default,
as Polygraphy does; -1 prints all).
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Tuple, Union

from toolkit.core.contain import carried
from toolkit.core.io.datafiles import RunResults
from toolkit.core.meta import format_shape
from toolkit.inspect.describe import INDENT, stats_text, values_text
from toolkit.inspect.summaries import summarize_many

DEFAULT_NUM_ITEMS = 3
WINDOW_TENSORS = 1024
WINDOW_BYTES = 4 << 20

# A window's entries: lines to print as they are, or a tensor read (name, array, indent).
_Entry = Union[List[str], Tuple[str, Any, str]]


def tensor_dict(name: str, arr, info: dict, show_values: bool, num_items: Optional[int],
                line_width: Optional[int]) -> dict:
    """One tensor's description: dtype, shape, statistics (``info``, from :func:`summarize_many`);
    with ``show_values`` every value when ``num_items`` is -1, else ``values_text``, the values
    printed as text, bounded."""
    info = dict(name=name, **info)
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


def _tensor_lines(name: str, arr, ind: str, info: dict, show_values: bool, num_items, line_width) -> List[str]:
    out = [f"{ind}{name} [dtype={info['dtype']}, shape={format_shape(tuple(info['shape']))}] | "
           f"{stats_text(info, percentiles=True)}"]
    if show_values:
        items = DEFAULT_NUM_ITEMS if num_items is None else num_items
        out += [f"{ind}    {line}" for line in values_text(arr, items < 0, items, line_width).splitlines()]
    return out


def _entries(data) -> Iterator[Union[List[str], Tuple[str, Mapping, str]]]:
    """The text's headers (lists of lines) and tensors to read ((name, feed, indent)), in order."""
    return _output_entries(data) if isinstance(data, RunResults) else _input_entries(data)


def _input_entries(data) -> Iterator[Union[List[str], Tuple[str, Mapping, str]]]:
    """:func:`_entries` of an inputs file."""
    yield [f"==== Inputs file: {len(data)} iteration(s) ===="]
    for k, feed in enumerate(data):
        yield [f"{INDENT}---- Iteration {k}: {len(feed)} tensor(s) ----"]
        for name in feed:
            yield (name, feed, INDENT)


def _output_entries(data) -> Iterator[Union[List[str], Tuple[str, Mapping, str]]]:
    """:func:`_entries` of an outputs file (saved run results)."""
    yield [f"==== Outputs file: {len(data.runs)} runner(s) ===="]
    for runner, iters in data.runs:
        yield [f"{INDENT}---- {runner}: {len(iters)} iteration(s) ----"]
        for k, it in enumerate(iters):
            yield [f"{INDENT}Iteration {k} ({len(it.outputs)} tensor(s), runtime {it.runtime * 1000:.3f} ms)"]
            for name in it.outputs:
                yield (name, it.outputs, INDENT * 2)


def _windows(items: Iterable, read) -> Iterator[Tuple[list, Optional[BaseException]]]:
    """``items`` in windows (bounded by tensors and bytes), each tensor item replaced by what
    ``read(item)`` returns: (name, array, ...). A read that fails ends the windows with its
    exception, after the window read so far."""
    window: list = []
    tensors = held = 0
    for item in items:
        if isinstance(item, list):
            window.append(item)
            continue
        got = carried(read, item, catching=Exception)  # (a read error: raised after the lines before it)
        if got.error is not None:
            yield window, got.error
            return
        entry = got.get()
        window.append(entry)
        tensors += 1
        held += int(getattr(entry[1], "nbytes", 0))
        if tensors >= WINDOW_TENSORS or held >= WINDOW_BYTES:
            yield window, None
            window, tensors, held = [], 0, 0
    yield window, None


def _summaries(window: list) -> Iterator[Tuple[Any, Optional[dict]]]:
    """Each entry of ``window`` with its tensor's summary (None for lines)."""
    infos = iter(summarize_many([e[1] for e in window if isinstance(e, tuple)]))
    for entry in window:
        yield entry, (next(infos) if isinstance(entry, tuple) else None)


def data_lines(data, show_values: bool = False, num_items: Optional[int] = None,
               line_width: Optional[int] = None) -> Iterator[List[str]]:
    """The text of a loaded data file, one window of lines at a time: each window's tensors are
    read, summarized and printed before the next window is read."""
    fmt = (show_values, num_items, line_width)
    for window, failed in _windows(_entries(data), lambda e: (e[0], e[1][e[0]], e[2])):
        out: List[str] = []
        for entry, info in _summaries(window):
            out += entry if info is None else _tensor_lines(entry[0], entry[1], entry[2], info, *fmt)
        if out:
            yield out
        if failed is not None:
            raise failed


def describe_data(data, show_values: bool = False, num_items: Optional[int] = None,
                  line_width: Optional[int] = None) -> Dict[str, Any]:
    """The description of a loaded data file (``--json``): runners and iterations of tensors."""
    slots: List[Tuple[Mapping, list]] = []  # (feed, its tensors' descriptions to fill)

    def tensors(feed: Mapping) -> list:
        slots.append((feed, []))
        return slots[-1][1]

    desc = _outline(data, tensors)
    items = ((name, feed, out) for feed, out in slots for name in feed)
    for window, failed in _windows(items, lambda e: (e[0], e[1][e[0]], e[2])):
        for (name, arr, out), info in _summaries(window):
            out.append(tensor_dict(name, arr, info or {}, show_values, num_items, line_width))
        if failed is not None:
            raise failed
    return desc


def _outline(data, tensors: Callable[[Mapping], list]) -> Dict[str, Any]:
    """The description's runners and iterations (outputs) or iterations (inputs), each iteration's
    tensors the list ``tensors(feed)`` gives (filled after)."""
    if not isinstance(data, RunResults):
        return {"kind": "inputs", "iterations": [{"tensors": tensors(feed)} for feed in data]}
    runners = [
        {"runner": runner, "iterations": [{"runtime": it.runtime, "tensors": tensors(it.outputs)} for it in iters]}
        for runner, iters in data.runs
    ]
    return {"kind": "outputs", "runners": runners}

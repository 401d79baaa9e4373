"""``run``'s Q/DQ table (:mod:`toolkit.quant.table`): when ``run`` compares a QDQ model's tensors
with its float model's (``--onnx-outputs mark all`` against a ``--load-outputs`` file of the float
model's tensors), each pair gets a row from one code path with ``debug precision --qdq-table``.

The quantized model's tensors of a row are never the run's own: ``run`` may run at any
optimization level (ONNX-Runtime's default level rounds a fused op's output differently, and a
value moved by 1e-6 can land on the other side of a rounding step, so the rows drift apart down the
graph), or on another runtime. They come from one more run of the model on the same input set,
by ONNX-Runtime with graph optimizations off and the pairs' tensors marked (:func:`marked_runner`),
which is what ``debug precision`` runs; the float model's tensors are the compared side's. Two
loaded files compared with each other (no input set at hand): the quantized side's own tensors.

Gathered only for iterations the diagnosis gathers (:func:`toolkit.run.diagnose.wanted`), one
iteration at a time; the model is read on the first such iteration (its external data, from the
model's folder, only when it has some: scales may live there).
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

from toolkit.core.errors import ToolkitError, reraise_bug


@contextlib.contextmanager
def marked_runner(model, names: Sequence[str], path: str, external_data_dir: Optional[str]) -> Iterator[Any]:
    """An active ONNX-Runtime runner of ``model`` with ``names`` as its outputs, graph optimizations
    off (as onnxruntime's ``qdq_loss_debug`` runs)."""
    import onnx

    from toolkit.backends.onnxrt import OnnxrtRunner
    from toolkit.core.graph.layerwise import set_outputs

    marked = onnx.ModelProto()
    marked.CopyFrom(model)
    set_outputs(marked, list(names))
    with OnnxrtRunner(path, model=marked, external_data_dir=external_data_dir, graph_optimization="disable") as runner:
        yield runner


def marked_outputs(model, names: Sequence[str], feeds, path: str, external_data_dir: Optional[str]):
    """``model`` run on each of ``feeds`` in turn with ``names`` as its outputs (:func:`marked_runner`):
    yields each input set's outputs."""
    with marked_runner(model, names, path, external_data_dir) as runner:
        for feed in feeds:
            yield runner.infer(dict(feed))


@dataclass
class QdqTables:
    """The tables of one run: per comparison, its rows (:class:`toolkit.quant.table.Rows`)."""

    model_path: str = ""
    external_data_dir: Optional[str] = None
    pairs: Optional[List[Any]] = None  # the model's Q/DQ pairs; [] when it has none (or is no ONNX file)
    model: Any = None  # the quantized model, as loaded for its pairs
    names: List[str] = field(default_factory=list)  # the quantized model's tensors
    rows: Dict[int, Any] = field(default_factory=dict)
    _runs: Optional[Iterator[Any]] = None  # the marked runner, entered
    _stack: Optional[contextlib.ExitStack] = None
    _last: Optional[Tuple[int, Mapping]] = None  # (iteration, its pairs' tensors): one run per iteration
    left_out: Optional[str] = None  # why there is no table: the marked run failed (the run itself goes on)

    def runner(self):
        if self._stack is None:
            from toolkit.quant.table import marked_names

            self._stack = contextlib.ExitStack()
            self._runs = self._stack.enter_context(
                marked_runner(self.model, marked_names(self.pairs or [], self.model), self.model_path, self.external_data_dir))
        return self._runs

    def tensors(self, k: int, feed: Mapping) -> Mapping:
        """The pairs' tensors on iteration ``k``'s input set ``feed`` (run once per iteration)."""
        if self._last is None or self._last[0] != k:
            self._last = None  # (the previous iteration's tensors go before the next run)
            self._last = (k, self.runner().infer(dict(feed)))
        return self._last[1]

    def close(self) -> None:
        self._last = None
        if self._stack is not None:
            self._stack.close()
            self._stack = None


def _load(tables: QdqTables) -> None:
    tables.pairs = []
    path = tables.model_path
    if not path or path == "-" or not os.path.isfile(path):
        return
    from onnx.checker import ValidationError

    from toolkit.core.graph.graphs import node_outputs
    from toolkit.core.io.model import has_external_data, load_model
    from toolkit.quant.qdq import find_pairs

    try:
        light = load_model(path, load_external_data=False)  # (what the marked run reads: weights by reference)
        model = light
        if has_external_data(light):  # scales may live there: read from the model's folder, never the current one
            model = load_model(path, external_data_dir=tables.external_data_dir)
        tables.pairs = find_pairs(model)
    except (ToolkitError, ValueError, KeyError, TypeError, ValidationError) as exc:  # an engine, values onnx cannot read
        reraise_bug(exc)
        return
    tables.model = light
    graph = light.graph
    tables.names = sorted(set(node_outputs(graph)) | {i.name for i in graph.input} | {t.name for t in graph.initializer})


def collect(tables: QdqTables, index: int, k: int, outs_a: Mapping, outs_b: Mapping, feed: Optional[Mapping]) -> None:
    """Add iteration ``k`` of comparison ``index`` (its input set ``feed``; None for two loaded files):
    the side holding the DQ outputs is the QDQ model's run, the other the float model's tensors."""
    if tables.pairs is None:
        _load(tables)
    if not tables.pairs:
        return
    from toolkit.quant.table import Rows

    if not _compares_pair_tensors(tables, outs_a, outs_b):  # (graph outputs only: no table, no run for it)
        return
    first = tables.pairs[0].outputs[0]
    qdq_side, ref_side = (outs_a, outs_b) if first in outs_a or first not in outs_b else (outs_b, outs_a)
    try:
        got = tables.tensors(k, feed) if feed is not None else qdq_side
    except ToolkitError as exc:  # (a model ONNX-Runtime's CPU provider cannot run marked: the run goes on, without the table)
        tables.left_out, tables.pairs = f"no Q/DQ table: the model's marked run failed ({exc})", []
        tables.rows.clear()
        tables.close()
        return
    if index not in tables.rows:
        tables.rows[index] = Rows(tables.pairs, quantized_names=tables.names)
    tables.rows[index].add(feed or {}, got, ref_side)


def _compares_pair_tensors(tables: QdqTables, outs_a: Mapping, outs_b: Mapping) -> bool:
    """Whether the comparison holds a pair's tensor (before its Q, or after its DQ) that is not a
    graph output: the tensors were marked, as the table needs."""
    outputs = {o.name for o in tables.model.graph.output} if tables.model is not None else set()
    names = {n for p in tables.pairs or [] for n in (p.tensor, p.float_name, p.outputs[0]) if n and n not in outputs}
    return any(n in outs_a or n in outs_b for n in names)


def finish(tables: QdqTables, count: int) -> List[List[Any]]:
    """Per comparison, its pairs' statistics ranked by the error they add ([] where none)."""
    from toolkit.quant.stats import ranked

    tables.close()
    return [ranked(list(tables.rows[i].finish().values())) if i in tables.rows else [] for i in range(count)]

"""The Q/DQ table: each pair's own error against the error it receives, one code path for ``run``
and ``debug precision --qdq-table`` (:class:`Rows`).

A row comes from three tensors per input set: the quantized model's tensor before the pair's Q
and after its DQ (the quantized model run by ONNX-Runtime with graph optimizations off and the
pairs' tensors marked, as onnxruntime's ``qdq_loss_debug`` runs it: :func:`marked_names` names
them; the run itself lives in :mod:`toolkit.run.qdq_table`), and the float model's tensor. A pair
that carries a ``Relu`` or ``Clip`` the quantizer folded into its Q is measured against its input
clamped as the float model clamps it (:meth:`toolkit.quant.qdq.Pair.clamp`): ``debug precision``
knows the bounds from the float model's graph; ``run``, which has only the float model's tensors,
reads them there (:class:`FoldReader`: the float ``Clip``'s input is a tensor the quantized model
no longer has, which the ``Clip``'s output equals element for element except where it holds a bound).
Rows are ranked by where error is *added* (:func:`toolkit.quant.stats.ranked`); a pair that only
rounds (half a step, nothing clipped, enough levels) is marked as rounding, not as a fault.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Set, Tuple

import numpy as np

from toolkit.quant.qdq import Pair, fake_quantize, match_name
from toolkit.quant.stats import PairAccumulator, PairStats


def marked_names(pairs: Sequence[Pair], model, emulate: bool = False) -> List[str]:
    """The tensors a run of ``model`` marks for ``pairs``: before each Q (not a graph input, which
    the feed holds), and after each DQ unless the quantization is emulated."""
    inputs = {i.name for i in model.graph.input}
    before = {p.tensor for p in pairs if p.tensor not in inputs}
    return sorted(before | (set() if emulate else {p.outputs[0] for p in pairs}))


class Rows:
    """One table's accumulators, one input set at a time (no tensor kept). With ``emulate``, the
    tensors come from a model with the pairs in float and each pair's quantization is applied in
    numpy. With ``quantized_names`` (the quantized model's tensors), a folded ``Relu``/``Clip``
    the pairs do not know is read from the float tensors (:class:`FoldReader`; the pairs are
    copied, so what is read stays this table's)."""

    def __init__(self, pairs: Sequence[Pair], *, emulate: bool = False, quantized_names: Optional[Iterable[str]] = None):
        self.emulate = emulate
        self.folds = FoldReader(quantized_names) if quantized_names is not None else None
        if self.folds is not None:
            pairs = [dataclasses.replace(p) for p in pairs]
        self.sums = {p.name: PairAccumulator(p) for p in pairs}

    def add(self, feed: Mapping, got: Mapping, ref: Mapping) -> None:
        """One input set: its ``feed``, the quantized model's tensors ``got`` and the float model's ``ref``."""
        for acc in self.sums.values():
            self._add(acc, feed, got, ref)

    def _add(self, acc: PairAccumulator, feed: Mapping, got: Mapping, ref: Mapping) -> None:
        p = acc.pair
        before = got.get(p.tensor, feed.get(p.tensor))
        if before is None:
            return
        after = fake_quantize(p, before) if self.emulate else got.get(p.outputs[0])
        if after is None:
            return
        name = p.float_name or match_name(p.tensor, ref) or match_name(p.tensor, feed)  # (a graph input: the feed)
        reference = ref.get(name, feed.get(name)) if name else None
        if self.folds is not None and reference is not None and not p.exact:
            self.folds.see(p, np.asarray(reference), ref)
        acc.add(before, after, reference)

    def finish(self) -> Dict[str, PairStats]:
        """Each pair that had values: its statistics, by pair name."""
        return {name: acc.finish() for name, acc in self.sums.items() if acc.n}


class FoldReader:
    """The bounds of a ``Relu``/``Clip`` the quantizer folded into a pair's Q, read from the float
    model's tensors: the quantizer removed the node and renamed its input away, so the float
    ``Clip``'s input is a float tensor the quantized model has no tensor of (``quantized_names``),
    and the pair's float tensor equals it clamped (:func:`clip_bounds`). A bound is known once
    the float values reach it; until then a range starting at 0 keeps 0 (:meth:`Pair.clamp`)."""

    def __init__(self, quantized_names: Iterable[str]):
        self.quantized: Set[str] = set(quantized_names)
        self.inputs: Dict[str, str] = {}  # pair name -> the float tensor its folded activation reads
        self.seen: Dict[str, List[Optional[float]]] = {}  # pair name -> [lo, hi] reached (None: not yet)
        self._vanished: Optional[List[str]] = None
        self._shapes: Optional[Tuple[Mapping, Dict[tuple, List[str]], Dict[str, np.ndarray]]] = None

    def see(self, pair: Pair, r: np.ndarray, ref: Mapping) -> None:
        """Read ``pair``'s folded bounds from this input set's float tensors (``r``: the pair's)."""
        name = self.inputs.get(pair.name) or self._find(r, ref)
        if name is None:
            return
        self.inputs[pair.name] = name
        bounds = clip_bounds(r, np.asarray(ref[name]))
        if bounds is None:
            return
        seen = self.seen.setdefault(pair.name, [None, None])
        seen[0] = bounds[0] if bounds[0] is not None else seen[0]
        seen[1] = bounds[1] if bounds[1] is not None else seen[1]
        if seen[0] is None and seen[1] is None:
            return
        low = seen[0] if seen[0] is not None else (0.0 if pair.starts_at_zero else -math.inf)
        pair.folded = (low, seen[1] if seen[1] is not None else math.inf)

    def _find(self, r: np.ndarray, ref: Mapping) -> Optional[str]:
        """The float tensor (one the quantized model lacks) that ``r`` clamps, when this input set shows it."""
        names, arrays = self._candidates(ref)
        for name in names.get(tuple(r.shape), []):
            if name not in arrays:
                arrays[name] = np.asarray(ref[name])
            if clip_bounds(r, arrays[name]) is not None:
                return name
        return None

    def _candidates(self, ref: Mapping) -> Tuple[Dict[tuple, List[str]], Dict[str, np.ndarray]]:
        """This input set's float tensors that the quantized model lacks, by shape (a ``.npz`` member's
        from its header: only those of a pair's shape are read, once per input set)."""
        if self._vanished is None:
            self._vanished = [n for n in ref if n not in self.quantized]
        if self._shapes is None or self._shapes[0] is not ref:
            header = getattr(ref, "header", None)
            by_shape: Dict[tuple, List[str]] = {}
            for name in self._vanished:
                shape = header(name)[0] if header is not None else np.shape(ref[name])
                by_shape.setdefault(tuple(shape), []).append(name)
            self._shapes = (ref, by_shape, {})
        return self._shapes[1], self._shapes[2]


def clip_bounds(r: np.ndarray, c: np.ndarray) -> Optional[Tuple[Optional[float], Optional[float]]]:
    """(lo, hi) when ``r`` is ``c`` clamped: equal element for element, except where ``c`` lies
    beyond a bound and ``r`` holds that bound (one value above, one below). A bound no element
    reaches is None. None: no element clamped, or ``r`` is no clamp of ``c``."""
    if r.shape != c.shape or r.dtype.kind != "f" or c.dtype.kind != "f" or not r.size:
        return None
    moved = r != c
    if not moved.any() or np.isnan(r[moved]).any() or np.isnan(c[moved]).any():
        return None
    up, down = moved & (c > r), moved & (c < r)
    if not (_constant(r[up]) and _constant(r[down])):
        return None
    hi = float(r[up][0]) if up.any() else None
    lo = float(r[down][0]) if down.any() else None
    if (hi is not None and float(np.nanmax(r)) > hi) or (lo is not None and float(np.nanmin(r)) < lo):
        return None
    return lo, hi


def _constant(a: np.ndarray) -> bool:
    """``a`` holds one value (or none)."""
    return not a.size or bool(np.all(a == a[0]))


def row_dict(rank: int, st) -> Dict[str, Any]:
    """One pair of the table, for ``--save-report`` JSON."""
    return {
        "rank": rank, "pair": st.pair.name, "tensor": st.pair.tensor, "shown": st.pair.shown,
        "verdict": "rounding" if st.rounding_only else "adds error",
        "local_sqnr_db": round(st.local_sqnr, 4), "local_max": st.local_max, "local_steps": st.local_steps,
        "upstream_sqnr_db": _rounded(st.upstream_sqnr), "after_vs_float_sqnr_db": _rounded(st.xmodel_sqnr),
        "clipped": st.clipped, "saturated": st.saturated, "levels": round(st.levels, 2),
        "scale": [float(v) for v in st.pair.scale.ravel()], "zero_point": [int(v) for v in st.pair.zero_point.ravel()],
        "why": st.reasons,
    }


def _rounded(db: Optional[float]) -> Optional[float]:
    return None if db is None else round(db, 4)


def add_to_report(path: str, tables: List[List[Any]]) -> None:
    """Add the tables to a ``--save-report`` JSON file (key ``qdq_pairs``: one entry per comparison
    that has a table); an HTML report is left as it is (and the caller leaves a node data file)."""
    if not any(tables) or not path.lower().endswith(".json"):
        return
    from toolkit.core.io.model import atomic_output

    with open(path, encoding="utf-8") as fh:
        report = json.load(fh)
    report["qdq_pairs"] = [{"comparison": i, "pairs": [row_dict(k, st) for k, st in enumerate(rows, 1)]}
                           for i, rows in enumerate(tables) if rows]
    with atomic_output(path, "w") as fh:
        fh.write(json.dumps(report, indent=1) + "\n")

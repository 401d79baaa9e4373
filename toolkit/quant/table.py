"""Local versus propagated error of a quantized model's Q/DQ pairs, in ``run``'s diagnosis.

When ``run`` compares a QDQ model's tensors (``--onnx-outputs mark all``) with its float model's
(a second result set: ``--load-outputs`` of the float model's run, tensors matched by name and
through the quantizer's naming, :func:`toolkit.quant.qdq.match_name`), each pair gets a row:
the error its own quantization adds (tensor before Q against after DQ), the error arriving from
upstream (before Q against the float tensor), the share clipped at the integer range, and the
integer levels the tensor's range spans. Rows are ranked by where error is *added*
(:func:`toolkit.quant.stats.ranked`); a pair that only rounds (half a step, nothing
clipped, enough levels) is marked as rounding, not as a fault.

Gathered only for iterations the diagnosis gathers (:func:`toolkit.run.diagnose.wanted`), one
iteration at a time; the model is read on the first such iteration (its external data, from the
model's folder, only when it has some: scales may live there).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional

from toolkit.core.errors import ToolkitError, reraise_bug


@dataclass
class QdqTables:
    """Accumulators per comparison (pair index -> pair name -> accumulator)."""

    pairs: Optional[List[Any]] = None  # the model's Q/DQ pairs; [] when it has none (or is no ONNX file)
    sums: Dict[int, Dict[str, Any]] = field(default_factory=dict)


def _pairs(model_path: str) -> List[Any]:
    if not model_path or model_path == "-" or not os.path.isfile(model_path):
        return []
    from onnx.checker import ValidationError

    from toolkit.core.io.model import has_external_data, load_model
    from toolkit.quant.qdq import find_pairs

    try:
        model = load_model(model_path, load_external_data=False)
        if has_external_data(model):  # scales may live there: read from the model's folder, never the current one
            model = load_model(model_path)
        return find_pairs(model)
    except (ToolkitError, ValueError, KeyError, TypeError, ValidationError) as exc:  # an engine, values onnx cannot read
        reraise_bug(exc)
        return []


def collect(tables: QdqTables, model_path: str, index: int, outs_a: Mapping, outs_b: Mapping) -> None:
    """Add one iteration of comparison ``index``: the side holding the DQ outputs is the QDQ model."""
    if tables.pairs is None:
        tables.pairs = _pairs(model_path)
    if not tables.pairs:
        return
    first = tables.pairs[0].outputs[0]
    qdq_side, ref_side = (outs_a, outs_b) if first in outs_a or first not in outs_b else (outs_b, outs_a)
    sums = tables.sums.setdefault(index, {})
    for pair in tables.pairs:
        _add(sums, pair, qdq_side, ref_side)


def _add(sums: Dict[str, Any], pair, qdq_side: Mapping, ref_side: Mapping) -> None:
    """One iteration of ``pair``, when the QDQ side holds its tensors before Q and after DQ (and
    the float side the tensor, matched by name)."""
    from toolkit.quant.qdq import match_name
    from toolkit.quant.stats import PairAccumulator

    before, after = qdq_side.get(pair.tensor), qdq_side.get(pair.outputs[0])
    if before is None or after is None:
        return
    name = match_name(pair.tensor, ref_side)
    ref = ref_side.get(name) if name is not None else None
    if pair.name not in sums:
        sums[pair.name] = PairAccumulator(pair, infer=True)  # (a folded Clip read from the float tensor)
    sums[pair.name].add(before, after, ref)


def finish(tables: QdqTables, count: int) -> List[List[Any]]:
    """Per comparison, its pairs' statistics ranked by the error they add ([] where none)."""
    from toolkit.quant.stats import ranked

    return [ranked([acc.finish() for acc in tables.sums.get(i, {}).values()]) for i in range(count)]


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

"""Local versus propagated error of a quantized model's Q/DQ pairs, in ``run``'s diagnosis.

When ``run`` compares a QDQ model's tensors (``--onnx-outputs mark all``) with its float model's
(a second result set: ``--load-outputs`` of the float model's run, tensors matched by name and
through the quantizer's naming, :func:`toolkit.precision.qdq.match_name`), each pair gets a row:
the error its own quantization adds (tensor before Q against after DQ), the error arriving from
upstream (before Q against the float tensor), the share clipped at the integer range, and the
integer levels the tensor's range spans. Rows are ranked by where error is *added*
(:func:`toolkit.precision.qdq_stats.ranked`); a pair that only rounds (half a step, nothing
clipped, enough levels) is marked as rounding, not as a fault.

Gathered only for iterations the diagnosis gathers (:func:`toolkit.run.diagnose.wanted`), one
iteration at a time; the model is read (without external data) on the first such iteration.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional

from toolkit.core.errors import ToolkitError


@dataclass
class QdqTables:
    """Accumulators per comparison (pair index -> pair name -> accumulator)."""

    pairs: Optional[List[Any]] = None  # the model's Q/DQ pairs; [] when it has none (or is no ONNX file)
    sums: Dict[int, Dict[str, Any]] = field(default_factory=dict)


def _pairs(model_path: str) -> List[Any]:
    import os

    if not model_path or model_path == "-" or not os.path.isfile(model_path):
        return []
    from toolkit.core.model import load_model
    from toolkit.precision.qdq import find_pairs

    try:
        return find_pairs(load_model(model_path, load_external_data=False))
    except (ToolkitError, KeyError, ValueError):  # an engine, or a model whose scales live in external data
        return []


def collect(tables: QdqTables, model_path: str, index: int, outs_a: Mapping, outs_b: Mapping) -> None:
    """Add one iteration of comparison ``index``: the side holding the DQ outputs is the QDQ model."""
    if tables.pairs is None:
        tables.pairs = _pairs(model_path)
    if not tables.pairs:
        return
    from toolkit.precision.qdq import match_name
    from toolkit.precision.qdq_stats import PairAccumulator

    first = tables.pairs[0].outputs[0]
    qdq_side, ref_side = (outs_a, outs_b) if first in outs_a or first not in outs_b else (outs_b, outs_a)
    sums = tables.sums.setdefault(index, {})
    for pair in tables.pairs:
        before, after = qdq_side.get(pair.tensor), qdq_side.get(pair.outputs[0])
        if before is None or after is None:
            continue
        name = match_name(pair.tensor, ref_side)
        ref = ref_side.get(name) if name is not None else None
        if pair.name not in sums:
            sums[pair.name] = PairAccumulator(pair)
        sums[pair.name].add(before, after, ref)


def finish(tables: QdqTables, count: int) -> List[List[Any]]:
    """Per comparison, its pairs' statistics ranked by the error they add ([] where none)."""
    from toolkit.precision.qdq_stats import ranked

    return [ranked([acc.finish() for acc in tables.sums.get(i, {}).values()]) for i in range(count)]

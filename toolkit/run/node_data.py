"""Per-node error data for Google's Model Explorer (``--save-report NAME.model-explorer.json``).

Model Explorer overlays "node data" on a graph: a JSON file mapping node keys to values,
coloured by a gradient. The file written here is one graph's node data (Model Explorer's
``GraphNodeData``)::

    {"results": {"<tensor name>": {"value": <relative L2 error>}, ...},
     "gradient": [{"stop": 0, "bgColor": "#e8f5e9"}, {"stop": 0.5, "bgColor": "#ffcc80"},
                  {"stop": 1, "bgColor": "#e53935"}]}

Keys are output tensor names, which Model Explorer matches to the node that produces them
(every compared tensor of the first comparison; a node with several outputs appears under
each). Values are the relative L2 error ``||a - b|| / max(||a||, ||b||)`` of that tensor
(worst over iterations; 0 = equal, 2 at most), so the heat map shows where the error grows.
"""

from __future__ import annotations

import math
from typing import Dict, Sequence

from toolkit.run.diagnosis import Diagnosis

SUFFIX = ".model-explorer.json"

GRADIENT = [
    {"stop": 0, "bgColor": "#e8f5e9"},
    {"stop": 0.5, "bgColor": "#ffcc80"},
    {"stop": 1, "bgColor": "#e53935"},
]


def is_node_data_path(path: str) -> bool:
    return path.lower().endswith(SUFFIX)


def _value(x: float) -> float:
    """JSON has no inf/nan: a non-finite error is shown as the largest possible one (2)."""
    return float(x) if math.isfinite(x) else 2.0


def node_data(diagnoses: Sequence[Diagnosis]) -> Dict:
    """Model Explorer ``GraphNodeData`` of the first comparison: every compared tensor's error."""
    results: Dict[str, Dict[str, float]] = {}
    if diagnoses:
        for t in diagnoses[0].tensors:
            results[t.name] = {"value": _value(t.rel_l2)}
    return {"results": results, "gradient": list(GRADIENT)}

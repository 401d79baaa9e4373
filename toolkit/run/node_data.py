"""Per-node error data for Google's Model Explorer (``--save-report NAME.model-explorer.json``).

Model Explorer overlays "node data" on a graph: a JSON file mapping node ids to values,
coloured by a gradient. The file written here is one graph's node data (Model Explorer's
``GraphNodeData``)::

    {"results": {"<node id>": {"value": <relative L2 error>}, ...},
     "gradient": [{"stop": 0, "bgColor": "#e8f5e9"}, {"stop": 0.5, "bgColor": "#ffcc80"},
                  {"stop": 1, "bgColor": "#e53935"}]}

Keys are the node ids Model Explorer's ONNX adapter (``model-explorer-onnx``) gives the
model's nodes: the ONNX node name; an unnamed node gets ``node``, ``node_1``, ... and a
repeated name ``NAME_1``, ... in file order, subgraph bodies counted after their node (the
adapter's name fixing pass). A graph output's node is ``[value] NAME``. A node's value is
the largest relative L2 error ``||a - b|| / max(||a||, ||b||)`` of its compared outputs
(worst over iterations; 0 = equal, 2 at most), so the heat map shows where the error grows.
Without an ONNX model to read (an engine, stdin), the keys are the tensor names.
"""

from __future__ import annotations

import collections
import math
import os
from typing import Dict, Optional, Sequence, Set, Tuple

from toolkit.core.errors import ToolkitError
from toolkit.core.io.model import load_model
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


def _unique(preferred: str, used: Set[str], counter: collections.Counter) -> str:
    name = preferred
    while name in used:
        counter[preferred] += 1
        name = f"{preferred}_{counter[preferred]}"
    used.add(name)
    return name


def explorer_ids(graph) -> Dict[str, str]:
    """Tensor name -> the id of the node Model Explorer shows for it: the producing node's id
    (as the ONNX adapter names nodes) for every node output of the top graph, and
    ``[value] NAME`` for a graph output that no node produces."""
    ids: Dict[str, str] = {}
    counter: collections.Counter = collections.Counter()

    def walk(g, top: bool) -> None:
        used: Set[str] = set()  # node names are unique per graph; the counter is shared
        for node in g.node:
            node_id = _unique(node.name or "node", used, counter)
            if top:
                ids.update((o, node_id) for o in node.output if o)
            for attr in node.attribute:
                for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                    walk(sub, False)

    walk(graph, True)
    for out in graph.output:
        ids.setdefault(out.name, f"[value] {out.name}")
    return ids


def _graph_of(model: str):
    """The top graph of the ONNX model at ``model`` (weights not read), or None."""
    if not model or model == "-" or not os.path.isfile(model):
        return None
    try:
        return load_model(model, load_external_data=False).graph
    except ToolkitError:  # a TensorRT engine or anything not ONNX
        return None


def _keys(name: str, ids: Optional[Dict[str, str]], outputs: Set[str]):
    if ids is None:
        return [name]
    keys = [ids[name]] if name in ids else []
    return keys + ([f"[value] {name}"] if name in outputs and ids.get(name) != f"[value] {name}" else [])


def node_data(diagnoses: Sequence[Diagnosis], model: str = "") -> Dict:
    """Model Explorer ``GraphNodeData`` of the first comparison, keyed by the adapter's node ids."""
    best: Dict[str, float] = {}
    ids, outputs = _node_ids(_graph_of(model) if diagnoses else None)
    for t in diagnoses[0].tensors if diagnoses else []:
        value = _value(t.rel_l2)
        for key in _keys(t.name, ids, outputs):
            best[key] = max(value, best.get(key, value))
    return {"results": {key: {"value": v} for key, v in best.items()}, "gradient": list(GRADIENT)}


def _node_ids(graph) -> Tuple[Optional[Dict[str, str]], Set[str]]:
    """The node id of every tensor of ``graph`` (see :func:`explorer_ids`) and its output names;
    (None, no names) without a graph."""
    if graph is None:
        return None, set()
    return explorer_ids(graph), {o.name for o in graph.output}

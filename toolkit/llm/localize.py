"""Inside the first diverging step: the first tensor where the two sides part, its node and module.

Both models run once more on that step's feeds with every tensor marked (the layerwise machinery
of ``--compare``; verdicts were taken on the deployed graphs, this pass only localizes). Tensors are
matched by name; a tensor of the test model that the reference model lacks (models of different
structure) is matched by its place in the graph: the same output of the k-th node of the same op
type. The module comes from the exporter's metadata (``pkg.torch.onnx.name_scopes``, torch.onnx's
dynamo exporter) or, failing that, from a node-name path (``/model/layers.2/self_attn/Softmax``).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Tuple

import numpy as np

from toolkit.core.compare import Tolerances, compare_arrays
from toolkit.run.options import RunOptions
from toolkit.run.registry import mark_all_outputs
from toolkit.run.specs import make_runner

NAME_SCOPES = "pkg.torch.onnx.name_scopes"
_LAYER = re.compile(r"(?:^|[./])(?:layers|layer|h|blocks|block|decoder_layers)[._](\d+)(?=[./]|$)")


@dataclass
class Located:
    """The first diverging tensor of a step and where it comes from."""

    tensor: str
    node: Optional[str]
    op_type: Optional[str]
    module: Optional[str]
    layer: Optional[int]
    max_abs_diff: float
    matched_by: str  # "name" or "position"
    compared: int  # tensors compared


def _scope_path(value: str) -> Optional[str]:
    """The innermost module of a name-scopes entry (``['', 'model', 'model.layers.0', ...]`` or a
    path); scopes that are not cumulative are joined."""
    text = value.strip()
    parts: List[str]
    if text.startswith("["):
        try:
            parsed = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            parsed = None
        parts = [str(p) for p in parsed if str(p)] if isinstance(parsed, (list, tuple)) else []
    else:
        parts = [p for p in re.split(r"[/,]", text) if p]
    if not parts:
        return None
    if not any(later.startswith(parts[0] + ".") for later in parts[1:]):
        return ".".join(parts)  # scopes of one name each: the path is their join
    path = parts[0]
    for part in parts[1:]:  # cumulative paths; what does not extend the last one is the op's own name
        if not part.startswith(path + "."):
            break
        path = part
    return path


def module_of(node) -> Optional[str]:
    """The module a node belongs to: exporter metadata, else its name's path (None when neither says)."""
    for prop in getattr(node, "metadata_props", ()):
        if prop.key == NAME_SCOPES and prop.value:
            found = _scope_path(prop.value)
            if found:
                return found
    name = node.name or ""
    if name.startswith("/") and name.count("/") >= 2:
        parts = [p for p in name.split("/") if p][:-1]
        return ".".join(parts) or None
    return None


def layer_of(module: Optional[str], node_name: str = "") -> Optional[int]:
    """The layer index a module path or node name names (``model.layers.2.self_attn`` -> 2)."""
    for text in (module or "", node_name or ""):
        m = _LAYER.search(text)
        if m:
            return int(m.group(1))
    return None


def _producers(model) -> Dict[str, Tuple[object, Tuple[str, int, int]]]:
    """{tensor: (node, (op_type, k-th node of that op type, output index))} for the top graph."""
    seen: Dict[str, int] = {}
    out: Dict[str, Tuple[object, Tuple[str, int, int]]] = {}
    for node in model.graph.node:
        k = seen.get(node.op_type, 0)
        seen[node.op_type] = k + 1
        for j, name in enumerate(node.output):
            if name:
                out[name] = (node, (node.op_type, k, j))
    return out


def every_tensor_once(spec: str, model: str, feed: Mapping, external_data_dir: Optional[str]) -> Dict[str, object]:
    """One inference of ``model`` on runner ``spec`` with every tensor marked as an output."""
    base = mark_all_outputs(RunOptions(model, external_data_dir=external_data_dir))
    runner = make_runner(spec, model, base=base)
    with runner:
        return dict(runner.infer(dict(feed)))


def first_diverging(test_model, ref_model, test_values: Mapping, ref_values: Mapping,
                    tol: Tolerances) -> Optional[Located]:
    """The first tensor, in the test model's node order, whose values differ beyond ``tol``."""
    producers = {n: p for n, p in _producers(test_model).items() if n in test_values}
    ref_by_place = {key: name for name, (_n, key) in _producers(ref_model).items()}
    # by position only where the names do not match (models of different structure): where most
    # names match, a tensor only one side has is a change of structure, not a counterpart
    by_position = sum(n in ref_values for n in producers) < len(producers) / 2
    compared = 0
    for name, (node, key) in producers.items():
        ref_name, how = (name, "name") if name in ref_values else (ref_by_place.get(key), "position")
        if ref_name is None or ref_name not in ref_values or (how == "position" and not by_position):
            continue
        a, b = np.asarray(test_values[name]), np.asarray(ref_values[ref_name])
        if a.dtype.kind not in "biufc" or b.dtype.kind not in "biufc" or (how == "position" and a.shape != b.shape):
            continue
        atol, rtol, stat = tol.for_output(name, a.dtype.kind in "biu" and b.dtype.kind in "biu")
        cmp = compare_arrays(name, a, b, atol, rtol, stat, tol.quantile_for(name))
        compared += 1
        if not cmp.passed:
            module = module_of(node)
            return Located(name, node.name or None, node.op_type, module,  # type: ignore[attr-defined]
                           layer_of(module, node.name), cmp.max_abs, how, compared)  # type: ignore[attr-defined]
    return None

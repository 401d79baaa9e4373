"""Inside the first diverging step: the first tensor where the two sides part, its node and module.

Both models run once more on that step's feeds with every tensor marked (the layerwise machinery
of ``--compare``; verdicts were taken on the deployed graphs, this pass only localizes). Tensors are
matched by name; a tensor of the test model that the reference model lacks (models of different
structure) is matched by its place in the graph: the same output of the k-th node of the same op
type, once the nodes that read the same weights are paired. The module comes from the exporter's metadata (``pkg.torch.onnx.name_scopes``, torch.onnx's
dynamo exporter) or, failing that, from a node-name path (``/model/layers.2/self_attn/Softmax``).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Tuple

import numpy as np

from toolkit.core.compare.arrays import compare_arrays
from toolkit.core.compare.tolerances import Tolerances
from toolkit.llm.steps import nan_only_in
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
    matched_by: str  # "name", "weights", "position" or "module position"
    compared: int  # tensors compared


def _scope_path(value: str) -> Optional[str]:
    """The innermost module of a name-scopes entry (``['', 'model', 'model.layers.0', ...]`` or a
    path); scopes that are not cumulative are joined."""
    parts = _scope_parts(value.strip())
    if not parts:
        return None
    if not any(later.startswith(parts[0] + ".") for later in parts[1:]):
        return ".".join(parts)  # scopes of one name each: the path is their join
    return _cumulative_path(parts)


def _cumulative_path(parts: List[str]) -> str:
    """The last of cumulative paths (each extends the one before); what does not extend the last
    one is the op's own name."""
    path = parts[0]
    for part in parts[1:]:
        if not part.startswith(path + "."):
            break
        path = part
    return path


def _scope_parts(text: str) -> List[str]:
    """The non-empty entries of a name-scopes value: a Python list literal, or a path split at '/' or ','."""
    if not text.startswith("["):
        return [p for p in re.split(r"[/,]", text) if p]
    return _listed_parts(text)


def _listed_parts(text: str) -> List[str]:
    """The non-empty entries of a Python list (or tuple) literal ([] when ``text`` is none)."""
    try:
        parsed = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return []
    if not isinstance(parsed, (list, tuple)):
        return []
    return [str(p) for p in parsed if str(p)]


def module_of(node) -> Optional[str]:
    """The module a node belongs to: exporter metadata, else its name's path (None when neither says)."""
    return _scoped_module(node) or _path_module(node.name or "")


def _scoped_module(node) -> Optional[str]:
    """The module the exporter's name-scopes metadata names (None: none does)."""
    for prop in getattr(node, "metadata_props", ()):
        if prop.key == NAME_SCOPES and prop.value:
            found = _scope_path(prop.value)
            if found:
                return found
    return None


def _path_module(name: str) -> Optional[str]:
    """The module of a node name written as a path (``/model/layers.0/attn/MatMul`` -> ``model.layers.0.attn``)."""
    if name.startswith("/") and name.count("/") >= 2:
        return ".".join([p for p in name.split("/") if p][:-1]) or None
    return None


def layer_of(module: Optional[str], node_name: str = "") -> Optional[int]:
    """The layer index a module path or node name names (``model.layers.2.self_attn`` -> 2)."""
    for text in (module or "", node_name or ""):
        m = _LAYER.search(text)
        if m:
            return int(m.group(1))
    return None


def _places(nodes) -> Dict[str, Tuple[object, Tuple[int, int]]]:
    """{tensor: (node, (index of its node among ``nodes``, output index))}."""
    return {name: (node, (k, j)) for k, node in enumerate(nodes) for j, name in enumerate(node.output) if name}


def _by_module(nodes) -> Dict[Optional[str], list]:
    groups: Dict[Optional[str], list] = {}
    for node in nodes:
        groups.setdefault(module_of(node), []).append(node)
    return groups


_FLOATS = (1, 10, 11, 16)  # FLOAT, FLOAT16, DOUBLE, BFLOAT16


def _weights(model) -> Dict[str, bytes]:
    """{initializer name: its serialized tensor (name, dtype, dims and contents, or where external
    data lies)} for the weights: float tensors of two dimensions or more (small constants such as
    shapes and scalars are shared by unrelated nodes, and exporters name them generically)."""
    return {t.name: t.SerializeToString() for t in model.graph.initializer
            if t.data_type in _FLOATS and len(t.dims) >= 2}


def _anchors(test_nodes, ref_nodes, test_w: Mapping[str, bytes], ref_w: Mapping[str, bytes]) -> List[Tuple[object, object]]:
    """Nodes paired by the weights they read: same op type and the same initializers (same name,
    same contents) at the same inputs, a pairing that holds however the nodes are ordered or their
    other tensors named. A key that several nodes of one side share pairs nothing."""
    def keys(nodes):
        found: Dict[tuple, list] = {}
        for node in nodes:
            shared = tuple((k, x) for k, x in enumerate(node.input) if x in test_w and x in ref_w
                           and test_w[x] == ref_w[x])
            if shared:
                found.setdefault((node.op_type, len(node.input), shared), []).append(node)
        return found
    test_keys, ref_keys = keys(test_nodes), keys(ref_nodes)
    return [(nodes[0], ref_keys[key][0]) for key, nodes in test_keys.items()
            if len(nodes) == 1 and len(ref_keys.get(key, ())) == 1]


def _by_position(test_nodes, ref_nodes, how: str, test_values: Mapping, ref_values: Mapping,
                 pairs: Dict[str, Tuple[str, str]]) -> None:
    """The j-th output of the k-th node of one side with that of the other (the callers make sure
    the op types agree node by node)."""
    for test_node, ref_node in zip(test_nodes, ref_nodes):
        for name, ref_name in zip(test_node.output, ref_node.output):
            if name and name in test_values and ref_name in ref_values:
                pairs[name] = (ref_name, how)


def pairing(test_model, ref_model, test_values: Mapping, ref_values: Mapping) -> Dict[str, Tuple[str, str]]:
    """{test tensor: (reference tensor, how)} for the tensors both sides computed.

    By name where most names match (a tensor only one side has is then a change of structure, not
    a counterpart). Otherwise first the nodes that read the same weights (same initializer name
    and contents: ``weights``), then by place among the nodes left, and only where the structure is
    the same: all of them when both have the same sequence of op types; else module by module (from
    the exporter's metadata or node-name paths), for the modules whose sequences of op types are
    the same. Two exports of one model by different exporters decompose ops differently; pairing
    their tensors by op type and order alone pairs unrelated tensors."""
    by_name = _by_name(test_model, test_values, ref_values)
    return by_name if by_name is not None else _by_structure(test_model, ref_model, test_values, ref_values)


def _by_name(test_model, test_values: Mapping, ref_values: Mapping) -> Optional[Dict[str, Tuple[str, str]]]:
    """The tensors both sides computed, paired by name, when at least half of the test side's have
    a namesake (None otherwise)."""
    tested = [n for n in _places(test_model.graph.node) if n in test_values]
    if sum(n in ref_values for n in tested) < len(tested) / 2:
        return None
    return {n: (n, "name") for n in tested if n in ref_values}


def _by_structure(test_model, ref_model, test_values: Mapping, ref_values: Mapping) -> Dict[str, Tuple[str, str]]:
    """Paired by the weights nodes read, then by place among the other nodes where the op types
    agree (all of them, else module by module): see :func:`pairing`."""
    pairs: Dict[str, Tuple[str, str]] = {}
    anchors = _anchors(test_model.graph.node, ref_model.graph.node, _weights(test_model), _weights(ref_model))
    test_anchors, ref_anchors = [a for a, _ in anchors], [b for _, b in anchors]
    _by_position(test_anchors, ref_anchors, "weights", test_values, ref_values, pairs)
    test_rest, ref_rest = _others(test_model, test_anchors), _others(ref_model, ref_anchors)
    if _op_types(test_rest) == _op_types(ref_rest):
        _by_position(test_rest, ref_rest, "position", test_values, ref_values, pairs)
    else:
        _by_module_position(test_rest, ref_rest, test_values, ref_values, pairs)
    return pairs


def _by_module_position(test_nodes, ref_nodes, test_values: Mapping, ref_values: Mapping,
                        pairs: Dict[str, Tuple[str, str]]) -> None:
    """By place inside each module whose sequence of op types is the same on both sides."""
    ref_groups = _by_module(ref_nodes)
    for module, nodes in _by_module(test_nodes).items():
        other = ref_groups.get(module)
        if module is not None and other and _op_types(nodes) == _op_types(other):
            _by_position(nodes, other, "module position", test_values, ref_values, pairs)


def _others(model, taken) -> list:
    """The nodes of ``model``'s graph that are not in ``taken``."""
    ids = {id(n) for n in taken}
    return [n for n in model.graph.node if id(n) not in ids]


def _op_types(nodes) -> List[str]:
    return [n.op_type for n in nodes]


def every_tensor_once(spec: str, model: str, feed: Mapping, external_data_dir: Optional[str]) -> Dict[str, object]:
    """One inference of ``model`` on runner ``spec`` with every tensor marked as an output."""
    base = mark_all_outputs(RunOptions(model, external_data_dir=external_data_dir))
    runner = make_runner(spec, model, base=base)
    with runner:
        return dict(runner.infer(dict(feed)))


def first_diverging(test_model, ref_model, test_values: Mapping, ref_values: Mapping,
                    tol: Tolerances) -> Optional[Located]:
    """The first tensor, in the test model's node order, whose values differ beyond ``tol``
    from its counterpart (:func:`pairing`); None when none does or none pairs."""
    pairs = pairing(test_model, ref_model, test_values, ref_values)
    ref_nodes = _places(ref_model.graph.node)
    compared = 0
    for name, (node, _key) in _places(test_model.graph.node).items():
        if name not in pairs:
            continue
        ref_name, how = pairs[name]
        a, b = np.asarray(test_values[name]), np.asarray(ref_values[ref_name])
        if not _comparable(a, b, how):
            continue
        atol, rtol, stat = tol.for_output(name, a.dtype.kind in "biu" and b.dtype.kind in "biu")
        cmp = compare_arrays(name, a, b, atol, rtol, stat, tol.quantile_for(name))
        compared += 1
        if not cmp.passed:
            diff = float("nan") if nan_only_in(a, b) else cmp.max_abs  # (no difference measured at a NaN)
            return _located(name, node, _module(node, ref_nodes.get(ref_name)), diff, how, compared)
    return None


def _module(node, ref_place) -> Optional[str]:
    """The module named by the test node, else by its counterpart's (``ref_place``: (node, index), or None)."""
    return module_of(node) or (module_of(ref_place[0]) if ref_place is not None else None)


def _located(name: str, node, module: Optional[str], diff: float, how: str, compared: int) -> Located:
    node_name = getattr(node, "name", "")
    return Located(name, node_name or None, getattr(node, "op_type", None), module, layer_of(module, node_name),
                   diff, how, compared)


def _comparable(a, b, how: str) -> bool:
    """Numeric on both sides, and of one shape unless paired by name (then a shape change fails)."""
    if a.dtype.kind not in "biufc" or b.dtype.kind not in "biufc":
        return False
    return how == "name" or a.shape == b.shape

"""ONNX plumbing: walk graphs and their subgraphs, reach every tensor, find external data.

One place for what onnx keeps private (``onnx.external_data_helper._get_all_tensors``) and
for the graph walks every module needs. Works on protobufs (``onnx.ModelProto`` /
``GraphProto`` / ``NodeProto``); nothing here imports onnx at module level or reads weights.
"""

from __future__ import annotations

import heapq
import os
from typing import Any, Callable, Iterable, Iterator, List, Optional, Sequence, Set

STDIO = "-"  # the path that means stdin (a model) or stdout (a data file)
_EXTERNAL = 1  # onnx.TensorProto.EXTERNAL


def attribute_graphs(attr) -> list:
    """The graphs an attribute holds (an If branch, a Loop/Scan body; ``[]`` for other attributes)."""
    subs = [attr.g] if attr.HasField("g") else []
    subs.extend(attr.graphs)
    return subs


def node_subgraphs(node) -> list:
    """Every graph held by ``node``'s attributes, in attribute order."""
    subs: list = []
    for attr in node.attribute:
        subs.extend(attribute_graphs(attr))
    return subs


def walk_graphs(graph) -> Iterator:
    """``graph``, then every subgraph below it at any depth (depth first)."""
    yield graph
    for node in graph.node:
        for sub in node_subgraphs(node):
            yield from walk_graphs(sub)


def fed_inputs(graph) -> list:
    """The inputs of ``graph`` that are not also initializers (ValueInfoProtos, in order): what a
    run feeds. Before IR version 4 every initializer is listed as an input too: a default a run
    may override, but a weight all the same."""
    inits = {t.name for t in graph.initializer}
    return [vi for vi in graph.input if vi.name not in inits]


def node_outputs(graph) -> List[str]:
    """The tensors the nodes of ``graph`` (its top level) compute, in node order (an omitted
    optional output, ``''``, is no tensor)."""
    return [o for n in graph.node for o in n.output if o]


def undecodable_text(model) -> Optional[str]:
    """Where the model holds a name (or other text field) that is not valid UTF-8, said in a
    few words; None when all are text. Protobuf hands such a field back as ``bytes``, which
    every later step would trip on."""
    top = [("producer name", model.producer_name), ("producer version", model.producer_version),
           ("domain", model.domain), ("doc string", model.doc_string)]
    top += [("opset domain", o.domain) for o in model.opset_import]
    top += [("metadata", p.key) for p in model.metadata_props] + [("metadata", p.value) for p in model.metadata_props]
    for what, value in top:
        if not isinstance(value, str):
            return f"its {what}"
    for g in walk_graphs(model.graph):
        where = _undecodable_in_graph(g)
        if where is not None:
            return where
    return None


def _undecodable_in_graph(g) -> Optional[str]:
    """The first name of graph ``g`` itself (not of its subgraphs) that is not text, said in a few words."""
    if not isinstance(g.name, str):
        return "a graph name"
    for v in list(g.input) + list(g.output) + list(g.value_info) + list(g.initializer):
        if not isinstance(v.name, str):
            return f"a tensor name in graph '{g.name}'"
    for n in g.node:
        texts = [n.name, n.op_type, n.domain, *n.input, *n.output, *(a.name for a in n.attribute)]
        if not all(isinstance(t, str) for t in texts):
            label = n.name if isinstance(n.name, str) else "?"
            return f"node '{label}' in graph '{g.name}'"
    return None


def _attribute_tensors(nodes: Iterable) -> Iterator:
    for node in nodes:
        for attr in node.attribute:
            if attr.HasField("t"):
                yield attr.t
            yield from attr.tensors


def all_tensors(model) -> Iterator:
    """Every tensor of ``model``: initializers of every graph and tensors held in node
    attributes (``Constant`` values), in subgraphs and in model-local functions too."""
    for graph in walk_graphs(model.graph):
        yield from graph.initializer
        yield from _attribute_tensors(graph.node)
    for function in model.functions:
        yield from _attribute_tensors(function.node)
        for node in function.node:
            for sub in node_subgraphs(node):
                for graph in walk_graphs(sub):
                    yield from graph.initializer
                    yield from _attribute_tensors(graph.node)


def is_external(tensor) -> bool:
    """Whether ``tensor``'s data lives in an external file (its ``raw_data``, if any, is ignored)."""
    return tensor.data_location == _EXTERNAL


def has_external_data(model) -> bool:
    """Whether any tensor of ``model`` refers to an external data file."""
    return any(is_external(t) for t in all_tensors(model))


def external_data_locations(model) -> List[str]:
    """Relative file names of every external data file ``model`` references, in first-use order."""
    locations: List[str] = []
    for t in all_tensors(model):
        if is_external(t):
            for entry in t.external_data:
                if entry.key == "location" and entry.value not in locations:
                    locations.append(entry.value)
    return locations


def external_data_folder(model_path: str, external_data_dir: Optional[str] = None) -> str:
    """Where a model's external data files are: ``external_data_dir`` when given, else the
    model's folder (the current folder for a model read from stdin)."""
    if external_data_dir is not None:
        return external_data_dir
    if model_path == STDIO:
        return os.getcwd()
    return os.path.dirname(os.path.abspath(model_path)) or "."


def stable_topological_order(nodes: Sequence, reads: Callable[[Any], Iterable[str]]) -> List[int]:
    """Positions of ``nodes`` in a topological order that keeps the given order where it can
    (``reads(node)``: the tensors a node needs, what its subgraphs read included).

    With a cycle the order is shorter than ``nodes``: the positions missing from it are stuck (a
    node that reads its own output is a cycle, as ``toolkit.surgeon.load.check_structure`` says)."""
    deps = _dependencies(nodes, reads)
    if all(p < pos for pos, d in enumerate(deps) for p in d):
        return list(range(len(nodes)))
    return _first_ready_order(deps)


def _dependencies(nodes: Sequence, reads: Callable[[Any], Iterable[str]]) -> List[Set[int]]:
    """For each node, the positions of the nodes whose outputs it reads (its own, where it reads one)."""
    producer = {name: pos for pos, node in enumerate(nodes) for name in node.output if name}
    return [{producer[t] for t in reads(node) if t in producer} for node in nodes]


def _first_ready_order(deps: List[Set[int]]) -> List[int]:
    """Kahn's order over ``deps``, the lowest ready position first (nodes on a cycle are left out)."""
    users: List[List[int]] = [[] for _ in deps]
    for pos, d in enumerate(deps):
        for p in d:
            users[p].append(pos)
    left = [len(d) for d in deps]
    ready = [pos for pos, n in enumerate(left) if n == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        pos = heapq.heappop(ready)
        order.append(pos)
        for user in users[pos]:
            left[user] -= 1
            if left[user] == 0:
                heapq.heappush(ready, user)
    return order


# Bytes per element of fixed-size ONNX tensor types (sub-byte types round up).
ITEMSIZE = {1: 4, 2: 1, 3: 1, 4: 2, 5: 2, 6: 4, 7: 8, 9: 1, 10: 2, 11: 8, 12: 4, 13: 8, 14: 8, 15: 16, 16: 2,
            17: 1, 18: 1, 19: 1, 20: 1, 21: 1, 22: 1, 23: 1, 24: 1, 25: 1, 26: 1}  # packed types: per stored byte

# data_type -> (the typed field holding the data when raw_data is empty, field entries per element)
_TYPED_FIELD = {
    1: ("float_data", 1), 2: ("int32_data", 1), 3: ("int32_data", 1), 4: ("int32_data", 1), 5: ("int32_data", 1),
    6: ("int32_data", 1), 7: ("int64_data", 1), 9: ("int32_data", 1), 10: ("int32_data", 1),
    11: ("double_data", 1), 12: ("uint64_data", 1), 13: ("uint64_data", 1), 14: ("float_data", 2),
    15: ("double_data", 2), 16: ("int32_data", 1),
    # 8-bit floats one per entry; 4-bit and 2-bit types packed (see _PACKED); 6-bit floats not checked
    17: ("int32_data", 1), 18: ("int32_data", 1), 19: ("int32_data", 1), 20: ("int32_data", 1),
    21: ("int32_data", 1), 22: ("int32_data", 1), 23: ("int32_data", 1), 24: ("int32_data", 1),
    25: ("int32_data", 1), 26: ("int32_data", 1),
}

# data_type -> elements per stored byte (raw_data) or per typed-field entry, for packed types
_PACKED = {21: 2, 22: 2, 23: 2, 25: 4, 26: 4}


def fresh_name(base: str, taken: set) -> str:
    """``base``, or ``base_2``, ``base_3``... : the first not in ``taken`` (added to it)."""
    name, i = base, 1
    while name in taken:
        i += 1
        name = f"{base}_{i}"
    taken.add(name)
    return name


def element_count(tensor) -> int:
    """Elements a TensorProto's dims hold (1 for a scalar)."""
    n = 1
    for d in tensor.dims:
        n *= int(d)
    return n


def stored_nbytes(tensor) -> Optional[int]:
    """Bytes a numeric tensor's data takes when stored raw (packed 4- and 2-bit types round up);
    None for strings and types not listed."""
    unit = ITEMSIZE.get(tensor.data_type)
    if unit is None or tensor.data_type == 8:
        return None
    return -(-element_count(tensor) // _PACKED.get(tensor.data_type, 1)) * unit


def damaged_tensor(model, external_bytes: Optional[Callable[[Any], int]] = None) -> Optional[str]:
    """A sentence naming the first tensor whose stored data does not fill its dims (``None`` when
    every tensor is whole): :func:`tensor_damage` of each tensor, in every graph."""
    return next((why for why in (tensor_damage(t, external_bytes) for t in all_tensors(model)) if why), None)


def refuse_damaged(model, undone: str, external_bytes: Optional[Callable[[Any], int]] = None) -> None:
    """InputError naming the first damaged tensor (:func:`damaged_tensor`), before any work: the
    message says what was not done (``undone``: "converted", "folded")."""
    damaged = damaged_tensor(model, external_bytes)
    if damaged:
        from toolkit.core.errors import InputError

        raise InputError(f"the model's data is damaged: {damaged}; re-export the model (nothing was {undone})")


def tensor_damage(tensor, external_bytes: Optional[Callable[[Any], int]] = None) -> Optional[str]:
    """A sentence saying how ``tensor``'s stored data does not fill its dims, or ``None``. A tensor in
    an external file is checked when ``external_bytes`` gives the size of its stored bytes. Protobuf
    hands ``raw_data`` back as a copy (a memcpy of the weight), so it is read once."""
    if tensor.data_type == 8:  # STRING: one string_data entry per element, never external
        return _damaged_strings(tensor)
    typed = _TYPED_FIELD.get(tensor.data_type)
    if typed is None:
        return None
    field, per = typed
    need = element_count(tensor)
    pack = _PACKED.get(tensor.data_type, 1)
    stored = -(-need // pack)  # bytes or entries: packed types round up
    unit = ITEMSIZE[tensor.data_type]
    if is_external(tensor):
        if external_bytes is None:
            return None
        have = external_bytes(tensor)
    else:
        have = len(tensor.raw_data)
        if not have:
            have, unit = len(getattr(tensor, field)), per
    if have == stored * unit:
        return None
    if have % unit:  # (bytes that are not a whole number of values)
        return f"tensor '{tensor.name}' holds {have} byte(s) where its dims {list(tensor.dims)} need {stored * unit}"
    return f"tensor '{tensor.name}' holds {have // unit * pack} value(s) but its dims {list(tensor.dims)} need {need}"


def _damaged_strings(tensor) -> Optional[str]:
    if is_external(tensor):
        return f"string tensor '{tensor.name}' points to external data, which ONNX defines for numeric tensors only"
    need = element_count(tensor)
    if len(tensor.string_data) != need:
        return f"tensor '{tensor.name}' holds {len(tensor.string_data)} string(s) but its dims {list(tensor.dims)} need {need}"
    return None


def tensor_nbytes(t) -> int:
    """Size of a tensor's data, from its dims and type where they tell it: reading
    ``raw_data`` (or ByteSize()) copies or walks every byte, slow on big weights."""
    n = element_count(t)
    size = ITEMSIZE.get(t.data_type)
    if size is not None:
        return n * size
    if t.HasField("raw_data"):
        return len(t.raw_data)
    return n * 4


def copy_field(dst, name: str, value) -> None:
    """Set protobuf field ``name`` of ``dst`` to ``value`` (repeated, message or scalar)."""
    if hasattr(value, "extend"):  # repeated field
        getattr(dst, name).extend(value)
    elif hasattr(value, "CopyFrom"):  # message
        getattr(dst, name).CopyFrom(value)
    else:
        setattr(dst, name, value)

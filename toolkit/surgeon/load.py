"""Loading a model for surgery (big external weights read only when needed) and the structural
checks graphsurgeon needs before it imports a model."""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import onnx

from toolkit.core.errors import InputError
from toolkit.core.graph.graphs import refuse_damaged as refuse_damaged_data, walk_graphs
from toolkit.core.io.model import load_lazily
from toolkit.core.shapes import node_reads
from toolkit.core.io.weights import ref_source

EAGER_EXTERNAL_BYTES = 1 << 20
SHAPE_OPS = {"Shape", "Size"}


def load_for_surgery(
    path: str, external_data_dir: Optional[str] = None, *, fold_constants: bool = False, files: Optional[list] = None
):
    """Load a model for extract/sanitize without reading weights that may not be needed.

    Returns ``(model, base_dir)``. Big external weights stay references into their files
    in ``base_dir`` (None when the model has none): those that constant folding reads are
    loaded now, the rest are copied when the result is saved, and only if the result
    keeps them (:func:`toolkit.core.io.model.save_model` with ``external_base_dir``). A
    missing external file is an InputError at once, before any work. ``files``, if given,
    receives the paths of the model's external data files.
    """
    needed = _initializers_read_by_constant_nodes if fold_constants else None
    return load_lazily(path, external_data_dir, needed=needed, eager_bytes=EAGER_EXTERNAL_BYTES, files=files)


def _initializers_read_by_constant_nodes(graph) -> set:
    """Initializers that folding may compute with: inputs of nodes whose every input is
    constant (initializers, constant outputs, and Shape/Size results, which folding
    turns into constants when shapes are known). An over-estimate is harmless."""
    inits = {t.name for t in graph.initializer}
    needed: set = set()
    for node in _constant_nodes(graph, inits):
        if node.op_type not in SHAPE_OPS:
            needed.update(r for r in node_reads(node) if r in inits)
    return needed


def _constant_nodes(graph, inits: set) -> list:
    """The nodes (in graph order) whose every input is constant: ``inits``, outputs of such
    nodes, Shape/Size results (nodes need not be sorted)."""
    const = set(inits)
    folded = [False] * len(graph.node)
    changed = True
    while changed:
        changed = False
        for i, node in enumerate(graph.node):
            if not folded[i] and computable_from(node, const):
                folded[i] = changed = True
                const.update(o for o in node.output if o)
    return [node for i, node in enumerate(graph.node) if folded[i]]


def computable_from(node, const: set) -> bool:
    """``node`` gives a constant once the tensors ``const`` are: a Shape/Size, or it reads only them."""
    return node.op_type in SHAPE_OPS or const.issuperset(node_reads(node))


# ---------------------------------------------------------------------- malformed models


def check_structure(model) -> None:
    """Raise InputError for what graphsurgeon cannot import or sort: unknown element types,
    a tensor defined twice, a cycle. Cheap (no weights read); the message names the tensor."""

    valid = set(onnx.TensorProto.DataType.values())
    for g in walk_graphs(model.graph):
        _check_initializer_types(g, valid)
        _check_value_types(g, valid)
        _check_defined_once(g)
    _check_acyclic(model.graph)


def _check_initializer_types(g, valid: set) -> None:
    """InputError for an initializer of graph ``g`` of an invalid (or undefined) data type."""
    for t in g.initializer:
        if t.data_type not in valid or t.data_type == onnx.TensorProto.UNDEFINED:
            raise InputError(f"initializer '{t.name}' has an invalid data type ({t.data_type}); the model is corrupt")


def _check_value_types(g, valid: set) -> None:
    """InputError for a tensor input, output or value_info of graph ``g`` of an invalid element type."""
    for vi in list(g.input) + list(g.output) + list(g.value_info):
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type not in valid:
            raise InputError(
                f"tensor '{vi.name}' has an invalid element type ({vi.type.tensor_type.elem_type}); the model is corrupt"
            )


def _check_defined_once(g) -> None:
    """InputError for a tensor of graph ``g`` that a node computes and something else defines too."""
    given = [i.name for i in g.input] + [t.name for t in g.initializer]
    producer: Dict[str, str] = dict.fromkeys(given, "a graph input or initializer")
    for node in g.node:
        for name in (o for o in node.output if o):
            if name in producer:
                raise InputError(
                    f"tensor '{name}' is defined twice (by {producer[name]} and by node '{node.name}' "
                    f"({node.op_type})); tensor names in a graph must be unique"
                )
            producer[name] = f"node '{node.name}' ({node.op_type})"


def _check_acyclic(g) -> None:
    """Every node of the top graph must be reachable in some order."""
    stuck = next((g.node[i] for i, w in enumerate(_unsorted_dependencies(g)) if w > 0), None)
    if stuck is not None:
        raise InputError(
            f"the graph has a cycle: node '{stuck.name}' ({stuck.op_type}) depends, directly or not, on its own output; "
            "the model is corrupt"
        )


def _unsorted_dependencies(g) -> List[int]:
    """Kahn's algorithm on the nodes of ``g``: for each node, how many of the nodes it reads from
    could not be sorted before it (all 0 when ``g`` has no cycle)."""
    waiting, readers = _dependencies(g)
    ready = [i for i, w in enumerate(waiting) if w == 0]
    while ready:
        for r in readers.get(ready.pop(), ()):
            waiting[r] -= 1
            if waiting[r] == 0:
                ready.append(r)
    return waiting


def _dependencies(g) -> Tuple[List[int], Dict[int, List[int]]]:
    """(for each node of ``g``, how many nodes it reads from; {node: the nodes that read it})."""
    produced_by = {name: i for i, node in enumerate(g.node) for name in node.output if name}
    waiting = []
    readers: Dict[int, List[int]] = {}
    for i, node in enumerate(g.node):
        deps = {produced_by[n] for n in node_reads(node) if n in produced_by}
        waiting.append(len(deps))
        for dep in deps:
            readers.setdefault(dep, []).append(i)
    return waiting, readers


def refuse_damaged(model, folding: bool, external_data_dir: Optional[str]) -> None:
    """Folding reads weights: a tensor whose data does not fill its dims is the input's fault,
    said in one line before any work (ONNX-Runtime would refuse the model too). Weights still in
    their external file are measured there (a missing or truncated file is its own error)."""
    if not folding:
        return
    sizer = None
    if external_data_dir is not None:
        base = external_data_dir

        def sizer(tensor) -> int:
            return ref_source(tensor, base)[2]

    refuse_damaged_data(model, "folded", sizer)

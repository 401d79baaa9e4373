"""How a ``--reference-model`` compares with the model reduced: whether candidates can be fed the
reference's values, or need the model's own run (tensors it lacks, other tensor types)."""

from __future__ import annotations

from typing import Dict

from toolkit.core.errors import InputError
from toolkit.core.graph.graphs import fed_inputs
from toolkit.reduce.loading import load_for_index


def _light(path: str):
    return load_for_index(path)[0]


def needs_own_run(model: str, ref_model: str) -> bool:
    """Whether the model's own values are needed to feed its subgraphs: some tensor of it has no
    value in the reference model, or the two differ in tensor types (a converted model)."""
    m, r = _light(model).graph, _light(ref_model).graph
    _check_reference_inputs(m, r, ref_model)
    return _tensor_missing(m, r) or _initializer_types_differ(m, r) or _io_types_differ(m, r)


def _check_reference_inputs(m, r, ref_model: str) -> None:
    """InputError unless the reference graph ``r`` has every input of the graph ``m`` (by name)."""
    m_inputs = [i.name for i in fed_inputs(m)]
    r_inputs = {i.name for i in r.input}
    missing = [n for n in m_inputs if n not in r_inputs]
    if missing:
        raise InputError(
            f"{ref_model}: the reference model has no input named {', '.join(missing)} (its inputs: "
            f"{', '.join(sorted(r_inputs)) or 'none'}); --reference-model needs the model's inputs, by name"
        )


def _tensor_missing(m, r) -> bool:
    """Whether some node output of the graph ``m`` is no tensor (input or node output) of ``r``."""
    r_names = {o for n in r.node for o in n.output} | {i.name for i in r.input}
    return any(o and o not in r_names for n in m.node for o in n.output)


def _initializer_types_differ(m, r) -> bool:
    """Whether the graphs' initializers differ in their set of types, or one of the same name in type."""
    r_init = {t.name: t.data_type for t in r.initializer}
    if {t.data_type for t in m.initializer} != set(r_init.values()):
        return True
    return any(r_init.get(t.name, t.data_type) != t.data_type for t in m.initializer)


def _io_types_differ(m, r) -> bool:
    """Whether an input or output of the graph ``m`` has another element type in ``r``."""
    r_io = _io_elem_types(r)
    return any(r_io.get(name, elem) != elem for name, elem in _io_elem_types(m).items())


def _io_elem_types(graph) -> Dict[str, int]:
    return {v.name: v.type.tensor_type.elem_type for v in list(graph.input) + list(graph.output)}

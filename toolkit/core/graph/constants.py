"""The constants of an ONNX graph: its initializers and the values of its ``Constant`` nodes.

One reading of a ``Constant`` node for every room. It is a node of the standard domain (a
``Constant`` of another domain is a custom op, whose attributes mean what its author says), and
its value is its first ``value`` attribute holding a tensor: ONNX-Runtime runs a node whose
attribute is repeated on the first one (onnx's checker refuses such a node). The other spellings
of a value (``value_float(s)``, ``value_int(s)``, ``value_string(s)``, ``sparse_value``) are not
read here. Works on protobufs; onnx is imported only to turn tensors into arrays.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, Iterator, Optional, Set, Tuple

if TYPE_CHECKING:
    import numpy as np

#: The domain names of the standard ONNX operators.
STANDARD_DOMAINS = ("", "ai.onnx")


def is_constant_node(node) -> bool:
    """Whether ``node`` is the standard ``Constant`` operator (whatever kind of value it holds)."""
    return node.op_type == "Constant" and node.domain in STANDARD_DOMAINS


def constant_tensor(node) -> Optional[Any]:
    """The TensorProto a ``Constant`` node holds as its ``value`` (the first one); None for any
    other node, for a ``Constant`` without an output, and for another kind of value."""
    if not is_constant_node(node) or not node.output:
        return None
    attr = next((a for a in node.attribute if a.name == "value"), None)
    return attr.t if attr is not None and attr.HasField("t") else None


def constant_nodes(graph) -> Iterator[Tuple[Any, Any]]:
    """(node, tensor) of each ``Constant`` node of ``graph`` (its top level) that holds a tensor
    value, in node order; the tensor is the node's own (changing it changes the node)."""
    for node in graph.node:
        tensor = constant_tensor(node)
        if tensor is not None:
            yield node, tensor


def constant_names(graph) -> Set[str]:
    """The names of ``graph``'s (its top level's) initializers and of the outputs of its
    ``Constant`` nodes, whatever kind of value they hold."""
    names = {t.name for t in graph.initializer}
    return names | {o for n in graph.node if is_constant_node(n) for o in n.output if o}


def constant_values(graph) -> Dict[str, "np.ndarray"]:
    """The initializers and ``Constant`` values of ``graph`` (its top level) as numpy arrays, by
    name (an initializer's data must be loaded; on a name both have, the ``Constant``'s)."""
    from onnx import numpy_helper

    values = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    values.update((node.output[0], numpy_helper.to_array(t)) for node, t in constant_nodes(graph))
    return values

"""What onnxconverter-common's fp16 conversion leaves inconsistent, made consistent.

``Cast(to=FLOAT)`` and ``dtype`` attributes in the fp16 part, nodes that receive a mix of fp16
and fp32 inputs (weights shared between a kept and a converted node, graph outputs also read
inside the graph, blocked nodes without inferred types), fixed-type inputs such as
``Resize``'s scales, round trips through fp16 between two fp32 nodes (the library removes them
only for single consumers), and the order of nodes (counting what If/Loop bodies read).

No Typer or Rich here.
"""

from __future__ import annotations

from typing import Dict, Optional, Set, Tuple

import onnx

from toolkit.convert.common import (
    DTYPE_OPS,
    FLOAT,
    FLOAT16,
    STD_DOMAINS,
    TENSOR_STR,
    Names,
    cast_node,
    cast_to,
    iter_graphs,
    onnx_errors,
    producers as made_by,
    read_names,
    replace_repeated,
    retype_attribute,
    short_name,
)
from toolkit.convert.onnx_types import Schemas, allowed_types, formal_param
from toolkit.core.errors import reraise_bug
from toolkit.core.graph.graphs import node_subgraphs, stable_topological_order
from toolkit.core.shapes import node_reads


def toposort(graph) -> None:
    """Order ``graph``'s nodes topologically (stable), counting what If/Loop bodies read
    from the outer graph (onnxconverter-common's sort ignores it and can put an If before
    the node producing a tensor its branches read)."""
    nodes = list(graph.node)
    order = stable_topological_order(nodes, node_reads)  # (a body's own names are not read from outside)
    if len(order) != len(nodes):  # a cycle: leave the order alone (type checking reports it)
        return
    if order == list(range(len(nodes))):
        return
    replace_repeated(graph.node, [nodes[k] for k in order])


def sort_all(graph) -> None:
    for g in iter_graphs(graph):
        toposort(g)


# the attributes holding the bodies of the ops whose outputs are their bodies' outputs
_BODIES = {"If": ("then_branch", "else_branch"), "Loop": ("body",), "Scan": ("body",)}
_LEADING = {"Loop": 1}  # body outputs before those that become the node's outputs (Loop's condition)


def _body_output_types(node) -> Dict[str, int]:
    """Element types of an If's or Loop/Scan's outputs, from its (then-)body's outputs."""
    out: Dict[str, int] = {}
    if node.domain not in STD_DOMAINS or node.op_type not in _BODIES:
        return out
    skip = _LEADING.get(node.op_type, 0)
    for a in node.attribute:
        if a.name in _BODIES[node.op_type]:
            _add_declared_types(out, node.output, a.g.output[skip:])
    return out


def _add_declared_types(out: Dict[str, int], names, value_infos) -> None:
    """``out[names[k]]``: the element type ``value_infos[k]`` declares, unless ``out`` has one already
    (a body output may leave its type out (0): that says nothing)."""
    for name, vi in zip(names, value_infos):
        if vi.type.tensor_type.elem_type:
            out.setdefault(name, vi.type.tensor_type.elem_type)


# the attribute that gives the element type of an op's output
_TYPE_ATTRIBUTE = {"Cast": "to", **{op: "dtype" for op in DTYPE_OPS}}


class Repair:
    """Make every node's input types what its precision asks for, inserting Casts."""

    def __init__(
        self, model, orig_types: Dict[str, int], kept: Set[str], originals: Set[str], keep_io: bool, low: int = FLOAT16
    ):
        self.model = model
        self.low = low  # the reduced precision converted nodes compute in (FLOAT16 or BFLOAT16)
        self.floats = (FLOAT, low)
        self.orig = orig_types
        self.kept = kept
        self.originals = originals
        self.keep_io = keep_io
        self.schemas = Schemas(model)
        self.types: Dict[str, int] = {}
        self.casts_added = 0
        self.fresh = Names(model).fresh

    def run(self) -> None:
        self.graph(self.model.graph, {}, top=True)

    def _cast(self, src: str, to: int, hint: str):
        out = self.fresh(f"{src}_to_{short_name(to)}")
        node = cast_node(src, out, self.fresh(f"{hint}_cast_{out}"), to)
        self.types[out] = to
        self.casts_added += 1
        return node, out

    def graph(self, graph, outer: Dict[str, int], top: bool) -> None:
        types = _input_types(graph, outer)
        declared = {vi.name: vi.type.tensor_type.elem_type for vi in graph.value_info if vi.type.tensor_type.elem_type}
        new_nodes: list = []
        made: Dict[Tuple[str, int], str] = {}
        for node in graph.node:
            self._node(node, types, declared, made, new_nodes)
        self._fix_graph_outputs(graph, top, types, new_nodes)
        del graph.node[:]
        graph.node.extend(new_nodes)
        self.types.update(types)

    def _node(self, node, types: Dict[str, int], declared: Dict[str, int], made: dict, new_nodes: list) -> None:
        """Repair ``node`` (its bodies first) and append it to ``new_nodes``, with the Casts it needs in
        front of it and after it."""
        kept = node.name in self.kept
        for sub in node_subgraphs(node):
            self.graph(sub, types, top=False)
        schema = self.schemas.get(node)
        if node.name in self.originals and not kept:
            self._retarget(node)
        self._cast_inputs(node, schema, kept, types, made, new_nodes)
        new_nodes.append(node)
        self._type_outputs(node, schema, kept, types, declared, new_nodes)

    def _cast_inputs(self, node, schema, kept: bool, types: Dict[str, int], made: dict, new_nodes: list) -> None:
        """Casts in front of ``node`` for the float inputs it wants in the other precision."""
        for i, name in enumerate(node.input):
            have = types.get(name) if name else None
            if have not in self.floats:
                continue
            want = self._wanted_input(node, schema, i, name, kept, have)
            if want not in (None, have):
                out = self._shared_cast(name, want, node.name, made, new_nodes)
                types[out] = want  # (the schema inference of this node's outputs needs it)
                node.input[i] = out

    def _shared_cast(self, name: str, want: int, hint: str, made: dict, new_nodes: list) -> str:
        """The output of the Cast of ``name`` to ``want``: one Cast per tensor and type, shared by its
        readers (``made``), appended to ``new_nodes`` when it is new."""
        out = made.get((name, want))
        if out is None:
            cast, out = self._cast(name, want, hint)
            new_nodes.append(cast)
            made[(name, want)] = out
        return out

    def _type_outputs(self, node, schema, kept: bool, types: Dict[str, int], declared, new_nodes: list) -> None:
        """Record ``node``'s output types; a converted node's output that ended fp32 where it was
        fp32 gets a Cast to fp16."""

        outs = self._output_types(node, schema, types, declared)
        outs.pop("", None)
        types.update(outs)
        if kept:
            return
        for j, name in enumerate(node.output):
            if outs.get(name) == FLOAT and self._converted_float(node, name):
                self._cast_output(node, j, types, new_nodes)

    def _cast_output(self, node, j: int, types: Dict[str, int], new_nodes: list) -> None:
        """``node`` makes its output ``j`` as fp32 under a new name; a Cast after it makes the reduced
        precision under the old name."""
        name = node.output[j]
        raw = self.fresh(f"{name}_fp32")
        node.output[j] = raw
        self.types[raw] = FLOAT
        new_nodes.append(cast_node(raw, name, self.fresh(f"{node.name}_cast_out{j}"), self.low))
        self.casts_added += 1
        types[name] = self.low

    def _converted_float(self, node, name: str) -> bool:
        """Whether output ``name`` of a converted node of the original model, float32 there, should be
        in the reduced precision (not a Shape's or a Size's)."""
        return node.name in self.originals and self.orig.get(name) == FLOAT and node.op_type not in ("Shape", "Size")

    def _fix_graph_outputs(self, graph, top: bool, types: Dict[str, int], new_nodes: list) -> None:
        """Graph outputs: the declared type wins (I/O types kept at the top; the library's fp16 bodies below)."""

        if top and self.keep_io:
            self._restore_io_types(graph)
        for vi in graph.output:
            have, want = types.get(vi.name, 0), vi.type.tensor_type.elem_type  # (0: unknown)
            if self._other_precision(have, want):
                self._cast_graph_output(vi.name, have, want, types, new_nodes)

    def _restore_io_types(self, graph) -> None:
        """The float graph outputs declare their type of the original model again."""
        for vi in graph.output:
            if self.orig.get(vi.name) in self.floats:
                vi.type.tensor_type.elem_type = self.orig[vi.name]

    def _other_precision(self, have: int, want: int) -> bool:
        """Whether ``have`` and ``want`` are the two different float types of the conversion."""
        return have != want and have in self.floats and want in self.floats

    def _cast_graph_output(self, name: str, have: int, want: int, types: Dict[str, int], new_nodes: list) -> None:
        """The nodes make graph output ``name`` as ``have`` under another name; a Cast makes it ``want``."""
        raw = self.fresh(f"{name}_{short_name(have)}")
        for n in new_nodes:
            for k, o in enumerate(n.output):
                if o == name:
                    n.output[k] = raw
        _rename_inputs(new_nodes, {name: raw})
        _rename_in_subgraphs(new_nodes, name, raw)
        new_nodes.append(cast_node(raw, name, self.fresh(f"{name}_cast_io"), want))
        self.casts_added += 1
        types[raw] = have
        types[name] = want

    def _retarget(self, node) -> None:
        """Attribute-typed outputs of converted nodes: FLOAT -> the reduced precision."""
        name = _TYPE_ATTRIBUTE.get(node.op_type)
        if node.domain in STD_DOMAINS and name is not None:
            retype_attribute(node, name, FLOAT, self.low)

    def _wanted_input(self, node, schema, i: int, name: str, kept: bool, have: int) -> Optional[int]:
        orig = self.orig.get(name, have)
        if kept:
            return orig if orig in self.floats else None
        if orig != FLOAT or schema is None or node.op_type == "Cast":  # (Cast takes any type)
            return None
        return self._schema_input_type(schema, i)

    def _schema_input_type(self, schema, i: int) -> Optional[int]:
        """The type a converted node's float input ``i`` takes: the reduced precision where its schema
        allows it, else FLOAT where allowed, else None."""
        formal = formal_param(schema.inputs, i)
        if formal is None:
            return None
        allowed = allowed_types(schema, formal.type_str)
        return next((t for t in (self.low, FLOAT) if TENSOR_STR[t] in allowed), None)

    def _output_types(self, node, schema, types: Dict[str, int], declared: Dict[str, int]) -> Dict[str, int]:
        """Output element types: from the schema, else from the bodies, else as declared."""
        out = {o: declared[o] for o in node.output if o in declared}
        out.update(_body_output_types(node))
        if schema is not None and not node_subgraphs(node):
            out.update(self._schema_types(node, schema, types))
        return out

    def _schema_types(self, node, schema, types: Dict[str, int]) -> Dict[str, int]:
        """Output element types from the operator's schema, when every input's type is known."""

        tps = _type_protos(node.input, types)
        if tps is None:
            return {}
        try:
            res = onnx.shape_inference.infer_node_outputs(
                schema, node, tps, opset_imports=list(self.model.opset_import), ir_version=self.model.ir_version
            )
        except onnx_errors() as exc:  # (a node its schema rejects: its output types stay unknown)
            reraise_bug(exc)
            return {}
        return _tensor_elem_types(res)

    def write_value_info(self) -> None:
        for graph in iter_graphs(self.model.graph):
            keep = []
            for vi in graph.value_info:
                t = self.types.get(vi.name)
                if not t:  # unknown (None or 0): a value_info typed 0 does not load in ONNX-Runtime
                    continue
                if vi.type.HasField("tensor_type"):
                    vi.type.tensor_type.elem_type = t
                keep.append(vi)
            replace_repeated(graph.value_info, keep)


def _type_protos(names, types: Dict[str, int]) -> Optional[Dict[str, onnx.TypeProto]]:
    """A tensor TypeProto of its element type in ``types`` for each name (empty ones left out); None when
    one's type is unknown."""
    tps = {}
    for name in filter(None, names):
        if name not in types:
            return None
        tps[name] = onnx.TypeProto()
        tps[name].tensor_type.elem_type = types[name]
    return tps


def _tensor_elem_types(type_protos: Dict[str, onnx.TypeProto]) -> Dict[str, int]:
    """name -> element type of the tensor types among ``type_protos`` that give one."""
    return {k: tp.tensor_type.elem_type for k, tp in type_protos.items() if tp.tensor_type.elem_type}


def _input_types(graph, outer: Dict[str, int]) -> Dict[str, int]:
    """The element types a graph's nodes can read before any runs: the outer graphs' (``outer``),
    its typed inputs' and its initializers'."""
    types = dict(outer)
    for vi in graph.input:
        if vi.type.tensor_type.elem_type:
            types[vi.name] = vi.type.tensor_type.elem_type
    for t in graph.initializer:
        types[t.name] = t.data_type
    return types


def _rename_inputs(nodes, rename: Dict[str, str]) -> None:
    """The nodes that read a name of ``rename`` read the name it maps to instead."""
    for n in nodes:
        for k, i in enumerate(n.input):
            if i in rename:
                n.input[k] = rename[i]


def _rename_in_subgraphs(nodes, old: str, new: str) -> None:
    for n in nodes:
        for sub in node_subgraphs(n):
            for g in iter_graphs(sub):
                _rename_inputs(g.node, {old: new})


def drop_round_trips(model, originals: Set[str], types: Dict[str, int]) -> None:
    """Remove converter-made Cast pairs that go fp32 -> fp16 -> fp32 (or back), and no-op casts.

    Consumers of the second Cast read the source directly, so two fp32 nodes exchange
    fp32 values, as keeping them fp32 promises; also when the second Cast sits in an If/Loop
    body and the first in a graph around it (a kept node in a body reading a kept node's output).
    """
    renamed = False
    for graph, outer in _graphs_with_outer(model.graph, {}):
        rename = _round_trip_renames(graph, originals, types, outer)
        if not rename:
            continue
        renamed = True
        for g in iter_graphs(graph):  # readers in the graph and in its bodies
            _rename_inputs(g.node, rename)
    if renamed:
        # bodies first: a Cast of an outer graph is dead once the bodies' Casts that read it are gone
        for graph in reversed(list(iter_graphs(model.graph))):
            _drop_dead_casts(graph, originals)


def _graphs_with_outer(graph, outer: Dict[str, object]):
    """(graph, the nodes of the graphs around it by output name) for ``graph`` and every body below it."""
    yield graph, outer
    here = _with_producers(outer, graph.node)
    for node in graph.node:
        for sub in node_subgraphs(node):
            yield from _graphs_with_outer(sub, here)


def _with_producers(producers: Dict[str, object], nodes) -> Dict[str, object]:
    """A copy of ``producers`` (output name -> node) with the outputs of ``nodes`` added."""
    out = dict(producers)
    out.update(made_by(nodes))
    return out


def _made_cast(node, originals: Set[str]) -> bool:
    """Whether ``node`` is a Cast the conversion added (not one of the original model)."""
    return node.op_type == "Cast" and node.name not in originals


def _round_trip_renames(graph, originals: Set[str], types: Dict[str, int], outer=None) -> Dict[str, str]:
    """Output of a removable Cast -> the tensor its readers should read instead (``outer``: the
    producers of the graphs around ``graph``, by output name)."""
    produced = _with_producers(outer or {}, graph.node)
    outputs = {vi.name for vi in graph.output}
    rename: Dict[str, str] = {}
    for n in graph.node:
        if not (_made_cast(n, originals) and n.input) or n.output[0] in outputs:
            continue
        src = rename.get(n.input[0], n.input[0])
        target = _round_trip_source(src, cast_to(n), produced, originals, types)
        if target is not None:
            rename[n.output[0]] = rename.get(target, target)
    return rename


def _round_trip_source(src: str, to: Optional[int], produced, originals: Set[str], types: Dict[str, int]):
    """What a converter-made Cast of ``src`` to ``to`` can be replaced by: ``src`` when it has that
    type already (a no-op cast), the input of the converter-made Cast that made ``src`` when that
    input has it (a round trip); None otherwise."""
    if types.get(src) == to:
        return src
    first = produced.get(src)
    if first is None or not _made_cast(first, originals):
        return None
    return first.input[0] if types.get(first.input[0]) == to else None


def _used_names(graph) -> Set[str]:
    """The names read in ``graph`` and its bodies: node inputs, and the outputs of every graph."""
    used: Set[str] = set()
    for g in iter_graphs(graph):
        used.update(read_names(g.node))
        used.update(vi.name for vi in g.output)
    return used


def _drop_dead_casts(graph, originals: Set[str]) -> None:
    """Remove the conversion's Casts whose outputs nothing reads, until there are none (a Cast may
    only read another)."""
    while True:
        used = _used_names(graph)
        dead = [k for k, n in enumerate(graph.node) if _made_cast(n, originals) and used.isdisjoint(n.output)]
        if not dead:
            return
        for k in reversed(dead):
            del graph.node[k]

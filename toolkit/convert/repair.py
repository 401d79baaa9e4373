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
    replace_repeated,
    short_name,
)
from toolkit.convert.onnx_types import Schemas, allowed_types, formal_param
from toolkit.core.errors import reraise_bug
from toolkit.core.graph.graphs import node_subgraphs, stable_topological_order


def _subgraph_reads(node) -> Set[str]:
    """Names a node's subgraphs read (they may come from the outer graph)."""
    names: Set[str] = set()
    for sub in node_subgraphs(node):
        for g in iter_graphs(sub):
            for n in g.node:
                names.update(i for i in n.input if i)
    return names


def toposort(graph) -> None:
    """Order ``graph``'s nodes topologically (stable), counting what If/Loop bodies read
    from the outer graph (onnxconverter-common's sort ignores it and can put an If before
    the node producing a tensor its branches read)."""
    nodes = list(graph.node)
    order = stable_topological_order(nodes, lambda n: set(i for i in n.input if i) | _subgraph_reads(n))
    if len(order) != len(nodes):  # a cycle: leave the order alone (type checking reports it)
        return
    if order == list(range(len(nodes))):
        return
    replace_repeated(graph.node, [nodes[k] for k in order])


def sort_all(graph) -> None:
    for g in iter_graphs(graph):
        toposort(g)


def _body_output_types(node) -> Dict[str, int]:
    """Element types of an If's or Loop/Scan's outputs, from its (then-)body's outputs."""
    out: Dict[str, int] = {}
    if node.domain not in STD_DOMAINS or node.op_type not in ("If", "Loop", "Scan"):
        return out
    bodies = ("then_branch", "else_branch") if node.op_type == "If" else ("body",)
    skip = 1 if node.op_type == "Loop" else 0
    for a in node.attribute:
        if a.name in bodies:
            for k, vi in enumerate(a.g.output[skip:]):
                # a body output may leave its type out (0): that says nothing
                if k < len(node.output) and vi.type.tensor_type.elem_type:
                    out.setdefault(node.output[k], vi.type.tensor_type.elem_type)
    return out


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
            kept = node.name in self.kept
            for sub in node_subgraphs(node):
                self.graph(sub, types, top=False)
            schema = self.schemas.get(node)
            if node.name in self.originals and not kept:
                self._retarget(node)
            self._cast_inputs(node, schema, kept, types, made, new_nodes)
            new_nodes.append(node)
            self._type_outputs(node, schema, kept, types, declared, new_nodes)
        self._fix_graph_outputs(graph, top, types, new_nodes)
        del graph.node[:]
        graph.node.extend(new_nodes)
        self.types.update(types)

    def _cast_inputs(self, node, schema, kept: bool, types: Dict[str, int], made: dict, new_nodes: list) -> None:
        """Casts in front of ``node`` for the float inputs it wants in the other precision."""
        for i, name in enumerate(node.input):
            have = types.get(name) if name else None
            if have not in self.floats:
                continue
            want = self._wanted_input(node, schema, i, name, kept, have)
            if want is not None and want != have:
                out = made.get((name, want))  # one Cast per tensor and type, shared by its readers
                if out is None:
                    cast, out = self._cast(name, want, node.name)
                    new_nodes.append(cast)
                    made[(name, want)] = out
                types[out] = want  # (the schema inference of this node's outputs needs it)
                node.input[i] = out

    def _type_outputs(self, node, schema, kept: bool, types: Dict[str, int], declared, new_nodes: list) -> None:
        """Record ``node``'s output types; a converted node's output that ended fp32 where it was
        fp32 gets a Cast to fp16."""

        outs = self._output_types(node, schema, types, declared)
        for j, name in enumerate(node.output):
            if not name or outs.get(name) is None:
                continue
            have = outs[name]
            types[name] = have
            if not kept and have == FLOAT and self._converted_float(node, name):
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

        for vi in graph.output:
            want = vi.type.tensor_type.elem_type
            have = types.get(vi.name)
            if top and self.keep_io and self.orig.get(vi.name) in self.floats:
                want = self.orig[vi.name]
                vi.type.tensor_type.elem_type = want
            if have in self.floats and want in self.floats and have != want:
                self._cast_graph_output(vi.name, have, want, types, new_nodes)

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
        if node.domain not in STD_DOMAINS or name is None:
            return
        for a in node.attribute:
            if a.name == name and a.i == FLOAT:
                a.i = self.low

    def _wanted_input(self, node, schema, i: int, name: str, kept: bool, have: int) -> Optional[int]:
        orig = self.orig.get(name, have)
        if kept:
            return orig if orig in self.floats else None
        if orig != FLOAT:
            return None
        if schema is None or node.op_type == "Cast":  # Cast takes any type
            return None
        formal = formal_param(schema.inputs, i)
        if formal is None:
            return None
        allowed = allowed_types(schema, formal.type_str)
        if TENSOR_STR[self.low] in allowed:
            return self.low
        if TENSOR_STR[FLOAT] in allowed:
            return FLOAT
        return None

    def _output_types(self, node, schema, types: Dict[str, int], declared: Dict[str, int]) -> Dict[str, int]:
        out: Dict[str, int] = {}
        if schema is not None and not node_subgraphs(node):
            out.update(self._schema_types(node, schema, types))
        out.update({k: v for k, v in _body_output_types(node).items() if k not in out})
        for o in node.output:
            if o and o not in out and o in declared:
                out[o] = declared[o]
        return out

    def _schema_types(self, node, schema, types: Dict[str, int]) -> Dict[str, int]:
        """Output element types from the operator's schema, when every input's type is known."""

        if not all((not i) or i in types for i in node.input):
            return {}
        tps = {}
        for i in node.input:
            if i:
                tp = onnx.TypeProto()
                tp.tensor_type.elem_type = types[i]
                tps[i] = tp
        try:
            res = onnx.shape_inference.infer_node_outputs(
                schema, node, tps, opset_imports=list(self.model.opset_import), ir_version=self.model.ir_version
            )
        except onnx_errors() as exc:  # (a node its schema rejects: its output types stay unknown)
            reraise_bug(exc)
            return {}
        return {
            k: tp.tensor_type.elem_type
            for k, tp in res.items()
            if tp.HasField("tensor_type") and tp.tensor_type.elem_type
        }

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
    here = dict(outer)
    here.update({o: n for n in graph.node for o in n.output if o})
    for node in graph.node:
        for sub in node_subgraphs(node):
            yield from _graphs_with_outer(sub, here)


def _round_trip_renames(graph, originals: Set[str], types: Dict[str, int], outer=None) -> Dict[str, str]:
    """Output of a removable Cast -> the tensor its readers should read instead (``outer``: the
    producers of the graphs around ``graph``, by output name)."""
    outputs = {vi.name for vi in graph.output}
    produced = dict(outer or {})
    produced.update({o: n for n in graph.node for o in n.output})
    rename: Dict[str, str] = {}
    for n in graph.node:
        if n.op_type != "Cast" or n.name in originals or not n.input:
            continue
        src = rename.get(n.input[0], n.input[0])
        target = _round_trip_source(src, cast_to(n), produced, originals, types)
        if target is not None and n.output[0] not in outputs:
            rename[n.output[0]] = rename.get(target, target)
    return rename


def _round_trip_source(src: str, to: Optional[int], produced, originals: Set[str], types: Dict[str, int]):
    """What a converter-made Cast of ``src`` to ``to`` can be replaced by: ``src`` when it has that
    type already (a no-op cast), the input of the converter-made Cast that made ``src`` when that
    input has it (a round trip); None otherwise."""
    if types.get(src) == to:
        return src
    first = produced.get(src)
    if first is None or first.op_type != "Cast" or first.name in originals:
        return None
    return first.input[0] if types.get(first.input[0]) == to else None


def _used_names(graph) -> Set[str]:
    used = {vi.name for vi in graph.output}
    for g in iter_graphs(graph):
        for n in g.node:
            used.update(i for i in n.input if i)
        if g is not graph:
            used.update(vi.name for vi in g.output)
    return used


def _drop_dead_casts(graph, originals: Set[str]) -> None:
    while True:
        used = _used_names(graph)
        dead = [
            k
            for k, n in enumerate(graph.node)
            if n.op_type == "Cast" and n.name not in originals and all(o not in used for o in n.output)
        ]
        if not dead:
            return
        for k in reversed(dead):
            del graph.node[k]

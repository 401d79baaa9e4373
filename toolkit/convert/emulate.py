"""fp16 (bf16) storage emulated in fp32, for ``run --fp16`` and ``debug precision``.

:func:`emulate_fp16` rewrites a float32 model so that, running in fp32 on any backend,
every tensor that would be stored in fp16 is rounded to fp16 (``Cast`` to float16 and
back after the node that produces it): overflow past 65504 gives inf, tiny values
underflow to subnormals or zero, and every tensor boundary rounds. Tensors keep their
names, so comparisons and ``mark all`` line up with the fp32 model. What it does not
emulate: arithmetic inside a kernel (accumulation in fp16 within a reduction, MatMul
or Conv, fused kernels); those run in fp32, and only their results are rounded.
:func:`emulate_mixed` does the same for a model that already holds float16/bfloat16.

No Typer or Rich here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Set, Tuple

import numpy as np
import onnx
from onnx import numpy_helper

from toolkit.convert.common import (
    BFLOAT16,
    DTYPE_OPS,
    FLOAT,
    FLOAT16,
    Names,
    cast_node,
    copy_model,
    low_type,
    name_nodes,
    normalize_constants,
    producers,
    readers_of,
    reduced_types,
    round_values,
    short_name,
    weight_array,
    widened,
)
from toolkit.convert.onnx_types import bf16_ready, infer_types, tensor_types
from toolkit.convert.placement import decide
from toolkit.convert.ranges import risky_values
from toolkit.core.errors import UsageError
from toolkit.core.graph.constants import constant_tensor, is_constant_node
from toolkit.core.graph.graphs import node_subgraphs


@dataclass
class Emulation:
    model: object
    kept: Dict[str, str]
    rounded: int  # tensors rounded to fp16


def emulate(
    model,
    keep_fp32: Iterable[str] = (),
    *,
    auto_keep: bool = True,
    inplace: bool = False,
    types: Optional[Dict[str, int]] = None,
    cache: Optional[Dict[str, bytes]] = None,
    dtype: str = "float16",
) -> Emulation:
    """Rewrite a float32 model so that it stores every tensor the fp16 conversion would
    store in fp16 rounded to fp16, computing in fp32 (see the module docstring).

    ``dtype="bfloat16"``: the same for the bfloat16 conversion (tensors rounded to bfloat16
    by ``Cast`` to bfloat16 and back, weights as :func:`to_bf16` stores them).

    Graph inputs and outputs stay float32 (the outputs hold fp16-rounded values); nodes
    kept in fp32 (``keep_fp32``, and the automatic ones unless ``auto_keep=False``) read
    and write unrounded values, as in the converted model. Weights are rounded as the
    conversion writes them (clamped to +-65504, tiny values to +-2**-24).

    ``cache``: a dict kept between calls on the same model (``debug precision`` emulates it
    once per check): the rounded weights, by name, so each is rounded once.
    """
    upgraded = None
    if low_type(dtype) == BFLOAT16:
        model, upgraded = bf16_ready(model)
    model = copy_model(model, inplace or upgraded is not None)
    normalize_constants(model)
    if types is None:
        types = tensor_types(infer_types(model))
    risky = _risky(model, types, dtype, cache) if auto_keep else None
    decision = decide(model, keep_fp32, auto=auto_keep, types=types, dtype=dtype, risky=risky)
    em = _Emulator(model, set(decision.kept), types, cache, dtype)
    em.graph(model.graph, top=True)
    return Emulation(model, dict(decision.kept), em.rounded)


_RISKY_KEY = "\0risky"  # (the key of the values out of range in ``cache``: no tensor has this name)


def _risky(model, types: Dict[str, int], dtype: str, cache: Optional[Dict[str, bytes]]) -> Dict[str, str]:
    """:func:`risky_values`, looked for once per ``cache`` (``debug precision`` emulates once per check)."""

    if cache is not None and _RISKY_KEY in cache:
        return json.loads(cache[_RISKY_KEY])
    risky = risky_values(model, types, low_type(dtype))
    if cache is not None:
        cache[_RISKY_KEY] = json.dumps(risky).encode()
    return risky


def _round_chain(fresh, src: str, dst: str, hint: str, low: int) -> list:
    """``dst`` = ``src`` rounded to ``low`` (FLOAT16 or BFLOAT16): a Cast to it and back to float32."""

    short = short_name(low)
    mid = fresh(f"{dst}::{short}")
    return [
        cast_node(src, mid, fresh(f"{hint}::to_{short}"), low),
        cast_node(mid, dst, fresh(f"{hint}::to_fp32"), FLOAT),
    ]


class _Emulator:
    """The rewrite behind :func:`emulate`, one graph at a time."""

    def __init__(
        self, model, kept: Set[str], types: Dict[str, int], cache: Optional[Dict[str, bytes]], dtype: str = "float16"
    ):
        self.kept = kept
        self.types = types
        self.cache = cache
        self.dtype = dtype
        self.low = low_type(dtype)
        self.fresh = Names(model).fresh
        self.rounded = 0

    def round_chain(self, src: str, dst: str, hint: str) -> list:
        self.rounded += 1
        return _round_chain(self.fresh, src, dst, hint, self.low)

    def repoint(self, rmap, old: str, new: str) -> None:
        """The converted readers of ``old`` read ``new`` instead."""
        for n in rmap.get(old, ()):
            if n.name not in self.kept:
                for k, i in enumerate(n.input):
                    if i == old:
                        n.input[k] = new

    def users(self, rmap, name: str) -> Tuple[bool, bool]:
        """(read by a converted node, read by a kept node), subgraphs included."""
        readers = rmap.get(name, ())
        return any(n.name not in self.kept for n in readers), any(n.name in self.kept for n in readers)

    def rounded_copy(self, rmap, src: str) -> list:
        """Converted readers of fp32 tensor ``src`` read it rounded (the Casts that do it)."""
        if not self.users(rmap, src)[0]:
            return []
        dst = self.fresh(f"{src}::rounded")
        self.repoint(rmap, src, dst)
        return self.round_chain(src, dst, src)

    def weights(self, g, rmap) -> None:
        """Weights read by converted nodes: rounded (a rounded twin when kept nodes read them too)."""

        new_inits = []
        for t in g.initializer:
            conv, keep = self.users(rmap, t.name) if t.data_type == FLOAT else (False, False)
            if not conv:
                continue
            data = self.rounded_bytes(t)
            target = t
            if keep:
                target = onnx.TensorProto(name=self.fresh(f"{t.name}::fp16"), data_type=FLOAT, dims=t.dims)
                new_inits.append(target)
                self.repoint(rmap, t.name, target.name)
            else:
                del t.float_data[:]
                t.ClearField("data_location")
                del t.external_data[:]
            target.raw_data = data
            self.rounded += 1
        g.initializer.extend(new_inits)

    def rounded_bytes(self, t) -> bytes:
        """Weight ``t``'s values rounded, as float32 raw data (kept in the cache, when there is one)."""
        data = self.cache.get(t.name) if self.cache is not None else None
        if data is None:
            data = round_values(weight_array(t), self.dtype).astype("<f4").tobytes()
            if self.cache is not None:
                self.cache[t.name] = data
        return data

    def constant(self, node) -> None:
        t = constant_tensor(node)
        if t is not None and t.data_type == FLOAT:
            arr = round_values(numpy_helper.to_array(t), self.dtype).astype(np.float32)
            t.CopyFrom(numpy_helper.from_array(arr, t.name))
            self.rounded += 1

    def node(self, node, rmap) -> list:
        """``node`` and the Casts after it."""
        outs = self.float_outputs(node)
        if node.name in self.kept:  # its outputs stay fp32; converted readers get them rounded
            return [node] + self.rounded_copies(rmap, [o for _, o in outs])
        for sub in node_subgraphs(node):
            self.graph(sub, top=False)
        if is_constant_node(node):
            self.constant(node)
            return [node]
        return [node] + self.rounded_outputs(node, outs)

    def float_outputs(self, node) -> List[Tuple[int, str]]:
        """(index, name) of ``node``'s float32 outputs."""
        return [(j, o) for j, o in enumerate(node.output) if o and self.types.get(o) == FLOAT]

    def rounded_copies(self, rmap, names: List[str]) -> list:
        """:meth:`rounded_copy` of each of ``names``, in order."""
        return [c for name in names for c in self.rounded_copy(rmap, name)]

    def rounded_outputs(self, node, outs: List[Tuple[int, str]]) -> list:
        """A converted node makes its float32 outputs ``outs`` (index, name) under fresh names; the
        Casts that round them make them under their own names."""
        tail = []
        for j, o in outs:
            raw = self.fresh(f"{o}::fp32")
            node.output[j] = raw
            tail += self.round_chain(raw, o, o)
        return tail

    def graph(self, g, top: bool) -> None:
        rmap = readers_of(g)
        self.weights(g, rmap)
        new_nodes: list = []
        if top:  # float32 graph inputs: rounded for converted readers
            for vi in g.input:
                if self.types.get(vi.name) == FLOAT:
                    new_nodes += self.rounded_copy(rmap, vi.name)
        for node in list(g.node):
            new_nodes += self.node(node, rmap)
        if not top:
            new_nodes += self.body_outputs(g)
        del g.node[:]
        g.node.extend(new_nodes)

    def body_outputs(self, g) -> list:
        """A body of a converted If/Loop/Scan hands its outputs over in fp16 (a Loop's carried values
        between iterations too): those a kept node inside made are rounded on their way out."""
        made_by_kept = producers(n for n in g.node if n.name in self.kept)
        tail: list = []
        for vi in g.output:
            if vi.name in made_by_kept and self.types.get(vi.name) == FLOAT:
                dst = self.fresh(f"{vi.name}::rounded")
                tail += self.round_chain(vi.name, dst, vi.name)
                vi.name = dst
        return tail


def emulate_fp16(model, keep_fp32: Iterable[str] = (), **kw):
    """:func:`emulate` returning only the model."""
    return emulate(model, keep_fp32, **kw).model


_LOWS = (FLOAT16, BFLOAT16)


def emulate_mixed(model, *, inplace: bool = False, types: Optional[Dict[str, int]] = None) -> Emulation:
    """Emulate a model that already holds float16 or bfloat16 tensors (a converted, mixed model).

    Every float16 (bfloat16) tensor becomes a float32 tensor rounded to fp16 (bf16) after the
    node that produces it (weights and Constants: their values, exactly), so the reduced parts
    run in fp32 with reduced storage; float32 tensors stay as they are. Reduced graph inputs
    are read as given; reduced graph outputs keep their type. ``types``: the model's tensor types
    (name -> element type) when the caller has them (they are inferred otherwise).
    """
    model = copy_model(model, inplace)
    name_nodes(model)
    emulator = _MixedEmulator(model, tensor_types(infer_types(model)) if types is None else types)
    emulator.graph(model.graph, top=True)
    return Emulation(model, {}, emulator.rounded)


def _repoint(nodes, old: str, new: str) -> None:
    """Nodes (and their bodies) that read ``old`` read ``new``."""
    for n in nodes:
        for k, i in enumerate(n.input):
            if i == old:
                n.input[k] = new
        for sub in node_subgraphs(n):
            _repoint(sub.node, old, new)


def _reads(nodes) -> Set[str]:
    """Names that ``nodes`` (and their bodies) read."""
    names: Set[str] = set()
    for n in nodes:
        names.update(i for i in n.input if i)
        for sub in node_subgraphs(n):
            names |= _reads(sub.node)
    return names


def _retype_attrs(node) -> None:
    """Attributes that make float16/bfloat16 values: make float32 ones (rounded afterwards)."""

    for a in node.attribute:
        if a.name in ("to", "dtype") and a.i in _LOWS and (node.op_type == "Cast" or node.op_type in DTYPE_OPS):
            a.i = FLOAT
        if a.type == onnx.AttributeProto.TENSOR and a.t.data_type in _LOWS:
            arr = numpy_helper.to_array(a.t).astype(np.float32)
            a.t.CopyFrom(numpy_helper.from_array(arr, a.t.name))


def _widen(t) -> None:
    """A float16 or bfloat16 weight -> the same values in float32, in place (one copy of the data)."""

    if t.HasField("raw_data") and not t.external_data:
        t.raw_data = widened(t.raw_data, t.data_type).tobytes()
        t.data_type = FLOAT
        return
    t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float32), t.name))


class _MixedEmulator:
    """:func:`emulate_mixed`'s rewrite, one graph (and its bodies) at a time."""

    def __init__(self, model, types: Dict[str, int]):
        self.types = types
        self.fresh = Names(model).fresh
        self.rounded = 0
        self.graph_nodes: list = []  # the top graph's nodes, as the model holds them
        self.top_reads: Set[str] = set()  # what they read

    def graph(self, g, top: bool) -> None:
        for t in g.initializer:
            if t.data_type in _LOWS:
                _widen(t)
        if top:
            self.graph_nodes = list(g.node)
            self.top_reads = _reads(g.node)
        new_nodes = self._inputs(g, top)
        out_types = {vi.name: vi.type.tensor_type.elem_type for vi in g.output}
        for node in list(g.node):
            new_nodes += self._node(node, top, out_types)
        del g.node[:]
        g.node.extend(new_nodes)
        _widen_value_types(g, top)

    def _node(self, node, top: bool, out_types: Dict[str, int]) -> list:
        """``node`` (its bodies rewritten, its attributes making float32) and the Casts after it."""
        for sub in node_subgraphs(node):
            self.graph(sub, top=False)
        _retype_attrs(node)
        return [node] + self._round_outputs(node, top, out_types)

    def _inputs(self, g, top: bool) -> list:
        """Casts that read the top graph's reduced inputs as fp32; bodies' inputs retyped."""

        nodes = []
        for vi in g.input:
            if vi.type.tensor_type.elem_type in _LOWS:
                if top:
                    up = self.fresh(f"{vi.name}::fp32")
                    _repoint(g.node, vi.name, up)
                    nodes.append(cast_node(vi.name, up, self.fresh(f"{vi.name}::to_fp32"), FLOAT))
                else:  # a body's input: its values come from fp32 (rounded) tensors now
                    vi.type.tensor_type.elem_type = FLOAT
        return nodes

    def _round_outputs(self, node, top: bool, out_types: Dict[str, int]) -> list:
        """The node's reduced outputs computed in fp32 and rounded (Cast to fp16/bf16 and back)."""

        fresh = self.fresh
        tail = []
        for j, o in enumerate(node.output):
            low = self.types.get(o) if o else None
            if low not in _LOWS:
                continue
            raw = fresh(f"{o}::fp32")
            node.output[j] = raw
            if top and out_types.get(o) == low:
                tail += self._reduced_output(raw, o, low)
            else:
                tail += _round_chain(fresh, raw, o, o, low)
            self.rounded += 1
        return tail

    def _reduced_output(self, raw: str, o: str, low: int) -> list:
        """The Casts of a graph output ``o`` that keeps its reduced type ``low`` (a model's own, or a
        tensor marked as an output), computed in fp32 as ``raw``: the readers inside the graph read
        the same values widened to float32."""
        fresh = self.fresh
        casts = [cast_node(raw, o, fresh(f"{o}::to_{short_name(low)}"), low)]
        if self._read_inside(o):
            wide = fresh(f"{o}::rounded")
            _repoint(self.graph_nodes, o, wide)
            casts.append(cast_node(o, wide, fresh(f"{o}::to_fp32"), FLOAT))
        return casts

    def _read_inside(self, name: str) -> bool:
        """Whether a node of the top graph (or of its bodies) reads ``name``."""
        return name in self.top_reads


def _widen_value_types(g, top: bool) -> None:
    """A body's reduced outputs typed float32 (the top graph's keep their types); the value infos
    dropped (those of renamed tensors would now be wrong)."""
    if not top:
        for vi in g.output:
            if vi.type.tensor_type.elem_type in _LOWS:
                vi.type.tensor_type.elem_type = FLOAT
    del g.value_info[:]


def emulate_any(model, keep_fp32: Iterable[str] = (), **kw) -> Emulation:
    """:func:`emulate_mixed` for a model that already holds float16 or bfloat16, else :func:`emulate`
    (``dtype=`` in ``kw``: the precision a float32 model is emulated in)."""
    if reduced_types(model):
        if keep_fp32:
            raise UsageError("the model is already mixed precision: its float32 nodes stay float32; drop --keep-fp32")
        return emulate_mixed(model, inplace=kw.get("inplace", False))
    return emulate(model, keep_fp32, **kw)

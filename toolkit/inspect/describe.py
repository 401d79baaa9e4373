"""Describe a model or a data file: as a plain dict (for JSON) and as text lines.

The text format is stable and grep-able: node lines look like
``Node 0    | conv1 [Op: Conv]``, tensors like ``{x [dtype=float32, shape=(1, 3)]}``.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

from toolkit.core.errors import ToolkitError, UsageError, reraise_bug
from toolkit.core.graph.graphs import walk_graphs
from toolkit.core.meta import TensorMeta, dtype_from_onnx, format_shape
from toolkit.core.io.model import value_info_meta

INDENT = "    "
# Without --mode=full, list at most this many initializers (big models have hundreds).
INIT_LIST_LIMIT = 16

# what onnx and numpy raise on a tensor or attribute they cannot read (corrupt, truncated, unknown type)
_UNREADABLE = (ValueError, TypeError, KeyError, IndexError, AttributeError)


@dataclass(frozen=True)
class Show:
    """What to include: nodes ("layers"), their attributes, and weight values."""

    layers: bool = False
    attrs: bool = False
    weights: bool = False

    @classmethod
    def from_mode(cls, mode: str) -> "Show":
        mode = (mode or "none").lower()
        table = {
            "none": cls(),
            "basic": cls(layers=True),
            "attrs": cls(layers=True, attrs=True),
            "full": cls(layers=True, attrs=True, weights=True),
        }
        if mode not in table:

            raise UsageError(f"unknown --mode '{mode}'; use one of: none, basic, attrs, full")
        return table[mode]

    @classmethod
    def from_words(cls, words) -> "Show":
        allowed = {"layers", "attrs", "weights"}
        flags = set()
        for w in words or ():
            w = w.lower()
            if w not in allowed:
                raise UsageError(f"unknown --show value '{w}'; use any of: layers, attrs, weights")
            flags.add(w)
        # attributes and weights are shown under nodes, so they imply layers
        layers = bool(flags)
        return cls(layers=layers or "layers" in flags, attrs="attrs" in flags, weights="weights" in flags)

    def union(self, other: "Show") -> "Show":
        return Show(self.layers or other.layers, self.attrs or other.attrs, self.weights or other.weights)


# --------------------------------------------------------------------------- tensors


def _tensor_proto_meta(t) -> TensorMeta:
    return TensorMeta(t.name, tuple(int(d) for d in t.dims), dtype_from_onnx(t.data_type))


def _meta_dict(meta: TensorMeta) -> dict:
    return {"name": meta.name, "dtype": meta.dtype, "shape": None if meta.shape is None else list(meta.shape)}


def _meta_text(meta: TensorMeta, prefix: str = "") -> str:
    if meta.dtype is None and meta.shape is None:  # nothing known (no value_info): the name alone, as the reference
        return f"{prefix}{meta.name}"
    dt = meta.dtype or "?"
    return f"{prefix}{meta.name} [dtype={dt}, shape={format_shape(meta.shape)}]"


def _meta_list_text(entries: List[str]) -> str:
    return "{" + ", ".join(entries) + "}"


def exact_value(value):
    """A min or max as JSON holds it exactly: an integer as int (int64 beyond 2**53 would round as
    a float), anything else as float."""
    return int(value) if isinstance(value, np.integer) else float(value)


def _weight_summary(arr) -> dict:
    """A weight's statistics and a preview of its values (its dtype and shape are shown apart)."""
    info = summarize_array(arr)
    info["preview"] = values_text(arr, full=False)
    info.pop("dtype", None)
    info.pop("shape", None)
    return info


def summarize_array(arr, show_values: bool = False, max_elems: int = 12) -> dict:
    """Statistics of an array (mean, std, min, max, ...) and optionally its values."""

    arr = np.asarray(arr)
    dtype = "string" if arr.dtype.kind in "OUS" else str(arr.dtype)
    info: dict = {"dtype": dtype, "shape": list(arr.shape), "size": int(arr.size)}
    if _has_statistics(arr):
        info.update(_statistics(arr))
    if show_values or _few_numbers(arr, max_elems):
        info["values"] = arr.tolist()
    return info


def _has_statistics(arr) -> bool:
    """Whether ``arr`` holds numbers to reduce (V: bfloat16/float8 from ml_dtypes)."""
    return arr.size > 0 and arr.dtype.kind in "biufV" and np.can_cast(arr.dtype, np.float64)


def _few_numbers(arr, max_elems: int) -> bool:
    """Whether ``arr`` holds numbers, at least one and at most ``max_elems`` (shown as they are)."""
    return 0 < arr.size <= max_elems and arr.dtype.kind in "biuf"


def as_float(arr):
    """A numeric array as floats to reduce: itself when float32 or wider, else as float64."""
    return arr if arr.dtype.kind == "f" and arr.dtype.itemsize >= 4 else arr.astype(np.float64)


def _statistics(arr) -> dict:
    """mean, std, min, max, median and percentiles of the finite values of a numeric array, and
    the counts of its NaN and infinite values (when there are some)."""
    data = as_float(arr)
    finite = np.isfinite(data)
    vals = data if finite.all() else data[finite]
    stats: dict = {}
    if vals.size:
        exact = arr if arr.dtype.kind in "iu" else vals  # (int64 beyond 2**53 would round as a float)
        p90, p95, p99 = np.percentile(vals, [90, 95, 99])
        stats.update(
            mean=float(np.mean(vals)),
            std=float(np.std(vals)),
            min=exact_value(np.min(exact)),
            max=exact_value(np.max(exact)),
            median=float(np.median(vals)),
            p90=float(p90),
            p95=float(p95),
            p99=float(p99),
        )
    n_nan, n_inf = int(np.isnan(data).sum()), int(np.isinf(data).sum())
    if n_nan:
        stats["nan"] = n_nan
    if n_inf:
        stats["inf"] = n_inf
    return stats


def stats_text(info: dict, percentiles: bool = False) -> str:
    if "mean" not in info:
        return "empty" if not info.get("size") else "no statistics for this dtype"
    parts = [f"mean={info['mean']:.6g}", f"std={info['std']:.6g}", f"min={info['min']:.6g}", f"max={info['max']:.6g}"]
    if "median" in info and percentiles:
        parts.append(f"median={info['median']:.6g}")
        parts += [f"{p}={info[p]:.6g}" for p in ("p90", "p95", "p99") if p in info]
    if info.get("nan"):
        parts.append(f"nan={info['nan']}")
    if info.get("inf"):
        parts.append(f"inf={info['inf']}")
    return ", ".join(parts)


def values_text(arr, full: bool, num_items: Optional[int] = None, line_width: Optional[int] = None) -> str:
    """``arr`` as text: every value (``full``) or a summary; ``num_items`` values at each end of
    every dimension (-1: all), lines of at most ``line_width`` characters (-1: a line per row)."""

    opts: Dict[str, Any] = dict(threshold=sys.maxsize if full else 24, edgeitems=3, max_line_width=110, precision=6)
    if num_items is not None:
        opts.update(_items_options(num_items))
    if line_width is not None:
        opts["max_line_width"] = sys.maxsize if line_width < 0 else max(line_width, 1)
    return np.array2string(np.asarray(arr), **opts)


def _items_options(num_items: int) -> Dict[str, int]:
    """numpy's print options that show ``num_items`` values at each end of every dimension (-1: all)."""
    if num_items < 0:
        return dict(threshold=sys.maxsize)
    return dict(threshold=0, edgeitems=max(num_items, 1) if num_items else 0)


# --------------------------------------------------------------------------- graphs


def _text(value) -> str:
    """A text field of the model (protobuf hands back bytes when it is not valid UTF-8)."""
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else str(value)


# AttributeProto's types of numbers and strings -> (field, element as JSON holds it)
_ONE_VALUE: Dict[int, Tuple[str, Callable[[Any], Any]]] = {1: ("f", float), 2: ("i", int), 3: ("s", _text)}  # FLOAT, INT, STRING
_LIST: Dict[int, Tuple[str, Callable[[Any], Any]]] = {6: ("floats", float), 7: ("ints", int), 8: ("strings", _text)}  # FLOATS, INTS, STRINGS


def _attr_value(attr, show: Show):
    """(json value, text) for an attribute; subgraphs are returned separately."""
    from onnx import AttributeProto, helper

    t = attr.type
    if t in _ONE_VALUE:
        field, convert = _ONE_VALUE[t]
        value = convert(getattr(attr, field))
        return value, repr(value)
    if t in _LIST:
        field, convert = _LIST[t]
        values = [convert(x) for x in getattr(attr, field)]
        return values, repr(values)
    if t == AttributeProto.TENSOR:
        return _tensor_attr(attr.t, show)
    if t in (AttributeProto.GRAPH, AttributeProto.GRAPHS):
        return None, None
    try:
        v = helper.get_attribute_value(attr)
        return str(v), str(v)
    except _UNREADABLE as exc:
        reraise_bug(exc)
        return None, "<unreadable>"


def _tensor_attr(tensor, show: Show):
    """(json value, text) for a tensor attribute: its values when it has at most 8, else (with
    ``show.weights``) summarised like initializers (statistics and a preview), never printed in
    full: a Constant node can hold megabytes of values."""
    from onnx import numpy_helper

    meta = _tensor_proto_meta(tensor)
    d = _meta_dict(meta)
    text = f"Tensor [dtype={meta.dtype}, shape={format_shape(meta.shape)}]"
    try:
        arr = numpy_helper.to_array(tensor)
        if arr.size <= 8:
            d["values"] = arr.tolist()
            text += " " + values_text(arr, True).replace("\n", " ")
        elif show.weights:
            info = _weight_summary(arr)
            info.pop("values", None)
            d.update(info)
            text += f" | {stats_text(info)} | " + " ".join(info["preview"].split())
    except _UNREADABLE as exc:  # a value numpy cannot read (an exotic or corrupt tensor): shown without values
        reraise_bug(exc)
    return d, text


class GraphDescriber:
    """Builds the description of one (sub)graph, resolving tensor metadata in scope."""

    def __init__(
        self, show: Show, outer: Optional[Dict[str, TensorMeta]] = None, outer_inits=None, external_base_dir=None
    ):
        self.show = show
        self.outer = dict(outer or {})
        self.outer_inits = set(outer_inits or ())
        self.external_base_dir = external_base_dir  # where weights left on disk are read from

    def describe(self, graph) -> dict:
        init_metas = [_tensor_proto_meta(t) for t in graph.initializer]
        inits = {m.name for m in init_metas}
        metas = self._metas_in_scope(graph, init_metas)
        desc: dict = {
            "name": graph.name,
            "inputs": _value_dicts(graph.input, skip=inits),
            "outputs": _value_dicts(graph.output),
            "initializers": [self._initializer(t, m) for t, m in zip(graph.initializer, init_metas)],
            "node_count": len(graph.node),
        }
        if self.show.layers:
            desc["nodes"] = self._nodes(graph, metas, inits | self.outer_inits)
        return desc

    def _nodes(self, graph, metas: Dict[str, TensorMeta], inits) -> List[dict]:
        return [self._node(i, n, metas, inits) for i, n in enumerate(graph.node)]

    def _metas_in_scope(self, graph, init_metas: List[TensorMeta]) -> Dict[str, TensorMeta]:
        """The tensors the graph's nodes can read: the outer graphs', then its own (value infos
        first, initializers where no value info names them)."""
        metas: Dict[str, TensorMeta] = dict(self.outer)
        for vi in list(graph.input) + list(graph.value_info) + list(graph.output):
            m = value_info_meta(vi)
            metas[m.name] = m
        for m in init_metas:
            metas.setdefault(m.name, m)
        return metas

    def _initializer(self, t, meta: TensorMeta) -> dict:
        entry = _meta_dict(meta)
        if self.show.weights:
            entry.update(self._weight_summary(t))
        return entry

    def _weight_summary(self, t) -> dict:
        from onnx import numpy_helper
        from onnx.external_data_helper import uses_external_data

        if uses_external_data(t) and not t.raw_data:
            return self._external_summary(t)
        try:
            arr = numpy_helper.to_array(t)
        except _UNREADABLE as exc:
            reraise_bug(exc)
            return _unreadable(exc)
        return _weight_summary(arr)

    def _external_summary(self, t) -> dict:
        """:meth:`_weight_summary` of a weight left on disk (read when the folder is known)."""
        if self.external_base_dir is None:
            return {"values": None, "note": "external data not loaded"}
        try:
            arr = _read_external(t, self.external_base_dir)
        except (OSError, ToolkitError, *_UNREADABLE) as exc:  # a summary line, not a failure
            reraise_bug(exc)
            return _unreadable(exc)
        return _weight_summary(arr)  # (one weight in memory at a time)

    def _attributes(self, node) -> dict:
        attrs = {}
        for attr in _plain_attributes(node):
            value, text = _attr_value(attr, self.show)
            attrs[attr.name] = {"value": value, "text": text}
        return attrs

    def _node(self, index: int, node, metas: Dict[str, TensorMeta], inits) -> dict:
        entry = {
            "index": index,
            "name": node.name,
            "op": node.op_type,
            "domain": node.domain or "",
            "inputs": [_operand(n, metas, inits) for n in node.input],
            "outputs": [_operand(n, metas, inits) for n in node.output],
        }
        if self.show.attrs:
            entry["attributes"] = self._attributes(node)
        subgraphs = _named_subgraphs(node)
        if subgraphs:
            inner = GraphDescriber(self.show, metas, inits, self.external_base_dir)
            entry["subgraphs"] = {name: inner.describe(g) for name, g in subgraphs}
        return entry


def _unreadable(exc: BaseException) -> dict:
    """The summary of a weight whose values cannot be read."""
    return {"values": None, "note": f"unreadable: {exc}"}


def _value_dicts(value_infos, skip=frozenset()) -> List[dict]:
    """The description of each value of ``value_infos`` not named in ``skip``."""
    return [_meta_dict(value_info_meta(vi)) for vi in value_infos if vi.name not in skip]


def _operand(name: str, metas: Dict[str, TensorMeta], inits) -> dict:
    """The description of a node's input or output ``name`` (``inits``: the initializers' names)."""
    if name == "":
        return {"name": "", "omitted": True}
    d = _meta_dict(metas.get(name, TensorMeta(name)))
    if name in inits:
        d["initializer"] = True
    return d


def _plain_attributes(node) -> List[Any]:
    """The attributes of a node that are not graphs (those are its bodies)."""
    from onnx import AttributeProto

    return [attr for attr in node.attribute if attr.type not in (AttributeProto.GRAPH, AttributeProto.GRAPHS)]


def _named_subgraphs(node) -> List[Tuple[str, Any]]:
    """(name, graph) of each body of a node: ``then_branch``, ``body``, ``name[k]`` in a list of graphs."""
    from onnx import AttributeProto

    subgraphs: List[Tuple[str, Any]] = []
    for attr in node.attribute:
        if attr.type == AttributeProto.GRAPH:
            subgraphs.append((attr.name, attr.g))
        elif attr.type == AttributeProto.GRAPHS:
            subgraphs.extend((f"{attr.name}[{k}]", g) for k, g in enumerate(attr.graphs))
    return subgraphs


def _read_external(t, base_dir: str):
    """A weight still on disk, as an array: memory-mapped when numpy has its dtype."""
    from onnx import numpy_helper
    from toolkit.core.io.weights import load_tensor, ref_source

    src, offset, length = ref_source(t, base_dir)
    dtype = _numpy_dtype(t.data_type)
    shape = tuple(int(d) for d in t.dims)
    count = int(np.prod(shape, dtype=np.int64))
    if dtype is not None and dtype.kind in "biuf" and dtype.itemsize * count == length:
        if count == 0:
            return np.zeros(shape, dtype)
        return np.memmap(src, dtype=dtype.newbyteorder("<"), mode="r", offset=offset, shape=shape)
    copy = type(t)()
    copy.CopyFrom(t)
    load_tensor(copy, base_dir)
    return numpy_helper.to_array(copy)


def _numpy_dtype(data_type: int):
    """numpy's dtype of an ONNX element type; None for an unknown or exotic one."""
    from onnx import helper

    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(data_type))
    except _UNREADABLE as exc:
        reraise_bug(exc)
        return None


def describe_model(model, show: Show, infer: bool = False, external_base_dir: Optional[str] = None) -> dict:
    """Describe ``model``; with ``infer``, ONNX shape inference fills in the dtype and shape of
    intermediate tensors where it can (the model itself is not modified); without it they show
    what the model records (its value_info).
    Weights left on disk (a model loaded with ``load_external_data=False``) are read from
    ``external_base_dir`` one at a time, when shown."""
    graph, body_metas = _inferred_view(model) if infer and show.layers else (model.graph, {})
    graph_desc = GraphDescriber(show, outer=body_metas, external_base_dir=external_base_dir).describe(graph)
    opsets = {(o.domain or "ai.onnx"): int(o.version) for o in model.opset_import}
    return {
        "name": model.graph.name,
        "ir_version": int(model.ir_version),
        "opsets": opsets,
        "producer": _producer(model),
        "functions": [f"{f.domain}.{f.name}" if f.domain else f.name for f in model.functions],
        "graph": graph_desc,
    }


def _inferred_view(model) -> Tuple[Any, Dict[str, TensorMeta]]:
    """(the top graph with the value_info ONNX shape inference finds, the metadata it finds inside
    If/Loop/Scan bodies by name); the model itself is not modified."""
    from toolkit.core.io.model import infer_shapes
    from toolkit.core.shapes import light_copy

    # weights replaced by shape-only stubs: inference does not copy them twice
    inferred = infer_shapes(light_copy(model))
    if inferred is model:
        return model.graph, {}
    # keep the original initializers (inference copies may lack loaded data), and the
    # types inference found inside If/Loop/Scan bodies (their nodes are the original's)
    return _with_value_info(model.graph, inferred.graph), _body_value_info(inferred.graph)


def _producer(model) -> str:
    """The producer's name and version."""
    version = " " + _text(model.producer_version) if model.producer_version else ""
    return (_text(model.producer_name) + version).strip()


def _body_value_info(graph) -> Dict[str, TensorMeta]:
    """name -> TensorMeta of the value_info of every If/Loop/Scan body below ``graph``."""

    out: Dict[str, TensorMeta] = {}
    for g in walk_graphs(graph):
        if g is not graph:
            for vi in g.value_info:
                out.setdefault(vi.name, value_info_meta(vi))
    return out


def _with_value_info(original, inferred):
    """A shallow stand-in graph: the original's fields plus the inferred value_info."""

    class _G:
        pass

    g = _G()
    for field in ("name", "input", "output", "initializer", "node"):
        setattr(g, field, getattr(original, field))
    g.value_info = list(original.value_info) + list(inferred.value_info)
    return g


# --------------------------------------------------------------------------- text


def _tensor_text(d: dict) -> str:
    if d.get("omitted"):
        return "<omitted>"
    meta = TensorMeta(d["name"], None if d["shape"] is None else tuple(d["shape"]), d["dtype"])
    return _meta_text(meta, "Initializer | " if d.get("initializer") else "")


def _graph_lines(g: dict, show: Show, ind: str) -> List[str]:
    lines = []
    lines.append(f"{ind}---- {len(g['inputs'])} Graph Input(s) ----")
    lines.append(ind + _meta_list_text([_tensor_text(t) for t in g["inputs"]]))
    lines.append("")
    lines.append(f"{ind}---- {len(g['outputs'])} Graph Output(s) ----")
    lines.append(ind + _meta_list_text([_tensor_text(t) for t in g["outputs"]]))
    lines.append("")
    lines.append(f"{ind}---- {len(g['initializers'])} Initializer(s) ----")
    lines.extend(_weight_lines(g["initializers"], ind) if show.weights else _initializer_list(g["initializers"], ind))
    lines.append("")
    lines.append(f"{ind}---- {g['node_count']} Node(s) ----")
    for node in g.get("nodes", ()):
        lines.extend(_node_lines(node, show, ind))
    return lines


def _weight_lines(inits: List[dict], ind: str) -> List[str]:
    """Each initializer with its statistics and a preview of its values (or why it has none)."""
    lines = []
    for t in inits:
        lines.append(f"{ind}Initializer | {_tensor_text(t)}")
        if t.get("values", 0) is None:
            lines.append(f"{ind}    ({t.get('note', 'no values')})")
        else:
            lines.append(f"{ind}    Stats: {stats_text(t)}")
            lines.extend(f"{ind}    {vl}" for vl in str(t.get("preview", "")).splitlines())
    return lines


def _initializer_list(inits: List[dict], ind: str) -> List[str]:
    """The first :data:`INIT_LIST_LIMIT` initializers on one line."""
    shown = [_tensor_text(t) for t in inits[:INIT_LIST_LIMIT]]
    if len(inits) > INIT_LIST_LIMIT:
        shown.append(f"... {len(inits) - INIT_LIST_LIMIT} more (--mode=full or --json lists all)")
    return [ind + _meta_list_text(shown)]


def _node_lines(node: dict, show: Show, ind: str) -> List[str]:
    op = node["op"] if node["domain"] in ("", "ai.onnx") else f"{node['op']} ({node['domain']})"
    head = f"Node {node['index']:<4} | {node['name']} [Op: {op}]"
    pad = ind + " " * len(f"Node {node['index']:<4} ")
    lines = [ind + head]
    lines.append(pad + _meta_list_text([_tensor_text(t) for t in node["inputs"]]))
    lines.append(pad + "-> " + _meta_list_text([_tensor_text(t) for t in node["outputs"]]))
    lines.extend(_attribute_lines(node, pad))
    for name, sub in node.get("subgraphs", {}).items():
        lines.append(f"{pad}---- Subgraph: {name} ({sub['name']}) ----")
        lines.extend(_graph_lines(sub, show, pad + INDENT))
    return lines


def _attribute_lines(node: dict, pad: str) -> List[str]:
    """A node's attributes, a line each under a heading (none without attributes)."""
    attrs = node.get("attributes")
    if not attrs:
        return []
    return [pad + "---- Attributes ----"] + [f"{pad}{node['name']}.{name} = {a['text']}" for name, a in attrs.items()]


def model_text(desc: dict, show: Show) -> List[str]:
    opsets = ", ".join(f"{d} {v}" if d != "ai.onnx" else f"{v}" for d, v in desc["opsets"].items())
    lines = ["==== ONNX Model ===="]
    lines.append(
        f"{INDENT}Name: {desc['name']} | ONNX Opset: {opsets or '?'} | IR version: {desc['ir_version']}"
    )
    if desc["producer"]:
        lines.append(f"{INDENT}Producer: {desc['producer']}")
    if desc["functions"]:
        lines.append(f"{INDENT}Functions: {', '.join(desc['functions'])}")
    lines.append("")
    lines.extend(_graph_lines(desc["graph"], show, INDENT))
    return lines

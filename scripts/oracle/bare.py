"""Bare runtimes for the oracle: ONNX-Runtime, OpenVINO, fp16 storage emulation, the comparison rule,
data files and subgraph surgery, written with onnxruntime, openvino, onnx and numpy only.

Nothing here imports toolkit: the oracle re-checks toolkit's verdicts from the runtimes themselves.
"""

from __future__ import annotations

import base64
import io
import json
import os
import tempfile
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

Feeds = Dict[str, np.ndarray]

# ---------------------------------------------------------------------------------------------- data files


def _decode(obj):
    if isinstance(obj, dict):
        key = "array" if "array" in obj else "__polygraphy_encoded_ndarray" if "__polygraphy_encoded_ndarray" in obj else None
        if key is not None and isinstance(obj[key], str):
            return np.load(io.BytesIO(base64.b64decode(obj[key])), allow_pickle=False)
        if "values" in obj and obj.get("polygraphy_class") in ("LazyArray", "LazyNumpyArray"):
            return _decode(obj["values"])
        return {k: _decode(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_decode(v) for v in obj]
    return obj


def read_inputs(path: str) -> List[Feeds]:
    """Every iteration of an inputs file (Polygraphy JSON list of dicts, or .npz: one iteration)."""
    if path.endswith(".npz"):
        with np.load(path, allow_pickle=False) as z:
            return [{k: z[k] for k in z.files}]
    with open(path) as f:
        data = _decode(json.load(f))
    return data if isinstance(data, list) else [data]


def _encode(arr: np.ndarray) -> dict:
    buf = io.BytesIO()
    np.save(buf, np.asarray(arr), allow_pickle=False)
    return {"array": base64.b64encode(buf.getvalue()).decode(), "polygraphy_class": "ndarray"}


def write_outputs(path: str, runner: str, iterations: Sequence[Mapping[str, np.ndarray]]) -> None:
    """A Polygraphy RunResults JSON file with one runner."""
    its = [{"outputs": {k: {"values": _encode(v), "polygraphy_class": "LazyArray"} for k, v in it.items()},
            "runtime": 0.0, "runner_name": runner, "polygraphy_class": "IterationResult"} for it in iterations]
    with open(path, "w") as f:
        json.dump({"lst": [[runner, its]], "polygraphy_class": "RunResults"}, f)


def write_npz(path: str, feeds: Mapping[str, np.ndarray]) -> None:
    np.savez(path, **{k: np.asarray(v) for k, v in feeds.items()})


# ---------------------------------------------------------------------------------------------- runtimes


def ort_run(model, feeds: Feeds, opt: str = "all", outputs: Optional[Sequence[str]] = None) -> Feeds:
    """ONNX-Runtime, CPU provider; ``opt`` 'all' is the default session (what users run)."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    if opt != "all":
        so.graph_optimization_level = {"disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
                                       "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
                                       "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED}[opt]
    src = model if isinstance(model, str) else model.SerializeToString()
    sess = ort.InferenceSession(src, so, providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]
    outs = list(outputs) if outputs else [o.name for o in sess.get_outputs()]
    vals = sess.run(outs, {k: feeds[k] for k in names})
    return dict(zip(outs, vals))


def ov_run(model, feeds: Feeds, precision: Optional[str] = "f32") -> Feeds:
    """OpenVINO on the CPU; ``precision`` None leaves the device's default (bf16 on bf16 CPUs)."""
    import openvino as ov

    core = ov.Core()
    if isinstance(model, str):
        m = core.read_model(model)
    else:
        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, "m.onnx")
            onnx.save(model, p)
            m = core.read_model(p)
    if m.is_dynamic():  # compiled for the feed's shapes, as toolkit's runner does (kernels differ in bf16)
        shapes = {}
        for port in m.inputs:
            name = next((n for n in port.get_names() if n in feeds), port.get_any_name())
            shapes[port] = ov.PartialShape(list(np.asarray(feeds[name]).shape))
        m.reshape(shapes)
    cfg = {} if precision is None else {"INFERENCE_PRECISION_HINT": precision}
    compiled = core.compile_model(m, "CPU", cfg)
    feed = {}
    for port in compiled.inputs:
        name = next((n for n in port.get_names() if n in feeds), port.get_any_name())
        feed[name] = feeds[name]
    res = compiled(feed)
    out: Feeds = {}
    for port in compiled.outputs:
        for name in port.get_names():
            out[name] = np.asarray(res[port])
    return out


def run_spec(spec: str, model, feeds: Feeds, mark: bool = False) -> Feeds:
    """A runner as toolkit's spec names it: onnxrt, onnxrt:opt=disable, onnxrt:fp16, openvino[:precision=P].
    ``mark``: every tensor of the top graph an output too (ONNX-Runtime runners only)."""
    kind, _, opts = spec.partition(":")
    kv = dict(o.split("=", 1) for o in opts.split(",") if "=" in o)
    if mark and kind != "onnxrt":
        raise ValueError(f"oracle: no marked run for {spec}")
    if kind == "onnxrt":
        m = model if not isinstance(model, str) else onnx.load(model)
        names = graph_output_names(m) + ([t for t in all_tensors(m) if t not in graph_output_names(m)] if mark else [])
        if mark:
            m = with_outputs(m, names)
        if "fp16" in opts.split(","):
            return ort_run(emulate_fp16(m), feeds, opt=kv.get("opt", "disable"), outputs=names)
        if not mark and isinstance(model, str):
            return ort_run(model, feeds, opt=kv.get("opt", "all"))
        return ort_run(m, feeds, opt=kv.get("opt", "all"), outputs=names)
    if kind == "openvino":
        return ov_run(model, feeds, precision=kv.get("precision"))
    raise ValueError(f"oracle: no bare runner for {spec}")


def graph_output_names(model: onnx.ModelProto) -> List[str]:
    return [o.name for o in model.graph.output]


# ---------------------------------------------------------------------------------------------- fp16 emulation

FP16_MAX = 65504.0
FP16_TINY = 2.0 ** -24


def round_weight(arr: np.ndarray) -> np.ndarray:
    """A float32 weight as an fp16 conversion stores it: clamped to +-65504, tiny nonzero values to +-2^-24."""
    a = np.clip(arr.astype(np.float32), -FP16_MAX, FP16_MAX)
    tiny = (a != 0) & (np.abs(a) < FP16_TINY)
    a = np.where(tiny, np.sign(a) * FP16_TINY, a)
    return a.astype(np.float16).astype(np.float32)


def _float_tensors(model: onnx.ModelProto) -> set:
    inferred = onnx.shape_inference.infer_shapes(model)
    g = inferred.graph
    return {v.name for v in list(g.value_info) + list(g.output) + list(g.input)
            if v.type.tensor_type.elem_type == TensorProto.FLOAT}


def emulate_fp16(model: onnx.ModelProto) -> onnx.ModelProto:
    """fp16 storage emulated in fp32: every float32 tensor of the top graph (graph inputs, weights, node outputs)
    rounded to fp16 (Cast to float16 and back) where it is made. Only for models whose every float op has an
    fp16 kernel (the oracle's made models); If/Loop bodies are not rounded."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    floats = _float_tensors(m)
    g = m.graph
    for init in g.initializer:
        if init.data_type == TensorProto.FLOAT:
            init.CopyFrom(numpy_helper.from_array(round_weight(numpy_helper.to_array(init)), init.name))
    nodes: List[onnx.NodeProto] = []
    rename: Dict[str, str] = {}
    for inp in g.input:
        if inp.name in floats:
            rename[inp.name] = inp.name + "__oracle_r"
            nodes += _round_pair(inp.name, rename[inp.name])
    for node in g.node:
        for k, name in enumerate(node.input):
            if name in rename:
                node.input[k] = rename[name]
        new = onnx.NodeProto()
        new.CopyFrom(node)
        nodes += _with_rounded_outputs(new, floats)
    del g.node[:]
    g.node.extend(nodes)
    return m


def _with_rounded_outputs(node, names) -> list:
    """``node`` writing each of its outputs in ``names`` to a raw tensor, followed by the nodes that
    round that raw tensor to fp16 under the output's own name."""
    pairs = []
    for k, name in enumerate(list(node.output)):
        if name and name in names:
            raw = name + "__oracle_raw"
            node.output[k] = raw
            pairs += _round_pair(raw, name)
    return [node] + pairs


def _round_pair(src: str, dst: str) -> List[onnx.NodeProto]:
    mid = dst + "__oracle_h"
    return [helper.make_node("Cast", [src], [mid], to=TensorProto.FLOAT16, name=mid + "_c16"),
            helper.make_node("Cast", [mid], [dst], to=TensorProto.FLOAT, name=mid + "_c32")]


# ---------------------------------------------------------------------------------------------- comparison

INT_TYPES = {2: np.uint8, 3: np.int8, 4: np.uint16, 5: np.int16, 6: np.int32, 7: np.int64, 12: np.uint32,
             13: np.uint64}


def errors(a: np.ndarray, b: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """abs and rel error of a against the reference b (equal infinities and NaN vs NaN: no error)."""
    wdt = np.float64 if (a.dtype.kind in "iub" or b.dtype.kind in "iub" or np.float64 in (a.dtype, b.dtype)) \
        else np.float32
    fa, fb = a.astype(wdt), b.astype(wdt)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        d = np.abs(fa - fb)
        bad = ~np.isfinite(d)
        same = (fa == fb) | (np.isnan(fa) & np.isnan(fb))
        d[bad & same] = 0
        d[bad & ~same] = np.inf
        ab = np.abs(fb)
        rel = np.divide(d, ab, out=np.zeros_like(d), where=ab != 0)
        rel[(ab == 0) & (d != 0)] = np.inf
        rel[np.isnan(rel)] = np.inf
    return d, rel


def compare(a: np.ndarray, b: np.ndarray, atol: float, rtol: float, skip: Optional[np.ndarray] = None) -> dict:
    """The elementwise rule: an element passes when abs <= atol or rel <= rtol; ``skip`` elements are not compared.
    A comparison of zero elements has not passed."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        return {"passed": False, "compared": 0, "why": f"shapes {a.shape} vs {b.shape}", "max_abs": None,
                "mismatches": None}
    if a.dtype.kind in "OUS" or b.dtype.kind in "OUS":
        eq = a.astype(str) == b.astype(str)
        return {"passed": bool(eq.all()) and a.size > 0, "compared": int(a.size), "max_abs": None,
                "mismatches": int((~eq).sum()), "skipped": 0}
    keep = np.ones(a.shape, bool) if skip is None else ~skip
    n = int(keep.sum())
    if n == 0:
        return {"passed": False, "compared": 0, "why": "no element compared", "max_abs": None, "mismatches": 0,
                "skipped": int(a.size)}
    d, rel = errors(a[keep], b[keep])
    bad = (d > atol) & (rel > rtol)
    return {"passed": not bool(bad.any()), "compared": n, "mismatches": int(bad.sum()), "max_abs": float(d.max()),
            "max_rel": float(rel.max()), "skipped": int(a.size - n)}


def float_to_int_casts(model: onnx.ModelProto) -> Dict[str, Tuple[str, type]]:
    out = {}
    for node in model.graph.node:
        if node.op_type == "Cast" and node.domain in ("", "ai.onnx"):
            to = next((a.i for a in node.attribute if a.name == "to"), None)
            if to in INT_TYPES:
                out[node.output[0]] = (node.input[0], INT_TYPES[to])
    return out


def undefined_mask(x: np.ndarray, to) -> np.ndarray:
    info = np.iinfo(to)
    with np.errstate(invalid="ignore"):
        t = np.trunc(np.asarray(x).astype(np.float64))
        return ~np.isfinite(t) | (t < float(info.min)) | (t >= float(info.max) + 1)


def compare_sets(test: Feeds, ref: Feeds, atol: float, rtol: float, skips: Optional[Mapping] = None) -> Dict[str, dict]:
    """Each output both sides hold, ``test`` against the reference ``ref``."""
    skips = skips or {}
    return {k: compare(test[k], ref[k], atol, rtol, skips.get(k)) for k in ref if k in test}


def cast_skips(model: onnx.ModelProto, feeds: Feeds, outputs: Iterable[str]) -> Tuple[Dict[str, np.ndarray], List[str]]:
    """For each output made by a float-to-int Cast: the undefined elements, from the fp32 reference (bare ORT,
    optimizations off, the Cast's input marked) -- the side not under test decides."""
    casts = {o: c for o, c in float_to_int_casts(model).items() if o in set(outputs)}
    if not casts:
        return {}, []
    srcs = sorted({s for s, _ in casts.values()})
    vals = ort_run(with_outputs(model, srcs), feeds, opt="disable", outputs=srcs)
    masks = {o: undefined_mask(vals[s], to) for o, (s, to) in casts.items() if vals[s].dtype.kind == "f"}
    return {o: m for o, m in masks.items() if m.any()}, srcs


# ---------------------------------------------------------------------------------------------- graphs


def with_outputs(model: onnx.ModelProto, names: Sequence[str]) -> onnx.ModelProto:
    """The model with these tensors of the top graph as extra outputs (types left to the runtime)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    have = {o.name for o in m.graph.output}
    for n in names:
        if n not in have:
            m.graph.output.append(onnx.ValueInfoProto(name=n))
    return m


def all_tensors(model: onnx.ModelProto) -> List[str]:
    return [o for n in model.graph.node for o in n.output if o]


def reference_values(model: onnx.ModelProto, feeds: Feeds, opt: str = "all") -> Feeds:
    """Every tensor of the top graph on bare ORT (each node output marked), with the feeds."""
    names = all_tensors(model)
    vals = ort_run(with_outputs(model, names), feeds, opt=opt, outputs=names)
    return {**feeds, **vals}


def _vi(name: str, arr: np.ndarray) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(np.asarray(arr).dtype),
                                         list(np.asarray(arr).shape))


def boundary_nodes(model: onnx.ModelProto) -> List[Tuple[int, str]]:
    """(index, 'first'|'last') of the nodes a reduce could drop: those reading only graph inputs/weights and those
    whose outputs no other node reads."""
    g = model.graph
    made = {o: i for i, n in enumerate(g.node) for o in n.output if o}
    read = {x for n in g.node for x in n.input if x} | _subgraph_reads(g)
    out = []
    for i, n in enumerate(g.node):
        if all(x not in made for x in n.input if x):
            out.append((i, "first"))
        if all(o not in read for o in n.output if o):
            out.append((i, "last"))
    return out


def _subgraph_reads(g: onnx.GraphProto) -> set:
    names = set()
    for n in g.node:
        for a in n.attribute:
            for sub in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)):
                for sn in sub.node:
                    names.update(x for x in sn.input if x)
                names |= _subgraph_reads(sub)
    return names


def drop_node(model: onnx.ModelProto, index: int, end: str, values: Feeds) -> Optional[onnx.ModelProto]:
    """The model without node ``index``: a first node's outputs become graph inputs, a last node's inputs become
    graph outputs (typed from ``values``). None when nothing would be left."""
    g = model.graph
    if len(g.node) <= 1:
        return None
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    node = g.node[index]
    del g.node[index]
    read = {x for n in g.node for x in n.input if x} | _subgraph_reads(g)
    made = {o for n in g.node for o in n.output if o}
    inits = {i.name for i in g.initializer}
    if end == "first":
        for o in node.output:
            if o and o in read and o in values:
                g.input.append(_vi(o, values[o]))
        outs = [o for o in g.output if o.name not in set(node.output)]
    else:
        outs = [o for o in g.output if o.name not in set(node.output)]
        for x in node.input:
            if x and x in made and x not in {o.name for o in outs} and x in values:
                outs.append(_vi(x, values[x]))
    del g.output[:]
    g.output.extend(outs)
    keep_in = [i for i in g.input if i.name in read or i.name in {o.name for o in outs}]
    del g.input[:]
    g.input.extend(keep_in)
    used = read | {o.name for o in outs}
    keep_init = [i for i in g.initializer if i.name in used]
    del g.initializer[:]
    g.initializer.extend(keep_init)
    if not g.output or not g.node:
        return None
    del inits
    return m


def ancestors(model: onnx.ModelProto, names: Iterable[str]) -> set:
    """Every tensor the given tensors are computed from (themselves included)."""
    made = {o: n for n in model.graph.node for o in n.output if o}
    seen, todo = set(), list(names)
    while todo:
        t = todo.pop()
        if t in seen:
            continue
        seen.add(t)
        if t in made:
            todo.extend(x for x in made[t].input if x)
            todo.extend(_subgraph_reads_of(made[t]))
    return seen


def _subgraph_reads_of(node: onnx.NodeProto) -> set:
    g = onnx.GraphProto()
    g.node.append(node)
    return _subgraph_reads(g)


def emulate_mixed(model: onnx.ModelProto) -> onnx.ModelProto:
    """A mixed fp16 model (what ``convert`` writes) computed in fp32 with each tensor it stores in fp16 rounded to
    fp16 where it is made: fp16 weights widened exactly, Casts to fp16 become Casts to fp32 followed by the
    rounding, every other fp16 node output rounded. The figure a device storing those tensors in fp16 gives."""
    inferred = onnx.shape_inference.infer_shapes(model)
    g0 = inferred.graph
    halves = {v.name for v in list(g0.value_info) + list(g0.output) + list(g0.input)
              if v.type.tensor_type.elem_type == TensorProto.FLOAT16}
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    if any(v.type.tensor_type.elem_type == TensorProto.FLOAT16 for v in list(g.input) + list(g.output)):
        raise ValueError("oracle: fp16 graph inputs or outputs are not emulated")
    for init in g.initializer:
        if init.data_type == TensorProto.FLOAT16:
            init.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init).astype(np.float32), init.name))
    nodes: List[onnx.NodeProto] = []
    for node in g.node:
        new = onnx.NodeProto()
        new.CopyFrom(node)
        for a in new.attribute:
            if node.op_type == "Cast" and a.name == "to" and a.i == TensorProto.FLOAT16:
                a.i = TensorProto.FLOAT
            if a.type == onnx.AttributeProto.TENSOR and a.t.data_type == TensorProto.FLOAT16:
                a.t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(a.t).astype(np.float32), a.t.name))
            if a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS):
                raise ValueError("oracle: subgraphs of a mixed model are not emulated")
        nodes += _with_rounded_outputs(new, halves)
    del g.node[:]
    g.node.extend(nodes)
    del g.value_info[:]
    return m


def single_node(model: onnx.ModelProto, index: int, values: Feeds) -> onnx.ModelProto:
    """Node ``index`` alone: its weights kept, its other inputs and its outputs typed from ``values``."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    node = onnx.NodeProto()
    node.CopyFrom(g.node[index])
    inits = {i.name: i for i in g.initializer}
    del g.node[:]
    g.node.append(node)
    ins = [x for x in node.input if x and x not in inits]
    keep = [inits[x] for x in node.input if x in inits]
    del g.initializer[:]
    g.initializer.extend(keep)
    del g.input[:]
    g.input.extend(_vi(x, values[x]) for x in ins)
    del g.output[:]
    g.output.extend(_vi(o, values[o]) for o in node.output if o and o in values)
    del g.value_info[:]
    return m


def activations_in_float(model: onnx.ModelProto) -> onnx.ModelProto:
    """The QDQ model with every activation Q/DQ pair taken back to float exactly (the DQ's readers read the Q's
    input); weight pairs (a Q or DQ of an initializer) stay. A pair whose range starts at 0 after a node (not after
    a graph input) is where the quantizer folded a Relu: it becomes that Relu."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    inits = {i.name for i in g.initializer}
    by_out = {o: n for n in g.node for o in n.output}
    swap: Dict[str, str] = {}
    drop = set()
    outs = {o.name for o in g.output}
    graph_inputs = {i.name for i in g.input}
    init_arrays = {i.name: numpy_helper.to_array(i) for i in g.initializer}
    relus: List[onnx.NodeProto] = []
    for n in g.node:
        if n.op_type != "DequantizeLinear" or n.input[0] in inits:
            continue
        q = by_out.get(n.input[0])
        if q is not None and q.op_type == "QuantizeLinear" and q.input[0] not in inits:
            src = q.input[0]
            if src not in graph_inputs and _range_starts_at_zero(q, init_arrays):
                # a Relu the quantizer folded into the pair's range: part of the model, kept as a Relu
                relus.append(helper.make_node("Relu", [src], [src + "__oracle_relu"]))
                src = src + "__oracle_relu"
            swap[n.output[0]] = src
            drop.update({id(n), id(q)})
    keep = [n for n in g.node if id(n) not in drop]
    for n in keep:
        for k, x in enumerate(n.input):
            if x in swap:
                n.input[k] = swap[x]
    new_nodes = [onnx.NodeProto() for _ in keep]
    for dst, src in zip(new_nodes, keep):
        dst.CopyFrom(src)
    del g.node[:]
    g.node.extend(new_nodes)
    g.node.extend(relus)
    g.node.extend(helper.make_node("Identity", [swap[o]], [o]) for o in swap if o in outs)
    return _sorted(m)


def _range_starts_at_zero(q: onnx.NodeProto, arrays: Mapping[str, np.ndarray]) -> bool:
    """Whether the Q's range starts at 0 (its zero point is the type's minimum): a folded Relu."""
    if len(q.input) < 3 or q.input[2] not in arrays:
        return False
    zp = arrays[q.input[2]]
    return bool(np.all(zp == np.iinfo(zp.dtype).min))


def _sorted(m: onnx.ModelProto) -> onnx.ModelProto:
    """Nodes in topological order."""
    g = m.graph
    ready = {i.name for i in g.input} | {i.name for i in g.initializer} | {""}
    todo, done = list(g.node), []
    while todo:
        rest = []
        for n in todo:
            if all(x in ready for x in n.input):
                done.append(n)
                ready.update(n.output)
            else:
                rest.append(n)
        if len(rest) == len(todo):
            done += rest
            break
        todo = rest
    nodes = [onnx.NodeProto() for _ in done]
    for dst, src in zip(nodes, done):
        dst.CopyFrom(src)
    del g.node[:]
    g.node.extend(nodes)
    return m

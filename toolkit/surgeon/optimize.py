"""`sanitize --optimize`: ONNX-Runtime's basic-level optimizations saved back as ONNX, and
the rewrites added on top of them."""

from __future__ import annotations

import hashlib
import os
import tempfile
import time
from collections import Counter
from typing import Any, Dict, Optional

import numpy as np
import onnx

from toolkit.core.errors import DependencyError, one_line
from toolkit.core.graph.graphs import fed_inputs, walk_graphs
from toolkit.core.io.model import PROTOBUF_LIMIT
from toolkit.core.shapes import light_copy
from toolkit.surgeon.fold_noops import (
    computed_reshape_targets,
    constant_reshape_targets,
    eliminate_noops,
    read_instead,
)
from toolkit.surgeon.fusions import optimizer_rewrites
from toolkit.surgeon.plumbing import (
    LogFn,
    count_model_nodes,
    export_graph,
    gs_step,
    has_graph_attributes,
    import_gs,
    keep_non_tensor_types,
    nolog,
    non_tensor_types,
    quiet_gs,
    restore_model_fields,
    symbolic_shape_inference,
)
from toolkit.surgeon.validate import Validation, attempt


def optimize(model, *, validate: bool = True, external_data_dir: Optional[str] = None, log: LogFn = nolog):
    """ONNX-Runtime's basic-level graph optimizations (constant folding, redundant node
    elimination, Conv+BatchNorm/Add/Mul fusions into standard ops), saved back as ONNX, then
    toolkit's own rewrites (pass-through nodes removed, duplicate nodes merged, ...).

    Basic level is the one ONNX-Runtime documents as hardware-independent: its result uses
    only standard ops. Where its result has ops of a domain the input model does not import,
    or more nodes than the input (it copies a shared DequantizeLinear for each reader in QDQ
    models), that pass is skipped and the rewrites run on the input as it is. The result never
    has more nodes than the input, keeps the types of graph inputs and outputs, and is
    validated; otherwise the input is returned, and a line says why.
    """
    ort = _import_ort()
    if model.ByteSize() > PROTOBUF_LIMIT:
        log("Optimizing | skipped: the model is over 2 GB")
        return model
    before = count_model_nodes(model)
    t0 = time.perf_counter()
    optimized, exc = attempt(_ort_basic, model, ort, external_data_dir)
    if exc is not None:
        log(f"Optimizing | skipped: ONNX-Runtime cannot optimize this model ({one_line(exc, first_line=True)})")
        return model
    types = non_tensor_types(model)
    done, result, how = _rewritten(_usable(optimized, model, log), model, before, log)
    keep_non_tensor_types(result, types)
    after = count_model_nodes(result)
    why = _why_not_taken(model, result, (before, after), validate, external_data_dir)
    if why is not None:
        log(why)
        return model
    also = "".join(f", {n} {what}" for what, n in done.items())
    log(f"Optimizing | {how}{also} | nodes {before} -> {after} | {time.perf_counter() - t0:.2f} s")
    return result


def _why_not_taken(model, result, counts, validate: bool, external_data_dir: Optional[str]) -> Optional[str]:
    """The line that says why ``result`` does not replace ``model`` (the same model, more nodes
    (``counts``: before, after), or validation failed); None where it does."""
    before, after = counts
    if after > before:
        return f"Optimizing | skipped: the optimized model has {after} nodes where the model has {before}"
    if result is model:
        return f"Optimizing | nothing to do: the model stays as it is ({before} nodes)"
    if not validate:
        return None
    err = Validation(model, external_data_dir).check(result)
    return None if err is None else f"Optimizing | skipped: the optimized model failed validation ({err})"


def _import_ort():
    try:
        import onnxruntime as ort
    except ImportError:
        raise DependencyError("--optimize needs onnxruntime; pip install onnxruntime") from None
    return ort


def _ort_basic(model, ort, external_data_dir: Optional[str]):
    """``model`` through ONNX-Runtime's basic level, read back from the file it writes."""

    with tempfile.TemporaryDirectory(prefix="toolkit_optimize_") as tmp:
        out = os.path.join(tmp, "optimized.onnx")
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        so.optimized_model_filepath = out
        so.log_severity_level = 4
        if external_data_dir:
            so.add_session_config_entry("session.model_external_initializers_file_folder_path", external_data_dir)
        ort.InferenceSession(_constant_initializers(model).SerializeToString(), so, providers=["CPUExecutionProvider"])
        # weights ONNX-Runtime keeps as they are still name the model's data file (relative to
        # external_data_dir, as in the model): left on disk, as the model leaves them
        result = onnx.load(out, load_external_data=False)
    restore_model_fields(result, model)
    return result


def _usable(optimized, model, log: LogFn):
    """ONNX-Runtime's result, or None where it uses ops of a domain the model does not import."""
    allowed = {o.domain for o in model.opset_import} | {"", "ai.onnx"}
    foreign = sorted({n.domain for g in walk_graphs(optimized.graph) for n in g.node} - allowed)
    if foreign:
        log(f"Optimizing | ONNX-Runtime's basic level skipped: its result uses ops of {', '.join(foreign)}, which "
            "the model does not import")
        return None
    return optimized


def _rewritten(optimized, model, before: int, log: LogFn):
    """``(done, result, how)``: toolkit's rewrites on ONNX-Runtime's result; on the input model
    itself where ONNX-Runtime's result is unusable or, even rewritten, has more nodes than the
    input (its basic level copies a shared DequantizeLinear for each reader in QDQ models)."""
    done: Dict[str, int] = {}
    if optimized is not None:
        done, result = _rewrite_top(optimized, model)
        grown = count_model_nodes(result)
        if grown <= before:
            return done, result, "ONNX-Runtime basic level"
        log(f"Optimizing | ONNX-Runtime's basic level skipped: it gives {grown} nodes where the model has {before} "
            "(it copies QuantizeLinear/DequantizeLinear nodes for each reader in quantized models)")
    done, result = _rewrite_top(model, model)
    return done, result, "toolkit's rewrites only"


def _rewrite_top(result, model):
    """:func:`_after_optimizer` where the model has no subgraphs (else ``result`` as it is)."""
    if has_graph_attributes(result.graph):
        return {}, result
    return _after_optimizer(result, model)


SYMBOLIC_SHAPES_MAX_NODES = 5000  # --optimize's Reshape-target rule runs symbolic shape inference up to this size


def _after_optimizer(result, model):
    """What ``--optimize`` adds to ONNX-Runtime's basic level (top graph): pass-through nodes removed
    (:func:`toolkit.surgeon.fold_noops.eliminate_noops`), duplicate nodes merged,
    Reshape targets computed from a dim the data copies with 0 made constant (see
    :func:`toolkit.surgeon.fold_noops.constant_reshape_targets`; the shapes that decides on come
    from symbolic shape inference, and are not written), and :mod:`toolkit.surgeon.fusions`.
    Returns ``({what was done: how many}, model)``."""
    gs = import_gs()
    with quiet_gs(), gs_step("import"):
        graph = gs.import_onnx(result)
    noops = eliminate_noops(gs, graph)
    merged = eliminate_common_subexpressions(gs, graph)
    targets = _constant_targets_on(gs, graph, _shapes_for_targets(gs, graph, result))
    rewrites = optimizer_rewrites(gs, graph)
    done = {"pass-through node(s) removed": noops, "duplicate node(s) merged": merged, "Reshape target(s) made constant": targets, **rewrites}
    done = {what: n for what, n in done.items() if n}
    if not done:
        return done, result
    with quiet_gs(), gs_step("clean up"):
        graph.cleanup()
    with gs_step("export"):
        return done, export_graph(gs, graph, model)


def _shapes_for_targets(gs, graph, result) -> Dict[str, tuple]:
    """:func:`_symbolic_shapes` of ``result`` where ``graph`` (its import) has a computed Reshape
    target to decide on and is small enough (the inference costs ~2 ms a node); else {}."""
    if len(graph.nodes) > SYMBOLIC_SHAPES_MAX_NODES or not computed_reshape_targets(gs, graph):
        return {}
    return _symbolic_shapes(result)


def _constant_targets_on(gs, graph, inferred: Dict[str, tuple]) -> int:
    """:func:`constant_reshape_targets` (copied dynamic dims allowed) deciding on the
    ``inferred`` shapes, lent to the graph's computed tensors for it (theirs are put back)."""
    lent = _lend_shapes(gs, graph, inferred)
    targets = constant_reshape_targets(gs, graph, copy_dynamic=True)
    tensors = graph.tensors()
    for name, shape in lent.items():  # (a tensor the rewrite removed has nothing to get back)
        if name in tensors:
            tensors[name].shape = shape
    return targets


def _lend_shapes(gs, graph, inferred: Dict[str, tuple]) -> dict:
    """Give the computed tensors of ``graph`` their ``inferred`` shapes; returns {name: the shape
    each had}."""
    lent = {}
    for name, tensor in graph.tensors().items():
        if name in inferred and not isinstance(tensor, gs.Constant):
            lent[name] = tensor.shape
            tensor.shape = inferred[name]
    return lent


def _symbolic_shapes(model) -> Dict[str, tuple]:
    """Shapes of the top graph's tensors by ONNX-Runtime's symbolic shape inference: numbers
    where known, other dims as None (empty when it cannot run)."""
    inferred = symbolic_shape_inference(model)
    if inferred is None:
        return {}
    found: Dict[str, tuple] = {}
    for vi in list(inferred.graph.value_info) + list(inferred.graph.output):
        t = vi.type.tensor_type
        if t.HasField("shape"):  # (False for a value of another type)
            found[vi.name] = _dim_values(t.shape)
    return found


def _dim_values(shape) -> tuple:
    """The dims of a TensorShapeProto: numbers where known, else None."""
    return tuple(d.dim_value if d.HasField("dim_value") else None for d in shape.dim)


def _constant_initializers(model):
    """``model`` with its initializers constant for ONNX-Runtime's optimizer.

    Before IR version 4 every initializer is also listed as a graph input, which makes it an
    input with a default value: ONNX-Runtime then fuses nothing that reads one (Conv +
    BatchNormalization...). Folding already treated them as constants; the copy given to the
    optimizer says so (IR 4, initializers not listed as inputs). The IR version and the
    input list are restored on the result."""
    if model.ir_version >= 4:
        return model

    light = light_copy(model, stub_bytes=1 << 62)  # every weight shared, none copied
    kept = fed_inputs(light.graph)
    del light.graph.input[:]
    light.graph.input.extend(kept)
    light.ir_version = 4
    return light


# Ops whose two calls on the same inputs may differ, or that have effects.
_NOT_MERGED = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial", "Bernoulli",
               "Dropout"}


class _NotMerged(Exception):
    """A value no key is made for (a graph, a reference, objects): its node is never merged."""


def _array_key(values):
    arr = np.ascontiguousarray(values)
    if arr.dtype.hasobject:  # strings: their bytes are pointers
        return ("o", str(arr.dtype), arr.shape, repr(arr.tolist()))
    # (viewed as bytes: bfloat16 and float8 export no buffer format of their own)
    digest = hashlib.blake2b(memoryview(arr.reshape(-1).view(np.uint8)), digest_size=16).hexdigest() if arr.size else ""
    return ("a", str(arr.dtype), arr.shape, digest)


class _NodeKeys:
    """Keys that are equal for nodes computing the same thing: op, attributes, inputs (constants
    by value; hashed only when another constant has the same dtype and shape)."""
    def __init__(self, gs, graph):
        self.gs = gs
        self.by_shape = Counter(_dtype_and_shape(t) for t in graph.tensors().values() if isinstance(t, gs.Constant))
        self.const_keys: Dict[int, Any] = {}
        self.graph_outputs = {id(t) for t in graph.outputs}

    def tensor(self, t):
        if not isinstance(t, self.gs.Constant):
            return ("v", t.name)
        key = self.const_keys.get(id(t))
        if key is None:
            key = self.const_keys[id(t)] = self._constant(t)
        return key

    def _constant(self, t):
        """The key of constant ``t``: by value, unless nothing else can equal it (or it is not read)."""
        lazy = getattr(t._values, "tensor", None)
        external = lazy is not None and lazy.data_location == 1  # EXTERNAL: not read here
        if external or self.by_shape[_dtype_and_shape(t)] < 2:
            return ("c", t.name)
        return _array_key(t.values)

    def attr(self, value):
        if isinstance(value, self.gs.Constant):
            return _array_key(value.values)
        if isinstance(value, np.ndarray):
            return _array_key(value)
        if isinstance(value, (list, tuple)):
            return tuple(self.attr(v) for v in value)
        if isinstance(value, (int, float, str, bytes, type(None), np.generic)):
            return (type(value).__name__, repr(value))
        raise _NotMerged(type(value).__name__)  # graphs, refs...

    def node(self, node):
        """The node's key, or None for a node never merged."""
        if not self._mergeable(node):
            return None
        try:
            return (node.op, tuple(self.tensor(t) for t in node.inputs),
                    tuple(sorted((k, self.attr(v)) for k, v in node.attrs.items())), len(node.outputs))
        except _NotMerged:
            return None

    def _mergeable(self, node) -> bool:
        """``node`` is of a standard op that computes the same on the same inputs (see
        :data:`_NOT_MERGED`), and has outputs, none of them a graph output."""
        if node.domain not in ("", "ai.onnx", None) or node.op in _NOT_MERGED or not node.outputs:
            return False
        return not any(id(o) in self.graph_outputs for o in node.outputs)


def _dtype_and_shape(t) -> tuple:
    """What constants must share to be equal: dtype and shape."""
    return (str(t.dtype), tuple(t.shape or ()))


def eliminate_common_subexpressions(gs, graph) -> int:
    """Merge nodes that compute the same thing: same op, attributes and inputs, constant
    inputs compared by value (two Convs reading equal weights from the same tensor).
    Top graph only, standard ops only, never a node whose output is a graph output.
    Returns how many nodes were merged away (graph.cleanup() removes them)."""
    keys = _NodeKeys(gs, graph)
    with quiet_gs(), gs_step("sort"):
        graph.toposort()
    seen: Dict[Any, Any] = {}
    merged = 0
    for node in graph.nodes:
        key = keys.node(node)
        if key is None:
            continue
        kept = seen.setdefault(key, node)
        if kept is node:
            continue
        for dup, same in zip(node.outputs, kept.outputs):
            read_instead(dup, same)
        node.outputs.clear()
        merged += 1
    return merged

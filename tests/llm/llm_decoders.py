"""Tiny decoders with a KV cache, built with onnx.helper, and faults to inject into them.

Token and position embeddings, ``layers`` layers of attention (GQA: ``heads`` query heads share
``kv_heads`` cache heads through MatMul broadcasting; the cache is the past concatenated with the
step's keys and values) and an MLP, then an lm_head scaled so that logits are decisive. Nodes are
named as TorchScript exports name them (``/model/layers.2/self_attn/Softmax``); with
``scopes=True`` they also carry torch.onnx's ``pkg.torch.onnx.name_scopes`` metadata.

Faults (``fault=``), each in ``fault_layer`` (tensor names kept, so a reference without the fault
matches by name):
- ``kv_threshold``: the attention scores grow once the KV length reaches ``threshold``;
- ``cache_write``: the present key written is wrong, attention itself uses the right one;
- ``position``: the attention output is off at position ``position`` only;
- ``weight``: one weight of the MLP's up projection is off;
- ``precision``: the MLP's output goes through float16;
- ``embedding_row``: the token embedding row of token ``token`` is off (no layer).
"""

from __future__ import annotations

from typing import List, Optional

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

FAULTS = ("kv_threshold", "cache_write", "position", "weight", "precision", "embedding_row")


class _Graph:
    def __init__(self, scopes: bool):
        self.nodes: List[onnx.NodeProto] = []
        self.inits: List[onnx.TensorProto] = []
        self.scopes = scopes

    def const(self, name: str, value) -> str:
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def node(self, op: str, inputs, output: str, name: str, **attrs) -> str:
        n = helper.make_node(op, list(inputs), [output], name=name, **attrs)
        if self.scopes:
            parts = [p for p in name.split("/") if p][:-1]
            scopes = [".".join(parts[: k + 1]) for k in range(len(parts))]
            n.metadata_props.add(key="pkg.torch.onnx.name_scopes", value=repr(scopes))
        self.nodes.append(n)
        return output


def _weights(rng, shape, scale):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def build_decoder(
    path: Optional[str] = None, *, layers: int = 3, hidden: int = 16, heads: int = 2, kv_heads: int = 1,
    head_size: int = 8, vocab: int = 48, max_pos: int = 128, seed: int = 0, fault: Optional[str] = None,
    fault_layer: int = 1, threshold: int = 10, position: int = 6, token: int = 0, scopes: bool = False,
    cache_dtype: int = TensorProto.FLOAT,
) -> onnx.ModelProto:
    """The decoder (saved to ``path`` when given); the same ``seed`` gives the same weights with or without a fault."""
    if kv_heads not in (1, heads):
        raise ValueError("kv_heads is 1 (GQA by MatMul broadcasting) or heads")
    rng = np.random.default_rng(seed)
    g = _Graph(scopes)
    emb = _weights(rng, (vocab, hidden), 1.0)
    if fault == "embedding_row":
        emb[token] += 0.5
    pos_table = _weights(rng, (max_pos, hidden), 0.3)
    h = g.node("Gather", [g.const("model.embed_tokens.weight", emb), "input_ids"], "/model/embed_tokens/out",
               "/model/embed_tokens/Gather")
    p = g.node("Gather", [g.const("model.embed_positions.weight", pos_table), "position_ids"],
               "/model/embed_positions/out", "/model/embed_positions/Gather")
    h = g.node("Add", [h, p], "/model/embed/out", "/model/embed/Add")
    mask = _mask(g)
    for i in range(layers):
        h = _layer(g, rng, i, h, mask, dict(hidden=hidden, heads=heads, kv_heads=kv_heads, d=head_size),
                   fault if i == fault_layer else None, threshold, position, cache_dtype)
    lm = _weights(rng, (hidden, vocab), 4.0 / np.sqrt(hidden))
    g.node("MatMul", [h, g.const("lm_head.weight", lm)], "logits", "/lm_head/MatMul")
    model = _model(g, layers, kv_heads, head_size, vocab, cache_dtype)
    if path:
        onnx.save(model, path)
    return model


def _mask(g: _Graph) -> str:
    """Causal mask and attention mask as one additive bias [1, 1, S, T] (S new tokens, T cached + new)."""
    pre = "/model/mask/"
    shape_k = g.node("Shape", ["attention_mask"], pre + "mask_shape", pre + "Shape")
    total = g.node("Gather", [shape_k, g.const(pre + "one", np.array(1, np.int64))], pre + "total", pre + "Gather")
    shape_q = g.node("Shape", ["input_ids"], pre + "ids_shape", pre + "Shape_1")
    new = g.node("Gather", [shape_q, g.const(pre + "one_b", np.array(1, np.int64))], pre + "new", pre + "Gather_1")
    start = g.node("Sub", [total, new], pre + "start", pre + "Sub")
    step = g.const(pre + "step", np.array(1, np.int64))
    keys = g.node("Range", [g.const(pre + "zero", np.array(0, np.int64)), total, step], pre + "keys", pre + "Range")
    queries = g.node("Range", [start, total, step], pre + "queries", pre + "Range_1")
    k2 = g.node("Unsqueeze", [keys, g.const(pre + "ax0", np.array([0], np.int64))], pre + "keys2", pre + "Unsqueeze")
    q2 = g.node("Unsqueeze", [queries, g.const(pre + "ax1", np.array([1], np.int64))], pre + "queries2", pre + "Unsqueeze_1")
    allowed = g.node("LessOrEqual", [k2, q2], pre + "allowed", pre + "LessOrEqual")
    causal = g.node("Where", [allowed, g.const(pre + "zero_f", np.array(0, np.float32)),
                              g.const(pre + "neg", np.array(-1e9, np.float32))], pre + "causal", pre + "Where")
    m = g.node("Cast", ["attention_mask"], pre + "mask_f", pre + "Cast", to=TensorProto.FLOAT)
    inv = g.node("Sub", [g.const(pre + "one_f", np.array(1, np.float32)), m], pre + "inv", pre + "Sub_1")
    pad = g.node("Mul", [inv, g.const(pre + "neg_b", np.array(-1e9, np.float32))], pre + "pad", pre + "Mul")
    pad4 = g.node("Unsqueeze", [pad, g.const(pre + "ax12", np.array([1, 2], np.int64))], pre + "pad4", pre + "Unsqueeze_2")
    return g.node("Add", [causal, pad4], pre + "bias", pre + "Add")


def _heads(g: _Graph, x: str, n: int, d: int, pre: str) -> str:
    r = g.node("Reshape", [x, g.const(pre + "shape", np.array([0, -1, n, d], np.int64))], pre + "r", pre + "Reshape")
    return g.node("Transpose", [r], pre + "t", pre + "Transpose", perm=[0, 2, 1, 3])


def _cache(g, past: str, new: str, out: str, pre: str, cache_dtype: int) -> str:
    """present = Concat(past, new) (in the cache's dtype); returns the float tensor attention reads."""
    if cache_dtype == TensorProto.FLOAT:
        return g.node("Concat", [past, new], out, pre + "Concat", axis=2)
    low = g.node("Cast", [new], pre + "new_low", pre + "Cast", to=cache_dtype)
    g.node("Concat", [past, low], out, pre + "Concat", axis=2)
    return g.node("Cast", [out], pre + "f32", pre + "Cast_1", to=TensorProto.FLOAT)


def _layer(g: _Graph, rng, i: int, h: str, mask: str, dims: dict, fault: Optional[str], threshold: int,
           position: int, cache_dtype: int) -> str:
    D, H, KV, d = dims["hidden"], dims["heads"], dims["kv_heads"], dims["d"]
    pre = f"/model/layers.{i}/self_attn/"
    s = 0.5 / np.sqrt(D)
    q = g.node("MatMul", [h, g.const(f"l{i}.wq", _weights(rng, (D, H * d), s))], pre + "q_proj/out", pre + "q_proj/MatMul")
    k = g.node("MatMul", [h, g.const(f"l{i}.wk", _weights(rng, (D, KV * d), s))], pre + "k_proj/out", pre + "k_proj/MatMul")
    v = g.node("MatMul", [h, g.const(f"l{i}.wv", _weights(rng, (D, KV * d), s))], pre + "v_proj/out", pre + "v_proj/MatMul")
    q, k, v = _heads(g, q, H, d, pre + "q/"), _heads(g, k, KV, d, pre + "k/"), _heads(g, v, KV, d, pre + "v/")
    past_k, past_v = f"past_key_values.{i}.key", f"past_key_values.{i}.value"
    if fault == "cache_write":
        g.node("Concat", [past_k, k], pre + "k_cat", pre + "attn_key/Concat", axis=2)
        bad = g.node("Mul", [k, g.const(pre + "bad", np.array(1.5, np.float32))], pre + "k_bad", pre + "fault/Mul")
        _cache(g, past_k, bad, f"present.{i}.key", pre + "present_key/", cache_dtype)
        kk = pre + "k_cat"
    else:
        kk = _cache(g, past_k, k, f"present.{i}.key", pre + "present_key/", cache_dtype)
    vv = _cache(g, past_v, v, f"present.{i}.value", pre + "present_value/", cache_dtype)
    kt = g.node("Transpose", [kk], pre + "kt", pre + "Transpose", perm=[0, 1, 3, 2])
    qk = g.node("MatMul", [q, kt], pre + "qk", pre + "MatMul")
    scale = g.const(pre + "scale", np.array(1 / np.sqrt(d), np.float32))
    raw = pre + ("scores_raw" if fault == "kv_threshold" else "scores")
    scores = g.node("Mul", [qk, scale], raw, pre + "Mul")
    if fault == "kv_threshold":
        scores = _kv_fault(g, raw, kk, threshold, pre)
    biased = g.node("Add", [scores, mask], pre + "biased", pre + "Add")
    probs = g.node("Softmax", [biased], pre + "probs", pre + "Softmax", axis=-1)
    ctx = g.node("MatMul", [probs, vv], pre + "ctx", pre + "MatMul_1")
    ctx = g.node("Transpose", [ctx], pre + "ctx_t", pre + "Transpose_1", perm=[0, 2, 1, 3])
    ctx = g.node("Reshape", [ctx, g.const(pre + "merge", np.array([0, -1, H * d], np.int64))], pre + "ctx_m", pre + "Reshape")
    wo = g.const(f"l{i}.wo", _weights(rng, (H * d, D), s))
    o_name = pre + "o_proj/out"
    o = g.node("MatMul", [ctx, wo], pre + "o_raw" if fault == "position" else o_name, pre + "o_proj/MatMul")
    if fault == "position":
        o = _position_fault(g, o, o_name, position, pre)
    h = g.node("Add", [h, o], f"/model/layers.{i}/attn_residual", f"/model/layers.{i}/Add")
    return _mlp(g, rng, i, h, D, fault)


def _kv_fault(g: _Graph, raw: str, keys: str, threshold: int, pre: str) -> str:
    """scores * (1 + 0.5 * (KV length >= threshold))."""
    f = pre + "fault/"
    shape = g.node("Shape", [keys], f + "shape", f + "Shape")
    length = g.node("Gather", [shape, g.const(f + "two", np.array(2, np.int64))], f + "len", f + "Gather")
    reached = g.node("GreaterOrEqual", [length, g.const(f + "thr", np.array(threshold, np.int64))], f + "reached",
                     f + "GreaterOrEqual")
    factor = g.node("Where", [reached, g.const(f + "big", np.array(1.5, np.float32)),
                              g.const(f + "unit", np.array(1.0, np.float32))], f + "factor", f + "Where")
    return g.node("Mul", [raw, factor], pre + "scores", f + "Mul")


def _position_fault(g: _Graph, o: str, out: str, position: int, pre: str) -> str:
    """The attention output + 0.5 at position ``position`` only."""
    f = pre + "fault/"
    hit = g.node("Equal", ["position_ids", g.const(f + "pos", np.array(position, np.int64))], f + "hit", f + "Equal")
    bump = g.node("Where", [hit, g.const(f + "half", np.array(0.5, np.float32)),
                            g.const(f + "zero", np.array(0.0, np.float32))], f + "bump", f + "Where")
    bump3 = g.node("Unsqueeze", [bump, g.const(f + "ax", np.array([2], np.int64))], f + "bump3", f + "Unsqueeze")
    return g.node("Add", [o, bump3], out, f + "Add")


def _mlp(g: _Graph, rng, i: int, h: str, D: int, fault: Optional[str]) -> str:
    pre = f"/model/layers.{i}/mlp/"
    w1 = _weights(rng, (D, 2 * D), 1.0 / np.sqrt(D))
    if fault == "weight":
        w1[0, 0] += 0.5
    u = g.node("MatMul", [h, g.const(f"l{i}.w1", w1)], pre + "up/out", pre + "up/MatMul")
    a = g.node("Tanh", [u], pre + "act", pre + "act/Tanh")
    down = pre + "down/out"
    w2 = g.const(f"l{i}.w2", _weights(rng, (2 * D, D), 0.5 / np.sqrt(D)))
    m = g.node("MatMul", [a, w2], pre + "down/raw" if fault == "precision" else down, pre + "down/MatMul")
    if fault == "precision":
        low = g.node("Cast", [m], pre + "down/low", pre + "down/Cast", to=TensorProto.FLOAT16)
        m = g.node("Cast", [low], down, pre + "down/Cast_1", to=TensorProto.FLOAT)
    return g.node("Add", [h, m], f"/model/layers.{i}/mlp_residual", f"/model/layers.{i}/Add_1")


def _model(g: _Graph, layers: int, kv_heads: int, d: int, vocab: int, cache_dtype: int) -> onnx.ModelProto:
    inputs = [
        helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"]),
        helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "total"]),
        helper.make_tensor_value_info("position_ids", TensorProto.INT64, ["batch", "seq"]),
    ]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", "seq", vocab])]
    for i in range(layers):
        for kind in ("key", "value"):
            inputs.append(helper.make_tensor_value_info(f"past_key_values.{i}.{kind}", cache_dtype,
                                                        ["batch", kv_heads, "past", d]))
            outputs.append(helper.make_tensor_value_info(f"present.{i}.{kind}", cache_dtype,
                                                         ["batch", kv_heads, "total", d]))
    graph = helper.make_graph(g.nodes, "tiny_decoder", inputs, outputs, g.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    onnx.checker.check_model(model)
    return model

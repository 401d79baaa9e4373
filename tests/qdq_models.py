"""Quantized test models (built in code): a small transformer block in float32, its static
QDQ quantization by onnxruntime.quantization.quantize_static, and one activation pair made
coarse on purpose."""

from __future__ import annotations

from typing import Dict, List, Optional

import numpy as np
import onnx
from onnx import helper, numpy_helper

import modelzoo as mz

SEQ, DIM = 8, 32


def transformer(seed: int = 0):
    """x[1,8,32] -> Q/K/V projections, softmax attention, output projection, residual,
    decomposed LayerNorm, a GELU-free MLP (MatMul, Relu, MatMul), residual -> y[1,8,32]."""
    rng = np.random.default_rng(seed)
    d = DIM

    def w(name, shape, scale=0.2):
        return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)

    inits = [
        w("Wq", (d, d)), w("Wk", (d, d)), w("Wv", (d, d)), w("Wo", (d, d)),
        w("W1", (d, 2 * d)), w("b1", (2 * d,), 0.1), w("W2", (2 * d, d)),
        numpy_helper.from_array(np.array(1 / np.sqrt(d), np.float32), "inv_sqrt_d"),
        numpy_helper.from_array(np.array(1e-5, np.float32), "eps"),
        numpy_helper.from_array(np.ones(d, np.float32), "gamma"),
        numpy_helper.from_array(np.zeros(d, np.float32), "beta"),
    ]
    N = helper.make_node
    nodes = [
        N("MatMul", ["x", "Wq"], ["q"], name="q_proj"),
        N("MatMul", ["x", "Wk"], ["k"], name="k_proj"),
        N("MatMul", ["x", "Wv"], ["v"], name="v_proj"),
        N("Transpose", ["k"], ["kt"], name="k_t", perm=[0, 2, 1]),
        N("MatMul", ["q", "kt"], ["scores"], name="qk"),
        N("Mul", ["scores", "inv_sqrt_d"], ["scaled"], name="scale"),
        N("Softmax", ["scaled"], ["attn"], name="softmax", axis=-1),
        N("MatMul", ["attn", "v"], ["ctx"], name="av"),
        N("MatMul", ["ctx", "Wo"], ["o"], name="o_proj"),
        N("Add", ["x", "o"], ["r1"], name="residual1"),
        N("LayerNormalization", ["r1", "gamma", "beta"], ["ln"], name="ln", axis=-1, epsilon=1e-5),
        N("MatMul", ["ln", "W1"], ["h"], name="fc1"),
        N("Add", ["h", "b1"], ["hb"], name="fc1_bias"),
        N("Relu", ["hb"], ["ha"], name="relu"),
        N("MatMul", ["ha", "W2"], ["m"], name="fc2"),
        N("Add", ["r1", "m"], ["y"], name="residual2"),
    ]
    graph = helper.make_graph(nodes, "transformer", [mz.vi("x", [1, SEQ, d])], [mz.vi("y", [1, SEQ, d])], inits)
    return mz.make_model(graph, opset=17)


def feeds(count: int, seed: int = 100) -> List[Dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"x": rng.standard_normal((1, SEQ, DIM)).astype(np.float32)} for _ in range(count)]


class _Reader:
    def __init__(self, data):
        self.data = iter(data)

    def get_next(self):
        return next(self.data, None)


def quantize(float_path: str, qdq_path: str, calibration: List[Dict[str, np.ndarray]]) -> str:
    """Static QDQ quantization (int8 activations and weights) with onnxruntime's quantizer."""
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static

    quantize_static(
        float_path, qdq_path, _Reader(calibration), quant_format=QuantFormat.QDQ,
        activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
    )
    model = onnx.load(qdq_path)
    model.ir_version = mz.IR_VERSION
    onnx.save(model, qdq_path)
    return qdq_path


def coarsen(qdq_path: str, tensor: str, factor: float = 40.0) -> str:
    """Make the activation pair on ``tensor`` ``factor`` times coarser (its scale, shared by its Q
    and DQ, multiplied); returns the scale initializer's name."""
    model = onnx.load(qdq_path)
    q = next(n for n in model.graph.node if n.op_type == "QuantizeLinear" and n.input[0] == tensor)
    names = {q.input[1]}
    inits = {i.name: i for i in model.graph.initializer}
    for name in names:
        arr = numpy_helper.to_array(inits[name]) * np.float32(factor)
        inits[name].CopyFrom(numpy_helper.from_array(arr.astype(np.float32), name))
    onnx.save(model, qdq_path)
    return q.input[1]


def clip_mlp(seed: int = 0):
    """x[4,16] -> MatMul -> Clip(0, 0.3) -> MatMul -> y[4,8]: the quantizer folds the Clip into a Q."""
    rng = np.random.default_rng(seed)
    inits = [
        numpy_helper.from_array(rng.standard_normal((16, 16)).astype(np.float32), "W1"),
        numpy_helper.from_array(rng.standard_normal((16, 8)).astype(np.float32), "W2"),
        numpy_helper.from_array(np.array(0.0, np.float32), "lo"),
        numpy_helper.from_array(np.array(0.3, np.float32), "hi"),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "W1"], ["a"], name="fc1"),
        helper.make_node("Clip", ["a", "lo", "hi"], ["c"], name="clip"),
        helper.make_node("MatMul", ["c", "W2"], ["y"], name="fc2"),
    ]
    graph = helper.make_graph(nodes, "clip_mlp", [mz.vi("x", [4, 16])], [mz.vi("y", [4, 8])], inits)
    return mz.make_model(graph, opset=17)


def mlp_feeds(count: int, seed: int = 7) -> List[Dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"x": rng.standard_normal((4, 16)).astype(np.float32)} for _ in range(count)]


def classifier(seed: int = 0, features: int = 16, classes: int = 4):
    """x[8,16] -> MatMul -> Add -> Relu -> MatMul -> y[8,4] logits: a small classifier."""
    rng = np.random.default_rng(seed)
    inits = [
        numpy_helper.from_array((rng.standard_normal((features, 32)) * 0.5).astype(np.float32), "W1"),
        numpy_helper.from_array((rng.standard_normal(32) * 0.1).astype(np.float32), "b1"),
        numpy_helper.from_array((rng.standard_normal((32, classes)) * 0.5).astype(np.float32), "W2"),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "W1"], ["h"], name="fc1"),
        helper.make_node("Add", ["h", "b1"], ["hb"], name="fc1_bias"),
        helper.make_node("Relu", ["hb"], ["ha"], name="relu"),
        helper.make_node("MatMul", ["ha", "W2"], ["y"], name="fc2"),
    ]
    graph = helper.make_graph(nodes, "classifier", [mz.vi("x", [8, features])], [mz.vi("y", [8, classes])], inits)
    return mz.make_model(graph, opset=17)


def uniform_feeds(count: int, lo: float, hi: float, seed: int = 3, shape=(8, 16)) -> List[Dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"x": rng.uniform(lo, hi, shape).astype(np.float32)} for _ in range(count)]


def _pair(tensor: str, scale: float, zero_point: int = 0):
    """Q and DQ nodes (int8) on ``tensor``, and their scale/zero-point initializers."""
    nodes = [helper.make_node("QuantizeLinear", [tensor, f"{tensor}_s", f"{tensor}_z"], [f"{tensor}_q"],
                              name=f"{tensor}_QuantizeLinear"),
             helper.make_node("DequantizeLinear", [f"{tensor}_q", f"{tensor}_s", f"{tensor}_z"], [f"{tensor}_dq"],
                              name=f"{tensor}_DequantizeLinear")]
    inits = [numpy_helper.from_array(np.array(scale, np.float32), f"{tensor}_s"),
             numpy_helper.from_array(np.array(zero_point, np.int8), f"{tensor}_z")]
    return nodes, inits


def two_or_one(scales=(1.0, 1.0, 4.0)):
    """y = q(a) + q(b) + q(c), a = b = x, c = 2x, with pairs on a, b, c (in that node order) of the
    given scales. On x = 0.45 every pair rounds its value to 0: errors 0.45, 0.45 and 0.9 (output
    error 1.8); at --atol 1 both {a, b} and {c} alone pass, and a search in node order meets {a, b}
    first."""
    nodes = [helper.make_node("Mul", ["x", "one"], ["a"], name="mul_a"),
             helper.make_node("Mul", ["x", "one"], ["b"], name="mul_b"),
             helper.make_node("Mul", ["x", "two"], ["c"], name="mul_c")]
    inits = [numpy_helper.from_array(np.array(1.0, np.float32), "one"),
             numpy_helper.from_array(np.array(2.0, np.float32), "two")]
    for tensor, scale in zip("abc", scales):
        n, i = _pair(tensor, scale)
        nodes += n
        inits += i
    nodes += [helper.make_node("Add", ["a_dq", "b_dq"], ["ab"], name="add_ab"),
              helper.make_node("Add", ["ab", "c_dq"], ["y"], name="add_c")]
    graph = helper.make_graph(nodes, "two_or_one", [mz.vi("x", [1, 4])], [mz.vi("y", [1, 4])], inits)
    return mz.make_model(graph, opset=17)


def relu6_mlp(seed: int = 0):
    """x[4,16] -> MatMul -> Clip(0, 6) -> MatMul -> Clip(0, 6) -> MatMul -> y[4,8]: the quantizer folds
    both Clips into the Qs after them; the MatMuls' outputs often exceed 6."""
    rng = np.random.default_rng(seed)
    inits = [
        numpy_helper.from_array((rng.standard_normal((16, 16)) * 2).astype(np.float32), "W1"),
        numpy_helper.from_array((rng.standard_normal((16, 16)) * 0.5).astype(np.float32), "W2"),
        numpy_helper.from_array(rng.standard_normal((16, 8)).astype(np.float32), "W3"),
        numpy_helper.from_array(np.array(0.0, np.float32), "lo"),
        numpy_helper.from_array(np.array(6.0, np.float32), "hi"),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "W1"], ["a"], name="fc1"),
        helper.make_node("Clip", ["a", "lo", "hi"], ["c"], name="clip1"),
        helper.make_node("MatMul", ["c", "W2"], ["b"], name="fc2"),
        helper.make_node("Clip", ["b", "lo", "hi"], ["d"], name="clip2"),
        helper.make_node("MatMul", ["d", "W3"], ["y"], name="fc3"),
    ]
    graph = helper.make_graph(nodes, "relu6_mlp", [mz.vi("x", [4, 16])], [mz.vi("y", [4, 8])], inits)
    return mz.make_model(graph, opset=17)


def chained_clips():
    """x -> pair on x (range [0, 1]) -> Mul 2 -> pair on a (range [0, 2]) -> y: on inputs in [-1, 1] both
    pairs clip the negatives, but the second only once the first is in float."""
    nodes, inits = _pair("x", 1 / 255, -128)
    nodes.append(helper.make_node("Mul", ["x_dq", "two"], ["a"], name="mul"))
    n, i = _pair("a", 2 / 255, -128)
    nodes += n + [helper.make_node("Identity", ["a_dq"], ["y"], name="out")]
    inits += i + [numpy_helper.from_array(np.array(2.0, np.float32), "two")]
    graph = helper.make_graph(nodes, "chained_clips", [mz.vi("x", [1, 16])], [mz.vi("y", [1, 16])], inits)
    return mz.make_model(graph, opset=17)


def masked_softmax():
    """y = Softmax(x + mask), the sum quantized on a range calibrated with the mask's -3.4e38 fill."""
    scale = 3.4e38 / 255
    nodes = [helper.make_node("Add", ["x", "mask"], ["s"], name="add_mask")]
    n, i = _pair("s", scale, 127)
    nodes += n + [helper.make_node("Softmax", ["s_dq"], ["y"], name="softmax", axis=-1)]
    graph = helper.make_graph(nodes, "masked_softmax", [mz.vi("x", [1, 8]), mz.vi("mask", [1, 8])],
                              [mz.vi("y", [1, 8])], i)
    return mz.make_model(graph, opset=17)


def chained_clips_float():
    """The float model of :func:`chained_clips`."""
    nodes = [helper.make_node("Mul", ["x", "two"], ["a"], name="mul"),
             helper.make_node("Identity", ["a"], ["y"], name="out")]
    graph = helper.make_graph(nodes, "chained_clips_float", [mz.vi("x", [1, 16])], [mz.vi("y", [1, 16])],
                              [numpy_helper.from_array(np.array(2.0, np.float32), "two")])
    return mz.make_model(graph, opset=17)


def sliced(clip_scale: float = 1 / 127, t_scale: Optional[float] = None):
    """x[1,16] -> Mul 2 -> a, pair on a (range +-1: clips 2x) -> Slice into s (first half) and t (second
    half), each with a pair on a's grid -> Concat -> y. The pairs on s and t only re-quantize a's values;
    once a is in float they clip again, so a, s and t go to float together."""
    nodes = [helper.make_node("Mul", ["x", "two"], ["a"], name="mul")]
    n, inits = _pair("a", clip_scale)
    nodes += n
    for name, lo, hi in (("s", 0, 8), ("t", 8, 16)):
        nodes.append(helper.make_node("Slice", ["a_dq", f"{name}_lo", f"{name}_hi", "axis1"], [name], name=f"slice_{name}"))
        inits += [numpy_helper.from_array(np.array([lo], np.int64), f"{name}_lo"),
                  numpy_helper.from_array(np.array([hi], np.int64), f"{name}_hi")]
        n, i = _pair(name, t_scale if name == "t" and t_scale else clip_scale)
        nodes += n
        inits += i
    nodes.append(helper.make_node("Concat", ["s_dq", "t_dq"], ["y"], name="concat", axis=1))
    inits += [numpy_helper.from_array(np.array(2.0, np.float32), "two"),
              numpy_helper.from_array(np.array([1], np.int64), "axis1")]
    graph = helper.make_graph(nodes, "sliced", [mz.vi("x", [1, 16])], [mz.vi("y", [1, 16])], inits)
    return mz.make_model(graph, opset=17)


def per_channel_clip(scales=(0.01, 0.01, 0.001, 0.01)):
    """x[1,4,8] -> Mul 1 -> a, a per-channel pair on a (axis 1, int8, zero points 0) -> y. Inputs in
    [-1, 1]: channel 2's scale covers only +-0.127 (it clips), the others +-1.27."""
    nodes = [helper.make_node("Mul", ["x", "one"], ["a"], name="mul"),
             helper.make_node("QuantizeLinear", ["a", "a_s", "a_z"], ["a_q"], name="a_QuantizeLinear", axis=1),
             helper.make_node("DequantizeLinear", ["a_q", "a_s", "a_z"], ["y"], name="a_DequantizeLinear", axis=1)]
    inits = [numpy_helper.from_array(np.array(1.0, np.float32), "one"),
             numpy_helper.from_array(np.array(scales, np.float32), "a_s"),
             numpy_helper.from_array(np.zeros(len(scales), np.int8), "a_z")]
    graph = helper.make_graph(nodes, "per_channel_clip", [mz.vi("x", [1, len(scales), 8])],
                              [mz.vi("y", [1, len(scales), 8])], inits)
    return mz.make_model(graph, opset=17)


def summed(ks, scale: float = 8.0):
    """y = q(t0) + q(t1) + ..., t_i = k_i * x, with a pair on each t_i (in that node order) whose
    scale rounds every value to 0 on x = 0.45: taking pair i back to float changes the output by
    k_i * 0.45. With signs mixed the pairs' errors cancel, so more pairs in float can fail where
    fewer passed (not monotone)."""
    nodes, inits, total = [], [], None
    for i, k in enumerate(ks):
        t = f"t{i}"
        nodes.append(helper.make_node("Mul", ["x", f"k{i}"], [t], name=f"mul_{t}"))
        inits.append(numpy_helper.from_array(np.array(k, np.float32), f"k{i}"))
        n, q = _pair(t, scale)
        nodes += n
        inits += q
        if total is not None:
            nodes.append(helper.make_node("Add", [total, f"{t}_dq"], [f"s{i}"], name=f"add_{i}"))
        total = f"s{i}" if total is not None else f"{t}_dq"
    nodes.append(helper.make_node("Identity", [total], ["y"], name="out"))
    graph = helper.make_graph(nodes, "summed", [mz.vi("x", [1, 4])], [mz.vi("y", [1, 4])], inits)
    return mz.make_model(graph, opset=17)


def tanh_mlp(seed: int = 0):
    """x[N,16] -> 4 x (MatMul, Add), Tanh after the first 3 -> Identity y[N,10], Identity h (the third
    Tanh), ArgMax cls: quantized, y's pair only re-quantizes the last Add's values (a tied pair)."""
    rng = np.random.default_rng(seed)
    dims = [16, 24, 24, 24, 10]
    nodes, inits, prev = [], [], "x"
    for i in range(len(dims) - 1):
        w = (rng.standard_normal((dims[i], dims[i + 1])) / np.sqrt(dims[i])).astype(np.float32)
        inits += [numpy_helper.from_array(w, f"W{i}"),
                  numpy_helper.from_array((0.1 * rng.standard_normal(dims[i + 1])).astype(np.float32), f"b{i}")]
        nodes += [helper.make_node("MatMul", [prev, f"W{i}"], [f"mm{i}"], name=f"MatMul{i}"),
                  helper.make_node("Add", [f"mm{i}", f"b{i}"], [f"a{i}"], name=f"Add{i}")]
        prev = f"a{i}"
        if i < len(dims) - 2:
            nodes.append(helper.make_node("Tanh", [prev], [f"t{i}"], name=f"Tanh{i}"))
            prev = f"t{i}"
    nodes += [helper.make_node("Identity", [prev], ["y"], name="out"),
              helper.make_node("Identity", ["t1"], ["h"], name="hout"),
              helper.make_node("ArgMax", ["y"], ["cls"], axis=1, keepdims=0, name="am")]
    graph = helper.make_graph(nodes, "tanh_mlp", [mz.vi("x", ["N", 16])],
                              [mz.vi("y", ["N", 10]), mz.vi("h", ["N", 24]),
                               helper.make_tensor_value_info("cls", onnx.TensorProto.INT64, ["N"])], inits)
    return mz.make_model(graph, opset=17)

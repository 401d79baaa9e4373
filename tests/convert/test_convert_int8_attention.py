"""Dynamically quantized T5 encoders convert to fp16: what their exports have that a plain dynamic-int8
layer lacks.

1. A Cast(to=float) with several readers right after a kept node: transformers 4.x's T5LayerNorm
casts the hidden states to float32 (``hidden_states.to(torch.float32)``), and after
quantize_dynamic the embedding is a ``DequantizeLinear`` (kept fp32). onnxconverter-common's last
pass took that Cast for one of its own fp32 Casts after its fp16 Cast, and failed on its several
readers (AttributeError: exit 1, naming a Cast the library had made, which --keep-fp32 cannot select).

2. The attention mask.

What a T5 encoder (transformers' export, then onnxruntime's quantize_dynamic) has that a plain
dynamic-int8 layer lacks: its relative position bias is masked by ``Where(mask, bias,
float32-lowest)``; the mask value (-3.4e38) is past fp16's range. The rule keeping the readers of
such a value in fp32 kept the ``Where``, but its output, which still holds -3.4e38, went on into
fp16 nodes: cast to fp16 it is -inf, and a row whose every key is masked is NaN after the Softmax
(float32 gives a uniform row). The nodes that pass the value on stay fp32 up to the Softmax."""

import json

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import modelzoo as mz
from toolkit.convert import fp16
from toolkit.convert.ranges import REASON_RANGE_CARRIED
from toolkit.convert.validate import validate

LOWEST = float(np.finfo(np.float32).min)


def masked_attention(d: int = 16):
    """x[B,S,d], mask[B,S] (int64) -> one attention head whose scores get a position bias masked by
    Where(mask, bias, float32-lowest), as transformers' T5 export computes it."""
    rng = np.random.default_rng(0)

    def w(name, *shape):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32), name)

    n = helper.make_node
    inits = [w("wq", d, d), w("wk", d, d), w("wv", d, d), w("bias", 1, 1, 1),
             numpy_helper.from_array(np.array([1], np.int64), "ax1"),
             numpy_helper.from_array(np.array(0, np.int64), "zero")]  # fmt: skip
    nodes = [
        n("Constant", [], ["lowest"], value=numpy_helper.from_array(np.array(LOWEST, np.float32)), name="lowest"),
        n("Unsqueeze", ["mask", "ax1"], ["m3"], name="mask3"),  # [B,1,S]
        n("Equal", ["m3", "zero"], ["pad"], name="pad"), n("Not", ["pad"], ["keep"], name="keep"),
        n("Where", ["keep", "bias", "lowest"], ["pbias"], name="mask_bias"),
        n("MatMul", ["x", "wq"], ["q"], name="q"), n("MatMul", ["x", "wk"], ["k"], name="k"),
        n("MatMul", ["x", "wv"], ["v"], name="v"), n("Transpose", ["k"], ["kt"], perm=[0, 2, 1], name="kt"),
        n("MatMul", ["q", "kt"], ["s"], name="qk"), n("Add", ["s", "pbias"], ["sb"], name="add_bias"),
        n("Softmax", ["sb"], ["p"], axis=-1, name="softmax"), n("MatMul", ["p", "v"], ["y"], name="pv"),
    ]  # fmt: skip
    graph = helper.make_graph(
        nodes, "t5_mask", [mz.vi("x", ["batch", "seq", d]), mz.vi("mask", ["batch", "seq"], TensorProto.INT64)],
        [mz.vi("y", ["batch", "seq", d])], inits,
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _feed(mask_row):
    x = np.random.default_rng(1).standard_normal((2, len(mask_row), 16)).astype(np.float32)
    mask = np.array([mask_row, [0] * len(mask_row)], np.int64)  # the second item: every key masked
    return {"x": x, "mask": mask}


def test_the_nodes_that_pass_the_mask_value_on_stay_fp32():
    conv = fp16.convert(masked_attention())
    assert conv.kept["add_bias"] == conv.kept["softmax"] == REASON_RANGE_CARRIED
    assert "pv" not in conv.kept and "qk" not in conv.kept  # the rest is fp16
    val = validate(masked_attention(), conv.model, _feed([1, 1, 1, 0, 0]))
    assert val.passed, val.as_dict()


def test_a_dynamic_int8_t5_attention_converts_and_runs(cli, tmp_path):
    from onnxruntime.quantization import QuantType, quantize_dynamic

    src = mz.save(masked_attention(), tmp_path / "attn.onnx")
    q = tmp_path / "attn_int8.onnx"
    quantize_dynamic(src, str(q), weight_type=QuantType.QInt8)
    out = tmp_path / "attn16.onnx"
    np.savez(tmp_path / "in.npz", **_feed([1, 1, 0, 0, 0, 0, 0]))
    r = cli("convert", q, "--fp-to-fp16", "-o", out, "--json", "--load-inputs", tmp_path / "in.npz")
    assert r.code == 0, r.err
    report = json.loads(r.out)
    assert report["validation"]["passed"], report["validation"]
    assert report["kept_fp32"]["softmax"] == REASON_RANGE_CARRIED
    feed = _feed([1, 0, 0, 0])
    got = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"]).run(None, feed)[0]
    ref = ort.InferenceSession(str(q), providers=["CPUExecutionProvider"]).run(None, feed)[0]
    assert np.isfinite(got).all() and np.abs(got - ref).max() < 0.05


def dequantized_embedding_norm():
    """q (int8) -> DequantizeLinear -> Cast(to=float) -> Pow, Mul, Add (an RMS norm's readers) + residual."""
    n = helper.make_node
    inits = [numpy_helper.from_array(np.array(0.05, np.float32), "scale"), numpy_helper.from_array(np.array(0, np.int8), "zp"),
             numpy_helper.from_array(np.array(2.0, np.float32), "two"),
             numpy_helper.from_array(np.full((4,), 0.5, np.float32), "w")]  # fmt: skip
    nodes = [
        n("DequantizeLinear", ["q", "scale", "zp"], ["dq"], name="dq"),
        n("Cast", ["dq"], ["h"], to=TensorProto.FLOAT, name="to_float"),
        n("Pow", ["h", "two"], ["sq"], name="pow"), n("Mul", ["h", "w"], ["hw"], name="mul"),
        n("Add", ["sq", "hw"], ["s"], name="add"), n("Add", ["s", "h"], ["y"], name="residual"),
    ]  # fmt: skip
    graph = helper.make_graph(nodes, "g", [mz.vi("q", ["n", 4], TensorProto.INT8)], [mz.vi("y", ["n", 4])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_a_cast_to_float_with_several_readers_after_a_kept_node_converts(cli, tmp_path):
    src = mz.save(dequantized_embedding_norm(), tmp_path / "emb.onnx")
    out = tmp_path / "emb16.onnx"
    r = cli("convert", src, "--fp-to-fp16", "-o", out, "--input-shapes", "q:[4,4]")
    assert r.code == 0, r.err
    q = np.arange(-8, 8, dtype=np.int8).reshape(4, 4)
    got = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"]).run(None, {"q": q})[0]
    ref = ort.InferenceSession(src, providers=["CPUExecutionProvider"]).run(None, {"q": q})[0]
    assert np.allclose(got, ref, atol=1e-3)


def test_a_library_failure_names_no_node_the_library_made(cli, tmp_path, monkeypatch):
    from onnxconverter_common import float16

    def broken(model, *_a, **_k):
        node = helper.make_node("Cast", ["a"], ["b"], to=TensorProto.FLOAT, name="pv_cast_to_y")  # (one it made)
        raise AttributeError(f"'list' object has no attribute 'input' ({node.name})")

    monkeypatch.setattr(float16, "convert_float_to_float16", broken)
    src = mz.save(masked_attention(), tmp_path / "attn.onnx")
    r = cli("convert", src, "--fp-to-fp16", "-o", tmp_path / "o.onnx")
    assert r.code == 1 and not (tmp_path / "o.onnx").exists()
    assert "--keep-fp32 'pv_cast_to_y'" not in r.err and "--keep-fp32 OP" in r.err, r.err


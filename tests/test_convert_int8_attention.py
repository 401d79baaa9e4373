"""A T5-style attention mask converts to fp16 without turning a masked row into NaN.

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

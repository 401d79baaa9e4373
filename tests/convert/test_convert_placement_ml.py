"""Valid models are never refused for a type-check failure the conversion made: the standard ops
next to ai.onnx.ml ops stay fp32 by rule (a LightGBM classifier as onnxmltools writes it with
zipmap=False: TreeEnsembleClassifier -> Identity -> Mul by one), a dynamically quantized
transformer layer converts, and a failure the rules cannot avoid is exit 1 naming the node."""

import json

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import modelzoo as mz
from toolkit.convert import fp16
from toolkit.convert.placement import REASON_ML

_TREE = dict(
    class_ids=[0, 1, 0, 1], class_nodeids=[1, 1, 2, 2], class_treeids=[0, 0, 0, 0], class_weights=[0.8, 0.2, 0.3, 0.7],
    classlabels_int64s=[0, 1], nodes_falsenodeids=[2, 0, 0], nodes_featureids=[0, 0, 0],
    nodes_hitrates=[1.0, 1.0, 1.0], nodes_missing_value_tracks_true=[0, 0, 0],
    nodes_modes=["BRANCH_LEQ", "LEAF", "LEAF"], nodes_nodeids=[0, 1, 2], nodes_treeids=[0, 0, 0],
    nodes_truenodeids=[1, 0, 0], nodes_values=[0.5, 0.0, 0.0], post_transform="LOGISTIC",
)  # fmt: skip


def lightgbm_like():
    """input[N,4] -> Add -> Mul (a feeder) -> TreeEnsembleClassifier -> Identity -> Mul by one -> probabilities."""
    nodes = [
        helper.make_node("Add", ["input", "w"], ["xa"], name="Add_in"),
        helper.make_node("Mul", ["xa", "w"], ["xs"], name="Mul_in"),
        helper.make_node("TreeEnsembleClassifier", ["xs"], ["label_tensor", "probability_tensor"],
                         name="LightGbmLGBMClassifier", domain="ai.onnx.ml", **_TREE),
        helper.make_node("Identity", ["probability_tensor"], ["probs"], name="Identity"),
        helper.make_node("Cast", ["label_tensor"], ["label"], to=TensorProto.INT64, name="Cast"),
        helper.make_node("Mul", ["probs", "one"], ["probabilities"], name="Mul_0"),
    ]  # fmt: skip
    graph = helper.make_graph(
        nodes, "lgbm", [mz.vi("input", [None, 4])],
        [mz.vi("label", [None], TensorProto.INT64), mz.vi("probabilities", [None, 2])],
        [numpy_helper.from_array(np.array(1.0, np.float32), "one"),
         numpy_helper.from_array(np.full((4,), 2.0, np.float32), "w")],
    )  # fmt: skip
    return helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 9), helper.make_opsetid("ai.onnx.ml", 1)], ir_version=7
    )


def test_the_neighbours_of_a_tree_ensemble_stay_fp32(cli, tmp_path):
    src = mz.save(lightgbm_like(), tmp_path / "lgbm.onnx")
    out = tmp_path / "lgbm16.onnx"
    r = cli("convert", src, "--fp-to-fp16", "-o", out, "--json", "--input-shapes", "input:[5,4]")
    assert r.code == 0, r.err
    kept = json.loads(r.out)["kept_fp32"]
    assert kept["Mul_0"] == kept["Identity"] == kept["Mul_in"] == REASON_ML
    assert "feeds or reads an ai.onnx.ml op" in r.err
    sess = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    x = np.linspace(0, 1, 20, dtype=np.float32).reshape(5, 4)
    ref = ort.InferenceSession(src, providers=["CPUExecutionProvider"]).run(None, {"input": x})
    got = sess.run(None, {"input": x})
    assert np.array_equal(got[0], ref[0]) and np.allclose(got[1], ref[1], atol=1e-3)


def test_debug_precision_takes_the_tree_model(cli, tmp_path):
    src = mz.save(lightgbm_like(), tmp_path / "lgbm.onnx")
    r = cli("debug", "precision", src, "--input-shapes", "input:[5,4]")
    assert r.code == 0, r.err


def attention_layer(d: int = 16, heads: int = 2):
    """One transformer layer (self-attention, LayerNorm, feed-forward) at opset 17, seq dynamic."""
    rng = np.random.default_rng(0)

    def w(name, *shape):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.2).astype(np.float32), name)

    n = helper.make_node
    inits = [w("wq", d, d), w("wk", d, d), w("wv", d, d), w("wo", d, d), w("w1", d, 4 * d), w("w2", 4 * d, d),
             numpy_helper.from_array(np.array([0, 0, heads, d // heads], np.int64), "heads"),
             numpy_helper.from_array(np.array([0, 0, d], np.int64), "merged"),
             numpy_helper.from_array(np.array(1 / np.sqrt(d // heads), np.float32), "scale"),
             numpy_helper.from_array(np.ones(d, np.float32), "g"), numpy_helper.from_array(np.zeros(d, np.float32), "b")]
    nodes = [
        n("MatMul", ["x", "wq"], ["q"], name="q"), n("MatMul", ["x", "wk"], ["k"], name="k"),
        n("MatMul", ["x", "wv"], ["v"], name="v"), n("Reshape", ["q", "heads"], ["q4"], name="rq"),
        n("Reshape", ["k", "heads"], ["k4"], name="rk"), n("Reshape", ["v", "heads"], ["v4"], name="rv"),
        n("Transpose", ["q4"], ["qt"], perm=[0, 2, 1, 3], name="tq"),
        n("Transpose", ["k4"], ["kt"], perm=[0, 2, 3, 1], name="tk"),
        n("Transpose", ["v4"], ["vt"], perm=[0, 2, 1, 3], name="tv"), n("MatMul", ["qt", "kt"], ["s"], name="qk"),
        n("Mul", ["s", "scale"], ["ss"], name="sc"), n("Softmax", ["ss"], ["p"], axis=-1, name="sm"),
        n("MatMul", ["p", "vt"], ["o"], name="pv"), n("Transpose", ["o"], ["ot"], perm=[0, 2, 1, 3], name="to"),
        n("Reshape", ["ot", "merged"], ["om"], name="rm"), n("MatMul", ["om", "wo"], ["a"], name="o"),
        n("Add", ["x", "a"], ["r1"], name="res1"), n("LayerNormalization", ["r1", "g", "b"], ["l1"], axis=-1, name="ln"),
        n("MatMul", ["l1", "w1"], ["h"], name="ff1"), n("Relu", ["h"], ["hr"], name="relu"),
        n("MatMul", ["hr", "w2"], ["f"], name="ff2"), n("Add", ["l1", "f"], ["y"], name="res2"),
    ]  # fmt: skip
    graph = helper.make_graph(nodes, "layer", [mz.vi("x", ["batch", "seq", d])], [mz.vi("y", ["batch", "seq", d])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_a_dynamic_int8_transformer_layer_converts(cli, tmp_path):
    from onnxruntime.quantization import QuantType, quantize_dynamic

    src = mz.save(attention_layer(), tmp_path / "layer.onnx")
    q = tmp_path / "layer_int8.onnx"
    quantize_dynamic(src, str(q), weight_type=QuantType.QInt8)
    out = tmp_path / "layer16.onnx"
    r = cli("convert", q, "--fp-to-fp16", "-o", out, "--json", "--input-shapes", "x:[2,7,16]")
    assert r.code == 0, r.err
    val = json.loads(r.out)["validation"]
    assert val["passed"] and val["measured"]["differing_outputs"] == []
    ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])


def test_a_failure_the_rules_cannot_avoid_is_exit_1_naming_the_node(cli, tmp_path, monkeypatch):
    from onnxconverter_common import float16

    def broken(model, *_a, **_k):
        for node in model.graph.node:
            if node.op_type == "Relu":
                raise AttributeError("'NoneType' object has no attribute 'name'")

    monkeypatch.setattr(float16, "convert_float_to_float16", broken)
    src = mz.save(attention_layer(), tmp_path / "layer.onnx")
    r = cli("convert", src, "--fp-to-fp16", "-o", tmp_path / "o.onnx")
    assert r.code == 1, r.err
    assert "at node relu (Relu)" in r.err and "--keep-fp32 'relu'" in r.err
    assert r.err.count("error:") == 1 and not (tmp_path / "o.onnx").exists()


def test_a_type_check_failure_is_exit_1_naming_the_node(cli, tmp_path, monkeypatch):
    monkeypatch.setattr("toolkit.convert.placement.ml_neighbours", lambda model: [])
    src = mz.save(lightgbm_like(), tmp_path / "lgbm.onnx")
    r = cli("convert", src, "--fp-to-fp16", "-o", tmp_path / "o.onnx")
    assert r.code == 1, r.err
    assert "does not type-check" in r.err and "--keep-fp32 'Mul_0'" in r.err
    assert fp16.ConverterError.exit_code == 1

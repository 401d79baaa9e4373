"""`toolkit debug precision` on quantized (QDQ) models: the fewest Q/DQ pairs to take back to float."""

import json

import numpy as np
import onnx
from onnx import helper
import onnxruntime as ort
import pytest

import modelzoo as mz
import qdq_models as qm
from toolkit.core.compare.tolerances import Tolerances
from toolkit.core.graph.constants import constant_values
from toolkit.core.io.datafiles import save_inputs
from toolkit.quant import qdq
from toolkit.quant import stats as qdq_stats
from toolkit.precision.qdq_search import QdqConfig, QdqSearch

PLANTED = "ctx"  # the activation whose pair gets a scale 40x too coarse


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("qdq")
    float_path = mz.save(qm.transformer(), d / "float.onnx")
    plain = qm.quantize(float_path, str(d / "plain.onnx"), qm.feeds(64, seed=1))
    planted = qm.quantize(float_path, str(d / "planted.onnx"), qm.feeds(64, seed=1))
    qm.coarsen(planted, PLANTED, 40.0)
    return {"float": float_path, "plain": plain, "planted": planted, "dir": d}


def ort_outputs(path, feeds):
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return [sess.run(None, f)[0] for f in feeds]


def max_error(path, ref_path, feeds):
    return max(float(np.abs(a - b).max()) for a, b in zip(ort_outputs(path, feeds), ort_outputs(ref_path, feeds)))


def test_the_planted_pair_alone_is_taken_back_to_float(models, tmp_path, cli):
    search_a, search_b, unseen = qm.feeds(3, seed=11), qm.feeds(3, seed=12), qm.feeds(20, seed=999)
    plain = max_error(models["plain"], models["float"], search_a + search_b)
    planted = max_error(models["planted"], models["float"], search_a + search_b)
    atol = (plain * planted) ** 0.5  # between the plain QDQ error and the planted one
    assert plain < atol < planted
    a, b = save_inputs_file(tmp_path / "a.json", search_a), save_inputs_file(tmp_path / "b.json", search_b)
    out = tmp_path / "fixed.onnx"
    r = cli("debug", "precision", models["planted"], "--reference-model", models["float"], "--load-inputs", a, b,
            "--atol", f"{atol:.4g}", "--rtol", "0", "-o", out, "--json")
    assert r.code == 0, r.err
    result = json.loads(r.out)
    assert [p["tensor"] for p in result["float_pairs"]] == [PLANTED]
    assert result["checks"] <= 40 and result["one_minimal"]
    assert result["float_pairs"][0]["levels"] < qdq_stats.COARSE_LEVELS  # kept for its coarse scale
    assert any(w.startswith("coarse scale") for w in result["float_pairs"][0]["why"])
    # the written model runs in a plain ONNX-Runtime session and passes on inputs the search never saw
    assert max_error(out, models["float"], unseen) < atol
    assert max_error(models["planted"], models["float"], unseen) > atol
    names = {n.op_type for n in onnx.load(str(out)).graph.node}
    assert "QuantizeLinear" in names  # every other pair is still quantized


def save_inputs_file(path, feeds):
    save_inputs(str(path), feeds)
    return str(path)


def test_reference_is_the_model_with_every_pair_in_float(models, tmp_path):
    feeds_path = save_inputs_file(tmp_path / "in.json", qm.feeds(4, seed=5))
    outcome = QdqSearch(QdqConfig(models["planted"], load_inputs=[feeds_path], tolerances=Tolerances.of(atol=1.0, rtol=0.0))).run()
    assert outcome.status == "found"
    assert [outcome.stats[n].pair.tensor for n in outcome.kept] == [PLANTED]
    suggestion = outcome.suggestions[0]
    assert suggestion.passes  # a scale from the observed range fixes it without float
    assert suggestion.scale < 0.1


def test_summary_names_pair_scale_and_zero_point(models, tmp_path, cli):
    feeds_path = save_inputs_file(tmp_path / "in.json", qm.feeds(4, seed=5))
    r = cli("debug", "precision", models["planted"], "--load-inputs", feeds_path, "--atol", "1", "--rtol", "0")
    assert r.code == 0, r.err
    assert r.out.split() == ["ctx_QuantizeLinear"]
    assert "ctx_QuantizeLinear on ctx (scale " in r.err and "zero point" in r.err
    assert "suggested scale" in r.err and "Minimum:" in r.err


def test_bypass_keeps_a_folded_relu(models):
    model = onnx.load(models["plain"])
    pairs = {p.tensor: p for p in qdq.find_pairs(model)}
    # the quantizer folds the Relu after fc1_bias into the Q of "ha" (its range starts at 0)
    assert "relu" not in {n.name for n in model.graph.node}
    assert pairs["ha"].starts_at_zero and not pairs["h"].starts_at_zero
    bypassed = qdq.bypass(model, list(pairs.values()))
    ops = {n.name: n.op_type for n in bypassed.graph.node}
    assert ops[pairs["ha"].dq_nodes[0]] == "Relu" and ops[pairs["h"].dq_nodes[0]] == "Identity"
    ref = onnx.load(models["float"])
    # with every activation pair in float, only the weights' rounding is left
    feeds = qm.feeds(2, seed=3)
    got = [ort.InferenceSession(bypassed.SerializeToString()).run(None, f)[0] for f in feeds]
    want = [ort.InferenceSession(ref.SerializeToString()).run(None, f)[0] for f in feeds]
    assert max(float(np.abs(g - w).max()) for g, w in zip(got, want)) < 0.2


def test_weight_pairs_from_the_float_model(models, tmp_path):
    feeds_path = save_inputs_file(tmp_path / "in.json", qm.feeds(2, seed=5))
    cfg = QdqConfig(models["plain"], reference_model=models["float"], weights=True, load_inputs=[feeds_path],
                    tolerances=Tolerances.of(atol=1e-4, rtol=0.0))
    search = QdqSearch(cfg)
    outcome = search.run()
    weights = [p for p in search.pairs if p.weight]
    assert {p.tensor for p in weights} >= {"Wq", "Wk", "Wv", "Wo", "W1", "W2"}
    # every pair in float is the float model itself
    assert search.passes(search.index.full_mask)
    assert outcome.status == "found" and outcome.one_minimal


@pytest.mark.parametrize("name,known,expected", [
    ("x_QuantizeLinear_Input", {"x"}, "x"), ("x_DequantizeLinear_Output", {"x"}, "x"), ("W_quantized", {"W"}, "W"),
    ("x", {"x"}, "x"), ("y_DequantizeLinear_Output", {"x"}, None),
])
def test_float_names(name, known, expected):
    assert qdq.match_name(name, known) == expected


def test_integer_op_models_say_why_in_one_line(models, tmp_path, cli):
    """A pair option on a model quantized in integer ops only: one error line naming the ops."""
    from onnxruntime.quantization import quantize_dynamic

    dyn = tmp_path / "dynamic.onnx"
    quantize_dynamic(models["float"], str(dyn))
    before = dyn.read_bytes()
    r = cli("debug", "precision", dyn, "--qdq-weights")
    assert r.code == 3
    assert r.err.count("error:") == 1 and "integer ops" in r.err and "MatMulInteger" in r.err
    assert "Traceback" not in r.err and dyn.read_bytes() == before


def test_integer_op_models_get_the_fp16_search_with_a_note(models, tmp_path, cli):
    """No pairs to search: the fp16 node search runs, as on any float model, and says why."""
    from onnxruntime.quantization import quantize_dynamic

    dyn = tmp_path / "dynamic.onnx"
    quantize_dynamic(models["float"], str(dyn))
    r = cli("debug", "precision", dyn, "-o", tmp_path / "mixed.onnx", "--atol", "0.05")
    assert r.code == 0, r.err
    assert "quantized in integer ops" in r.err and "fp16" in r.err
    ort.InferenceSession(str(tmp_path / "mixed.onnx"))  # the written model loads


def test_a_model_with_no_float32_compute_has_nothing_to_search(tmp_path, cli):
    graph = helper.make_graph([helper.make_node("Add", ["x", "x"], ["y"], name="add")], "dbl",
                              [helper.make_tensor_value_info("x", onnx.TensorProto.DOUBLE, [2])],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.DOUBLE, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(tmp_path / "d.onnx"))
    r = cli("debug", "precision", tmp_path / "d.onnx", "-o", tmp_path / "o.onnx")
    assert r.code == 0, r.err
    assert "Nothing to search" in r.err and "error:" not in r.err


def test_usage_errors(models, tmp_path, cli):
    r = cli("debug", "precision", models["float"], "--reference-model", models["float"])
    assert r.code == 2 and "quantized model" in r.err
    r = cli("debug", "precision", models["planted"], "--compare", "onnxrt", "onnxrt:fp16", "--reference-model",
            models["float"])
    assert r.code == 2 and "fp16/bf16" in r.err
    r = cli("debug", "precision", models["planted"], "--reference-model", tmp_path / "missing.onnx")
    assert r.code == 3 and "missing.onnx" in r.err
    before = open(models["float"], "rb").read()
    r = cli("debug", "precision", models["planted"], "--reference-model", models["float"], "-o", models["float"])
    assert r.code == 2 and "would overwrite --reference-model" in r.err
    assert open(models["float"], "rb").read() == before


def test_openvino_as_the_candidate_runner(models, tmp_path, cli):
    pytest.importorskip("openvino")
    feeds_path = save_inputs_file(tmp_path / "in.json", qm.feeds(2, seed=5))
    r = cli("debug", "precision", models["planted"], "--reference-model", models["float"], "--load-inputs", feeds_path,
            "--atol", "1", "--rtol", "0", "--compare", "onnxrt", "openvino", "--json")
    assert r.code == 0, r.err
    assert [p["tensor"] for p in json.loads(r.out)["float_pairs"]] == [PLANTED]


def test_an_fp16_candidate_still_searches_nodes_of_a_quantized_model(models, cli):
    r = cli("debug", "precision", models["planted"], "--compare", "onnxrt", "onnxrt:fp16", "--json")
    assert r.code in (0, 1), r.err
    assert "keep_fp32" in json.loads(r.out)


def _run(model, feed):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feed)[0]


def test_every_pair_in_float_is_the_float_model_with_a_folded_clip(tmp_path):
    float_model = qm.clip_mlp()
    float_path = mz.save(float_model, tmp_path / "mlp.onnx")
    q_path = qm.quantize(float_path, str(tmp_path / "mlp_qdq.onnx"), qm.mlp_feeds(16))
    model = onnx.load(q_path)
    assert "Clip" not in {n.op_type for n in model.graph.node}  # folded into the Q of "c"
    pairs = qdq.find_pairs(model, weights=True, float_model=float_model)
    clip = next(p for p in pairs if p.tensor == "c")
    assert clip.folded == pytest.approx((0.0, 0.3))
    feed = qm.mlp_feeds(1, seed=99)[0]
    np.testing.assert_array_equal(_run(qdq.bypass(model, pairs), feed), _run(float_model, feed))
    # the statistics compare the pair with its input clamped as the float model clamps it
    before = [np.clip(feed["x"] @ constant_values(float_model.graph)["W1"], -5, 5)]
    st = qdq_stats.pair_stats(clip, before, [np.clip(before[0], 0, 0.3)])
    assert st.local_max == pytest.approx(0.0, abs=1e-6)


@pytest.mark.parametrize("opset", [10, 13])
def test_a_folded_clip_comes_back_at_any_opset(opset):
    from onnx import TensorProto, helper, numpy_helper

    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], name="Q"),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], name="DQ")]
    inits = [numpy_helper.from_array(np.array(0.01, np.float32), "s"), numpy_helper.from_array(np.array(0, np.uint8), "z")]
    graph = helper.make_graph(nodes, "g", [mz.vi("x", [4])], [mz.vi("y", [4], TensorProto.FLOAT)], inits)
    model = mz.make_model(graph, opset=opset)
    pair = qdq.find_pairs(model)[0]
    pair.folded = (0.0, 0.3)
    bypassed = qdq.bypass(model, [pair])
    onnx.checker.check_model(bypassed)
    np.testing.assert_allclose(_run(bypassed, {"x": np.array([-1, 0.1, 0.5, 2], np.float32)}), [0, 0.1, 0.3, 0.3])

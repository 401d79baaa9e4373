"""Why a kept Q/DQ pair matters: measured where it matters (the other kept pairs in float), weight
pairs by their weights, sentinel (mask) ranges named as such."""

import json

import numpy as np

import modelzoo as mz
import qdq_models as qm
from toolkit.core.compare.tolerances import Tolerances
from toolkit.quant import qdq
from toolkit.quant import stats as qdq_stats
from toolkit.core.io.datafiles import save_inputs


def _inputs(path, feeds):
    save_inputs(str(path), feeds)
    return str(path)


def test_a_kept_pair_is_measured_with_the_other_kept_pairs_in_float(tmp_path, cli):
    q = mz.save(qm.chained_clips(), tmp_path / "q.onnx")
    f = mz.save(qm.chained_clips_float(), tmp_path / "f.onnx")
    feeds = _inputs(tmp_path / "in.json", [{"x": np.linspace(-1, 1, 16, dtype=np.float32).reshape(1, 16)}])
    r = cli("debug", "precision", q, "--reference-model", f, "--load-inputs", feeds, "--atol", "0.1", "--rtol", "0",
            "--json")
    assert r.code == 0, r.err
    pairs = {p["tensor"]: p for p in json.loads(r.out)["float_pairs"]}
    assert set(pairs) == {"x", "a"}
    # on the fully quantized model a's input is already clipped by x's pair; with x in float it clips half
    assert pairs["a"]["clipped"] > 0.4 and any(w.startswith("clipping") for w in pairs["a"]["why"])
    assert "calibration mismatch: 2 of the 2 pairs clip" in r.err and "input x:" in r.err


def test_a_mask_range_pair_is_named_as_such(tmp_path, cli):
    model = mz.save(qm.masked_softmax(), tmp_path / "mask.onnx")
    mask = np.zeros((1, 8), np.float32)
    mask[0, 5:] = -3.4e38
    feeds = _inputs(tmp_path / "in.json", [{"x": np.linspace(-2, 2, 8, dtype=np.float32).reshape(1, 8), "mask": mask}])
    r = cli("debug", "precision", model, "--load-inputs", feeds, "--atol", "0.01", "--rtol", "0", "--json",
            "--qdq-table")
    assert r.code == 0, r.err
    result = json.loads(r.out)
    why = result["float_pairs"][0]["why"]
    assert why[0].startswith("sentinel range") and "mask" in why[0]
    assert not any(w.startswith(("saturation", "coarse scale")) for w in why)
    assert result["table"][0]["verdict"] == "adds error"


def test_a_per_tensor_weight_over_uneven_channels_gets_the_per_channel_suggestion():
    w = np.random.default_rng(0).standard_normal((16, 4)).astype(np.float32)
    w[:, 0] *= 50  # one output channel 50x wider than the others
    scale = np.float32(np.abs(w).max() / 127)
    pair = qdq.Pair("w", "W", ["W_dq"], ["dq"], np.array(scale), np.array(0, np.int8), -128, 127, weight=True)
    st = qdq_stats.weight_stats(pair, w)
    assert st.spread is not None and st.spread > 8
    assert any("use per-channel" in r for r in st.reasons)
    assert any(r.startswith("weight error") and "SQNR" in r for r in st.reasons)


def test_apply_scales_writes_the_model_with_the_suggested_scales(tmp_path, cli):
    import onnxruntime as ort

    model = mz.save(qm.two_or_one(), tmp_path / "two.onnx")
    x = np.full((1, 4), 0.45, np.float32)
    feeds = _inputs(tmp_path / "in.json", [{"x": x}])
    out = tmp_path / "scaled.onnx"
    r = cli("debug", "precision", model, "--load-inputs", feeds, "--atol", "1", "--rtol", "0", "--apply-scales",
            "-o", out, "--json")
    assert r.code == 0, r.err
    result = json.loads(r.out)
    suggested = result["float_pairs"][0]["suggested"]
    assert suggested["passes"] and suggested["robust"] is True and "% of --atol 1 used" in suggested["margin"]
    assert result["scaled"] == {"passes": True, "detail": result["scaled"]["detail"], "written": True}
    # every pair is still quantized (c with its new scale), and the model passes where the original fails
    assert sum(n.op_type == "QuantizeLinear" for n in __import__("onnx").load(str(out)).graph.node) == 3
    got = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert float(np.abs(got - 4 * x).max()) <= 1


def test_pairs_are_named_as_the_users_graph_names_them(tmp_path):
    float_path = mz.save(qm.classifier(), tmp_path / "f.onnx")
    q_path = qm.quantize(float_path, str(tmp_path / "q.onnx"), qm.uniform_feeds(4, 0, 1))
    import onnx

    out_pair = next(p for p in qdq.find_pairs(onnx.load(q_path)) if p.tensor.startswith("y"))
    assert out_pair.tensor == "y_QuantizeLinear_Input" and out_pair.shown == "y"
    assert " on y (" in out_pair.describe()


def test_ctrl_c_after_the_search_keeps_the_result(tmp_path, monkeypatch):
    from toolkit.precision.qdq_search import QdqConfig, QdqSearch

    def interrupted(self, kept):
        raise KeyboardInterrupt

    monkeypatch.setattr(QdqSearch, "held_out_check", interrupted)
    model = mz.save(qm.two_or_one(), tmp_path / "two.onnx")
    feeds = _inputs(tmp_path / "in.json", [{"x": np.full((1, 4), 0.45, np.float32)}])
    outcome = QdqSearch(QdqConfig(model, load_inputs=[feeds], tolerances=Tolerances.of(atol=1.0, rtol=0.0))).run()
    assert outcome.status == "found" and outcome.kept == ["c_QuantizeLinear"] and outcome.after_interrupted


def test_apply_scales_checks_the_written_model_on_the_held_out_inputs(tmp_path, cli):
    model = mz.save(qm.two_or_one(), tmp_path / "two.onnx")
    feeds = _inputs(tmp_path / "in.json", [{"x": np.full((1, 4), 0.45, np.float32)}])
    # the held-out sets are wider than the search's: the suggested scale of c clips them
    held = _inputs(tmp_path / "held.json", [{"x": np.full((1, 4), 2.0, np.float32)}] * 2)
    out = tmp_path / "scaled.onnx"
    r = cli("debug", "precision", model, "--load-inputs", feeds, "--validate-inputs", held, "--atol", "1",
            "--rtol", "0", "--apply-scales", "-o", out, "--json")
    assert r.code == 1, r.err
    result = json.loads(r.out)
    assert result["scaled"]["written"] and result["held_out"]["scaled"]
    assert result["held_out"]["passed"] == 0 and not result["held_out"]["holds"]
    assert "the model with the suggested scales does not hold" in r.err and "it holds" not in r.err
    assert "rerun without --apply-scales" in r.err  # (the alternative: the model with the pairs in float)


def _tanh_mlp(tmp_path):
    """The float MLP, its QDQ copy (calibrated on [-1, 1]) and 8 input sets on [-2, 2] (which clip)."""
    f = mz.save(qm.tanh_mlp(), tmp_path / "f.onnx")
    rng = np.random.default_rng(0)
    for a, b in zip([16, 24, 24, 24], [24, 24, 24, 10]):  # (the calibration continues the weights' draws)
        rng.standard_normal((a, b)), rng.standard_normal(b)
    q = qm.quantize(f, str(tmp_path / "q.onnx"), [{"x": rng.uniform(-1, 1, (8, 16)).astype(np.float32)}
                                                  for _ in range(4)])
    rng = np.random.default_rng(100)
    feeds = _inputs(tmp_path / "in.json", [{"x": rng.uniform(-2, 2, (8, 16)).astype(np.float32)} for _ in range(8)])
    return f, q, feeds


def _requantized_passes(q, f, feeds, float_pairs, name, scale, zero_point, atol):
    """Whether the QDQ model, with the pairs ``float_pairs`` in float but ``name`` requantized with
    (scale, zero point), is within ``atol`` of the float model on every set (each output)."""
    import onnx
    import onnxruntime as ort
    from toolkit.core.io.datafiles import load_inputs

    model = onnx.load(q)
    pairs = {p.name: p for p in qdq.find_pairs(model, float_model=onnx.load(f))}
    bypassed = qdq.bypass(model, [pairs[n] for n in float_pairs])
    fixed = qdq.requantize(bypassed, pairs[name], np.float32(scale), np.asarray(zero_point, np.int8))
    a = ort.InferenceSession(fixed.SerializeToString(), providers=["CPUExecutionProvider"])
    b = ort.InferenceSession(f, providers=["CPUExecutionProvider"])
    return all(np.abs(np.asarray(x, np.float64) - np.asarray(y, np.float64)).max() <= atol
               for s in load_inputs(feeds) for x, y in zip(a.run(None, s), b.run(None, s)))


def test_a_tied_pairs_suggested_scale_is_checked_with_that_pair_quantized(tmp_path, cli):
    f, q, feeds = _tanh_mlp(tmp_path)
    r = cli("debug", "precision", q, "--reference-model", f, "--load-inputs", feeds, "--held-out", "0",
            "--atol", "0.2", "--rtol", "0", "--json")
    assert r.code == 0, r.err
    kept = json.loads(r.out)["float_pairs"]
    names = [p["pair"] for p in kept]
    tied = next(p for p in kept if p["shown"] == "y")  # (re-quantizes the last Add's values: tied to a3's pair)
    assert tied["suggested"] is not None
    # the verdict said is the verdict of the model with y's pair quantized with that scale, the others in float
    truth = _requantized_passes(q, f, feeds, [n for n in names if n != tied["pair"]], tied["pair"],
                                tied["suggested"]["scale"], tied["suggested"]["zero_point"], 0.2)
    assert tied["suggested"]["passes"] == truth


def test_a_fragile_scale_names_the_nudge_it_fails_at(tmp_path, cli):
    f, q, feeds = _tanh_mlp(tmp_path)
    r = cli("debug", "precision", q, "--reference-model", f, "--load-inputs", feeds, "--held-out", "0",
            "--atol", "0.2", "--rtol", "0", "--json")
    assert r.code == 0, r.err
    checked = 0
    for p in json.loads(r.out)["float_pairs"]:
        sug = p["suggested"]
        if not sug or not sug["passes"] or p["shown"] == "y":
            continue
        others = [o["pair"] for o in json.loads(r.out)["float_pairs"] if o["pair"] != p["pair"]]
        for nudge, k in (("-2%", 0.98), ("+2%", 1.02)):
            passes = _requantized_passes(q, f, feeds, others, p["pair"], sug["scale"] * k, sug["zero_point"], 0.2)
            assert (nudge not in sug["fails_at"]) == passes, (p["tensor"], nudge, sug)
            checked += 1
    assert checked >= 4

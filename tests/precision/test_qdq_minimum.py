"""`debug precision` on QDQ models: exact bypass with a reference model, the minimum where it can be
proved, held-out validation of the result."""

import json
import os
import subprocess
import sys

import numpy as np
import onnx
import pytest

import modelzoo as mz
import qdq_models as qm
from toolkit.quant import qdq
from toolkit.core.io.datafiles import save_inputs


@pytest.fixture(scope="module")
def classifier(tmp_path_factory):
    """A QDQ classifier whose input pair was calibrated on [0, 1] (zero point at the type's minimum)."""
    d = tmp_path_factory.mktemp("clf")
    float_path = mz.save(qm.classifier(), d / "float.onnx")
    q_path = qm.quantize(float_path, str(d / "qdq.onnx"), qm.uniform_feeds(16, 0, 1))
    return {"float": float_path, "qdq": q_path, "dir": d}


def inputs_file(path, feeds):
    save_inputs(str(path), feeds)
    return str(path)


def test_with_a_reference_model_a_bypass_is_exact(classifier):
    model, ref = onnx.load(classifier["qdq"]), onnx.load(classifier["float"])
    pairs = qdq.find_pairs(model, float_model=ref)
    x = next(p for p in pairs if p.tensor == "x")
    assert x.starts_at_zero and x.clamp() is None  # calibrated on [0, 1]: not a folded Relu
    ops = {n.name: n.op_type for n in qdq.bypass(model, [x]).graph.node}
    assert ops[x.dq_nodes[0]] == "Identity"


def test_the_input_pair_that_clips_is_named_as_the_cause(classifier, tmp_path, cli):
    feeds = inputs_file(tmp_path / "in.json", qm.uniform_feeds(4, -1, 1, seed=9))
    r = cli("debug", "precision", classifier["qdq"], "--reference-model", classifier["float"], "--load-inputs", feeds,
            "--atol", "0.5", "--rtol", "0", "--json")
    assert r.code == 0, r.err
    result = json.loads(r.out)
    assert result["status"] == "found"
    first = result["float_pairs"][0]
    assert first["tensor"] == "x" and first["clipped"] > 0.3
    assert any(w.startswith("clipping") for w in first["why"])
    assert "input x" in r.err and "calibrat" in r.err


@pytest.fixture(scope="module")
def two_or_one(tmp_path_factory):
    d = tmp_path_factory.mktemp("two")
    path = mz.save(qm.two_or_one(), d / "two.onnx")
    return path, inputs_file(d / "in.json", [{"x": np.full((1, 4), 0.45, np.float32)}])


def _search(cli, model, feeds, atol, *more):
    r = cli("debug", "precision", model, "--load-inputs", feeds, "--atol", atol, "--rtol", "0", "--json", *more)
    assert r.code == 0, r.err
    return json.loads(r.out), r.err


def test_one_pair_that_passes_alone_is_found_where_node_order_meets_two_first(two_or_one, cli):
    result, err = _search(cli, *two_or_one, "1")
    assert [p["tensor"] for p in result["float_pairs"]] == ["c"]
    assert result["optimality"] == "minimum" and "Minimum:" in err


def test_two_pairs_are_proved_minimum_when_no_pair_passes_alone(two_or_one, cli):
    for more in ((), ("--singles",)):  # (three pairs: the search checks each alone on its way)
        result, err = _search(cli, *two_or_one, "0.5", *more)
        assert len(result["float_pairs"]) == 2 and result["optimality"] == "minimum"
        assert "each was checked alone" in err
    result, err = _search(cli, *two_or_one, "0.3")  # all three needed: 1-minimal, not claimed minimum
    assert len(result["float_pairs"]) == 3 and result["optimality"] == "1-minimal" and "not proved minimum" in err


def _held_out_case(tmp_path, values):
    return inputs_file(tmp_path / "held.json", [{"x": np.full((1, 4), v, np.float32)} for v in values])


def test_a_result_that_fails_on_held_out_inputs_is_reported_as_not_holding(two_or_one, tmp_path, cli):
    model, feeds = two_or_one
    # on x = 0.49 the pairs on a and b alone move y by 0.98: {c} in float passes the search's input, not this one
    held = _held_out_case(tmp_path, [0.49])
    r = cli("debug", "precision", model, "--load-inputs", feeds, "--validate-inputs", held, "--atol", "0.95",
            "--rtol", "0", "--json")
    assert r.code == 1, r.err  # the answer fails on inputs the search did not use: not a pass
    result = json.loads(r.out)
    assert result["exit_code"] == 1
    assert [p["tensor"] for p in result["float_pairs"]] == ["c"]
    assert result["held_out"]["holds"] is False and result["held_out"]["passed"] == 0
    assert "does not hold" in r.err and "59 are needed" in r.err
    # the same inputs given together: every fourth is held out
    both = _held_out_case(tmp_path, [0.45, 0.45, 0.45, 0.49])
    r = cli("debug", "precision", model, "--load-inputs", both, "--atol", "0.95", "--rtol", "0", "--json")
    held_out = json.loads(r.out)["held_out"]
    assert held_out["source"] == "split" and held_out["count"] == 1 and not held_out["holds"]


def test_a_result_that_passes_held_out_inputs_holds(two_or_one, tmp_path, cli):
    model, feeds = two_or_one
    r = cli("debug", "precision", model, "--load-inputs", feeds, "--validate-inputs", _held_out_case(tmp_path, [0.4]),
            "--atol", "0.95", "--rtol", "0", "--json")
    assert json.loads(r.out)["held_out"]["holds"] is True and "it holds" in r.err


def test_a_task_metric_is_the_pass_rule(classifier, tmp_path, cli):
    feeds = inputs_file(tmp_path / "in.json", qm.uniform_feeds(3, -1, 1, seed=9))
    r = cli("debug", "precision", classifier["qdq"], "--reference-model", classifier["float"], "--load-inputs", feeds,
            "--metric", "top1", "--json")
    assert r.code == 0, r.err
    result = json.loads(r.out)
    assert [p["tensor"] for p in result["float_pairs"]] == ["x"]  # the logits may move; the classes may not
    assert result["pass_rule"] == {"metric": "top1", "tolerance": 0.0} and "top-1 disagreement" in r.err
    r = cli("debug", "precision", classifier["qdq"], "--load-inputs", feeds, "--metric", "top1", "--atol", "0.1")
    assert r.code == 2 and "--metric" in r.err
    r = cli("debug", "precision", classifier["qdq"], "--load-inputs", feeds, "--metric", "top3")
    assert r.code == 2 and "topk:K" in r.err


def test_a_python_callable_is_a_metric(classifier, tmp_path):
    from toolkit.precision.qdq_search import QdqConfig, QdqSearch

    feeds = inputs_file(tmp_path / "in.json", qm.uniform_feeds(3, -1, 1, seed=9))
    calls = []

    def same_classes(ref, got):
        calls.append(1)
        return bool(np.array_equal(ref["y"].argmax(-1), got["y"].argmax(-1)))

    outcome = QdqSearch(QdqConfig(classifier["qdq"], reference_model=classifier["float"], load_inputs=[feeds],
                                  metric=same_classes)).run()
    assert outcome.status == "found" and [outcome.stats[n].pair.tensor for n in outcome.kept] == ["x"] and calls


def test_float_op_types_keep_their_pairs_in_float(classifier, tmp_path, cli):
    feeds = inputs_file(tmp_path / "in.json", qm.uniform_feeds(3, -1, 1, seed=9))
    r = cli("debug", "precision", classifier["qdq"], "--reference-model", classifier["float"], "--load-inputs", feeds,
            "--metric", "top1", "--float-op-types", "Add", "--json")
    assert r.code == 0, r.err
    result = json.loads(r.out)
    assert sorted(result["float_by_op_type"]) == ["h_QuantizeLinear", "ha_QuantizeLinear"]
    assert result["searched_pairs"] == 2 and "in float in every check" in r.err
    r = cli("debug", "precision", classifier["qdq"], "--load-inputs", feeds, "--float-op-types", "MatMul,Add")
    assert r.code == 2 and "nothing is left to search" in r.err


def test_order_error_searches_the_pairs_adding_the_most_error_first(classifier, tmp_path, cli):
    feeds = inputs_file(tmp_path / "in.json", qm.uniform_feeds(3, -1, 1, seed=9))
    r = cli("debug", "precision", classifier["qdq"], "--reference-model", classifier["float"], "--load-inputs", feeds,
            "--metric", "top1", "--order", "error", "--json")
    assert r.code == 0, r.err
    assert [p["tensor"] for p in json.loads(r.out)["float_pairs"]] == ["x"]
    # a replay keys sets by node position whatever the order: a resumed search runs no check again
    r = cli("debug", "precision", classifier["qdq"], "--load-inputs", feeds, "--save-debug-replay", tmp_path / "r.json")
    assert r.code == 0, r.err
    again = cli("debug", "precision", classifier["qdq"], "--load-inputs", feeds, "--load-debug-replay",
                tmp_path / "r.json")
    assert again.code == 0 and again.out == r.out, again.err


def test_metric_outputs_name_what_the_metric_judges(classifier, tmp_path, cli):
    feeds = inputs_file(tmp_path / "in.json", qm.uniform_feeds(3, -1, 1, seed=9))
    r = cli("debug", "precision", classifier["qdq"], "--reference-model", classifier["float"], "--load-inputs", feeds,
            "--metric", "top1", "--metric-outputs", "y", "--json")
    assert r.code == 0, r.err
    assert [p["tensor"] for p in json.loads(r.out)["float_pairs"]] == ["x"]
    r = cli("debug", "precision", classifier["qdq"], "--load-inputs", feeds, "--metric", "top1", "--metric-outputs",
            "nosuch")
    assert r.code == 2 and "no such output" in r.err  # never a pass on nothing compared


def test_a_result_no_set_of_pairs_can_hold_is_told_apart_from_one_that_fits_its_inputs(classifier, tmp_path, cli):
    # searched on [0, 3] (its input pair, calibrated on [0, 1], clips): every activation pair in float passes
    # there (the int8 weights cost 0.22); on [0, 10] they cost 0.76: the weights fail there, not the pairs
    feeds = inputs_file(tmp_path / "in.json", qm.uniform_feeds(3, 0, 3, seed=11))
    held = inputs_file(tmp_path / "held.json", qm.uniform_feeds(2, 0, 10, seed=12))
    args = ["debug", "precision", classifier["qdq"], "--reference-model", classifier["float"], "--load-inputs", feeds,
            "--validate-inputs", held, "--atol", "0.5", "--rtol", "0", "--json"]
    r = cli(*args)
    assert r.code == 1, r.err
    held_out = json.loads(r.out)["held_out"]
    assert not held_out["holds"] and held_out["all_float_passed"] == 0
    assert "what fails there is not the pairs but the quantized weights" in r.err and "--qdq-weights" in r.err
    assert "search on more" not in r.err
    # with the weights searched too, every pair in float is the float model: a set that holds exists
    r = cli(*args, "--qdq-weights")
    held_out = json.loads(r.out)["held_out"]
    assert held_out["holds"] or held_out["all_float_passed"] == held_out["count"]
    assert "what fails there is not the pairs" not in r.err


def test_float_op_types_pairs_are_listed_in_graph_order_whatever_the_hash_seed(classifier, tmp_path):
    """The log line of the pairs kept in float by --float-op-types is the same on every run (graph order)."""
    feeds = inputs_file(tmp_path / "in.json", qm.uniform_feeds(1, -1, 1, seed=9))
    lines = set()
    for seed in "1234":
        env = dict(os.environ, PYTHONHASHSEED=seed)
        r = subprocess.run([sys.executable, "-m", "toolkit", "debug", "precision", classifier["qdq"], "--load-inputs",
                            feeds, "--metric", "top1", "--float-op-types", "Add", "--iterations", "1"],
                           capture_output=True, text=True, env=env, timeout=120)
        lines |= {line for line in r.stderr.splitlines() if "in float in every check" in line}
    assert lines == {"2 pair(s) at --float-op-types Add in float in every check: h, ha"}, lines  # (graph order)


def _summed(tmp_path, ks):
    """qdq_models.summed(ks) and its input file: pair i in float moves the output by ks[i] * 0.45."""
    path = mz.save(qm.summed(ks), tmp_path / "summed.onnx")
    return path, inputs_file(tmp_path / "in.json", [{"x": np.full((1, 4), 0.45, np.float32)}])


def test_a_failing_set_does_not_prove_two_pairs_minimum(tmp_path, cli):
    # errors -0.45, -0.45, -0.9, +0.45 (sum -1.35): t2 alone in float passes at 0.5 (error -0.45), but every
    # set the search checks that holds t2 also holds t0 or t1 and fails; it ends on {t0, t1}
    model = _summed(tmp_path, (-1, -1, -2, 1))
    result, err = _search(cli, *model, "0.5")
    assert [p["tensor"] for p in result["float_pairs"]] == ["t0", "t1"]
    assert result["optimality"] == "1-minimal" and not result["minimum"]
    assert "Minimum:" not in err and "--singles checks each pair alone" in err
    result, err = _search(cli, *model, "0.5", "--singles")
    assert [p["tensor"] for p in result["float_pairs"]] == ["t2"] and result["optimality"] == "minimum"


def test_a_passing_set_inside_a_failing_one_is_named(tmp_path, cli):
    # errors +0.45, -1.35, -1.35, -0.9 (sum -3.15): {t1, t2} passes (-0.45), {t1, t2, t3} fails (+0.45 ... 0.9 off)
    result, err = _search(cli, *_summed(tmp_path, (-1, 3, 3, 2)), "0.5")
    seen = result["not_monotone"]
    assert seen is not None and seen["passing"] < seen["failing"]
    assert "Not monotone here" in err and "--singles" in err
    result, _ = _search(cli, *_summed(tmp_path, (1, 1, 1, 1)), "1.9")  # every pair adds the same sign: none seen
    assert result["not_monotone"] is None


def test_the_written_model_keeps_no_scale_of_a_pair_it_took_back(two_or_one, cli, tmp_path):
    out = tmp_path / "fixed.onnx"
    r = cli("debug", "precision", two_or_one[0], "--load-inputs", two_or_one[1], "--atol", "1", "--rtol", "0",
            "-o", str(out))
    assert r.code == 0, r.err
    model = onnx.load(str(out))
    read = {name for node in model.graph.node for name in node.input}
    assert [t.name for t in model.graph.initializer if t.name not in read] == []
    assert {"c_s", "c_z"} & {t.name for t in model.graph.initializer} == set()  # (c's pair is in float)
    assert {"a_s", "a_z"} <= {t.name for t in model.graph.initializer}  # (a's is not: its grid stays)


def test_an_op_type_the_model_lacks_is_said(two_or_one, cli):
    result, err = _search(cli, *two_or_one, "1", "--float-op-types", "mul,Softmax")
    assert "--float-op-types mul: the model has no node of that type (it has Mul: op types are case-sensitive)" in err
    assert "--float-op-types Softmax: the model has no node of that type" in err
    assert result["float_by_op_type"] == []


def test_weights_are_not_said_searched_where_none_can_be(two_or_one, cli):
    _, err = _search(cli, *two_or_one, "1", "--qdq-weights")  # (no reference model: no float weights)
    assert "(weights included)" not in err and "--qdq-weights: no weight is searched" in err


def test_a_model_that_fails_with_every_pair_in_float_is_said_in_few_checks(tmp_path, cli):
    ks = [1, -1, 2, -2, 1, 1, -1, 2, 1, -2, 1, 1, -1, 2, 1, 1]
    model = qdq.bypass(qm.summed(ks), [])  # (a copy)
    ref = qm.summed([k + 1 for k in ks])
    ref = qdq.bypass(ref, qdq.find_pairs(ref))  # a float model the pairs cannot reach: y = sum(k + 1) x
    q, f = mz.save(model, tmp_path / "q.onnx"), mz.save(ref, tmp_path / "f.onnx")
    feeds = inputs_file(tmp_path / "in.json", [{"x": np.full((1, 4), 0.45, np.float32)}])
    r = cli("debug", "precision", q, "--reference-model", f, "--load-inputs", feeds, "--atol", "0.5", "--rtol", "0",
            "--held-out", "0", "--json")
    result = json.loads(r.out)
    assert r.code == 1 and result["status"] == "fails-in-fp32"
    assert result["checks"] <= 15  # the quantized model, the bisect for both ends (about 2 log2 16), the whole set


def test_ctrl_c_before_any_passing_set_says_none_was_found(two_or_one, cli, monkeypatch, tmp_path):
    from toolkit.precision.qdq_search import QdqSearch

    def interrupted(self, order):
        raise KeyboardInterrupt
    monkeypatch.setattr(QdqSearch, "_each_alone", interrupted)  # (after the quantized model's check: it fails)
    out = tmp_path / "o.onnx"
    r = cli("debug", "precision", two_or_one[0], "--load-inputs", two_or_one[1], "--atol", "1", "--rtol", "0",
            "--singles", "-o", str(out))
    assert r.code == 130 and "Interrupted before any passing set was found" in r.err, r.err
    assert "has 0 pair(s)" not in r.err and not out.exists()


def test_a_scale_listed_as_a_graph_input_too_stays_with_its_pair_in_float():
    import onnxruntime as ort

    model = qm.two_or_one()
    for t in model.graph.initializer:  # (as models of IR version 3 list them)
        model.graph.input.append(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    c = next(p for p in qdq.find_pairs(model) if p.tensor == "c")
    out = qdq.bypass(model, [c])
    assert {"c_s", "c_z"} <= {t.name for t in out.graph.initializer}
    ort.InferenceSession(out.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"x": np.full((1, 4), 0.45, np.float32)})

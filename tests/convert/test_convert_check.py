"""`toolkit convert`'s check against the original runs several input sets and reports the worst.

Whether fp16 overflows depends on the values: the model here, y = Relu((x * k) * k / d),
overflows fp16 only where x passes a threshold, so one input set can show no error where
another shows an infinite one. The check must report the second.
"""

import json
import math

import numpy as np
from onnx import TensorProto, helper, numpy_helper

import modelzoo as mz
from toolkit.convert import fp16
from toolkit.convert.validate import INPUT_SETS, validate
from toolkit.core.inputs import iteration_rng

FP16_MAX = 65504.0


def overflow_above(threshold: float, n: int = 2):
    """y = Relu((x * k) * k / d) for x of shape [1, n]: (x * k) * k passes fp16's largest value
    exactly where x > ``threshold`` (k * k * threshold = 65504); the weights fit fp16."""
    k = math.sqrt(FP16_MAX / threshold)
    nodes = [
        helper.make_node("Mul", ["x", "k"], ["a"], name="m1"),
        helper.make_node("Mul", ["a", "k"], ["b"], name="m2"),
        helper.make_node("Div", ["b", "d"], ["c"], name="div"),
        helper.make_node("Relu", ["c"], ["y"], name="relu"),
    ]
    g = helper.make_graph(
        nodes, "overflow_above",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, n])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, n])],
        [numpy_helper.from_array(np.full((n,), k, np.float32), "k"),
         numpy_helper.from_array(np.full((n,), FP16_MAX, np.float32), "d")],
    )  # fmt: skip
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _set_maxima(seed: int, n: int):
    """The largest x of each generated set (range [0,1]), drawn as `toolkit run --seed` draws them."""
    return [float(iteration_rng(seed, k).random_sample((1, n)).max()) for k in range(INPUT_SETS)]


def _seed_where_a_later_set_overflows(n: int):
    """A seed whose first set stays below 0.6 while a later one passes 0.9 (so a threshold of
    0.75 separates them with a margin far above fp16's rounding of x and k)."""
    for seed in range(1, 500):
        maxima = _set_maxima(seed, n)
        if maxima[0] < 0.6 and max(maxima[1:]) > 0.9:
            return seed, maxima
    raise AssertionError("no such seed")


def test_the_check_reports_the_worst_generated_set(cli, tmp_path):
    n = 2
    seed, maxima = _seed_where_a_later_set_overflows(n)
    src = mz.save(overflow_above(0.75, n), tmp_path / "o.onnx")
    r = cli("convert", src, "--fp-to-fp16", "-o", tmp_path / "o16.onnx", "--seed", seed, "--json")
    assert r.code == 0, r.err
    v = json.loads(r.out)["validation"]
    overflowing = [k for k, m in enumerate(maxima) if m > 0.75]
    assert not v["passed"] and v["differing_outputs"] == ["y"] and v["max_error"] > 1
    assert v["input_sets"] == INPUT_SETS and v["input_set"] in overflowing
    assert v["set_errors"][0] < 1e-2  # the seed's own set alone: nothing to see
    assert v["first_differing_tensor"] == "b"
    assert f"on {INPUT_SETS} input sets" in r.err and f"input set {v['input_set']}" in r.err
    assert "first tensor that differs (topological order) is b" in r.err


def test_the_check_runs_every_loaded_set(cli, tmp_path):
    src = mz.save(overflow_above(0.5, 4), tmp_path / "o.onnx")
    sets = tmp_path / "sets.json"
    from toolkit.core.io.datafiles import save_inputs

    save_inputs(str(sets), [{"x": np.full((1, 4), v, np.float32)} for v in (0.1, 0.2, 0.9, 0.3)])
    r = cli("convert", src, "--fp-to-fp16", "-o", tmp_path / "o16.onnx", "--load-inputs", sets, "--json")
    assert r.code == 0, r.err
    v = json.loads(r.out)["validation"]
    assert not v["passed"] and v["input_set"] == 2 and v["input_sets"] == 4
    assert max(v["set_errors"][:2] + v["set_errors"][3:]) < 1e-2 and v["first_differing_tensor"] == "b"


def test_a_passing_check_reports_its_largest_error_over_the_sets(tmp_path):
    """No set differs: the one reported is the one with the largest error."""
    model = overflow_above(1.0, 4)  # (k = 256: k * k * x stays below fp16's limit for x < 1)
    conv = fp16.convert(model).model
    feeds = [{"x": np.full((1, 4), v, np.float32)} for v in (0.25, 0.3001, 0.5)]
    res = validate(model, conv, feeds)
    assert res.passed and len(res.set_errors) == 3 and len(set(res.set_errors)) == 3
    assert res.max_error == max(res.set_errors) > 0 and res.input_set == res.set_errors.index(res.max_error) != 0
    one = validate(model, conv, feeds[0])  # one feed, as before
    assert one.set_errors == [res.set_errors[0]] and one.input_set == 0

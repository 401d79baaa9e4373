"""Unit tests of toolkit.core.compare.arrays: tolerances, statistics, NaN/Inf, shapes, dtypes."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from toolkit.core.compare.arrays import compare_arrays, compare_iteration, validate_outputs
from toolkit.core.compare.tolerances import DEFAULT_ATOL, Tolerances
from toolkit.core.errors import UsageError


def test_identical_arrays_pass_with_zero_error():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    r = compare_arrays("y", a, a.copy(), 0.0, 0.0)
    assert r.passed and r.max_abs == 0 and r.max_rel == 0 and r.mismatches == 0


def test_error_stats_and_required_tolerance():
    ref = np.array([1.0, 2.0, 4.0, 8.0], np.float32)
    new = np.array([1.0, 2.5, 4.0, 6.0], np.float32)
    r = compare_arrays("y", new, ref, 1e-5, 1e-5)
    assert not r.passed
    assert r.max_abs == pytest.approx(2.0)
    assert r.mean_abs == pytest.approx(2.5 / 4)
    assert r.max_rel == pytest.approx(0.25)  # relative to the reference (second) array
    assert r.mean_rel == pytest.approx((0.25 + 0.25) / 4)
    assert r.mismatches == 2
    # the reported tolerance passes on its own, and anything smaller fails
    assert r.required_atol == pytest.approx(2.0) and r.required_rtol == pytest.approx(0.25)
    assert compare_arrays("y", new, ref, r.required_atol, 0.0).passed
    assert compare_arrays("y", new, ref, 0.0, r.required_rtol).passed
    assert not compare_arrays("y", new, ref, 1.9, 0.2).passed


def test_elemwise_passes_when_abs_or_rel_within_tolerance_per_element():
    ref = np.array([100.0, 0.001], np.float32)
    new = np.array([100.5, 0.002], np.float32)
    # element 0: abs 0.5 > atol but rel 0.005 <= rtol; element 1: abs 0.001 <= atol
    assert compare_arrays("y", new, ref, 0.01, 0.01).passed
    assert not compare_arrays("y", new, ref, 0.0001, 0.01).passed


@pytest.mark.parametrize(
    "stat,atol,ok",
    [("max", 2.0, True), ("max", 1.9, False), ("mean", 0.7, True), ("mean", 0.6, False), ("median", 0.5, True)],
)
def test_statistic_checks(stat, atol, ok):
    ref = np.array([1.0, 2.0, 4.0, 8.0], np.float32)
    new = np.array([1.0, 2.5, 4.0, 6.0], np.float32)
    r = compare_arrays("y", new, ref, atol, 0.0, stat)
    assert r.passed is ok
    if stat == "median":
        assert r.median_abs == pytest.approx(0.25)
        assert r.required_atol == pytest.approx(0.25)


def test_zero_reference_gives_infinite_relative_error_only_when_values_differ():
    r = compare_arrays("y", np.array([0.0, 1e-6], np.float32), np.zeros(2, np.float32), 1e-5, 0.0)
    assert r.passed and math.isinf(r.max_rel)
    r = compare_arrays("y", np.zeros(2, np.float32), np.zeros(2, np.float32), 0.0, 0.0)
    assert r.passed and r.max_rel == 0


def test_nan_and_inf_handling():
    nan, inf = np.nan, np.inf
    same = np.array([nan, inf, -inf, 1.0], np.float32)
    assert compare_arrays("y", same, same.copy(), 0.0, 0.0).passed  # NaN==NaN, same-sign inf equal
    r = compare_arrays("y", np.array([nan, 1.0], np.float32), np.array([1.0, 1.0], np.float32), 1e9, 1e9)
    assert not r.passed and math.isinf(r.max_abs) and r.mismatches == 1
    r = compare_arrays("y", np.array([inf], np.float32), np.array([-inf], np.float32), 1e9, 1e9)
    assert not r.passed


def test_shape_mismatch_fails_with_message():
    r = compare_arrays("y", np.zeros((1, 4), np.float32), np.zeros((4,), np.float32), 1.0, 1.0)
    assert not r.passed and "shapes differ" in r.message


def test_integer_outputs_exact_by_default_but_tolerances_apply_when_given():
    a = np.array([1, 2, 3], np.int64)
    b = np.array([1, 2, 4], np.int64)
    it = compare_iteration(0, {"i": a}, {"i": b}, Tolerances())
    assert not it.passed
    it = compare_iteration(0, {"i": a}, {"i": b}, Tolerances.parse(atol=["1"]))
    assert it.passed
    it = compare_iteration(0, {"i": a}, {"i": b}, Tolerances.parse(atol=["i:1"]))
    assert it.passed
    # uint8 subtraction must not wrap around
    r = compare_arrays("u", np.array([0], np.uint8), np.array([255], np.uint8), 0, 0)
    assert r.max_abs == 255


def test_bool_outputs_compare_exactly():
    it = compare_iteration(0, {"b": np.array([True, False])}, {"b": np.array([True, True])}, Tolerances())
    assert not it.passed and it.outputs[0].mismatches == 1


def test_float16_against_float32_compares_values():
    ref = np.linspace(0, 1, 10, dtype=np.float32)
    r = compare_arrays("y", ref.astype(np.float16), ref, 1e-3, 0)
    assert r.passed and r.dtype_a == "float16" and r.dtype_b == "float32"


def test_only_common_names_are_compared():
    a = {"y": np.ones(2, np.float32), "only_a": np.ones(1, np.float32)}
    b = {"y": np.ones(2, np.float32), "t1": np.zeros(3, np.float32), "t2": np.zeros(3, np.float32)}
    it = compare_iteration(0, a, b, Tolerances())
    assert [o.name for o in it.outputs] == ["y"]
    assert it.only_a == ["only_a"] and it.only_b == ["t1", "t2"]


def test_pair_compares_common_iterations_and_notes_difference(tmp_path):
    from modelzoo import chain, save
    from toolkit.run import RunOptions, execute

    model = save(chain(2), str(tmp_path / "m.onnx"))
    two = str(tmp_path / "two.json")
    execute(RunOptions(model, runners=["onnxrt"], iterations=2, save_outputs=two))
    report = execute(RunOptions(model, runners=["onnxrt"], iterations=1, load_outputs=[two]))
    pair = report.comparisons[0]
    assert pair.passed and len(pair.iterations) == 1 and "comparing the first 1" in pair.notes[0]


def test_tolerance_parsing():
    tol = Tolerances.parse(atol=["1e-3", "out:0.5"], rtol=["out:0"], check_error_stat=["max", "x:1:mean"])
    assert tol.for_output("other", False) == (1e-3, 1e-5, "max")
    assert tol.for_output("out", False) == (0.5, 0.0, "max")
    assert tol.for_output("x:1", False)[2] == "mean"
    assert Tolerances().for_output("f", False) == (DEFAULT_ATOL, DEFAULT_ATOL, "elemwise")
    for bad in (dict(atol=["abc"]), dict(rtol=["-1"]), dict(check_error_stat=["p90"])):
        with pytest.raises(UsageError):
            Tolerances.parse(**bad)


def test_two_different_values_for_one_output_are_refused(cli, tmp_path):
    from toolkit.core.compare.tolerances import Named, parse_atol, parse_stats

    assert parse_atol(["1e-3", "out:0.5", "1e-3"]) == Named(1e-3, {"out": 0.5})  # (the same value twice: one)
    for bad, named in ((["0.1", "0.2"], "every output"), (["y:1", "x:2", "y:3"], "'y'")):
        with pytest.raises(UsageError, match=f"two values for {named}"):
            parse_atol(bad)
    with pytest.raises(UsageError, match="--check-error-stat: two values for 'y'"):
        parse_stats(["y:max", "y:mean"])
    import modelzoo

    modelzoo.save(modelzoo.chain(1, shape=(2,)), tmp_path / "m.onnx")  # (x -> Relu -> y)
    r = cli("run", tmp_path / "m.onnx", "--onnxrt", "--onnxrt", "--atol", "0.1", "0.2")
    assert r.code == 2 and "error: --atol: two values for every output ('0.1' and '0.2'): give one" in r.err, r.err


def test_validate_finds_nan_and_inf():
    outs = [{"ok": np.ones(3, np.float32), "bad": np.array([np.nan, np.inf, 1], np.float32), "i": np.ones(2, np.int32)}]
    probs = validate_outputs("r", outs)
    assert [(p.name, p.nans, p.infs) for p in probs] == [("bad", 1, 1)]


finite = st.floats(-1e6, 1e6, allow_nan=False, width=32)


@settings(max_examples=60, deadline=None)
@given(hnp.arrays(np.float32, hnp.array_shapes(max_dims=3, max_side=5), elements=finite),
       st.floats(0, 10), st.floats(0, 1))
def test_elemwise_matches_numpy_definition(arr, atol, rtol):
    rng = np.random.default_rng(0)
    other = (arr + rng.normal(0, 1, arr.shape)).astype(np.float32)
    r = compare_arrays("y", other, arr, atol, rtol)
    absd = np.abs(other.astype(np.float32) - arr)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        rel = np.where(arr != 0, absd / np.abs(arr), np.where(absd == 0, 0, np.inf))
    expected = bool(np.all((absd <= atol) | (rel <= rtol)))
    assert r.passed == expected
    assert compare_arrays("y", arr, arr, 0, 0).passed


def test_quantile_statistic_ignores_the_worst_elements():
    from toolkit.core.compare.arrays import compare_arrays

    ref = np.zeros(100, dtype=np.float32)
    out = ref.copy()
    out[:3] = 1.0  # 3% of the elements are far off
    strict = compare_arrays("y", out, ref, 1e-3, 0.0, "quantile", 0.99)
    loose = compare_arrays("y", out, ref, 1e-3, 0.0, "quantile", 0.95)
    assert not strict.passed and strict.quantile_abs == pytest.approx(1.0)
    assert loose.passed and loose.quantile_abs == 0.0 and loose.required_atol == 0.0
    edge = compare_arrays("y", out, ref, 1e-3, 0.0, "quantile", 0.975)
    assert 0.0 < edge.quantile_abs < 1.0  # interpolated between the last good and first bad element


def test_error_quantile_parses_globally_and_per_output():
    from toolkit.core.compare.tolerances import Tolerances

    tol = Tolerances.parse(check_error_stat=["quantile"], error_quantile=["0.9", "y:0.5"])
    assert tol.quantile_for("y") == 0.5 and tol.quantile_for("z") == 0.9
    with pytest.raises(Exception):
        Tolerances.parse(error_quantile=["1.5"])

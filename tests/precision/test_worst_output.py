"""The worst output a search names (``debug precision`` and its Q/DQ search, with tolerances or a
--metric): a failing one first, then the larger error, and an output gone NaN before any number."""

from __future__ import annotations

import numpy as np
import pytest

from toolkit.core.compare.arrays import compare_iteration
from toolkit.core.compare.tolerances import Tolerances
from toolkit.precision import verdicts
from toolkit.quant import metrics

REF = {"far": np.array([1.0, 2.0, 3.0, 4.0], np.float32), "nan": np.array([1.0, 2.0, 3.0, 4.0], np.float32)}
GOT = {"far": np.array([1.0, 2.0, 3.0, -4.0], np.float32), "nan": np.array([1.0, 2.0, np.nan, 4.0], np.float32)}


@pytest.mark.parametrize("metric", ["cosine", "snr-db"])
@pytest.mark.parametrize("order", [("far", "nan"), ("nan", "far")])
def test_a_metric_names_the_output_gone_nan_whatever_the_order(metric, order):
    m = metrics.parse(metric)
    ref, got = ({n: d[n] for n in order} for d in (REF, GOT))
    it = m.iteration(ref, got)
    assert [o.passed for o in it.outputs] == [False, False]
    assert metrics.describe([it]).endswith("at nan"), metrics.describe([it])


def test_a_nan_output_is_named_after_an_input_set_with_a_larger_finite_error():
    m = metrics.parse("cosine")
    first = m.iteration({"far": REF["far"]}, {"far": -REF["far"]})  # cosine -1: the largest finite value (2)
    second = m.iteration({"nan": REF["nan"]}, {"nan": GOT["nan"]})
    assert metrics.describe([first, second]).endswith("at nan")


@pytest.mark.parametrize("order", [("far", "nan"), ("nan", "far")])
def test_tolerances_name_the_output_gone_nan_whatever_the_order(order):
    ref, got = ({n: d[n] for n in order} for d in (REF, GOT))
    it = compare_iteration(0, ref, got, Tolerances())
    assert verdicts.describe([it]) == "max error inf at nan"


def test_an_output_whose_statistic_was_not_measured_is_named_not_a_crash():
    """A shape mismatch under the median statistic has no error value (None): it is the worst."""
    ref = {"a": np.ones(4, np.float32), "b": np.ones(4, np.float32)}
    got = {"a": np.array([1, 1, 9, 9], np.float32), "b": np.ones((2, 2), np.float32)}
    it = compare_iteration(0, ref, got, Tolerances(check_error_stat="median"))
    assert verdicts.describe([it]) == "max error nan at b"


def test_a_passing_output_never_outranks_a_failing_one():
    m = metrics.parse("cosine")
    ok = m.iteration({"ok": REF["nan"]}, {"ok": REF["nan"]})
    bad = m.iteration({"bad": REF["far"]}, {"bad": GOT["far"]})
    assert metrics.describe([ok, bad]).endswith("at bad")
    assert metrics.describe([]) == "" and verdicts.describe([]) == ""

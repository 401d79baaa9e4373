"""Statistics of many tensors computed together equal each tensor's own, bit for bit."""

from __future__ import annotations

import json

import numpy as np
import pytest

from toolkit.inspect.describe import summarize_array
from toolkit.inspect.summaries import summarize_many

DTYPES = [np.float32, np.float64, np.float16, np.int64, np.int8, np.uint8, np.bool_]


@pytest.mark.parametrize("dtype", DTYPES)
def test_batched_statistics_equal_each_tensors_own(dtype):
    rng = np.random.default_rng(0)
    arrays = []
    for n in [1, 2, 3, 7, 8, 9, 16, 17, 100, 129, 1000, 4096, 5000]:
        for _ in range(3):
            arrays.append((rng.standard_normal((1, n)) * 50).astype(dtype))
    assert json.dumps(summarize_many(arrays)) == json.dumps([summarize_array(a) for a in arrays])


def test_nan_inf_empty_strings_and_mixed_shapes_keep_their_own_summary():
    arrays = [
        np.array([1.0, np.nan, 3.0], np.float32), np.array([1.0, 2.0, 3.0], np.float32),
        np.array([np.inf, -np.inf, 0.5], np.float32), np.array([np.nan] * 3, np.float32),
        np.zeros((0, 3), np.float32), np.array(["a", "bc"]), np.array([1.0, 2.0, 4.0], np.float32),
        np.arange(6, dtype=np.int32).reshape(2, 3), np.arange(6, dtype=np.int32).reshape(3, 2),
        np.asfortranarray(np.arange(12, dtype=np.float64).reshape(3, 4)), np.arange(12, dtype=np.float64).reshape(3, 4),
    ]
    # (as JSON: NaN values compare, and the keys' order is the one printed)
    assert json.dumps(summarize_many(arrays)) == json.dumps([summarize_array(a) for a in arrays])


def test_fortran_order_tensors_summarize_as_numpy_reduces_them():
    rng = np.random.default_rng(0)
    arrays = [np.asfortranarray(rng.standard_normal((30, 40)).astype(np.float32)) for _ in range(4)]
    many = summarize_many(arrays)
    assert many == [summarize_array(a) for a in arrays]
    assert [m["mean"] for m in many] == [float(np.mean(a)) for a in arrays]


@pytest.mark.parametrize("values,dtype", [([2**53 + 1, 2**53 + 3], np.int64), ([2**64 - 1, 5], np.uint64),
                                          ([-2**63, 0], np.int64)])
def test_integer_min_and_max_are_exact(values, dtype):
    arrays = [np.array(values, dtype)] * 3
    for info in [summarize_array(arrays[0]), *summarize_many(arrays)]:
        assert (info["min"], info["max"]) == (min(values), max(values))
        assert json.loads(json.dumps(info))["min"] == min(values)

"""TensorRT's data types and the numpy arrays toolkit holds them in.

Each ``DataType`` of TensorRT 10 and 11 (read from the bindings, tests/trt_surface/) maps to exactly
one numpy dtype (bfloat16 and FP8 through ml_dtypes, which onnx ships with), or is one of the types
numpy cannot hold. The mapping is checked against the bit layouts TensorRT documents ("Types and
Precision" in its developer guide), not against a copy of the table: a float type has the sign,
exponent and mantissa bits and the exponent bias TensorRT gives it, and its values have the bit
patterns that layout implies. FP8 is E4M3 (1 sign, 4 exponent, 3 mantissa bits, bias 7, no
infinities, largest value 448), so float8_e5m2, float8_e4m3fnuz (bias 8) or uint8 in its place fail.
"""

from __future__ import annotations

import numpy as np
import pytest

import trt_api
from trt_fakes import fake_tensorrt

ml_dtypes = pytest.importorskip("ml_dtypes")

# TensorRT's documented layouts: floats (bits, exponent bits, mantissa bits, exponent bias), integers
# (bits, signed). INT4, FP4 (E2M1) and E8M0 (a scale type) have no numpy dtype.
FLOATS = {"FLOAT": (32, 8, 23, 127), "HALF": (16, 5, 10, 15), "BF16": (16, 8, 7, 127), "FP8": (8, 4, 3, 7)}
INTEGERS = {"INT8": (8, True), "INT32": (32, True), "INT64": (64, True), "UINT8": (8, False)}
NOT_HELD = {"INT4", "FP4", "E8M0"}


def held(major):
    """{DataType name: the numpy dtype toolkit uses for it}, through the backend's own lookup."""
    from toolkit.backends.trt.builder import np_dtype

    trt = fake_tensorrt("10.13.3.9" if major == 10 else "11.4.0.106")
    return {m.name: np.dtype(np_dtype(m, "t")) for m in trt.DataType if m.name not in NOT_HELD}


def bits_of(value, dtype) -> int:
    return int(np.array([value]).astype(dtype).view(f"u{dtype.itemsize}")[0])


@pytest.mark.parametrize("major", [10, 11])
def test_every_data_type_maps_to_exactly_one_numpy_dtype(major):
    members = set(trt_api.load_surface(major).enums["DataType"])
    assert members == set(FLOATS) | set(INTEGERS) | {"BOOL"} | NOT_HELD
    dtypes = held(major)
    assert set(dtypes) == members - NOT_HELD
    assert len(set(dtypes.values())) == len(dtypes), "two TensorRT types share one numpy dtype"


@pytest.mark.parametrize("name", sorted(FLOATS))
def test_float_types_have_tensorrts_bit_layout(name):
    bits, exp_bits, mant_bits, bias = FLOATS[name]
    dt = held(10)[name]
    assert dt.kind == "V" or dt.kind == "f", f"{name} -> {dt}: not a float type"
    info = ml_dtypes.finfo(dt)
    assert (dt.itemsize * 8, info.nexp, info.nmant) == (bits, exp_bits, mant_bits), f"{name} -> {dt}"
    assert info.minexp == 1 - bias, f"{name} -> {dt}: exponent bias {1 - info.minexp}, TensorRT's is {bias}"
    # values and their bit patterns: 1.0 = bias << mantissa bits; -2.0 sets the sign and one more
    # exponent step; the smallest normal number has exponent field 1
    assert bits_of(1.0, dt) == bias << mant_bits, f"{name} -> {dt}"
    assert bits_of(-2.0, dt) == (1 << (bits - 1)) | ((bias + 1) << mant_bits), f"{name} -> {dt}"
    assert bits_of(2.0 ** (1 - bias), dt) == 1 << mant_bits, f"{name} -> {dt}"


def test_fp8_is_e4m3_without_infinities():
    dt = held(10)["FP8"]
    assert float(ml_dtypes.finfo(dt).max) == 448.0
    assert bits_of(448.0, dt) == 0b0_1111_110  # the largest value: exponent all ones, mantissa 110
    assert np.isnan(np.array([np.inf]).astype(dt).astype(np.float32)[0])  # no infinities: inf -> NaN
    assert np.array([1.0 + 2.0**-3], dtype=np.float32).astype(dt).astype(np.float32)[0] == 1.125  # 3 mantissa bits


@pytest.mark.parametrize("name", sorted(INTEGERS))
def test_integer_types_have_tensorrts_width_and_sign(name):
    bits, signed = INTEGERS[name]
    dt = held(10)[name]
    assert dt.kind == ("i" if signed else "u"), f"{name} -> {dt}"
    assert np.iinfo(dt).bits == bits, f"{name} -> {dt}"


def test_bool_is_numpys_bool():
    assert held(10)["BOOL"] == np.dtype(np.bool_)

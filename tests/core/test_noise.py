"""The one noise model (toolkit.core.compare.noise) and where it is used: evidence, --all-faults."""

from __future__ import annotations

import json
import math

import numpy as np
import onnx
import pytest

from conftest import run_toolkit
from test_reduce_noise import detector
from toolkit.core.compare import noise
from toolkit.reduce.evidence import Evidence, TensorEvidence, noise_warning

COMPARE_CHECK = ["toolkit", "run", "a.onnx", "--onnxrt", "--load-inputs", "<reference>", "--load-outputs", "<reference>"]


def test_rounding_is_decided_from_the_storage_and_the_depth():
    assert noise.storage_floor("onnxrt", "onnxrt:fp16") == 2.0**-11
    assert noise.precision_of("onnxrt", "trt:fp16,bf16") == "bf16"
    assert noise.noise_bound(noise.FLOOR, 16) == pytest.approx(noise.ULPS * 2.0**-23 * 4)
    assert noise.is_rounding(5e-7, 1.4, depth=17)  # ONNX-Runtime's fusions on 17 fp32 nodes
    assert not noise.is_rounding(1e-3, 8.3e3, depth=1)  # a perturbed Conv
    assert not noise.is_rounding(1e-7, 1e4, depth=1)  # amplified: never noise, however small
    assert not noise.is_rounding(math.inf, 1.0, depth=1)
    fp16 = noise.storage_floor("onnxrt:fp16")
    assert noise.is_rounding(1e-2, 2.0, depth=276, floor=fp16) and not noise.is_rounding(0.5, 2.0, 276, fp16)
    assert noise.passing_tolerance(0.0363) == 0.06


def _ev(max_abs, max_rel, atol=1e-5, rtol=1e-5, name="t"):
    return Evidence([TensorEvidence(name=name, passed=False, max_abs=max_abs, max_rel=max_rel, atol=atol, rtol=rtol, stat="elemwise", needed_atol=max_abs, needed_rtol=max_rel)])


def test_a_large_error_far_below_the_full_models_is_no_noise():
    # a Conv 2.25e4x over the tolerance, its error grown 100x further downstream: a fault
    full, reduced = _ev(30.0, 5.0, name="out"), _ev(0.225, 0.3, name="conv")
    assert noise_warning(full, reduced, COMPARE_CHECK) is None
    assert noise_warning(full, reduced) is None


def test_noise_advice_leaves_out_what_the_check_does():
    reduced = _ev(2e-5, 3e-5)
    text = noise_warning(None, reduced, COMPARE_CHECK)
    assert text and "may be noise" in text and "mark all" not in text and "opt=disable" in text
    marked = ["toolkit", "run", "a.onnx", "--onnx-outputs", "mark", "all", "--load-outputs", "g.json"]
    text = noise_warning(None, reduced, marked)
    assert "mark all" not in text and "--ort-optimization disable" in text
    assert "mark all" in noise_warning(None, reduced, ["toolkit", "run", "a.onnx"])


def _two_convs(folder, blocks=24, size=32, perturbed=(3, 20), scale=1.001):
    def make(which):
        m = detector(None, blocks=blocks)
        for d in (2, 3):
            m.graph.input[0].type.tensor_type.shape.dim[d].dim_value = size
        for init in m.graph.initializer:
            if init.name in {f"w{b}" for b in which}:
                a = onnx.numpy_helper.to_array(init) * np.float32(scale)
                init.CopyFrom(onnx.numpy_helper.from_array(a, init.name))
        return m

    onnx.save(make(()), str(folder / "clean.onnx"))
    onnx.save(make(perturbed), str(folder / "two.onnx"))


def test_all_faults_reports_the_two_perturbed_convs_and_stops_at_noise(tmp_path):
    _two_convs(tmp_path)
    res = run_toolkit("debug", "reduce", "two.onnx", "-o", "r.onnx", "--compare", "onnxrt", "onnxrt",
                      "--reference-model", "clean.onnx", "--all-faults", "--val-range", "[-2.5,2.5]", "--json",
                      cwd=tmp_path, timeout=300)
    assert res.code == 0, res.err
    doc = json.loads(res.out)
    assert [f["nodes"] for f in doc["faults"]] == [["conv_3"], ["conv_20"]], res.err
    assert all(not f["noise"] for f in doc["faults"])
    assert doc["noise_remaining"]["noise"] is True
    assert "What remains fails by rounding noise only" in res.err
    assert "may be noise" not in res.err
    assert doc["checks"] <= 8  # the rest was judged in one run, not searched for a "fault" of its own

"""NaN logits: on both sides a warning (NaN matches NaN, so nothing was compared), on the test
side only a divergence whose difference reads NaN (not an infinite difference)."""

import json
import math

import numpy as np
import onnx
from llm_decoders import build_decoder
from onnx import numpy_helper


def _nan_head(src, path):
    m = onnx.load(src)
    for t in m.graph.initializer:
        if t.name == "lm_head.weight":
            t.CopyFrom(numpy_helper.from_array(np.full(numpy_helper.to_array(t).shape, np.nan, np.float32), t.name))
    onnx.save(m, path)
    return path


def test_nan_logits_on_both_sides_warn(cli, tmp_path):
    clean = str(tmp_path / "clean.onnx")
    build_decoder(clean)
    nan = _nan_head(clean, str(tmp_path / "nan.onnx"))
    r = cli("debug", "llm", nan, "--prompt-ids", "1 2", "--steps", "3", "--json")
    assert r.code == 0, r.err
    assert "NaN on both sides" in r.err and "No divergence." not in r.err
    assert json.loads(r.out)["both_nan_steps"] == 3


def test_nan_on_the_test_side_only_reads_nan(cli, tmp_path):
    clean = str(tmp_path / "clean.onnx")
    build_decoder(clean)
    nan = _nan_head(clean, str(tmp_path / "nan.onnx"))
    r = cli("debug", "llm", nan, "--reference-model", clean, "--prompt-ids", "1 2", "--steps", "3", "--json")
    assert r.code == 1, r.err
    d = json.loads(r.out)["first_divergence"]
    assert d["nan_outputs"] == ["logits"]
    assert math.isnan(float(d["max_abs_diff"])) and math.isnan(float(d["tensor_max_abs_diff"]))
    assert "inf" not in r.err.split("First divergence")[1]

"""convert's figures are measured against the original as ONNX-Runtime runs it by default
(every graph optimization on), never against a copy with optimizations off: on a static-QDQ
model whose DequantizeLinear -> Softmax -> QuantizeLinear ONNX-Runtime fuses (QLinearSoftmax),
the written model (Casts between them: no fusion) differs from the original as deployed."""

from __future__ import annotations

import json

import numpy as np
import onnxruntime as ort

from deployed_models import qdq_softmax


def test_the_measured_error_is_against_the_original_as_deployed(cli, tmp_path):
    model = qdq_softmax(str(tmp_path / "m.onnx"))
    res = cli("convert", model, "-o", tmp_path / "c.onnx", "--fp-to-fp16", "--json")
    val = json.loads(res.out)["validation"]
    # what the runtime gives: the original as deployed against the written model
    x = np.random.default_rng(0).uniform(0, 4, (4, 64)).astype(np.float32)
    deployed = ort.InferenceSession(model).run(None, {"x": x})[0]
    written = ort.InferenceSession(str(tmp_path / "c.onnx")).run(None, {"x": x})[0]
    assert float(np.abs(deployed - written).max()) > 0.1  # (the model differs as deployed)
    assert val["measured"]["max_error"] > 0.1 and not val["passed"], val
    assert val["reference_session_options"] == {"graph_optimization_level": "all (default)"}

"""Without --reference-model, a pair on a graph input goes back to float as the input itself: no
activation was folded into its Q (a range starting at 0 is the calibration's), so no Relu."""

from __future__ import annotations

import json

import numpy as np
from onnx import TensorProto, helper, numpy_helper

import modelzoo as mz
from toolkit.core.io.datafiles import save_inputs


def _uint8_input():
    """y = DQ(Q(x)) * 2, the pair on the graph input x uint8 with zero point 0: negatives clip to 0."""
    nodes = [helper.make_node("QuantizeLinear", ["x", "x_s", "x_z"], ["x_q"], name="x_QuantizeLinear"),
             helper.make_node("DequantizeLinear", ["x_q", "x_s", "x_z"], ["x_dq"], name="x_DequantizeLinear"),
             helper.make_node("Mul", ["x_dq", "two"], ["y"], name="mul")]
    inits = [numpy_helper.from_array(np.array(0.01, np.float32), "x_s"),
             helper.make_tensor("x_z", TensorProto.UINT8, [], [0]),
             numpy_helper.from_array(np.array(2.0, np.float32), "two")]
    graph = helper.make_graph(nodes, "uint8_input", [mz.vi("x", [1, 8])], [mz.vi("y", [1, 8])], inits)
    return mz.make_model(graph, opset=17)


def test_a_graph_input_pair_is_bypassed_without_a_relu(cli, tmp_path):
    model = mz.save(_uint8_input(), tmp_path / "u8.onnx")
    feeds = tmp_path / "in.json"
    save_inputs(str(feeds), [{"x": np.linspace(-1, 1, 8, dtype=np.float32).reshape(1, 8)}])
    r = cli("debug", "precision", model, "--load-inputs", feeds, "--atol", "0.1", "--rtol", "0", "--json")
    # the quantized model clips the negative inputs: against the float input it fails by 2
    assert r.code == 0, r.err
    result = json.loads(r.out)
    assert result["status"] == "found" and [p["tensor"] for p in result["float_pairs"]] == ["x"], r.err

"""The README's exit-code table says what the commands do: an inference failure is exit 1."""

from __future__ import annotations

import os
import re

import numpy as np
import onnx
from onnx import TensorProto, helper

from conftest import REPO


def _rows():
    text = open(os.path.join(REPO, "README.md")).read()
    table = text.split("## Exit codes", 1)[1]
    return dict(re.findall(r"^\| (\d+) \| (.*) \|$", table, re.M))


def test_an_inference_failure_is_exit_1_as_the_readme_says(cli, tmp_path):
    """Reshape of 6 values to 4: the model loads, then fails to run."""
    graph = helper.make_graph(
        [helper.make_node("Reshape", ["x", "shape"], ["y"], name="reshape")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [onnx.numpy_helper.from_array(np.array([4], np.int64), "shape")],
    )
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), str(path))
    res = cli("run", path, "--onnxrt")
    assert res.code == 1 and "inference failed" in res.err, res.err
    assert "inference failed" in _rows()["1"]

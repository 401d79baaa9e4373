"""An external tensor with no ``length`` entry in a data file that holds more after it is read as
ONNX-Runtime reads it (its dims' worth of bytes): sanitize writes a model that computes what the
original computes, instead of refusing the model as damaged or carrying the extra bytes."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper


def _model(folder):
    w = np.arange(6, dtype=np.float32).reshape(2, 3)
    (folder / "w.bin").write_bytes(w.tobytes() + b"\0" * 64)  # more after the tensor
    t = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[2, 3], data_location=TensorProto.EXTERNAL)
    entry = t.external_data.add()
    entry.key, entry.value = "location", "w.bin"
    graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"], name="add")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])], [t])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(folder / "m.onnx"))
    return folder / "m.onnx"


def _run(path):
    return ort.InferenceSession(str(path)).run(None, {"x": np.ones((2, 3), np.float32)})[0]


def test_sanitize_reads_the_tensor_as_the_runtime_does(cli, tmp_path):
    model = _model(tmp_path)
    want = _run(model)
    res = cli("surgeon", "sanitize", model, "--fold-constants", "-o", tmp_path / "s.onnx")
    assert res.code == 0, res.err
    np.testing.assert_array_equal(_run(tmp_path / "s.onnx"), want)

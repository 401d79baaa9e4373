"""A model that does not run on generated inputs (dynamic dims as 1: a detector fed a 1x1 image)
fails in `debug reduce --compare` and `debug precision` with an error that says how the inputs
were made and which options give real ones, as `run` does; with -q that error is all one sees."""

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def _pairs_model(path) -> str:
    """y = Reshape(x, [-1, 2]) * 2: x of shape [1, n] with n odd (1, as generated) has no pairs."""
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["r"]), helper.make_node("Mul", ["r", "two"], ["y"])]
    graph = helper.make_graph(
        nodes, "pairs", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "n"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 2])],
        [numpy_helper.from_array(np.array([-1, 2], np.int64), "shape"),
         numpy_helper.from_array(np.array(2.0, np.float32), "two")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.save(model, str(path))
    return str(path)


def test_reduce_and_precision_say_the_inputs_were_generated(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the replay file goes beside the iteration artifact
    path = _pairs_model(tmp_path / "pairs.onnx")
    res = cli("debug", "reduce", path, "-o", tmp_path / "r.onnx", "--compare", "onnxrt", "onnxrt:fp16", "-q")
    last = res.err.strip().splitlines()[-1]
    assert res.code == 1 and "Traceback" not in res.err, res.err
    assert last.startswith("error: reference onnxrt: inference failed") and "the inputs were generated" in last, last
    assert "--model-input-shapes" in last and not (tmp_path / "r.onnx").exists()
    res = cli("debug", "reduce", path, "-o", tmp_path / "r.onnx", "--compare", "onnxrt", "onnxrt:fp16",
              "--model-input-shapes", "x:1x8")
    assert res.code == 0 and "the inputs were generated" not in res.err, res.err
    res = cli("debug", "precision", path, "-q")
    last = res.err.strip().splitlines()[-1]
    assert res.code == 1 and "Traceback" not in res.err, res.err
    assert "inference failed" in last and "the inputs were generated" in last and "--input-shapes" in last, last
    assert "--data-loader-script" not in last  # (debug precision has no such option)
    assert cli("debug", "precision", path, "--input-shapes", "x:1x8").code == 0

"""toolkit.run.plan: the comparison options reach the run as one typed value."""

import numpy as np
from onnx import TensorProto, helper

from toolkit.core.compare.tolerances import Tolerances
from toolkit.core.errors import UsageError


def _model(path):
    """y = x * 1.0001: in fp16 storage the product rounds (an error near 1e-3 on values near 1)."""
    k = helper.make_tensor("k", TensorProto.FLOAT, [], [1.0001])
    graph = helper.make_graph([helper.make_node("Mul", ["x", "k"], ["y"], name="mul")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])], initializer=[k])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    import onnx

    onnx.save(model, str(path))
    return str(path)


def test_a_library_caller_passes_typed_tolerances(tmp_path):
    from toolkit.run import RunOptions, execute

    model = _model(tmp_path / "m.onnx")
    runners = ["onnxrt", "onnxrt:fp16"]
    assert not execute(RunOptions(model, runners=runners, val_range=["[1,2]"])).passed
    loose = execute(RunOptions(model, runners=runners, val_range=["[1,2]"], tolerances=Tolerances.of(atol={"y": 0.1})))
    assert loose.passed
    assert loose.comparisons[0].iterations[0].outputs[0].atol == 0.1


def test_the_command_line_hands_the_library_typed_tolerances(cli, tmp_path, monkeypatch):
    import toolkit.run as runplan

    seen = {}

    def capture(opts, reporter=None):
        seen["opts"] = opts
        raise UsageError("captured")

    monkeypatch.setattr(runplan, "execute", capture)
    res = cli("run", _model(tmp_path / "m.onnx"), "--onnxrt", "--atol", "1e-3", "y:0.5", "--rtol", "0")
    assert res.code == 2 and "captured" in res.err
    tol = seen["opts"].tolerances
    assert isinstance(tol, Tolerances) and tol.atol == 1e-3 and tol.per_atol == {"y": 0.5} and tol.rtol == 0.0
    assert np.isclose(tol.for_output("y", False)[0], 0.5)

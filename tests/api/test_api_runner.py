"""toolkit.api: a runner held open for many inferences, typed tolerances, extract checked as the command checks it."""

import numpy as np
import pytest
from onnx import TensorProto, helper

from toolkit import api


def _model(middle="a"):
    """x[1,3] -> Relu -> a -> Neg -> y."""
    nodes = [helper.make_node("Relu", ["x"], [middle], name="relu"),
             helper.make_node("Neg", [middle], ["y"], name="neg")]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


def test_open_runner_activates_once_and_infers_many_times(monkeypatch):
    from toolkit.backends import onnxrt

    activations = []
    real = onnxrt.OnnxrtRunner._activate
    monkeypatch.setattr(onnxrt.OnnxrtRunner, "_activate", lambda self: (activations.append(1), real(self))[1])
    feeds = [{"x": np.array([[k, -k, 2 * k]], np.float32)} for k in (1.0, 2.0, 3.0)]
    with api.open_runner("onnxrt:opt=disable", _model(), onnx_outputs=["mark", "all"]) as runner:
        outs = [runner.infer(feed) for feed in feeds]
        assert runner.is_active
    assert not runner.is_active and len(activations) == 1
    assert np.array_equal(outs[2]["y"], -np.maximum(feeds[2]["x"], 0)) and "a" in outs[0]


def test_open_runner_refuses_an_option_before_anything_runs(tmp_path):
    with pytest.raises(api.UsageError, match="openvino"):
        with api.open_runner("onnxrt", str(tmp_path / "missing.onnx"), precision="f32"):
            pass


def test_compare_takes_numbers_and_per_output_mappings():
    ref = [{"y": np.zeros(3, np.float32), "z": np.zeros(3, np.float32)}]
    got = [{"y": np.full(3, 0.01, np.float32), "z": np.full(3, 0.5, np.float32)}]
    assert api.compare(ref, got).mismatched() == ["y", "z"]
    assert api.compare(ref, got, atol=0.1).mismatched() == ["z"]
    assert api.compare(ref, got, atol={"z": 1.0}).mismatched() == ["y"]
    assert api.compare(ref, got, atol={"y": 0.1, "z": 1}).passed
    assert not api.compare(ref, got, atol=0.1, check_error_stat={"z": "mean"}).passed


@pytest.mark.parametrize("bad", [dict(atol=["1e-2"]), dict(atol="1e-2"), dict(rtol=-1.0), dict(atol={"y": None}),
                                 dict(atol=True), dict(check_error_stat="p90")])
def test_compare_refuses_malformed_values(bad):
    ref = [{"y": np.zeros(3, np.float32)}]
    with pytest.raises(api.UsageError):
        api.compare(ref, ref, **bad)


def test_extract_refuses_an_unknown_name_as_the_command_does():
    with pytest.raises(api.InputError, match="nope"):
        api.extract(_model(), inputs=["nope:auto:auto"], outputs=["y"])
    with pytest.raises(api.InputError, match="nope"):
        api.extract(_model(), outputs=["nope"])
    sub = api.extract(_model(), inputs=["a:auto:auto"], outputs=["y"])
    assert [n.op_type for n in sub.graph.node] == ["Neg"]


def test_extract_reads_a_spec_that_is_a_tensor_name_as_that_name():
    """``a:0`` is the tensor a:0 of the model (as in ``surgeon extract``), not tensor a of shape (0,)."""
    sub = api.extract(_model("a:0"), inputs=["a:0"], outputs=["y"])
    assert [i.name for i in sub.graph.input] == ["a:0"]
    assert [d.dim_value for d in sub.graph.input[0].type.tensor_type.shape.dim] == [1, 3]

"""toolkit.api: every name docs/api.md lists imports from it and works on a model built in code."""

import pathlib
import re

import numpy as np
import pytest
from onnx import TensorProto, helper

from conftest import REPO

DOC = pathlib.Path(REPO) / "docs" / "api.md"


def _documented_names():
    """The names of the table under '## Names' in docs/api.md."""
    section = DOC.read_text().split("## Names", 1)[1].split("\n## ", 1)[0]
    names = []
    for row in re.findall(r"^\| (.+?) \|", section, re.M):
        names += re.findall(r"`(\w+)(?:\(|`)", row)
    return names


@pytest.fixture
def chain():
    """x -> Relu -> Neg -> Abs -> Mul(6e4) -> Sigmoid -> y: fp16 overflows after the Mul (6e4 itself
    fits fp16, so the conversion does not keep the Mul in fp32 for its constant)."""
    scale = helper.make_tensor("k", TensorProto.FLOAT, [], [6e4])
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="relu"),
        helper.make_node("Neg", ["a"], ["b"], name="neg"),
        helper.make_node("Abs", ["b"], ["c"], name="abs"),
        helper.make_node("Mul", ["c", "k"], ["d"], name="mul"),
        helper.make_node("Sigmoid", ["d"], ["y"], name="sigmoid"),
    ]
    graph = helper.make_graph(
        nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])], initializer=[scale],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


def test_every_documented_name_is_in_the_api():
    from toolkit import api

    names = _documented_names()
    assert len(names) >= 15, names
    for name in names:
        assert hasattr(api, name), f"docs/api.md lists {name}, which toolkit.api does not have"
    assert sorted(set(names)) == sorted(api.__all__)


def test_models_and_data_round_trip(chain, tmp_path):
    from toolkit import api

    api.save_model(chain, str(tmp_path / "m.onnx"))
    loaded = api.load_model(str(tmp_path / "m.onnx"))
    assert [n.op_type for n in loaded.graph.node] == ["Relu", "Neg", "Abs", "Mul", "Sigmoid"]
    feeds = api.generate_inputs(loaded, iterations=2, input_shapes=["x:2x3"], val_range=["[-1,1]"])
    assert len(feeds) == 2 and feeds[0]["x"].shape == (2, 3) and feeds[0]["x"].min() >= -1
    assert np.array_equal(feeds[0]["x"], api.generate_inputs(chain, input_shapes=["x:2x3"], seed=1,
                                                             val_range=["[-1,1]"])[0]["x"])
    api.save_inputs(str(tmp_path / "in.npz"), feeds)
    again = api.load_inputs(str(tmp_path / "in.npz"))
    assert np.array_equal(again[1]["x"], feeds[1]["x"])


def test_run_and_compare(chain, tmp_path):
    from toolkit import api

    feeds = [{"x": np.array([[1.0, -2.0, 3.0]], np.float32)}]
    ref = api.run(chain, feeds)
    expected = 1 / (1 + np.exp(-np.array([[6e4, 0, 1.8e5]])))
    assert np.allclose(ref[0]["y"], expected)
    marked = api.run(chain, feeds, "onnxrt:opt=disable", onnx_outputs=["mark", "all"])
    assert {"a", "b", "c", "d", "y"} <= set(marked[0])
    api.save_model(chain, str(tmp_path / "m.onnx"))
    fp16 = api.run(str(tmp_path / "m.onnx"), feeds, "onnxrt:fp16", onnx_outputs=["mark", "all"])
    same = api.compare(ref, ref)
    assert isinstance(same, api.Comparison) and same.passed
    # 1.8e5 overflows fp16 storage: Mul's output is inf, Sigmoid(inf) = 1 and Sigmoid(0) = 0.5 stay
    diff = api.compare(marked, fp16, atol=1e-3)
    assert not diff.passed and diff.mismatched() == ["d"]


def test_extract_sanitize_convert_leave_the_input_model_alone(chain):
    from toolkit import api

    before = chain.SerializeToString()
    sub = api.extract(chain, inputs=["a:auto:auto"], outputs=["c"])
    assert [n.op_type for n in sub.graph.node] == ["Neg", "Abs"]
    assert [i.name for i in sub.graph.input] == ["a"]
    folded = api.sanitize(chain, fold_constants=True, input_shapes=["x:1x3"])
    assert folded.graph.input[0].type.tensor_type.shape.dim[0].dim_value == 1
    mixed = api.convert(chain, keep_fp32=["sigmoid"])
    assert any(n.op_type == "Cast" for n in mixed.graph.node)
    assert chain.SerializeToString() == before


def test_reduce_with_a_python_check(chain):
    from toolkit import api

    def overflows(model) -> bool:
        """fp16 storage turns some tensor infinite (inputs in [1,2], every input 1x3)."""
        shapes = [f"{i.name}:1x3" for i in model.graph.input]
        feeds = api.generate_inputs(model, input_shapes=shapes, val_range=["[1,2]"])
        outs = api.run(model, feeds, "onnxrt:fp16", onnx_outputs=["mark", "all"])[0]
        return any(np.isinf(v).any() for v in outs.values())

    small = api.reduce(chain, overflows)
    assert [n.op_type for n in small.graph.node] == ["Mul"]
    with pytest.raises(api.InputError, match="nothing to reduce"):
        api.reduce(chain, lambda m: False)


def test_errors_carry_exit_codes(tmp_path):
    from toolkit import api

    with pytest.raises(api.InputError) as info:
        api.load_model(str(tmp_path / "missing.onnx"))
    assert info.value.exit_code == api.ExitCode.BAD_INPUT == 3
    with pytest.raises(api.UsageError):
        api.run(str(tmp_path / "missing.onnx"), [], "nope")
    assert api.ExitCode.INTERNAL == 70
    assert issubclass(api.DependencyError, api.ToolkitError) and issubclass(api.InferenceError, api.ToolkitError)
    assert api.TensorMeta("x", (1, 3), "float32").shape == (1, 3)


# ------------------------------------------------------------------ a backend's own options as keywords


def _cancelling_model():
    """x[1,2] + 1e4 -> MatMul by [1, -1]: x0 - x1 in float32; in bfloat16 (8 bits of mantissa)
    the sums near 1e4 round to multiples of 64 and the difference is lost."""
    nodes = [
        helper.make_node("Add", ["x", "big"], ["s"], name="shift"),
        helper.make_node("MatMul", ["s", "w"], ["d"], name="cancel"),
    ]
    graph = helper.make_graph(
        nodes, "cancel", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2])],
        [helper.make_tensor_value_info("d", TensorProto.FLOAT, [1, 1])],
        initializer=[helper.make_tensor("big", TensorProto.FLOAT, [], [1e4]),
                     helper.make_tensor("w", TensorProto.FLOAT, [2, 1], [1.0, -1.0])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


def test_run_takes_openvinos_own_options_as_keywords():
    pytest.importorskip("openvino")
    from toolkit import api

    model = _cancelling_model()
    feeds = [{"x": np.array([[3.0, 7.5]], np.float32)}]
    ref = api.run(model, feeds)[0]["d"]
    assert np.allclose(ref, -4.5)
    f32 = api.run(model, feeds, "openvino", precision="f32", device="cpu")[0]["d"]
    bf16 = api.run(model, feeds, "openvino", precision="bf16")[0]["d"]
    assert np.allclose(f32, ref, atol=1e-3) and abs(float(bf16[0, 0]) - -4.5) > 1
    assert np.array_equal(api.run(model, feeds, "openvino:precision=bf16")[0]["d"], bf16)  # the spec's spelling
    assert np.allclose(api.run(model, feeds, "openvino:precision=f32", precision="bf16")[0]["d"], ref, atol=1e-3)
    marked = api.run(model, feeds, "openvino", precision="f32", outputs=["mark", "all"])[0]  # a field name
    assert {"s", "d"} <= set(marked)

    with pytest.raises(api.UsageError, match="openvino's precision is one of: f32, bf16, f16"):
        api.run(model, feeds, "openvino", precision="f64")
    with pytest.raises(api.UsageError) as info:
        api.run(model, feeds, "openvino", precison="f32")
    assert "'precison' is not an option" in info.value.message
    assert "device, precision, outputs, exclude_outputs" in info.value.message
    with pytest.raises(api.UsageError, match="'precision' is an option of openvino runners, not of onnxrt"):
        api.run(model, feeds, "onnxrt", precision="f32")


def test_run_takes_a_registered_kinds_own_options(monkeypatch, tmp_path):
    """A backend registered with its own options (the fake one of test_declared_options) takes
    them as keywords; onnxrt's ``fp16`` keyword is its spec option (``onnxrt:fp16``)."""
    import onnx

    import toolkit.run.options as options_module
    import toolkit.run.registry as registry
    from test_declared_options import FakeOptions, FakeRunner
    from toolkit import api

    monkeypatch.setattr(registry, "KINDS", dict(registry.KINDS))
    monkeypatch.setitem(options_module.KIND_DECLARATIONS, "fake", FakeOptions)  # (undone after the test)
    registry.register(registry.RunnerKind(
        name="fake", flag="--fake", help="The fake backend.", declares=FakeOptions,
        factory=lambda opts, config, reporter, name: FakeRunner(opts.model, name, opts.of("fake").slope),
    ))  # fmt: skip
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    path = str(tmp_path / "relu.onnx")
    onnx.save(model, path)
    feeds = [{"x": np.array([[-1, 2, -3], [4, -5, 6]], np.float32)}]
    assert api.run(path, feeds, "fake")[0]["y"].tolist() == [[0, 2, 0], [4, 0, 6]]
    assert api.run(path, feeds, "fake", slope="0.5")[0]["y"].tolist() == [[-0.5, 2, -1.5], [4, -2.5, 6]]
    with pytest.raises(api.UsageError, match=r"'slop' is not an option; fake takes slope"):
        api.run(path, feeds, "fake", slop="0.5")
    with pytest.raises(api.UsageError, match="fake's slope is one of: 0, 0.5"):
        api.run(path, feeds, "fake", slope="2")
    with pytest.raises(api.UsageError, match="'slope' is an option of fake runners, not of onnxrt"):
        api.run(path, feeds, "onnxrt", slope="0.5")
    big = [{"x": np.array([[1e5, 1, 2], [3, 4, 5]], np.float32)}]  # 1e5 overflows fp16 storage
    assert np.isinf(api.run(path, big, "onnxrt", fp16=True)[0]["y"][0, 0])
    assert api.run(path, big, "onnxrt")[0]["y"][0, 0] == 1e5

"""Shapes a model will meet: with dynamic dims, `convert` and `debug precision` take --input-shapes
or the model's own hints (metadata), else warn (shown with -q) and give no "within atol" verdict
on inputs whose dynamic dims were set to 1. One spelling of dynamic shapes: (?, 3, ?, ?)."""

import json

import numpy as np
from onnx import helper, numpy_helper

import modelzoo as mz
from toolkit.convert.shapes import model_shape_hints
from toolkit.core.io.model import graph_io_meta


def dynamic_cnn(metadata=None):
    """x[N,3,H,W] -> Conv 3x3 -> Relu -> GlobalAveragePool -> y[N,4,1,1]."""
    rng = np.random.default_rng(1)
    inits = [numpy_helper.from_array((rng.standard_normal((4, 3, 3, 3)) * 0.3).astype(np.float32), "w")]
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("GlobalAveragePool", ["r"], ["y"], name="gap"),
    ]
    graph = helper.make_graph(nodes, "dyn", [mz.vi("x", ["batch", 3, "height", "width"])],
                              [mz.vi("y", ["batch", 4, 1, 1])], inits)  # fmt: skip
    model = mz.make_model(graph, opset=17)
    for key, value in (metadata or {}).items():
        model.metadata_props.add(key=key, value=value)
    return model


def test_dims_set_to_1_give_a_warning_and_no_verdict(cli, tmp_path):
    src = mz.save(dynamic_cnn(), tmp_path / "m.onnx")
    r = cli("-q", "convert", src, "--fp-to-fp16", "-o", tmp_path / "o.onnx", "--json")
    assert r.code == 0, r.err
    assert "warning: input 'x' has dynamic shape (?, 3, ?, ?); using (1, 3, 1, 1)" in r.err
    assert "whose dynamic dims were set to 1" in r.err and "not a check of the shapes" in r.err
    assert "within atol" not in r.err and "Checked" not in r.err
    val = json.loads(r.out)["validation"]
    assert val["representative"] is False and val["shapes_from"] == "dynamic dims set to 1"
    assert val["input_shapes"] == {"x": [1, 3, 1, 1]}


def test_given_shapes_are_checked(cli, tmp_path):
    src = mz.save(dynamic_cnn(), tmp_path / "m.onnx")
    r = cli("convert", src, "--fp-to-fp16", "-o", tmp_path / "o.onnx", "--json", "--input-shapes", "x:[2,3,16,12]")
    assert r.code == 0, r.err
    assert "Checked against the original" in r.err and "within atol" in r.err and "warning" not in r.err
    val = json.loads(r.out)["validation"]
    assert val["representative"] and val["shapes_from"] == "--input-shapes"
    assert val["input_shapes"] == {"x": [2, 3, 16, 12]}


def test_the_model_metadata_gives_the_shapes(cli, tmp_path):
    model = dynamic_cnn({"imgsz": "[16, 24]", "batch": "1", "stride": "32"})
    assert model_shape_hints(model, graph_io_meta(model)[0]) == (["x:[1,3,16,24]"], ["batch", "imgsz"])
    src = mz.save(model, tmp_path / "m.onnx")
    r = cli("convert", src, "--fp-to-fp16", "-o", tmp_path / "o.onnx", "--json")
    assert r.code == 0, r.err
    assert "Input shapes from the model's metadata (batch, imgsz): x:[1,3,16,24]" in r.err
    val = json.loads(r.out)["validation"]
    assert val["input_shapes"] == {"x": [1, 3, 16, 24]} and val["shapes_from"] == "the model's metadata"
    assert model_shape_hints(dynamic_cnn({"imgsz": "oops"}), graph_io_meta(model)[0]) == ([], [])


def test_debug_precision_gives_no_verdict_on_dims_set_to_1(cli, tmp_path):
    src = mz.save(dynamic_cnn(), tmp_path / "m.onnx")
    r = cli("-q", "debug", "precision", src)
    assert r.code == 0, r.err
    assert "warning: input 'x' has dynamic shape (?, 3, ?, ?)" in r.err
    assert "whose dynamic dims were set to 1" in r.err
    r = cli("debug", "precision", src, "--input-shapes", "x:[1,3,8,8]")
    assert r.code == 0 and "passes as it is (" in r.err and "dynamic dims" not in r.err


def test_metadata_that_holds_no_size_is_ignored():
    model = dynamic_cnn()
    metas = graph_io_meta(model)[0]
    for imgsz in ("True", "[True, 24]", "[16, False]", "640.0", "[16, 24, 3]", "true"):
        assert model_shape_hints(dynamic_cnn({"imgsz": imgsz, "batch": "1"}), metas) == ([], []), imgsz
    assert model_shape_hints(dynamic_cnn({"imgsz": "[16, 24]", "batch": "True"}), metas) == ([], [])
    assert model_shape_hints(dynamic_cnn({"imgsz": "16", "batch": "2"}), metas) == (["x:[2,3,16,16]"], ["batch", "imgsz"])

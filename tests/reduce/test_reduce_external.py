"""`debug reduce` on models whose weights are in external data files: weights stay on
disk (never loaded whole), and every file written runs on its own from any folder."""

from __future__ import annotations

import os
import shutil

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import modelzoo
from reduce_helpers import node_names, reduce_model

N = 256  # 1 KiB weights: saved to a data file (smaller ones go inside the model)
W = {f"w{i}": (np.arange(N, dtype=np.float32) + 10 * i).reshape(1, N) for i in range(3)}


def weighted_chain():
    """x[1,N] -> Add(w0) 'add0' -> Mul(w1) 'mul' -> Add(w2) 'add2' -> y."""
    nodes = [
        helper.make_node("Add", ["x", "w0"], ["a"], name="add0"),
        helper.make_node("Mul", ["a", "w1"], ["m"], name="mul"),
        helper.make_node("Add", ["m", "w2"], ["y"], name="add2"),
    ]
    inits = [numpy_helper.from_array(v, k) for k, v in W.items()]
    graph = helper.make_graph(nodes, "weighted", [modelzoo.vi("x", [1, N])], [modelzoo.vi("y", [1, N])], inits)
    return modelzoo.make_model(graph)


@pytest.fixture
def ext(tmp_path, monkeypatch):
    """The model in tmp_path/src with its weights in weights.bin, none read eagerly, and
    loading all of a model's external data made an error."""

    src = tmp_path / "src"
    src.mkdir()
    modelzoo.save_with_external_data(weighted_chain(), src / "model.onnx")
    monkeypatch.setattr("toolkit.reduce.loading.EAGER_WEIGHT_BYTES", 0)

    def refuse(*a, **k):
        raise AssertionError("every external weight was loaded")

    monkeypatch.setattr("toolkit.reduce.loading.load_external_data_into", refuse)  # where loading looks it up
    return src


def _run_alone(path, tmp_path, extra=()):
    """Copy the model (and its ``extra`` files) to a new folder and run it there."""
    import onnxruntime as ort

    alone = tmp_path / "alone"
    alone.mkdir(exist_ok=True)
    for f in (path, *extra):
        shutil.copy(f, alone / os.path.basename(f))
    sess = ort.InferenceSession(str(alone / os.path.basename(path)), providers=["CPUExecutionProvider"])
    feed = {i.name: np.ones((1, N), np.float32) for i in sess.get_inputs()}
    return sess.run(None, feed)[0]


def test_weights_copied_from_disk_into_one_file(ext, tmp_path):
    before = (ext / "weights.bin").read_bytes()
    outcome, reduced, check = reduce_model(
        tmp_path, str(ext / "model.onnx"), ["mul"], ort=True, min_good=str(tmp_path / "good.onnx")
    )
    assert outcome.status == "reduced" and node_names(reduced) == ["mul"]
    assert all(r["verdict"] != "invalid" for r in check.records())  # every artifact ran on ORT
    raw = onnx.load(str(tmp_path / "reduced.onnx"), load_external_data=False)
    assert [(t.name, t.data_location) for t in raw.graph.initializer] == [("w1", onnx.TensorProto.DEFAULT)]
    np.testing.assert_array_equal(numpy_helper.to_array(raw.graph.initializer[0]), W["w1"])
    np.testing.assert_array_equal(_run_alone(tmp_path / "reduced.onnx", tmp_path), W["w1"])
    assert os.path.exists(tmp_path / "good.onnx")
    assert not os.path.exists(tmp_path / "polygraphy_debug.onnx")
    assert (ext / "weights.bin").read_bytes() == before


def test_huge_candidates_get_their_own_data_file(ext, tmp_path, monkeypatch):
    import toolkit.reduce.graph as graph
    import toolkit.reduce.session as session

    monkeypatch.setattr(graph, "BIG_MODEL_BYTES", 0)
    monkeypatch.setattr(session, "BIG_MODEL_BYTES", 0)
    outcome, reduced, _ = reduce_model(tmp_path, str(ext / "model.onnx"), ["mul"], ort=True)
    assert node_names(reduced) == ["mul"]
    raw = onnx.load(str(tmp_path / "reduced.onnx"), load_external_data=False)
    locations = {e.value for t in raw.graph.initializer for e in t.external_data if e.key == "location"}
    assert locations == {"reduced.onnx.data"}
    out = _run_alone(tmp_path / "reduced.onnx", tmp_path, [tmp_path / "reduced.onnx.data"])
    np.testing.assert_array_equal(out, W["w1"])
    assert not os.path.exists(tmp_path / "polygraphy_debug.onnx.data")  # the artifact's, removed


def test_huge_output_over_the_model_weights_is_refused(tmp_path, monkeypatch):
    import toolkit.reduce.graph as graph
    import toolkit.reduce.session as session
    from toolkit.core.errors import InputError

    monkeypatch.setattr(graph, "BIG_MODEL_BYTES", 0)
    monkeypatch.setattr(session, "BIG_MODEL_BYTES", 0)
    monkeypatch.setattr("toolkit.reduce.loading.EAGER_WEIGHT_BYTES", 0)
    modelzoo.save_with_external_data(weighted_chain(), tmp_path / "model.onnx", location="reduced.onnx.data")
    before = (tmp_path / "reduced.onnx.data").read_bytes()
    with pytest.raises(InputError, match="holds the model's own weights"):
        reduce_model(tmp_path, str(tmp_path / "model.onnx"), ["mul"])
    assert (tmp_path / "reduced.onnx.data").read_bytes() == before


def test_output_naming_the_weights_file_is_a_usage_error(ext, cli, monkeypatch):
    monkeypatch.chdir(ext)
    before = (ext / "weights.bin").read_bytes()
    res = cli("debug", "reduce", "model.onnx", "-o", "weights.bin", "--check", "true")
    assert res.code == 2 and "weights.bin" in res.err and "external data file" in res.err
    assert (ext / "weights.bin").read_bytes() == before


def test_same_replay_identity_as_the_single_file_model(ext, tmp_path):
    from toolkit.reduce.graph import GraphIndex
    from toolkit.reduce.loading import load_for_index

    lazy, raw, base = load_for_index(str(ext / "model.onnx"))
    assert raw is None and base == str(ext) and any(t.data_location == 1 for t in lazy.graph.initializer)
    modelzoo.save(weighted_chain(), tmp_path / "one.onnx")
    light, pieces, none = load_for_index(str(tmp_path / "one.onnx"))
    assert pieces is not None and none is None
    assert GraphIndex(lazy, external_base_dir=base).identity() == GraphIndex(light, raw=pieces).identity()

"""Data files and comparisons of non-numeric tensors: strings (object arrays from ONNX-Runtime),
bools, and the Python objects a data file cannot hold."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from toolkit.core.compare.arrays import compare_arrays
from toolkit.core.io.datafiles import IterationResult, RunResults, load_outputs, save_outputs
from toolkit.core.errors import InputError


def _string_model(d) -> str:
    """text (string) -> twice = Concat(text, text) -> low = Gather(twice, [5, 1, 3]); x -> pos (bool), r."""
    nodes = [
        helper.make_node("Concat", ["text", "text"], ["twice"], axis=0, name="cat"),
        helper.make_node("Gather", ["twice", "idx"], ["low"], name="pick"),
        helper.make_node("Greater", ["x", "zero"], ["pos"], name="gt"),
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
    ]
    graph = helper.make_graph(
        nodes, "s",
        [helper.make_tensor_value_info("text", TensorProto.STRING, [3]),
         helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("low", TensorProto.STRING, [3]),
         helper.make_tensor_value_info("pos", TensorProto.BOOL, [3]),
         helper.make_tensor_value_info("r", TensorProto.FLOAT, [3])],
        initializer=[onnx.numpy_helper.from_array(np.array(0, np.float32), "zero"),
                     onnx.numpy_helper.from_array(np.array([5, 1, 3], np.int64), "idx")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    path = str(d / "s.onnx")
    onnx.save(model, path)
    np.savez(d / "in.npz", text=np.array(["Ab", "cd", "EF"]), x=np.array([1, -1, 2], np.float32))
    return path


@pytest.mark.parametrize("ext", [".json", ".npz"])
def test_string_and_bool_outputs_save_load_and_round_trip(cli, tmp_path, ext):
    model = _string_model(tmp_path)
    out = tmp_path / f"o{ext}"
    res = cli("run", model, "--onnxrt", "--load-inputs", tmp_path / "in.npz", "--save-outputs", out,
              "--onnx-outputs", "mark", "all")
    assert res.code == 0, res.err
    outs = load_outputs(str(out)).runs[0][1][0].outputs
    assert outs["low"].tolist() == ["EF", "cd", "Ab"] and outs["twice"].shape == (6,)
    assert outs["pos"].dtype == np.bool_ and outs["pos"].tolist() == [True, False, True]
    res = cli("run", model, "--onnxrt", "--load-inputs", tmp_path / "in.npz", "--load-outputs", out,
              "--onnx-outputs", "mark", "all")
    assert res.code == 0, res.err
    assert "PASSED | low | equal (3 value(s) of string)" in res.err


def test_polygraphy_reads_string_outputs(cli, tmp_path):
    comparator = pytest.importorskip("polygraphy.comparator")
    model = _string_model(tmp_path)
    res = cli("run", model, "--onnxrt", "--load-inputs", tmp_path / "in.npz", "--save-outputs", tmp_path / "o.json")
    assert res.code == 0, res.err
    loaded = comparator.RunResults.load(str(tmp_path / "o.json"))
    assert list(loaded[0][1][0]["low"]) == ["EF", "cd", "Ab"]
    assert '"polygraphy_class": "ndarray"' in (tmp_path / "o.json").read_text()


def test_a_differing_string_names_the_first_element(cli, tmp_path):
    model = _string_model(tmp_path)
    golden = {"low": np.array(["EF", "cx", "Ab"]), "pos": np.array([True, False, True]), "r": np.array([1, 0, 2], np.float32)}
    save_outputs(str(tmp_path / "g.json"), RunResults([("golden", [IterationResult(golden)])]))
    res = cli("run", model, "--onnxrt", "--load-inputs", tmp_path / "in.npz", "--load-outputs", tmp_path / "g.json")
    assert res.code == 1
    assert "FAILED | low | 1 of 3 value(s) differ; first at [1]: 'cd' vs 'cx'" in res.err
    assert "PASSED | pos" in res.err and "Traceback" not in res.err


def test_two_runners_compare_every_string_tensor(cli, tmp_path):
    model = _string_model(tmp_path)
    res = cli("run", model, "--onnxrt", "--onnxrt", "--load-inputs", tmp_path / "in.npz", "--onnx-outputs", "mark", "all")
    assert res.code == 0, res.err
    assert "PASSED | twice | equal (6 value(s) of string)" in res.err


def test_strings_are_stored_without_pickle(tmp_path):
    it = {"s": np.array([["a", "bb"], ["", "ccc"]], dtype=object), "b": np.array([b"x", b"yz"], dtype=object)}
    for ext in (".json", ".npz"):
        save_outputs(str(tmp_path / f"o{ext}"), RunResults([("r", [IterationResult(it)])]))
        back = load_outputs(str(tmp_path / f"o{ext}")).runs[0][1][0].outputs
        assert back["s"].dtype.kind == "U" and back["s"].tolist() == [["a", "bb"], ["", "ccc"]]
        assert back["b"].dtype.kind == "S" and back["b"].tolist() == [b"x", b"yz"]


def test_python_objects_are_refused_and_nothing_is_written(tmp_path):
    it = {"m": np.array([{"a": 1.0}], dtype=object)}
    for ext in (".json", ".npz"):
        with pytest.raises(InputError, match=r"Python objects \(dict\).*numbers, bools and strings"):
            save_outputs(str(tmp_path / f"o{ext}"), RunResults([("r", [IterationResult(it)])]))
        assert not (tmp_path / f"o{ext}").exists()


def test_a_string_never_equals_a_number():
    res = compare_arrays("t", np.array(["1"]), np.array([1.0]), 1e-5, 1e-5)
    assert not res.passed and res.message == "1 of 1 value(s) differ; first at [0]: '1' vs 1.0"

"""No verdict without evidence: undefined elements (a float-to-int Cast of NaN, inf or an
out-of-range value) are decided from the reference's value of the Cast's input only, never from
the side under test; where the reference does not hold it nothing is skipped (and the row says
so); an output compared on no element never passes; every row counts the elements compared."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from modelzoo import make_model, vi
from toolkit.core.compare.arrays import compare_arrays
from toolkit.core.io.datafiles import load_outputs, save_inputs, save_outputs


def _int8_of_identity(path):
    """y = int8(x * 1): fp32 gives 127 for x = 127.97, fp16 storage rounds h to 128 (-128 in int8)."""
    one = numpy_helper.from_array(np.array(1.0, np.float32), "one")
    nodes = [helper.make_node("Mul", ["x", "one"], ["h"], name="mul"),
             helper.make_node("Cast", ["h"], ["y"], to=TensorProto.INT8, name="cast")]
    graph = helper.make_graph(nodes, "g", [vi("x", [4])], [vi("y", [4], TensorProto.INT8)], [one])
    onnx.save(make_model(graph), path)
    return path


def _int32_of_relu(path, rename: bool = False):
    """yi = int32(Relu(x * 300)); x in [250, 300] gives 75000..90000: inf once stored in fp16.
    ``rename``: the intermediate tensors named otherwise (a reference model of other names)."""
    m, r = ("m_ref", "r_ref") if rename else ("m", "r")
    c = numpy_helper.from_array(np.array(300.0, np.float32), "c")
    nodes = [helper.make_node("Mul", ["x", "c"], [m], name="mul"), helper.make_node("Relu", [m], [r], name="relu"),
             helper.make_node("Cast", [r], ["yi"], to=TensorProto.INT32, name="cast")]
    graph = helper.make_graph(nodes, "g", [vi("x", [8])], [vi("yi", [8], TensorProto.INT32)], [c])
    onnx.save(make_model(graph), path)
    return path


def _rows(err: str) -> dict:
    return {ln.split(" | ")[1]: ln.strip() for ln in err.splitlines() if ln.lstrip().startswith(("PASSED |", "FAILED |"))}


def test_the_side_under_test_never_decides_what_is_undefined(tmp_path, cli):
    """run --onnxrt --fp16: the fp32 runner (the reference) has h = 127.97, defined; fp16 has 128."""
    model = _int8_of_identity(str(tmp_path / "m.onnx"))
    save_inputs(str(tmp_path / "in.json"), [{"x": np.array([127.97, 1, 2, 3], np.float32)}])
    res = cli("run", model, "--onnxrt", "--fp16", "--atol", "1e-3", "--rtol", "1e-3", "--onnx-outputs", "mark", "all",
              "--load-inputs", tmp_path / "in.json")
    rows = _rows(res.err)
    assert res.code == 1, res.err
    assert rows["y"].startswith("FAILED") and "not compared" not in rows["y"], rows
    assert rows["y"].endswith("| 4 element(s) compared"), rows


def test_a_golden_file_without_the_cast_input_skips_nothing(tmp_path, cli):
    """--runners onnxrt:fp16 --onnx-outputs r yi --load-outputs (a golden file of the graph outputs
    only): the Cast's input is only on the side under test, so nothing is skipped, and the row says so."""
    model = _int32_of_relu(str(tmp_path / "m.onnx"))
    save_inputs(str(tmp_path / "in.json"), [{"x": np.linspace(250, 300, 8).astype(np.float32)}])
    assert cli("run", model, "--onnxrt", "--load-inputs", tmp_path / "in.json", "--save-outputs",
               tmp_path / "ref.json").code == 0
    res = cli("run", model, "--runners", "onnxrt:fp16", "--onnx-outputs", "r", "yi", "--load-inputs",
              tmp_path / "in.json", "--load-outputs", tmp_path / "ref.json")
    rows = _rows(res.err)
    assert res.code == 1, res.err
    assert rows["yi"].startswith("FAILED") and "8 element(s) compared" in rows["yi"], rows
    assert "the reference does not hold the Cast's input 'r'" in rows["yi"], rows


def test_the_reference_decides_when_it_holds_the_value(tmp_path, cli):
    """Where the reference's own Cast input is out of range, those elements are skipped (and counted)."""
    model = _int32_of_relu(str(tmp_path / "m.onnx"))
    x = np.array([1, 2, 3e7, 4, 5, 6, 7, 8], np.float32)  # 9e9 is out of int32's range in the reference
    save_inputs(str(tmp_path / "in.json"), [{"x": x}])
    assert cli("run", model, "--onnxrt", "--onnx-outputs", "mark", "all", "--load-inputs", tmp_path / "in.json",
               "--save-outputs", tmp_path / "ref.json").code == 0
    ref = load_outputs(str(tmp_path / "ref.json"))
    ref.runs[0][1][0].outputs["yi"] = np.where(x > 1e6, np.iinfo(np.int32).max, ref.runs[0][1][0].outputs["yi"])
    save_outputs(str(tmp_path / "ref.json"), ref)
    res = cli("run", model, "--onnxrt", "--onnx-outputs", "mark", "all", "--load-inputs", tmp_path / "in.json",
              "--load-outputs", tmp_path / "ref.json")
    rows = _rows(res.err)
    assert res.code == 0, res.err
    assert "7 of 8 element(s) compared; 1 of 8 element(s) not compared" in rows["yi"], rows


def test_an_output_compared_on_no_element_fails():
    a = np.array([1, 2], np.int32)
    b = np.array([3, 4], np.int32)
    res = compare_arrays("y", a, b, 0.0, 0.0, skip=np.array([True, True]), skip_why="undefined")
    assert not res.passed and res.compared == 0 and res.message.startswith("0 of 2 element(s) compared"), res
    one = compare_arrays("y", a, np.array([1, 4], np.int32), 0.0, 0.0, skip=np.array([False, True]), skip_why="u")
    assert one.passed and one.compared == 1


def test_reduce_compare_with_a_reference_model_of_other_names(tmp_path, cli):
    """debug reduce --compare onnxrt onnxrt:fp16 --reference-model (its tensors named otherwise)
    --compare-tensors all: the full model fails (the reference lacks the Cast's input: nothing is
    skipped), the broken checks on subgraphs whose outputs the reference lacks are never called
    a data file that disappeared, nor passing nodes."""
    model = _int32_of_relu(str(tmp_path / "m.onnx"))
    ref = _int32_of_relu(str(tmp_path / "ref.onnx"), rename=True)
    save_inputs(str(tmp_path / "in.json"), [{"x": np.linspace(250, 300, 8).astype(np.float32)}])
    res = cli("debug", "reduce", model, "-o", tmp_path / "red.onnx", "--compare", "onnxrt", "onnxrt:fp16",
              "--reference-model", ref, "--compare-tensors", "all", "--load-inputs", tmp_path / "in.json",
              "--iter-artifact", tmp_path / "art.onnx", "--save-debug-replay", tmp_path / "replay.json")
    assert "the full model passes" not in res.err, res.err
    assert "disappeared" not in res.err, res.err
    assert res.code == 0 and (tmp_path / "red.onnx").exists(), res.err
    assert "every earlier one passes" not in res.err and "pass together" not in res.err, res.err

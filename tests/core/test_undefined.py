"""Comparisons skip what the ONNX spec leaves undefined: a float-to-int Cast of NaN, +-inf or
out-of-range values (ONNX-Runtime gives INT64_MIN for -inf where OpenVINO gives INT32_MIN). The
elements are counted and the comparison says why; `debug reduce` never ends at such a Cast."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from conftest import run_toolkit
from modelzoo import make_model, vi
from toolkit.core.io.datafiles import IterationResult, RunResults, save_inputs, save_outputs
from toolkit.core.compare.undefined import undefined_elements

INT32_MIN = np.iinfo(np.int32).min


def _model(path):
    """x -> Log (-inf at 0) -> Cast to int64 (undefined there) -> Greater(-1) -> Cast to float -> Add;
    x -> Sigmoid (where the runtimes really differ) -> Add -> y."""
    nodes = [
        helper.make_node("Log", ["x"], ["c"], name="log"),
        helper.make_node("Cast", ["c"], ["ci"], to=TensorProto.INT64, name="cast"),
        helper.make_node("Sigmoid", ["x"], ["s"], name="sig"),
        helper.make_node("Greater", ["ci", "minus_one"], ["g"], name="gt"),
        helper.make_node("Cast", ["g"], ["gf"], to=TensorProto.FLOAT, name="gf"),
        helper.make_node("Add", ["s", "gf"], ["y"], name="add"),
    ]
    one = numpy_helper.from_array(np.array(-1, np.int64), "minus_one")
    graph = helper.make_graph(nodes, "ub", [vi("x", [1, 8])], [vi("y", [1, 8])], [one])
    onnx.save(make_model(graph), path)
    return path


def _golden(tmp_path, model):
    """Every tensor as ONNX-Runtime computes it, then as the other runtime gives it: INT32_MIN
    for the undefined Cast elements, and a Sigmoid 0.58 off."""
    x = np.array([[0, 0.5, 1, 2, 0, 3, 4, 5]], np.float32)
    m = onnx.load(model)
    names = [o for n in m.graph.node for o in n.output]
    del m.graph.output[:]
    m.graph.output.extend(helper.make_empty_tensor_value_info(n) for n in names)
    values = dict(zip(names, ort.InferenceSession(m.SerializeToString()).run(names, {"x": x})))
    values["ci"] = np.where(np.isneginf(values["c"]), INT32_MIN, values["ci"]).astype(np.int64)
    values["s"] = values["s"] + np.float32(0.58)
    values["y"] = values["y"] + np.float32(0.58)
    save_inputs(str(tmp_path / "layerwise.json"), [{"x": x, **values}])
    save_outputs(str(tmp_path / "golden.json"), RunResults([("other", [IterationResult(values)])]))


def test_undefined_elements_of_a_float_to_int_cast():
    x = np.array([np.nan, np.inf, -np.inf, 3.7, -3.7, 2.0**63, 1e20, 127.9, 128.0], np.float64)
    assert undefined_elements(x, np.int64).tolist() == [True, True, True, False, False, True, True, False, False]
    assert undefined_elements(x, np.int8).tolist()[-2:] == [False, True]


def test_run_does_not_count_undefined_cast_elements(tmp_path):
    model = _model(str(tmp_path / "model.onnx"))
    _golden(tmp_path, model)
    res = run_toolkit("run", model, "--onnxrt", "--onnx-outputs", "mark", "all", "--load-inputs",
                      str(tmp_path / "layerwise.json"), "--load-outputs", str(tmp_path / "golden.json"), cwd=tmp_path)
    rows = {line.split(" | ")[1]: line for line in res.err.splitlines() if line.lstrip().startswith(("PASSED", "FAILED"))}
    assert rows["ci"].lstrip().startswith("PASSED"), res.err
    assert "2 of 8 element(s) not compared: float-to-int Cast of NaN, inf or out-of-range values" in rows["ci"]
    assert rows["s"].lstrip().startswith("FAILED") and rows["y"].lstrip().startswith("FAILED")


def test_reduce_never_ends_at_an_undefined_cast(tmp_path):
    model = _model(str(tmp_path / "model.onnx"))
    _golden(tmp_path, model)
    for mode in ("bisect", "linear"):  # (bisect checks log+cast alone: ci is then an output)
        out = tmp_path / f"out_{mode}.onnx"
        res = run_toolkit("debug", "reduce", model, "-o", str(out), "--mode", mode, "--check", "toolkit", "run",
                          "polygraphy_debug.onnx", "--onnxrt", "--load-inputs", "layerwise.json", "--load-outputs",
                          "golden.json", cwd=tmp_path)
        assert res.code == 0, res.err
        assert [n.name for n in onnx.load(str(out)).graph.node] == ["sig"], (mode, res.err)

"""`debug reduce` options and behaviours that Polygraphy's command lines rely on.

--no-reduce-inputs / --no-reduce-outputs graph I/O, Constant nodes lowered, --no-shape-inference,
the default replay file, Polygraphy's replay files, layerwise --load-inputs.
"""

from __future__ import annotations

import json
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import modelzoo
from reduce_helpers import CHECKER


def branchy():
    """X0 -> Identity n1 -> a;  Y0 -> Identity n3 -> b;  Add n5 (a, b) -> c;
    Identity n7 (c) -> out7;  Identity n9 (c) -> out9 (two graph outputs)."""
    f = TensorProto.FLOAT
    nodes = [
        helper.make_node("Identity", ["X0"], ["a"], name="n1"),
        helper.make_node("Identity", ["Y0"], ["b"], name="n3"),
        helper.make_node("Add", ["a", "b"], ["c"], name="n5"),
        helper.make_node("Identity", ["c"], ["out7"], name="n7"),
        helper.make_node("Identity", ["c"], ["out9"], name="n9"),
    ]
    graph = helper.make_graph(
        nodes, "branchy", [helper.make_tensor_value_info(n, f, [1]) for n in ("X0", "Y0")],
        [helper.make_tensor_value_info(n, f, [1]) for n in ("out7", "out9")],
    )
    return modelzoo.make_model(graph)


@pytest.fixture
def ws(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    modelzoo.save(branchy(), tmp_path / "model.onnx")
    return tmp_path


@pytest.fixture
def toolkit(cli_in):
    """``toolkit(*args, cwd=folder)``: the command in this process, run in ``folder``."""
    return cli_in


def _reduce(toolkit, ws, *opts, fail=("n7",)):
    return toolkit("debug", "reduce", "model.onnx", "-o", "out.onnx", *opts,
                   "--check", sys.executable, CHECKER, "polygraphy_debug.onnx", *fail, cwd=ws)


def _io(path):
    m = onnx.load(str(path))
    return [n.name for n in m.graph.node], [i.name for i in m.graph.input], [o.name for o in m.graph.output], m


def test_no_reduce_inputs_keeps_model_inputs_and_adds_no_outputs(toolkit, ws):
    res = _reduce(toolkit, ws, "--no-reduce-inputs", "--mode=linear", fail=("n7",))
    assert res.code == 0, res.err
    nodes, ins, outs, _ = _io(ws / "out.onnx")
    assert nodes == ["n1", "n3", "n5", "n7"]
    assert ins == ["X0", "Y0"]
    assert outs == ["out7"]  # not 'c', which only the removed n9 read


def test_no_reduce_outputs_folds_side_branch_inputs(toolkit, ws):
    x = {"X0": np.array([3.0], np.float32), "Y0": np.array([2.0], np.float32)}
    from toolkit.core.io.datafiles import save_inputs

    save_inputs(str(ws / "inputs.json"), [x])
    res = _reduce(toolkit, ws, "--no-reduce-outputs", "--mode=linear", "--load-inputs", "inputs.json", fail=("n3",))
    assert res.code == 0, res.err
    nodes, ins, outs, model = _io(ws / "out.onnx")
    assert nodes == ["n3", "n5", "n7", "n9"]
    assert ins == ["Y0"] and outs == ["out7", "out9"]
    (a,) = model.graph.initializer  # the removed branch's tensor, with its value in the full model
    assert a.name == "a" and numpy_helper.to_array(a).tolist() == [3.0]
    assert "Please ensure" not in res.err


def test_no_reduce_outputs_without_data_warns(toolkit, ws):
    res = _reduce(toolkit, ws, "--no-reduce-outputs", "--mode=linear", fail=("n3",))
    assert res.code == 0, res.err
    assert "generated inputs" in res.err and "--load-inputs" in res.err


def test_constant_nodes_are_never_nodes_of_the_result(toolkit, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    modelzoo.save(modelzoo.with_constant(), tmp_path / "model.onnx")
    res = toolkit("debug", "reduce", "model.onnx", "-o", "out.onnx", "--no-shape-inference", "--mode=linear",
                  "--any-failure", "--check", sys.executable, CHECKER, "polygraphy_debug.onnx", "add", cwd=tmp_path)
    assert res.code == 0, res.err
    assert "lowered to constant tensors" in res.err
    nodes, ins, outs, model = _io(tmp_path / "out.onnx")
    assert nodes == ["add"] and ins == ["x"]
    assert [t.name for t in model.graph.initializer] == ["c"]


def test_no_shape_inference_uses_recorded_types(toolkit, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    model = onnx.shape_inference.infer_shapes(modelzoo.chain(4))  # value_info recorded in the file
    model.graph.value_info[1].type.tensor_type.shape.dim[0].dim_param = "recorded"  # t1, as the file says
    modelzoo.save(model, tmp_path / "model.onnx")
    res = toolkit("debug", "reduce", "model.onnx", "-o", "out.onnx", "--no-shape-inference",
                  "--check", sys.executable, CHECKER, "polygraphy_debug.onnx", "n2_abs", cwd=tmp_path)
    assert res.code == 0, res.err
    nodes, ins, _, out = _io(tmp_path / "out.onnx")
    assert nodes == ["n2_abs"] and ins == ["t1"]
    dims = out.graph.input[0].type.tensor_type.shape.dim
    assert [d.dim_param or d.dim_value for d in dims] == ["recorded", 4]  # taken as recorded, not inferred
    res = toolkit("debug", "reduce", "model.onnx", "-o", "o.onnx", "--no-shape-inference",
                  "--force-fallback-shape-inference", "--check", "false", cwd=tmp_path)
    assert res.code == 2


def test_layerwise_inputs_given_to_reduce(toolkit, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    model = modelzoo.chain(4)
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"  # dynamic
    modelzoo.save(model, tmp_path / "model.onnx")
    x = np.ones((3, 4), np.float32)
    from toolkit.core.io.datafiles import save_inputs

    # a layerwise file: the input plus intermediate tensors (and one the model does not have)
    save_inputs(str(tmp_path / "layerwise.json"), [{"x": x, "t0": x, "t1": x.astype(np.float64), "zzz": x}])
    res = toolkit("debug", "reduce", "model.onnx", "-o", "out.onnx", "--load-inputs", "layerwise.json",
                  "--check", sys.executable, CHECKER, "polygraphy_debug.onnx", "n2_abs", cwd=tmp_path)
    assert res.code == 0, res.err
    nodes, ins, _, out = _io(tmp_path / "out.onnx")
    assert nodes == ["n2_abs"] and ins == ["t1"]
    dims = [d.dim_value for d in out.graph.input[0].type.tensor_type.shape.dim]
    assert dims == [3, 4]  # the batch of the data, through shape inference
    # a file with nothing of the model in it is still refused
    save_inputs(str(tmp_path / "other.json"), [{"zzz": x}])
    res = toolkit("debug", "reduce", "model.onnx", "-o", "out.onnx", "--load-inputs", "other.json",
                  "--check", "false", cwd=tmp_path)
    assert res.code == 3 and "'zzz'" in res.err


def test_replay_written_by_default_and_polygraphy_replay_refused(toolkit, ws):
    res = _reduce(toolkit, ws, fail=("n1",))
    assert res.code == 0, res.err
    doc = json.loads((ws / "polygraphy_debug_replay.json").read_text())
    assert doc["entries"][0]["verdict"] == "fail" and doc["entries"][0]["code"] == 1
    first = (ws / "out.onnx").read_bytes()
    res = _reduce(toolkit, ws, "--load-debug-replay", "polygraphy_debug_replay.json", fail=("n1",))
    assert res.code == 0 and "0 checks run" in res.err, res.err
    assert (ws / "out.onnx").read_bytes() == first
    poly = {"_N0_outputs": {"polygraphy_class": "IterationContext", "success": False, "state": {},
                            "iteration_info": {"iteration": 0}}}
    (ws / "poly.json").write_text(json.dumps(poly))
    res = toolkit("debug", "reduce", "model.onnx", "-o", "o.onnx", "--load-debug-replay", "poly.json",
                  "--check", "false", cwd=ws)
    assert res.code == 3
    errors = [ln for ln in res.err.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "Polygraphy debug replay" in errors[0]

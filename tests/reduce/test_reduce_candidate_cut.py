"""A `debug reduce` candidate is the full model cut, nothing else: a tensor the full model
keeps in fp32 under emulated fp16 storage stays fp32 when it becomes a subgraph output, and
external weights are read as the full model reads them (onnx >= 1.23 refuses data files
reached through hard links)."""

from __future__ import annotations

import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from modelzoo import make_model, save_with_external_data, vi
from conftest import run_toolkit


def _int8_accumulator(path):
    """x -> DynamicQuantizeLinear -> MatMulInteger -> Cast (int32 sums up to 4e5: fp16 cannot hold
    them, the model keeps them fp32) -> Mul(1e-3) -> Mul(1000) "boom" (back past 65504: the fp16
    overflow) -> y."""
    nodes = [
        helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"], name="dql"),
        helper.make_node("MatMulInteger", ["xq", "w", "xz"], ["acc"], name="mmi"),
        helper.make_node("Cast", ["acc"], ["accf"], to=TensorProto.FLOAT, name="cast"),
        helper.make_node("Mul", ["accf", "scale"], ["scaled"], name="scale"),
        helper.make_node("Mul", ["scaled", "big"], ["y"], name="boom"),
    ]
    inits = [
        numpy_helper.from_array(np.full((16, 8), 100, np.int8), "w"),
        numpy_helper.from_array(np.array(1e-3, np.float32), "scale"),
        numpy_helper.from_array(np.array(1000.0, np.float32), "big"),
    ]
    graph = helper.make_graph(nodes, "acc", [vi("x", [4, 16])], [vi("y", [4, 8])], inits)
    onnx.save(make_model(graph), path)
    return path


def test_a_tensor_the_model_keeps_fp32_stays_fp32_when_cut(tmp_path):
    model = _int8_accumulator(str(tmp_path / "model.onnx"))
    out = tmp_path / "out.onnx"
    for extra in ([], ["--mode", "bisect"], ["--min-good", str(tmp_path / "good.onnx")]):
        res = run_toolkit("debug", "reduce", model, "-o", str(out), "--compare", "onnxrt", "onnxrt:fp16",
                          "--val-range", "[0.5,1]", "--atol", "1", "--rtol", "0.01", *extra,
                          "--iter-artifact", str(tmp_path / "it.onnx"), cwd=tmp_path)
        assert res.code == 0, res.err
        assert [n.name for n in onnx.load(str(out)).graph.node] == ["boom"], (extra, res.err)


def test_external_weights_reach_the_artifact_without_a_hard_link(tmp_path):
    """The model's data file in another folder than the iteration artifact: every check (onnx
    1.23's loader included) reads the weights, and the model's own data file keeps one link."""
    src = tmp_path / "src"
    src.mkdir()
    w = numpy_helper.from_array(np.ones((640, 640), np.float32), "w")  # (over 1 MiB: read by reference)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"),
        helper.make_node("Relu", ["m"], ["r"], name="relu"),
        helper.make_node("Sigmoid", ["r"], ["y"], name="sig"),
    ]
    graph = helper.make_graph(nodes, "ext", [vi("x", [1, 640])], [vi("y", [1, 640])], [w])
    model = save_with_external_data(make_model(graph), str(src / "model.onnx"), "model.data")
    work = tmp_path / "work"
    work.mkdir()
    checker = tmp_path / "check.py"
    # fails when 'relu' is there; an unreadable model (its weights refused) is another failure
    checker.write_text(
        "import sys, os, onnx\n"
        "m = onnx.load(sys.argv[1])\n"
        "links = [os.stat(os.path.join(os.path.dirname(os.path.abspath(sys.argv[1])), e.value)).st_nlink\n"
        "         for t in m.graph.initializer for e in t.external_data if e.key == 'location']\n"
        "assert all(n == 1 for n in links), links\n"
        "sys.exit(1 if any(n.name == 'relu' for n in m.graph.node) else 0)\n"
    )
    res = run_toolkit("debug", "reduce", model, "-o", str(work / "out.onnx"), "--any-failure",
                      "--iter-artifact", str(work / "it.onnx"), "--check", sys.executable, str(checker),
                      str(work / "it.onnx"), cwd=work)
    assert res.code == 0, res.err
    assert [n.name for n in onnx.load(str(work / "out.onnx")).graph.node] == ["relu"], res.err
    assert os.stat(src / "model.data").st_nlink == 1

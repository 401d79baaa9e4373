"""A written model ONNX-Runtime cannot run with its default options, where the original runs on
the same inputs (no fp16 kernel: ScatterElements with reduction 'add' on the CPU provider), is a
finding: exit 1, never "Checked"; --repair keeps that op type in fp32 and the model runs."""

from __future__ import annotations

import os
import sys

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from modelzoo import make_model, save
from toolkit.convert import runtime_check


def _scatter_add(path):
    nodes = [
        helper.make_node("Mul", ["x", "two"], ["x2"], name="mul"),
        helper.make_node("ScatterElements", ["x2", "idx", "upd"], ["s"], name="scatter", axis=0, reduction="add"),
        helper.make_node("Relu", ["s"], ["y"], name="relu"),
    ]
    inits = [
        helper.make_tensor("two", TensorProto.FLOAT, [], [2.0]),
        helper.make_tensor("idx", TensorProto.INT64, [2, 3], [0, 1, 2, 1, 0, 3]),
    ]
    graph = helper.make_graph(
        nodes, "scatter_add",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 3]),
         helper.make_tensor_value_info("upd", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 3])], inits,
    )
    return save(make_model(graph, opset=16), path)


def test_a_model_the_runtime_cannot_run_is_a_failure_not_checked(cli, tmp_path):
    model = _scatter_add(tmp_path / "m.onnx")
    res = cli("convert", model, "--fp-to-fp16", "-o", tmp_path / "h.onnx")
    assert res.code == 1, res.err
    assert "Checked" not in res.err
    assert "ScatterElements" in res.err and "where the original model runs on the same inputs" in res.err
    assert "--repair" in res.err


def test_repair_keeps_the_op_in_fp32_and_the_model_runs(cli, tmp_path):
    model = _scatter_add(tmp_path / "m.onnx")
    res = cli("convert", model, "--fp-to-fp16", "-o", tmp_path / "h.onnx", "--repair")
    assert res.code == 0, res.err
    assert "--repair kept the ScatterElements nodes in fp32" in res.err
    sess = ort.InferenceSession(str(tmp_path / "h.onnx"))  # default options
    feed = {"x": np.ones((4, 3), np.float32), "upd": np.ones((2, 3), np.float32)}
    (y,) = sess.run(None, feed)
    assert y.shape == (4, 3) and np.isfinite(y).all()


def test_an_original_the_runtime_cannot_load_is_said_and_fails_the_command(cli, tmp_path):
    """The original fails creating its session (an IR version this runtime does not know): the
    written model fails the same way; the error says the original does too, with no advice about
    input shapes or --repair, which cannot help."""
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    save(make_model(graph, ir_version=99), tmp_path / "m.onnx")
    res = cli("convert", tmp_path / "m.onnx", "--fp-to-fp16", "-o", tmp_path / "h.onnx")
    assert res.code == 1, res.err
    error = [ln for ln in res.err.splitlines() if ln.startswith("error:")]
    assert len(error) == 1 and "and so does the original model" in error[0] and "--repair" not in error[0], res.err
    assert "could not load the original" in res.err and "--input-shapes" not in res.err, res.err
    assert (tmp_path / "h.onnx").exists()


def test_a_runtime_check_child_that_calls_exit_is_a_crash_not_a_success(cli, tmp_path, monkeypatch):
    """Something in the runtime check's child calling ``sys.exit(0)`` (a custom op library) ended
    the whole command with status 0 and nothing written (the child's SystemExit raised here)."""
    if not hasattr(os, "fork"):
        pytest.skip("the runtime check runs in a forked child")
    monkeypatch.setattr(runtime_check, "_session", lambda *_a, **_k: sys.exit(0))  # (inherited by the child)
    model = _scatter_add(tmp_path / "m.onnx")
    res = cli("convert", model, "--fp-to-fp16", "-o", tmp_path / "h.onnx", "--keep-fp32", "ScatterElements")
    assert res.code == 1, res.err
    assert "crashes (exit 0) creating a session for the written model" in res.err
    assert (tmp_path / "h.onnx").exists()

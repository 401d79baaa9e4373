"""Odd inputs get one sentence and the documented exit code: a FIFO or a device as a data file
(never a read that blocks or never ends), a folder without iteration files, external data whose
``length`` does not fit the tensor; a reduce whose full model passes writes nothing (no replay
that later runs would warn about)."""

from __future__ import annotations

import os
import sys

import onnx
import pytest

from conftest import run_toolkit
from test_faults import matmul_model


def _one_error(res, *words):
    lines = [ln for ln in res.err.splitlines() if ln.strip()]
    assert res.code == 3, res.err
    assert "Traceback" not in res.err and len(lines) == 1 and lines[0].startswith("error: "), res.err
    for w in words:
        assert w in lines[0], res.err


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
@pytest.mark.parametrize("args", [
    ["run", "m.onnx", "--onnxrt", "--load-inputs", "DATA"],
    ["run", "m.onnx", "--onnxrt", "--load-outputs", "DATA"],
    ["inspect", "data", "DATA"],
    ["data", "to-input", "DATA", "-o", "x.json"],
])
@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_a_fifo_or_a_device_as_a_data_file_is_one_sentence(tmp_path, args, kind):
    onnx.save(matmul_model(depth=2, size=8), str(tmp_path / "m.onnx"))
    if kind == "fifo":
        os.mkfifo(tmp_path / "pipe")
        data, what = "pipe", "is a FIFO"
    else:
        data, what = "/dev/zero", "is a character device"
    res = run_toolkit(*[data if a == "DATA" else a for a in args], cwd=tmp_path, timeout=60)
    _one_error(res, data, what)
    assert not (tmp_path / "x.json").exists()


def test_a_folder_without_iteration_files_as_a_data_file_is_one_sentence(tmp_path):
    (tmp_path / "d").mkdir()
    _one_error(run_toolkit("inspect", "data", "d", cwd=tmp_path), "d", "is a directory")


def test_convert_on_external_data_with_a_short_length_is_one_sentence(tmp_path):
    model = matmul_model(depth=2, size=32)
    onnx.save(model, str(tmp_path / "ext.onnx"), save_as_external_data=True, location="ext.data", size_threshold=0)
    model = onnx.load(str(tmp_path / "ext.onnx"), load_external_data=False)
    for t in model.graph.initializer:
        for entry in t.external_data:
            if entry.key == "length":
                entry.value = "16"
    onnx.save(model, str(tmp_path / "short.onnx"))
    res = run_toolkit("convert", "short.onnx", "--fp-to-fp16", "-o", "c.onnx", cwd=tmp_path)
    _one_error(res, "'w'", "16 bytes", "4096")
    assert not (tmp_path / "c.onnx").exists()


def test_a_reduce_whose_full_model_passes_writes_nothing(tmp_path):
    onnx.save(matmul_model(depth=3, size=8), str(tmp_path / "m.onnx"))
    args = ["debug", "reduce", "m.onnx", "-o", "red.onnx", "--check", sys.executable, "-c", "pass"]
    res = run_toolkit(*args, cwd=tmp_path)
    assert res.code == 0 and "the full model passes the check" in res.err, res.err
    assert sorted(os.listdir(tmp_path)) == ["m.onnx"]
    again = run_toolkit(*args, cwd=tmp_path)
    assert again.code == 0 and "warning: polygraphy_debug_replay.json" not in again.err, again.err


@pytest.mark.parametrize("args", [["debug", "precision", "m.onnx"], ["debug", "precision", "m.onnx", "--json"]])
def test_an_input_of_an_element_type_onnx_does_not_define_is_a_bad_model(cli, tmp_path, args, monkeypatch):
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    x.type.tensor_type.elem_type = 77  # (no ONNX version defines 77)
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g", [x],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(tmp_path / "m.onnx"))
    monkeypatch.chdir(tmp_path)
    res = cli(*args)
    _one_error(res, "input 'x' has the element type 77, which ONNX does not define")


@pytest.mark.parametrize("args", [["convert", "m.onnx", "--fp-to-fp16", "-o", "h.onnx"], ["debug", "precision", "m.onnx"]])
def test_a_weight_whose_bytes_do_not_fit_its_shape_is_a_damaged_model(cli, tmp_path, args, monkeypatch):
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.ones((2, 2), np.float32), "w")
    w.raw_data = b"\0" * 5  # (16 bytes needed)
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(tmp_path / "m.onnx"))
    monkeypatch.chdir(tmp_path)
    _one_error(cli(*args), "the model's data is damaged: tensor 'w' holds 5 byte(s) where its dims [2, 2] need 16")
    assert not (tmp_path / "h.onnx").exists()


def test_an_empty_output_name_is_a_usage_error_before_any_work(cli, tmp_path, monkeypatch):
    onnx.save(matmul_model(depth=2, size=8), str(tmp_path / "m.onnx"))
    monkeypatch.chdir(tmp_path)
    for args in (["convert", "m.onnx", "--fp-to-fp16", "-o", ""], ["surgeon", "sanitize", "m.onnx", "-o", ""]):
        res = cli(*args)
        assert res.code == 2 and "error: an output file name is empty" in res.err, res.err
        assert "Converted" not in res.err
    for flag in ("--save-outputs", "--save-inputs"):  # (it wrote nothing, without a word)
        res = cli("run", "m.onnx", "--onnxrt", flag, "")
        assert res.code == 2 and f"error: {flag}: the file name is empty" in res.err, res.err

"""An fp16 overflow before a float-to-int Cast: ``debug precision`` finds the node to keep, and
``convert --repair`` writes a model that passes (never a still-failing one with exit 0)."""

from __future__ import annotations

import json

import numpy as np
import onnxruntime as ort

import fp16_models as fm
import modelzoo as mz
from toolkit.core.io.datafiles import save_inputs

X = np.linspace(60, 100, 8, dtype=np.float32).reshape(1, 8)  # x * 1000 passes fp16's 65504


def _yi(path):
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return sess.run(["yi"], {"x": X})[0]


def test_precision_keeps_the_producer_of_the_cast_input(cli, tmp_path):
    path = mz.save(fm.overflow_before_int_cast(), tmp_path / "m.onnx")
    out = tmp_path / "mixed.onnx"
    res = cli("debug", "precision", path, "--val-range", "[60,100]", "-o", out, "--json")
    assert res.code == 0, res.err
    doc = json.loads(res.out)
    assert doc["status"] == "found" and doc["keep_fp32"] == ["up"], res.err
    assert "to_int" in doc["also_fp32"]  # the Cast reads its input as it was computed
    # the written model passes: its integers are the float32 model's
    np.testing.assert_array_equal(_yi(out), (X * 1000).astype(np.int32))
    again = cli("run", out, "--onnxrt", "--fp16", "--val-range", "[60,100]", "--onnx-outputs", "yi")
    assert again.code == 0, again.err


def test_convert_repair_writes_a_passing_model(cli, tmp_path):
    path = mz.save(fm.overflow_before_int_cast(), tmp_path / "m.onnx")
    out = tmp_path / "c.onnx"
    res = cli("convert", path, "--fp-to-fp16", "-o", out, "--val-range", "[60,100]", "--repair", "--json")
    assert res.code == 0, res.err
    doc = json.loads(res.out)
    assert doc["validation"]["passed"] and "up" in doc["kept_fp32"], res.err
    assert "--repair" in doc["kept_fp32"]["up"]
    np.testing.assert_array_equal(_yi(out), (X * 1000).astype(np.int32))


def test_convert_repair_never_exits_0_on_a_model_that_still_fails(cli, tmp_path, monkeypatch):
    """When the search finds nothing that passes, the model is written and the exit code is 1."""
    from toolkit.cli import convert_check

    monkeypatch.setattr(convert_check, "repair_accuracy", lambda *a, **k: None)
    path = mz.save(fm.overflow_before_int_cast(), tmp_path / "m.onnx")
    inputs = str(tmp_path / "in.json")
    save_inputs(inputs, [{"x": X}])
    res = cli("convert", path, "--fp-to-fp16", "-o", tmp_path / "c.onnx", "--load-inputs", inputs, "--repair")
    assert res.code == 1, res.err
    assert "--repair found no set of nodes" in res.err and (tmp_path / "c.onnx").exists()


def test_a_refused_emulated_copy_is_toolkits_bug_not_bad_input(cli, tmp_path, monkeypatch):
    """debug precision's first check runs toolkit's emulated copy of a model the reference ran: when
    that copy does not load, the bug is toolkit's (exit 70), never the user's file (exit 3)."""
    from toolkit.convert import fp16

    real = fp16.emulate

    def broken(*args, **kwargs):
        em = real(*args, **kwargs)
        em.model.graph.node[0].input[0] = "nowhere"
        return em

    monkeypatch.setattr(fp16, "emulate", broken)
    path = mz.save(fm.overflow_before_int_cast(), tmp_path / "m.onnx")
    res = cli("debug", "precision", path, "--val-range", "[60,100]")
    assert res.code == 70, res.err
    assert "toolkit's fp16-emulated copy" in res.err and "bug in toolkit" in res.err

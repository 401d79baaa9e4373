"""`debug reduce` works on a snapshot of the model: a rewrite of the model file during the
reduce (an in-place re-export, a check that truncates it) changes nothing it reads, and is
named at the end."""

from __future__ import annotations

import sys

import onnx

import modelzoo as z
from conftest import run_toolkit

from toolkit.reduce import loading

REWRITING_CHECK = '''
import os, sys, onnx
artifact, model = sys.argv[1], sys.argv[2]
if not os.path.exists("rewritten"):
    open("rewritten", "w").close()
    with open(model, "r+b") as fh:  # an in-place rewrite: truncated, then other bytes
        fh.truncate(0)
        fh.write(open("other.onnx", "rb").read())
names = [n.name for n in onnx.load(artifact).graph.node]
sys.exit(1 if "n3_neg" in names else 0)
'''


def test_a_model_rewritten_during_the_reduce_never_costs_the_result(tmp_path):
    z.save(z.chain(6), tmp_path / "model.onnx")
    z.save(z.chain(2, ops=["Relu"]), tmp_path / "other.onnx")
    (tmp_path / "check.py").write_text(REWRITING_CHECK)
    res = run_toolkit("debug", "reduce", "model.onnx", "-o", "red.onnx",
                      "--check", sys.executable, "check.py", "polygraphy_debug.onnx", "model.onnx", cwd=tmp_path)
    assert res.code == 0, res.err
    assert [n.name for n in onnx.load(str(tmp_path / "red.onnx")).graph.node] == ["n3_neg"]
    assert "model.onnx was changed on disk during the reduce" in res.err


def test_snapshot_is_a_private_copy_for_a_big_file(tmp_path, monkeypatch):
    path = tmp_path / "blob"
    path.write_bytes(b"abc" * 1000)
    monkeypatch.setattr(loading, "SNAPSHOT_IN_MEMORY", 100)
    data = loading.snapshot(str(path))
    assert not loading.model_changed(str(path))
    path.write_bytes(b"")  # truncated in place: the copy is untouched
    assert bytes(data[:6]) == b"abcabc" and len(data) == 3000
    assert loading.model_changed(str(path))

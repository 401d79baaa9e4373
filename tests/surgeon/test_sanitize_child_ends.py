"""`surgeon sanitize --fold-constants` always ends, and says how:

- a fold child that calls ``sys.exit()`` (a custom op's or a library's own exit) is a fold that
  ended without a result: exit 3, one line, nothing written (it was taken as the command's own
  exit: status 0, "success", no model written); so is a fold in this process (a model over 1 GiB);
- the validation's runs have a time bound (``toolkit.surgeon.validate.RUN_SECONDS``): a model
  whose Loop never ends (condition always true, no trip count) gets its folded model written,
  checked to load, its outputs said not compared (only a signal ended the command before); a
  folded model whose run does not end, where the input model's does, fails validation."""

import os
import sys
import time

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import modelzoo as mz
from toolkit.surgeon import fold_child
from toolkit.surgeon import sanitize as sanitize_module
from toolkit.surgeon import validate

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="the fold runs in a forked child")


def _looping(trips=None):
    """y = Loop(x * (a + b)) adding 1 per step: with ``trips`` steps, else forever (its condition
    stays true)."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["c_in"], ["c_out"]), helper.make_node("Add", ["v_in", "one"], ["v_out"])],
        "body", [mz.vi("i", [], TensorProto.INT64), mz.vi("c_in", [], TensorProto.BOOL), mz.vi("v_in", [1])],
        [mz.vi("c_out", [], TensorProto.BOOL), mz.vi("v_out", [1])],
        [numpy_helper.from_array(np.ones(1, np.float32), "one")])
    inits = [numpy_helper.from_array(np.array(True), "t"), numpy_helper.from_array(np.array([1.0], np.float32), "a"),
             numpy_helper.from_array(np.array([2.0], np.float32), "b")]
    if trips is not None:
        inits.append(numpy_helper.from_array(np.array(trips, np.int64), "n"))
    nodes = [helper.make_node("Add", ["a", "b"], ["ab"], name="fold_me"),
             helper.make_node("Mul", ["x", "ab"], ["xa"], name="mul"),
             helper.make_node("Loop", ["" if trips is None else "n", "t", "xa"], ["y"], name="loop", body=body)]
    graph = helper.make_graph(nodes, "g", [mz.vi("x", [1])], [mz.vi("y", [1])], inits)
    return mz.make_model(graph, opset=17)


@pytest.mark.parametrize("code, shown", [(0, 0), (None, 0), ("a message", 1)])
@pytest.mark.parametrize("in_child", [True, False], ids=["in-child", "in-process"])
def test_a_fold_that_calls_exit_is_a_fold_without_a_result(cli, tmp_path, monkeypatch, code, shown, in_child):
    def exits(*_args, **_kwargs):
        sys.exit(code)

    monkeypatch.setattr(sanitize_module, "fold_passes", exits)  # (inherited by the fold's child)
    if not in_child:  # (a model over IN_PROCESS_BYTES is folded in this process)
        monkeypatch.setattr(fold_child, "IN_PROCESS_BYTES", 0)
    src = mz.save(_looping(trips=3), tmp_path / "m.onnx")
    r = cli("surgeon", "sanitize", src, "--fold-constants", "-o", tmp_path / "o.onnx")
    assert r.code == 3, r.err
    assert ("error: constant folding ended without a result: something it ran (a custom op, a library) called "
            f"exit() (code {shown}); nothing was written") in r.err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]


def test_the_validation_of_a_model_whose_loop_never_ends_ends(cli, tmp_path, monkeypatch):
    monkeypatch.setattr(validate, "RUN_SECONDS", 0.5)
    src = mz.save(_looping(), tmp_path / "m.onnx")
    t0 = time.monotonic()
    r = cli("surgeon", "sanitize", src, "--fold-constants", "-o", tmp_path / "o.onnx")
    assert r.code == 0, r.err
    assert time.monotonic() - t0 < 20
    assert ("the folded model loads; its outputs were not compared: the input model's run on generated inputs "
            "did not end within 0.5 s") in r.err
    written = onnx.load(str(tmp_path / "o.onnx"))
    assert [n.op_type for n in written.graph.node] == ["Mul", "Loop"]  # (a + b folded)
    ort.InferenceSession(written.SerializeToString(), providers=["CPUExecutionProvider"])


def test_a_folded_model_whose_run_never_ends_fails_validation(monkeypatch):
    monkeypatch.setattr(validate, "RUN_SECONDS", 0.5)
    check = validate.Validation(_looping(trips=3), None)
    t0 = time.monotonic()
    err = check.check(_looping())
    assert time.monotonic() - t0 < 10
    assert err is not None and err.startswith("its run did not end within 0.5 s (the input model's took ")
    assert check.check(_looping(trips=3)) is None

"""The verdict is the deployed one: `debug reduce --compare` judges the full model as the user runs
it (nothing marked, its outputs only). Marking every tensor stops ONNX-Runtime's Q/DQ fusions
(DequantizeLinear -> Softmax -> QuantizeLinear becomes QLinearSoftmax only unmarked), so where
marking changes the reference's outputs the log says so and each subgraph is compared with that
subgraph on the reference runner."""

from __future__ import annotations

import numpy as np
import onnx

from deployed_models import qdq_softmax
from toolkit.core.io.datafiles import save_inputs


def _reduce(cli, tmp_path, *extra):
    model = qdq_softmax(str(tmp_path / "m.onnx"))
    save_inputs(str(tmp_path / "in.json"), [{"x": np.random.default_rng(1).uniform(0, 4, (4, 64)).astype(np.float32)}])
    return cli("debug", "reduce", model, "-o", tmp_path / "red.onnx", "--compare", "onnxrt", "onnxrt:opt=disable",
               "--load-inputs", tmp_path / "in.json", "--atol", "1e-3", "--rtol", "1e-3",
               "--iter-artifact", tmp_path / "art.onnx", "--save-debug-replay", tmp_path / "replay.json", *extra)


def test_the_full_model_is_judged_as_deployed_and_the_search_finds_the_fusion(cli, tmp_path):
    res = _reduce(cli, tmp_path)
    assert "the full model passes" not in res.err, res.err
    assert "Marking every tensor as an output changes the reference's outputs ('y'" in res.err, res.err
    assert res.code == 0 and (tmp_path / "red.onnx").exists(), res.err
    ops = [n.op_type for n in onnx.load(str(tmp_path / "red.onnx")).graph.node]
    assert "Softmax" in ops and "Relu" not in ops and "Mul" not in ops, ops


def test_compare_tensors_all_judges_the_outputs_as_deployed_first(cli, tmp_path):
    res = _reduce(cli, tmp_path, "--compare-tensors", "all")
    assert res.code == 0 and (tmp_path / "red.onnx").exists(), res.err
    assert "Softmax" in [n.op_type for n in onnx.load(str(tmp_path / "red.onnx")).graph.node]


def test_a_rounding_explanation_on_an_fp16_compare_says_fp16(cli, tmp_path):
    """Relu -> Abs -> Exp ... on onnxrt:fp16 at tolerances below fp16 rounding: the result (Exp,
    which amplifies most) comes with a note that the nodes before it fail too; it names fp16."""
    from modelzoo import chain, save

    model = save(chain(6, shape=(1, 64), ops=["Relu", "Abs", "Exp", "Relu", "Abs", "Relu"]), tmp_path / "c.onnx")
    res = cli("debug", "reduce", model, "-o", tmp_path / "r.onnx", "--compare", "onnxrt", "onnxrt:fp16", "--atol",
              "1e-7", "--rtol", "1e-7", "--val-range", "[5,8]", "--iter-artifact", tmp_path / "a.onnx",
              "--save-debug-replay", tmp_path / "r.json")
    notes = [ln for ln in res.err.splitlines() if ln.startswith("note:")]
    assert res.code == 0 and notes, res.err
    assert "rounding" in notes[0] and "fp16 storage rounding" in notes[0], notes

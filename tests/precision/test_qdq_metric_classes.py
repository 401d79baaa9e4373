"""A ranking --metric (top1, topk:K, argmax-agreement) that would compare nothing is a usage error
naming the output: one class only, or K at least the number of classes (every top-K agrees)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper, numpy_helper

import modelzoo as mz
import qdq_models as qm
from toolkit.core.io.datafiles import save_inputs


def _single_class():
    """score[4, 1] = q(x * 2): one class per sample."""
    nodes = [helper.make_node("Mul", ["x", "two"], ["a"], name="mul")]
    pair_nodes, inits = qm._pair("a", 1.0)
    nodes += pair_nodes + [helper.make_node("Identity", ["a_dq"], ["score"], name="out")]
    inits.append(numpy_helper.from_array(np.array(2.0, np.float32), "two"))
    graph = helper.make_graph(nodes, "single", [mz.vi("x", [4, 1])], [mz.vi("score", [4, 1])], inits)
    return mz.make_model(graph, opset=17)


@pytest.mark.parametrize("metric", ["top1", "argmax-agreement", "topk:1"])
def test_a_ranking_metric_on_a_single_class_is_a_usage_error(cli, tmp_path, metric):
    model = mz.save(_single_class(), tmp_path / "single.onnx")
    feeds = tmp_path / "in.json"
    save_inputs(str(feeds), [{"x": np.linspace(-1, 1, 4, dtype=np.float32).reshape(4, 1)}])
    r = cli("debug", "precision", model, "--load-inputs", feeds, "--metric", metric)
    assert r.code == 2, r.err
    assert "output score" in r.err and "compares nothing" in r.err and "Check 1" not in r.err


def test_topk_with_k_at_least_the_classes_is_a_usage_error(cli, tmp_path):
    model = mz.save(qm.two_or_one(), tmp_path / "two.onnx")  # y[1, 4]: four classes
    feeds = tmp_path / "in.json"
    save_inputs(str(feeds), [{"x": np.array([[0.45, 0.1, -0.3, 0.2]], np.float32)}])
    r = cli("debug", "precision", model, "--load-inputs", feeds, "--metric", "topk:4")
    assert r.code == 2, r.err
    assert "output y has 4 classes" in r.err and "Check 1" not in r.err
    ok = cli("debug", "precision", model, "--load-inputs", feeds, "--metric", "topk:3")
    assert ok.code != 2, ok.err

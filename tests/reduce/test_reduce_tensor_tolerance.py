"""`debug reduce --compare` with a per-tensor tolerance on an intermediate tensor (not a graph
output): the name is checked once against the full model's tensors, and each check applies it
where its subgraph has that tensor and ignores it elsewhere."""

from __future__ import annotations

import json

import numpy as np
import pytest
from onnx import helper, numpy_helper

from modelzoo import make_model, save, vi

WIDTH = 8


def chain(faulty: bool):
    """x -> add1 -> c1 -> mul2 -> c2 -> sub3 -> c3 -> relu4 -> c4 -> add5 (+ c1) -> c5 -> mul6 -> y.

    c3 is below zero for any input in [-1, 1], so relu4 makes c4 zero and the rest of the chain
    never sees c3's error. The faulty model differs from the clean one at two nodes: sub3 (one
    element of c3 off by 0.5, about 5 %: a tensor known to differ, within ``c3:1``) and mul6 (y
    off by 1e-4 relative: the fault that shows in the output). sub3's error is the larger one and
    comes first: without a tolerance for c3 the search ends on sub3."""
    k3 = np.full(WIDTH, 10.0, np.float32)
    k6 = np.float32(2.0)
    if faulty:
        k3[0] = np.float32(10.5)
        k6 = np.float32(2.0002)
    inits = [
        numpy_helper.from_array(np.float32(0.5), "k1"), numpy_helper.from_array(np.float32(1.5), "k2"),
        numpy_helper.from_array(k3, "k3"), numpy_helper.from_array(k6, "k6"),
    ]
    nodes = [
        helper.make_node("Add", ["x", "k1"], ["c1"], name="add1"),
        helper.make_node("Mul", ["c1", "k2"], ["c2"], name="mul2"),
        helper.make_node("Sub", ["c2", "k3"], ["c3"], name="sub3"),
        helper.make_node("Relu", ["c3"], ["c4"], name="relu4"),
        helper.make_node("Add", ["c4", "c1"], ["c5"], name="add5"),
        helper.make_node("Mul", ["c5", "k6"], ["y"], name="mul6"),
    ]
    graph = helper.make_graph(nodes, "chain", [vi("x", [1, WIDTH])], [vi("y", [1, WIDTH])], inits)
    return make_model(graph)


@pytest.fixture
def pair(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # (the replay file and the iteration artifact go there)
    return save(chain(True), tmp_path / "faulty.onnx"), save(chain(False), tmp_path / "clean.onnx")


def reduce(cli, tmp_path, pair, *extra):
    faulty, clean = pair
    return cli("debug", "reduce", faulty, "-o", tmp_path / "r.onnx", "--compare", "onnxrt", "onnxrt",
               "--reference-model", clean, "--val-range", "[-1,1]", "--json", *extra)


TOLERANCES = {
    "atol": ["--atol", "c3:1"],
    "rtol": ["--rtol", "c3:0.1"],
    "stat": ["--check-error-stat", "c3:median"],  # (one element of eight differs: the median error is 0)
    "atol-all-tensors": ["--atol", "c3:1", "--compare-tensors", "all"],
}


@pytest.mark.parametrize("option", TOLERANCES.values(), ids=TOLERANCES.keys())
def test_a_tolerance_on_an_intermediate_tensor_finds_the_fault_beyond_it(cli, tmp_path, pair, option):
    res = reduce(cli, tmp_path, pair, *option)
    assert res.code == 0, res.err
    doc = json.loads(res.out)
    assert doc["status"] == "reduced", res.err
    assert doc["result_nodes"] == ["mul6 [Op: Mul]"], res.err
    assert "which no output has" not in res.err and "which no tensor" not in res.err


def test_without_the_tensor_tolerance_the_search_stops_at_the_noisy_tensor(cli, tmp_path, pair):
    res = reduce(cli, tmp_path, pair)
    assert res.code == 0, res.err
    assert json.loads(res.out)["result_nodes"] == ["sub3 [Op: Sub]"], res.err


@pytest.mark.parametrize("flag, value", [("--atol", "c9:1e-2"), ("--rtol", "nosuch:1e-2"),
                                         ("--check-error-stat", "nosuch:median")])
def test_a_name_no_tensor_of_the_full_model_has_is_a_usage_error(cli, tmp_path, pair, flag, value):
    res = reduce(cli, tmp_path, pair, flag, value)
    assert res.code == 2, res.err
    last = res.err.strip().splitlines()[-1]
    assert last.startswith(f"error: {flag} names '{value.split(':')[0]}', which no tensor of the model has"), res.err
    assert "its tensors are:" in last and "c3" in last, res.err


def test_a_model_input_is_no_tensor_a_check_compares(cli, tmp_path, pair):
    res = reduce(cli, tmp_path, pair, "--atol", "x:1e-2")
    assert res.code == 2, res.err
    assert "--atol names 'x', which no tensor of the model has" in res.err
    assert "Reference:" not in res.err  # (before any work)
    assert not (tmp_path / "r.onnx").exists()


def test_run_still_refuses_a_tolerance_for_a_tensor_it_does_not_output(cli, tmp_path, pair):
    res = cli("run", pair[0], "--onnxrt", "--onnxrt", "--atol", "c3:1e-2")
    assert res.code == 2, res.err
    assert "--atol names 'c3', which no output has; the outputs are: y" in res.err  # (run: graph outputs only)


def test_each_subgraph_on_both_runners_takes_the_tensor_tolerance_too(cli, tmp_path, monkeypatch):
    """Where marking every tensor changes the reference (a Q/DQ fusion), each subgraph runs on both
    runners, nothing loaded: a tolerance for the intermediate tensor 'a' is applied where a subgraph
    outputs it, ignored elsewhere."""
    from deployed_models import qdq_softmax
    from toolkit.core.io.datafiles import save_inputs

    monkeypatch.chdir(tmp_path)
    model = qdq_softmax(str(tmp_path / "m.onnx"))
    save_inputs(str(tmp_path / "in.json"), [{"x": np.random.default_rng(1).uniform(0, 4, (4, 64)).astype(np.float32)}])
    res = cli("debug", "reduce", model, "-o", tmp_path / "r.onnx", "--compare", "onnxrt", "onnxrt:opt=disable",
              "--load-inputs", tmp_path / "in.json", "--atol", "1e-3", "a:1e-3", "--rtol", "1e-3", "--json")
    assert res.code == 0, res.err
    assert "each subgraph is compared with that subgraph on the reference runner" in res.err, res.err
    assert "softmax [Op: Softmax]" in json.loads(res.out)["result_nodes"], res.err

"""`debug reduce --compare`: a model on stdin, and what the comparison sees beyond the outputs."""

from __future__ import annotations

import json

import pytest

from accuracy_models import save_pair
from conftest import run_toolkit


@pytest.mark.parametrize("reference", [False, True])
def test_compare_reads_the_model_from_stdin(tmp_path, reference):
    paths = save_pair(tmp_path, perturb=(3,))
    with open(paths["faulty"], "rb") as fh:
        data = fh.read()
    extra = ["--reference-model", paths["clean"]] if reference else []
    test = "onnxrt" if reference else "onnxrt:fp16"
    res = run_toolkit("debug", "reduce", "-", "-o", "r.onnx", "--compare", "onnxrt", test, *extra, "--json",
                      stdin=data, cwd=tmp_path)
    assert res.code == 0, res.err
    doc = json.loads(res.out)
    assert doc["status"] == "reduced" and (tmp_path / "r.onnx").exists()
    if reference:
        assert doc["result_nodes"] == ["conv3 [Op: Conv]"]


def test_compare_on_empty_stdin_is_bad_input(tmp_path):
    res = run_toolkit("debug", "reduce", "-", "-o", "r.onnx", "--compare", "onnxrt:fp16", stdin=b"", cwd=tmp_path)
    assert res.code == 3 and "<stdin>: empty file" in res.err
    assert not (tmp_path / "r.onnx").exists()


def hidden_fault(tmp_path):
    """conv_net with Conv 3 perturbed, then x * 1e4 + 1e4 -> Sigmoid: every output saturates at 1,
    in both models, so the outputs hide the fault."""
    import onnx
    from onnx import helper, numpy_helper
    import numpy as np

    from accuracy_models import conv_net

    paths = {}
    for key, perturb in (("clean", ()), ("faulty", (3,))):
        m = conv_net(8, perturb)
        g = m.graph
        last = g.output[0].name
        g.initializer.extend([numpy_helper.from_array(np.array(1e4, np.float32), "k")])
        g.node.extend([
            helper.make_node("Mul", [last, "k"], ["big"], name="scale"),
            helper.make_node("Add", ["big", "k"], ["shifted"], name="shift"),
            helper.make_node("Sigmoid", ["shifted"], ["prob"], name="sigmoid"),
        ])
        out = helper.make_tensor_value_info("prob", onnx.TensorProto.FLOAT, [1, 4, 8, 8])
        del g.output[:]
        g.output.append(out)
        paths[key] = str(tmp_path / f"{key}.onnx")
        onnx.save(m, paths[key])
    return paths


def test_compare_names_the_first_differing_tensor_when_the_outputs_hide_it(tmp_path):
    paths = hidden_fault(tmp_path)
    base = ["debug", "reduce", paths["faulty"], "-o", "r.onnx", "--compare", "onnxrt", "onnxrt",
            "--reference-model", paths["clean"], "--json"]
    res = run_toolkit(*base, cwd=tmp_path)
    assert res.code == 0, res.err
    doc = json.loads(res.out)
    assert doc["status"] == "passed"
    seen = doc["compare"]["differing_tensors"]
    assert seen["first"] == "c3" and seen["differing"] >= 2, res.err
    assert "the first is 'c3', produced by conv3 [Op: Conv]" in res.err and "--compare-tensors all" in res.err
    res = run_toolkit(*base, "--compare-tensors", "all", cwd=tmp_path)
    assert res.code == 0, res.err
    assert json.loads(res.out)["result_nodes"] == ["conv3 [Op: Conv]"], res.err


def test_compare_tensors_usage(tmp_path):
    paths = hidden_fault(tmp_path)
    res = run_toolkit("debug", "reduce", paths["faulty"], "-o", "r.onnx", "--compare", "onnxrt", "--compare-tensors",
                      "some", cwd=tmp_path)
    assert res.code == 2 and "--compare-tensors takes outputs or all" in res.err
    res = run_toolkit("debug", "reduce", paths["faulty"], "-o", "r.onnx", "--compare-tensors", "all", "--check",
                      "true", cwd=tmp_path)
    assert res.code == 2 and "--compare" in res.err

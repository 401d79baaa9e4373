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

"""Names from a model never act on a terminal nor forge lines: an OSC title sequence, a screen clear
and a newline in tensor and node names are printed as visible escapes, in every line `run` prints
(inference inputs/outputs, comparison, summary, diagnosis) and in the HTML report."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from conftest import run_toolkit

EVIL = "\x1b]0;TITLE\x07\x1b[2J\nNode 99 | forged"


def _evil_model(path):
    x, mid, y = "in" + EVIL, "mid" + EVIL, "out" + EVIL
    nodes = [
        helper.make_node("Mul", [x, "w"], [mid], name="mul" + EVIL),
        helper.make_node("Exp", [mid], [y], name="exp" + EVIL),
    ]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(x, TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info(y, TensorProto.FLOAT, [4])], [numpy_helper.from_array(np.full(4, 30, np.float32), "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))


def test_names_with_escape_sequences_and_newlines_print_as_one_plain_line(tmp_path):
    _evil_model(tmp_path / "evil.onnx")
    res = run_toolkit("run", "evil.onnx", "--onnxrt", "--openvino", "--atol", "0", "--rtol", "0",
                      "--onnx-outputs", "mark", "all", "--save-report", "rep.html", cwd=tmp_path)
    assert res.code == 1, res.err
    text = res.out + res.err
    assert "Inference Input(s)" in text and "mismatched:" in text and "Diagnosis" in text, text
    assert "\x1b" not in text and "\x07" not in text
    assert not [ln for ln in text.splitlines() if ln.startswith("Node 99")], text
    assert "\\x1b]0;TITLE\\x07\\x1b[2J\\nNode 99 | forged" in text
    report = (tmp_path / "rep.html").read_text()
    assert "\x1b" not in report and "\x07" not in report

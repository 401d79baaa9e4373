"""The temp folders a command makes end with it: a model read from stdin, the inlined copy of a
model with If nodes, a --data-loader-script's feeds (the console script leaves with os._exit,
which skips atexit)."""

from __future__ import annotations

import os
import subprocess
import sys

import onnx
from onnx import TensorProto, helper

from conftest import REPO


def _if_model(path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])

    def branch(name, op):
        out = helper.make_tensor_value_info(f"{name}_out", TensorProto.FLOAT, [2])
        return helper.make_graph([helper.make_node(op, ["a"], [f"{name}_out"])], name, [], [out])

    nodes = [
        helper.make_node("Relu", ["x"], ["a"]),
        helper.make_node("ReduceSum", ["a"], ["s"], keepdims=0),
        helper.make_node("Constant", [], ["zero"], value=helper.make_tensor("z", TensorProto.FLOAT, [], [0.0])),
        helper.make_node("Greater", ["s", "zero"], ["c"]),
        helper.make_node("If", ["c"], ["b"], then_branch=branch("then", "Neg"), else_branch=branch("else", "Abs")),
        helper.make_node("Sigmoid", ["b"], ["y"]),
    ]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y]), opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)


def _toolkit(args, cwd, tmpdir, stdin=None):
    env = dict(os.environ, TMPDIR=str(tmpdir), PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "toolkit", *args], cwd=cwd, env=env, input=stdin,
                          capture_output=True, timeout=120)


def test_debug_reduce_leaves_no_temp_folder(tmp_path):
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    _if_model(tmp_path / "m.onnx")
    (tmp_path / "loader.py").write_text(
        "import numpy as np\ndef load_data():\n    yield {'x': np.array([1.0, -2.0], dtype=np.float32)}\n"
    )
    runs = [
        (["debug", "reduce", "m.onnx", "-o", "r1.onnx", "--compare", "onnxrt"], None),  # inlined If copy
        (["debug", "reduce", "-", "-o", "r2.onnx", "--compare", "onnxrt"], (tmp_path / "m.onnx").read_bytes()),
        (["debug", "reduce", "m.onnx", "-o", "r3.onnx", "--compare", "onnxrt", "--data-loader-script", "loader.py"],
         None),
        (["debug", "precision", "-", "-o", "p.onnx"], (tmp_path / "m.onnx").read_bytes()),  # (read twice)
    ]
    for args, stdin in runs:
        proc = _toolkit(args, tmp_path, tmpdir, stdin)
        assert proc.returncode in (0, 1), proc.stderr.decode()
        ours = sorted(n for n in os.listdir(tmpdir) if "toolkit" in n)  # (onnxruntime leaves a .ses file there)
        assert ours == [], (args, proc.stderr.decode()[-2000:])

#!/usr/bin/env python3
"""Inspecting models and data files: text views, JSON for scripts, pipes.

Usage: python run_example.py [--workdir DIR]
"""

import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from _common import check, save_graph, workdir_from_args, shell, toolkit  # noqa: E402


def build(path):
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    shape = [1, 4]
    then_g = helper.make_graph(
        [helper.make_node("Mul", ["r", "two"], ["t_out"], name="then_mul")], "then_body", [],
        [helper.make_tensor_value_info("t_out", TensorProto.FLOAT, ["batch", 4])],
    )
    else_g = helper.make_graph(
        [helper.make_node("Neg", ["r"], ["e_out"], name="else_neg")], "else_body", [],
        [helper.make_tensor_value_info("e_out", TensorProto.FLOAT, ["batch", 4])],
    )
    nodes = [
        helper.make_node("LeakyRelu", ["x"], ["r"], name="leaky", alpha=0.1),
        helper.make_node("If", ["cond"], ["y"], name="choose", then_branch=then_g, else_branch=else_g),
    ]
    save_graph(path, nodes, "inspect_demo", [("x", TensorProto.FLOAT, ["batch", 4]),
         ("cond", TensorProto.BOOL, [])],
                  [("y", TensorProto.FLOAT, ["batch", 4])],
        [numpy_helper.from_array(np.full(shape, 2.0, np.float32), "two")])


def main():
    wd = workdir_from_args("toolkit-example-inspect", __doc__.splitlines()[0])
    build(os.path.join(wd, "model.onnx"))

    toolkit(["inspect", "model", "model.onnx"], wd)
    toolkit(["inspect", "model", "model.onnx", "--mode=basic"], wd)
    toolkit(["inspect", "model", "model.onnx", "--show", "layers", "attrs", "weights"], wd)
    out = toolkit(["inspect", "model", "model.onnx", "--mode=basic", "--json"], wd, capture=True)
    desc = json.loads(out.stdout)
    check(desc["graph"]["inputs"][0]["shape"] == ["batch", 4], "symbolic dims are kept by name in JSON")
    check(desc["graph"]["nodes"][1]["subgraphs"]["then_branch"]["nodes"][0]["op"] == "Mul",
          "the If body is nested under its node")
    toolkit(["run", "model.onnx", "--onnxrt", "--input-shapes", "x:[2,4]", "--iterations", "2",
             "--save-inputs", "inputs.json", "--save-outputs", "outputs.npz"], wd)
    toolkit(["inspect", "data", "inputs.json"], wd)
    toolkit(["inspect", "data", "outputs.npz", "--show-values"], wd)
    shell("toolkit inspect model - --mode=basic < model.onnx | grep 'Op: If'", wd)
    shell("toolkit run model.onnx --onnxrt --input-shapes x:[2,4] --save-outputs - | toolkit inspect data -", wd)
    print("\nDone.")


if __name__ == "__main__":
    main()

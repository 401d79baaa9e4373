#!/usr/bin/env python3
"""Extracting a subgraph by tensor names, with shapes and dtypes found automatically.

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

    nodes = [
        helper.make_node("Identity", ["input"], ["identity_out_0"], name="identity"),
        helper.make_node("LeakyRelu", ["identity_out_0"], ["leaky_relu_out_1"], name="leaky_relu", alpha=0.01),
        helper.make_node("Mul", ["leaky_relu_out_1", "scale"], ["mul_out"], name="mul"),
        helper.make_node("Sigmoid", ["identity_out_0"], ["sig_out"], name="sigmoid"),
        helper.make_node("Add", ["mul_out", "sig_out"], ["output"], name="add"),
    ]
    save_graph(path, nodes, "extract_demo", [("input", TensorProto.FLOAT, [1, 3, 28, 28])],
                  [("output", TensorProto.FLOAT, [1, 3, 28, 28])],
        [numpy_helper.from_array(np.full([1, 3, 28, 28], 3.0, np.float32), "scale")])


def main():
    wd = workdir_from_args("toolkit-example-extract", __doc__.splitlines()[0])
    build(os.path.join(wd, "model.onnx"))

    toolkit(["inspect", "model", "model.onnx", "--mode=basic"], wd)
    # just the LeakyRelu, shapes and dtypes found by shape inference
    toolkit(["surgeon", "extract", "model.onnx", "-o", "subgraph.onnx",
             "--inputs", "identity_out_0:auto:auto", "--outputs", "leaky_relu_out_1:auto"], wd)
    out = toolkit(["inspect", "model", "subgraph.onnx", "--mode=basic", "--json"], wd, capture=True)
    ops = [n["op"] for n in json.loads(out.stdout)["graph"]["nodes"]]
    check(ops == ["LeakyRelu"], f"the subgraph holds just the LeakyRelu (found {ops})")
    # several outputs, explicit input shape and dtype
    toolkit(["surgeon", "extract", "model.onnx", "-o", "two_branches.onnx",
             "--inputs", "identity_out_0:[1,3,28,28]:float32", "--outputs", "mul_out:auto", "sig_out:float32"], wd)
    toolkit(["run", "two_branches.onnx", "--onnxrt"], wd)
    # a cut that leaves a needed tensor without producer is refused, naming the tensor
    bad = toolkit(["surgeon", "extract", "model.onnx", "-o", "bad.onnx",
                   "--inputs", "leaky_relu_out_1:auto:auto", "--outputs", "output:auto"], wd, expect=(3,))
    check(not os.path.exists(os.path.join(wd, "bad.onnx")), "an invalid cut writes nothing (exit 3)")
    # pipes: extract to stdout and run it
    shell("toolkit surgeon extract model.onnx -o - --inputs identity_out_0:auto:auto --outputs sig_out:auto"
          " | toolkit run - --onnxrt", wd)
    print("\nDone.")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Debugging an accuracy error with per-layer golden values.

A six-layer model is "deployed" with one deliberately wrong weight (layer 3's bias). The
final output disagrees with the reference, but which layer is wrong? Marking every tensor
as an output on both models and comparing layer by layer shows the first tensor that
disagrees; `debug reduce` then confirms the culprit as a one-node model.

Usage: python run_example.py [--workdir DIR]
"""

import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from _common import check, save_graph, workdir_from_args, toolkit  # noqa: E402


def build(path, wrong_bias):
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    inits, nodes, prev = [], [], "x"
    for i in range(6):
        w = rng.standard_normal((16, 16)).astype(np.float32) * 0.3
        b = rng.standard_normal((16,)).astype(np.float32) * 0.1
        if i == 3 and wrong_bias:
            b = b + 0.05  # the deployed model's mistake
        inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(b, f"b{i}")]
        nodes += [
            helper.make_node("MatMul", [prev, f"w{i}"], [f"mm{i}"], name=f"layer{i}_matmul"),
            helper.make_node("Add", [f"mm{i}", f"b{i}"], [f"lin{i}"], name=f"layer{i}_bias"),
            helper.make_node("Tanh", [f"lin{i}"], [f"act{i}"], name=f"layer{i}_tanh"),
        ]
        prev = f"act{i}"
    save_graph(path, nodes, "mlp6", [("x", TensorProto.FLOAT, [2, 16])],
               [(prev, TensorProto.FLOAT, [2, 16])], inits)


def main():
    wd = workdir_from_args("toolkit-example-accuracy", __doc__.splitlines()[0])
    build(os.path.join(wd, "reference.onnx"), wrong_bias=False)
    build(os.path.join(wd, "deployed.onnx"), wrong_bias=True)

    # 1. the symptom: the final output is off
    toolkit(["run", "reference.onnx", "--onnxrt", "--seed", "7", "--save-inputs", "inputs.json",
             "--onnx-outputs", "mark", "all", "--save-outputs", "layerwise_golden.json"], wd)
    toolkit(["run", "deployed.onnx", "--onnxrt", "--load-inputs", "inputs.json",
             "--load-outputs", "layerwise_golden.json"], wd, expect=(1,))
    # 2. every layer of the deployed model against the golden values of every layer
    res = toolkit(["run", "deployed.onnx", "--onnxrt", "--load-inputs", "inputs.json",
                   "--onnx-outputs", "mark", "all", "--load-outputs", "layerwise_golden.json"],
                  wd, expect=(1,), capture=True)
    text = res.stdout.decode() + res.stderr.decode()
    check("lin3" in text and "mm3" not in text.split("mismatched:")[-1],
          "layerwise comparison: lin3 (layer 3's bias Add) is the first tensor that disagrees")
    # 3. confirm with debug reduce: golden inputs for every subgraph, compare per subgraph
    toolkit(["data", "to-input", "inputs.json", "layerwise_golden.json", "-o", "layerwise_inputs.json"], wd)
    toolkit(["debug", "reduce", "deployed.onnx", "-o", "culprit.onnx",
             "--check", "toolkit", "run", "polygraphy_debug.onnx", "--onnxrt",
             "--load-inputs", "layerwise_inputs.json", "--load-outputs", "layerwise_golden.json"], wd)
    out = toolkit(["inspect", "model", "culprit.onnx", "--mode=basic", "--json"], wd, capture=True)
    names = [n["name"] for n in json.loads(out.stdout)["graph"]["nodes"]]
    check(names == ["layer3_bias"], f"debug reduce isolates the wrong layer ({names})")
    print("\nDone.")


if __name__ == "__main__":
    main()

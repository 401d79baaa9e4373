#!/usr/bin/env python3
"""Folding constants and freezing input shapes with `surgeon sanitize`.

The model reshapes a dynamic-batch input through a shape computation
(Shape -> Gather -> Unsqueeze -> Concat -> Reshape) and adds a constant computed from two
other constants. Folding removes the constant arithmetic while the batch stays dynamic;
freezing the input shape then lets the whole shape computation fold away.

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

    inits = [
        numpy_helper.from_array(np.array(0, np.int64), "zero"),
        numpy_helper.from_array(np.array([0], np.int64), "axes0"),
        numpy_helper.from_array(np.array([-1], np.int64), "minus1"),
        numpy_helper.from_array(np.full([1, 12], 2.0, np.float32), "c1"),
        numpy_helper.from_array(np.full([1, 12], 3.0, np.float32), "c2"),
    ]
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("Shape", ["r"], ["shp"], name="shape"),
        helper.make_node("Gather", ["shp", "zero"], ["batch"], name="gather", axis=0),
        helper.make_node("Unsqueeze", ["batch", "axes0"], ["batch1"], name="unsqueeze"),
        helper.make_node("Concat", ["batch1", "minus1"], ["newshape"], name="concat", axis=0),
        helper.make_node("Reshape", ["r", "newshape"], ["flat"], name="reshape"),
        helper.make_node("Mul", ["c1", "c2"], ["c12"], name="const_mul"),
        helper.make_node("Add", ["flat", "c12"], ["y"], name="add"),
    ]
    save_graph(path, nodes, "fold_demo", [("x", TensorProto.FLOAT, ["batch", 3, 4])],
                  [("y", TensorProto.FLOAT, ["batch", 12])], inits)


def ops_of(wd, model):
    out = toolkit(["inspect", "model", model, "--mode=basic", "--json"], wd, capture=True)
    desc = json.loads(out.stdout)
    return [n["op"] for n in desc["graph"]["nodes"]], desc["graph"]["inputs"]


def main():
    wd = workdir_from_args("toolkit-example-fold", __doc__.splitlines()[0])
    build(os.path.join(wd, "model.onnx"))

    toolkit(["surgeon", "sanitize", "model.onnx", "-o", "folded.onnx", "--fold-constants"], wd)
    ops, inputs = ops_of(wd, "folded.onnx")
    check("Mul" not in ops, f"the constant Mul is folded away ({ops})")
    check(inputs[0]["shape"][0] == "batch", "the batch dimension stays dynamic")
    toolkit(["run", "model.onnx", "--onnxrt", "--input-shapes", "x:[5,3,4]", "--seed", "3",
             "--save-inputs", "in.json", "--save-outputs", "out.json"], wd)
    toolkit(["run", "folded.onnx", "--onnxrt", "--load-inputs", "in.json", "--load-outputs", "out.json"], wd)

    toolkit(["surgeon", "sanitize", "model.onnx", "-o", "frozen.onnx",
             "--override-input-shapes", "x:[2,3,4]", "--fold-constants"], wd)
    ops, inputs = ops_of(wd, "frozen.onnx")
    check(inputs[0]["shape"] == [2, 3, 4], "the input shape is frozen")
    check("Shape" not in ops and "Gather" not in ops, f"the shape computation folds away ({ops})")
    shell("toolkit surgeon sanitize model.onnx --fold-constants -o - | toolkit inspect model - --mode=basic", wd)
    print("\nDone.")


if __name__ == "__main__":
    main()

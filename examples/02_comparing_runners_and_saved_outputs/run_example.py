#!/usr/bin/env python3
"""Comparing runners and saved outputs.

1. Run a model on ONNX-Runtime and save its inputs and outputs (the "golden" results).
2. Later (another machine, another version), run again with the same inputs and compare
   against the saved outputs: PASSED.
3. Change the model slightly (a new weight) and compare again: FAILED (exit 1), with the
   error of each output and the tolerance that would have passed.
4. Loosen the tolerance for that output only (--atol name:value): PASSED.
5. With TensorRT installed, `--onnxrt --trt` compares the two backends directly.

Usage: python run_example.py [--workdir DIR]
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from _common import check, save_graph, workdir_from_args, toolkit  # noqa: E402


def build(path, scale):
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.full((8, 8), scale, np.float32), "w")
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"], name="matmul"),
        helper.make_node("Relu", ["h"], ["y"], name="relu"),
    ]
    save_graph(path, nodes, "small_mlp", [("x", TensorProto.FLOAT, [4, 8])],
                  [("y", TensorProto.FLOAT, [4, 8])], [w])


def main():
    wd = workdir_from_args("toolkit-example-compare", __doc__.splitlines()[0])
    build(os.path.join(wd, "model.onnx"), 0.1)
    build(os.path.join(wd, "model_v2.onnx"), 0.1001)

    toolkit(["run", "model.onnx", "--onnxrt", "--seed", "1", "--iterations", "2",
             "--save-inputs", "inputs.json", "--save-outputs", "golden.json"], wd)
    toolkit(["run", "model.onnx", "--onnxrt", "--load-inputs", "inputs.json", "--load-outputs", "golden.json"], wd)
    failed = toolkit(["run", "model_v2.onnx", "--onnxrt", "--load-inputs", "inputs.json",
                      "--load-outputs", "golden.json"], wd, expect=(1,))
    check(failed.returncode == 1, "the changed model does not match the golden outputs (exit 1)")
    toolkit(["run", "model_v2.onnx", "--onnxrt", "--load-inputs", "inputs.json", "--load-outputs", "golden.json",
             "--atol", "y:1e-2", "--rtol", "y:1e-2"], wd)
    # the same comparison with an .npz golden file (smaller and faster for big models)
    toolkit(["run", "model.onnx", "--onnxrt", "--load-inputs", "inputs.json", "--save-outputs", "golden.npz"], wd)
    toolkit(["run", "model.onnx", "--onnxrt", "--load-inputs", "inputs.json", "--load-outputs", "golden.npz"], wd)
    try:
        import tensorrt  # noqa: F401

        toolkit(["run", "model.onnx", "--onnxrt", "--trt", "--load-inputs", "inputs.json"], wd)
    except ImportError:
        print("\n(TensorRT is not installed: skipping `toolkit run model.onnx --onnxrt --trt`)")
    print("\nDone.")


if __name__ == "__main__":
    main()

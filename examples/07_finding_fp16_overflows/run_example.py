#!/usr/bin/env python3
"""Finding fp16 overflows on a CPU, and the nodes that must stay fp32.

1. Build a small model whose LayerNorm overflows in fp16: large activations (about +-500)
   are squared (`Pow`, up to ~3e5, past fp16's 65504) before their mean (~4e4, which fits).
2. `convert --fp-to-fp16`, then run the converted model on ONNX-Runtime's CPU provider:
   it matches fp32. The CPU hides the overflow.
3. `run --onnxrt --fp16`: fp16 storage emulated on the CPU, compared tensor by tensor with
   fp32: FAILED, and the first tensor out of tolerance is the Pow's output (inf).
4. `debug precision`: the nodes to keep in fp32 (the Pow and the ReduceMean after it), and
   the mixed model (-o).
5. The mixed model, emulated the same way, passes.

Usage: python run_example.py [--workdir DIR]
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from _common import check, save_graph, toolkit, workdir_from_args  # noqa: E402

TOL = ["--atol", "0.5", "--rtol", "1e-2"]  # above fp16 rounding of ~500-sized values, below an overflow


def build(path):
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    d = 64
    inits = [
        numpy_helper.from_array((rng.standard_normal((d, d)) * 25).astype(np.float32), "W1"),
        numpy_helper.from_array((rng.standard_normal((d, 8)) * 0.1).astype(np.float32), "W2"),
        numpy_helper.from_array(np.array(2, np.float32), "two"),
        numpy_helper.from_array(np.array(1e-5, np.float32), "eps"),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "W1"], ["a"], name="/proj/MatMul"),
        helper.make_node("ReduceMean", ["a"], ["mu"], name="/ln/ReduceMean", axes=[-1]),
        helper.make_node("Sub", ["a", "mu"], ["d"], name="/ln/Sub"),
        helper.make_node("Pow", ["d", "two"], ["sq"], name="/ln/Pow"),
        helper.make_node("ReduceMean", ["sq"], ["var"], name="/ln/ReduceMean_1", axes=[-1]),
        helper.make_node("Add", ["var", "eps"], ["ve"], name="/ln/Add"),
        helper.make_node("Sqrt", ["ve"], ["sd"], name="/ln/Sqrt"),
        helper.make_node("Div", ["d", "sd"], ["n"], name="/ln/Div"),
        helper.make_node("MatMul", ["n", "W2"], ["y"], name="/head/MatMul"),
    ]
    save_graph(path, nodes, "layernorm_overflow", [("x", TensorProto.FLOAT, [2, d])],
               [("y", TensorProto.FLOAT, [2, 8])], inits)


def main():
    wd = workdir_from_args("toolkit-example-fp16", __doc__.splitlines()[0])
    build(os.path.join(wd, "model.onnx"))

    # golden fp32 outputs, and the naive conversion checked on the CPU: it passes (misleading)
    toolkit(["run", "model.onnx", "--onnxrt", "--seed", "1", "--save-inputs", "inputs.json",
             "--save-outputs", "fp32.json"], wd)
    toolkit(["convert", "model.onnx", "--fp-to-fp16", "-o", "model_fp16.onnx"], wd)
    toolkit(["run", "model_fp16.onnx", "--onnxrt", "--load-inputs", "inputs.json", "--load-outputs", "fp32.json",
             *TOL], wd)
    print("==> the converted model matches fp32 on ONNX-Runtime's CPU provider, which hides the overflow")

    # fp16 storage emulated on the CPU: the overflow shows, at the Pow
    run = toolkit(["run", "model.onnx", "--onnxrt", "--fp16", "--load-inputs", "inputs.json",
                   "--onnx-outputs", "mark", "all", *TOL], wd, expect=(1,), capture=True)
    err = run.stderr.decode()
    first = next(line for line in err.splitlines() if line.strip().startswith("FAILED |"))
    check(first.split("|")[1].strip() == "sq" and "inf" in first,
          "with fp16 emulated, the first tensor out of tolerance is the Pow's output, and it is inf")

    # the nodes that must stay fp32, and the mixed model
    found = toolkit(["debug", "precision", "model.onnx", "--load-inputs", "inputs.json", "-o", "mixed.onnx", *TOL],
                    wd, capture=True)
    names = found.stdout.decode().split()
    check(names == ["/ln/Pow", "/ln/ReduceMean_1"], "debug precision keeps exactly the Pow and the ReduceMean in fp32")

    # the mixed model, emulated the same way, passes; converting with the same list gives the same model
    toolkit(["run", "mixed.onnx", "--onnxrt", "--fp16", "--load-inputs", "inputs.json", "--load-outputs", "fp32.json",
             *TOL], wd)
    toolkit(["convert", "model.onnx", "--fp-to-fp16", "--keep-fp32", *names, "-o", "mixed2.onnx"], wd)
    check(open(os.path.join(wd, "mixed.onnx"), "rb").read() == open(os.path.join(wd, "mixed2.onnx"), "rb").read(),
          "convert --keep-fp32 with those names writes the same mixed model")
    print("\nDone.")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Reducing a failing ONNX model, end to end, with toolkit.

Builds the example model  Y = x0 + (a * x1 + b)  (two 1x3x224x224 inputs, initializers
a and b; a is all ones, as in the reference's example), then runs every step of the workflow:

  A. the real-check form: golden values for every tensor, `data to-input`, `debug reduce`
     in bisect mode with `toolkit run ... --load-inputs ... --load-outputs ...` as the
     check, `inspect model`, then linear mode on the bisect result, and `inspect model`;
  B. the simulated-failure form: the same two reductions with
     `--fail-regex "Op: Mul" --check toolkit inspect model polygraphy_debug.onnx --mode=basic`;
  C. toolkit's default strategy: one `debug reduce` invocation, 1-minimal result;
  D. the sanitize-first form of the recipe: `surgeon sanitize --fold-constants
     --override-input-shapes ...` (which keeps Mul, Add, Add: folding never removes a node that
     reads a runtime input, even a multiplication by ones), golden
     values of the folded model, and `debug reduce folded.onnx --load-inputs
     layerwise_inputs.json` (the layerwise file given to the reduce itself, for the shapes
     of every subgraph's inputs) with the same check, bisect then linear.

Each form must end at the single Mul node; the script exits non-zero otherwise.

Where TensorRT is not available, ONNX-Runtime stands in for the failing backend: the golden
values come from a reference model whose Mul constant differs slightly (1.01: what the Mul
"should" compute), so every subgraph that contains the Mul disagrees with the golden
values, exactly as a backend with a wrong Mul kernel would. Pass --trt to use TensorRT
on the real model instead (needs an NVIDIA GPU and `pip install 'toolkit[trt]'`).

Usage: python run_example.py [--workdir DIR] [--trt]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from _common import fresh_workdir, save_graph, toolkit, toolkit_cmd  # noqa: E402


def build_models(workdir):
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    shape = [1, 3, 224, 224]

    def make(path, a_value):
        a = numpy_helper.from_array(np.full(shape, a_value, np.float32), "a")
        b = numpy_helper.from_array(np.full(shape, 0.5, np.float32), "b")
        nodes = [
            helper.make_node("Mul", ["x1", "a"], ["mul_out"], name="onnx_graphsurgeon_node_1"),
            helper.make_node("Add", ["mul_out", "b"], ["add_out"], name="onnx_graphsurgeon_node_3"),
            helper.make_node("Add", ["x0", "add_out"], ["Y"], name="onnx_graphsurgeon_node_5"),
        ]
        io = lambda *names: [(n, TensorProto.FLOAT, shape) for n in names]
        save_graph(os.path.join(workdir, path), nodes, "onnx_graphsurgeon_graph", io("x0", "x1"), io("Y"), [a, b])

    make("model.onnx", 1.0)  # the reference's example multiplies by ones
    make("reference.onnx", 1.01)


def node_ops(workdir, model):
    out = subprocess.run(
        toolkit_cmd() + ["inspect", "model", model, "--mode=basic", "--json"], cwd=workdir, capture_output=True, text=True
    )
    if out.returncode != 0:
        sys.exit(f"example failed: cannot inspect {model}: {out.stderr.strip()}")
    return [n["op"] for n in json.loads(out.stdout)["graph"]["nodes"]]


def bisect_then_linear(workdir, prefix, check, label, model="model.onnx", reduce_opts=()):
    """Polygraphy's recipe: bisect the model, inspect, linear on the result, inspect."""
    first, final = f"{prefix}initial_reduced.onnx", f"{prefix}final_reduced.onnx"
    toolkit(["debug", "reduce", model, "-o", first, "--mode=bisect", *reduce_opts] + check, workdir)
    toolkit(["inspect", "model", first, "--mode=basic"], workdir)
    toolkit(["debug", "reduce", first, "-o", final, "--mode=linear", *reduce_opts] + check, workdir)
    toolkit(["inspect", "model", final, "--mode=basic"], workdir)
    expect_single_mul(workdir, final, label)


def expect_single_mul(workdir, model, label):
    ops = node_ops(workdir, model)
    print(f"\n==> {label}: {model} has nodes {ops}", flush=True)
    if ops != ["Mul"]:
        sys.exit(f"example failed: expected {model} to hold just the Mul node, found {ops}")


def main() -> int:
    parser = argparse.ArgumentParser(description="Reduce a failing ONNX model with toolkit, end to end.")
    parser.add_argument("--workdir", default="toolkit-example-reduce", help="folder for the files (created fresh)")
    parser.add_argument("--trt", action="store_true", help="use TensorRT as the failing backend")
    args = parser.parse_args()

    workdir = fresh_workdir(args.workdir)
    build_models(workdir)

    # ---------------------------------------------------------------- A. real check
    print("\n######## A. Reducing with a real accuracy check ########")
    golden_model = "model.onnx" if args.trt else "reference.onnx"
    toolkit(
        ["run", golden_model, "--onnxrt", "--save-inputs", "inputs.json",
         "--onnx-outputs", "mark", "all", "--save-outputs", "layerwise_golden.json"],
        workdir,
    )
    toolkit(["data", "to-input", "inputs.json", "layerwise_golden.json", "-o", "layerwise_inputs.json"], workdir)
    backend = "--trt" if args.trt else "--onnxrt"
    check = ["--check", "toolkit", "run", "polygraphy_debug.onnx", backend,
             "--load-inputs", "layerwise_inputs.json", "--load-outputs", "layerwise_golden.json"]
    bisect_then_linear(workdir, "", check, "real check")

    # ---------------------------------------------------------------- B. simulated failure
    print("\n######## B. Reducing with a simulated failure (any model with a Mul fails) ########")
    sim = ["--fail-regex", "Op: Mul", "--check", "toolkit", "inspect", "model", "polygraphy_debug.onnx", "--mode=basic"]
    bisect_then_linear(workdir, "sim_", sim, "simulated failure")

    # ---------------------------------------------------------------- C. one invocation
    print("\n######## C. toolkit's default strategy: one invocation, 1-minimal result ########")
    toolkit(["debug", "reduce", "model.onnx", "-o", "reduced.onnx", "--min-good", "min_good.onnx"] + check, workdir)
    expect_single_mul(workdir, "reduced.onnx", "default strategy")

    # ---------------------------------------------------------------- D. sanitize first
    print("\n######## D. The sanitize-first recipe: fold constants, then reduce with --load-inputs ########")
    shapes = ["--override-input-shapes", "x0:[1,3,224,224]", "x1:[1,3,224,224]"]
    toolkit(["surgeon", "sanitize", "model.onnx", "-o", "folded.onnx", "--fold-constants", *shapes], workdir)
    folded_ops = node_ops(workdir, "folded.onnx")
    if folded_ops != ["Mul", "Add", "Add"]:
        sys.exit(f"example failed: folding changed the model's nodes to {folded_ops} (expected Mul, Add, Add)")
    golden_folded = "folded.onnx"
    if not args.trt:
        toolkit(["surgeon", "sanitize", "reference.onnx", "-o", "folded_reference.onnx", "--fold-constants", *shapes],
                workdir)
        golden_folded = "folded_reference.onnx"
    toolkit(
        ["run", golden_folded, "--onnxrt", "--save-inputs", "folded_inputs.json",
         "--onnx-outputs", "mark", "all", "--save-outputs", "folded_golden.json"],
        workdir,
    )
    toolkit(["data", "to-input", "folded_inputs.json", "folded_golden.json", "-o", "folded_layerwise.json"], workdir)
    folded_check = ["--check", "toolkit", "run", "polygraphy_debug.onnx", backend,
                    "--load-inputs", "folded_layerwise.json", "--load-outputs", "folded_golden.json"]
    bisect_then_linear(workdir, "folded_", folded_check, "sanitize first", model="folded.onnx",
                       reduce_opts=("--load-inputs", "folded_layerwise.json"))

    print("\nAll steps passed: every reduction ended at the single Mul node.")
    return 0


if __name__ == "__main__":
    sys.exit(main())

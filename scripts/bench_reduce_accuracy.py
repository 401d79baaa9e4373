#!/usr/bin/env python3
"""`debug reduce` on Polygraphy's accuracy workflow, toolkit vs polygraphy (when installed).

A deep MLP (LAYERS x [MatMul, Add, Tanh], 300 nodes by default, 256 wide) is built twice:
the reference, and a "deployed" copy whose bias in one middle layer is slightly off. Golden
values for every tensor come from the reference; then each tool reduces the deployed model
with its own `run` as the check, comparing each subgraph against the golden values:

    polygraphy run reference.onnx --onnxrt --load-inputs inputs.json \\
        --onnx-outputs mark all --save-outputs golden.json
    polygraphy data to-input inputs.json golden.json -o layerwise.json      (`data merge` in 0.53)
    polygraphy debug reduce deployed.onnx -o out.onnx --mode=bisect \\
        --check polygraphy run polygraphy_debug.onnx --onnxrt \\
                --load-inputs layerwise.json --load-outputs golden.json
    toolkit debug reduce deployed.onnx -o out.onnx \\
        --check toolkit run polygraphy_debug.onnx --onnxrt \\
                --load-inputs layerwise.npz --load-outputs golden.npz

toolkit uses its own files in .npz (what a user of it would); polygraphy reads JSON (the only
format it loads). Each tool runs in a fresh folder. Reported: wall time, checks, nodes left.

Built-in compare row (data preparation included on both sides): toolkit's one command

    toolkit debug reduce deployed.onnx -o out.onnx --compare onnxrt onnxrt \
        --reference-model reference.onnx --seed 1

against polygraphy's golden-values recipe, every step timed:

    polygraphy run reference.onnx --onnxrt --seed 1 --save-inputs inputs.json \
        --onnx-outputs mark all --save-outputs golden.json
    polygraphy data merge inputs.json golden.json -o layerwise.json    (`data to-input` before 0.53)
    polygraphy debug reduce deployed.onnx -o out.onnx --mode=bisect \
        --check polygraphy run polygraphy_debug.onnx --onnxrt \
                --load-inputs layerwise.json --load-outputs golden.json

Usage: python scripts/bench_reduce_accuracy.py [--layers 100] [--width 256] [--batch 64] [--builtin-only]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time


def build(path: str, layers: int, width: int, batch: int, wrong_layer: int = -1) -> None:
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    inits, nodes, prev = [], [], "x"
    for i in range(layers):
        w = (rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32)
        b = (rng.standard_normal(width) * 0.1).astype(np.float32)
        if i == wrong_layer:
            b = b + np.float32(0.01)
        inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(b, f"b{i}")]
        nodes += [
            helper.make_node("MatMul", [prev, f"w{i}"], [f"mm{i}"], name=f"l{i}_matmul"),
            helper.make_node("Add", [f"mm{i}", f"b{i}"], [f"lin{i}"], name=f"l{i}_bias"),
            helper.make_node("Tanh", [f"lin{i}"], [f"act{i}"], name=f"l{i}_tanh"),
        ]
        prev = f"act{i}"
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, width])],
        [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [batch, width])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save_model(model, path)


def tool(name: str):
    here = os.path.join(os.path.dirname(sys.executable), name)
    return here if os.path.exists(here) else shutil.which(name)


# as users run them: bytecode is cached (both tools import a lot at every start)
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
CPU = {"seconds": 0.0}  # CPU time (user + system) of the last command run by sh(), children included


def sh(cmd, cwd):
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=ENV)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU["seconds"] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return proc, wall


def final_nodes(path: str):
    import onnx

    if not os.path.exists(path):
        return None
    return [n.name for n in onnx.load(path, load_external_data=False).graph.node]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=100)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--builtin-only", action="store_true", help="only the built-in compare row")
    args = parser.parse_args()
    wrong = args.layers // 2 + 3
    tk = tool("toolkit")
    pg = tool("polygraphy")
    if args.builtin_only:
        builtin_row(args, tk, pg)
        return 0
    root = tempfile.mkdtemp(prefix="bench-reduce-acc-")
    data = os.path.join(root, "data")
    os.makedirs(data)
    ref, dep = os.path.join(data, "reference.onnx"), os.path.join(data, "deployed.onnx")
    build(ref, args.layers, args.width, args.batch)
    build(dep, args.layers, args.width, args.batch, wrong_layer=wrong)
    print(f"model: {3 * args.layers} nodes, width {args.width}, batch {args.batch}; "
          f"wrong bias in layer {wrong} (node l{wrong}_bias)")

    # golden values (made once, with toolkit; polygraphy reads the JSON files)
    steps = [
        [tk, "run", "reference.onnx", "--onnxrt", "--seed", "1", "--save-inputs", "inputs.json",
         "--onnx-outputs", "mark", "all", "--save-outputs", "golden.json", "-q"],
        [tk, "data", "to-input", "inputs.json", "golden.json", "-o", "layerwise.json"],
        [tk, "run", "reference.onnx", "--onnxrt", "--load-inputs", "inputs.json",
         "--onnx-outputs", "mark", "all", "--save-outputs", "golden.npz", "-q"],
        [tk, "data", "to-input", "inputs.json", "golden.npz", "-o", "layerwise.npz"],
    ]
    for cmd in steps:
        proc, _ = sh(cmd, data)
        if proc.returncode != 0:
            sys.exit(f"setup failed: {' '.join(cmd)}\n{proc.stderr}")
    sizes = {f: os.path.getsize(os.path.join(data, f)) / 2**20 for f in ("golden.json", "layerwise.json", "golden.npz", "layerwise.npz")}
    print("data files (MB): " + ", ".join(f"{k} {v:.0f}" for k, v in sizes.items()))

    rows = []
    runs = [("toolkit", [tk, "debug", "reduce", dep, "-o", "out.onnx", "--check", tk, "run", "polygraphy_debug.onnx",
                         "--onnxrt", "--load-inputs", os.path.join(data, "layerwise.npz"),
                         "--load-outputs", os.path.join(data, "golden.npz"), "-q"])]
    if pg:
        runs.append(("polygraphy", [pg, "debug", "reduce", dep, "-o", "out.onnx", "--mode=bisect", "--check", pg, "run",
                                    "polygraphy_debug.onnx", "--onnxrt", "--load-inputs",
                                    os.path.join(data, "layerwise.json"), "--load-outputs",
                                    os.path.join(data, "golden.json")]))
    for name, cmd in runs:
        cwd = os.path.join(root, name)
        os.makedirs(cwd)
        proc, secs = sh(cmd, cwd)
        text = proc.stdout + proc.stderr
        if name == "toolkit":
            m = re.search(r"(\d+) checks? run", text)
            checks = int(m.group(1)) if m else None
        else:
            checks = len(re.findall(r"Running check command", text))
        nodes = final_nodes(os.path.join(cwd, "out.onnx"))
        rows.append((name, secs, checks, nodes, proc.returncode))
        print(f"{name:<10} {secs:7.2f} s  {checks} checks  exit {proc.returncode}  nodes at the end: {nodes}")
    if len(rows) == 2:
        print(f"ratio polygraphy/toolkit wall time: {rows[1][1] / rows[0][1]:.1f}x")
    shutil.rmtree(root, ignore_errors=True)
    builtin_row(args, tk, pg)
    return 0


def builtin_row(args, tk: str, pg) -> None:
    """toolkit --compare (one command) vs polygraphy's golden recipe, data preparation included."""
    root = tempfile.mkdtemp(prefix="bench-reduce-builtin-")
    wrong = args.layers // 2 + 3
    ref, dep = os.path.join(root, "reference.onnx"), os.path.join(root, "deployed.onnx")
    build(ref, args.layers, args.width, args.batch)
    build(dep, args.layers, args.width, args.batch, wrong_layer=wrong)
    print(f"\nbuilt-in compare, data preparation included (planted fault: l{wrong}_bias)")
    cwd = os.path.join(root, "toolkit")
    os.makedirs(cwd)
    proc, tk_secs = sh([tk, "debug", "reduce", dep, "-o", "out.onnx", "--compare", "onnxrt", "onnxrt",
                        "--reference-model", ref, "--seed", "1"], cwd)
    tk_cpu = CPU["seconds"]
    m = re.search(r"(\d+) checks? run", proc.stderr)
    tk_nodes = final_nodes(os.path.join(cwd, "out.onnx"))
    print(f"toolkit --compare        {tk_secs:7.2f} s  (CPU {tk_cpu:6.2f} s)  {m.group(1) if m else '?'} checks  "
          f"exit {proc.returncode}  nodes at the end: {tk_nodes}")
    if proc.returncode != 0:
        print(proc.stderr[-2000:])
    if not pg:
        shutil.rmtree(root, ignore_errors=True)
        return
    cwd = os.path.join(root, "polygraphy")
    os.makedirs(cwd)
    merge = "merge" if _has_data_merge(pg) else "to-input"
    steps = [
        [pg, "run", ref, "--onnxrt", "--seed", "1", "--save-inputs", "inputs.json", "--onnx-outputs", "mark", "all",
         "--save-outputs", "golden.json"],
        [pg, "data", merge, "inputs.json", "golden.json", "-o", "layerwise.json"],
        [pg, "debug", "reduce", dep, "-o", "out.onnx", "--mode=bisect", "--check", pg, "run", "polygraphy_debug.onnx",
         "--onnxrt", "--load-inputs", "layerwise.json", "--load-outputs", "golden.json"],
    ]
    pg_secs, pg_cpu, checks = 0.0, 0.0, None
    for cmd in steps:
        proc, secs = sh(cmd, cwd)
        pg_secs += secs
        pg_cpu += CPU["seconds"]
        if proc.returncode != 0:
            print(f"polygraphy step failed: {' '.join(cmd[:3])}\n{(proc.stdout + proc.stderr)[-2000:]}")
            break
        checks = len(re.findall(r"Running check command", proc.stdout + proc.stderr))
    pg_nodes = final_nodes(os.path.join(cwd, "out.onnx"))
    print(f"polygraphy golden recipe {pg_secs:7.2f} s  (CPU {pg_cpu:6.2f} s)  {checks} checks  "
          f"nodes at the end: {pg_nodes}")
    print(f"ratio polygraphy recipe / toolkit --compare: wall time {pg_secs / tk_secs:.1f}x "
          f"(toolkit takes 1/{pg_secs / tk_secs:.0f} of the time; bar: 1/20), CPU time {pg_cpu / tk_cpu:.1f}x")
    shutil.rmtree(root, ignore_errors=True)


def _has_data_merge(pg: str) -> bool:
    proc = subprocess.run([pg, "data", "-h"], capture_output=True, text=True)
    return "merge" in proc.stdout


if __name__ == "__main__":
    sys.exit(main())

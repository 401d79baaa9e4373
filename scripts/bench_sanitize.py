#!/usr/bin/env python3
"""`toolkit surgeon sanitize --fold-constants` next to `polygraphy surgeon sanitize --fold-constants`.

Usage: python scripts/bench_sanitize.py [--runs N] [--blocks 30] [--channels 1024] [--no-polygraphy]

Two models:

1. shape chain (built here): per block Relu -> Shape -> Gather(1) -> Unsqueeze ->
   Concat([-1], .) -> Reshape, plus a MatMul with a CxC weight on a side branch that
   sums into the output. The batch dim is dynamic. Without data propagation in shape
   inference, each Reshape hides the channel dim from the next block, so a folder that
   only re-infers shapes between passes needs one pass per block.
2. onnx's light_densenet121.onnx (from the installed onnx wheel's backend test data).

Each tool runs as a fresh process writing into a fresh folder; the median wall time of N
runs is reported with the number of folding passes (read from the tools' logs), node
counts before and after, and whether the folded models' outputs equal the unfolded
model's on ONNX-Runtime.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def build_shape_chain(blocks: int, channels: int):
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(np.array([-1], np.int64), "minus1"),
        numpy_helper.from_array(np.array(1, np.int64), "one"),
        numpy_helper.from_array(np.array([0], np.int64), "axes0"),
    ]
    nodes = []
    x, acc = "x", None
    for k in range(blocks):
        p = f"b{k}_"
        w = (rng.standard_normal((channels, channels)) * (1.0 / channels)).astype(np.float32)
        inits.append(numpy_helper.from_array(w, f"w{k}"))
        nodes += [
            helper.make_node("Relu", [x], [p + "relu"], name=p + "relu"),
            helper.make_node("Shape", [p + "relu"], [p + "shape"], name=p + "shape"),
            helper.make_node("Gather", [p + "shape", "one"], [p + "c"], name=p + "gather", axis=0),
            helper.make_node("Unsqueeze", [p + "c", "axes0"], [p + "cu"], name=p + "unsqueeze"),
            helper.make_node("Concat", ["minus1", p + "cu"], [p + "newshape"], name=p + "concat", axis=0),
            helper.make_node("Reshape", [p + "relu", p + "newshape"], [p + "out"], name=p + "reshape"),
            helper.make_node("MatMul", [p + "out", f"w{k}"], [p + "mm"], name=p + "matmul"),
        ]
        if acc is None:
            acc = p + "mm"
        else:
            nodes.append(helper.make_node("Add", [acc, p + "mm"], [p + "acc"], name=p + "acc"))
            acc = p + "acc"
        x = p + "out"
    nodes.append(helper.make_node("Identity", [acc], ["y"], name="output"))
    graph = helper.make_graph(
        nodes,
        "shape_chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", channels])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", channels])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="bench_sanitize")
    model.ir_version = 8
    return model


def find_tool(name: str):
    here = os.path.join(os.path.dirname(sys.executable), name)
    return here if os.path.exists(here) else shutil.which(name)


def count_nodes(path: str) -> int:
    return len(onnx.load(path, load_external_data=False).graph.node)


def run_tool(cmd_for_output, runs: int):
    """Run a command N times, each writing into a fresh folder; returns (median s, passes, output path, log)."""
    times, out_path, log = [], None, ""
    for _ in range(runs):
        folder = tempfile.mkdtemp(prefix="bench_sanitize_")
        out_path = os.path.join(folder, "out.onnx")
        cmd = cmd_for_output(out_path)
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True)
        times.append(time.perf_counter() - t0)
        log = proc.stdout + proc.stderr
        if proc.returncode != 0:
            raise SystemExit(f"failed ({proc.returncode}): {' '.join(cmd)}\n{log[-3000:]}")
    passes = len(re.findall(r"(?i)folding constants \| pass \d+", log))
    return statistics.median(times), passes, out_path, log


def outputs_equal(reference: str, candidates, feeds) -> bool:
    import onnxruntime as ort

    def run(path):
        sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        names = [o.name for o in sess.get_outputs()]
        return [dict(zip(names, sess.run(names, feed))) for feed in feeds]

    want = run(reference)
    ok = True
    for cand in candidates:
        got = run(cand)
        for w, g in zip(want, got):
            for name, value in w.items():
                if not np.allclose(g[name], value, rtol=1e-4, atol=1e-5):
                    print(f"  MISMATCH in {cand}: output {name}, max abs diff {np.abs(g[name] - value).max()}")
                    ok = False
    return ok


def bench(label, model_path, feeds, runs, use_poly):
    toolkit = find_tool("toolkit")
    tk_cmd = (lambda o: [toolkit, "surgeon", "sanitize", model_path, "--fold-constants", "-o", o]) if toolkit else (
        lambda o: [sys.executable, "-m", "toolkit", "surgeon", "sanitize", model_path, "--fold-constants", "-o", o]
    )
    poly = find_tool("polygraphy") if use_poly else None
    before = count_nodes(model_path)
    print(f"\n== {label}: {model_path} ({before} nodes, {os.path.getsize(model_path) / 2**20:.1f} MiB)")
    rows = {}
    outs = []
    if poly:
        secs, passes, out, log = run_tool(lambda o: [poly, "surgeon", "sanitize", model_path, "--fold-constants", "-o", o], runs)
        rows["polygraphy"] = (secs, passes, count_nodes(out))
        outs.append(out)
    secs, passes, out, log = run_tool(tk_cmd, runs)
    rows["toolkit"] = (secs, passes, count_nodes(out))
    outs.append(out)
    print(f"  {'tool':<12} {'wall s':>8} {'passes':>7} {'nodes':>14}")
    for tool, (secs, passes, nodes) in rows.items():
        print(f"  {tool:<12} {secs:8.2f} {passes:7d} {before:6d} -> {nodes:<5d}")
    if "polygraphy" in rows:
        p, t = rows["polygraphy"], rows["toolkit"]
        print(f"  ratio toolkit/polygraphy: time {t[0] / p[0]:.3f}x, passes {t[1]}/{p[1]}, nodes {t[2]} vs {p[2]}")
    eq = outputs_equal(model_path, outs, feeds)
    print(f"  outputs equal to the unfolded model on ONNX-Runtime: {'yes' if eq else 'NO'}")
    for o in outs:
        shutil.rmtree(os.path.dirname(o), ignore_errors=True)
    return rows, eq


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="runs per tool and model (median reported)")
    parser.add_argument("--blocks", type=int, default=30)
    parser.add_argument("--channels", type=int, default=1024)
    parser.add_argument("--no-polygraphy", action="store_true")
    args = parser.parse_args()

    work = tempfile.mkdtemp(prefix="bench_sanitize_models_")
    try:
        chain = build_shape_chain(args.blocks, args.channels)
        chain_path = os.path.join(work, "shape_chain.onnx")
        onnx.save_model(chain, chain_path)
        rng = np.random.default_rng(1)
        feeds = [{"x": rng.standard_normal((b, args.channels)).astype(np.float32)} for b in (1, 3)]
        ok = bench("shape chain", chain_path, feeds, args.runs, not args.no_polygraphy)[1]

        dn = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light", "light_densenet121.onnx")
        if os.path.exists(dn):
            m = onnx.load(dn, load_external_data=False)
            inits = {t.name for t in m.graph.initializer}
            feed = {}
            for vi in m.graph.input:
                if vi.name in inits:
                    continue
                shape = [d.dim_value or 1 for d in vi.type.tensor_type.shape.dim]
                feed[vi.name] = rng.random(shape, dtype=np.float32)
            ok &= bench("light_densenet121", dn, [feed], args.runs, not args.no_polygraphy)[1]
        else:
            print(f"\n(light_densenet121.onnx not found at {dn}; skipped)")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Memory and time to the first iteration of ``toolkit run --iterations N`` (and polygraphy's).

Usage: python scripts/bench_run_memory.py [--iterations 1,100,300] [--model PATH] [--no-polygraphy]

Model: a generated 640x640 detector-like Conv stack (input 1x3x640x640 float32, 4.9 MB per
feed; a 1x85x80x80 head and a 1x32x160x160 feature map as outputs, 5.5 MB per iteration).

For each N, fresh processes run
  a) ``toolkit run MODEL --onnxrt --iterations N``
  b) ``toolkit run MODEL --onnxrt --iterations N --save-inputs in.npz --save-outputs out.npz``
  c) ``toolkit run MODEL --onnxrt --iterations N --load-outputs golden.npz`` (golden: N iterations)
  d) ``polygraphy run MODEL --onnxrt --iterations N`` (when installed)
and report the peak resident memory of the process (``ru_maxrss`` from ``wait4``) and the time
from start to the first "Iteration 0" log line. The bar: peak memory flat in N (N=100 within
1.2x of N=1) and the first iteration starting at once (independent of N).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def make_detector(path: str) -> str:
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    inits, nodes = [], []
    prev, cin = "images", 3
    for i, cout in enumerate((16, 32, 64, 128)):
        w = numpy_helper.from_array((rng.standard_normal((cout, cin, 3, 3)) * 0.1).astype(np.float32), f"w{i}")
        inits.append(w)
        nodes.append(helper.make_node("Conv", [prev, f"w{i}"], [f"c{i}"], strides=[2, 2], pads=[1, 1, 1, 1]))
        nodes.append(helper.make_node("Relu", [f"c{i}"], [f"r{i}"]))
        prev, cin = f"r{i}", cout
    nodes.append(helper.make_node("Identity", ["r1"], ["features"]))  # 1x32x160x160
    head = numpy_helper.from_array((rng.standard_normal((85, 128, 1, 1)) * 0.1).astype(np.float32), "head_w")
    inits.append(head)
    up = numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")
    inits.append(up)
    nodes.append(helper.make_node("Resize", ["r3", "", "scales"], ["up"], mode="nearest"))
    nodes.append(helper.make_node("Conv", ["up", "head_w"], ["boxes"]))
    graph = helper.make_graph(
        nodes,
        "detector",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, [1, 3, 640, 640])],
        [
            helper.make_tensor_value_info("boxes", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("features", TensorProto.FLOAT, None),
        ],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def measure(cmd, cwd) -> tuple:
    """(peak RSS in MB, seconds to the first 'Iteration 0' line or None, seconds in all)."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    first = []
    tail = []

    def read():
        for raw in proc.stderr:
            line = raw.decode(errors="replace")
            if not first and "Iteration 0" in line:
                first.append(time.perf_counter() - start)
            tail.append(line)
            del tail[:-40]

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    _pid, status, usage = os.wait4(proc.pid, 0)
    total = time.perf_counter() - start
    reader.join()
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode not in (0,):
        raise SystemExit(f"failed ({proc.returncode}): {' '.join(cmd)}\n{''.join(tail)}")
    return usage.ru_maxrss / 1024, (first[0] if first else None), total


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", default="1,100,300", help="comma-separated iteration counts")
    parser.add_argument("--model", help="use this model instead of the generated detector")
    parser.add_argument("--no-polygraphy", action="store_true")
    args = parser.parse_args()
    counts = [int(n) for n in args.iterations.split(",")]
    toolkit = [sys.executable, "-m", "toolkit"]
    here = os.path.join(os.path.dirname(sys.executable), "polygraphy")
    poly = None if args.no_polygraphy else (here if os.path.exists(here) else shutil.which("polygraphy"))
    with tempfile.TemporaryDirectory(prefix="bench_mem_") as work:
        model = args.model or make_detector(os.path.join(work, "detector.onnx"))
        print(f"Model: {os.path.basename(model)} ({os.path.getsize(model) / 1e6:.1f} MB)")
        print(f"Machine: {os.cpu_count()} CPU(s), Python {sys.version.split()[0]}")
        rows = {}
        for n in counts:
            base = toolkit + ["run", model, "--onnxrt", "--iterations", str(n)]
            golden = os.path.join(work, f"golden{n}.npz")
            subprocess.run(base + ["--save-outputs", golden, "-q"], check=True, cwd=work, stderr=subprocess.DEVNULL)
            cases = {
                "a) toolkit run": base,
                "b) + --save-inputs/--save-outputs .npz": base + ["--save-inputs", "in.npz", "--save-outputs", "out.npz"],
                "c) + --load-outputs golden.npz": base + ["--load-outputs", golden],
            }
            if poly:
                cases["d) polygraphy run"] = [poly, "run", model, "--onnxrt", "--iterations", str(n)]
            for name, cmd in cases.items():
                rows[(name, n)] = measure(cmd, work)
                rss, first, total = rows[(name, n)]
                first_s = f"{first:.2f} s" if first is not None else "-"
                print(f"N={n:<4} {name:<42} peak {rss:7.0f} MB | first iteration after {first_s:>7} | total {total:6.1f} s")
        print()
        for name in dict.fromkeys(k for k, _ in rows):
            if (name, counts[0]) in rows:
                one = rows[(name, counts[0])][0]
                ratios = ", ".join(f"N={n}: {rows[(name, n)][0] / one:.2f}x" for n in counts[1:] if (name, n) in rows)
                print(f"{name:<42} peak memory vs N={counts[0]}: {ratios}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Benchmark `toolkit convert --fp-to-fp16` against `--fp-to-bf16` (in process, no file I/O).

    python scripts/bench_convert.py            # the figures recorded in docs/performance.md
    python scripts/bench_convert.py --quick    # smaller
    python scripts/bench_convert.py --model /tmp/real-models/ppocr_det.onnx --shape 1,3,640,640
                                               # a real model: conversion, the emulated check and the
                                               # runtime check (default session options, forked child)

Cases, each built in memory:
- a chain of N elementwise nodes (Add/Mul/Sigmoid/Tanh, one Max in 50: kept fp32, one weight
  shared by every Add): the cost of the placement, the repair and the sort;
- one MatMul with a large float32 weight: the cost of converting weights.
Each conversion is timed once (best of --repeat), after one warm-up on a small model. The last
column is the check `convert` runs afterwards (the fp16 model against the original in
ONNX-Runtime, on INPUT_SETS input sets; `--no-validate` skips it), on the in-memory models.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from toolkit.convert import fp16  # noqa: E402
from toolkit.convert.runtime_check import run_session, start_session  # noqa: E402
from toolkit.convert.validate import INPUT_SETS, validate  # noqa: E402


def chain(n: int):
    ops = ["Add", "Mul", "Sigmoid", "Tanh"]
    nodes, prev = [], "x"
    inits = [numpy_helper.from_array(np.full((1, 64), 0.5, np.float32), "shared")]
    for i in range(n):
        out = "y" if i == n - 1 else f"t{i}"
        op = "Max" if i % 50 == 49 else ops[i % len(ops)]
        ins = [prev, "shared"] if op in ("Add", "Mul", "Max") else [prev]
        nodes.append(helper.make_node(op, ins, [out], name=f"n{i}"))
        prev = out
    g = helper.make_graph(
        nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])], inits,
    )  # fmt: skip
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def big_weight(rows: int, cols: int):
    w = np.random.default_rng(0).standard_normal((rows, cols), dtype=np.float32)
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "big",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, rows])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, cols])], [numpy_helper.from_array(w, "w")],
    )  # fmt: skip
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def timed(model, dtype: str, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fp16.convert(model, dtype=dtype)
        best = min(best, time.perf_counter() - t0)
    return best


def timed_check(model, repeat: int) -> float:
    converted = fp16.convert(model).model
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    name = model.graph.input[0].name
    feeds = [{name: np.random.default_rng(k).random(shape, dtype=np.float32)} for k in range(INPUT_SETS)]
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        validate(model, converted, feeds)
        best = min(best, time.perf_counter() - t0)
    return best


def real_model(path: str, shape: str, repeat: int) -> None:
    """Conversion, the emulated check and the runtime check of a real model, each the best of ``repeat``."""
    import onnx

    dims = [int(d) for d in shape.split(",")]
    name = onnx.load(path, load_external_data=False).graph.input[0].name
    feeds = [{name: np.random.default_rng(k).uniform(-2, 2, dims).astype(np.float32)} for k in range(INPUT_SETS)]
    keys = ("load + conversion", "emulated check alone", "runtime check alone", "both, as convert runs them")
    best = dict.fromkeys(keys, float("inf"))
    for _ in range(repeat):
        t0 = time.perf_counter()
        converted = fp16.convert(onnx.load(path), inplace=True).model
        t1 = time.perf_counter()
        validate(path, converted, feeds)
        t2 = time.perf_counter()
        run = run_session(converted, feeds)
        t3 = time.perf_counter()
        pending = start_session(converted, feeds)  # (the child runs while the emulated check runs here)
        res = validate(path, converted, feeds, measured=pending.outputs)
        t4 = time.perf_counter()
        assert run.ok and res.measured_errors is not None, run.sentence()
        for key, value in zip(keys, (t1 - t0, t2 - t1, t3 - t2, t4 - t3)):
            best[key] = min(best[key], value)
    print(f"{os.path.basename(path)} at {shape}, {INPUT_SETS} input sets, best of {repeat}:")
    for key, value in best.items():
        print(f"  {key:<28} {value:6.2f} s")
    both, alone = best[keys[3]], best[keys[1]]
    print(f"  the check with the runtime check / without it: {both / alone:.2f}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--model", help="a real model to time instead of the built cases")
    ap.add_argument("--shape", default="1,3,640,640", help="its first input's shape (with --model)")
    args = ap.parse_args()
    if args.model:
        timed(chain(20), "float16", 1)  # warm-up (imports, schemas)
        real_model(args.model, args.shape, args.repeat)
        return
    n = 2000 if args.quick else 10000
    rows, cols = (1024, 4096) if args.quick else (4096, 16384)
    timed(chain(20), "float16", 1), timed(chain(20), "bfloat16", 1)  # warm-up (imports, schemas)
    cases = [(f"chain of {n} nodes", chain(n)), (f"one {rows}x{cols} weight ({rows * cols * 4 >> 20} MB)",
                                                 big_weight(rows, cols))]  # fmt: skip
    print(f"{'case':<36} {'fp16 s':>8} {'bf16 s':>8} {'check s':>8}")
    for name, model in cases:
        fp, bf, check = timed(model, "float16", args.repeat), timed(model, "bfloat16", args.repeat), timed_check(model, args.repeat)
        print(f"{name:<36} {fp:>8.2f} {bf:>8.2f} {check:>8.2f}")


if __name__ == "__main__":
    main()

"""Benchmark `toolkit debug precision`: checks and time against the bound
ceil(log2 N) + 2 x (nodes found), on stacks of decomposed-LayerNorm blocks where some
blocks overflow fp16 (their squares pass 65504; each needs its Pow and ReduceMean in fp32).

    python scripts/bench_precision.py            # the table recorded in docs/performance.md
    python scripts/bench_precision.py --quick    # smaller

Each model is built in memory (tests/fp16_models.py style), saved to a temp folder, and
searched with the default mode (bisect + QuickXplain + 1-minimality), in process.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

D = 64


def stack(blocks: int, overflowing, seed: int = 0):
    """``blocks`` x [MatMul -> decomposed LayerNorm (10 nodes) -> Relu]; blocks in ``overflowing``
    scale their MatMul so the squares overflow fp16 (their mean does not)."""
    rng = np.random.default_rng(seed)
    nodes, inits = [], [
        numpy_helper.from_array(np.array(2, np.float32), "two"),
        numpy_helper.from_array(np.array(1e-5, np.float32), "eps"),
    ]
    x = "x"
    must = []
    for b in range(blocks):
        scale = 25.0 if b in overflowing else 0.2
        p = f"b{b}"
        inits.append(numpy_helper.from_array((rng.standard_normal((D, D)) * scale).astype(np.float32), f"{p}.w"))
        inits.append(numpy_helper.from_array(np.ones(D, np.float32), f"{p}.g"))
        names = dict(
            a=f"{p}.a", mu=f"{p}.mu", d=f"{p}.d", sq=f"{p}.sq", var=f"{p}.var", ve=f"{p}.ve", sd=f"{p}.sd",
            n=f"{p}.n", s=f"{p}.s", r=f"{p}.r",
        )
        nodes += [
            helper.make_node("MatMul", [x, f"{p}.w"], [names["a"]], name=f"{p}/proj"),
            helper.make_node("ReduceMean", [names["a"]], [names["mu"]], name=f"{p}/mean", axes=[-1]),
            helper.make_node("Sub", [names["a"], names["mu"]], [names["d"]], name=f"{p}/center"),
            helper.make_node("Pow", [names["d"], "two"], [names["sq"]], name=f"{p}/square"),
            helper.make_node("ReduceMean", [names["sq"]], [names["var"]], name=f"{p}/variance", axes=[-1]),
            helper.make_node("Add", [names["var"], "eps"], [names["ve"]], name=f"{p}/add_eps"),
            helper.make_node("Sqrt", [names["ve"]], [names["sd"]], name=f"{p}/std"),
            helper.make_node("Div", [names["d"], names["sd"]], [names["n"]], name=f"{p}/normalize"),
            helper.make_node("Mul", [names["n"], f"{p}.g"], [names["s"]], name=f"{p}/scale"),
            helper.make_node("Relu", [names["s"]], [names["r"]], name=f"{p}/relu"),
        ]
        if b in overflowing:
            must += [f"{p}/square", f"{p}/variance"]
        x = names["r"]
    nodes.append(helper.make_node("Identity", [x], ["y"], name="out"))
    vi = lambda n: helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, D])  # noqa: E731
    graph = helper.make_graph(nodes, "ln_stack", [vi("x")], [vi("y")], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model, must


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--tol", default="3e-2", help="--atol and --rtol of the search (default 3e-2)")
    ap.add_argument("--mode", default=None, help="bisect or linear: the reduce engine alone (default: guided)")
    args = ap.parse_args()
    from toolkit.precision.config import search_tolerances
    from toolkit.precision.search import PrecisionConfig, PrecisionSearch

    cases = [(4, [2]), (16, [5]), (16, [3, 11]), (64, [40]), (64, [10, 50]), (64, [5, 20, 35, 60])]
    if args.quick:
        cases = cases[:3]
    print(f"tolerances: --atol {args.tol} --rtol {args.tol}; mode {args.mode or 'default (guided)'}")
    print("| blocks | nodes searched | overflowing blocks | nodes found | checks | bound ceil(log2 N) + 2 x found | seconds |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as d:
        for blocks, over in cases:
            model, must = stack(blocks, set(over))
            path = os.path.join(d, f"stack{blocks}.onnx")
            onnx.save(model, path)
            t0 = time.perf_counter()
            out = PrecisionSearch(PrecisionConfig(path, tolerances=search_tolerances([args.tol], [args.tol], []), mode=args.mode)).run()
            secs = time.perf_counter() - t0
            bound = math.ceil(math.log2(out.candidates)) + 2 * len(out.kept)
            if sorted(out.kept) == sorted(must):
                ok = f"exactly the {len(must)} overflowing"
            elif set(must) <= set(out.kept):
                ok = f"the {len(must)} overflowing + {len(out.kept) - len(must)} more"
            else:
                ok = f"{len(out.kept)}, missing {sorted(set(must) - set(out.kept))}"
            print(
                f"| {blocks} | {out.candidates} | {len(over)} | {ok} | {out.checks} | {bound} | {secs:.1f} |"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

#!/usr/bin/env python3
"""`toolkit surgeon sanitize --fold-constants` next to `polygraphy surgeon sanitize --fold-constants`.

Usage: python scripts/bench_sanitize.py [--runs N] [--blocks 30] [--channels 1024] [--no-polygraphy]
       python scripts/bench_sanitize.py --table [--runs N] [--models PATH ...] [--only-models]
       python scripts/bench_sanitize.py --validation-cost [--runs N]

--table prints a Markdown table of node counts (subgraph nodes included) after folding, for
polygraphy, toolkit, toolkit --optimize and, when installed, onnxslim (folding only:
constant folding and dead-node elimination; and full), on onnx's light models and on models
built here (If on a constant condition feeding a Split, identity chains, Shape/Size of
constants, shapes inside a Loop body, a shape chain), each with whether the result loads
in ONNX-Runtime and matches the original's outputs, and toolkit's and polygraphy's times
(median of N runs; "time ratio" is toolkit's over polygraphy's: 0.50x or less is twice as fast).
--models adds rows for models kept elsewhere (files or folders; absent ones are skipped), e.g.
real models that cannot ship with the repository. A model's outputs are compared on
generated inputs whose dynamic dims are 1, 64 or 512 and integer scalars 1 or 16000 (the
first the input model runs on).

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
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=folder)  # tools may leave temp files in cwd
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


# ---------------------------------------------------------------------- node-count table (--table)


def _vi(name, shape, dtype=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, dtype, shape)


def _model(nodes, inputs, outputs, inits=(), opset=17):
    m = helper.make_model(helper.make_graph(nodes, "m", inputs, outputs, list(inits)),
                          opset_imports=[helper.make_opsetid("", opset)], producer_name="bench_sanitize")
    m.ir_version = 8
    return m


def build_if_split():
    """silero-like: an If on a constant condition whose taken branch ends in a two-output Split,
    both outputs used; the branch's input comes from a shape computation of the outer graph."""
    c = numpy_helper.from_array(np.arange(8, dtype=np.float32), "c")
    then_g = helper.make_graph(
        [helper.make_node("Mul", ["c", "two"], ["c2"]), helper.make_node("Split", ["c2"], ["t0", "t1"], axis=0, num_outputs=2)],
        "then", [], [_vi("t0", [4]), _vi("t1", [4])],
        [c, numpy_helper.from_array(np.array(2.0, np.float32), "two")])
    else_g = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["e0"]), helper.make_node("Identity", ["x"], ["e1"])], "else", [],
        [_vi("e0", [4]), _vi("e1", [4])])
    nodes = [
        helper.make_node("Shape", ["x"], ["sx"]),
        helper.make_node("ReduceProd", ["sx"], ["n"], keepdims=0),
        helper.make_node("Equal", ["n", "four"], ["cond"]),
        helper.make_node("If", ["cond"], ["a", "b"], then_branch=then_g, else_branch=else_g),
        helper.make_node("Add", ["a", "x"], ["ax"]),
        helper.make_node("Mul", ["b", "ax"], ["y"]),
    ]
    return _model(nodes, [_vi("x", [4])], [_vi("y", [4])], [numpy_helper.from_array(np.array(4, np.int64), "four")],
                  opset=18)


def build_identity_chain(n=20):
    """Identity chains, on constants and on the input: everything but the input's path folds away."""
    nodes, x, c = [], "x", "c"
    for k in range(n):
        nodes.append(helper.make_node("Identity", [x], [f"i{k}"]))
        nodes.append(helper.make_node("Identity", [c], [f"c{k}"]))
        x, c = f"i{k}", f"c{k}"
    nodes.append(helper.make_node("Add", [x, c], ["y"]))
    return _model(nodes, [_vi("x", [2, 3])], [_vi("y", [2, 3])],
                  [numpy_helper.from_array(np.ones((2, 3), np.float32), "c")])


def build_shape_of_constant():
    """Shape, Size and Shape(start) of constants and of statically shaped activations feeding a Reshape."""
    w = numpy_helper.from_array(np.ones((4, 6), np.float32), "w")
    nodes = [
        helper.make_node("Shape", ["w"], ["sw"]),
        helper.make_node("Shape", ["x"], ["sx"], start=1),
        helper.make_node("Size", ["w"], ["nw"]),
        helper.make_node("ReduceSum", ["sw"], ["tot"], keepdims=0),
        helper.make_node("Cast", ["tot"], ["totf"], to=TensorProto.FLOAT),
        helper.make_node("Cast", ["nw"], ["nwf"], to=TensorProto.FLOAT),
        helper.make_node("MatMul", ["x", "w"], ["xw"]),
        helper.make_node("Mul", ["xw", "nwf"], ["m0"]),
        helper.make_node("Add", ["m0", "totf"], ["m"]),
        helper.make_node("Concat", ["minus1", "sx"], ["target"], axis=0),
        helper.make_node("Reshape", ["m", "target"], ["y"]),
    ]
    return _model(nodes, [_vi("x", [2, 4])], [_vi("y", [3, 4])],
                  [w, numpy_helper.from_array(np.array([-1], np.int64), "minus1")])


def build_loop_body_shapes():
    """A Loop whose body computes a Reshape target from the shape of an outer tensor: foldable
    once shapes inside the body are known."""
    body = helper.make_graph(
        [
            helper.make_node("Shape", ["outer"], ["s"]),
            helper.make_node("Gather", ["s", "one_b"], ["d"], axis=0),
            helper.make_node("Unsqueeze", ["d", "ax0_b"], ["du"]),
            helper.make_node("Concat", ["m1_b", "du"], ["tgt"], axis=0),
            helper.make_node("Reshape", ["acc_in", "tgt"], ["r"]),
            helper.make_node("Add", ["r", "outer"], ["acc_out"]),
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
        ],
        "body",
        [_vi("i", [], TensorProto.INT64), _vi("cond_in", [], TensorProto.BOOL), _vi("acc_in", [2, 3])],
        [_vi("cond_out", [], TensorProto.BOOL), _vi("acc_out", [2, 3])],
        [numpy_helper.from_array(np.array(1, np.int64), "one_b"), numpy_helper.from_array(np.array([0], np.int64), "ax0_b"),
         numpy_helper.from_array(np.array([-1], np.int64), "m1_b")],
    )
    nodes = [
        helper.make_node("Relu", ["x"], ["outer"]),
        helper.make_node("Loop", ["trips", "true", "x"], ["y"], body=body),
    ]
    return _model(nodes, [_vi("x", [2, 3])], [_vi("y", [2, 3])],
                  [numpy_helper.from_array(np.array(3, np.int64), "trips"), numpy_helper.from_array(np.array(True), "true")])


def count_all_nodes(path: str) -> int:
    m = onnx.load(path, load_external_data=False)

    def count(g):
        n = len(g.node)
        for node in g.node:
            for a in node.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    n += count(a.g)
                n += sum(count(sg) for sg in a.graphs)
        return n

    return count(m.graph)


def generated_feed(path: str, seed: int = 0, dynamic: int = 1, int_scalar: int = 1):
    """Random inputs; dynamic dims (and -1) take ``dynamic``, integer scalars ``int_scalar``."""
    m = onnx.load(path, load_external_data=False)
    inits = {t.name for t in m.graph.initializer}
    rng = np.random.default_rng(seed)
    feed = {}
    for vi in m.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else dynamic for d in tt.shape.dim]
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type)
        if dtype.kind == "f":
            feed[vi.name] = (rng.random(shape) * 2 - 1).astype(dtype)
        else:
            feed[vi.name] = np.full(shape, int_scalar if not shape else 1, dtype)
    return feed


def working_feed(sess, path: str):
    """Generated inputs the model runs on: real models need more than 1 for their dynamic dims
    (audio frames, image sides) and a sample rate for an integer scalar input; (feed, outputs) or None."""
    names = [o.name for o in sess.get_outputs()]
    for dynamic in (1, 64, 512):
        for int_scalar in (1, 16000):
            feed = generated_feed(path, dynamic=dynamic, int_scalar=int_scalar)
            try:
                return feed, sess.run(names, feed)
            except Exception:  # noqa: BLE001
                continue
    return None


def loads_and_matches(reference: str, candidate: str) -> str:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 4
    try:
        got_sess = ort.InferenceSession(candidate, so, providers=["CPUExecutionProvider"])
    except Exception:  # noqa: BLE001
        return "no load"
    ref_sess = ort.InferenceSession(reference, so, providers=["CPUExecutionProvider"])
    names = [o.name for o in ref_sess.get_outputs()]
    found = working_feed(ref_sess, reference)
    if found is None:
        return "loads (no inputs it runs on)"
    feed, want = found
    try:
        got = got_sess.run(names, feed)
    except Exception:  # noqa: BLE001
        return "no run"
    for w, g in zip(want, got):
        if np.shape(w) != np.shape(g) or not np.allclose(g, w, rtol=1e-3, atol=1e-4):
            return "differs"
    return "yes"


def extra_models(paths) -> list:
    """(label, path) for every .onnx file named or inside a folder named; absent paths are skipped."""
    found = []
    for path in paths:
        if os.path.isdir(path):
            found += [(f"{n[:-len('.onnx')]}", os.path.join(path, n)) for n in sorted(os.listdir(path)) if n.endswith(".onnx")]
        elif os.path.isfile(path):
            found.append((os.path.basename(path)[:-len(".onnx")], path))
        else:
            print(f"({path} not found; skipped)", file=sys.stderr)
    return found


def table(runs: int, models_from=(), only_extra: bool = False) -> bool:
    """Node counts after folding for every tool, with whether each result loads and matches."""
    light = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
    work = tempfile.mkdtemp(prefix="bench_sanitize_table_")
    models = []
    for name in sorted(os.listdir(light)) if os.path.isdir(light) and not only_extra else []:
        if name.endswith(".onnx"):
            models.append((name[len("light_"):-len(".onnx")], os.path.join(light, name)))
    for label, build in (("built: If split (silero-like)", build_if_split), ("built: identity chains", build_identity_chain),
                         ("built: Shape/Size of constants", build_shape_of_constant),
                         ("built: Loop body shapes", build_loop_body_shapes),
                         ("built: shape chain 10x64", lambda: build_shape_chain(10, 64))):
        path = os.path.join(work, re.sub(r"[^A-Za-z0-9]+", "_", label.split(": ")[1]) + ".onnx")
        onnx.save_model(build(), path)
        if not only_extra:
            models.append((label, path))
    models += extra_models(models_from)
    toolkit, poly, slim = find_tool("toolkit"), find_tool("polygraphy"), find_tool("onnxslim")
    tools = [("polygraphy", lambda m, o: [poly, "surgeon", "sanitize", m, "--fold-constants", "-o", o])] if poly else []
    tools += [("toolkit", lambda m, o: [toolkit, "surgeon", "sanitize", m, "--fold-constants", "-o", o]),
              ("toolkit --optimize", lambda m, o: [toolkit, "surgeon", "sanitize", m, "--fold-constants", "--optimize",
                                                   "-o", o])]
    if slim:
        tools += [("onnxslim fold", lambda m, o: [slim, m, o, "--skip-optimizations", "graph_fusion",
                                                  "subexpression_elimination", "weight_tying"]),
                  ("onnxslim", lambda m, o: [slim, m, o])]
    header = ["model", "nodes"] + [t for t, _ in tools] + ["toolkit s", "polygraphy s", "time ratio"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    ok = True
    for label, path in models:
        row = [label, str(count_all_nodes(path))]
        secs = {}
        for tool, cmd in tools:
            try:
                # timed tools run N times (median); the others once, for their node counts
                t, _, out, _ = run_tool(lambda o, cmd=cmd: cmd(path, o), runs if tool in ("toolkit", "polygraphy") else 1)
            except SystemExit as exc:
                row.append("fails")
                print(f"  ({tool} failed on {label}: {str(exc).splitlines()[0]})", file=sys.stderr)
                continue
            verdict = loads_and_matches(path, out)
            row.append(f"{count_all_nodes(out)} ({verdict})")
            secs[tool] = t
            if tool.startswith("toolkit") and verdict != "yes":
                ok = False
            shutil.rmtree(os.path.dirname(out), ignore_errors=True)
        tk, pg = secs.get("toolkit", float("nan")), secs.get("polygraphy", float("nan"))
        row += [f"{tk:.2f}", f"{pg:.2f}", f"{tk / pg:.2f}x" if pg == pg and pg > 0 else "-"]
        print("| " + " | ".join(row) + " |", flush=True)
    shutil.rmtree(work, ignore_errors=True)
    return ok


def validation_cost(runs: int, blocks: int, channels: int) -> None:
    """In-process: sanitize(fold_constants=True) with and without validation, minimum of N
    interleaved runs (the machine is shared; minima are the least disturbed)."""
    from toolkit.surgeon.sanitize import sanitize

    work = tempfile.mkdtemp(prefix="bench_sanitize_validation_")
    chain = os.path.join(work, "chain.onnx")
    onnx.save_model(build_shape_chain(blocks, channels), chain)
    light = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
    paths = [("shape chain", chain)] + [(n, os.path.join(light, f"light_{n}.onnx")) for n in ("densenet121", "resnet50")]
    print(f"  {'model':<14} {'validated s':>12} {'not validated s':>16} {'cost':>7}")
    for label, path in paths:
        best = {True: float("inf"), False: float("inf")}
        for _ in range(runs):
            for validate in (False, True):
                m = onnx.load(path)
                t0 = time.perf_counter()
                sanitize(m, fold_constants=True, validate=validate)
                best[validate] = min(best[validate], time.perf_counter() - t0)
        print(f"  {label:<14} {best[True]:12.2f} {best[False]:16.2f} {best[True] / best[False] - 1:+7.0%}")
    shutil.rmtree(work, ignore_errors=True)


def interleaved(runs: int, names) -> None:
    """Time ratios on a shared machine: toolkit and polygraphy run in turn, model by model, round
    by round (load changes hit both alike); medians and the spread of the per-round ratios."""
    light = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
    tools = {"toolkit": find_tool("toolkit"), "polygraphy": find_tool("polygraphy")}
    times: dict = {}
    for _ in range(runs):
        for name in names:
            path = name if os.path.exists(name) else os.path.join(light, f"light_{name}.onnx")
            for tool, exe in tools.items():
                times.setdefault((name, tool), []).append(
                    run_tool(lambda out: [exe, "surgeon", "sanitize", path, "--fold-constants", "-o", out], 1)[0])
    print("| model | toolkit s | polygraphy s | ratio (medians) | per-round ratios |")
    print("|---|---|---|---|---|")
    for name in names:
        ours, theirs = times[(name, "toolkit")], times[(name, "polygraphy")]
        ratios = [a / b for a, b in zip(ours, theirs)]
        print(f"| {os.path.basename(name)} | {statistics.median(ours):.2f} | {statistics.median(theirs):.2f} | "
              f"{statistics.median(ours) / statistics.median(theirs):.2f}x | {min(ratios):.2f}x-{max(ratios):.2f}x |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="runs per tool and model (median reported)")
    parser.add_argument("--blocks", type=int, default=30)
    parser.add_argument("--channels", type=int, default=1024)
    parser.add_argument("--no-polygraphy", action="store_true")
    parser.add_argument("--table", action="store_true",
                        help="node counts of every tool (polygraphy, toolkit, toolkit --optimize, onnxslim if "
                        "installed) on onnx's light models and models built here, with loads-and-matches")
    parser.add_argument("--models", nargs="+", default=[], metavar="PATH",
                        help="with --table: more models (.onnx files, or folders of them) as extra rows; "
                        "paths that do not exist are skipped")
    parser.add_argument("--only-models", action="store_true",
                        help="with --table --models: only those rows (no light or built models)")
    parser.add_argument("--validation-cost", action="store_true",
                        help="in-process time of sanitize with and without validating the folded model")
    parser.add_argument("--interleaved", nargs="+", metavar="MODEL",
                        help="time ratios only, toolkit and polygraphy in turn (--runs rounds): light model names "
                        "(densenet121, inception_v2, ...) or .onnx paths")
    args = parser.parse_args()
    if args.interleaved:
        interleaved(args.runs, args.interleaved)
        return 0
    if args.validation_cost:
        validation_cost(args.runs, args.blocks, args.channels)
        return 0
    if args.table:
        return 0 if table(args.runs, args.models, args.only_models) else 1

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

#!/usr/bin/env python3
"""Conformance sweep of toolkit's model-writing commands over ONNX's own backend node test models.

Usage: python scripts/sweep_surgeon.py TOOL OUTDIR [--every N] [--offset K] [--match REGEX] [--jobs J]
       [--no-reduce]

For every test case (every N-th from K, or those whose name matches REGEX) whose model ONNX-Runtime
loads, each command writes a model and the written model must load in ONNX-Runtime:

- ``surgeon sanitize --fold-constants``: the result must also give the original's outputs on the
  case's own inputs (where ONNX-Runtime runs the original on them), within 1e-4;
- ``surgeon extract`` of each model with two or more nodes at an interior tensor, both ways: the
  head (``--outputs T``) and the tail (``--inputs T:auto:auto`` and the model's own inputs);
- ``debug reduce --fail-regex "Op: OP" --check TOOL inspect model polygraphy_debug.onnx --mode=basic``,
  OP being the op type of the model's middle node.

A command that refuses a case (exit 2/3/4 with an ``error:`` line) is counted, not judged; a command
that exits 0 and writes a model ONNX-Runtime cannot load, or that changes outputs, is a failure.
Prints a summary, writes OUTDIR/results.json, and exits 1 when anything is broken.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import warnings
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import onnx


def _ort():
    import onnxruntime as ort

    ort.set_default_logger_severity(4)
    return ort


def loads(path: str):
    """None if ONNX-Runtime loads the model, else the first line of its error."""
    ort = _ort()
    try:
        ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    except Exception as exc:  # noqa: BLE001 - ORT's own exception types
        return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
    return None


def run(path: str, feed):
    ort = _ort()
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, feed)))


def same(a, b) -> bool:
    if isinstance(a, list) or isinstance(b, list):  # sequence outputs
        return isinstance(a, list) and isinstance(b, list) and len(a) == len(b) and all(map(same, a, b))
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        return False
    if a.dtype.kind in "fc":
        return bool(np.allclose(a.astype(np.complex128 if a.dtype.kind == "c" else np.float64),
                                b.astype(np.complex128 if b.dtype.kind == "c" else np.float64),
                                rtol=1e-4, atol=1e-4, equal_nan=True))
    return bool(np.array_equal(a, b))


def interior_tensor(model):
    """(tensor, op of its producer) in the middle of the top graph: a float/int tensor computed by
    a node, not a graph output; None for one-node models."""
    g = model.graph
    if len(g.node) < 2:
        return None
    outputs = {o.name for o in g.output}
    inferred = onnx.shape_inference.infer_shapes(model)
    typed = {vi.name for vi in inferred.graph.value_info if vi.type.HasField("tensor_type")}
    order = list(range(len(g.node)))
    mid = len(order) // 2
    for i in sorted(order, key=lambda k: abs(k - mid)):
        node = g.node[i]
        if node.op_type in ("Constant",):
            continue
        for o in node.output:
            if o and o not in outputs and o in typed:
                return o, node.op_type
    return None


class Sweep:
    def __init__(self, tool: str, out: str, reduce: bool):
        self.tool = tool
        self.out = out
        self.reduce = reduce

    def sh(self, *args, cwd):
        try:
            p = subprocess.run([self.tool, *args], cwd=cwd, capture_output=True, text=True, timeout=300)
        except subprocess.TimeoutExpired:
            return 124, "timed out"
        return p.returncode, (p.stderr.strip().splitlines() or [""])[-1][:300]

    def judge_written(self, rec, key, rc_msg, path, cwd):
        rc, msg = rc_msg
        if rc != 0:
            rec[key] = ["refused", rc, msg] if rc in (2, 3, 4) else ["crashed", rc, msg]
            return
        err = loads(os.path.join(cwd, path))
        rec[key] = ["ok"] if err is None else ["broken", 0, err]

    def one(self, case):
        d = os.path.join(self.out, case.name)
        os.makedirs(d, exist_ok=True)
        rec = {"case": case.name}
        m = case.model
        m.ir_version = min(m.ir_version, 10)
        path = os.path.join(d, "model.onnx")
        onnx.save(m, path)
        if loads(path) is not None:
            rec["skip"] = "ONNX-Runtime does not load the original"
            return rec
        feed = expected = None
        ins, _outs = case.data_sets[0] if case.data_sets else ([], [])
        if ins and all(isinstance(x, np.ndarray) for x in ins):
            feed = dict(zip([i.name for i in m.graph.input], ins))
            try:
                expected = run(path, feed)
            except Exception:  # noqa: BLE001 - the original does not run on its inputs
                expected = None

        self.judge_written(rec, "sanitize", self.sh("surgeon", "sanitize", "model.onnx", "--fold-constants", "-o",
                                                    "f.onnx", cwd=d), "f.onnx", d)
        if rec["sanitize"] == ["ok"] and expected is not None:
            try:
                got = run(os.path.join(d, "f.onnx"), feed)
                bad = [n for n in expected if n not in got or not same(expected[n], got[n])]
            except Exception as exc:  # noqa: BLE001
                bad = [f"run failed: {str(exc).splitlines()[0][:200]}"]
            if bad:
                rec["sanitize"] = ["mismatch", 0, f"output {bad[0]}"]

        cut = interior_tensor(m)
        if cut is not None:
            tensor, op = cut
            self.judge_written(rec, "extract_head", self.sh("surgeon", "extract", "model.onnx", "-o", "head.onnx",
                                                            "--outputs", tensor, cwd=d), "head.onnx", d)
            inits = {t.name for t in m.graph.initializer}
            own = [f"{i.name}:auto:auto" for i in m.graph.input if i.name not in inits]
            self.judge_written(rec, "extract_tail", self.sh("surgeon", "extract", "model.onnx", "-o", "tail.onnx",
                                                            "--inputs", f"{tensor}:auto:auto", *own, cwd=d),
                               "tail.onnx", d)
            if self.reduce:
                self.judge_written(rec, "reduce", self.sh(
                    "debug", "reduce", "model.onnx", "-o", "r.onnx", "--fail-regex", f"Op: {op}", "--check",
                    self.tool, "inspect", "model", "polygraphy_debug.onnx", "--mode=basic", cwd=d), "r.onnx", d)
        return rec


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tool")
    ap.add_argument("out")
    ap.add_argument("--every", type=int, default=1)
    ap.add_argument("--offset", type=int, default=0)
    ap.add_argument("--match", default=None, help="only cases whose name matches this regex")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--no-reduce", action="store_true")
    a = ap.parse_args(argv)
    warnings.filterwarnings("ignore")
    from onnx.backend.test.case.node import collect_testcases

    cases = collect_testcases(None)
    if a.match:
        cases = [c for c in cases if re.search(a.match, c.name)]
    cases = cases[a.offset :: a.every]
    os.makedirs(a.out, exist_ok=True)
    sweep = Sweep(a.tool, a.out, not a.no_reduce)

    def safe(c):
        try:
            return sweep.one(c)
        except Exception as exc:  # noqa: BLE001 - a case that cannot even be prepared
            return {"case": c.name, "skip": f"prepare: {exc}"}

    with ThreadPoolExecutor(a.jobs) as ex:
        res = list(ex.map(safe, cases))
    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump(res, f, indent=1)
    judged = [r for r in res if "skip" not in r]
    print(f"cases {len(res)}; ONNX-Runtime loads {len(judged)}")
    broken = 0
    for key in ("sanitize", "extract_head", "extract_tail", "reduce"):
        recs = [r for r in judged if key in r]
        counts = {}
        for r in recs:
            counts[r[key][0]] = counts.get(r[key][0], 0) + 1
        bad = [r for r in recs if r[key][0] in ("broken", "mismatch", "crashed")]
        broken += len(bad)
        print(f"{key:<13} judged {len(recs):4d}  " + "  ".join(f"{k} {v}" for k, v in sorted(counts.items())))
        for r in bad[:8]:
            print(f"  {key}: {r['case']}: {r[key]}")
    print(f"broken outputs: {broken}")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())

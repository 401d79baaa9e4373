#!/usr/bin/env python3
"""Benchmark ``toolkit debug llm`` on a large decoder stored with external data (ORT vs ORT).

Builds a decoder of about 600 MB of float32 weights (``tests/llm/llm_decoders.py``'s builder, scaled
up: hidden 1024, 11 layers, vocab 32000) saved with external data, then runs, each in a process of
its own and measured by its peak RSS and wall time:

1. ``toolkit debug llm MODEL --compare onnxrt onnxrt --prompt-ids ... --steps N --json``;
2. a bare script doing the same teacher-forced loop with two ONNX-Runtime sessions (no comparison
   machinery): both sessions fed the reference's token and cache, logits and presents compared with
   numpy.

The bars: peak RSS of (1) at most 2.5x the weights; time per step of (1) within 1.5x that of (2)
(both include creating the two sessions). Usage::

    nice python scripts/bench_llm.py [--dir DIR] [--steps 64] [--hidden 1024] [--layers 11] [--vocab 32000]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
PROMPT = [11, 250, 31, 4, 999, 7, 123, 42]

BARE = r"""
import sys, time
import numpy as np, onnx, onnxruntime as ort
from toolkit.llm.io import discover
from toolkit.llm.steps import cache_of, last_logits, step_feed
path, steps, prompt = sys.argv[1], int(sys.argv[2]), [int(t) for t in sys.argv[3].split()]
start = time.perf_counter()
io = discover(onnx.load(path, load_external_data=False))
ref = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
test = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
names = [o.name for o in ref.get_outputs()]
tokens, cache = prompt, None
for step in range(steps):
    feed = step_feed(io, tokens, cache)
    r = dict(zip(names, ref.run(None, feed)))
    t = dict(zip(names, test.run(None, feed)))
    ok = all(np.allclose(t[n], r[n], atol=1e-5, rtol=1e-5) for n in names)
    tokens, cache = [int(np.argmax(last_logits(io, r)))], cache_of(io, r, len(prompt) + step)
print(time.perf_counter() - start)
"""


def measured(cmd, env=None):
    """(wall seconds, peak RSS bytes, stdout) of ``cmd`` run as a child process."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, env=env, cwd=REPO)
    out = proc.stdout.read() if proc.stdout else b""
    _pid, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return time.perf_counter() - start, usage.ru_maxrss * 1024, out.decode(), proc.returncode


def build(folder: str, args) -> tuple:
    sys.path.insert(0, os.path.join(REPO, "tests", "llm"))
    import onnx
    from llm_decoders import build_decoder

    path = os.path.join(folder, "big_decoder.onnx")
    model = build_decoder(layers=args.layers, hidden=args.hidden, heads=16, kv_heads=16, head_size=args.hidden // 16,
                          vocab=args.vocab, max_pos=512)
    weights = sum(t.ByteSize() for t in model.graph.initializer)
    onnx.save(model, path, save_as_external_data=True, all_tensors_to_one_file=True, location="big_decoder.data",
              size_threshold=1024)
    return path, weights


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dir", default=None)
    p.add_argument("--steps", type=int, default=64)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--layers", type=int, default=11)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--build-only", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    folder = args.dir or tempfile.mkdtemp(prefix="bench-llm-")
    if args.build_only:
        print(json.dumps(build(folder, args)))
        return 0
    # built in a child: Linux counts a child's memory before exec in its peak RSS, so this process
    # stays small (it imports neither numpy nor onnx)
    env = dict(os.environ, PYTHONPATH=REPO)
    path, weights = json.loads(subprocess.check_output(
        [sys.executable, __file__, "--build-only", "--dir", folder, "--hidden", str(args.hidden), "--layers",
         str(args.layers), "--vocab", str(args.vocab)], env=env))
    ids = " ".join(map(str, PROMPT))
    tool_s, tool_rss, out, code = measured([sys.executable, "-m", "toolkit", "debug", "llm", path, "--compare", "onnxrt",
                                            "onnxrt", "--prompt-ids", ids, "--steps", str(args.steps), "--json"], env)
    record = json.loads(out)
    bare_s, bare_rss, bare_out, _ = measured([sys.executable, "-c", BARE, path, str(args.steps), ids], env)
    steps = record["steps_checked"]
    result = {
        "weights_mb": round(weights / 2**20, 1), "steps": steps, "exit_code": code,
        "debug_llm": {"wall_s": round(tool_s, 2), "loop_s": record["seconds"], "s_per_step": round(record["seconds"] / steps, 4),
                      "peak_rss_mb": round(tool_rss / 2**20, 1), "rss_over_weights": round(tool_rss / weights, 2)},
        "bare": {"wall_s": round(bare_s, 2), "loop_s": round(float(bare_out.strip()), 3),
                 "s_per_step": round(float(bare_out.strip()) / args.steps, 4), "peak_rss_mb": round(bare_rss / 2**20, 1)},
    }
    result["time_ratio"] = round(result["debug_llm"]["s_per_step"] / result["bare"]["s_per_step"], 2)
    print(json.dumps(result, indent=2))
    ok = result["debug_llm"]["rss_over_weights"] <= 2.5 and result["time_ratio"] <= 1.5 and code == 0
    print("bars met" if ok else "bars NOT met", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

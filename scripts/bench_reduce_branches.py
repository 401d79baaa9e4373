#!/usr/bin/env python
"""Measure `toolkit debug reduce` on a model whose work sits in a top-level If, with the
taken branch inlined (default) and kept whole (``--no-inline-branches``).

Default model: silero-vad (its decoder is one If on ``sr == 16000``), given by path. Each
run happens in a fresh copy of the model's folder. Two checks:

    toolkit debug reduce MODEL -o r.onnx --compare onnxrt onnxrt:fp16 --load-inputs I.json
    toolkit debug reduce MODEL -o r.onnx --load-inputs I.json --fail-regex "Op: LSTM" \\
        --check toolkit inspect model polygraphy_debug.onnx --mode=basic

(inputs: ``toolkit run MODEL --onnxrt --val-range sr:[16000,16000] --input-shapes
input:[1,512] --save-inputs I.json``). Prints checks, the reduce's own seconds, wall
seconds and the result's node count for each, the median of ``--runs``.

    python scripts/bench_reduce_branches.py /path/to/silero_vad.onnx [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

CASES = {
    "compare": ["--compare", "onnxrt", "onnxrt:fp16"],
    "check": ["--fail-regex", "Op: LSTM", "--check", "toolkit", "inspect", "model", "polygraphy_debug.onnx",
              "--mode=basic"],
}
INPUTS = ["--val-range", "sr:[16000,16000]", "--input-shapes", "input:[1,512]"]


def _toolkit(*args: str, cwd: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "toolkit", *args]
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=False)


def _once(model: str, case: str, inline: bool) -> dict:
    folder = tempfile.mkdtemp(prefix="bench-branches-")
    try:
        shutil.copy(model, folder)
        name = os.path.basename(model)
        made = _toolkit("run", name, "--onnxrt", *INPUTS, "--save-inputs", "I.json", cwd=folder)
        if made.returncode:
            raise SystemExit(made.stderr)
        extra = [] if inline else ["--no-inline-branches"]
        start = time.perf_counter()
        res = _toolkit("debug", "reduce", name, "-o", "r.onnx", "--load-inputs", "I.json", "--json", *extra,
                       *CASES[case], cwd=folder)
        wall = time.perf_counter() - start
        summary = json.loads(res.stdout)
        return {"checks": summary["checks"], "seconds": summary["seconds"], "wall": wall,
                "nodes": summary["nodes_after"], "result": summary["result_nodes"][:1],
                "inlined": len(summary.get("inlined_branches", []))}
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    print("| case | If branches | checks | reduce s | wall s | result nodes | inlined Ifs | result |")
    print("|---|---|---|---|---|---|---|---|")
    for case in CASES:
        for inline in (True, False):
            runs = [_once(args.model, case, inline) for _ in range(args.runs)]
            first = runs[0]
            print(f"| {case} | {'inlined' if inline else 'kept whole'} | {first['checks']} | "
                  f"{statistics.median(r['seconds'] for r in runs):.2f} | {statistics.median(r['wall'] for r in runs):.2f} | "
                  f"{first['nodes']} | {first['inlined']} | {', '.join(first['result'])} |")


if __name__ == "__main__":
    main()

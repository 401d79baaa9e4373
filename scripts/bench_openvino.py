#!/usr/bin/env python3
"""Overhead of `toolkit run MODEL --openvino` against a bare OpenVINO script on the same model.

Usage: python scripts/bench_openvino.py [--runs N] [--model PATH] [--shape x:[1,3,640,640]]

Both contenders are fresh processes, run interleaved, timed end to end (wall time, as a user
sees it) and by CPU time (user + system of the process and its threads, steadier on a busy
machine); min and median are reported, and their ratios:

- bare: ``import openvino``, read the model, reshape it to the shape given, compile it on the
  CPU, one seeded random float32 feed, one inference;
- toolkit: ``toolkit run MODEL --openvino --input-shapes SHAPE`` (generated input, one
  iteration, the comparison-free run).

Also in process (imports warm): the bare read+compile+infer against ``toolkit.run.execute``.
The package is byte-compiled first (``compileall``), as a pip install does. Default model:
/work/models/ppocr_det.onnx (the PP-OCRv4 detector) at 1x3x640x640.
"""

from __future__ import annotations

import argparse
import compileall
import os
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

BARE_SCRIPT = """
import sys
import numpy as np
import openvino as ov
name, dims = sys.argv[2].split(":")
shape = [int(d) for d in dims.strip("[]").split(",")]
core = ov.Core()
model = core.read_model(sys.argv[1])
model.reshape({name: shape})
compiled = core.compile_model(model, "CPU")
rng = np.random.default_rng(1)
compiled({name: rng.random(shape, dtype=np.float32)})
"""


def run_once(cmd, cwd) -> tuple:
    """(wall seconds, CPU seconds: user + system of the child and its threads)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert proc.stderr is not None
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{err.decode(errors='replace')}")
    return seconds, usage.ru_utime + usage.ru_stime


def interleaved(cmds: dict, runs: int, cwd: str) -> tuple:
    wall: dict = {k: [] for k in cmds}
    cpu: dict = {k: [] for k in cmds}
    for _ in range(runs):
        for key, cmd in cmds.items():
            w, c = run_once(cmd, cwd)
            wall[key].append(w)
            cpu[key].append(c)
    return wall, cpu


def in_process(model: str, shape: str, runs: int) -> dict:
    import numpy as np
    import openvino as ov

    from toolkit.run import RunOptions, execute

    name, dims = shape.split(":")
    dims_list = [int(d) for d in dims.strip("[]").split(",")]

    def bare():
        core = ov.Core()
        m = core.read_model(model)
        m.reshape({name: dims_list})
        compiled = core.compile_model(m, "CPU")
        compiled({name: np.random.default_rng(1).random(dims_list, dtype=np.float32)})

    def ours():
        execute(RunOptions(model, runners=["openvino"], input_shapes=[shape], seed=1))

    bare()
    ours()  # warm both
    times: dict = {"bare": [], "toolkit": []}
    for _ in range(runs):
        for key, fn in (("bare", bare), ("toolkit", ours)):
            t0 = time.perf_counter()
            fn()
            times[key].append(time.perf_counter() - t0)
    return times


def stats(vals) -> str:
    return f"min {min(vals):.3f} s, median {statistics.median(vals):.3f} s"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=11)
    ap.add_argument("--model", default="/work/models/ppocr_det.onnx")
    ap.add_argument("--shape", default="x:[1,3,640,640]")
    args = ap.parse_args()
    compileall.compile_dir(os.path.join(REPO, "toolkit"), quiet=1)
    model = os.path.abspath(args.model)
    with tempfile.TemporaryDirectory() as tmp:
        bare_path = os.path.join(tmp, "bare.py")
        with open(bare_path, "w", encoding="utf-8") as fh:
            fh.write(BARE_SCRIPT)
        cmds = {
            "bare": [sys.executable, bare_path, model, args.shape],
            "toolkit": [sys.executable, "-m", "toolkit", "run", model, "--openvino", "--input-shapes", args.shape],
        }
        times, cpu = interleaved(cmds, args.runs, tmp)
    print(f"model: {args.model} ({args.shape}), {args.runs} interleaved runs of fresh processes")
    for label, data in (("wall", times), ("CPU (user+sys)", cpu)):
        print(f"  {label}:")
        print(f"    bare OpenVINO script      : {stats(data['bare'])}")
        print(f"    toolkit run --openvino    : {stats(data['toolkit'])}")
        med = statistics.median(data["toolkit"]) / statistics.median(data["bare"])
        low = min(data["toolkit"]) / min(data["bare"])
        print(f"    ratio: {med:.2f}x (median), {low:.2f}x (min)")
    warm = in_process(model, args.shape, max(3, args.runs // 2))
    med_w = statistics.median(warm["toolkit"]) / statistics.median(warm["bare"])
    print(f"  in process (warm imports): bare {stats(warm['bare'])}; toolkit.run.execute {stats(warm['toolkit'])}; "
          f"ratio {med_w:.2f}x (median)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

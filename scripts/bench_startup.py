#!/usr/bin/env python3
"""Start-up time of `toolkit --help` next to `polygraphy --help` (when installed).

Usage: python scripts/bench_startup.py [--runs N]

Each command is run N times as a fresh process (after one warm-up run, so the OS file
cache is warm for both); the median wall time is reported, with the ratio.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time


def time_command(cmd, runs: int) -> float:
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    samples = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def find_tool(name: str):
    here = os.path.join(os.path.dirname(sys.executable), name)
    return here if os.path.exists(here) else shutil.which(name)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()

    toolkit = find_tool("toolkit")
    cmds = {"toolkit --help": [toolkit, "--help"] if toolkit else [sys.executable, "-m", "toolkit", "--help"]}
    cmds["python -m toolkit --help"] = [sys.executable, "-m", "toolkit", "--help"]
    cmds["toolkit inspect model --help"] = cmds["toolkit --help"][:-1] + ["inspect", "model", "--help"]
    poly = find_tool("polygraphy")
    if poly:
        cmds["polygraphy --help"] = [poly, "--help"]
    cmds["python -c pass (interpreter floor)"] = [sys.executable, "-c", "pass"]

    times = {name: time_command(cmd, args.runs) for name, cmd in cmds.items()}
    width = max(len(n) for n in times)
    for name, t in times.items():
        print(f"{name:<{width}}  {t * 1000:7.1f} ms")
    if "polygraphy --help" in times:
        ratio = times["toolkit --help"] / times["polygraphy --help"]
        print(f"\nratio toolkit/polygraphy (--help): {ratio:.2f}x  (target < 0.5x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

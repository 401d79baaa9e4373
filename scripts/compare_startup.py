#!/usr/bin/env python3
"""Start-up of `--help` for two source trees of toolkit, side by side.

Usage: python scripts/compare_startup.py BEFORE_TREE AFTER_TREE [--runs N]

Each tree is a checkout (for instance `git archive <commit> | tar -x -C /tmp/base`); every command
runs as `python -m toolkit ... --help` with PYTHONPATH set to the tree, the two trees interleaved
run by run so that a busy machine slows both alike; the medians are printed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

COMMANDS = [["--help"], ["run", "--help"], ["debug", "reduce", "--help"], ["inspect", "model", "--help"]]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before")
    parser.add_argument("after")
    parser.add_argument("--runs", type=int, default=21)
    args = parser.parse_args()
    trees = {"before": args.before, "after": args.after}
    times: dict = {(t, i): [] for t in trees for i in range(len(COMMANDS))}
    for _ in range(args.runs):
        for i, cmd in enumerate(COMMANDS):
            for name, tree in trees.items():
                env = dict(os.environ, PYTHONPATH=os.path.abspath(tree), COLUMNS="100")
                t0 = time.perf_counter()
                subprocess.run([sys.executable, "-m", "toolkit", *cmd], env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, check=False)
                times[(name, i)].append(time.perf_counter() - t0)
    for i, cmd in enumerate(COMMANDS):
        before, after = (statistics.median(times[(t, i)]) * 1000 for t in ("before", "after"))
        print(f"toolkit {' '.join(cmd):26s} before {before:6.1f} ms   after {after:6.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())

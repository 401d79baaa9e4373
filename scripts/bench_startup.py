#!/usr/bin/env python3
"""Start-up of every toolkit command, and `run MODEL --onnxrt` next to Polygraphy and a bare ONNX-Runtime script.

Usage: python scripts/bench_startup.py [--runs N] [--models A.onnx B.onnx ...] [--skip-help] [--skip-run]

1. Every command's `--help`: wall time (median of N fresh processes) and import time (the sum of
   `python -X importtime`'s self times, the least of 5: the machine's load only adds to it), next
   to `polygraphy --help`.
2. For each model: `toolkit run MODEL --onnxrt`, `polygraphy run MODEL --onnxrt` (when installed)
   and a bare script (numpy + onnxruntime: one session, inputs of dynamic dims 1, one inference),
   and, where torch is installed, Polygraphy with torch hidden (as installed, it imports torch),
   in paired rounds (each round runs them all, in a rotating order, so that a busy machine slows
   all alike); the medians, and the median of the per-round ratios, of wall time and of CPU time
   (user + system: what a busy machine changes least). Also whether the toolkit run
   imported onnx or ml_dtypes, and its import time.

Every process gets compiled bytecode, as a normal install has (PYTHONDONTWRITEBYTECODE is dropped
and PYTHONPYCACHEPREFIX points at a temporary folder, filled by one warm-up run of each command).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HELP_COMMANDS = [
    [], ["run"], ["inspect", "model"], ["inspect", "data"], ["convert"], ["surgeon", "extract"],
    ["surgeon", "sanitize"], ["data", "to-input"], ["data", "merge"], ["debug", "reduce"], ["debug", "precision"],
]

BARE = '''import sys
import numpy as np
import onnxruntime as ort

TYPES = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(double)": np.float64,
         "tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(bool)": np.bool_, "tensor(uint8)": np.uint8}
sess = ort.InferenceSession(sys.argv[1], providers=["CPUExecutionProvider"])
feed = {i.name: np.random.rand(*[d if isinstance(d, int) else 1 for d in i.shape]).astype(TYPES[i.type])
        for i in sess.get_inputs()}
print([o.shape for o in sess.run(None, feed)])
'''


def find_tool(name: str):
    """The console script beside this interpreter (not a version manager's shim, which costs a shell)."""
    here = os.path.join(os.path.dirname(sys.executable), name)
    return here if os.path.exists(here) else shutil.which(name)


def timed(cmd, env):
    """(wall seconds, CPU seconds: user + system of the process and its children) of one fresh run."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"failed (exit {proc.returncode}): {' '.join(cmd)}")
    return elapsed, usage.ru_utime + usage.ru_stime


def wall(cmd, env) -> float:
    return timed(cmd, env)[0]


def imports(cmd, env):
    """(import time in seconds, top-level packages imported) of ``cmd`` (a Python command line)."""
    proc = subprocess.run([cmd[0], "-X", "importtime", *cmd[1:]], stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True, env=env, check=False)
    total, names = 0, set()
    for line in proc.stderr.splitlines():
        if line.startswith("import time:") and "|" in line and "imported package" not in line:
            self_us, _, name = line[len("import time:"):].split("|")
            total += int(self_us)
            names.add(name.strip().split(".")[0])
    return total / 1e6, names


def python_cmd(script: str, args) -> list:
    """``script`` (a console script) run by this interpreter, so that -X importtime can be given."""
    return [sys.executable, script, *args]


def bench_help(toolkit: str, poly, runs: int, env) -> None:
    print(f"{'command':34s} {'--help wall':>12s} {'import time':>12s}")
    rows = [("toolkit " + " ".join(c + ["--help"]), python_cmd(toolkit, c + ["--help"])) for c in HELP_COMMANDS]
    if poly:
        rows.append(("polygraphy --help", python_cmd(poly, ["--help"])))
        rows.append(("polygraphy run --help", python_cmd(poly, ["run", "--help"])))
    rows.append(("python -c pass (interpreter floor)", [sys.executable, "-c", "pass"]))
    for name, cmd in rows:
        wall(cmd, env)
        t = statistics.median(wall(cmd, env) for _ in range(runs))
        imp = min(imports(cmd, env)[0] for _ in range(5))
        print(f"{name:34s} {t * 1000:9.1f} ms {imp * 1000:9.1f} ms")


def bench_run(model: str, toolkit: str, poly, bare: str, runs: int, envs) -> None:
    env, no_torch = envs
    cmds = {"toolkit": (python_cmd(toolkit, ["run", model, "--onnxrt"]), env), "bare ORT": ([sys.executable, bare, model], env)}
    if poly:
        cmds["polygraphy"] = (python_cmd(poly, ["run", model, "--onnxrt"]), env)
        if no_torch:
            cmds["poly -torch"] = (python_cmd(poly, ["run", model, "--onnxrt"]), no_torch)
    for cmd, cmd_env in cmds.values():
        wall(cmd, cmd_env)
    times: dict = {name: [] for name in cmds}
    cpu: dict = {name: [] for name in cmds}
    names = list(cmds)
    for r in range(runs):
        order = names[r % len(names):] + names[:r % len(names)]
        for name in order:
            t, c = timed(*cmds[name])
            times[name].append(t)
            cpu[name].append(c)
    imp, loaded = min(imports(*cmds["toolkit"]) for _ in range(3))
    heavy = sorted(m for m in ("onnx", "ml_dtypes") if m in loaded) or ["neither"]
    print(f"\n{os.path.basename(model)} ({os.path.getsize(model) / 1e6:.1f} MB), {runs} paired rounds")
    for name in names:
        print(f"  {name:11s} median {statistics.median(times[name]) * 1000:7.1f} ms wall, "
              f"{statistics.median(cpu[name]) * 1000:7.1f} ms CPU")
    for other in names[1:]:
        ratios = [a / b for a, b in zip(times["toolkit"], times[other])]
        cpu_ratios = [a / b for a, b in zip(cpu["toolkit"], cpu[other])]
        print(f"  toolkit / {other:11s} {statistics.median(ratios):.2f}x wall, {statistics.median(cpu_ratios):.2f}x "
              "CPU (medians of per-round ratios)")
    print(f"  toolkit run imports: {imp * 1000:.0f} ms; onnx / ml_dtypes imported: {', '.join(heavy)}")


def no_torch_env(env, tmp: str):
    """``env`` with torch hidden (a sitecustomize that makes ``import torch`` fail), or None where torch is
    not installed. Polygraphy imports torch when it is installed (to ask whether an array is a torch
    tensor), seconds that a user without torch does not pay."""
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        return None
    folder = os.path.join(tmp, "no_torch")
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "sitecustomize.py"), "w", encoding="utf-8") as fh:
        fh.write("import sys\nsys.modules['torch'] = None\n")
    path = os.pathsep.join(p for p in (folder, env.get("PYTHONPATH")) if p)
    return dict(env, PYTHONPATH=path)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--models", nargs="*", default=[])
    parser.add_argument("--skip-help", action="store_true")
    parser.add_argument("--skip-run", action="store_true")
    args = parser.parse_args()
    toolkit = find_tool("toolkit")
    if not toolkit:
        raise SystemExit("no toolkit console script found beside this interpreter or on PATH")
    poly = find_tool("polygraphy")
    with tempfile.TemporaryDirectory(prefix="bench_startup_") as tmp:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env.update(PYTHONPYCACHEPREFIX=os.path.join(tmp, "pycache"), COLUMNS="100")
        bare = os.path.join(tmp, "bare_ort.py")
        with open(bare, "w", encoding="utf-8") as fh:
            fh.write(BARE)
        if not args.skip_help:
            bench_help(toolkit, poly, args.runs, env)
        if not args.skip_run:
            for model in args.models:
                bench_run(model, toolkit, poly, bare, args.runs, (env, no_torch_env(env, tmp)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

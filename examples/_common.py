"""Small helpers shared by the example scripts: print each toolkit command, then run it."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys

# The interpreter's own scripts folder first, so `toolkit` (also inside --check) is this install.
os.environ["PATH"] = os.path.dirname(os.path.abspath(sys.executable)) + os.pathsep + os.environ.get("PATH", "")


def toolkit_cmd():
    exe = shutil.which("toolkit")
    return [exe] if exe else [sys.executable, "-m", "toolkit"]


def fresh_workdir(path: str) -> str:
    path = os.path.abspath(path)
    if os.path.isdir(path):
        shutil.rmtree(path)
    os.makedirs(path)
    print(f"Working in {path}", flush=True)
    return path


def toolkit(args, cwd, expect=(0,), capture=False, stdin=None):
    """Print `$ toolkit ARGS`, run it, and stop the example if the exit code is unexpected."""
    print("\n$ " + " ".join(shlex.quote(a) for a in ["toolkit", *args]), flush=True)
    proc = subprocess.run(toolkit_cmd() + list(args), cwd=cwd, capture_output=capture, input=stdin)
    if capture:
        sys.stdout.write(proc.stdout.decode(errors="replace"))
        sys.stderr.write(proc.stderr.decode(errors="replace"))
    if proc.returncode not in expect:
        sys.exit(f"example failed: the command above exited {proc.returncode}, expected {expect}")
    return proc


def shell(pipeline: str, cwd):
    """Print and run a shell pipeline of toolkit commands (needs a POSIX shell)."""
    print(f"\n$ {pipeline}", flush=True)
    proc = subprocess.run(pipeline, shell=True, cwd=cwd, capture_output=True, executable="/bin/bash")
    sys.stdout.write(proc.stdout.decode(errors="replace"))
    sys.stderr.write(proc.stderr.decode(errors="replace"))
    if proc.returncode != 0:
        sys.exit(f"example failed: the pipeline above exited {proc.returncode}")
    return proc


def check(condition: bool, message: str) -> None:
    if not condition:
        sys.exit(f"example failed: {message}")
    print(f"==> ok: {message}", flush=True)


def workdir_from_args(default: str, description: str = "") -> str:
    """Parse --workdir (the only option every example takes) and return a fresh folder."""
    import argparse

    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--workdir", default=default, help="folder for the example's files (created fresh)")
    return fresh_workdir(parser.parse_args().workdir)


def save_graph(path: str, nodes, name: str, inputs, outputs, initializers=()) -> None:
    """Wrap a graph in an opset-17 model with IR version 8 (readable by any recent
    onnxruntime), check it and save it. inputs/outputs: [(name, elem_type, shape)]."""
    import onnx
    from onnx import helper

    vis = lambda specs: [helper.make_tensor_value_info(n, t, s) for n, t, s in specs]
    graph = helper.make_graph(nodes, name, vis(inputs), vis(outputs), list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save_model(model, path)

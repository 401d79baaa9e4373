"""Time of the data-file commands on files of many small iterations, at N and 2N (linear or not).

    python scripts/bench_datafiles.py                 # 20k and 40k iterations
    python scripts/bench_datafiles.py --sizes 200000  # the 47 MB inputs file

For each size it writes (in a temp folder) an inputs file of N iterations of one float32 tensor
``x`` of shape [1, 4], as JSON and as ``.npz`` (N members), and an outputs file of N iterations
as JSON, then times, each as a fresh ``toolkit`` process (stdout to /dev/null; the "process"
column, start-up and imports included: about 1 s on a quiet machine) and as the library call
in this process (the "call" column: the data-file work alone):

- ``inspect data`` on the JSON and the ``.npz`` inputs file, the outputs file, and a plain
  ``np.savez`` file of N named arrays (one iteration of N tensors);
- ``run model.onnx --onnxrt --load-outputs inputs.json`` (refused: an inputs file given as outputs),
  for the JSON and the ``.npz`` file;
- ``data to-input`` of the ``.npz`` file into a new ``.npz``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
from onnx import TensorProto, helper

from toolkit.core.io.datafiles import save_inputs, save_outputs, RunResults, IterationResult


def _model(path: str) -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.save(model, path)


def _files(folder: str, n: int) -> dict:
    rng = np.random.default_rng(0)
    feeds = [{"x": rng.standard_normal((1, 4)).astype(np.float32)} for _ in range(n)]
    out = {"json": os.path.join(folder, f"in{n}.json"), "npz": os.path.join(folder, f"in{n}.npz"),
           "plain": os.path.join(folder, f"plain{n}.npz"),
           "outputs": os.path.join(folder, f"out{n}.json"), "model": os.path.join(folder, "m.onnx")}
    save_inputs(out["json"], feeds)
    save_inputs(out["npz"], feeds)
    np.savez(out["plain"], **{f"x{k}": feed["x"] for k, feed in enumerate(feeds)})
    save_outputs(out["outputs"], RunResults([("onnxrt", [IterationResult({"y": f["x"]}, 0.0, "onnxrt") for f in feeds])]))
    _model(out["model"])
    return out


def _call(args: list) -> float:
    """The library work of the command ``args`` in this process (its output discarded)."""
    from toolkit.core.io.datafiles import clear_cache, load_data, merge_to_inputs, save_inputs
    from toolkit.core.errors import InputError
    from toolkit.inspect.data import data_lines

    from toolkit.run import pipeline

    clear_cache()
    start = time.perf_counter()
    if args[0] == "inspect":
        for _lines in data_lines(load_data(args[2], cache=False)):
            pass
    elif args[0] == "run":
        try:
            pipeline._refuse_inputs_files([args[-1]], args[1])
        except InputError:
            pass
        else:
            raise SystemExit(f"{args}: not refused")
    else:
        save_inputs(args[-1], merge_to_inputs([load_data(args[2])]))
    return time.perf_counter() - start


def _time(args: list, expect: int) -> float:
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "toolkit", *args], stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True, cwd=os.path.dirname(args[-1]))  # (toolkit from PYTHONPATH)
    took = time.perf_counter() - start
    if proc.returncode != expect:
        raise SystemExit(f"{args}: exit {proc.returncode}, expected {expect}: {proc.stderr[-400:]}")
    return took


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[20000, 40000])
    opts = ap.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        for n in opts.sizes:
            f = _files(folder, n)
            size = os.path.getsize(f["json"]) / 1e6
            rows = [
                (f"inspect data inputs.json ({size:.0f} MB)", ["inspect", "data", f["json"]], 0),
                ("inspect data inputs.npz", ["inspect", "data", f["npz"]], 0),
                ("inspect data outputs.json", ["inspect", "data", f["outputs"]], 0),
                ("inspect data plain.npz (N members, np.savez)", ["inspect", "data", f["plain"]], 0),
                ("run --load-outputs inputs.json (refused)",
                 ["run", f["model"], "--onnxrt", "--load-outputs", f["json"]], 3),
                ("run --load-outputs inputs.npz (refused)",
                 ["run", f["model"], "--onnxrt", "--load-outputs", f["npz"]], 3),
                ("data to-input inputs.npz -o merged.npz",
                 ["data", "to-input", f["npz"], "-o", os.path.join(folder, "merged.npz")], 0),
            ]
            for label, args, expect in rows:
                took = _time(args, expect)
                print(f"N={n:<7} {label:<45} process {took:6.2f} s   call {_call(args):6.2f} s", flush=True)


if __name__ == "__main__":
    main()

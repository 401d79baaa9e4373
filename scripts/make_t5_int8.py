"""Write dynamically quantized T5 encoders (random weights) for trying `convert --fp-to-fp16`.

    python scripts/make_t5_int8.py DIR [--config tiny|t5-small] [--seed 0]

Needs torch and transformers (not dependencies of toolkit: install them in a venv of your own,
e.g. `python -m venv VENV --system-site-packages && VENV/bin/pip install torch transformers`).
Builds a ``T5EncoderModel`` from a ``T5Config`` with random weights (no download), exports it
with ``torch.onnx.export`` (opset 17, dynamic batch and sequence axes; inputs ``input_ids`` and
``attention_mask``, output ``last_hidden_state``), then quantizes it with
``onnxruntime.quantization.quantize_dynamic`` four ways (QInt8 and QUInt8 weights, per tensor and
per channel). Writes into DIR:

    t5_<config>[_dynamo].onnx             the float32 export (_dynamo: with --dynamo, the new exporter)
    t5_<config>_{qint8,quint8}[_pc].onnx  the dynamic-int8 models (_pc: per channel)
"""

from __future__ import annotations

import argparse
import os
import sys

CONFIGS = {
    # small enough to convert and check in a second
    "tiny": dict(vocab_size=100, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4),
    # t5-small's shapes (random weights)
    "t5-small": dict(vocab_size=32128, d_model=512, d_kv=64, d_ff=2048, num_layers=6, num_heads=8),
}


def export(config_name: str, path: str, seed: int, dynamo: bool = False) -> None:
    import torch
    from transformers import T5Config, T5EncoderModel

    torch.manual_seed(seed)
    model = T5EncoderModel(T5Config(**CONFIGS[config_name])).eval()
    ids = torch.randint(0, CONFIGS[config_name]["vocab_size"], (2, 16))
    mask = torch.ones_like(ids)
    dyn = {0: "batch", 1: "sequence"}
    kwargs = dict(
        input_names=["input_ids", "attention_mask"],
        output_names=["last_hidden_state"],
        dynamic_axes={"input_ids": dyn, "attention_mask": dyn, "last_hidden_state": dyn},
        opset_version=17,
    )
    with torch.no_grad():
        if dynamo:  # the new exporter (needs onnxscript)
            torch.onnx.export(model, (ids, mask), path, dynamo=True, external_data=False, **kwargs)
            return
        try:
            torch.onnx.export(model, (ids, mask), path, dynamo=False, **kwargs)
        except TypeError:  # a torch without the dynamo argument
            torch.onnx.export(model, (ids, mask), path, **kwargs)


def quantize(src: str, dst_stem: str) -> list:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    written = []
    for qname, qtype in (("qint8", QuantType.QInt8), ("quint8", QuantType.QUInt8)):
        for per_channel in (False, True):
            dst = f"{dst_stem}_{qname}{'_pc' if per_channel else ''}.onnx"
            quantize_dynamic(src, dst, weight_type=qtype, per_channel=per_channel)
            written.append(dst)
    return written


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("dir")
    p.add_argument("--config", choices=sorted(CONFIGS), default="tiny")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dynamo", action="store_true", help="export with torch.onnx's new exporter (onnxscript)")
    args = p.parse_args(argv)
    os.makedirs(args.dir, exist_ok=True)
    stem = os.path.join(args.dir, f"t5_{args.config.replace('-', '_')}{'_dynamo' if args.dynamo else ''}")
    export(args.config, stem + ".onnx", args.seed, args.dynamo)
    for path in [stem + ".onnx"] + quantize(stem + ".onnx", stem):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())

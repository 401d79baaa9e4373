#!/usr/bin/env python3
"""Export a small Transformer encoder (dynamic batch and sequence, ~670 nodes) to ONNX.

Needs PyTorch (not a toolkit dependency): `pip install torch`. Used for the dynamic-shape
spot check in docs/performance.md.

Usage: python scripts/make_transformer.py OUT.onnx
"""

import sys

import torch
import torch.nn as nn


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(100, 64)
        layer = nn.TransformerEncoderLayer(64, 4, 128, batch_first=True)
        self.enc = nn.TransformerEncoder(layer, 4)
        self.head = nn.Linear(64, 10)

    def forward(self, ids):
        return self.head(self.enc(self.emb(ids))).softmax(-1)


def main() -> int:
    out = sys.argv[1] if len(sys.argv) > 1 else "transformer.onnx"
    torch.manual_seed(0)
    model = Encoder().eval()
    ids = torch.randint(0, 100, (2, 7))
    torch.onnx.export(
        model, (ids,), out, input_names=["ids"], output_names=["probs"],
        dynamic_axes={"ids": {0: "batch", 1: "seq"}, "probs": {0: "batch", 1: "seq"}},
        opset_version=17, dynamo=False,
    )
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

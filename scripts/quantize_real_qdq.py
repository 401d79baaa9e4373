"""Static QDQ copies of real float models, for the quantization debugging in docs/real-models.md.

    python scripts/quantize_real_qdq.py [DIR]      # DIR: where scripts/fetch_real_models.sh put them

Writes DIR/embedding_qdq.onnx: openWakeWord's speech embedding CNN (embedding_model.onnx, input
input_1:[1,76,32,1]) quantized by onnxruntime.quantization.quantize_static (QDQ, int8 activations
and weights, MinMax calibration) on 16 input sets uniform in [-1, 1] (seed 0). Nothing is committed.
"""

from __future__ import annotations

import os
import sys

import numpy as np
import onnx
from onnxruntime.quantization import QuantFormat, QuantType, quantize_static


class Reader:
    def __init__(self, name, shape, count=16):
        rng = np.random.default_rng(0)
        self.data = iter([{name: rng.uniform(-1, 1, shape).astype(np.float32)} for _ in range(count)])

    def get_next(self):
        return next(self.data, None)


def main(argv) -> int:
    d = argv[0] if argv else "/tmp/real-models"
    src, dst = os.path.join(d, "embedding_model.onnx"), os.path.join(d, "embedding_qdq.onnx")
    # a fixed batch of 1, so calibration and checks agree on shapes
    model = onnx.load(src)
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 1
    fixed = os.path.join(d, "embedding_model_b1.onnx")
    onnx.save(model, fixed)
    quantize_static(fixed, dst, Reader("input_1", (1, 76, 32, 1)), quant_format=QuantFormat.QDQ,
                    activation_type=QuantType.QInt8, weight_type=QuantType.QInt8)
    print(f"wrote {dst} (and {fixed}, the float model with batch 1)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

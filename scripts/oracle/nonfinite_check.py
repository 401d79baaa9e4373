"""A check command of the oracle's own for `debug reduce --check`: runs MODEL on bare ONNX-Runtime with generated
inputs (seed 0, uniform [0, 1], dynamic dims 1) and fails (exit 1) when an output holds NaN or inf.

    python scripts/oracle/nonfinite_check.py MODEL
"""

from __future__ import annotations

import sys

import numpy as np

NP = {"tensor(float)": np.float32, "tensor(double)": np.float64, "tensor(float16)": np.float16,
      "tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(bool)": bool}


def check(model) -> int:
    """0 when every output is finite, 1 when one is not (the names printed)."""
    import onnxruntime as ort

    src = model if isinstance(model, str) else model.SerializeToString()
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(src, so, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    feeds = {}
    for i in sess.get_inputs():
        shape = [d if isinstance(d, int) else 1 for d in i.shape]
        feeds[i.name] = rng.uniform(0, 1, shape).astype(NP.get(i.type, np.float32))
    bad = [o.name for o, v in zip(sess.get_outputs(), sess.run(None, feeds))
           if np.asarray(v).dtype.kind == "f" and not np.isfinite(v).all()]
    if bad:
        print("non-finite output(s): " + " ".join(bad))
        return 1
    print("every output is finite")
    return 0


if __name__ == "__main__":
    sys.exit(check(sys.argv[1]))

"""Check commands of the oracle's own for `debug reduce --check`, on bare ONNX-Runtime.

    python scripts/oracle/nonfinite_check.py MODEL                      # exit 1 when an output is NaN or inf
    python scripts/oracle/nonfinite_check.py --crash-without OP MODEL   # the same, but a model without an OP node
                                                                        # crashes (ZeroDivisionError, a traceback)
    python scripts/oracle/nonfinite_check.py --has-op OP MODEL          # exit 1 when the model has an OP node

Inputs are generated: seed 0, uniform [0, 1], dynamic dims 1.
"""

from __future__ import annotations

import sys
from typing import List, Tuple

import numpy as np

NP = {"tensor(float)": np.float32, "tensor(double)": np.float64, "tensor(float16)": np.float16,
      "tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(bool)": bool}


def nonfinite(model) -> int:
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


def _ops(model) -> List[str]:
    import onnx

    m = onnx.load(model) if isinstance(model, str) else model
    return [n.op_type for n in m.graph.node]


def check(model, mode: Tuple[str, str] = ("nonfinite", "")) -> int:
    kind, op = mode
    if kind == "has-op":
        if op in _ops(model):
            print(f"the model has a {op} node")
            return 1
        return 0
    if kind == "crash-without" and op not in _ops(model):
        return int(1 / 0)  # a crash: a traceback, exit 1
    return nonfinite(model)


def parse(argv: List[str]) -> Tuple[Tuple[str, str], str]:
    if len(argv) == 3 and argv[0] in ("--crash-without", "--has-op"):
        return (argv[0][2:], argv[1]), argv[2]
    if len(argv) == 1:
        return ("nonfinite", ""), argv[0]
    raise SystemExit(__doc__)


if __name__ == "__main__":
    mode, path = parse(sys.argv[1:])
    sys.exit(check(path, mode))

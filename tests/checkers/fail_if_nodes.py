"""A fake check for `debug reduce` tests: fails when the named nodes are in the model.

    python fail_if_nodes.py MODEL NAME [NAME ...] [--any] [--exit N] [--sleep S] [--log FILE]

By default the check fails (prints ``FOUND ...`` and exits N, default 1) when *all* the
named nodes are present in the top graph; with ``--any`` when any of them is. The model
must also be valid (``onnx.checker``, with full shape inference): an invalid one prints
``INVALID ...`` and exits 7, so tests can tell broken subgraphs from failures. ``--log``
appends one JSON line per run (node names, inputs, outputs, verdict). ``--sleep`` waits
first (for timeout tests). ``--ort`` also runs the model on ONNX-Runtime (exit 8 if that fails).
"""

import json
import sys
import time


def main(argv):
    import onnx

    args = list(argv)
    opts = {"--any": False, "--ort": False}
    values = {"--exit": "1", "--sleep": "0", "--log": None}
    rest = []
    i = 0
    while i < len(args):
        a = args[i]
        if a in opts:
            opts[a] = True
        elif a in values:
            values[a] = args[i + 1]
            i += 1
        else:
            rest.append(a)
        i += 1
    path, names = rest[0], rest[1:]
    if float(values["--sleep"]):
        time.sleep(float(values["--sleep"]))
    with open(path, "rb") as fh:
        data = fh.read()
    model = onnx.load(path)  # with its external data, if any
    present = [n.name for n in model.graph.node]
    record = {
        "sha256": __import__("hashlib").sha256(data).hexdigest(),
        "nodes": present,
        "inputs": [i.name for i in model.graph.input],
        "outputs": [o.name for o in model.graph.output],
        "initializers": [t.name for t in model.graph.initializer],
    }
    try:
        onnx.checker.check_model(model, full_check=True)
    except Exception as exc:  # noqa: BLE001
        record["verdict"] = "invalid"
        _log(values["--log"], record)
        print(f"INVALID {exc}")
        return 7
    if opts["--ort"]:
        try:
            _run_ort(model)
        except Exception as exc:  # noqa: BLE001
            record["verdict"] = "ort-error"
            _log(values["--log"], record)
            print(f"ORT ERROR {exc}")
            return 8
    hit = [n for n in names if n in present]
    found = bool(hit) if opts["--any"] else (len(hit) == len(names) and bool(names))
    record["verdict"] = "fail" if found else "pass"
    _log(values["--log"], record)
    if found:
        print(f"FOUND {' '.join(hit)}")
        sys.stderr.write("check: failure reproduced\n")
        return int(values["--exit"])
    print("clean")
    return 0


def _run_ort(model):
    import numpy as np
    import onnxruntime as ort

    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    feed = {}
    for inp in sess.get_inputs():
        shape = [d if isinstance(d, int) else 1 for d in inp.shape]
        if "float" in inp.type:
            feed[inp.name] = np.ones(shape, np.float32)
        elif "bool" in inp.type:
            feed[inp.name] = np.ones(shape, bool)
        else:
            feed[inp.name] = np.ones(shape, np.int64)
    sess.run(None, feed)


def _log(path, record):
    if path:
        with open(path, "a") as fh:
            fh.write(json.dumps(record) + "\n")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

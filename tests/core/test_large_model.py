"""A model with ~300 MB of weights in external data through every command.

The model is written in the test (three 100 MB initializers in one external file, read
by Gather nodes fed a tiny index input), and each command runs as a real subprocess
whose peak resident memory is measured (``os.wait4``'s ru_maxrss). The bounds prove that
weights are not loaded when they are not needed, and never twice:

- ``inspect model`` without weights never reads them; with ``--mode=full`` it reads them
  one at a time;
- ``run`` leaves them to ONNX-Runtime;
- ``surgeon extract`` reads only the weight the subgraph keeps; ``surgeon sanitize``
  copies them in chunks into its output (one file, or external data); ``debug reduce``
  writes each candidate the same way;
- one run with the protobuf size limits patched far below 300 MB checks that the
  ">2 GB" logic (automatic external data, no single-message serialization) works.

Measured on the development machine (peak RSS, 300 MB of weights): inspect 47 MB,
inspect --mode=full 300 MB, run 70 MB, extract 80 MB, sanitize 98 MB (both output
kinds), debug reduce 83 MB (744 MB before it loaded weights lazily too).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import modelzoo as z

pytestmark = pytest.mark.skipif(
    not os.path.exists("/proc/self/status"), reason="peak memory is read from /proc/self/status (VmHWM)"
)

MB = 1 << 20
ROWS, COLS, N_WEIGHTS = 25600, 1024, 3
WEIGHT = ROWS * COLS * 4  # 100 MB each
TOTAL = WEIGHT * N_WEIGHTS  # 300 MB
IDX = np.array([0, 5, ROWS - 1, 7], np.int64)


def write_big_model(folder: str) -> str:
    """idx[4] -> Gather(w_i, idx) for each weight -> sum -> y[4, 1024]; weights external.

    The weight file is streamed to disk 4 MB at a time (no 300 MB array in the test);
    w_i[r, c] = c + i.
    """
    inits = []
    offset = 0
    with open(os.path.join(folder, "weights.bin"), "wb") as f:
        for i in range(N_WEIGHTS):
            block = np.tile(np.arange(COLS, dtype=np.float32) + i, (1024, 1)).tobytes()
            for _ in range(ROWS // 1024):
                f.write(block)
            t = TensorProto(name=f"w{i}", data_type=TensorProto.FLOAT, dims=[ROWS, COLS])
            t.data_location = TensorProto.EXTERNAL
            for key, value in (("location", "weights.bin"), ("offset", str(offset)), ("length", str(WEIGHT))):
                entry = t.external_data.add()
                entry.key, entry.value = key, value
            offset += WEIGHT
            inits.append(t)
    nodes = [helper.make_node("Gather", [f"w{i}", "idx"], [f"g{i}"], name=f"gather{i}", axis=0) for i in range(N_WEIGHTS)]
    prev = "g0"
    for i in range(1, N_WEIGHTS):
        out = "y" if i == N_WEIGHTS - 1 else f"s{i}"
        nodes.append(helper.make_node("Add", [prev, f"g{i}"], [out], name=f"add{i}"))
        prev = out
    graph = helper.make_graph(nodes, "big", [z.vi("idx", [4], TensorProto.INT64)], [z.vi("y", [4, COLS])], inits)
    path = os.path.join(folder, "big.onnx")
    onnx.save_model(z.make_model(graph), path)
    return path


def expected_y(idx=IDX) -> np.ndarray:
    row = np.arange(COLS, dtype=np.float32)
    return np.tile(sum(row + i for i in range(N_WEIGHTS)), (len(idx), 1))


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    folder = tmp_path_factory.mktemp("large_model")
    write_big_model(str(folder))
    return folder


@pytest.fixture
def work(big):
    """The shared folder (onnx and ONNX-Runtime refuse external data behind symbolic or
    hard links, and copies cost 300 MB each); what a test writes is removed after it."""
    before = set(os.listdir(big))
    yield big
    for name in set(os.listdir(big)) - before:
        os.unlink(big / name)


# The child reports its own VmHWM (peak resident set of its address space, reset by
# exec) when it exits. ru_maxrss from wait4/RUSAGE_CHILDREN is no good here: Linux keeps
# a process's high-water mark across exec, so a child forked from pytest (hundreds of MB
# with numpy, onnx and ONNX-Runtime loaded) starts with pytest's size as its "peak".
_LAUNCH = """
import atexit, os, sys
def _report():
    with open('/proc/self/status') as f:
        for line in f:
            if line.startswith('VmHWM:'):
                with open(os.environ['TOOLKIT_TEST_HWM'], 'w') as out:
                    out.write(line.split()[1])
atexit.register(_report)
{patch}
from toolkit.cli.app import main
sys.exit(main(sys.argv[1:]))
"""


def measure(args, cwd, patch: str = ""):
    """Run toolkit ARGS; return (exit code, stderr + stdout, peak RSS in bytes, seconds)."""
    hwm = os.path.join(str(cwd), ".hwm")
    env = dict(os.environ, COLUMNS="200", TOOLKIT_TEST_HWM=hwm)
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-c", _LAUNCH.format(patch=patch), *[str(a) for a in args]],
        cwd=str(cwd), capture_output=True, env=env, timeout=300,
    )
    seconds = time.monotonic() - start
    with open(hwm) as f:
        peak = int(f.read()) * 1024
    os.unlink(hwm)
    return proc.returncode, proc.stderr.decode(errors="replace") + proc.stdout.decode(errors="replace"), peak, seconds


def ort_y(path, idx=IDX):
    import onnxruntime as ort

    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return sess.run(None, {"idx": idx})[0]


def test_inspect_reads_no_weights(work):
    code, out, peak, _ = measure(["inspect", "model", "big.onnx", "--mode=basic"], work)
    assert code == 0, out
    assert "Node 0    | gather0 [Op: Gather]" in out
    assert peak < TOTAL / 2, f"peak {peak / MB:.0f} MB: weights were read"


def test_inspect_full_reads_weights_one_at_a_time(work):
    code, out, peak, _ = measure(["inspect", "model", "big.onnx", "--mode=full"], work)
    assert code == 0, out
    assert "mean=512.5" in out  # w1's statistics: read from the file
    assert peak < TOTAL + WEIGHT // 2, f"peak {peak / MB:.0f} MB: more than the weights, once"


def test_run_leaves_weights_to_onnxruntime(work):
    code, out, peak, _ = measure(["run", "big.onnx", "--onnxrt", "--save-outputs", "o.npz"], work)
    assert code == 0, out
    assert peak < TOTAL + 100 * MB, f"peak {peak / MB:.0f} MB: weights loaded more than once"
    from toolkit.core.io.datafiles import load_outputs

    y = load_outputs(str(work / "o.npz")).runs[0][1][0].outputs["y"]
    np.testing.assert_array_equal(y, expected_y())  # every row of w_i is the same


def test_extract_reads_only_the_weight_it_keeps(work):
    code, out, peak, _ = measure(["surgeon", "extract", "big.onnx", "-o", "sub.onnx", "--outputs", "g1"], work)
    assert code == 0, out
    assert peak < WEIGHT + 150 * MB, f"peak {peak / MB:.0f} MB: weights the subgraph drops were loaded"
    sub = onnx.load(str(work / "sub.onnx"), load_external_data=False)
    assert [t.name for t in sub.graph.initializer] == ["w1"]
    row = np.arange(COLS, dtype=np.float32) + 1
    np.testing.assert_array_equal(ort_y(work / "sub.onnx"), np.tile(row, (4, 1)))


@pytest.mark.parametrize("external", [False, True], ids=["one-file", "external-data"])
def test_sanitize_copies_weights_in_chunks(work, external):
    extra = ["--save-external-data"] if external else []
    code, out, peak, _ = measure(
        ["surgeon", "sanitize", "big.onnx", "-o", "san.onnx", "--fold-constants", "--cleanup", *extra], work
    )
    assert code == 0, out
    assert peak < WEIGHT + 150 * MB, f"peak {peak / MB:.0f} MB: weights held in memory"
    assert (work / "san.onnx.data").exists() == external
    size = os.path.getsize(work / "san.onnx") + (os.path.getsize(work / "san.onnx.data") if external else 0)
    assert size >= TOTAL
    onnx.checker.check_model(str(work / "san.onnx"))
    np.testing.assert_array_equal(ort_y(work / "san.onnx"), expected_y())


def test_protobuf_limit_logic_with_lowered_limits(work):
    """With the 2 GB limits patched to 200/250 MB, a 300 MB result must go to external
    data by itself (a single protobuf message of that size is refused)."""
    prefix = "import toolkit.core.io.model as m; m.AUTO_EXTERNAL_THRESHOLD = 200 << 20; m.PROTOBUF_LIMIT = 250 << 20"
    code, out, peak, _ = measure(["surgeon", "sanitize", "big.onnx", "-o", "san.onnx", "--toposort"], work, prefix)
    assert code == 0, out
    assert (work / "san.onnx.data").exists(), "a model over the (lowered) limit was not saved with external data"
    assert os.path.getsize(work / "san.onnx") < MB
    assert peak < WEIGHT + 150 * MB
    np.testing.assert_array_equal(ort_y(work / "san.onnx"), expected_y())
    code, out, _, _ = measure(["surgeon", "extract", "big.onnx", "-o", "-", "--outputs", "y"], work, prefix)
    assert code == 2 and "external data cannot be written to stdout" in out, out


def test_reduce_copies_weights_in_chunks(work):
    check = ["sh", "-c", "grep -q gather1 polygraphy_debug.onnx && exit 1; exit 0"]
    code, out, peak, _ = measure(["debug", "reduce", "big.onnx", "-o", "red.onnx", "--check", *check], work)
    assert code == 0, out
    red = onnx.load(str(work / "red.onnx"), load_external_data=False)
    assert [n.name for n in red.graph.node] == ["gather1"]
    assert peak < WEIGHT + 150 * MB, f"peak {peak / MB:.0f} MB: weights held in memory"
    row = np.arange(COLS, dtype=np.float32) + 1
    np.testing.assert_array_equal(ort_y(work / "red.onnx"), np.tile(row, (4, 1)))


def test_shape_fallback_leaves_weights_to_onnxruntime(work):
    """--force-fallback-shape-inference runs the model on ONNX-Runtime, which reads the
    external weights itself: toolkit holds no second copy of them."""
    args = ["surgeon", "extract", "big.onnx", "-o", "sub.onnx", "--outputs", "g1", "--force-fallback-shape-inference"]
    code, out, peak, _ = measure(args, work)
    assert code == 0, out
    assert peak < TOTAL + 150 * MB, f"peak {peak / MB:.0f} MB: the weights were loaded besides ONNX-Runtime's copy"
    sub = onnx.load(str(work / "sub.onnx"), load_external_data=False)
    assert [t.name for t in sub.graph.initializer] == ["w1"]

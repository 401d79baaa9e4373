"""Fault injection: every writing command killed with SIGINT, SIGTERM and SIGKILL at several moments.

Commands: ``surgeon sanitize -o MODEL MODEL`` (with and without external data), ``convert``,
``run --save-outputs``, ``data to-input``, ``debug reduce``. Whatever the moment and the signal:

- the input is intact: byte-identical, or, where -o names it, the complete new output (it
  loads and computes what the old one did);
- every output present is complete (it loads);
- no temp file is left (``.NAME.<random>.tmp``), except after SIGKILL;
- no process outlives the command (nothing runs in its folder afterwards), except after
  SIGKILL of the command itself.

The moments are wall-clock delays after the start, so a loaded machine shifts where they
land (start-up, work, writing, after the end) but never what must hold. The quick variant
tries each command at one moment per signal (three moments per command); the ``slow``
variant tries every moment with every signal.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

import modelzoo as z
from test_faults import const_chain, matmul_model

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses /proc and POSIX signals")

MOMENTS = (0.5, 1.0, 1.6)  # seconds after the start
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGKILL)


def _external_model(folder):
    """const chain (foldable) plus a 4 MiB weight kept by the result: an in-place rewrite
    writes a model and a data file."""
    m = const_chain(600)
    big = numpy_helper.from_array(np.linspace(0, 1, 1 << 20, dtype=np.float32), "big")
    m.graph.initializer.append(big)
    m.graph.node.append(helper.make_node("ReduceSum", ["big"], ["s"], name="sum", keepdims=0))
    m.graph.output.append(z.vi("s", []))
    onnx.save_model(m, str(folder / "m.onnx"), save_as_external_data=True, location="m.onnx.data", size_threshold=0)


def _inputs_files(folder):
    """The data files the case merges, written by ``run`` in this process (only what they hold matters here)."""
    from toolkit.cli.app import main

    z.save(z.chain(3, shape=(1, 4096)), folder / "c.onnx")
    here = os.getcwd()
    os.chdir(folder)
    try:
        assert main(["run", "c.onnx", "--onnxrt", "--iterations", "400", "--save-inputs", "in.json",
                     "--save-outputs", "out.json", "-q"]) == 0
    finally:
        os.chdir(here)
    os.unlink(folder / "c.onnx")


CASES = {
    "sanitize-in-place": (
        lambda d: z.save(const_chain(1500), d / "m.onnx"),
        ["surgeon", "sanitize", "m.onnx", "-o", "m.onnx", "--fold-constants"], ["m.onnx"], MOMENTS,
    ),
    "sanitize-in-place-external": (
        _external_model,
        ["surgeon", "sanitize", "m.onnx", "-o", "m.onnx", "--fold-constants", "--save-external-data"], ["m.onnx"],
        MOMENTS,
    ),
    "convert": (
        lambda d: z.save(matmul_model(depth=40, size=256), d / "m.onnx"),
        ["convert", "m.onnx", "--fp-to-fp16", "-o", "out.onnx"], ["out.onnx"], MOMENTS,
    ),
    "run-save-outputs": (
        lambda d: z.save(matmul_model(), d / "m.onnx"),
        ["run", "m.onnx", "--onnxrt", "--iterations", "100000", "--save-inputs", "i.json", "--save-outputs", "o.json"],
        ["i.json", "o.json"], (1.0, 1.6, 2.4),
    ),
    "data-to-input": (
        _inputs_files, ["data", "to-input", "in.json", "out.json", "-o", "merged.json"], ["merged.json"], MOMENTS,
    ),
    "debug-reduce": (
        lambda d: z.save(z.chain(40), d / "m.onnx"),
        ["debug", "reduce", "m.onnx", "-o", "r.onnx", "--min-good", "g.onnx", "--fail-regex", "PASSED",
         "--check", "toolkit", "run", "polygraphy_debug.onnx", "--onnxrt", "--iterations", "3000", "-q"],
        ["r.onnx", "g.onnx"], (2.0, 3.0, 4.0),  # (checks under way: start-up takes ~1 s)
    ),
}


def _snapshot(folder):
    return {n: (folder / n).read_bytes() for n in sorted(os.listdir(folder)) if (folder / n).is_file()}


def _outputs(folder, model: str):
    """What the model at ``folder/model`` computes on a fixed input (all outputs)."""
    sess = ort.InferenceSession(str(folder / model), providers=["CPUExecutionProvider"])
    feed = {i.name: np.full([d if isinstance(d, int) else 1 for d in i.shape], 0.5, np.float32)
            for i in sess.get_inputs()}
    return sess.run(None, feed)


def _processes_in(folder) -> list:
    """Live processes whose working folder is ``folder`` (a check runs there)."""
    found = []
    real = os.path.realpath(folder)
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            if os.path.realpath(f"/proc/{name}/cwd") != real:
                continue
            with open(f"/proc/{name}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] != "Z":
                    found.append(int(name))
        except OSError:
            continue
    return found


def _complete(folder, name: str) -> None:
    path = folder / name
    if name.endswith(".onnx"):
        onnx.checker.check_model(str(path))  # loads, with its data file
        _outputs(folder, name)
    else:
        json.loads(path.read_text())


def _inject(tmp_path, case: str, sig: signal.Signals, moment: float) -> None:
    make, args, outputs, _moments = CASES[case]
    make(tmp_path)
    before = _snapshot(tmp_path)
    in_place = "m.onnx" in outputs
    want = _outputs(tmp_path, "m.onnx") if in_place else None
    proc = subprocess.Popen([sys.executable, "-m", "toolkit", *args], cwd=tmp_path, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    time.sleep(moment)
    if proc.poll() is None:
        proc.send_signal(sig)
    err = proc.communicate(timeout=120)[1].decode(errors="replace")
    # (a traceback only from a signal that came while the interpreter itself started, before toolkit ran)
    assert "Traceback" not in err or proc.returncode == -sig or "toolkit" not in err, err[-2000:]
    if sig != signal.SIGKILL:
        time.sleep(0.2)
        assert not _processes_in(tmp_path), f"processes outlived the command: {_processes_in(tmp_path)}"
        temps = [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]
        assert not temps, f"temp files left: {temps}\n{err[-2000:]}"
    else:
        for pid in _processes_in(tmp_path):  # allowed after SIGKILL; not left for the next test
            os.kill(pid, signal.SIGKILL)
        temps = [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]
        assert all(n.startswith(".") for n in temps), temps  # the documented hidden name
    after = _snapshot(tmp_path)
    for name, data in before.items():
        if in_place and name.startswith("m.onnx"):
            continue
        assert after.get(name) == data, f"{name} changed ({sig.name} at {moment} s)"
    if in_place:
        got = _outputs(tmp_path, "m.onnx")  # the old model or the complete new one
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    for name in outputs:
        if (tmp_path / name).exists():
            _complete(tmp_path, name)


def _quick():
    for i, (case, spec) in enumerate(CASES.items()):
        for j, sig in enumerate(SIGNALS):
            moments = spec[3]
            yield pytest.param(case, sig, moments[(i + j) % len(moments)], id=f"{case}-{sig.name}")


@pytest.mark.parametrize("case, sig, moment", list(_quick()))
def test_fault_injection(tmp_path, case, sig, moment):
    _inject(tmp_path, case, sig, moment)


@pytest.mark.slow
@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: s.name)
@pytest.mark.parametrize("case", list(CASES))
def test_fault_injection_every_moment(tmp_path_factory, case, sig):
    for moment in (0.2,) + CASES[case][3] + (5.0,):
        _inject(tmp_path_factory.mktemp(case), case, sig, moment)

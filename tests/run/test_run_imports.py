"""What `toolkit run MODEL --onnxrt` imports: the runtime and numpy, never onnx (nor ml_dtypes,
which onnx loads and which alone costs more than the whole run of a small model).

The real entry point runs in a subprocess under ``python -X importtime``, so the modules the
forked, supervised child imports are listed too (each import writes one line to stderr)."""

import os
import subprocess
import sys

import pytest

import modelzoo as mz

HEAVY = ("onnx", "ml_dtypes")


def imported_by(args, cwd) -> set:
    """Top-level package names a real ``toolkit`` run imported (parent and forked child)."""
    env = dict(os.environ, COLUMNS="200")
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "toolkit", *[str(a) for a in args]],
        capture_output=True, text=True, cwd=cwd, env=env, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    names = set()
    for line in proc.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            name = line.rsplit("|", 1)[1].strip()
            if name != "imported package":
                names.add(name.split(".")[0])
    return names


@pytest.fixture
def model(tmp_path):
    return mz.save(mz.seed_example((1, 3, 4, 4)), tmp_path / "model.onnx")


@pytest.mark.parametrize("extra", [
    [],
    ["--onnxrt", "--iterations", "2", "--atol", "1e-3", "--check-error-stat", "max"],
    ["--save-inputs", "in.json", "--save-outputs", "out.json", "--input-shapes", "x0:[1,3,4,4]", "--validate"],
], ids=["plain", "compare", "save"])
def test_run_on_onnxruntime_does_not_import_onnx(model, tmp_path, extra):
    names = imported_by(["run", model, "--onnxrt", *extra], tmp_path)
    assert "onnxruntime" in names and "numpy" in names  # (the listing sees the forked child's imports)
    assert not [m for m in HEAVY if m in names]


def test_comparing_with_loaded_outputs_does_not_import_onnx(model, tmp_path):
    assert imported_by(["run", model, "--onnxrt", "--save-outputs", "golden.json"], tmp_path)
    names = imported_by(["run", model, "--onnxrt", "--load-outputs", "golden.json"], tmp_path)
    assert "onnxruntime" in names and not [m for m in HEAVY if m in names]

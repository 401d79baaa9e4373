"""Installing the TensorRT backend: the extras pair TensorRT with the cuda-python of its CUDA, a
mismatched pair is named in one sentence, and scripts/gpu_check.sh skips cleanly without a GPU."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import types

import pytest

from conftest import REPO
from test_trt_findings import env
from trt_fakes import CudaError, doubling_model, fake_cudart, fake_tensorrt, install

SCRIPT = os.path.join(REPO, "scripts", "gpu_check.sh")


def dist(name, version):
    return types.SimpleNamespace(metadata={"Name": name}, version=version)


CU12_TRT = [dist("tensorrt", "10.13.3.9"), dist("tensorrt_cu12", "10.13.3.9"), dist("tensorrt_cu12_bindings", "10.13.3.9"),
            dist("tensorrt_cu12_libs", "10.13.3.9")]  # fmt: skip


@pytest.mark.parametrize("dists,expected", [
    (CU12_TRT + [dist("cuda-python", "12.9.4"), dist("cuda-bindings", "12.9.4")], None),
    (CU12_TRT + [dist("cuda-python", "13.0.1"), dist("cuda-bindings", "13.0.1"), dist("numpy", "2.1.0")],
     "TensorRT 10.13.3.9 is built for CUDA 12 but cuda-python 13.0.1 is for CUDA 13; install the cuda-python "
     "of TensorRT's CUDA: pip install 'cuda-python>=12.6,<13'"),
    ([dist("tensorrt-cu13", "11.4.0.106"), dist("cuda_bindings", "12.9.0")],
     "TensorRT 11.4.0.106 is built for CUDA 13 but cuda-python 12.9.0 is for CUDA 12; install the cuda-python "
     "of TensorRT's CUDA: pip install 'cuda-python>=13,<14'"),
    ([dist("tensorrt-cu13", "11.4.0.106"), dist("cuda-python", "13.4.4")], None),
    ([dist("tensorrt", "10.13.3.9"), dist("cuda-python", "13.0.1")], None),  # TensorRT's CUDA unknown: say nothing
    (CU12_TRT, None),  # no cuda-python: import_cudart says so
])  # fmt: skip
def test_the_preflight_reads_both_cuda_versions_from_package_metadata(dists, expected):
    from toolkit.backends.trt.availability import cuda_pairing_problem

    assert cuda_pairing_problem(dists) == expected


def test_a_mismatched_pair_without_a_usable_gpu_says_which_package_to_install(cli, monkeypatch, tmp_path):
    """TensorRT for CUDA 12 with cuda-python 13 and a driver too old for CUDA 13: TensorRT would work."""
    import importlib.metadata

    cudart = fake_cudart(error=CudaError.cudaErrorInsufficientDriver)
    install(monkeypatch, fake_tensorrt(memory=cudart.memory, model=doubling_model()), cudart)
    monkeypatch.setattr(importlib.metadata, "distributions",
                        lambda: iter(CU12_TRT + [dist("cuda-python", "13.0.1")]))  # fmt: skip
    import modelzoo as mz

    model = mz.save(mz.seed_example((1, 3, 4, 4)), tmp_path / "model.onnx")
    res = cli("run", model, "--trt")
    assert res.code == 4, res.err
    assert res.err.strip().splitlines()[-1] == (
        "error: TensorRT 10.13.3.9 is built for CUDA 12 but cuda-python 13.0.1 is for CUDA 13; install the "
        "cuda-python of TensorRT's CUDA: pip install 'cuda-python>=12.6,<13'"
    )
    # a matching pair keeps the driver's own message
    monkeypatch.setattr(importlib.metadata, "distributions", lambda: iter(CU12_TRT + [dist("cuda-python", "12.9.4")]))
    res = cli("run", model, "--trt")
    assert res.code == 4 and "cudaErrorInsufficientDriver" in res.err


def test_a_mismatched_pair_with_a_working_gpu_runs(cli, monkeypatch, tmp_path):
    import importlib.metadata

    import modelzoo as mz

    env(monkeypatch, model=doubling_model())
    monkeypatch.setattr(importlib.metadata, "distributions", lambda: iter(CU12_TRT + [dist("cuda-python", "13.0.1")]))
    model = mz.save(mz.seed_example((1, 3, 4, 4)), tmp_path / "model.onnx")
    assert cli("run", model, "--trt", "--trt-opt-shapes", "x:[2,3]").code == 0


def test_each_trt_extra_pairs_tensorrt_with_the_cuda_python_of_its_cuda():
    tomllib = pytest.importorskip("tomllib")
    with open(os.path.join(REPO, "pyproject.toml"), "rb") as f:
        extras = tomllib.load(f)["project"]["optional-dependencies"]
    trt_extras = {k: v for k, v in extras.items() if k == "trt" or k.startswith("trt-")}
    assert set(trt_extras) == {"trt", "trt-cu13"}
    for name, reqs in trt_extras.items():
        (trt,) = [r for r in reqs if r.startswith("tensorrt")]
        (cuda,) = [r for r in reqs if r.startswith("cuda-python")]
        major = int(re.match(r"tensorrt-cu(\d+)", trt).group(1))
        assert f"<{major + 1}" in cuda and re.search(rf">={major}\b", cuda), (name, reqs)
        assert "<12" in trt, (name, trt)  # TensorRT 10 and 11


# ----------------------------------------------------------------------------- scripts/gpu_check.sh


def run_script(tmp_path, nvidia_smi=None, extra_env=None, system_path=False):
    """scripts/gpu_check.sh with PATH holding ``nvidia-smi`` (a stand-in script, or none) and, with
    ``system_path``, the system's commands after it."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    if nvidia_smi is not None:
        (bin_dir / "nvidia-smi").write_text(f"#!/bin/sh\n{nvidia_smi}\n")
        (bin_dir / "nvidia-smi").chmod(0o755)
    path = f"{bin_dir}:/usr/bin:/bin" if system_path else str(bin_dir)
    environ = {"PATH": path, "HOME": str(tmp_path), **(extra_env or {})}
    return subprocess.run(["/bin/bash", SCRIPT], capture_output=True, text=True, env=environ, timeout=120)


@pytest.mark.parametrize("nvidia_smi", [None, "echo 'NVIDIA-SMI has failed: no devices' >&2; exit 9"])
def test_gpu_check_skips_in_one_line_without_a_gpu(tmp_path, nvidia_smi):
    res = run_script(tmp_path, nvidia_smi)
    assert res.returncode == 0, res.stderr
    assert res.stdout == "gpu_check: skipped: no NVIDIA GPU here (nvidia-smi finds none)\n"
    assert res.stderr == ""


@pytest.mark.skipif(importlib.util.find_spec("tensorrt") is not None, reason="TensorRT is installed here")
def test_gpu_check_with_a_gpu_but_no_tensorrt_fails_with_a_summary(tmp_path):
    """Past the GPU check: without TensorRT it stops after the first check and says why."""
    res = run_script(tmp_path, "echo 'GPU 0: Fake'", {
        "TOOLKIT_GPU_CHECK_INSTALL": "0", "PYTHON": sys.executable, "PYTHONPATH": REPO, "TMPDIR": str(tmp_path),
    }, system_path=True)  # fmt: skip
    lines = res.stdout.strip().splitlines()
    assert res.returncode == 1, res.stdout + res.stderr
    assert lines[0].startswith("error: TensorRT is not installed; install it with: pip install ")
    assert lines[1].startswith("FAIL  tensorrt-usable (exit 1, log ")
    assert lines[2] == f"gpu_check: 0 passed, 1 failed (logs in {lines[1].split('log ')[1][:-len('/tensorrt-usable.log)')]})"
    assert len(lines) == 3

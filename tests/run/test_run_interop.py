"""Interchange with Polygraphy both ways (polygraphy is a test-only dependency)."""

import os
import subprocess
import sys

import numpy as np
import pytest

import modelzoo as mz
from conftest import run_toolkit
from toolkit.core.io.datafiles import load_inputs, load_outputs, save_inputs

pytest.importorskip("polygraphy")

_SCRIPT = os.path.join(os.path.dirname(sys.executable), "polygraphy")
POLYGRAPHY = [sys.executable, _SCRIPT]


def polygraphy(*args, cwd):
    proc = subprocess.run(
        [*POLYGRAPHY, *map(str, args)], capture_output=True, text=True, cwd=cwd, timeout=120,
        env={**os.environ, "POLYGRAPHY_AUTOINSTALL_DEPS": "0"},
    )
    return proc.returncode, proc.stdout + proc.stderr


def _have_polygraphy_module():
    return os.path.exists(_SCRIPT) and subprocess.run([*POLYGRAPHY, "-h"], capture_output=True).returncode == 0


@pytest.fixture(scope="module", autouse=True)
def _polygraphy_cli():
    if not _have_polygraphy_module():
        pytest.skip("polygraphy CLI not runnable")


def test_polygraphy_loads_our_files_and_compares(tmp_path):
    model = mz.save(mz.seed_example((1, 3, 4, 4)), tmp_path / "model.onnx")
    res = run_toolkit("run", model, "--onnxrt", "--save-inputs", "inputs.json", "--onnx-outputs", "mark", "all",
                      "--save-outputs", "golden.json", cwd=tmp_path)
    assert res.code == 0, res.err
    res = run_toolkit("data", "to-input", "inputs.json", "golden.json", "-o", "layerwise_inputs.json", cwd=tmp_path)
    assert res.code == 0, res.err
    onnx_utils = __import__("onnx.utils", fromlist=["extract_model"])
    onnx_utils.extract_model(model, str(tmp_path / "sub.onnx"), ["mul_out"], ["add_out"])
    # polygraphy reads our inputs, our layerwise inputs and our outputs, and they match its own run
    code, out = polygraphy("run", "model.onnx", "--onnxrt", "--load-inputs", "inputs.json",
                           "--load-outputs", "golden.json", "--onnx-outputs", "mark", "all", cwd=tmp_path)
    assert code == 0 and "PASSED" in out, out
    code, out = polygraphy("run", "sub.onnx", "--onnxrt", "--load-inputs", "layerwise_inputs.json",
                           "--load-outputs", "golden.json", "--atol", "0", "--rtol", "0", cwd=tmp_path)
    assert code == 0 and "PASSED" in out, out


def test_we_load_polygraphy_files_and_compare(tmp_path):
    model = mz.save(mz.seed_example((1, 3, 4, 4)), tmp_path / "model.onnx")
    code, out = polygraphy("run", "model.onnx", "--onnxrt", "--save-inputs", "inputs.json", "--onnx-outputs",
                           "mark", "all", "--save-outputs", "golden.json", cwd=tmp_path)
    assert code == 0, out
    code, out = polygraphy("data", "merge", "inputs.json", "golden.json", "-o", "pg_layerwise.json", cwd=tmp_path)
    assert code == 0, out
    res = run_toolkit("data", "to-input", "inputs.json", "golden.json", "-o", "our_layerwise.npz", cwd=tmp_path)
    assert res.code == 0, res.err
    onnx_utils = __import__("onnx.utils", fromlist=["extract_model"])
    onnx_utils.extract_model(model, str(tmp_path / "sub.onnx"), ["mul_out"], ["add_out"])
    for layerwise in ("pg_layerwise.json", "our_layerwise.npz"):
        res = run_toolkit("run", "sub.onnx", "--onnxrt", "--load-inputs", layerwise, "--load-outputs", "golden.json",
                          "--atol", "0", "--rtol", "0", cwd=tmp_path)
        assert res.code == 0, res.err
        assert "PASSED | add_out" in res.err
    res = run_toolkit("run", "model.onnx", "--onnxrt", "--load-inputs", "inputs.json", "--load-outputs", "golden.json",
                      "--seed", "1", cwd=tmp_path)
    assert res.code == 0, res.err


def test_polygraphy_per_iteration_folders_load(cli, tmp_path):
    """Polygraphy 0.53 writes an extensionless --save-inputs/--save-outputs path as a folder of
    0000000000.json, 0000000001.json, ... (one iteration each); toolkit reads them as one file."""
    import shutil
    import subprocess

    exe = shutil.which("polygraphy")
    if exe is None:
        pytest.skip("polygraphy (a test dependency) is not installed")
    model = mz.save(mz.seed_example((1, 3, 2, 2)), tmp_path / "m.onnx")
    ins, outs = tmp_path / "pg_inputs", tmp_path / "pg_outputs"
    proc = subprocess.run([exe, "run", model, "--onnxrt", "--iterations", "3", "--save-inputs", str(ins),
                           "--save-outputs", str(outs)], capture_output=True, timeout=300)
    if proc.returncode != 0 or not ins.is_dir():
        pytest.skip("this polygraphy writes no per-iteration folders")
    assert len(load_inputs(str(ins))) == 3
    assert len(load_outputs(str(outs)).runs[0][1]) == 3
    # the same seed gives the same inputs, so the outputs match exactly, also without --load-inputs
    res = cli("run", model, "--onnxrt", "--iterations", "3", "--load-outputs", str(outs), "--atol", "0", "--rtol", "0")
    assert res.code == 0 and "3/3 iteration(s) matched" in res.err, res.err
    res = cli("run", model, "--onnxrt", "--load-inputs", str(ins), "--load-outputs", str(outs))
    assert res.code == 0, res.err


def test_folder_without_iteration_files_is_refused(cli, tmp_path):
    (tmp_path / "empty").mkdir()
    res = cli("inspect", "data", str(tmp_path / "empty"))
    assert res.code == 3 and "per-iteration" in res.err


def _iteration_folder(folder, names):
    """A per-iteration folder whose file ``names[k]`` holds a feed x = k."""
    folder.mkdir()
    for k, name in enumerate(names):
        save_inputs(str(folder / name), [{"x": np.full((1, 3, 2, 2), k, np.float32)}])
    return str(folder)


def test_iteration_files_are_read_in_the_order_of_their_numbers(tmp_path):
    names = [f"{k}.json" for k in range(12)]  # (unpadded: by name, 10.json comes before 2.json)
    feeds = load_inputs(_iteration_folder(tmp_path / "f", names))
    assert [float(f["x"].flat[0]) for f in feeds] == list(range(12))


@pytest.mark.parametrize("names, words", [
    (["0000000000.json", "0000000001.json", "0000000003.json"], "iteration 2 is missing (the next file is 0000000003.json)"),
    (["0.json", "1.json", "01.json"], "iteration 1 is given twice"),
])
def test_an_iteration_missing_or_twice_is_refused(cli, tmp_path, names, words):
    folder = _iteration_folder(tmp_path / "f", names)
    model = mz.save(mz.seed_example((1, 3, 2, 2)), tmp_path / "m.onnx")
    res = cli("run", model, "--onnxrt", "--load-inputs", folder)
    assert res.code == 3 and words in res.err and len(res.err.strip().splitlines()) == 1, res.err


def test_a_name_of_other_digits_is_no_iteration(tmp_path):
    folder = _iteration_folder(tmp_path / "f", ["0.json", "1.json"])
    save_inputs(os.path.join(folder, "\u00b2.json"), [{"x": np.zeros((1, 3, 2, 2), np.float32)}])  # (a superscript 2)
    assert len(load_inputs(folder)) == 2

"""Every example runs end to end (each script checks its own results and exits non-zero
otherwise); the main example's reduced models are checked here too."""

import glob
import os
import subprocess
import sys

import onnx
import pytest

from conftest import REPO

EXAMPLES = sorted(glob.glob(os.path.join(REPO, "examples", "[0-9]*", "run_example.py")))


def test_every_example_has_a_readme_and_a_script():
    dirs = sorted(glob.glob(os.path.join(REPO, "examples", "[0-9]*")))
    assert len(dirs) >= 6
    for d in dirs:
        assert os.path.exists(os.path.join(d, "README.md")), d
        assert os.path.exists(os.path.join(d, "run_example.py")), d


@pytest.mark.parametrize("script", EXAMPLES, ids=[os.path.basename(os.path.dirname(p)) for p in EXAMPLES])
def test_example_runs(script, tmp_path):
    workdir = tmp_path / "work"
    proc = subprocess.run(
        [sys.executable, script, "--workdir", str(workdir)], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    if "01_reducing" in script:
        for name in ("final_reduced.onnx", "sim_final_reduced.onnx", "reduced.onnx", "folded_final_reduced.onnx"):
            model = onnx.load(str(workdir / name))
            assert [n.op_type for n in model.graph.node] == ["Mul"], name
        bisect_only = onnx.load(str(workdir / "sim_initial_reduced.onnx"))
        assert len(bisect_only.graph.node) <= 2
        # the sanitize-first recipe gave the layerwise inputs file to debug reduce itself
        assert "--load-inputs folded_layerwise.json --check" in proc.stdout + proc.stderr

"""`toolkit run --onnxrt --fp16` and the runner spec onnxrt:fp16 (fp16 storage emulated on the CPU)."""

import re

import numpy as np
import onnx
import pytest

import fp16_models as fm
import modelzoo as mz
from toolkit.convert import fp16


@pytest.fixture
def ln_path(tmp_path):
    return mz.save(fm.layernorm_overflow(), tmp_path / "ln.onnx")


TOL = ("--atol", "0.5", "--rtol", "1e-2")  # above fp16 rounding of ~500-sized values, below the overflow


def _tensor_lines(err):
    return [line.split("|")[1].strip() for line in err.splitlines() if re.match(r"\s+(PASSED|FAILED) \| ", line)]


def test_run_fp16_against_fp32_fails_at_the_overflowing_node(cli, ln_path):
    r = cli("run", ln_path, "--onnxrt", "--fp16", "--onnx-outputs", "mark", "all", *TOL)
    assert r.code == 1, r.err
    assert "onnxrt:fp16" in r.err and "fp16 storage emulated" in r.err
    assert "Comparing onnxrt-runner vs onnxrt:fp16" in r.err
    failed = [line for line in r.err.splitlines() if re.match(r"\s+FAILED \| ", line)]
    # the first tensor out of tolerance, in node order, is the Pow's output; it overflowed
    assert failed[0].split("|")[1].strip() == "sq"
    assert "max abs inf" in failed[0]
    assert _tensor_lines(r.err)[:3] == ["a", "mu", "d"]  # a, mu, d: within tolerance, before it
    assert all(line.startswith("    PASSED") for line in r.err.splitlines() if re.match(r"\s+\w+ \| (a|mu|d) \|", line))
    # the layerwise diagnosis names the node
    assert "First out of tolerance: 'sq'" in r.err and "produced by node square [Op: Pow]" in r.err


def test_diagnosis_points_at_the_overflowing_node(ln_path):
    from toolkit.run.diagnosis import diagnose, pair_errors, topology_of
    from toolkit.core.compare.tolerances import Tolerances
    from toolkit.run import RunOptions, execute

    opts = RunOptions(
        ln_path, runners=["onnxrt", "onnxrt:fp16"], onnx_outputs=["mark", "all"], keep_outputs=True,
        tolerances=Tolerances.of(atol=0.5, rtol=1e-2),
    )
    report = execute(opts)
    assert not report.passed
    pair = report.comparisons[0]
    a, b = report.results[0].iterations, report.results[1].iterations
    diag = diagnose(pair_errors(pair, a, b), topology_of(onnx.load(ln_path)), pair.label_a, pair.label_b)
    assert diag.first_failure.name == "sq" and diag.first_failure.node == "square"
    assert "inf" in str(diag.first_failure.max_abs)


def test_the_mixed_model_found_passes_under_emulation(cli, ln_path, tmp_path):
    mixed = tmp_path / "mixed.onnx"
    r = cli("debug", "precision", ln_path, "-o", mixed, *TOL)
    assert r.code == 0 and r.out.split() == fm.LN_MUST_KEEP
    # the converted model itself, emulated on the CPU (its fp16 tensors rounded), against fp32
    ref = tmp_path / "fp32.json"
    assert cli("run", ln_path, "--onnxrt", "--save-outputs", ref).code == 0
    r = cli("run", mixed, "--onnxrt", "--fp16", "--load-outputs", ref, *TOL)
    assert r.code == 0, r.err
    # the all-fp16 conversion fails the same check
    full = tmp_path / "full.onnx"
    onnx.save(fp16.convert_to_fp16(fm.layernorm_overflow()), str(full))
    r = cli("run", full, "--onnxrt", "--fp16", "--load-outputs", ref, *TOL)
    assert r.code == 1


def test_runner_spec_and_external_data(cli, tmp_path):
    path = mz.save_with_external_data(fm.layernorm_overflow(), tmp_path / "ext.onnx", location="ext.bin")
    from toolkit.run.specs import make_runner, parse_runner_spec

    spec = parse_runner_spec("onnxrt:fp16")
    assert spec.options == {"fp16": True}
    runner = make_runner(spec, path)
    feed = fm.ln_input()
    with runner:
        got = runner.infer(feed)["y"]
        assert "fp16 storage emulated" in runner.summary()
    want = fp16.emulate_fp16(fm.layernorm_overflow())
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    ref = ort.InferenceSession(want.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, feed)[0]
    np.testing.assert_array_equal(got, ref)
    # the model file and its weights are untouched
    assert onnx.load(path).graph.initializer[0].data_type == onnx.TensorProto.FLOAT


def test_debug_reduce_compare_with_the_fp16_runner_spec(cli, ln_path, tmp_path, monkeypatch):
    """debug reduce --compare onnxrt onnxrt:fp16: each subgraph, fed fp32 reference values, runs
    with fp16 storage emulated; the overflow reduces to the Pow alone."""
    monkeypatch.chdir(tmp_path)  # the replay file goes beside the iteration artifact
    out = tmp_path / "reduced.onnx"
    r = cli("debug", "reduce", ln_path, "-o", out, "--compare", "onnxrt", "onnxrt:fp16", *TOL)
    assert r.code == 0, r.err
    reduced = onnx.load(str(out))
    assert [n.name for n in reduced.graph.node] == ["square"]

"""`toolkit run --trt` on a real GPU with real TensorRT 10 or 11 (marked ``gpu``).

These tests run only where an NVIDIA GPU, its driver, TensorRT and cuda-python are usable; everywhere
else (CI, laptops) the whole module is skipped, with the reason. Without a GPU the backend is tested
on CPU through fakes checked against the real API: test_trt.py, test_trt_findings.py and
test_trt_surface.py.

Every test runs toolkit in a subprocess: the pytest process itself must never touch CUDA,
because other tests fork it (the warm worker of ``debug reduce``), and a CUDA driver
initialised before a fork is unusable in the child. The same holds for the probe below.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import modelzoo as mz
from conftest import run_toolkit
from toolkit.core.io.datafiles import IterationResult, RunResults, load_inputs, load_outputs, save_inputs, save_outputs


def _probe():
    """(reason to skip or None, TensorRT major version), asked of a fresh interpreter."""
    code = (
        "from toolkit.backends.trt import check_available\n"
        "from toolkit.core.errors import ToolkitError\n"
        "try:\n"
        "    trt, _ = check_available()\n"
        "except ToolkitError as exc:\n"
        "    print('SKIP', exc)\n"
        "else:\n"
        "    print('OK', trt.__version__)\n"
    )
    try:
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        return "probing TensorRT timed out", 0
    out = proc.stdout.strip().splitlines()[-1:] or [""]
    if not out[0].startswith("OK "):
        return (out[0][5:] if out[0].startswith("SKIP ") else proc.stderr.strip()[-300:]) or "TensorRT probe failed", 0
    return None, int(out[0].split()[1].split(".")[0])


SKIP_REASON, TRT_MAJOR = _probe()
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(SKIP_REASON is not None, reason=f"TensorRT on a GPU is not usable here: {SKIP_REASON}"),
]
weak_typing = pytest.mark.skipif(TRT_MAJOR >= 11, reason="--fp16/--int8 builder flags exist in TensorRT 10 only")
strong_typing = pytest.mark.skipif(TRT_MAJOR < 11, reason="TensorRT 11 builds strongly typed networks only")


def small_cnn(batch="N"):
    """x:[batch,3,16,16] -> Conv(8,3x3) -> Relu -> MaxPool(2) -> Conv(4,1x1) -> y."""
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.normal(0, 0.3, (8, 3, 3, 3)).astype(np.float32), "w1")
    b1 = numpy_helper.from_array(rng.normal(0, 0.1, (8,)).astype(np.float32), "b1")
    w2 = numpy_helper.from_array(rng.normal(0, 0.3, (4, 8, 1, 1)).astype(np.float32), "w2")
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["conv1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["conv1"], ["relu1"], name="relu1"),
        helper.make_node("MaxPool", ["relu1"], ["pool1"], name="pool1", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["pool1", "w2"], ["y"], name="conv2"),
    ]
    graph = helper.make_graph(
        nodes,
        "small_cnn",
        [mz.vi("x", [batch, 3, 16, 16])],
        [mz.vi("y", [batch, 4, 8, 8])],
        [w1, b1, w2],
    )
    return mz.make_model(graph)


@pytest.fixture
def cnn(tmp_path):
    return mz.save(small_cnn(1), tmp_path / "cnn.onnx")


def ok(res):
    assert res.code == 0, res.err[-3000:]
    assert res.err.strip().splitlines()[-1].startswith("PASSED | Command:")
    return res


def test_onnxrt_and_trt_agree_on_a_small_cnn(cnn):
    res = ok(run_toolkit("run", cnn, "--onnxrt", "--trt", "--atol", "1e-4", "--rtol", "1e-3"))
    assert "trt-runner | TensorRT" in res.err
    assert "Comparing onnxrt-runner vs trt-runner" in res.err


def test_trt_first_then_onnxrt_with_several_iterations(cnn, tmp_path):
    ok(run_toolkit("run", cnn, "--trt", "--onnxrt", "--iterations", "3", "--save-outputs", tmp_path / "o.npz",
                   "--atol", "1e-4", "--rtol", "1e-3"))  # fmt: skip
    runs = load_outputs(str(tmp_path / "o.npz")).runs
    assert [r[0] for r in runs] == ["trt-runner", "onnxrt-runner"]
    assert len(runs[0][1]) == 3


@weak_typing
def test_fp16_with_looser_tolerances(cnn):
    res = ok(run_toolkit("run", cnn, "--onnxrt", "--trt", "--fp16", "--atol", "2e-2", "--rtol", "2e-2"))
    assert "(fp16)" in res.err


@strong_typing
def test_fp16_on_tensorrt_11_converts_the_model_first(cnn):
    res = ok(run_toolkit("run", cnn, "--onnxrt", "--trt", "--fp16", "--atol", "2e-2", "--rtol", "2e-2"))
    assert "builds strongly typed: the model was converted to float16 first" in res.err


@strong_typing
def test_bf16_on_tensorrt_11_converts_the_model_first(cnn):
    res = ok(run_toolkit("run", cnn, "--onnxrt", "--trt", "--bf16", "--atol", "5e-2", "--rtol", "5e-2"))
    assert "builds strongly typed: the model was converted to bfloat16 first" in res.err


def test_debug_precision_with_a_tensorrt_fp16_candidate(tmp_path):
    """On a GPU the search runs real builds; TensorRT may keep a fused block's intermediates in
    fp32, so it may need fewer nodes than the CPU emulation (never others)."""
    import fp16_models as fm

    path = mz.save(fm.layernorm_overflow(), tmp_path / "ln.onnx")
    res = run_toolkit("debug", "precision", path, "--compare", "onnxrt", "trt:fp16", "-o", tmp_path / "mixed.onnx")
    assert res.code == 0, res.err[-3000:]
    assert set(res.out.split()) <= set(fm.LN_MUST_KEEP)


@strong_typing
def test_int8_on_tensorrt_11_without_qdq_is_one_line(cnn):
    res = run_toolkit("run", cnn, "--trt", "--int8")
    assert res.code == 4 and "needs explicit quantization" in res.err.strip().splitlines()[-1]


def test_two_profiles_each_feed_runs_in_the_one_that_covers_it(tmp_path):
    model = mz.save(small_cnn("N"), tmp_path / "dyn.onnx")
    profiles = ["--trt-min-shapes", "x:[1,3,16,16]", "--trt-opt-shapes", "x:[1,3,16,16]",
                "--trt-max-shapes", "x:[2,3,16,16]",
                "--trt-min-shapes", "x:[3,3,16,16]", "--trt-opt-shapes", "x:[4,3,16,16]",
                "--trt-max-shapes", "x:[4,3,16,16]"]  # fmt: skip
    feeds = [{"x": np.random.default_rng(k).random((n, 3, 16, 16), dtype=np.float32)} for k, n in enumerate((4, 1, 3))]
    save_inputs(str(tmp_path / "in.npz"), feeds)
    res = ok(run_toolkit("run", model, "--trt", "--onnxrt", *profiles, "--load-inputs", tmp_path / "in.npz",
                         "--atol", "1e-4", "--rtol", "1e-3"))  # fmt: skip
    assert "2 profile(s)" in res.err


def test_tf32_and_pool_limit(cnn):
    ok(run_toolkit("run", cnn, "--onnxrt", "--trt", "--tf32", "--pool-limit", "workspace:256M",
                   "--atol", "1e-2", "--rtol", "1e-2"))  # fmt: skip


def test_dynamic_shape_profile(tmp_path):
    model = mz.save(small_cnn("N"), tmp_path / "dyn.onnx")
    profile = ["--trt-min-shapes", "x:[1,3,16,16]", "--trt-opt-shapes", "x:[2,3,16,16]",
               "--trt-max-shapes", "x:[4,3,16,16]"]  # fmt: skip
    res = ok(run_toolkit("run", model, "--onnxrt", "--trt", *profile, "--atol", "1e-4", "--rtol", "1e-3"))
    assert "{x [dtype=float32, shape=(2, 3, 16, 16)]}" in res.err  # generated at the profile's opt shape
    feeds = [{"x": np.random.default_rng(k).random((n, 3, 16, 16), dtype=np.float32)} for k, n in enumerate((1, 3, 4))]
    save_inputs(str(tmp_path / "in.npz"), feeds)
    ok(run_toolkit("run", model, "--trt", "--onnxrt", *profile, "--load-inputs", tmp_path / "in.npz",
                   "--atol", "1e-4", "--rtol", "1e-3"))  # fmt: skip
    save_inputs(str(tmp_path / "big.npz"), [{"x": np.zeros((5, 3, 16, 16), np.float32)}])
    res = run_toolkit("run", model, "--trt", *profile, "--load-inputs", tmp_path / "big.npz")
    assert res.code == 3 and "fit no profile of the engine (profile 0: 'x' min (1, 3, 16, 16)" in res.err


def test_dynamic_model_without_profile_uses_loaded_shapes(tmp_path):
    model = mz.save(small_cnn("N"), tmp_path / "dyn.onnx")
    feeds = [{"x": np.ones((n, 3, 16, 16), np.float32)} for n in (2, 3)]
    save_inputs(str(tmp_path / "in.npz"), feeds)
    ok(run_toolkit("run", model, "--onnxrt", "--trt", "--load-inputs", tmp_path / "in.npz", "--atol", "1e-4",
                   "--rtol", "1e-3"))  # fmt: skip
    ok(run_toolkit("run", model, "--trt", "--onnxrt", "--input-shapes", "x:[3,3,16,16]", "--atol", "1e-4",
                   "--rtol", "1e-3"))  # fmt: skip


def test_shape_computations_in_a_dynamic_model(tmp_path):
    model = mz.save(mz.dynamic_batch(), tmp_path / "dynb.onnx")
    ok(run_toolkit("run", model, "--onnxrt", "--trt", "--input-shapes", "x:[3,4]", "--val-range", "[-1,1]"))


def test_mark_all_layerwise(cnn, tmp_path):
    out = tmp_path / "layerwise.json"
    res = ok(run_toolkit("run", cnn, "--onnxrt", "--trt", "--onnx-outputs", "mark", "all",
                         "--trt-outputs", "mark", "all", "--save-outputs", out, "--atol", "1e-4", "--rtol", "1e-3"))  # fmt: skip
    runs = dict(load_outputs(str(out)).runs)
    trt_names = set(runs["trt-runner"][0].outputs)
    assert {"conv1", "relu1", "pool1", "y"} <= trt_names
    assert "Comparing onnxrt-runner vs trt-runner" in res.err


def test_trt_outputs_names_and_exclusions(cnn, tmp_path):
    out = tmp_path / "o.json"
    ok(run_toolkit("run", cnn, "--trt", "--trt-outputs", "relu1", "pool1", "--save-outputs", out))
    assert set(load_outputs(str(out)).runs[0][1][0].outputs) == {"relu1", "pool1"}
    ok(run_toolkit("run", cnn, "--trt", "--trt-outputs", "mark", "all", "--trt-exclude-outputs", "conv*",
                   "--save-outputs", out))  # fmt: skip
    names = set(load_outputs(str(out)).runs[0][1][0].outputs)
    assert "relu1" in names and not any(n.startswith("conv") for n in names)
    res = run_toolkit("run", cnn, "--trt", "--trt-outputs", "no_such_tensor")
    assert res.code == 3 and "no_such_tensor" in res.err  # an unknown tensor name is bad input, as everywhere


def test_save_engine_then_load_it(cnn, tmp_path):
    engine = tmp_path / "cnn.engine"
    ok(run_toolkit("run", cnn, "--trt", "--save-engine", engine, "--save-inputs", tmp_path / "in.json",
                   "--save-outputs", tmp_path / "out.json"))  # fmt: skip
    assert engine.stat().st_size > 0
    res = ok(run_toolkit("run", engine, "--trt", "--load-inputs", tmp_path / "in.json",
                         "--load-outputs", tmp_path / "out.json", "--atol", "0", "--rtol", "0"))  # fmt: skip
    assert f"engine loaded from {engine}" in res.err
    res = run_toolkit("run", engine, "--onnxrt", "--trt")
    assert res.code == 2


def test_corrupt_engine_file(tmp_path):
    bad = tmp_path / "bad.plan"
    bad.write_bytes(b"not an engine at all" * 10)
    res = run_toolkit("run", bad, "--trt")
    assert res.code == 3 and "not a TensorRT engine" in res.err and "Traceback" not in res.err


def test_parser_error_names_the_node(tmp_path):
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"], name="relu"),
         helper.make_node("NoSuchOp", ["r"], ["y"], name="mystery_node", domain="com.example")],  # fmt: skip
        "unsupported",
        [mz.vi("x", [1, 4])],
        [mz.vi("y", [1, 4])],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)]
    )
    model.ir_version = 8
    path = mz.save(model, tmp_path / "unsupported.onnx")
    res = run_toolkit("run", path, "--trt")
    assert res.code == 3, res.err
    last = res.err.strip().splitlines()[-1]
    assert last.startswith(f"error: {path}: TensorRT cannot parse the model: node 1 'mystery_node' (NoSuchOp)")


def test_data_dependent_output_shape(tmp_path):
    graph = helper.make_graph(
        [helper.make_node("NonZero", ["x"], ["y"], name="nonzero")],
        "nonzero",
        [mz.vi("x", [2, 5])],
        [mz.vi("y", [2, None], TensorProto.INT64)],
    )
    path = mz.save(mz.make_model(graph), tmp_path / "nonzero.onnx")
    x = np.array([[0, 1, 0, 2, 0], [3, 0, 0, 0, 4]], np.float32)
    save_inputs(str(tmp_path / "in.json"), [{"x": x}])
    ok(run_toolkit("run", path, "--onnxrt", "--trt", "--load-inputs", tmp_path / "in.json"))


@weak_typing
def test_int8_calibrates_on_the_run_inputs_and_uses_the_cache(cnn, tmp_path):
    cache = tmp_path / "calib.cache"
    res = ok(run_toolkit("run", cnn, "--trt", "--int8", "--calibration-cache", cache, "--iterations", "4"))
    assert "(int8)" in res.err
    assert cache.stat().st_size > 0
    ok(run_toolkit("run", cnn, "--trt", "--int8", "--calibration-cache", cache))


def test_reduce_with_a_trt_check_finds_the_mismatching_node(tmp_path):
    """Polygraphy's accuracy workflow with TensorRT as the check, in the forked warm worker.

    The golden value of the Mul's output is made wrong (and the values after it are made
    consistent with it), so only a subgraph holding the Mul mismatches."""
    mz.save(mz.seed_example((1, 3, 8, 8)), tmp_path / "model.onnx")
    ok(run_toolkit("run", "model.onnx", "--onnxrt", "--save-inputs", "inputs.json", "--onnx-outputs", "mark", "all",
                   "--save-outputs", "golden.json", cwd=tmp_path))  # fmt: skip
    (name, iters), = load_outputs(str(tmp_path / "golden.json")).runs
    out = dict(iters[0].outputs)
    x0 = np.asarray(load_inputs(str(tmp_path / "inputs.json"))[0]["x0"])
    out["mul_out"] = np.asarray(out["mul_out"]) * 1.5
    out["add_out"] = out["mul_out"] + 0.5
    out["Y"] = x0 + out["add_out"]
    save_outputs(str(tmp_path / "layerwise_golden.json"), RunResults([(name, [IterationResult(out)])]))
    res = run_toolkit("data", "to-input", "inputs.json", "layerwise_golden.json", "-o", "layerwise_inputs.json",
                      cwd=tmp_path)  # fmt: skip
    assert res.code == 0, res.err
    res = run_toolkit(
        "debug", "reduce", "model.onnx", "-o", "reduced.onnx",
        "--check", "toolkit", "run", "polygraphy_debug.onnx", "--trt",
        "--load-inputs", "layerwise_inputs.json", "--load-outputs", "layerwise_golden.json",
        cwd=tmp_path, timeout=600,
    )  # fmt: skip
    assert res.code == 0, res.err[-3000:]
    assert "[warm worker]" in res.err
    reduced = onnx.load(str(tmp_path / "reduced.onnx"))
    assert [n.op_type for n in reduced.graph.node] == ["Mul"]

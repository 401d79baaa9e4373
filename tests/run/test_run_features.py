"""run: --iterations 0, a runner given twice, --postprocess top-K with --compare-func indices,
--error-quantile, --save-onnx, --data-loader-script, Inf/NaN reported as detected."""

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import modelzoo as mz
from toolkit.core.compare.arrays import compare_indices, topk_indices
from toolkit.core.io.datafiles import load_inputs, save_outputs, IterationResult, RunResults


@pytest.fixture
def model(tmp_path):
    return mz.save(mz.seed_example((1, 3, 4, 4)), tmp_path / "model.onnx")


def test_zero_iterations_runs_nothing_and_passes(cli, model, tmp_path):
    out = tmp_path / "out.json"
    res = cli("run", model, "--onnxrt", "--iterations=0", "--save-outputs", str(out))
    assert res.code == 0, res.err
    assert "Iteration 0" not in res.err and "Completed 0 iteration(s)" in res.err
    assert json.loads(out.read_text())["lst"][0][1] == []


def test_negative_iterations_is_a_usage_error(cli, model):
    assert cli("run", model, "--onnxrt", "--iterations", "-1").code == 2


def test_same_runner_twice_is_compared_with_itself(cli, model):
    res = cli("run", model, "--onnxrt", "--onnxrt", "--iterations", "2")
    assert res.code == 0, res.err
    assert "Comparing onnxrt-runner vs onnxrt-runner-2" in res.err
    assert "2/2 iteration(s) matched" in res.err


def test_topk_indices_are_largest_first_and_clamped():
    x = np.array([[0.1, 0.9, 0.5, 0.9], [3.0, 2.0, 1.0, 0.0]])
    np.testing.assert_array_equal(topk_indices(x, 2), [[1, 3], [0, 1]])  # ties keep their order
    np.testing.assert_array_equal(topk_indices(x, 9), np.argsort(-x, axis=-1, kind="stable"))
    np.testing.assert_array_equal(topk_indices(x, 1, axis=0), [[1, 1, 1, 0]])


def test_indices_comparison_and_index_tolerance():
    a = np.array([[4, 2, 7, 1]])
    assert compare_indices("y", a, a).passed
    swapped = np.array([[2, 4, 7, 1]])
    assert not compare_indices("y", a, swapped).passed
    assert compare_indices("y", a, swapped, index_tolerance=1).passed
    missing = np.array([[4, 2, 9, 1]])
    res = compare_indices("y", a, missing, index_tolerance=1)
    assert not res.passed and res.mismatches == 1


def _logits_model(tmp_path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 6])
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "logits", [x], [y])
    return mz.save(mz.make_model(graph), tmp_path / "logits.onnx")


def _golden(path, values):
    save_outputs(path, RunResults([("golden", [IterationResult({"y": values}, 0.0, "golden")])]))


def _logits_run(cli, tmp_path):
    """The logits model, its saved inputs file and the input values."""
    model = _logits_model(tmp_path)
    ins = str(tmp_path / "in.json")
    assert cli("run", model, "--onnxrt", "--save-inputs", ins, "-q").code == 0
    return model, ins, load_inputs(ins)[0]["x"]


def test_postprocess_topk_compares_rankings_not_values(cli, tmp_path):
    model, ins, x = _logits_run(cli, tmp_path)
    golden = str(tmp_path / "golden.json")
    _golden(golden, x * 10 + 5)  # same ranking, very different values
    base = ("run", model, "--onnxrt", "--load-inputs", ins, "--load-outputs", golden)
    assert cli(*base).code == 1
    res = cli(*base, "--postprocess", "top-3", "--compare-func", "indices")
    assert res.code == 0, res.err
    assert cli(*base, "--postprocess", "y:top-3,axis=1").code == 0  # exact comparison of the indices
    shuffled = x.copy()
    shuffled[:, [0, 1]] = shuffled[:, [1, 0]]
    _golden(golden, shuffled)
    assert cli(*base, "--postprocess", "top-6", "--compare-func", "indices").code == 1  # two indices moved
    res = cli(*base, "--postprocess", "top-6", "--compare-func", "indices", "--index-tolerance", "6")
    assert res.code == 0, res.err


@pytest.mark.parametrize("bad", [["--postprocess", "bottom-3"], ["--compare-func", "l2"], ["--error-quantile", "2"]])
def test_bad_comparison_options_are_usage_errors(cli, model, bad):
    res = cli("run", model, "--onnxrt", "--onnxrt", *bad)
    assert res.code == 2, res.err


def test_error_quantile_lets_a_few_outliers_pass(cli, tmp_path):
    model, ins, x = _logits_run(cli, tmp_path)
    off = x.copy()
    off[0, 0] += 1.0  # one element of twelve is far off
    golden = str(tmp_path / "golden.json")
    _golden(golden, off)
    base = ("run", model, "--onnxrt", "--load-inputs", ins, "--load-outputs", golden, "--check-error-stat", "quantile")
    assert cli(*base).code == 1  # the 0.99 quantile sees it
    assert cli(*base, "--error-quantile", "0.5").code == 0
    assert cli(*base, "--error-quantile", "y:0.5").code == 0


def test_save_onnx_writes_the_model_with_marked_outputs(cli, model, tmp_path):
    out = tmp_path / "ran.onnx"
    res = cli("run", model, "--onnxrt", "--onnx-outputs", "mark", "all", "--save-onnx", str(out), "-q")
    assert res.code == 0, res.err
    saved = onnx.load(str(out))
    marked = {o.name for o in saved.graph.output}
    assert len(marked) == len(onnx.load(model).graph.node)  # one output per node
    assert cli("run", model, "--onnxrt", "--save-onnx", model).code == 2  # never overwrites MODEL


def _script(tmp_path, body, name="loader.py"):
    path = tmp_path / name
    path.write_text(body)
    return str(path)


def test_data_loader_script_feeds_the_run(cli, model, tmp_path):
    script = _script(tmp_path, (
        "import numpy as np\n"
        "def load_data():\n"
        "    for k in range(3):\n"
        "        yield {'x0': np.full((1, 3, 4, 4), k, np.float32), 'x1': np.ones((1, 3, 4, 4), np.float32)}\n"
    ))
    ins = str(tmp_path / "in.json")
    res = cli("run", model, "--onnxrt", "--data-loader-script", script, "--save-inputs", ins)
    assert res.code == 0, res.err
    feeds = load_inputs(ins)
    assert [float(f["x0"].max()) for f in feeds] == [0.0, 1.0, 2.0]


@pytest.mark.parametrize("how", ["colon", "flag"])
def test_data_loader_custom_function_name(cli, model, tmp_path, how):
    script = _script(tmp_path, (
        "import numpy as np\n"
        "def my_feeds():\n"
        "    return [{'x0': np.zeros((1, 3, 4, 4), np.float32), 'x1': np.zeros((1, 3, 4, 4), np.float32)}]\n"
    ))
    args = [f"{script}:my_feeds"] if how == "colon" else [script, "--data-loader-func-name", "my_feeds"]
    res = cli("run", model, "--onnxrt", "--data-loader-script", *args)
    assert res.code == 0, res.err
    assert "Iteration 0" in res.err and "Iteration 1" not in res.err


def test_failing_data_loader_script_is_one_error_line_with_its_line(cli, model, tmp_path):
    script = _script(tmp_path, (
        "import numpy as np\n"
        "def load_data():\n"
        "    yield {'x0': np.zeros((1, 3, 4, 4), np.float32)}\n"
        "    raise RuntimeError('camera unplugged')\n"
    ))
    res = cli("run", model, "--onnxrt", "--data-loader-script", script)
    assert res.code == 3
    lines = res.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ")
    assert "loader.py, line 4" in lines[0] and "camera unplugged" in lines[0]
    assert "Traceback" not in res.err


def test_data_loader_script_errors(cli, model, tmp_path):
    res = cli("run", model, "--onnxrt", "--data-loader-script", str(tmp_path / "nope.py"))
    assert res.code == 3 and "nope.py" in res.err
    script = _script(tmp_path, "def other():\n    return []\n")
    res = cli("run", model, "--onnxrt", "--data-loader-script", script)
    assert res.code == 3 and "no 'load_data'" in res.err and "other" in res.err
    bad = _script(tmp_path, "x = (\n", name="broken.py")
    res = cli("run", model, "--onnxrt", "--data-loader-script", bad)
    assert res.code == 3 and "broken.py" in res.err and "SyntaxError" in res.err


def test_help_does_not_run_the_script(cli, tmp_path):
    marker = tmp_path / "ran"
    script = _script(tmp_path, f"open({str(marker)!r}, 'w').write('x')\n")
    assert cli("run", "--help", "--data-loader-script", script).code == 0
    assert not marker.exists()


def test_inf_is_reported_as_detected(cli, tmp_path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])
    graph = helper.make_graph([helper.make_node("Log", ["x"], ["y"])], "log", [x], [y])
    model = mz.save(mz.make_model(graph), tmp_path / "log.onnx")
    res = cli("run", model, "--onnxrt", "--val-range", "[0,0]", "--validate")
    assert res.code == 1
    assert "Inf Detected (4 Inf value(s))" in res.err


def test_fp_to_fp16_runs_the_converted_model(cli, tmp_path):
    model = _logits_model(tmp_path)
    saved = tmp_path / "ran.onnx"
    res = cli("run", model, "--onnxrt", "--fp-to-fp16", "--save-onnx", str(saved), "--onnxrt")
    assert res.code == 0, res.err  # the two fp16 runs agree with each other
    ran = onnx.load(str(saved))
    assert TensorProto.FLOAT16 in {vi.type.tensor_type.elem_type for vi in ran.graph.value_info} | {
        n.attribute[0].i for n in ran.graph.node if n.op_type == "Cast"
    }
    assert ran.graph.input[0].type.tensor_type.elem_type == TensorProto.FLOAT  # graph I/O keep their types


def test_debug_reduce_takes_a_data_loader_script(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    model = mz.save(mz.seed_example((1, 3, 4, 4)), tmp_path / "m.onnx")
    script = _script(tmp_path, (
        "import numpy as np\n"
        "def feeds():\n"
        "    return [{'x0': np.ones((1, 3, 4, 4), np.float32), 'x1': np.ones((1, 3, 4, 4), np.float32)}]\n"
    ))
    res = cli("debug", "reduce", model, "-o", "r.onnx", "--data-loader-script", f"{script}:feeds",
              "--fail-regex", "Op: Mul", "--check", "toolkit", "inspect", "model", "polygraphy_debug.onnx",
              "--mode=basic")
    assert res.code == 0, res.err
    assert [n.op_type for n in onnx.load("r.onnx").graph.node] == ["Mul"]
    bad = cli("debug", "reduce", model, "-o", "r2.onnx", "--data-loader-script", f"{script}:nope",
              "--check", "true")
    assert bad.code == 3 and "defines no 'nope'" in bad.err


def test_no_shape_check_compares_same_size_outputs(cli, tmp_path):
    model, ins, x = _logits_run(cli, tmp_path)
    golden = str(tmp_path / "flat.json")
    _golden(golden, x.reshape(12))
    base = ("run", model, "--onnxrt", "--load-inputs", ins, "--load-outputs", golden)
    res = cli(*base)
    assert res.code == 1 and "shapes differ" in res.err
    assert cli(*base, "--no-shape-check").code == 0
    _golden(golden, x.reshape(12)[:6])
    assert cli(*base, "--no-shape-check").code == 1  # a different number of elements still fails

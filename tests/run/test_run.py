"""`toolkit run --onnxrt`: generated and loaded inputs, layerwise outputs, saving, comparing."""

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import modelzoo as mz
from conftest import run_toolkit
from toolkit.core.io.datafiles import load_inputs, load_outputs, save_inputs, save_outputs, RunResults, IterationResult
from toolkit.core.install import extra_install_command

SHAPE = (1, 3, 4, 4)


@pytest.fixture
def seed_model(tmp_path):
    return mz.save(mz.seed_example(SHAPE), tmp_path / "model.onnx")


def typed_inputs_model():
    """f:float32[2,3], i:int64[4], b:bool[5] -> Identity each (three outputs)."""
    graph = helper.make_graph(
        [
            helper.make_node("Identity", ["f"], ["fo"], name="id_f"),
            helper.make_node("Identity", ["i"], ["io"], name="id_i"),
            helper.make_node("Not", ["b"], ["bo"], name="not_b"),
        ],
        "typed",
        [mz.vi("f", [2, 3]), mz.vi("i", [4], TensorProto.INT64), mz.vi("b", [5], TensorProto.BOOL)],
        [mz.vi("fo", [2, 3]), mz.vi("io", [4], TensorProto.INT64), mz.vi("bo", [5], TensorProto.BOOL)],
    )
    return mz.make_model(graph)


def bad_reshape_model():
    """x:[1,3,8] -> Reshape to [1,25] (fails at inference, as in the seed talk)."""
    shape = numpy_helper.from_array(np.array([1, 25], np.int64), "shape")
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"], name="relu"), helper.make_node("Reshape", ["r", "shape"], ["y"], name="reshape")],
        "bad_reshape",
        [mz.vi("x", [1, 3, 8])],
        [mz.vi("y", [1, 25])],
        [shape],
    )
    return mz.make_model(graph)


# ----------------------------------------------------------------------------- basics


def test_run_prints_inputs_outputs_and_passed(cli, seed_model):
    res = cli("run", seed_model, "--onnxrt")
    assert res.code == 0, res.err
    assert res.out == ""  # logs go to stderr
    assert "{x0 [dtype=float32, shape=(1, 3, 4, 4)]}" in res.err
    assert "{Y [dtype=float32, shape=(1, 3, 4, 4)]}" in res.err
    assert "Iteration 0" in res.err and " ms" in res.err
    last = res.err.strip().splitlines()[-1]
    assert last.startswith("PASSED | Command: toolkit run ") and "--onnxrt" in last


def test_quiet_prints_only_final_line(cli, seed_model):
    res = cli("run", seed_model, "--onnxrt", "-q")
    assert res.code == 0
    assert res.err.strip().splitlines() == [f"PASSED | Command: toolkit run {seed_model} --onnxrt -q"]


def test_seed_makes_inputs_reproducible(cli, seed_model, tmp_path):
    paths = [str(tmp_path / f"in{i}.npz") for i in range(3)]
    for path, seed in zip(paths, (7, 7, 8)):
        assert cli("run", seed_model, "--onnxrt", "--seed", seed, "--save-inputs", path, "-q").code == 0
    a, b, c = (load_inputs(p)[0] for p in paths)
    assert np.array_equal(a["x0"], b["x0"]) and np.array_equal(a["x1"], b["x1"])
    assert not np.array_equal(a["x0"], c["x0"])


def test_val_range_global_and_per_input_spellings(cli, seed_model, tmp_path):
    out = str(tmp_path / "in.npz")
    res = cli("run", seed_model, "--onnxrt", "--val-range", "[2,3]", "x1:-1,0", "--save-inputs", out, "-q")
    assert res.code == 0, res.err
    feed = load_inputs(out)[0]
    assert feed["x0"].min() >= 2 and feed["x0"].max() < 3
    assert feed["x1"].min() >= -1 and feed["x1"].max() < 0
    res = cli("run", seed_model, "--onnxrt", "--val-range", "x0:[5,6]", "--save-inputs", out, "-q")
    assert load_inputs(out)[0]["x0"].min() >= 5


def test_bad_val_range_is_usage_error(cli, seed_model):
    for bad in ("[1]", "[3,1]", "x0:[a,b]"):
        res = cli("run", seed_model, "--onnxrt", "--val-range", bad)
        assert res.code == 2, (bad, res.err)
        assert "error:" in res.err and "Traceback" not in res.err
    # a name that is no input of the model: exit 3, like every unknown tensor name
    res = cli("run", seed_model, "--onnxrt", "--val-range", "nope:[0,1]")
    assert res.code == 3 and "'nope'" in res.err


def test_integer_and_bool_inputs_get_sensible_values(cli, tmp_path):
    model = mz.save(typed_inputs_model(), tmp_path / "typed.onnx")
    out = str(tmp_path / "in.npz")
    res = cli("run", model, "--onnxrt", "--val-range", "i:[-3,3]", "--iterations", "4", "--save-inputs", out, "-q")
    assert res.code == 0, res.err
    feeds = load_inputs(out)
    assert len(feeds) == 4
    ints = np.concatenate([f["i"] for f in feeds])
    bools = np.concatenate([f["b"] for f in feeds])
    assert ints.dtype == np.int64 and ints.min() >= -3 and ints.max() <= 3 and len(set(ints.tolist())) > 1
    assert bools.dtype == np.bool_ and set(bools.tolist()) == {True, False}
    assert feeds[0]["f"].dtype == np.float32


def test_dynamic_dims_from_input_shapes_or_default_one(cli, tmp_path):
    model = mz.save(mz.dynamic_batch(4), tmp_path / "dyn.onnx")
    res = cli("run", model, "--onnxrt")
    assert res.code == 0
    assert "warning: input 'x' has dynamic shape" in res.err and "{y [dtype=float32, shape=(1, 4)]}" in res.err
    res = cli("run", model, "--onnxrt", "--input-shapes", "x:[3,4]")
    assert res.code == 0 and "{y [dtype=float32, shape=(3, 4)]}" in res.err
    res = cli("run", model, "--onnxrt", "--input-shapes", "x:5x4")
    assert res.code == 0 and "shape=(5, 4)" in res.err
    assert cli("run", model, "--onnxrt", "--input-shapes", "x:[3,5]").code == 3  # fixed dim differs: the model does not fit
    assert cli("run", model, "--onnxrt", "--input-shapes", "nope:[3,4]").code == 3  # unknown tensor name


def test_iterations_save_every_iteration(cli, seed_model, tmp_path):
    ins, outs = str(tmp_path / "i.json"), str(tmp_path / "o.json")
    res = cli("run", seed_model, "--onnxrt", "--iterations", "3", "--save-inputs", ins, "--save-outputs", outs)
    assert res.code == 0
    feeds = load_inputs(ins)
    results = load_outputs(outs)
    assert len(feeds) == 3 and len(results.runs[0][1]) == 3
    assert not np.array_equal(feeds[0]["x0"], feeds[1]["x0"])
    for feed, it in zip(feeds, results.runs[0][1]):
        np.testing.assert_allclose(it.outputs["Y"], feed["x0"] + feed["x1"] * 2 + 0.5, rtol=1e-6)


# ----------------------------------------------------------------------------- save / load / compare


@pytest.mark.parametrize("ext", ["json", "npz"])
def test_save_then_load_inputs_and_outputs_passes(cli, seed_model, tmp_path, ext):
    ins, outs = str(tmp_path / f"i.{ext}"), str(tmp_path / f"o.{ext}")
    assert cli("run", seed_model, "--onnxrt", "--save-inputs", ins, "--save-outputs", outs, "-q").code == 0
    res = cli("run", seed_model, "--onnxrt", "--load-inputs", ins, "--load-outputs", outs, "--atol", "0", "--rtol", "0")
    assert res.code == 0, res.err
    assert "PASSED | Y |" in res.err
    assert "would pass with atol 0 or rtol 0" in res.err


def test_failed_comparison_exits_1_and_names_mismatches(cli, seed_model, tmp_path):
    outs = str(tmp_path / "golden.npz")
    assert cli("run", seed_model, "--onnxrt", "--onnx-outputs", "mark", "all", "--save-outputs", outs, "-q").code == 0
    # other inputs: every output differs
    res = cli("run", seed_model, "--onnxrt", "--seed", "99", "--onnx-outputs", "mark", "all", "--load-outputs", outs)
    assert res.code == 1
    last = res.err.strip().splitlines()[-1]
    assert last.startswith("FAILED | Command: toolkit run") and last.endswith("| mismatched: mul_out, add_out, Y")
    assert "FAILED | Y | max abs" in res.err and "would pass with atol" in res.err
    # a per-output tolerance fixes one output only
    res = cli("run", seed_model, "--onnxrt", "--seed", "99", "--onnx-outputs", "*", "--load-outputs", outs,
              "--atol", "Y:100", "-q")
    assert res.code == 1 and res.err.strip().endswith("mismatched: mul_out, add_out")
    res = cli("run", seed_model, "--onnxrt", "--seed", "99", "--onnx-outputs", "*", "--load-outputs", outs,
              "--atol", "100", "-q")
    assert res.code == 0


def test_check_error_stat(cli, seed_model, tmp_path):
    golden = str(tmp_path / "g.npz")
    ins = str(tmp_path / "i.npz")
    assert cli("run", seed_model, "--onnxrt", "--save-inputs", ins, "--save-outputs", golden, "-q").code == 0
    feed = dict(load_inputs(ins)[0])
    x0 = feed["x0"].copy()
    x0.flat[0] += 1.0  # one element off by 1.0; the mean error is tiny
    bumped = str(tmp_path / "i2.npz")
    save_inputs(bumped, [{"x0": x0, "x1": feed["x1"]}])
    args = ("run", seed_model, "--onnxrt", "--load-inputs", bumped, "--load-outputs", golden, "--rtol", "0", "-q")
    assert cli(*args, "--atol", "0.1").code == 1
    assert cli(*args, "--atol", "0.1", "--check-error-stat", "mean").code == 0
    assert cli(*args, "--atol", "0.1", "--check-error-stat", "Y:median").code == 0
    assert cli(*args, "--atol", "0.1", "--check-error-stat", "max").code == 1
    assert cli(*args, "--check-error-stat", "p50").code == 2


def test_compare_two_loaded_outputs_without_runner(cli, tmp_path):
    a, b = str(tmp_path / "a.npz"), str(tmp_path / "b.json")
    save_outputs(a, RunResults([("r1", [IterationResult({"y": np.ones(3, np.float32)})])]))
    save_outputs(b, RunResults([("r2", [IterationResult({"y": np.ones(3, np.float32) * 1.5})])]))
    model = mz.save(mz.chain(2), tmp_path / "m.onnx")
    res = cli("run", model, "--load-outputs", a, b)
    assert res.code == 1 and "r1 (from a.npz) vs r2 (from b.json)" in res.err
    assert cli("run", model, "--load-outputs", a, b, "--atol", "0.5").code == 0


def test_no_common_output_is_bad_input(cli, seed_model, tmp_path):
    other = str(tmp_path / "other.npz")
    save_outputs(other, RunResults([("r", [IterationResult({"zzz": np.ones(3, np.float32)})])]))
    res = cli("run", seed_model, "--onnxrt", "--load-outputs", other)
    assert res.code == 3 and "no output name in common" in res.err


def test_validate_flags_nan(cli, seed_model, tmp_path):
    nan_in = str(tmp_path / "nan.npz")
    save_inputs(nan_in, [{"x0": np.full(SHAPE, np.nan, np.float32), "x1": np.zeros(SHAPE, np.float32)}])
    assert cli("run", seed_model, "--onnxrt", "--load-inputs", nan_in, "-q").code == 0
    res = cli("run", seed_model, "--onnxrt", "--load-inputs", nan_in, "--validate", "-q")
    assert res.code == 1 and "'Y': NaN Detected (48 NaN value(s))" in res.err and res.err.strip().endswith("mismatched: Y")
    assert cli("run", seed_model, "--onnxrt", "--validate", "-q").code == 0


def test_save_outputs_to_stdout_is_pure_json(cli, seed_model, tmp_path):
    res = cli("run", seed_model, "--onnxrt", "--save-outputs", "-")
    assert res.code == 0
    data = json.loads(res.out)
    assert data["polygraphy_class"] == "RunResults"
    assert "PASSED" in res.err and "PASSED" not in res.out


# ----------------------------------------------------------------------------- layerwise outputs


def _output_names(res):
    block = res.err.split("---- Inference Output(s) ----")[1]
    return [ln.strip()[1:].split(" [")[0] for ln in block.splitlines() if ln.strip().startswith("{")]


def test_mark_all_spellings(cli, tmp_path):
    model = mz.save(mz.branch(), tmp_path / "b.onnx")
    expected = ["r", "s", "m", "a", "y"]
    for words in (["mark", "all"], ["*"]):
        res = cli("run", model, "--onnxrt", "--onnx-outputs", *words)
        assert res.code == 0, res.err
        assert _output_names(res) == expected
    res = cli("run", model, "--onnxrt", "--onnx-outputs", "mark", "all", "--onnx-exclude-outputs", "s", "a*")
    assert _output_names(res) == ["r", "m", "y"]
    res = cli("run", model, "--onnxrt", "--onnx-outputs", "[sm]", "r")
    assert _output_names(res) == ["s", "m", "r"]  # replaces the model's outputs


def test_mark_all_skips_constant_nodes_and_keeps_ir_version(cli, tmp_path):
    model = mz.save(mz.with_constant(), tmp_path / "c.onnx")
    outs = str(tmp_path / "o.npz")
    res = cli("run", model, "--onnxrt", "--onnx-outputs", "mark", "all", "--save-outputs", outs)
    assert res.code == 0
    assert list(load_outputs(outs).runs[0][1][0].outputs) == ["t", "y"]
    assert onnx.load(model).ir_version == mz.IR_VERSION  # the model file is untouched


def test_mark_all_top_graph_only_with_if(cli, tmp_path):
    model = mz.save(mz.with_if(), tmp_path / "if.onnx")
    res = cli("run", model, "--onnxrt", "--onnx-outputs", "mark", "all")
    assert res.code == 0, res.err
    assert _output_names(res) == ["r", "if_out", "y"]


def test_unknown_output_names_are_input_errors(cli, seed_model):
    res = cli("run", seed_model, "--onnxrt", "--onnx-outputs", "nope")
    assert res.code == 3 and "'nope'" in res.err
    res = cli("run", seed_model, "--onnxrt", "--onnx-outputs", "zz*")
    assert res.code == 3 and "matches no tensor" in res.err
    res = cli("run", seed_model, "--onnxrt", "--onnx-exclude-outputs", "Y")
    assert res.code == 2 and "no outputs left" in res.err


def _extract_sub(full, path, inputs, outputs):
    onnx.utils.extract_model(full, str(path), inputs, outputs)
    return str(path)


def test_seed_workflow_subgraph_against_layerwise_golden(cli, seed_model, tmp_path, monkeypatch):
    """Polygraphy's accuracy workflow, with toolkit in place of polygraphy."""
    monkeypatch.chdir(tmp_path)
    assert cli("run", seed_model, "--onnxrt", "--save-inputs", "inputs.json", "--onnx-outputs", "mark", "all",
               "--save-outputs", "layerwise_golden.json").code == 0
    res = cli("data", "to-input", "inputs.json", "layerwise_golden.json", "-o", "layerwise_inputs.json")
    assert res.code == 0, res.err
    assert sorted(load_inputs("layerwise_inputs.json")[0]) == ["Y", "add_out", "mul_out", "x0", "x1"]
    # a subgraph whose input is an intermediate tensor
    sub = _extract_sub(seed_model, tmp_path / "polygraphy_debug.onnx", ["mul_out"], ["add_out"])
    res = cli("run", sub, "--onnxrt", "--load-inputs", "layerwise_inputs.json", "--load-outputs",
              "layerwise_golden.json", "--atol", "0", "--rtol", "0")
    assert res.code == 0, res.err
    assert "{mul_out [dtype=float32, shape=(1, 3, 4, 4)]}" in res.err
    assert "1 output(s) compared" in res.err and "PASSED | add_out" in res.err
    # a golden value that disagrees makes exactly that output fail
    golden = load_outputs("layerwise_golden.json")
    outs = {k: np.array(v) for k, v in golden.runs[0][1][0].outputs.items()}
    outs["add_out"][0, 0, 0, 0] += 1
    save_outputs("bad_golden.npz", RunResults([("golden", [IterationResult(outs)])]))
    res = cli("run", sub, "--onnxrt", "--load-inputs", "layerwise_inputs.json", "--load-outputs", "bad_golden.npz", "-q")
    assert res.code == 1 and res.err.strip().endswith("mismatched: add_out")
    # the middle of the graph: both graph inputs + an intermediate tensor
    sub2 = _extract_sub(seed_model, tmp_path / "sub2.onnx", ["x0", "add_out"], ["Y"])
    res = cli("run", sub2, "--onnxrt", "--load-inputs", "layerwise_inputs.json", "--load-outputs",
              "layerwise_golden.json", "-q")
    assert res.code == 0, res.err


def test_seed_workflow_verbatim_in_subprocess(seed_model, tmp_path):
    steps = [
        ("run", seed_model, "--onnxrt", "--save-inputs", "inputs.json", "--onnx-outputs", "mark", "all",
         "--save-outputs", "layerwise_golden.json"),
        ("data", "to-input", "inputs.json", "layerwise_golden.json", "-o", "layerwise_inputs.json"),
    ]
    for step in steps:
        res = run_toolkit(*step, cwd=tmp_path)
        assert res.code == 0, res.err
    _extract_sub(seed_model, tmp_path / "polygraphy_debug.onnx", ["mul_out"], ["add_out"])
    res = run_toolkit("run", "polygraphy_debug.onnx", "--onnxrt", "--load-inputs", "layerwise_inputs.json",
                      "--load-outputs", "layerwise_golden.json", cwd=tmp_path)
    assert res.code == 0, res.err
    assert res.err.strip().splitlines()[-1].startswith("PASSED | Command: toolkit run polygraphy_debug.onnx")


# ----------------------------------------------------------------------------- loaded inputs: strict


def test_loaded_inputs_may_hold_extra_tensors(cli, seed_model, tmp_path):
    path = str(tmp_path / "extra.npz")
    zeros = np.zeros(SHAPE, np.float32)
    save_inputs(path, [{"x0": zeros, "x1": zeros, "unrelated": np.ones(7, np.int8)}])
    res = cli("run", seed_model, "--onnxrt", "--load-inputs", path)
    assert res.code == 0 and "unrelated" not in res.err


@pytest.mark.parametrize(
    "feed,needle",
    [
        ({"x0": np.zeros(SHAPE, np.float32)}, "no tensor for model input(s) x1"),
        ({"x0": np.full(SHAPE, 1e300), "x1": np.zeros(SHAPE, np.float32)}, "'x0' is float64, but the model expects float32"),
        ({"x0": np.zeros((1, 3, 4, 5), np.float32), "x1": np.zeros(SHAPE, np.float32)}, "'x0' has shape (1, 3, 4, 5)"),
        ({"x0": np.zeros((3, 4, 4), np.float32), "x1": np.zeros(SHAPE, np.float32)}, "'x0' has shape (3, 4, 4)"),
    ],
)
def test_loaded_inputs_mismatch_is_exit_3(cli, seed_model, tmp_path, feed, needle):
    path = str(tmp_path / "bad.npz")
    save_inputs(path, [feed])
    res = cli("run", seed_model, "--onnxrt", "--load-inputs", path)
    assert res.code == 3, res.err
    assert needle in res.err and "bad.npz" in res.err and "Traceback" not in res.err


def test_several_inputs_files_are_iterated_in_order(cli, seed_model, tmp_path):
    paths = []
    for i in range(2):
        p = str(tmp_path / f"in{i}.npz")
        save_inputs(p, [{"x0": np.full(SHAPE, i, np.float32), "x1": np.zeros(SHAPE, np.float32)}])
        paths.append(p)
    out = str(tmp_path / "o.npz")
    assert cli("run", seed_model, "--onnxrt", "--load-inputs", *paths, "--save-outputs", out, "-q").code == 0
    its = load_outputs(out).runs[0][1]
    assert [float(it.outputs["Y"].flat[0]) for it in its] == [0.5, 1.5]


def test_missing_and_corrupt_files(cli, seed_model, tmp_path):
    res = cli("run", seed_model, "--onnxrt", "--load-inputs", str(tmp_path / "none.json"))
    assert res.code == 3 and "no such file" in res.err
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert cli("run", seed_model, "--onnxrt", "--load-outputs", str(bad)).code == 3
    notmodel = tmp_path / "m.onnx"
    notmodel.write_bytes(b"garbage")
    res = cli("run", str(notmodel), "--onnxrt")
    assert res.code == 3 and "m.onnx" in res.err
    res = cli("run", seed_model, "--onnxrt", "--save-outputs", str(tmp_path / "nodir" / "o.json"))
    assert res.code == 3 and "does not exist" in res.err


# ----------------------------------------------------------------------------- runners and failures


def test_inference_failure_exits_1_with_failed_line(cli, tmp_path):
    model = mz.save(bad_reshape_model(), tmp_path / "bad.onnx")
    res = cli("run", model, "--onnxrt")
    assert res.code == 1
    assert "error: onnxrt-runner: inference failed:" in res.err and "Reshape" in res.err
    assert res.err.strip().splitlines()[-1].startswith("FAILED | Command: toolkit run")


def test_trt_flag_without_tensorrt_is_exit_4(cli, seed_model):
    import importlib.util

    if importlib.util.find_spec("tensorrt") is not None:
        pytest.skip("tensorrt is installed")
    res = cli("run", seed_model, "--trt")
    assert res.code == 4
    assert res.err.strip() == "error: TensorRT is not installed; install it with: " + extra_install_command("trt")


def test_providers(cli, seed_model):
    assert cli("run", seed_model, "--onnxrt", "--providers", "cpu", "-q").code == 0
    res = cli("run", seed_model, "--onnxrt", "--providers", "CPUExecutionProvider")
    assert res.code == 0 and "providers: CPUExecutionProvider" in res.err
    res = cli("run", seed_model, "--onnxrt", "--providers", "nosuch")
    assert res.code == 4 and "available:" in res.err


def test_nothing_to_do_is_usage_error(cli, seed_model):
    assert cli("run", seed_model).code == 2


def test_external_data_model_runs_with_and_without_marking(cli, tmp_path):
    model = mz.save_with_external_data(mz.branch(), tmp_path / "ext.onnx")
    assert cli("run", model, "--onnxrt", "-q").code == 0
    res = cli("run", model, "--onnxrt", "--onnx-outputs", "mark", "all", "-q")
    assert res.code == 0, res.err


def test_rich_table_on_terminal(cli, seed_model, tmp_path, monkeypatch):
    import toolkit.cli.run as run_cli

    outs = str(tmp_path / "o.npz")
    assert cli("run", seed_model, "--onnxrt", "--save-outputs", outs, "-q").code == 0
    monkeypatch.setattr(run_cli, "is_terminal", lambda stream=None: True)
    res = cli("run", seed_model, "--onnxrt", "--load-outputs", outs, "--seed", "3")
    assert res.code == 1
    assert "Max abs" in res.err and "Passes with" in res.err and "FAILED" in res.err


def test_non_tensor_outputs_skipped_under_mark_all_but_error_when_named(cli, tmp_path):
    split = numpy_helper.from_array(np.array([1, 1], np.int64), "split")
    graph = helper.make_graph(
        [
            helper.make_node("Relu", ["x"], ["r"], name="relu"),
            helper.make_node("SplitToSequence", ["r", "split"], ["seq"], name="to_seq", axis=1),
            helper.make_node("ConcatFromSequence", ["seq"], ["y"], name="from_seq", axis=1),
        ],
        "seq",
        [mz.vi("x", [1, 2])],
        [mz.vi("y", [1, 2])],
        [split],
    )
    model = mz.save(mz.make_model(graph), tmp_path / "seq.onnx")
    res = cli("run", model, "--onnxrt", "--onnx-outputs", "mark", "all")
    assert res.code == 0, res.err
    assert "not returning 1 non-tensor output(s): seq" in res.err and _output_names(res) == ["r", "y"]
    res = cli("run", model, "--onnxrt", "--onnx-outputs", "seq")
    assert res.code == 3 and "not a tensor" in res.err


def test_graph_input_can_be_returned(cli, tmp_path):
    model = mz.save(mz.branch(), tmp_path / "b.onnx")
    res = cli("run", model, "--onnxrt", "--onnx-outputs", "x", "y")
    assert res.code == 0 and _output_names(res) == ["x", "y"]


def test_runner_library_interface(tmp_path):
    from toolkit.backends.onnxrt import OnnxrtRunner

    model = mz.save(mz.seed_example(SHAPE), tmp_path / "m.onnx")
    with OnnxrtRunner(model, outputs=["mark", "all"]) as runner:
        metas = runner.input_metadata()
        assert [(m.name, m.shape, m.dtype) for m in metas] == [("x0", SHAPE, "float32"), ("x1", SHAPE, "float32")]
        feed = {m.name: np.ones(SHAPE, np.float32) for m in metas}
        outs = runner.infer(feed)
        assert list(outs) == runner.output_names() == ["mul_out", "add_out", "Y"]
        assert float(outs["Y"].flat[0]) == 3.5 and runner.last_inference_time > 0
    assert not runner.is_active


def test_a_long_mismatch_list_is_cut_in_the_summary_lines(cli, tmp_path):
    # a layerwise comparison of hundreds of tensors: the summary names the first ones and the count
    path = mz.save(mz.chain(30, ops=["Relu", "Abs"]), tmp_path / "c.onnx")
    x = tmp_path / "x.json"
    res = cli("run", path, "--onnxrt", "--onnx-outputs", "mark", "all", "--save-inputs", x, "--save-outputs", tmp_path / "g.json")
    assert res.code == 0, res.err
    golden = load_outputs(str(tmp_path / "g.json"))
    for _, iters in golden.runs:
        for it in iters:
            for k in list(it.outputs):
                it.outputs[k] = np.asarray(it.outputs[k]) + np.float32(1)
    save_outputs(str(tmp_path / "bad.json"), golden)
    res = cli("run", path, "--onnxrt", "--onnx-outputs", "mark", "all", "--load-inputs", x, "--load-outputs", tmp_path / "bad.json")
    assert res.code == 1
    last = res.err.strip().splitlines()[-1]
    assert last.endswith("mismatched: t0, t1, t2, t3, t4, t5, t6, t7, t8, t9, ... (30 in all)")
    assert "    FAILED | t25 |" in res.err  # every tensor keeps its own line

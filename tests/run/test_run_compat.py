"""`toolkit run` accepts Polygraphy's command lines: other spellings of our options and the
options that only Polygraphy recipes use."""

import pytest

import modelzoo as mz
from toolkit.core.io.datafiles import load_inputs, load_outputs


@pytest.fixture
def model(tmp_path):
    return mz.save(mz.seed_example((1, 3, 4, 4)), tmp_path / "model.onnx")


def test_polygraphy_spellings_of_data_and_tolerance_options(cli, model, tmp_path):
    ins, outs = str(tmp_path / "in.json"), str(tmp_path / "out.json")
    res = cli("run", model, "--onnxrt", "--save-input-data", ins, "--save-results", outs, "--iters", "2")
    assert res.code == 0, res.err
    assert len(load_inputs(ins)) == 2 and len(load_outputs(outs).runs[0][1]) == 2
    res = cli("run", model, "--onnxrt", "--load-input-data", ins, "--load-results", outs, "--abs-tol", "0",
              "--rel-tol", "0")
    assert res.code == 0, res.err
    assert "2/2 iteration(s) matched | Difference is within tolerance" in res.err


@pytest.mark.parametrize("level,ours", [("ORT_DISABLE_ALL", "disable"), ("ORT_ENABLE_EXTENDED", "extended"),
                                        ("basic", "basic")])
def test_graph_optimization_level_takes_ort_names(cli, model, level, ours):
    res = cli("run", model, "--onnxrt", "--graph-optimization-level", level, "--execution-providers", "cpu", "-v")
    assert res.code == 0, res.err
    assert f"graph optimization: {ours}" in res.err


def test_bad_optimization_level_is_a_usage_error(cli, model):
    assert cli("run", model, "--onnxrt", "--graph-optimization-level", "ORT_FASTEST").code == 2


def test_use_subprocess_is_accepted(cli, model):
    res = cli("run", model, "--onnxrt", "--use-subprocess", "-v")
    assert res.code == 0 and "--use-subprocess has no effect" in res.err


def test_inputs_is_the_old_name_of_input_shapes(cli, tmp_path):
    model = mz.save(mz.dynamic_batch(), tmp_path / "dyn.onnx")
    ins = str(tmp_path / "in.json")
    assert cli("run", model, "--onnxrt", "--inputs", "x:[3,4]", "--save-inputs", ins, "-q").code == 0
    assert load_inputs(ins)[0]["x"].shape == (3, 4)


@pytest.mark.parametrize("flag", ["--save-outputs", "--save-inputs"])
def test_data_file_with_a_foreign_extension_is_refused(cli, model, tmp_path, flag):
    target = tmp_path / "out.npy"
    res = cli("run", model, "--onnxrt", flag, str(target))
    assert res.code == 2
    assert ".json" in res.err and ".npz" in res.err and ".npy" in res.err
    assert not target.exists()


def test_data_file_without_extension_is_json(cli, model, tmp_path):
    import json

    target = tmp_path / "outputs"
    assert cli("run", model, "--onnxrt", "--save-outputs", str(target), "-q").code == 0
    assert json.loads(target.read_text())["polygraphy_class"] == "RunResults"


def test_data_to_input_refuses_a_foreign_extension(cli, model, tmp_path):
    ins = str(tmp_path / "in.json")
    assert cli("run", model, "--onnxrt", "--save-inputs", ins, "-q").code == 0
    res = cli("data", "to-input", ins, "-o", str(tmp_path / "merged.pkl"))
    assert res.code == 2 and ".pkl" in res.err

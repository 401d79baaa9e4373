"""A per-output tolerance whose name no output has is a usage error (exit 2) naming the outputs
there are: `--atol nosuch:1e-3` was ignored without a word, so the tolerance the user meant never
applied."""

import numpy as np
import pytest

import modelzoo as mz
from toolkit import api
from toolkit.core.compare.tolerances import Tolerances
from toolkit.core.errors import UsageError
from toolkit.run import RunOptions, execute


@pytest.fixture
def model(tmp_path):
    return mz.save(mz.seed_example((1, 3, 4, 4)), tmp_path / "model.onnx")


@pytest.mark.parametrize("flag, value", [("--atol", "nosuch:1e-3"), ("--rtol", "nosuch:1e-3"),
                                         ("--check-error-stat", "nosuch:max")])
def test_an_unknown_output_name_is_exit_2_naming_the_outputs(cli, model, flag, value):
    res = cli("run", model, "--onnxrt", "--onnxrt", flag, value)
    assert res.code == 2, res.output
    assert res.err.strip().splitlines()[-1] == f"error: {flag} names 'nosuch', which no output has; the outputs are: Y"


def test_a_close_name_is_suggested_and_every_tensor_counts_with_mark_all(cli, model):
    res = cli("run", model, "--onnxrt", "--onnxrt", "--atol", "add_ou:1")
    assert res.code == 2 and "the outputs are: Y" in res.err
    res = cli("run", model, "--onnxrt", "--onnxrt", "--onnx-outputs", "mark", "all", "--atol", "add_ou:1")
    assert res.code == 2 and "(did you mean 'add_out'?)" in res.err
    res = cli("run", model, "--onnxrt", "--onnxrt", "--onnx-outputs", "mark", "all", "--atol", "add_out:1")
    assert res.code == 0, res.err


def test_an_input_name_is_not_an_output(cli, model):
    res = cli("run", model, "--onnxrt", "--onnxrt", "--check-error-stat", "x0:max")
    assert res.code == 2 and "names 'x0', which no output has" in res.err


def test_a_name_of_the_loaded_outputs_counts(cli, model, tmp_path):
    golden = tmp_path / "golden.json"
    assert cli("run", model, "--onnxrt", "--onnx-outputs", "mark", "all", "--save-outputs", golden).code == 0
    res = cli("run", model, "--onnxrt", "--load-outputs", golden, "--atol", "add_out:1", "--atol", "Y:1e-3")
    assert res.code == 0, res.err
    res = cli("run", model, "--onnxrt", "--load-outputs", golden, "--rtol", "nosuch:1")
    assert res.code == 2 and "add_out" in res.err and "mul_out" in res.err


def test_the_library_run_refuses_an_unknown_name(model):
    opts = RunOptions(model, runners=["onnxrt", "onnxrt"], tolerances=Tolerances.of(rtol={"logits": 1e-2}))
    with pytest.raises(UsageError, match="'logits', which no output has; the outputs are: Y"):
        execute(opts)


def test_api_compare_refuses_an_unknown_name():
    run = [{"y": np.ones(3, np.float32), "z": np.zeros(2, np.float32)}]
    with pytest.raises(UsageError, match=r"^rtol names 'logits', which no output has; the outputs are: y, z$"):
        api.compare(run, run, rtol={"logits": 1e-3})
    with pytest.raises(UsageError, match="check_error_stat names 'w'"):
        api.compare(run, run, check_error_stat={"w": "max"})
    assert api.compare(run, run, rtol={"y": 1e-3}, atol={"z": 0.0}).passed

"""run: output files never replace what the run reads; huge generated inputs are refused."""

import os

import numpy as np
import pytest

import modelzoo as z
from toolkit.core.errors import InputError
from toolkit.core.inputs import check_generated_size


@pytest.fixture
def work(tmp_path, monkeypatch, cli):
    monkeypatch.chdir(tmp_path)
    z.save(z.chain(2), "m.onnx")
    assert cli("run", "m.onnx", "--onnxrt", "--save-inputs", "in.json", "--save-outputs", "out.json").code == 0
    return tmp_path


@pytest.mark.parametrize(
    "args, named",
    [
        (["--save-inputs", "m.onnx"], "m.onnx"),
        (["--save-outputs", "sub/../m.onnx"], "m.onnx"),
        (["--load-outputs", "out.json", "--save-outputs", "out.json"], "out.json"),
        (["--load-inputs", "in.json", "--save-outputs", "./in.json"], "in.json"),
        (["--load-inputs", "in.json", "--save-inputs", "link.json"], "in.json"),  # a hard link to it
        (["--load-outputs", "out.json", "--save-inputs", "ln.json"], "out.json"),  # a symbolic link to it
    ],
)
def test_output_file_is_an_input(work, cli, args, named):
    os.mkdir("sub")
    os.link("in.json", "link.json")
    os.symlink("out.json", "ln.json")
    before = {p: open(p, "rb").read() for p in ("m.onnx", "in.json", "out.json")}
    res = cli("run", "m.onnx", "--onnxrt", *args)
    assert res.code == 2, res.err
    assert named in res.err and "overwrite" in res.err
    assert {p: open(p, "rb").read() for p in before} == before


def test_ort_optimization_checked_before_loading_data(work, cli):
    res = cli("run", "m.onnx", "--onnxrt", "--ort-optimization", "fastest", "--load-inputs", "nope.json")
    assert res.code == 2 and "fastest" in res.err and "disable, basic, extended, all" in res.err
    assert cli("run", "m.onnx", "--onnxrt", "--ort-optimization", "Extended").code == 0


def test_generated_size_cap():
    check_generated_size("x", (1024, 1024), "float32", limit=4 * 2**20)
    with pytest.raises(InputError, match=r"'x' of shape \(1024, 1025\) \(float32\).*4\.0 MiB.*--input-shapes x:"):
        check_generated_size("x", (1024, 1025), "float32", limit=4 * 2**20)
    with pytest.raises(InputError, match="int64"):
        check_generated_size("ids", (1, 2**62), "int64")


def test_input_shapes_over_the_cap_is_refused(work, cli):
    d = z.dynamic_batch()
    z.save(d, "dyn.onnx")
    name = d.graph.input[0].name
    res = cli("run", "dyn.onnx", "--onnxrt", "--input-shapes", f"{name}:[4000000000,4]")
    assert res.code == 3 and f"'{name}'" in res.err and "GiB" in res.err


def test_a_data_file_given_as_the_model_says_it_is_not_onnx(work, cli):
    res = cli("run", "in.json", "--onnxrt")
    assert res.code == 3
    assert "not an ONNX model" in res.err and "Traceback" not in res.err


def test_a_bf16_model_that_does_not_type_check_on_ort_names_the_emulation():
    from toolkit.backends.onnxrt import _load_hint

    text = "[ONNXRuntimeError] : 10 : INVALID_GRAPH : Type Error: Type 'tensor(bfloat16)' of input parameter"
    assert "onnxrt:bf16" in _load_hint(text, None)
    assert _load_hint(text, "bfloat16") == ""  # the emulation itself: no such advice
    assert _load_hint("INVALID_ARGUMENT : something else", None) == ""


def test_an_inference_error_on_generated_inputs_says_how_they_were_made(cli, tmp_path):
    # a model that needs particular values (here a target shape): generated 0/1 values fail in ONNX-Runtime
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Reshape", ["x", "shape"], ["y"], name="reshape")], "g",
        [z.vi("x", [2, 3]), z.vi("shape", [2], TensorProto.INT64)], [z.vi("y", None)],
    )
    path = z.save(z.make_model(graph), tmp_path / "m.onnx")
    res = cli("run", path, "--onnxrt", "--val-range", "shape:[1,1]")
    assert res.code == 1
    assert "inference failed" in res.err and "the inputs were generated" in res.err and "--load-inputs" in res.err
    # the right values work; loaded inputs that fail get no such note
    assert cli("run", path, "--onnxrt", "--val-range", "shape:[0,0]").code == 0
    import numpy as np

    from toolkit.core.io.datafiles import save_inputs

    save_inputs(str(tmp_path / "in.json"), [{"x": np.ones((2, 3), np.float32), "shape": np.array([5, 5])}])
    res = cli("run", path, "--onnxrt", "--load-inputs", tmp_path / "in.json")
    assert res.code == 1 and "inference failed" in res.err and "generated" not in res.err


@pytest.mark.parametrize("content", ["[{}]", "npz"])
def test_load_outputs_whose_first_iteration_is_empty_is_bad_input(cli, tmp_path, content):
    model = z.save(z.seed_example((1, 3, 2, 2)), tmp_path / "m.onnx")
    path = tmp_path / ("e.npz" if content == "npz" else "e.json")
    if content == "npz":
        np.savez(path)
    else:
        path.write_text(content)
    res = cli("run", model, "--onnxrt", "--load-outputs", str(path))
    assert res.code == 3 and "\nerror: " in "\n" + res.err and "Traceback" not in res.err, res.err


@pytest.mark.parametrize("command", [["run", "M", "--onnxrt"], ["debug", "precision", "M"],
                                     ["convert", "M", "--fp-to-fp16", "-o", "c.onnx", "--validate"]])
@pytest.mark.parametrize("seed", ["-1", "4294967296"])
def test_a_seed_out_of_numpys_range_is_a_usage_error(cli, tmp_path, command, seed):
    model = z.save(z.seed_example((1, 3, 2, 2)), tmp_path / "m.onnx")
    res = cli(*[str(model) if w == "M" else w for w in command], "--seed", seed)
    assert res.code == 2 and f"--seed must be between 0 and 4294967295, got {seed}" in res.err, res.err

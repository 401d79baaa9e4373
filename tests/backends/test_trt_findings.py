"""The TensorRT backend against what real TensorRT does, on CPU through the fakes of
tests/trt_fakes.py (checked against the real API by tests/backends/test_trt_surface.py).

Each test pins one behaviour of real TensorRT 10/11 that the backend once got wrong:
constructors that raise instead of returning None, plugins, shape-tensor inputs, several
profiles, ``mark all`` inside an If, the output allocator's return value, Ctrl-C during a build,
profile return values, and engines built elsewhere.
"""

from __future__ import annotations

import numpy as np
import pytest

import modelzoo as mz
from toolkit.core.io.datafiles import load_inputs, load_outputs, save_inputs
from toolkit.core.errors import UsageError
from trt_fakes import FakeModel, doubling_model, fake_cudart, fake_tensorrt, install
from toolkit.core.install import extra_install_command

TRT10, TRT11 = "10.13.3.9", "11.4.0.106"


@pytest.fixture
def seed_model(tmp_path):
    return mz.save(mz.seed_example((1, 3, 4, 4)), tmp_path / "model.onnx")


def env(monkeypatch, version=TRT10, **kw):
    cudart = fake_cudart()
    trt = fake_tensorrt(version, memory=cudart.memory, **kw)
    install(monkeypatch, trt, cudart)
    return trt, cudart


def engine_file(tmp_path, trt, model, name=b"FAKE-ENGINE x"):
    trt._engines[name] = model
    path = tmp_path / "m.engine"
    path.write_bytes(name)
    return str(path)


# ----------------------------------------------------------------------------- 1. constructors raise


@pytest.mark.parametrize("which,message", [
    ("Builder", "TensorRT cannot create a builder: fake: CUDA initialization failure with error: 35"),
    ("OnnxParser", "TensorRT cannot create an ONNX parser: fake: cannot create the ONNX parser"),
    ("Runtime", "TensorRT cannot create a runtime: fake: cannot create the runtime"),
])  # fmt: skip
@pytest.mark.parametrize("version", [TRT10, TRT11])
def test_failing_constructors_are_exit_1_with_tensorrts_reason(cli, seed_model, monkeypatch, which, message, version):
    env(monkeypatch, version, model=doubling_model(), fail={which})
    res = cli("run", seed_model, "--trt", "--trt-opt-shapes", "x:[2,3]")
    assert res.code == 1, res.err
    assert f"error: {message}" in res.err
    assert res.err.strip().splitlines()[-1].startswith("FAILED | Command:")
    assert "TypeError" not in res.err


# ----------------------------------------------------------------------------- 2. plugins


def test_tensorrt_plugins_are_registered_before_building_and_loading(cli, seed_model, monkeypatch, tmp_path):
    trt, _ = env(monkeypatch, model=doubling_model())
    assert cli("run", seed_model, "--trt", "--trt-opt-shapes", "x:[2,3]").code == 0
    assert trt._plugins == [""]
    trt, _ = env(monkeypatch)
    m = doubling_model()
    m.profiles = [{"x": ((1, 3), (2, 3), (4, 3))}]
    assert cli("run", engine_file(tmp_path, trt, m), "--trt").code == 0
    assert trt._plugins == [""]


# ----------------------------------------------------------------------------- 4. shape-tensor inputs


def reshape_model(x_shape=(2, 3)):
    """y = x.sum() broadcast to the shape given by the values of the shape-tensor input 's'."""
    return FakeModel(
        {"x": (x_shape, "FLOAT"), "s": ((2,), "INT64")},
        [("fill", "FILL", [("y", "FLOAT")])],
        ["y"],
        lambda f: {"y": np.full(tuple(int(v) for v in f["s"]), f["x"].sum(), np.float32)},
        shape_inputs={"s"},
    )


def test_shape_tensor_input_gets_profile_values_even_when_nothing_else_is_dynamic(cli, seed_model, monkeypatch, tmp_path):
    trt, _ = env(monkeypatch, model=reshape_model())
    save_inputs(str(tmp_path / "in.json"), [
        {"x": np.ones((2, 3), np.float32), "s": np.array([2, 5], np.int64)},
        {"x": np.ones((2, 3), np.float32), "s": np.array([4, 1], np.int64)},
    ])  # fmt: skip
    res = cli("run", seed_model, "--trt", "--load-inputs", tmp_path / "in.json", "--save-outputs", tmp_path / "o.json")
    assert res.code == 0, res.err
    assert ("set_shape_input", "s", (2, 1), (2, 5), (4, 5)) in trt._calls
    assert ("add_optimization_profile",) in trt._calls
    outs = load_outputs(str(tmp_path / "o.json")).runs[0][1]
    assert outs[0].outputs["y"].shape == (2, 5) and outs[1].outputs["y"].shape == (4, 1)
    assert float(outs[0].outputs["y"][0, 0]) == 6.0


def test_shape_tensor_values_from_the_profile_flags_and_generated_data_uses_them(cli, seed_model, monkeypatch, tmp_path):
    trt, _ = env(monkeypatch, model=reshape_model())
    res = cli("run", seed_model, "--trt", "--trt-min-shapes", "s:[1,1]", "--trt-opt-shapes", "s:[3,2]",
              "--trt-max-shapes", "s:[8,8]", "--save-inputs", tmp_path / "in.json")  # fmt: skip
    assert res.code == 0, res.err
    assert ("set_shape_input", "s", (1, 1), (3, 2), (8, 8)) in trt._calls
    feed = load_inputs(str(tmp_path / "in.json"))[0]
    np.testing.assert_array_equal(feed["s"], [3, 2])  # valid shape values: the profile's opt values


def test_shape_tensor_input_without_values_is_a_usage_error(cli, seed_model, monkeypatch):
    env(monkeypatch, model=reshape_model())
    res = cli("run", seed_model, "--trt")
    assert res.code == 2
    assert "input 's' is a shape tensor: give its values for profile 0, e.g. --trt-opt-shapes s:[1,224]" in res.err


def test_engine_with_shape_tensor_input_outside_its_values_lists_them(cli, monkeypatch, tmp_path):
    trt, _ = env(monkeypatch)
    m = reshape_model()
    m.profiles = [{"s": ((1, 1), (2, 2), (4, 4))}]
    path = engine_file(tmp_path, trt, m)
    save_inputs(str(tmp_path / "in.json"), [{"x": np.ones((2, 3), np.float32), "s": np.array([5, 1], np.int64)}])
    res = cli("run", path, "--trt", "--load-inputs", tmp_path / "in.json")
    assert res.code == 3
    assert "'s' values [5, 1] fit no profile of the engine (profile 0: 's' values min [1, 1], opt [2, 2], max [4, 4])" in res.err


def test_the_engine_is_asked_about_its_inputs_once_not_on_each_inference(monkeypatch, tmp_path):
    """Whether an input is a shape tensor, and whether its shape is dynamic, is the engine's and
    does not change while it is loaded: asked once per input when it loads, never per inference
    (two profiles: each inference checks which profile covers the feed)."""
    from toolkit.backends.trt import TrtRunner

    trt, _ = env(monkeypatch)
    m = reshape_model(x_shape=(-1, 3))
    m.profiles = [{"x": ((1, 3), (2, 3), (4, 3)), "s": ((1, 1), (2, 2), (4, 4))},
                  {"x": ((5, 3), (6, 3), (8, 3)), "s": ((1, 1), (2, 2), (4, 4))}]
    path = engine_file(tmp_path, trt, m)
    asked = {"is_shape_inference_io": 0, "get_tensor_shape": 0}
    for method in asked:
        real = getattr(trt.ICudaEngine, method)

        def counted(self, name, _real=real, _method=method):
            asked[_method] += 1
            return _real(self, name)

        monkeypatch.setattr(trt.ICudaEngine, method, counted)
    with TrtRunner(path) as runner:
        at_load = dict(asked)
        for rows, s in ((2, [2, 3]), (6, [3, 1]), (1, [4, 4])):
            out = runner.infer({"x": np.ones((rows, 3), np.float32), "s": np.array(s, np.int64)})
            assert out["y"].shape == tuple(s) and float(out["y"].flat[0]) == 3.0 * rows
        assert asked == at_load
    assert at_load == {"is_shape_inference_io": 2, "get_tensor_shape": 2}  # (once for x, once for s)
    assert [c for c in trt._calls if c[0] == "set_optimization_profile_async"] == [
        ("set_optimization_profile_async", 1), ("set_optimization_profile_async", 0)]


# ----------------------------------------------------------------------------- 5. several profiles


def two_profile_engine(tmp_path, trt):
    m = doubling_model()
    m.profiles = [{"x": ((1, 3), (2, 3), (4, 3))}, {"x": ((5, 3), (6, 3), (8, 3))}]
    return engine_file(tmp_path, trt, m)


def test_the_profile_that_covers_the_feed_is_selected(cli, monkeypatch, tmp_path):
    trt, _ = env(monkeypatch)
    path = two_profile_engine(tmp_path, trt)
    feeds = [{"x": np.arange(n * 3, dtype=np.float32).reshape(n, 3)} for n in (6, 2, 8)]
    save_inputs(str(tmp_path / "in.json"), feeds)
    res = cli("run", path, "--trt", "--load-inputs", tmp_path / "in.json", "--save-outputs", tmp_path / "o.json")
    assert res.code == 0, res.err
    assert [c for c in trt._calls if c[0] == "set_optimization_profile_async"] == [
        ("set_optimization_profile_async", 1),
        ("set_optimization_profile_async", 0),
        ("set_optimization_profile_async", 1),
    ]
    for it, feed in zip(load_outputs(str(tmp_path / "o.json")).runs[0][1], feeds):
        np.testing.assert_array_equal(it.outputs["y"], 2 * feed["x"])


def test_a_feed_outside_every_profile_lists_them_all(cli, monkeypatch, tmp_path):
    trt, _ = env(monkeypatch)
    path = two_profile_engine(tmp_path, trt)
    save_inputs(str(tmp_path / "in.json"), [{"x": np.zeros((9, 3), np.float32)}])
    res = cli("run", path, "--trt", "--load-inputs", tmp_path / "in.json")
    assert res.code == 3
    assert (
        "inputs 'x' shape (9, 3) fit no profile of the engine (profile 0: 'x' min (1, 3), opt (2, 3), max (4, 3); "
        "profile 1: 'x' min (5, 3), opt (6, 3), max (8, 3)); build with --trt-min-shapes/--trt-max-shapes"
    ) in res.err


# ----------------------------------------------------------------------------- 6. mark all


def if_model():
    """x -> relu -> If(cond) { then: mul } -> y; plus an INT4 tensor (weights) numpy cannot hold."""
    return FakeModel(
        {"x": ((-1, 3), "FLOAT")},
        [
            ("relu", "ACTIVATION", [("r", "FLOAT")]),
            ("q4", "QUANTIZE", [("w4", "INT4")]),
            ("cond", "CONDITION", [("c", "BOOL")]),
            ("in", "CONDITIONAL_INPUT", [("r_in", "FLOAT")]),
            ("mul", "ELEMENTWISE", [("m", "FLOAT")]),
            ("out", "CONDITIONAL_OUTPUT", [("y", "FLOAT")]),
        ],
        ["y"],
        lambda f: {"r": np.maximum(f["x"], 0), "y": 2 * np.maximum(f["x"], 0)},
    )


def test_mark_all_skips_tensors_inside_an_if_and_types_numpy_cannot_hold(cli, seed_model, monkeypatch, tmp_path):
    trt, _ = env(monkeypatch, model=if_model())
    res = cli("run", seed_model, "--trt", "--trt-outputs", "mark", "all", "--trt-opt-shapes", "x:[2,3]",
              "--save-outputs", tmp_path / "o.json")  # fmt: skip
    assert res.code == 0, res.err
    assert [c[1] for c in trt._calls if c[0] == "mark_output"] == ["r"]
    assert (
        "--trt-outputs: 3 tensor(s) inside a loop or an If, 1 tensor(s) of a type numpy cannot hold "
        "(INT4, FP4, E8M0) not marked (TensorRT cannot return them)"
    ) in res.err
    assert set(load_outputs(str(tmp_path / "o.json")).runs[0][1][0].outputs) == {"r", "y"}


def test_mark_all_with_nested_ifs_marks_only_what_is_outside_them(monkeypatch):
    from toolkit.backends.trt.builder import layer_candidates

    trt = fake_tensorrt(TRT10)
    m = FakeModel(
        {"x": ((2,), "FLOAT")},
        [
            ("a", "ACTIVATION", [("a", "FLOAT")]),
            ("c1", "CONDITION", [("c1", "BOOL")]),
            ("in1", "CONDITIONAL_INPUT", [("in1", "FLOAT")]),
            ("c2", "CONDITION", [("c2", "BOOL")]),
            ("inner", "ELEMENTWISE", [("inner", "FLOAT")]),
            ("o2a", "CONDITIONAL_OUTPUT", [("o2a", "FLOAT")]),
            ("o2b", "CONDITIONAL_OUTPUT", [("o2b", "FLOAT")]),
            ("after_inner", "ELEMENTWISE", [("after_inner", "FLOAT")]),  # still inside the outer If
            ("o1", "CONDITIONAL_OUTPUT", [("o1", "FLOAT")]),
            ("tail", "ELEMENTWISE", [("tail", "FLOAT")]),
        ],
        ["tail"],
        lambda f: {},
    )
    network = trt.INetworkDefinition(0)
    network._load(m)
    names, skipped = layer_candidates(trt, network)
    assert names == ["a", "o1", "tail"]
    assert skipped == {"inside a loop or an If": 7}


def test_trt_outputs_names_and_excludes_on_cpu(cli, seed_model, monkeypatch, tmp_path):
    trt, _ = env(monkeypatch, model=doubling_model())
    res = cli("run", seed_model, "--trt", "--trt-outputs", "x2", "--trt-opt-shapes", "x:[2,3]",
              "--save-outputs", tmp_path / "o.json")  # fmt: skip
    assert res.code == 0, res.err
    assert ("unmark_output", "y") in trt._calls and ("mark_output", "x2") in trt._calls
    it = load_outputs(str(tmp_path / "o.json")).runs[0][1][0]
    assert list(it.outputs) == ["x2"]
    res = cli("run", seed_model, "--trt", "--trt-outputs", "nope", "--trt-opt-shapes", "x:[2,3]")
    assert res.code == 3 and "names 'nope'" in res.err


# ----------------------------------------------------------------------------- 7. output allocator


def nonzero_model():
    return FakeModel(
        {"x": ((4,), "FLOAT")},
        [("nz", "NON_ZERO", [("idx", "INT64")])],
        ["idx"],
        lambda f: {"idx": np.nonzero(f["x"])[0].astype(np.int64).reshape(1, -1)},
        data_dependent={"idx"},
    )


def test_data_dependent_outputs_go_through_the_output_allocator(cli, seed_model, monkeypatch, tmp_path):
    env(monkeypatch, model=nonzero_model())
    save_inputs(str(tmp_path / "in.json"), [{"x": np.array([0, 3, 0, 1], np.float32)}])
    res = cli("run", seed_model, "--trt", "--load-inputs", tmp_path / "in.json", "--save-outputs", tmp_path / "o.json")
    assert res.code == 0, res.err
    np.testing.assert_array_equal(load_outputs(str(tmp_path / "o.json")).runs[0][1][0].outputs["idx"], [[1, 3]])


def test_output_allocator_returns_0_when_it_cannot_allocate(monkeypatch, seed_model):
    from toolkit.backends.trt import TrtRunner
    from toolkit.backends.trt.runner import make_output_allocator

    trt, cudart = env(monkeypatch, model=nonzero_model())
    with TrtRunner(seed_model) as runner:
        alloc = make_output_allocator(trt, runner)
        cudart.memory.fail_malloc = True
        assert alloc.reallocate_output_async("idx", 0, 64, 256, 7) == 0  # TensorRT reads an int
        assert "cudaMalloc failed (cudaErrorMemoryAllocation)" in str(runner._callback_error)


def test_allocation_failure_during_inference_is_exit_1(cli, seed_model, monkeypatch, tmp_path, capfd):
    trt, cudart = env(monkeypatch, model=nonzero_model())
    real = cudart.cudaMalloc
    calls = {"n": 0}

    def malloc(n):  # the input buffer works, the output allocator's request fails
        calls["n"] += 1
        return real(n) if calls["n"] == 1 else (type(real(1)[0])(2), None)

    cudart.cudaMalloc = malloc
    res = cli("run", seed_model, "--trt")
    assert res.code == 1
    assert "CUDA call cudaMalloc failed (cudaErrorMemoryAllocation)" in res.err
    assert "could not be interpreted as an int" not in capfd.readouterr().err


# ----------------------------------------------------------------------------- 8. Ctrl-C during a build


def test_ctrl_c_during_a_build_stops_it_with_exit_130(cli, seed_model, monkeypatch):
    trt, _ = env(monkeypatch, model=doubling_model())
    trt._interrupts.at = 2  # SIGINT while TensorRT calls back into Python, mid-build
    res = cli("run", seed_model, "--trt", "--trt-opt-shapes", "x:[2,3]")
    assert res.code == 130, res.err
    assert not [k for k in trt._engines]  # the build was cancelled, nothing was built
    import signal

    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # handler restored


# ----------------------------------------------------------------------------- 9. return values


def test_invalid_profile_index_is_a_usage_error(cli, seed_model, monkeypatch):
    m = doubling_model()
    m.reject_profiles = True
    env(monkeypatch, model=m)
    res = cli("run", seed_model, "--trt", "--trt-opt-shapes", "x:[2,3]")
    assert res.code == 2 and "profile 0 is invalid for this network" in res.err


def test_set_shape_runtime_error_is_a_usage_error(monkeypatch, seed_model):
    from toolkit.backends.trt import TrtConfig, TrtRunner

    env(monkeypatch, model=doubling_model())
    bad = TrtConfig(profiles=[{"x": ((4, 3), (2, 3), (1, 3))}])  # not min <= opt <= max
    with pytest.raises(UsageError, match=r"profile 0: TensorRT refuses the shapes of 'x' \(min \(4, 3\), opt \(2, 3\), "
                       r"max \(1, 3\)\): Shape provided for min is inconsistent with other shapes\."):  # fmt: skip
        TrtRunner(seed_model, bad).activate()


def test_rejected_calibration_profile_is_a_usage_error(monkeypatch, seed_model):
    from toolkit.backends.trt import TrtConfig, TrtRunner

    trt, _ = env(monkeypatch, model=doubling_model())
    trt.IBuilderConfig.set_calibration_profile = lambda self, profile: False
    cfg = TrtConfig(int8=True, calibration_data=lambda metas: [{"x": np.ones((2, 3), np.float32)}])
    with pytest.raises(UsageError, match="TensorRT refuses the INT8 calibration profile"):
        TrtRunner(seed_model, cfg).activate()


# ----------------------------------------------------------------------------- 10. engines built elsewhere


def test_version_compatible_engines_load(cli, monkeypatch, tmp_path):
    trt, _ = env(monkeypatch)
    m = doubling_model()
    m.profiles = [{"x": ((1, 3), (2, 3), (4, 3))}]
    m.version_compatible = True
    res = cli("run", engine_file(tmp_path, trt, m), "--trt")
    assert res.code == 0, res.err


def test_engines_with_non_linear_io_are_refused(cli, monkeypatch, tmp_path):
    trt, _ = env(monkeypatch)
    m = doubling_model()
    m.profiles = [{"x": ((1, 3), (2, 3), (4, 3))}]
    m.formats = {"x": "CHW32"}
    path = engine_file(tmp_path, trt, m)
    res = cli("run", path, "--trt")
    assert res.code == 3
    assert f"error: {path}: I/O tensor 'x' has TensorRT format CHW32, not LINEAR" in res.err


# ----------------------------------------------------------------------------- streams


def test_outputs_are_read_after_the_stream_is_synchronized(monkeypatch, seed_model):
    """The fake runs copies and kernels only at cudaStreamSynchronize: a missing sync gives zeros."""
    from toolkit.backends.trt import TrtConfig, TrtRunner

    _trt, cudart = env(monkeypatch, model=doubling_model())
    with TrtRunner(seed_model, TrtConfig(profiles=[{"x": ((1, 3), (2, 3), (4, 3))}])) as runner:
        x = np.arange(6, dtype=np.float32).reshape(2, 3)
        np.testing.assert_array_equal(runner.infer({"x": x})["y"], 2 * x)
        syncs = []
        real = cudart.cudaStreamSynchronize
        monkeypatch.setattr(cudart, "cudaStreamSynchronize", lambda s: (syncs.append(s), (real(s)[0],))[1])
        runner.infer({"x": x})
        assert len(syncs) >= 2  # after the kernel, and after the copies back


# ----------------------------------------------------------------------------- inspect model ENGINE


def test_inspect_engine_shows_io_profiles_and_layers(cli, monkeypatch, tmp_path):
    trt, _ = env(monkeypatch)
    m = doubling_model()
    m.profiles = [{"x": ((1, 3), (2, 3), (4, 3))}, {"x": ((5, 3), (6, 3), (8, 3))}]
    path = engine_file(tmp_path, trt, m)
    res = cli("inspect", "model", path, "--show", "layers")
    assert res.code == 0, res.err
    lines = res.out.splitlines()
    assert lines[0] == f"[I] ==== TensorRT Engine ==== ({path}, TensorRT 10.13.3.9)", res.out
    text = res.out
    assert "---- 1 Engine Input(s) ----\n    {x [dtype=float32, shape=(?, 3)]}" in text
    assert "---- 1 Engine Output(s) ----\n    {y [dtype=float32, shape=(?,)]}" in text
    assert "- Profile: 1\n        Tensor: x | Shapes: min=(5, 3), opt=(6, 3), max=(8, 3)" in text
    assert "---- 2 Layer(s) ----\n    - Layer 0    | mul [Op: ELEMENTWISE]\n        {}\n         -> {x2}" in text
    assert trt._plugins == [""]
    # without --show layers: the count only; --json has the same content
    res = cli("inspect", "model", path)
    assert "- Layer 0" not in res.out and "(show them with --show layers)" in res.out
    import json

    desc = json.loads(cli("inspect", "model", path, "--json", "--mode", "basic").out)
    assert [p["tensors"][0]["max"] for p in desc["profiles"]] == [[4, 3], [8, 3]]
    assert [layer["name"] for layer in desc["layers"]] == ["mul", "out"]


def test_inspect_engine_by_model_type_and_with_shape_tensor_inputs(cli, monkeypatch, tmp_path):
    trt, _ = env(monkeypatch)
    m = reshape_model()
    m.profiles = [{"s": ((1, 1), (2, 2), (4, 4))}]
    trt._engines[b"FAKE-ENGINE s"] = m
    path = tmp_path / "model.bin"
    path.write_bytes(b"FAKE-ENGINE s")
    res = cli("inspect", "model", path, "--model-type", "engine")
    assert res.code == 0, res.err
    assert "Tensor: s (shape tensor) | Values: min=[1, 1], opt=[2, 2], max=[4, 4]" in res.out


def test_inspect_engine_without_tensorrt_is_exit_4_in_one_line(cli, monkeypatch, tmp_path):
    install(monkeypatch, None)
    path = tmp_path / "m.engine"
    path.write_bytes(b"whatever")
    res = cli("inspect", "model", path)
    assert res.code == 4
    assert res.err.strip().splitlines() == [
        f"error: {path} is a TensorRT engine; inspecting it needs TensorRT on a GPU: TensorRT is not installed; "
        "install it with: " + extra_install_command("trt")
    ]


def test_inspect_a_file_that_is_not_an_engine(cli, monkeypatch, tmp_path):
    env(monkeypatch)
    path = tmp_path / "m.plan"
    path.write_bytes(b"\x08\x07 an onnx model")
    res = cli("inspect", "model", path)
    assert res.code == 3 and "not a TensorRT engine for this TensorRT version and GPU" in res.err


# ----------------------------------------------------------------------------- TensorRT recipe options


def test_run_model_type_engine_loads_any_file_name_as_an_engine(cli, monkeypatch, tmp_path):
    trt, _ = env(monkeypatch)
    m = doubling_model()
    m.profiles = [{"x": ((1, 3), (2, 3), (4, 3))}]
    trt._engines[b"FAKE-ENGINE b"] = m
    path = tmp_path / "model.bin"
    path.write_bytes(b"FAKE-ENGINE b")
    res = cli("run", path, "--trt", "--model-type", "engine")
    assert res.code == 0, res.err
    assert f"engine loaded from {path}" in res.err
    res = cli("run", path, "--trt", "--onnxrt", "--model-type=engine")
    assert res.code == 2 and "is a TensorRT engine, which ONNX-Runtime cannot run" in res.err


@pytest.mark.parametrize("option,advice", [
    ("--layer-precisions", "toolkit convert MODEL --fp-to-fp16 --keep-fp32 NAMES"),
    ("--precision-constraints", "TensorRT 11 builds strongly typed networks and has no precision constraints"),
    ("--save-tactics", "save the engine once with --save-engine"),
    ("--load-tactics", "save the engine once with --save-engine"),
    ("--display-as", "toolkit inspect model model.engine --show layers"),
])  # fmt: skip
def test_tensorrt_recipe_options_are_refused_with_what_to_do(cli, seed_model, option, advice):
    cmd = ["inspect", "model", seed_model] if option == "--display-as" else ["run", seed_model, "--trt"]
    res = cli(*cmd, option, "x")
    assert res.code == 2
    (line,) = res.err.strip().splitlines()
    assert line.startswith(f"error: {option} (a Polygraphy option) is not supported by toolkit: ") and advice in line

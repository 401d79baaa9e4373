"""How TensorRT calls fail, and what toolkit makes of it (CPU, through the fakes of tests/trt_fakes.py).

The surface files (tests/trt_surface/, written by scripts/trt_surface.py from the bindings) record,
for every TensorRT call the backend makes, whether the binding signals failure by its return value
(False, -1, None) or by raising; the fakes fail exactly that way. Here:

- the record covers every call the backend makes, in TensorRT 10 and 11;
- every call that can fail is made to fail, the way the binding does and the other way, and each
  time toolkit ends with one ``error:`` line and a documented exit code, never "bug in toolkit";
- the fixes found by the second audit: a refused profile switch (the binding raises), the plugin
  library's process-lifetime logger and its False return, loops nested in loops for ``mark all``,
  and refused tensor addresses / output allocators.
"""

from __future__ import annotations

import gc

import numpy as np
import pytest

import modelzoo as mz
import trt_api
from test_trt_findings import engine_file, env, nonzero_model, reshape_model, two_profile_engine
from test_trt_surface import backend_sources
from toolkit.core.io.datafiles import save_inputs
from trt_fakes import FakeModel, doubling_model, fake_tensorrt

TRT10, TRT11 = "10.13.3.9", "11.4.0.106"


@pytest.fixture
def seed_model(tmp_path):
    return mz.save(mz.seed_example((1, 3, 4, 4)), tmp_path / "model.onnx")


# ----------------------------------------------------------------------------- the record


@pytest.mark.parametrize("major", [10, 11])
def test_the_surface_records_how_every_call_the_backend_makes_fails(major):
    surface = trt_api.load_surface(major)
    calls = trt_api.backend_calls(backend_sources(), surface)
    assert len(calls) >= 45
    missing = sorted(f"{c} ({where})" for c, where in calls.items() if c not in surface.failures)
    assert missing == [], "record them in scripts/trt_surface.py FAILURES and rerun it"
    assert set(surface.failures) == set(calls)  # nothing recorded that the backend no longer calls
    f = surface.failures
    # what the bindings' source says (pyCore.cpp, pyPlugin.cpp), checked against tensorrt.so by the script
    assert (f["IExecutionContext.set_optimization_profile_async"].exception,
            f["IExecutionContext.set_optimization_profile_async"].message) == (
        "RuntimeError", "Error in set optimization profile async.")  # fmt: skip
    for call in ("IExecutionContext.set_tensor_address", "IExecutionContext.set_output_allocator",
                 "IExecutionContext.set_input_shape", "IExecutionContext.execute_async_v3", "init_libnvinfer_plugins",
                 "OnnxParser.parse_from_file"):  # fmt: skip
        assert (f[call].style, f[call].value) == ("returns", False), call
    assert (f["IBuilderConfig.add_optimization_profile"].style, f["IBuilderConfig.add_optimization_profile"].value) == (
        "returns", -1)  # fmt: skip
    assert f["Builder"].exception == "TypeError" and "factory function returned nullptr" in f["Builder"].message
    assert f["IOptimizationProfile.set_shape"].exception == "RuntimeError"
    assert f["INetworkDefinition.mark_output"].style == "none"


def test_a_call_the_record_does_not_cover_is_caught():
    surface = trt_api.load_surface(10)
    src = {"new.py": "def f(ctx, x):\n    ctx.set_input_consumed_event(x)\n    ctx.execute_async_v3(0)\n"}
    calls = trt_api.backend_calls(src, surface)
    assert set(calls) - set(surface.failures) == {"IExecutionContext.set_input_consumed_event"}
    # trt_call(fn, *args) counts as a call of fn, with fn's arguments checked
    bad = {"w.py": "def f(ctx, trt_call):\n    trt_call(ctx.set_tensor_address, 'x', fail=None)\n"}
    problems, _ = trt_api.check_backend_source(bad)
    assert problems and "set_tensor_address: no signature takes 1 positional argument(s)" in problems[0]


@pytest.mark.parametrize("version", [TRT10, TRT11])
def test_fakes_fail_the_way_the_record_says(version):
    trt = fake_tensorrt(version)
    m = doubling_model()
    m.profiles = [{"x": ((1, 3), (2, 3), (4, 3))}]
    ctx = trt.ICudaEngine(m).create_execution_context()
    with pytest.raises(RuntimeError, match=r"^Error in set optimization profile async\.$"):
        ctx.set_optimization_profile_async(3, 7)
    with pytest.raises(TypeError, match="factory function returned nullptr"):
        trt._failing["Runtime"] = "recorded"
        trt.Runtime(None)
    trt._failing = {"IExecutionContext.set_tensor_address": "recorded"}
    assert ctx.set_tensor_address("x", 1) is False
    trt._failing = {"IExecutionContext.set_tensor_address": "other"}
    with pytest.raises(RuntimeError, match="failed the other way"):
        ctx.set_tensor_address("x", 1)
    trt._failing = {"IExecutionContext.set_optimization_profile_async": "other"}
    assert ctx.set_optimization_profile_async(0, 7) is False


# ----------------------------------------------------------------------------- both styles, every call


def _build(cli, monkeypatch, tmp_path, version, seed_model, extra=()):
    trt, _ = env(monkeypatch, version, model=doubling_model())
    return trt, lambda: cli("run", seed_model, "--trt", "--trt-opt-shapes", "x:[2,3]", *extra)


def _external(cli, monkeypatch, tmp_path, version, seed_model):  # parser.parse(bytes, path)
    return _build(cli, monkeypatch, tmp_path, version, seed_model, ("--external-data-dir", tmp_path))


def _shape_input(cli, monkeypatch, tmp_path, version, seed_model):
    trt, _ = env(monkeypatch, version, model=reshape_model())
    return trt, lambda: cli("run", seed_model, "--trt", "--trt-opt-shapes", "s:[3,2]")


def _data_dependent(cli, monkeypatch, tmp_path, version, seed_model):
    trt, _ = env(monkeypatch, version, model=nonzero_model())
    return trt, lambda: cli("run", seed_model, "--trt")


def _two_profiles(cli, monkeypatch, tmp_path, version, seed_model):
    trt, _ = env(monkeypatch, version)
    path = two_profile_engine(tmp_path, trt)
    save_inputs(str(tmp_path / "in.json"), [{"x": np.ones((6, 3), np.float32)}])
    return trt, lambda: cli("run", path, "--trt", "--load-inputs", tmp_path / "in.json")


def _calibration(cli, monkeypatch, tmp_path, version, seed_model):
    trt, _ = env(monkeypatch, version, model=doubling_model())
    trt._calibration_shape = (2, 3)
    return trt, lambda: cli("run", seed_model, "--trt", "--int8", "--trt-opt-shapes", "x:[2,3]")


def _inspect(cli, monkeypatch, tmp_path, version, seed_model):
    trt, _ = env(monkeypatch, version)
    m = doubling_model()
    m.profiles = [{"x": ((1, 3), (2, 3), (4, 3))}]
    path = engine_file(tmp_path, trt, m)
    return trt, lambda: cli("inspect", "model", path, "--show", "layers")


SCENARIOS = {  # the run that reaches a call (default: build an engine from the model and run it)
    "OnnxParser.parse": _external,
    "IOptimizationProfile.set_shape_input": _shape_input,
    "IExecutionContext.set_output_allocator": _data_dependent,
    "IExecutionContext.set_optimization_profile_async": _two_profiles,
    "IBuilderConfig.set_calibration_profile": _calibration,
    "ICudaEngine.create_engine_inspector": _inspect,
}


def _failing_calls():
    out = []
    for version, major in ((TRT10, 10), (TRT11, 11)):
        surface = trt_api.load_surface(major)
        for call, f in sorted(surface.failures.items()):
            if not f.can_fail:
                continue
            out.append(pytest.param(version, call, "recorded", id=f"{major}-{call}-recorded"))
            if surface.other_way(call) is not None:
                out.append(pytest.param(version, call, "other", id=f"{major}-{call}-other"))
    return out


@pytest.mark.parametrize("version,call,how", _failing_calls())
def test_every_failing_call_ends_in_a_clean_error(cli, monkeypatch, tmp_path, seed_model, version, call, how):
    trt, run = SCENARIOS.get(call, _build)(cli, monkeypatch, tmp_path, version, seed_model)
    trt._failing[call] = how
    res = run()
    assert (call, how) in trt._failed, f"the run never reached {call}"
    assert "bug in toolkit" not in res.err and "Traceback" not in res.err, res.err
    if call == "init_libnvinfer_plugins":  # plugin-free models work without the plugin library
        assert res.code == 0, res.err
        assert "TensorRT's plugin library could not be initialized" in res.err
        return
    assert res.code in (1, 2, 3), res.err
    errors = [line for line in res.err.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, res.err


# ----------------------------------------------------------------------------- 1. profile switch


@pytest.mark.parametrize("version", [TRT10, TRT11])
def test_a_refused_profile_switch_is_exit_1_with_tensorrts_reason(cli, monkeypatch, tmp_path, seed_model, version):
    trt, run = _two_profiles(cli, monkeypatch, tmp_path, version, seed_model)

    def refuse(self, profile_index, stream_handle):  # what TensorRT does when it cannot switch
        self._engine._logger.log(trt.ILogger.Severity.ERROR, "fake: setOptimizationProfileAsync: out of memory")
        return trt._fail("IExecutionContext.set_optimization_profile_async")

    monkeypatch.setattr(trt.IExecutionContext, "set_optimization_profile_async", refuse)
    res = run()
    assert res.code == 1, res.err
    assert "error: TensorRT cannot switch to profile 1: fake: setOptimizationProfileAsync: out of memory" in res.err
    assert "bug in toolkit" not in res.err


# ----------------------------------------------------------------------------- 2. plugin library


def _activate_and_free(version, monkeypatch, seed_model):
    from toolkit.backends.trt import TrtConfig, TrtRunner

    runner = TrtRunner(seed_model, TrtConfig(profiles=[{"x": ((2, 3), (2, 3), (2, 3))}]))
    runner.activate()
    runner.deactivate()
    notes = list(runner.notes)
    del runner
    gc.collect()
    return notes


def test_the_plugin_library_gets_a_logger_that_outlives_every_runner(monkeypatch, seed_model, capfd):
    trt, _ = env(monkeypatch, model=doubling_model())
    _activate_and_free(TRT10, monkeypatch, seed_model)
    _activate_and_free(TRT10, monkeypatch, seed_model)  # debug precision: runner after runner
    assert trt._plugins == [""]  # registered once per process
    trt._plugin_log("WARNING", "fake plugin: a late message")  # raises if its logger was freed
    assert "fake plugin: a late message" in capfd.readouterr().err


def test_plugin_messages_reach_the_runner_that_is_alive(monkeypatch, seed_model):
    from toolkit.backends.trt import TrtRunner

    trt, _ = env(monkeypatch, model=doubling_model())
    got = []
    runner = TrtRunner(seed_model, on_message=lambda sev, text: got.append((sev, text)))
    with runner:
        trt._plugin_log("ERROR", "fake plugin: cannot create the kernel")
    assert ("ERROR", "fake plugin: cannot create the kernel") in got


def test_a_plugin_library_that_cannot_initialize_is_a_note_and_is_tried_again(monkeypatch, seed_model):
    trt, _ = env(monkeypatch, model=doubling_model())
    trt._failing["init_libnvinfer_plugins"] = "recorded"  # returns False
    notes = _activate_and_free(TRT10, monkeypatch, seed_model)
    assert notes == [
        "TensorRT's plugin library could not be initialized: models that use TensorRT plugins "
        "(EfficientNMS_TRT, ROIAlign_TRT, ...) will not parse"
    ]
    del trt._failing["init_libnvinfer_plugins"]
    assert _activate_and_free(TRT10, monkeypatch, seed_model) == []
    assert trt._failed == [("init_libnvinfer_plugins", "recorded")] and trt._plugins == [""]


# ----------------------------------------------------------------------------- 3. loops in loops


def nested_loops():
    """An outer Loop whose body holds an inner Loop (a Scan looks the same), as the ONNX parser
    lays them out: each loop's trip limit and recurrences, its body, then its LOOP_OUTPUT layers."""
    return FakeModel(
        {"x": ((2,), "FLOAT")},
        [
            ("a", "ACTIVATION", [("a", "FLOAT")]),
            ("L1.trip", "TRIP_LIMIT", [], ("L1",)),
            ("L1.counter", "RECURRENCE", [("L1.i", "INT32")], ("L1",)),
            ("L1.next", "ELEMENTWISE", [("L1.i1", "INT32")]),  # the loop counter's +1, inside
            ("L1.state", "RECURRENCE", [("L1.h", "FLOAT")], ("L1",)),
            ("body1", "ELEMENTWISE", [("body1", "FLOAT")]),
            ("L2.trip", "TRIP_LIMIT", [], ("L2",)),
            ("L2.state", "RECURRENCE", [("L2.h", "FLOAT")], ("L2",)),
            ("body2", "ELEMENTWISE", [("body2", "FLOAT")]),
            ("L2.out", "LOOP_OUTPUT", [("L2.out", "FLOAT")], ("L2",)),  # outside L2, inside L1
            ("after_inner", "ELEMENTWISE", [("after_inner", "FLOAT")]),  # still inside L1
            ("L1.out_last", "LOOP_OUTPUT", [("L1.last", "FLOAT")], ("L1",)),
            ("L1.out_scan", "LOOP_OUTPUT", [("L1.scan", "FLOAT")], ("L1",)),
            ("tail", "ELEMENTWISE", [("tail", "FLOAT")]),
            ("L3.iter", "ITERATOR", [("L3.x", "FLOAT")], ("L3",)),  # a second loop after the first
            ("body3", "ELEMENTWISE", [("body3", "FLOAT")]),
            ("L3.out", "LOOP_OUTPUT", [("L3.out", "FLOAT")], ("L3",)),
        ],
        ["tail"],
        lambda f: {},
    )


@pytest.mark.parametrize("version", [TRT10, TRT11])
def test_mark_all_skips_every_tensor_inside_nested_loops(version):
    from toolkit.backends.trt.builder import layer_candidates

    trt = fake_tensorrt(version)
    network = trt.INetworkDefinition(0)
    network._load(nested_loops())
    names, skipped = layer_candidates(trt, network)
    assert names == ["a", "L1.last", "L1.scan", "tail", "L3.out"]
    assert skipped == {"inside a loop or an If": 10}


# ----------------------------------------------------------------------------- 4. addresses and allocators


@pytest.mark.parametrize("version", [TRT10, TRT11])
def test_a_refused_tensor_address_stops_at_once_naming_the_tensor(cli, monkeypatch, tmp_path, seed_model, version):
    trt, run = _build(cli, monkeypatch, tmp_path, version, seed_model)
    real = trt.IExecutionContext.set_tensor_address

    def refuse_y(self, name, memory):
        if name == "y":
            self._engine._logger.log(trt.ILogger.Severity.ERROR, "fake: address of 'y' is misaligned")
            return trt._fail("IExecutionContext.set_tensor_address")
        return real(self, name, memory)

    monkeypatch.setattr(trt.IExecutionContext, "set_tensor_address", refuse_y)
    res = run()
    assert res.code == 1, res.err
    assert "error: TensorRT cannot set the address of tensor 'y': fake: address of 'y' is misaligned" in res.err
    assert ("IExecutionContext.execute_async_v3", "recorded") not in trt._failed


@pytest.mark.parametrize("version", [TRT10, TRT11])
def test_a_refused_output_allocator_stops_at_once_naming_the_tensor(cli, monkeypatch, tmp_path, seed_model, version):
    trt, run = _data_dependent(cli, monkeypatch, tmp_path, version, seed_model)
    trt._failing["IExecutionContext.set_output_allocator"] = "recorded"
    res = run()
    assert res.code == 1, res.err
    assert "error: TensorRT cannot set the output allocator of tensor 'idx': no details" in res.err
    assert "inference failed" not in res.err

"""The TensorRT backend and its test fakes stay within the real API of TensorRT 10 and 11.

tests/trt_surface/tensorrt-{10,11}.txt hold the real Python API (classes, methods with
signatures, properties, enums with members), read from the bindings wheels by
scripts/trt_surface.py. Here:

- every public name of the fakes (tests/trt_fakes.py) exists in the real API of the fake's
  version, with the same parameters; the TensorRT 11 fake has no calibrator API;
- every TensorRT name the backend touches exists in TensorRT 10 or 11, every call fits a real
  signature, and the names only TensorRT 10 has are exactly those the backend declares
  (``availability.TRT10_ONLY``, each used behind a version check);
- a misspelled call, in the backend or in a fake, is caught (the negative examples below).
"""

from __future__ import annotations

import glob
import os

import pytest

import trt_api
from trt_fakes import doubling_model, fake_cudart, fake_tensorrt, install

BACKEND = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "toolkit", "backends", "trt")
VERSIONS = {10: "10.13.3.9", 11: "11.4.0.106"}


def backend_sources():
    return {os.path.relpath(p): open(p).read() for p in sorted(glob.glob(os.path.join(BACKEND, "*.py")))}


@pytest.mark.parametrize("major", [10, 11])
def test_surface_files_are_the_real_api(major):
    s = trt_api.load_surface(major)
    assert s.version == VERSIONS[major]
    # a few facts that anchor the files to the real bindings
    assert "build_serialized_network" in s.classes["Builder"].methods
    assert set(s.enums["MemoryPoolType"]) >= {"WORKSPACE", "TACTIC_DRAM", "TACTIC_SHARED_MEMORY"}
    assert ("FP16" in s.enums["BuilderFlag"]) == (major == 10)
    assert ("IInt8EntropyCalibrator2" in s.classes) == (major == 10)


@pytest.mark.parametrize("major", [10, 11])
def test_fakes_match_the_real_api(major, monkeypatch):
    """Also checks the attributes the fake objects got while a model was built and run."""
    import numpy as np

    from toolkit.backends.trt import TrtConfig, TrtRunner

    cudart = fake_cudart()
    trt = fake_tensorrt(VERSIONS[major], memory=cudart.memory, model=doubling_model())
    install(monkeypatch, trt, cudart)
    instances = []
    for cls in vars(trt).values():
        if isinstance(cls, type):
            orig = cls.__init__

            def init(self, *a, __orig=orig, **k):
                __orig(self, *a, **k)
                instances.append(self)

            if "__init__" in vars(cls):
                monkeypatch.setattr(cls, "__init__", init)
    runner = TrtRunner("model.onnx", TrtConfig(mark_outputs=["mark", "all"], profiles=[{"x": ((1, 3), (2, 3), (4, 3))}]))
    monkeypatch.setattr("toolkit.backends.trt.builder.check_readable_file", lambda p: None)
    with runner:
        out = runner.infer({"x": np.ones((2, 3), np.float32)})
    assert set(out) == {"x2", "y"}
    monkeypatch.undo()  # the __init__ wrappers above are not part of the fakes
    assert len({type(i).__name__ for i in instances}) >= 10
    assert trt_api.check_fake(trt, trt_api.load_surface(major), instances) == []


def test_a_misspelled_fake_method_is_caught():
    trt = fake_tensorrt(VERSIONS[10])
    surface = trt_api.load_surface(10)
    assert trt_api.check_fake(trt, surface) == []
    trt.IExecutionContext.execute_async_v2 = lambda self, bindings, stream_handle: True  # gone since 10.0
    trt.Builder.build_serialised_network = lambda self, network, config: None  # spelling
    trt.IBuilderConfig.add_optimization_profile = lambda self, prof: 0  # parameter name
    assert sorted(trt_api.check_fake(trt, surface)) == [
        "Builder.build_serialised_network: not in TensorRT 10.13.3.9",
        "IBuilderConfig.add_optimization_profile(prof): no such signature in TensorRT 10.13.3.9",
        "IExecutionContext.execute_async_v2: not in TensorRT 10.13.3.9",
    ]


def test_tensorrt_11_fake_has_no_weak_typing_or_calibration():
    trt = fake_tensorrt(VERSIONS[11])
    assert not hasattr(trt, "IInt8EntropyCalibrator2")
    assert not hasattr(trt.BuilderFlag, "FP16") and not hasattr(trt.BuilderFlag, "INT8")
    assert not hasattr(trt.IBuilderConfig, "set_calibration_profile")
    assert trt_api.check_fake(trt, trt_api.load_surface(11)) == []
    # the 10 fake's calibrator API would not pass as TensorRT 11
    trt10 = fake_tensorrt(VERSIONS[10])
    assert "tensorrt.IInt8EntropyCalibrator2: not in TensorRT 11.4.0.106" in trt_api.check_fake(
        trt10, trt_api.load_surface(11)
    )


def test_backend_uses_only_real_tensorrt_names():
    from toolkit.backends.trt.availability import TRT10_ONLY

    problems, missing = trt_api.check_backend_source(backend_sources())
    assert problems == []
    assert missing[10] == set()
    assert missing[11] == set(TRT10_ONLY)


def test_backend_check_catches_a_misspelled_call():
    good = "def f(trt, network, ctx, cfg):\n    network.get_output(0)\n    ctx.execute_async_v3(0)\n"
    assert trt_api.check_backend_source({"good.py": good}) == ([], {10: set(), 11: set()})
    bad = (
        "def f(trt, network, ctx, cfg, profile):\n"
        "    network.get_outptu(0)\n"  # misspelled
        "    ctx.execute_async_v3(0, 1)\n"  # one argument too many
        "    cfg.set_flag(trt.BuilderFlag.FP61)\n"  # no such member
        "    profile.set_shape('x', (1,), (1,))\n"  # max missing
        "    trt.OnnxParsr(network, None)\n"
    )
    problems, _ = trt_api.check_backend_source({"bad.py": bad})
    assert [p.split(": ", 1)[0] for p in problems] == ["bad.py:2", "bad.py:3", "bad.py:4", "bad.py:5", "bad.py:6"]
    text = "\n".join(problems)
    assert "INetworkDefinition.get_outptu does not exist" in text
    assert "IExecutionContext.execute_async_v3: no signature takes 2 positional argument(s)" in text
    assert "BuilderFlag.FP61 does not exist" in text
    assert "IOptimizationProfile.set_shape: no signature takes 3 positional argument(s)" in text
    assert "OnnxParsr does not exist" in text


def test_pool_names_are_tensorrts_memory_pools():
    from toolkit.backends.trt.options import POOL_NAMES

    for major in (10, 11):
        assert {p.upper() for p in POOL_NAMES} == set(trt_api.load_surface(major).enums["MemoryPoolType"])


def test_every_numpy_dtype_mapping_resolves():
    """Each TensorRT DataType the backend maps has a numpy dtype (bf16/fp8 through ml_dtypes)."""
    pytest.importorskip("ml_dtypes")
    from toolkit.backends.trt.builder import TRT_DTYPES
    from toolkit.core.meta import dtype_to_numpy

    for major in (10, 11):
        members = set(trt_api.load_surface(major).enums["DataType"])
        assert set(TRT_DTYPES) <= members
        assert members - set(TRT_DTYPES) == {"INT4", "FP4", "E8M0"}
    for trt_name, name in TRT_DTYPES.items():
        dt = dtype_to_numpy(name)
        assert dt.itemsize == (2 if trt_name in ("HALF", "BF16") else 4 if trt_name in ("FLOAT", "INT32") else
                               8 if trt_name == "INT64" else 1), trt_name  # fmt: skip
    assert str(dtype_to_numpy("float8e4m3fn")) == "float8_e4m3fn"
    # the ONNX-Runtime path shares the table: every ONNX dtype name has its numpy dtype
    from toolkit.core.meta import _NAME_TO_ONNX

    for name in _NAME_TO_ONNX:
        dtype_to_numpy(name)

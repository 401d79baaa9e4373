"""`toolkit run --trt` without a GPU: option parsing, missing TensorRT / cuda-python / GPU,
engine files, parser errors, output selection.

TensorRT and cuda-python are replaced by the fakes of tests/trt_fakes.py, which are checked
against the real API of TensorRT 10 and 11 (tests/backends/test_trt_surface.py). The real thing is
tested in test_trt_gpu.py (skipped without a GPU).
"""

from __future__ import annotations

import sys

import numpy as np
import pytest
from onnx import TensorProto as onnx_types

import modelzoo as mz
from conftest import modules_loaded_by
from toolkit.backends import trt as trtmod
from toolkit.core.io.datafiles import IterationResult, RunResults, load_inputs, load_outputs, save_inputs, save_outputs
from toolkit.core.errors import DependencyError, InputError, UsageError
from trt_fakes import CudaError, doubling_model, fake_cudart, fake_tensorrt, install
from toolkit.core.install import extra_install_command

INSTALL = "error: TensorRT is not installed; install it with: " + extra_install_command("trt")


@pytest.fixture
def seed_model(tmp_path):
    return mz.save(mz.seed_example((1, 3, 4, 4)), tmp_path / "model.onnx")


# ----------------------------------------------------------------------------- fakes (tests/trt_fakes.py)

TRT10, TRT11 = "10.13.3.9", "11.4.0.106"


def doubling_engine(memory=None):
    """The engine file of y = 2 * x for x: float32 [-1, 3], profile min 1, opt 2, max 4."""
    m = doubling_model()
    m.profiles = [{"x": ((1, 3), (2, 3), (4, 3))}]
    return {b"FAKE-ENGINE v1": m}


@pytest.fixture
def engine_env(monkeypatch, tmp_path):
    """Fake TensorRT + cuda-python with one 'GPU', and a doubling engine file."""
    cudart = fake_cudart()
    install(monkeypatch, fake_tensorrt(memory=cudart.memory, engines=doubling_engine()), cudart)
    path = tmp_path / "double.engine"
    path.write_bytes(b"FAKE-ENGINE v1")
    return str(path)


# ----------------------------------------------------------------------------- option parsing


@pytest.mark.parametrize(
    "text,expected",
    [("1G", 2**30), ("512M", 512 * 2**20), ("64KiB", 64 * 1024), ("1048576", 1048576), ("2.5g", int(2.5 * 2**30)),
     ("1 GB", 2**30), ("1e3", 1000)],
)
def test_parse_size(text, expected):
    assert trtmod.parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "G", "1Q", "-1G", "0", "1.5.5M", "one"])
def test_parse_size_rejects(text):
    with pytest.raises(UsageError):
        trtmod.parse_size(text)


def test_parse_pool_limits():
    assert trtmod.parse_pool_limits(["workspace:1G", "TACTIC_DRAM:512M"]) == {
        "workspace": 2**30,
        "tactic_dram": 512 * 2**20,
    }
    with pytest.raises(UsageError, match="unknown memory pool 'heap'"):
        trtmod.parse_pool_limits(["heap:1G"])
    with pytest.raises(UsageError, match="write pool:size"):
        trtmod.parse_pool_limits(["1G"])


def test_profiles_from_groups():
    profiles = trtmod.parse_profile_groups(
        [["x:[1,3]", "m:1x2"], ["x:[4,3]"]],
        [["x:[2,3]", "m:1x2"]],
        [["x:8x3", "m:[1,2]"], ["x:[16,3]"]],
    )
    assert profiles == [
        {"x": ((1, 3), (2, 3), (8, 3)), "m": ((1, 2), (1, 2), (1, 2))},
        # no opt shape in profile 1: opt is the max shape
        {"x": ((4, 3), (16, 3), (16, 3))},
    ]
    # one flag is enough for a fixed profile; a scalar is a valid shape
    assert trtmod.parse_profile_groups([], [["x:[1,3]", "s:[]"]], []) == [
        {"x": ((1, 3), (1, 3), (1, 3)), "s": ((), (), ())}
    ]


@pytest.mark.parametrize(
    "mins,opts,maxs,message",
    [
        ([["x:[2,3]"]], [["x:[1,3]"]], [], "min <= opt <= max"),
        ([], [["x:[1,3]"]], [["x:[1,3,1]"]], "different ranks"),
        ([], [["x:[batch,3]"]], [], "fixed non-negative integers"),
        ([], [["x"]], [], "needs a shape"),
    ],
)
def test_bad_profiles(mins, opts, maxs, message):
    with pytest.raises(UsageError, match=message):
        trtmod.parse_profile_groups(mins, opts, maxs)


def test_select_outputs():
    cand = ["conv", "relu", "(Unnamed Layer* 3) [Shuffle]_output", "y"]

    def sel(candidates, current, patterns, exclude=()):
        config = trtmod.TrtConfig(mark_outputs=patterns, exclude_outputs=exclude)
        return trtmod.select_outputs(config, candidates, current)

    assert sel(cand, ["y"], None) == ["y"]
    assert sel(cand, ["y"], ["mark", "all"]) == cand
    assert sel(cand, ["y"], ["*"], ["(Unnamed*"]) == ["conv", "relu", "y"]
    assert sel(cand, ["y"], ["relu", "conv"]) == ["relu", "conv"]
    assert sel(cand, ["y"], ["c*", "mark", "all"]) == cand
    assert sel([], ["y", "z"], None, ["z"]) == ["y"]
    with pytest.raises(InputError, match="names 'nope'"):
        sel(cand, ["y"], ["nope"])
    with pytest.raises(InputError, match="pattern 'q\\*' matches no tensor"):
        sel(cand, ["y"], ["q*"])
    with pytest.raises(UsageError, match="no outputs left"):
        sel(cand, ["y"], None, ["*"])


def test_engine_paths():
    assert trtmod.is_engine_path("m.engine") and trtmod.is_engine_path("dir/M.PLAN") and trtmod.is_engine_path("a.trt")
    assert not trtmod.is_engine_path("m.onnx") and not trtmod.is_engine_path("-")


def capture_options(monkeypatch):
    """Replace execute() to capture the RunOptions the CLI builds."""
    import toolkit.run as runplan

    seen = {}

    def fake_execute(opts, reporter=None):
        seen["opts"] = opts
        raise UsageError("captured")

    monkeypatch.setattr(runplan, "execute", fake_execute)
    return seen


def test_cli_groups_profile_flags(cli, seed_model, monkeypatch):
    from toolkit.backends.trt.preflight import config_from

    seen = capture_options(monkeypatch)
    res = cli(
        "run", seed_model, "--trt", "--fp16", "--tf32",
        "--trt-min-shapes", "x0:[1,3,4,4]", "x1:1x3x4x4",
        "--trt-opt-shapes", "x0:[1,3,4,4]", "x1:[1,3,4,4]",
        "--trt-max-shapes", "x0:[2,3,4,4]", "x1:[2,3,4,4]",
        "--trt-opt-shapes", "x0:[4,3,4,4]", "x1:[4,3,4,4]",
        "--pool-limit", "workspace:1G", "tactic_dram:256M",
        "--trt-outputs", "mark", "all", "--trt-exclude-outputs", "Y",
        "--save-engine", "m.engine",
    )  # fmt: skip
    assert res.code == 2 and "captured" in res.err
    opts = seen["opts"]
    assert opts.runners == ["trt"] and opts.fp16 and opts.tf32 and not opts.int8
    assert opts.trt_min_shapes == [["x0:[1,3,4,4]", "x1:1x3x4x4"]]
    assert len(opts.trt_opt_shapes) == 2
    cfg = config_from(opts)
    assert cfg.profiles[0]["x0"] == ((1, 3, 4, 4), (1, 3, 4, 4), (2, 3, 4, 4))
    assert cfg.profiles[1]["x1"] == ((4, 3, 4, 4),) * 3
    assert cfg.pool_limits == {"workspace": 2**30, "tactic_dram": 256 * 2**20}
    assert cfg.mark_outputs == ["mark", "all"] and cfg.exclude_outputs == ["Y"]
    assert cfg.save_engine == "m.engine"


def test_runner_order_follows_flags(cli, seed_model, monkeypatch):
    seen = capture_options(monkeypatch)
    cli("run", seed_model, "--trt", "--onnxrt")
    assert seen["opts"].runners == ["trt", "onnxrt"]
    cli("run", seed_model, "--onnxrt", "--trt")
    assert seen["opts"].runners == ["onnxrt", "trt"]


@pytest.mark.parametrize(
    "args,message",
    [
        (["--pool-limit", "workspace:lots"], "bad size 'lots'"),
        (["--trt-opt-shapes", "x0:[2,3]", "--trt-max-shapes", "x0:[1,3]"], "min <= opt <= max"),
        (["--calibration-cache", "c.cache"], "only used with --int8"),
        (["--save-engine", "-"], "needs a file name"),
        (["--save-engine", "{model}"], "would overwrite MODEL"),
    ],
)
def test_usage_errors_come_before_dependency_checks(cli, seed_model, monkeypatch, args, message):
    install(monkeypatch, None)  # no TensorRT: a usage error must still win
    args = [a.replace("{model}", seed_model) for a in args]
    res = cli("run", seed_model, "--trt", *args)
    assert res.code == 2, res.err
    assert message in res.err and "Traceback" not in res.err


def test_engine_with_onnxrt_is_usage_error(cli, tmp_path):
    path = tmp_path / "m.plan"
    path.write_bytes(b"x")
    res = cli("run", path, "--onnxrt", "--trt")
    assert res.code == 2
    assert "is a TensorRT engine, which ONNX-Runtime cannot run" in res.err


def test_stdin_model_feeds_one_runner_only(cli, seed_model):
    with open(seed_model, "rb") as f:
        res = cli("run", "-", "--onnxrt", "--trt", stdin=f.read())
    assert res.code == 2 and "stdin" in res.err


def test_trt_options_without_trt_are_ignored_with_a_warning(cli, seed_model):
    res = cli("run", seed_model, "--onnxrt", "--tf32", "--trt-outputs", "mark", "all", "-q")
    assert res.code == 0
    assert "warning: --trt-outputs, --tf32 ignored without --trt" in res.err
    # (--onnxrt --fp16 without --trt emulates fp16 on the CPU: tests/convert/test_fp16_run.py)


# ----------------------------------------------------------------------------- missing pieces


def test_missing_tensorrt(cli, seed_model, monkeypatch):
    install(monkeypatch, None)
    res = cli("run", seed_model, "--trt")
    assert res.code == 4
    assert res.err.strip() == INSTALL


def test_missing_tensorrt_is_reported_before_loading_data(cli, seed_model, monkeypatch, tmp_path):
    install(monkeypatch, None)
    res = cli("run", seed_model, "--trt", "--load-inputs", tmp_path / "missing.json")
    assert res.code == 4 and res.err.strip() == INSTALL


def test_broken_tensorrt_install(cli, seed_model, monkeypatch, tmp_path):
    (tmp_path / "pkgs").mkdir()
    (tmp_path / "pkgs" / "tensorrt.py").write_text(
        "raise OSError('libnvinfer.so.10: cannot open shared object file: No such file or directory')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path / "pkgs"))
    monkeypatch.delitem(sys.modules, "tensorrt", raising=False)
    res = cli("run", seed_model, "--trt")
    assert res.code == 4
    assert "TensorRT is installed but cannot be loaded (libnvinfer.so.10: cannot open" in res.err
    assert len(res.err.strip().splitlines()) == 1


def test_old_tensorrt(cli, seed_model, monkeypatch):
    install(monkeypatch, fake_tensorrt("8.6.1"), fake_cudart())
    res = cli("run", seed_model, "--trt")
    assert res.code == 4
    assert "TensorRT 8.6.1 is too old (toolkit needs 10 or newer)" in res.err


def test_missing_cuda_python(cli, seed_model, monkeypatch):
    install(monkeypatch, fake_tensorrt(), None)
    res = cli("run", seed_model, "--trt")
    assert res.code == 4
    assert res.err.strip() == (
        "error: cuda-python (GPU memory for the TensorRT runner) is not installed; "
        "install it with: " + extra_install_command("trt")
    )


def test_no_gpu(cli, seed_model, monkeypatch):
    install(monkeypatch, fake_tensorrt(), fake_cudart(devices=0))
    res = cli("run", seed_model, "--trt")
    assert res.code == 4
    assert res.err.strip() == "error: no NVIDIA GPU found; --trt needs an NVIDIA GPU with its driver"


def test_no_driver(cli, seed_model, monkeypatch):
    install(monkeypatch, fake_tensorrt(), fake_cudart(error=CudaError.cudaErrorInsufficientDriver))
    res = cli("run", seed_model, "--trt")
    assert res.code == 4
    assert "no NVIDIA driver was found, or it is too old" in res.err and "cudaErrorInsufficientDriver" in res.err


def test_no_device_error(cli, seed_model, monkeypatch):
    install(monkeypatch, fake_tensorrt(), fake_cudart(error=CudaError.cudaErrorNoDevice))
    res = cli("run", seed_model, "--trt")
    assert res.code == 4 and "(cudaErrorNoDevice)" in res.err


def test_real_cuda_python_without_gpu_if_installed(monkeypatch):
    """With the real cuda-python on a machine without a GPU, the message is exit-4 material."""
    try:
        from cuda.bindings import runtime as cudart  # noqa: F401
    except ImportError:
        pytest.skip("cuda-python is not installed")
    err, count = cudart.cudaGetDeviceCount()
    if int(err) == 0 and count:
        pytest.skip("a GPU is present")
    with pytest.raises(DependencyError):
        trtmod.require_gpu(cudart)


@pytest.fixture
def trt11_env(monkeypatch):
    cudart = fake_cudart()
    trt = fake_tensorrt(TRT11, memory=cudart.memory, model=doubling_model())
    install(monkeypatch, trt, cudart)
    return trt


@pytest.mark.parametrize("flag,dtype", [("--fp16", "float16"), ("--bf16", "bfloat16")])
def test_reduced_precision_on_tensorrt_11_converts_the_model_and_builds_strongly_typed(
    cli, seed_model, monkeypatch, trt11_env, flag, dtype
):
    import shutil

    from toolkit.backends.trt import builder

    converted = []

    def convert(src, to, dst):
        converted.append((src, to))
        shutil.copyfile(src, dst)

    monkeypatch.setattr(builder, "converter_for_strong_typing", lambda *a: convert)
    res = cli("run", seed_model, "--trt", flag, "--trt-opt-shapes", "x:[2,3]")
    assert res.code == 0, res.err
    assert converted == [(seed_model, dtype)]
    parsed = [c[1] for c in trt11_env._calls if c[0] == "parse_from_file"]
    assert parsed and parsed[0].endswith("converted.onnx") and parsed[0] != seed_model
    assert ("create_network", 1) in trt11_env._calls  # 1 << STRONGLY_TYPED (0 in TensorRT 11)
    assert not [c for c in trt11_env._calls if c[0] == "set_flag"]
    assert f"builds strongly typed: the model was converted to {dtype} first" in res.err


def _parsed_types(trt, monkeypatch):
    """What the fake parser is handed, per parse: (graph input types, output types, Cast targets,
    initializer types) of the ONNX file."""
    import onnx

    seen = []
    parse = trt.OnnxParser.parse_from_file

    def capture(self, model):
        m = onnx.load(model)
        seen.append((
            [i.type.tensor_type.elem_type for i in m.graph.input],
            [o.type.tensor_type.elem_type for o in m.graph.output],
            [a.i for n in m.graph.node if n.op_type == "Cast" for a in n.attribute if a.name == "to"],
            {t.data_type for t in m.graph.initializer},
        ))
        return parse(self, model)

    monkeypatch.setattr(trt.OnnxParser, "parse_from_file", capture)
    return seen


@pytest.mark.parametrize(
    "flag,low,other,convert_flag",
    [("--fp16", onnx_types.FLOAT16, onnx_types.BFLOAT16, "--fp-to-fp16"),
     ("--bf16", onnx_types.BFLOAT16, onnx_types.FLOAT16, "--fp-to-bf16")],
)  # fmt: skip
def test_reduced_precision_on_tensorrt_11_parses_the_model_toolkit_convert_wrote(
    cli, seed_model, monkeypatch, trt11_env, flag, low, other, convert_flag
):
    seen = _parsed_types(trt11_env, monkeypatch)
    res = cli("run", seed_model, "--trt", flag, "--trt-opt-shapes", "x:[2,3]")
    assert res.code == 0, res.err
    (input_types, output_types, casts_to, weight_types), = seen
    assert set(input_types) == set(output_types) == {onnx_types.FLOAT}  # I/O keep their types
    assert low in casts_to and other not in casts_to  # the inside is in the precision asked for
    assert low in weight_types and other not in weight_types
    assert ("create_network", 1) in trt11_env._calls and not [c for c in trt11_env._calls if c[0] == "set_flag"]
    assert f"(toolkit convert {convert_flag}), inputs and outputs keep their types" in res.err


def test_bf16_on_tensorrt_11_builds_a_model_already_in_bf16_as_it_is(cli, seed_model, monkeypatch, trt11_env, tmp_path):
    """A mixed model (here bf16, from toolkit convert) is not converted again: its types decide."""
    assert cli("convert", seed_model, "--fp-to-bf16", "-o", tmp_path / "bf16.onnx").code == 0
    seen = _parsed_types(trt11_env, monkeypatch)
    for flag in ("--bf16", "--fp16"):
        res = cli("run", tmp_path / "bf16.onnx", "--trt", flag, "--trt-opt-shapes", "x:[2,3]")
        assert res.code == 0, res.err
        assert "builds strongly typed: the model holds bfloat16 already: it is built strongly typed as it is" in res.err
    assert [onnx_types.FLOAT16 in s[2] for s in seen] == [False, False]  # no fp16 Cast: bf16 model as it was
    assert all(onnx_types.BFLOAT16 in s[2] for s in seen)


def test_fp16_and_bf16_together_on_tensorrt_11_is_a_usage_error(cli, seed_model, trt11_env):
    res = cli("run", seed_model, "--trt", "--fp16", "--bf16", "--trt-opt-shapes", "x:[2,3]")
    assert res.code == 2
    assert "--fp16 and --bf16 together need TensorRT 10; TensorRT 11 converts the model to one of them" in res.err
    assert not [c for c in trt11_env._calls if c[0] == "parse_from_file"]


def test_int8_on_tensorrt_11_needs_explicit_quantization(cli, seed_model, trt11_env):
    res = cli("run", seed_model, "--trt", "--int8")
    assert res.code == 4
    last = res.err.strip().splitlines()[-1]
    assert last.startswith("error: --int8 on TensorRT 11.4.0.106 needs explicit quantization (QuantizeLinear/")
    assert "pip install 'tensorrt<11'" in last


def test_int8_on_tensorrt_11_with_qdq_builds_strongly_typed(cli, seed_model, monkeypatch):
    cudart = fake_cudart()
    m = doubling_model()
    m.layers.insert(0, ("q", "QUANTIZE", [("xq", "INT8")]))
    trt = fake_tensorrt(TRT11, memory=cudart.memory, model=m)
    install(monkeypatch, trt, cudart)
    res = cli("run", seed_model, "--trt", "--int8", "--trt-opt-shapes", "x:[2,3]")
    assert res.code == 0, res.err
    assert "Q/DQ nodes: they set the INT8 precision" in res.err
    assert not [c for c in trt._calls if c[0] in ("set_flag", "set_calibration_profile")]


def test_calibration_cache_on_tensorrt_11_is_refused_before_any_work(cli, seed_model, trt11_env, tmp_path):
    res = cli("run", seed_model, "--trt", "--int8", "--calibration-cache", tmp_path / "c.cache")
    assert res.code == 4 and "--calibration-cache needs TensorRT 10" in res.err
    assert not trt11_env._calls


def test_tensorrt_10_keeps_weak_typing_flags(cli, seed_model, build_env):
    res = cli("run", seed_model, "--trt", "--fp16", "--bf16", "--trt-opt-shapes", "x:[2,3]")
    assert res.code == 0, res.err
    assert ("set_flag", "FP16") in build_env._calls and ("set_flag", "BF16") in build_env._calls
    assert ("create_network", 0) in build_env._calls


# ----------------------------------------------------------------------------- parser errors


def test_parser_error_names_the_node_exit_3(cli, seed_model, monkeypatch):
    errors = [(0, "onnx_graphsurgeon_node_1", "Mul", "In node 0 (importMul): UNSUPPORTED_NODE:\n  Assertion failed: x")]
    install(monkeypatch, fake_tensorrt(parser_errors=errors), fake_cudart())
    res = cli("run", seed_model, "--trt")
    assert res.code == 3
    assert res.err.strip().splitlines()[-1:] == [
        f"error: {seed_model}: TensorRT cannot parse the model: node 0 'onnx_graphsurgeon_node_1' (Mul): "
        "In node 0 (importMul): UNSUPPORTED_NODE: Assertion failed: x"
    ]


def test_parser_error_without_node(cli, seed_model, monkeypatch):
    install(monkeypatch, fake_tensorrt(parser_errors=[(-1, "", "", "Failed to parse ONNX model")]), fake_cudart())
    res = cli("run", seed_model, "--trt")
    assert res.code == 3 and res.err.strip().endswith("TensorRT cannot parse the model: Failed to parse ONNX model")


def test_parse_reads_files_and_stdin(cli, seed_model, monkeypatch, tmp_path):
    trt = fake_tensorrt(parser_errors=[(-1, "", "", "stop here")])
    install(monkeypatch, trt, fake_cudart())
    cli("run", seed_model, "--trt")
    assert trt._calls[-1] == ("parse_from_file", seed_model)
    assert ("create_network", 0) in trt._calls
    with open(seed_model, "rb") as f:
        res = cli("run", "-", "--trt", stdin=f.read())
    assert res.code == 3 and "<stdin>: TensorRT cannot parse" in res.err
    assert trt._calls[-1][0] == "parse"
    (tmp_path / "ext").mkdir()
    cli("run", seed_model, "--trt", "--external-data-dir", tmp_path / "ext")
    assert trt._calls[-1] == ("parse", str(tmp_path / "ext" / "model.onnx"))


def test_missing_model_file(cli, monkeypatch, tmp_path):
    install(monkeypatch, fake_tensorrt(), fake_cudart())
    res = cli("run", tmp_path / "nope.onnx", "--trt")
    assert res.code == 3 and "no such file" in res.err


# ----------------------------------------------------------------------------- engine files


def test_not_an_engine_is_exit_3(cli, monkeypatch, tmp_path):
    install(monkeypatch, fake_tensorrt(memory=None), fake_cudart())
    path = tmp_path / "model.engine"
    path.write_bytes(b"\x08\x07 this is an onnx model, really")
    res = cli("run", path, "--trt")
    assert res.code == 3
    msg = res.err.strip().splitlines()[-1]
    assert msg.startswith(f"error: {path}: not a TensorRT engine for this TensorRT version and GPU")
    assert "magic tag does not match" in msg


def test_empty_and_missing_engine_files(cli, monkeypatch, tmp_path):
    install(monkeypatch, fake_tensorrt(), fake_cudart())
    (tmp_path / "empty.plan").write_bytes(b"")
    res = cli("run", tmp_path / "empty.plan", "--trt")
    assert res.code == 3 and "empty file, expected a TensorRT engine" in res.err
    res = cli("run", tmp_path / "missing.engine", "--trt")
    assert res.code == 3 and "no such file" in res.err


def test_engine_runs_with_generated_inputs_at_the_profile_opt_shape(cli, engine_env, tmp_path):
    res = cli("run", engine_env, "--trt", "--save-inputs", tmp_path / "in.json", "--save-outputs", tmp_path / "out.json")
    assert res.code == 0, res.err
    assert f"trt-runner | TensorRT 10.13.3.9 engine loaded from {engine_env}" in res.err
    assert "{x [dtype=float32, shape=(2, 3)]}" in res.err  # opt shape of profile 0
    x = load_inputs(str(tmp_path / "in.json"))[0]["x"]
    runs = load_outputs(str(tmp_path / "out.json")).runs
    assert runs[0][0] == "trt-runner"
    np.testing.assert_array_equal(runs[0][1][0].outputs["y"], 2 * x)


def test_engine_with_loaded_inputs_and_golden_outputs(cli, engine_env, tmp_path):
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    save_inputs(str(tmp_path / "in.json"), [{"x": x, "unused": np.zeros(2)}, {"x": x[:1]}])
    golden = RunResults([("ref", [IterationResult({"y": 2 * x}), IterationResult({"y": 2 * x[:1] + 1})])])
    save_outputs(str(tmp_path / "golden.json"), golden)
    res = cli("run", engine_env, "--trt", "--load-inputs", tmp_path / "in.json", "--load-outputs", tmp_path / "golden.json")
    assert res.code == 1  # iteration 1 is off by one
    assert "FAILED | Command:" in res.err and "mismatched: y" in res.err
    assert "{x [dtype=float32, shape=(1, 3)]}" in res.err


def test_engine_input_outside_profile_is_exit_3(cli, engine_env, tmp_path):
    save_inputs(str(tmp_path / "in.json"), [{"x": np.zeros((5, 3), np.float32)}])
    res = cli("run", engine_env, "--trt", "--load-inputs", tmp_path / "in.json")
    assert res.code == 3
    assert (
        "inputs 'x' shape (5, 3) fit no profile of the engine (profile 0: 'x' min (1, 3), opt (2, 3), max (4, 3))"
        in res.err
    )


def test_engine_input_with_wrong_dtype_is_exit_3(cli, engine_env, tmp_path):
    # (float64 values that fit float32 are cast with a warning; these overflow it)
    save_inputs(str(tmp_path / "in.json"), [{"x": np.full((2, 3), 1e300)}])
    res = cli("run", engine_env, "--trt", "--load-inputs", tmp_path / "in.json")
    assert res.code == 3 and "is float64, but the model expects float32, and casting it would overflow" in res.err


def test_builder_options_with_engine_warn(cli, engine_env):
    res = cli("run", engine_env, "--trt", "--fp16", "--pool-limit", "workspace:1G")
    assert res.code == 0, res.err
    assert f"warning: trt-runner: --fp16, --pool-limit ignored: {engine_env} is a built engine" in res.err


def test_trt_outputs_with_engine_is_usage_error(cli, engine_env):
    res = cli("run", engine_env, "--trt", "--trt-outputs", "mark", "all")
    assert res.code == 2 and "--trt-outputs needs the ONNX model" in res.err


def test_engine_frees_device_memory(engine_env):
    from toolkit.backends.trt import TrtRunner

    cudart = sys.modules["cuda.bindings.runtime"]
    with TrtRunner(engine_env) as runner:
        assert [m.name for m in runner.input_metadata()] == ["x"]
        assert runner.input_metadata()[0].shape == (None, 3)
        assert runner.preferred_shapes() == {"x": (2, 3)}
        out = runner.infer({"x": np.ones((3, 3), np.float32)})
        np.testing.assert_array_equal(out["y"], np.full((3, 3), 2, np.float32))
        assert cudart.memory.blocks
    assert not cudart.memory.blocks


# ----------------------------------------------------------------------------- imports


def test_importing_the_runner_touches_no_gpu_library():
    """The warm worker of `debug reduce` forks after imports: nothing may load TensorRT/CUDA before."""
    setup = "import toolkit.backends.trt, toolkit.run, toolkit.cli.run"
    assert modules_loaded_by(setup, ["run", "--help"], ("tensorrt", "cuda", "pycuda")) == []


def test_help_lists_tensorrt_options(cli):
    res = cli("run", "--help")
    for opt in ("--trt-outputs", "--fp16", "--bf16", "--int8", "--tf32", "--calibration-cache", "--pool-limit",
                "--trt-min-shapes", "--trt-opt-shapes", "--trt-max-shapes", "--save-engine"):  # fmt: skip
        assert opt in res.out


# ----------------------------------------------------------------------------- debug reduce


def test_build_failure_is_exit_1_with_failed_line(cli, seed_model, monkeypatch):
    trt = fake_tensorrt()
    install(monkeypatch, trt, fake_cudart())
    res = cli("run", seed_model, "--trt")
    assert res.code == 1
    assert "error: TensorRT could not build an engine: fake TensorRT builds nothing" in res.err
    assert res.err.strip().splitlines()[-1].startswith("FAILED | Command: toolkit run")
    assert ("clear_flag", "TF32") in trt._calls  # TF32 is opt-in


def test_reduce_with_a_trt_check_in_the_warm_worker(cli, tmp_path, monkeypatch):
    """`debug reduce --check toolkit run polygraphy_debug.onnx --trt` runs the TensorRT runner in
    forked children; the fake parser rejects Mul nodes, so the reduced model is the Mul."""
    install(monkeypatch, fake_tensorrt(parser_errors="fail on Mul"), fake_cudart())
    monkeypatch.chdir(tmp_path)
    mz.save(mz.seed_example((1, 3, 4, 4)), tmp_path / "model.onnx")
    res = cli(
        "debug", "reduce", "model.onnx", "-o", "reduced.onnx",
        "--fail-regex", "TensorRT cannot parse the model: node [0-9]+ '[^']*' [(]Mul[)]",
        "--check", "toolkit", "run", "polygraphy_debug.onnx", "--trt",
    )  # fmt: skip
    assert res.code == 0, res.err
    import onnx

    assert [n.op_type for n in onnx.load(str(tmp_path / "reduced.onnx")).graph.node] == ["Mul"]


# ----------------------------------------------------------------------------- building (fake builder)


@pytest.fixture
def build_env(monkeypatch):
    cudart = fake_cudart()
    trt = fake_tensorrt(memory=cudart.memory, model=doubling_model())
    install(monkeypatch, trt, cudart)
    return trt


def test_build_uses_a_profile_from_the_opt_shape_and_generates_data_for_it(cli, build_env, seed_model, tmp_path):
    res = cli("run", seed_model, "--trt", "--trt-opt-shapes", "x:[2,3]", "--pool-limit", "workspace:1M",
              "--save-engine", tmp_path / "m.engine", "--save-inputs", tmp_path / "in.json")  # fmt: skip
    assert res.code == 0, res.err
    assert ("set_shape", "x", (2, 3), (2, 3), (2, 3)) in build_env._calls
    assert ("pool", "WORKSPACE", 2**20) in build_env._calls
    assert "engine built from the ONNX model" in res.err
    assert (tmp_path / "m.engine").read_bytes().startswith(b"FAKE-ENGINE built")
    assert load_inputs(str(tmp_path / "in.json"))[0]["x"].shape == (2, 3)


def test_build_without_profile_uses_loaded_shapes(cli, build_env, seed_model, tmp_path):
    save_inputs(str(tmp_path / "in.json"), [{"x": np.zeros((n, 3), np.float32)} for n in (3, 1, 4)])
    res = cli("run", seed_model, "--trt", "--load-inputs", tmp_path / "in.json")
    assert res.code == 0, res.err
    assert ("set_shape", "x", (1, 3), (3, 3), (4, 3)) in build_env._calls


def test_build_without_profile_or_data_warns_and_uses_1(cli, build_env, seed_model):
    res = cli("run", seed_model, "--trt")
    assert res.code == 0, res.err
    assert ("set_shape", "x", (1, 3), (1, 3), (1, 3)) in build_env._calls
    assert "input 'x' has dynamic shape (?, 3) and no profile; building for (1, 3)" in res.err


def test_profile_naming_an_unknown_input_is_usage_error(cli, build_env, seed_model):
    res = cli("run", seed_model, "--trt", "--trt-opt-shapes", "nope:[2,3]")
    assert res.code == 2 and "profile 0 names 'nope', which is not an input of the network" in res.err


def test_int8_calibrates_on_the_runs_inputs_and_writes_the_cache(cli, build_env, seed_model, tmp_path):
    build_env._calibration_shape = (2, 3)
    cache = tmp_path / "calib.cache"
    res = cli("run", seed_model, "--trt", "--int8", "--trt-opt-shapes", "x:[2,3]", "--iterations", "3",
              "--calibration-cache", cache, "--save-inputs", tmp_path / "in.json")  # fmt: skip
    assert res.code == 0, res.err
    fed = [f["x"] for f in load_inputs(str(tmp_path / "in.json"))]
    assert len(fed) == 3 and len(build_env._calibrated) == 3
    for a, b in zip(fed, build_env._calibrated):
        np.testing.assert_array_equal(a, b)
    assert ("set_flag", "INT8") in build_env._calls and ("set_calibration_profile",) in build_env._calls
    assert cache.read_bytes() == b"fake calibration table"
    # with the cache there is nothing to calibrate
    build_env._calibrated.clear()
    assert cli("run", seed_model, "--trt", "--int8", "--trt-opt-shapes", "x:[2,3]", "--calibration-cache", cache).code == 0
    assert build_env._calibrated == []


def test_int8_calibrates_on_the_loaded_inputs(cli, build_env, seed_model, tmp_path):
    build_env._calibration_shape = (4, 3)
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    save_inputs(str(tmp_path / "in.json"), [{"x": x, "other": np.ones(1)}])
    res = cli("run", seed_model, "--trt", "--int8", "--load-inputs", tmp_path / "in.json")
    assert res.code == 0, res.err
    np.testing.assert_array_equal(build_env._calibrated[0], x)

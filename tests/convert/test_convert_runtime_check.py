"""`toolkit convert` checks the written model in ONNX-Runtime as users create it: default session
options, in a forked child, so a crash is a finding (exit 1), not a silent "Checked".

The stand-in crash: ONNX-Runtime's InferenceSession is replaced (in this process, so in the forked
child too) by one that kills its process with SIGSEGV when the model holds a float16 Conv weight
and the session runs at the default level (all graph optimizations), as the NCHWc transformer
crash seen on a converted CNN+LSTM model does. Lower levels, and a model whose Conv stays fp32,
run."""

import json
import os
import signal

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto

import fp16_models as fm
import modelzoo as mz
from toolkit.core.process.supervise import run_in_child

_REAL_SESSION = ort.InferenceSession


def _fp16_conv(source) -> bool:
    model = onnx.load_from_string(source) if isinstance(source, bytes) else onnx.load(source)
    half = {t.name for t in model.graph.initializer if t.data_type == TensorProto.FLOAT16}
    return any(n.op_type == "Conv" and len(n.input) > 1 and n.input[1] in half for n in model.graph.node)


class _CrashingSession(_REAL_SESSION):
    def __init__(self, source, sess_options=None, *args, **kwargs):
        level = sess_options.graph_optimization_level if sess_options is not None else None
        if level in (None, ort.GraphOptimizationLevel.ORT_ENABLE_ALL) and _fp16_conv(source):
            os.kill(os.getpid(), signal.SIGSEGV)
        super().__init__(source, sess_options, *args, **kwargs)


@pytest.fixture
def crashing(monkeypatch):
    monkeypatch.setattr(ort, "InferenceSession", _CrashingSession)


def _conv(tmp_path):
    return mz.save(fm.conv_block(17), tmp_path / "conv.onnx")


def test_a_crash_with_default_options_is_a_finding(cli, tmp_path, crashing):
    out = tmp_path / "out.onnx"
    r = cli("convert", _conv(tmp_path), "--fp-to-fp16", "-o", out, "--json")
    assert r.code == 1, r.err
    assert (
        f"ONNX-Runtime {ort.__version__} crashes (SIGSEGV) creating a session for the written model with default "
        "options; with graph_optimization_level extended it runs" in r.err
    )
    assert "Checked against" not in r.err
    info = json.loads(r.out)
    first = info["runtime_checks"]["sessions"][0]
    assert first["crash"] == "SIGSEGV" and first["phase"] == "session creation"
    assert first["session_options"]["graph_optimization_level"] == "all (default)"
    assert info["runtime_checks"]["works_with_graph_optimization_level"] == "extended"
    assert out.exists()  # written, with the reason it does not run as it is


def test_repair_keeps_the_op_type_that_crashes_in_fp32(cli, tmp_path, crashing):
    out = tmp_path / "out.onnx"
    r = cli("convert", _conv(tmp_path), "--fp-to-fp16", "-o", out, "--json", "--repair")
    assert r.code == 0, r.err
    assert "--repair kept the Conv nodes in fp32, and it runs" in r.err
    info = json.loads(r.out)
    assert "SIGSEGV" in info["kept_fp32"]["conv"]
    assert info["runtime_checks"]["repaired_by_keeping_fp32"] == "Conv"
    assert info["runtime_checks"]["sessions"][-1]["ok"]
    assert not _fp16_conv(str(out))
    _REAL_SESSION(str(out), providers=["CPUExecutionProvider"]).run(None, {"x": np.ones((1, 3, 8, 8), np.float32)})


def test_the_level_the_user_names_is_checked_too(cli, tmp_path, crashing):
    r = cli("convert", _conv(tmp_path), "--fp-to-fp16", "-o", tmp_path / "o.onnx", "--json",
            "--ort-optimization", "basic")  # fmt: skip
    assert r.code == 1
    levels = [s["session_options"]["graph_optimization_level"] for s in json.loads(r.out)["runtime_checks"]["sessions"]]
    assert levels[:2] == ["all (default)", "basic"]


def test_both_figures_are_reported(cli, tmp_path):
    r = cli("convert", _conv(tmp_path), "--fp-to-fp16", "-o", tmp_path / "o.onnx", "--json")
    assert r.code == 0, r.err
    assert "with fp16 storage emulated" in r.err and "as ONNX-Runtime's CPU provider computes" in r.err
    val = json.loads(r.out)["validation"]
    assert len(val["measured"]["set_errors"]) == val["input_sets"] == 3
    assert 0 < val["measured"]["max_error"] < 1e-2
    runs = json.loads(r.out)["runtime_checks"]["sessions"]
    assert runs[0]["runtime"] == f"ONNX-Runtime {ort.__version__}" and runs[0]["ok"]
    assert val["runtime"] == runs[0]["runtime"] and val["session_options"] == {"graph_optimization_level": "disable"}
    assert val["input_shapes"] == {"x": [1, 3, 8, 8]} and val["input_set_source"].startswith("generated: iterations 0 to 2")
    assert len(val["set_errors"]) == 3


def _segv(phase):
    phase("session creation")
    os.kill(os.getpid(), signal.SIGSEGV)


def _raises(phase):
    raise KeyError("missing")


def test_the_child_reports_signal_and_phase():
    got = run_in_child(_segv)
    assert got.crashed and got.signal_name == "SIGSEGV" and got.phase == "session creation"
    assert run_in_child(lambda phase, a: a * 2, 21).value == 42
    with pytest.raises(KeyError):
        run_in_child(_raises)


def test_debug_precision_checks_the_model_it_writes(cli, tmp_path, crashing):
    out = tmp_path / "mixed.onnx"
    r = cli("debug", "precision", _conv(tmp_path), "-o", out)
    assert r.code == 1, r.err
    assert f"ONNX-Runtime {ort.__version__} crashes (SIGSEGV) creating a session for the written model" in r.err
    assert "with graph_optimization_level extended it runs" in r.err


def test_debug_precision_output_that_runs_keeps_exit_0(cli, tmp_path):
    r = cli("debug", "precision", _conv(tmp_path), "-o", tmp_path / "mixed.onnx")
    assert r.code == 0, r.err

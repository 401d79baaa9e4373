"""A model whose local functions inline to too many nodes is refused up front (exit 3,
naming --max-nodes) by every command that would inline it, and within the limit it runs."""

from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto, helper

from conftest import run_toolkit

from toolkit.core.functions import inlined_node_count

OPS = [helper.make_opsetid("", 17), helper.make_opsetid("local", 1)]


def fan_out(depth: int):
    """F0 calls F1 twice, F1 calls F2 twice, ..., F<depth> is one Relu: 2^depth nodes inlined."""
    funcs = []
    for i in range(depth + 1):
        if i == depth:
            nodes = [helper.make_node("Relu", ["x"], ["y"])]
        else:
            nodes = [helper.make_node(f"F{i + 1}", ["x"], ["t"], domain="local"),
                     helper.make_node(f"F{i + 1}", ["t"], ["y"], domain="local")]
        funcs.append(helper.make_function("local", f"F{i}", ["x"], ["y"], nodes, OPS))
    graph = helper.make_graph(
        [helper.make_node("F0", ["x"], ["y"], domain="local")], "fan",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
    )
    model = helper.make_model(graph, opset_imports=OPS, functions=funcs)
    model.ir_version = 10
    return model


def test_the_count_follows_the_call_tree_and_stops_past_the_cap():
    assert inlined_node_count(fan_out(18), cap=10**9) == 2**18
    assert inlined_node_count(fan_out(40), cap=1000) == 1001


COMMANDS = [
    ["run", "fan.onnx", "--onnxrt"],
    ["inspect", "model", "fan.onnx", "--shape-inference"],
    ["surgeon", "sanitize", "fan.onnx", "--fold-constants", "-o", "out.onnx"],
    ["convert", "fan.onnx", "--fp-to-fp16", "-o", "out.onnx"],
]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c[:2]))
def test_a_function_fan_out_is_refused_before_anything_inlines_it(tmp_path, command):
    onnx.save(fan_out(18), str(tmp_path / "fan.onnx"))
    res = run_toolkit(*command, cwd=tmp_path, timeout=60)
    assert res.code == 3, res.err
    assert "inline to more than 100000 nodes" in res.err and "--max-nodes" in res.err
    assert not (tmp_path / "out.onnx").exists()


def test_within_the_limit_it_runs_and_the_limit_can_be_raised(tmp_path):
    onnx.save(fan_out(4), str(tmp_path / "fan.onnx"))
    assert run_toolkit("run", "fan.onnx", "--onnxrt", cwd=tmp_path).code == 0
    res = run_toolkit("run", "fan.onnx", "--onnxrt", "--max-nodes", "8", cwd=tmp_path)
    assert res.code == 3 and "more than 8 nodes" in res.err
    assert run_toolkit("run", "fan.onnx", "--onnxrt", "--max-nodes", "16", cwd=tmp_path).code == 0
    assert run_toolkit("inspect", "model", "fan.onnx", "--max-nodes", "8", cwd=tmp_path).code == 0  # (nothing inlined)


def test_sigterm_ends_a_long_session_creation_at_once(tmp_path):
    """Let through (--max-nodes raised), a 2^17-node fan-out keeps ONNX-Runtime's session creation
    busy for minutes: SIGTERM still ends the command within a few seconds, exit 130."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from conftest import REPO

    onnx.save(fan_out(17), str(tmp_path / "fan.onnx"))
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen([sys.executable, "-m", "toolkit", "run", "fan.onnx", "--onnxrt", "--max-nodes", "1000000"],
                            cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        line = proc.stderr.readline()  # "... Activating and starting inference": the session is being made
        assert b"Activating" in line, line
        time.sleep(3.0)  # (onnxruntime imported: inside the session creation)
        proc.send_signal(signal.SIGTERM)
        start = time.monotonic()
        rest = proc.communicate(timeout=10)[1]
        assert proc.returncode == 130 and time.monotonic() - start < 5, rest
        assert b"interrupted (SIGTERM)" in rest
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()

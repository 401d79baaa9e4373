"""A model whose local functions inline to too many nodes is refused up front (exit 3,
naming --max-nodes) by every command that would inline it, and within the limit it runs."""

from __future__ import annotations

import onnx
import pytest

from hang_models import fan_out, fan_out_if_in_function, fan_out_in_if, fan_out_in_loop
from toolkit.core.io.functions import inlined_node_count


def test_the_count_follows_the_call_tree_and_stops_past_the_cap():
    assert inlined_node_count(fan_out(18), cap=10**9) == 2**18
    assert inlined_node_count(fan_out(40), cap=1000) == 1001


def test_the_count_includes_every_if_loop_and_scan_body_of_graphs_and_functions():
    """A fan-out reached only through an If branch (top graph or a function body) or a Loop
    body is counted as a runtime or shape inference inlines it."""
    assert inlined_node_count(fan_out_in_if(18), cap=10**9) == 2**18 + 2  # (+ the If, the else Identity)
    assert inlined_node_count(fan_out_in_loop(18), cap=10**9) == 2**18 + 2
    # F<i> = Constant + If(then: 2 calls of F<i+1>, else: Identity): 2^18 Relus plus the Ifs on the way
    assert inlined_node_count(fan_out_if_in_function(18), cap=10**9) > 2**18
    assert inlined_node_count(fan_out_if_in_function(40), cap=1000) == 1001


def test_a_long_chain_of_functions_is_counted_without_recursing_along_it():
    from onnx import helper

    ops = [helper.make_opsetid("", 17), helper.make_opsetid("local", 1)]
    n = 5000
    funcs = [helper.make_function("local", f"G{i}", ["x"], ["y"],
                                  [helper.make_node("Relu" if i == n - 1 else f"G{i + 1}", ["x"], ["y"],
                                                    domain="" if i == n - 1 else "local")], ops)
             for i in range(n)]
    model = fan_out(1)
    model.functions.extend(funcs)
    model.graph.node[0].op_type = "G0"
    assert inlined_node_count(model, cap=10**9) == 1


COMMANDS = [
    ["run", "fan.onnx", "--onnxrt"],
    ["inspect", "model", "fan.onnx", "--shape-inference"],
    ["surgeon", "sanitize", "fan.onnx", "--fold-constants", "-o", "out.onnx"],
    ["convert", "fan.onnx", "--fp-to-fp16", "-o", "out.onnx"],
    ["debug", "precision", "fan.onnx", "-o", "out.onnx"],
]
FAN_OUTS = {"top": fan_out, "in-if": fan_out_in_if, "if-in-function": fan_out_if_in_function, "in-loop": fan_out_in_loop}


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c[:2]))
@pytest.mark.parametrize("kind", list(FAN_OUTS))
def test_a_function_fan_out_is_refused_before_anything_inlines_it(tmp_path, monkeypatch, cli, command, kind):
    """Each would run for hours (and all but ``run`` ignore SIGTERM meanwhile)."""
    onnx.save(FAN_OUTS[kind](20), str(tmp_path / "fan.onnx"))
    monkeypatch.chdir(tmp_path)
    res = cli(*command)
    assert res.code == 3, res.err
    assert "inline to more than 100000 nodes" in res.err and "--max-nodes" in res.err
    assert not (tmp_path / "out.onnx").exists()


def test_within_the_limit_it_runs_and_the_limit_can_be_raised(tmp_path, monkeypatch, cli):
    onnx.save(fan_out(4), str(tmp_path / "fan.onnx"))
    monkeypatch.chdir(tmp_path)
    assert cli("run", "fan.onnx", "--onnxrt").code == 0
    res = cli("run", "fan.onnx", "--onnxrt", "--max-nodes", "8")
    assert res.code == 3 and "more than 8 nodes" in res.err
    assert cli("run", "fan.onnx", "--onnxrt", "--max-nodes", "16").code == 0
    assert cli("inspect", "model", "fan.onnx", "--max-nodes", "8").code == 0  # (nothing inlined)


@pytest.mark.serial
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

"""`toolkit debug reduce` from the command line: options, exit codes, check runners."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import onnx
import pytest

import modelzoo
from conftest import REPO, run_toolkit
from reduce_helpers import CHECKER, node_names, wide

from toolkit.cli.app import worker_entry

MUL = "onnx_graphsurgeon_node_1"
INSPECT = ["toolkit", "inspect", "model", "polygraphy_debug.onnx", "--mode=basic"]


@pytest.fixture
def seed(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    modelzoo.save(modelzoo.seed_example(), tmp_path / "model.onnx")
    return tmp_path


def _load(path):
    return onnx.load(str(path))


# ---------------------------------------------------------------------- Polygraphy's workflow


def test_seed_simulated_failure_with_toolkit_inspect(cli, seed):
    res = cli("debug", "reduce", "model.onnx", "-o", "reduced.onnx", "--fail-regex", "Op: Mul", "--check", *INSPECT)
    assert res.code == 0, res.err
    assert node_names(_load(seed / "reduced.onnx")) == [MUL]
    assert "Iteration 1 | 3 nodes | FAIL" in res.err
    assert "Reduced 3 -> 1 node" in res.err
    assert "warm worker" in res.err
    assert not (seed / "polygraphy_debug.onnx").exists()


def test_seed_recipe_bisect_then_linear(cli, seed):
    res = cli(
        "debug", "reduce", "model.onnx", "-o", "initial_reduced.onnx", "--mode=bisect",
        "--fail-regex", "Op: Mul", "--check", *INSPECT,
    )
    assert res.code == 0, res.err
    res = cli(
        "debug", "reduce", "initial_reduced.onnx", "-o", "final_reduced.onnx", "--mode=linear",
        "--fail-regex", "Op: Mul", "--check", *INSPECT,
    )
    assert res.code == 0, res.err
    assert node_names(_load(seed / "final_reduced.onnx")) == [MUL]


def test_check_takes_the_rest_of_the_line_verbatim(cli, seed):
    res = cli(
        "debug", "reduce", "model.onnx", "-o", "out.onnx", "--fail-regex", "-o x --mode linear --help",
        "--check", "echo", "-o", "x", "--mode", "linear", "--help",
    )
    assert res.code == 0, res.err
    assert (seed / "out.onnx").exists() and not (seed / "x").exists()


def test_full_model_passing_exits_0_warns_and_writes_nothing(cli, seed):
    res = cli("debug", "reduce", "model.onnx", "-o", "out.onnx", "--min-good", "good.onnx", "--check", "true")
    assert res.code == 0
    assert "warning: the full model passes" in res.err
    assert not (seed / "out.onnx").exists() and not (seed / "good.onnx").exists()


def test_external_python_check_script(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    modelzoo.save(wide(), tmp_path / "model.onnx")
    res = cli(
        "debug", "reduce", "model.onnx", "-o", "out.onnx", "--min-good", "good.onnx",
        "--check", sys.executable, CHECKER, "polygraphy_debug.onnx", "b2_1",
    )
    assert res.code == 0, res.err
    assert node_names(_load(tmp_path / "out.onnx")) == ["b2_1"]
    assert "[subprocess]" in res.err
    # --min-good passed the check
    good = subprocess.run([sys.executable, CHECKER, "good.onnx", "b2_1"], capture_output=True)
    assert good.returncode == 0


# ---------------------------------------------------------------------- failure rules


@pytest.mark.parametrize(
    "opts, expect",
    [
        (["--any-failure"], True),  # non-zero exit fails (any: the check fails whatever the model)
        (["--ignore-fail-code", "3"], False),  # exit 3 passes: the full model passes
        (["--fail-code", "4"], False),
        (["--fail-code", "3", "4"], True),
        (["--fail-code", "3", "--fail-regex", "nomatch"], False),
        (["--fail-regex", "boom"], True),
    ],
)
def test_fail_codes_and_regex(cli, seed, opts, expect):
    res = cli("debug", "reduce", "model.onnx", "-o", "out.onnx", *opts, "--check", "sh", "-c", "echo boom; exit 3")
    assert res.code == 0, res.err
    assert (seed / "out.onnx").exists() == expect
    assert ("full model passes" in res.err) == (not expect)


def test_fail_code_and_ignore_fail_code_are_exclusive(cli, seed):
    res = cli("debug", "reduce", "model.onnx", "-o", "o.onnx", "--fail-code", "1", "--ignore-fail-code", "2", "--check", "true")
    assert res.code == 2


def test_signal_killed_check_fails(cli, seed):
    res = cli("debug", "reduce", "model.onnx", "-o", "out.onnx", "--ignore-fail-code", "0", "--any-failure", "--check", "sh", "-c",
              "kill -9 $$")
    assert res.code == 0
    assert "killed by SIGKILL" in res.err


@pytest.mark.serial
def test_check_timeout_kills_the_check_and_its_children(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    modelzoo.save(modelzoo.chain(1), tmp_path / "model.onnx")
    start = time.monotonic()
    res = cli(
        "debug", "reduce", "model.onnx", "-o", "out.onnx", "--check-timeout", "0.5",
        "--check", "sh", "-c", "sleep 30 & echo $! > child.pid; sleep 30",
    )
    assert time.monotonic() - start < 15
    assert res.code == 0 and "timed out" in res.err
    pid = int((tmp_path / "child.pid").read_text())
    time.sleep(0.2)
    assert not _alive(pid)


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split()[2] != "Z"
    except OSError:
        return False


def test_output_display_options(cli, seed):
    base = ["debug", "reduce", "model.onnx", "-o", "out.onnx", "--fail-regex", "Op: Mul"]
    res = cli(*base, "--check", *INSPECT)
    assert "---- check stdout (iteration 1) ----" in res.err and "[Op: Mul]" in res.err
    res = cli(*base, "--hide-fail-output", "--check", *INSPECT)
    assert "---- check stdout" not in res.err
    res = cli(*base, "--show-output", "--hide-fail-output", "--check", *INSPECT)
    assert res.code == 2


def test_show_output_shows_passing_checks(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    modelzoo.save(modelzoo.chain(6), tmp_path / "model.onnx")
    res = cli("debug", "reduce", "model.onnx", "-o", "out.onnx", "--show-output", "--fail-regex", "n3_",
              "--check", *INSPECT)
    assert res.code == 0
    passing = [line for line in res.err.splitlines() if "| pass |" in line]
    assert passing
    assert res.err.count("---- check stdout") == res.err.count("Iteration ")


# ---------------------------------------------------------------------- files


def test_artifacts_sorted_into_good_and_bad(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    modelzoo.save(modelzoo.chain(8), tmp_path / "model.onnx")
    res = cli(
        "debug", "reduce", "model.onnx", "-o", "out.onnx", "--artifacts", "polygraphy_debug.onnx",
        "--art-dir", "arts", "--fail-regex", "n5_", "--check", *INSPECT,
    )
    assert res.code == 0, res.err
    bad = sorted(os.listdir(tmp_path / "arts" / "bad"))
    good = sorted(os.listdir(tmp_path / "arts" / "good"))
    assert bad[0] == "001_polygraphy_debug.onnx"
    assert good and all(name.endswith("_polygraphy_debug.onnx") for name in good + bad)
    iterations = [line for line in res.err.splitlines() if line.startswith("Iteration ")]
    assert len(good) + len(bad) == len(iterations)
    for name in good:
        assert "n5_" not in str([n.name for n in _load(tmp_path / "arts" / "good" / name).graph.node])


def test_iter_info_written_before_each_check(cli, seed):
    res = cli(
        "debug", "reduce", "model.onnx", "-o", "out.onnx", "--iter-info", "info.json",
        "--fail-regex", MUL, "--check", "cat", "info.json",
    )
    assert res.code == 0, res.err
    assert node_names(_load(seed / "out.onnx")) == [MUL]
    assert not (seed / "info.json").exists()
    res = cli(
        "debug", "reduce", "model.onnx", "-o", "out.onnx", "--iter-info", "info.json", "--no-remove-intermediate",
        "--fail-regex", MUL, "--check", "cat", "info.json",
    )
    info = json.loads((seed / "info.json").read_text())
    assert info["iteration"] == 2 and info["nodes"] == [MUL] and info["outputs"] == ["mul_out"]
    assert (seed / "polygraphy_debug.onnx").exists()


def test_custom_iter_artifact(cli, seed):
    (seed / "work").mkdir()
    res = cli(
        "debug", "reduce", "model.onnx", "-o", "out.onnx", "--iter-artifact", "work/cand.onnx",
        "--fail-regex", "Op: Mul", "--check", "toolkit", "inspect", "model", "work/cand.onnx", "--mode=basic",
    )
    assert res.code == 0, res.err
    assert node_names(_load(seed / "out.onnx")) == [MUL]


def test_min_good_via_cli(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    modelzoo.save(modelzoo.chain(10), tmp_path / "model.onnx")
    res = cli("debug", "reduce", "model.onnx", "-o", "out.onnx", "--min-good", "good.onnx",
              "--fail-regex", "n6_", "--check", *INSPECT)
    assert res.code == 0, res.err
    names = node_names(_load(tmp_path / "good.onnx"))
    assert names and not any(n.startswith("n6_") for n in names)
    assert "closest passing model" in res.err


# ---------------------------------------------------------------------- replay


def test_replay_answers_without_running_the_check(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    modelzoo.save(modelzoo.chain(20), tmp_path / "model.onnx")
    first = cli("debug", "reduce", "model.onnx", "-o", "a.onnx", "--save-debug-replay", "replay.json",
                "--fail-regex", "n13_", "--check", *INSPECT)
    assert first.code == 0
    doc = json.loads((tmp_path / "replay.json").read_text())
    assert doc["entries"] and all("failed" in e for e in doc["entries"])
    # the same check and options: the replay answers everything
    second = cli("debug", "reduce", "model.onnx", "-o", "b.onnx", "--load-debug-replay", "replay.json",
                 "--fail-regex", "n13_", "--check", *INSPECT)
    assert second.code == 0, second.err
    assert "0 checks run" in second.err and "| replay" in second.err
    assert (tmp_path / "a.onnx").read_bytes() == (tmp_path / "b.onnx").read_bytes()


def test_a_replay_of_another_check_or_options_is_refused(cli, tmp_path, monkeypatch):
    """A replay recorded with a check that fails on n8 never answers a check that fails on n3
    (nor the same check under another --fail-regex): one sentence, exit 3, nothing written."""
    monkeypatch.chdir(tmp_path)
    modelzoo.save(modelzoo.chain(10), tmp_path / "model.onnx")
    script = tmp_path / "check.py"
    # (fails when the node name is in the model's bytes: no onnx import, which costs a second per check)
    script.write_text("import sys\nwith open(sys.argv[2], 'rb') as f:\n    data = f.read()\n"
                      "sys.exit(1 if sys.argv[1].encode() in data else 0)\n")
    first = cli("debug", "reduce", "model.onnx", "-o", "a.onnx", "--save-debug-replay", "replay.json",
                "--check", sys.executable, script, "n8_", "polygraphy_debug.onnx")
    assert first.code == 0, first.err
    other = cli("debug", "reduce", "model.onnx", "-o", "b.onnx", "--load-debug-replay", "replay.json",
                "--check", sys.executable, script, "n3_", "polygraphy_debug.onnx")
    assert other.code == 3 and "this replay was recorded with the check" in other.err, other.err
    assert len([ln for ln in other.err.splitlines() if ln.startswith("error:")]) == 1
    assert not (tmp_path / "b.onnx").exists()
    widened = cli("debug", "reduce", "model.onnx", "-o", "b.onnx", "--load-debug-replay", "replay.json",
                  "--any-failure", "--check", sys.executable, script, "n8_", "polygraphy_debug.onnx")
    assert widened.code == 3 and "--any-failure false" in widened.err, widened.err
    # the same model with other weights is another model
    m = onnx.load(str(tmp_path / "model.onnx"))
    m.graph.initializer.append(onnx.numpy_helper.from_array(np.ones(3, np.float32), "unused_w"))
    onnx.save(m, str(tmp_path / "model.onnx"))
    again = cli("debug", "reduce", "model.onnx", "-o", "b.onnx", "--load-debug-replay", "replay.json",
                "--check", sys.executable, script, "n8_", "polygraphy_debug.onnx")
    assert again.code == 3 and "different model" in again.err, again.err


def test_a_deeply_nested_replay_is_bad_input(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    modelzoo.save(modelzoo.chain(3), tmp_path / "model.onnx")
    (tmp_path / "deep.json").write_text("[" * 200000 + "]" * 200000)
    res = cli("debug", "reduce", "model.onnx", "-o", "o.onnx", "--load-debug-replay", "deep.json", "--check", "false")
    assert res.code == 3 and "nested too deeply" in res.err and "Traceback" not in res.err, res.err


def test_replay_for_another_model_is_rejected(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    modelzoo.save(modelzoo.chain(5), tmp_path / "a.onnx")
    modelzoo.save(modelzoo.chain(6), tmp_path / "b.onnx")
    assert cli("debug", "reduce", "a.onnx", "-o", "o.onnx", "--save-debug-replay", "r.json", "--fail-code", "1",
               "--check", "false").code == 0
    res = cli("debug", "reduce", "b.onnx", "-o", "o.onnx", "--load-debug-replay", "r.json", "--check", "false")
    assert res.code == 3 and "different model" in res.err


# ---------------------------------------------------------------------- interactive


def test_interactive_answers_from_stdin(seed):
    # not asked about the full model (the user knows it fails): first question is node 0 (the Mul) alone
    # (the real entry point, answers through a pipe; the tests below run in-process)
    res = run_toolkit("debug", "reduce", "model.onnx", "-o", "out.onnx", stdin=b"maybe\nf\n", cwd=seed)
    assert res.code == 0, res.err
    assert res.out.count("Did 'polygraphy_debug.onnx' [p]ass or [f]ail?") == 1  # the question is on stdout
    assert "Please answer" in res.out
    assert "Iteration 1 | 1 node | FAIL" in res.err and "1 check run" in res.err
    assert node_names(_load(seed / "out.onnx")) == [MUL]


def test_interactive_question_goes_to_stderr_with_json(cli, seed):
    res = cli("debug", "reduce", "model.onnx", "-o", "out.onnx", "--json", stdin=b"f\n")
    assert res.code == 0, res.err
    assert "[p]ass or [f]ail?" in res.err
    doc = json.loads(res.out)
    assert doc["status"] == "reduced" and doc["result_nodes"] == [f"{MUL} [Op: Mul]"] and doc["checks"] == 1


def test_interactive_end_of_input_stops_cleanly(cli, seed):
    # the Mul alone passes (a failure in the node after it), then input ends
    res = cli("debug", "reduce", "model.onnx", "-o", "out.onnx", stdin=b"p\n")
    assert res.code == 3  # (the input ended: not an interruption)
    assert "Traceback" not in res.err and "error: end of input" in res.err
    assert not (seed / "out.onnx").exists()  # no failing subgraph was shown; the full model is no news
    assert (seed / "polygraphy_debug_replay.json").exists()
    # resume: the replay answers the first question
    res = cli("debug", "reduce", "model.onnx", "-o", "out.onnx", "--load-debug-replay",
              "polygraphy_debug_replay.json", stdin=b"f\nf\n")
    assert res.code == 0, res.err
    assert "Iteration 1 | 1 node | pass | bisect (last node) | node 0 | replay" in res.err
    assert len(node_names(_load(seed / "out.onnx"))) == 1 and node_names(_load(seed / "out.onnx")) != [MUL]


def test_interactive_no_answer_at_all(cli, seed):
    res = cli("debug", "reduce", "model.onnx", "-o", "out.onnx", stdin=b"")
    assert res.code == 3 and "error: end of input" in res.err  # (not an interruption)
    assert not (seed / "out.onnx").exists()


# ---------------------------------------------------------------------- Ctrl-C


@pytest.mark.serial
def test_ctrl_c_saves_smallest_failing_model_and_replay(tmp_path):
    modelzoo.save(modelzoo.chain(32), tmp_path / "model.onnx")
    env = dict(os.environ, COLUMNS="200")
    proc = subprocess.Popen(
        [sys.executable, "-m", "toolkit", "debug", "reduce", "model.onnx", "-o", "out.onnx",
         "--check", "sh", "-c", "sleep 0.3; exit 1"],
        cwd=tmp_path, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, env=env,
    )
    lines = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = proc.stderr.readline().decode()
        lines.append(line)
        if line.startswith("Iteration 3 "):
            break
    proc.send_signal(signal.SIGINT)
    rest = proc.stderr.read().decode()
    assert proc.wait(timeout=30) == 130
    assert "Interrupted" in rest
    out = _load(tmp_path / "out.onnx")
    assert len(out.graph.node) <= 8  # iterations 1-3 failed: 32 -> 16 -> 8 nodes
    doc = json.loads((tmp_path / "polygraphy_debug_replay.json").read_text())
    assert len(doc["entries"]) >= 3


# ---------------------------------------------------------------------- warm worker


def _pair(args):
    from toolkit.reduce.check import SubprocessRunner, WarmRunner

    warm = WarmRunner(args, entry=worker_entry()).run()
    sub = SubprocessRunner([sys.executable, "-m", "toolkit", *args]).run()
    return warm, sub


@pytest.mark.parametrize(
    "args",
    [
        ["inspect", "model", "model.onnx", "--mode=basic"],
        ["inspect", "model", "missing.onnx"],
        ["inspect", "model", "model.onnx", "--no-such-option"],
        ["debug", "reduce", "model.onnx", "-o", "o.onnx", "--fail-regex", "Op: Mul", "--check", *INSPECT],
    ],
)
def test_warm_worker_output_and_code_match_a_subprocess(seed, monkeypatch, args):
    monkeypatch.setenv("COLUMNS", "120")
    warm, sub = _pair(args)
    assert warm.code == sub.code
    assert warm.stdout == sub.stdout
    norm = lambda b: "\n".join(  # noqa: E731  (the second run also says it replaces the first one's replay)
        l for l in b.decode().splitlines() if "s |" not in l and " s." not in l and "from an earlier run" not in l
    )
    assert norm(warm.stderr) == norm(sub.stderr)


def test_warm_worker_can_be_disabled(monkeypatch):
    from toolkit.reduce.check import make_runner

    entry = worker_entry()
    assert make_runner(["toolkit", "inspect", "model", "x"], entry=entry).kind == "warm"
    assert make_runner([sys.executable, "-m", "toolkit", "inspect"], entry=entry).kind == "warm"
    assert make_runner(["toolkit", "inspect", "model", "x"]).kind == "subprocess"  # no entry to run it warm
    assert make_runner(["echo", "x"]).kind == "subprocess"
    monkeypatch.setenv("TOOLKIT_NO_WARM_WORKER", "1")
    assert make_runner(["toolkit", "inspect", "model", "x"], entry=entry).kind == "subprocess"


def test_warm_worker_preloads_data_files():
    from toolkit.reduce.check import data_files_in

    args = ["run", "m.onnx", "--load-inputs", "a.json", "b.npz", "--onnxrt", "--load-outputs=g.json"]
    assert data_files_in(args) == ["a.json", "b.npz", "g.json"]


# ---------------------------------------------------------------------- shapes and errors


def test_model_input_shapes_fix_dynamic_inputs(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    modelzoo.save(modelzoo.dynamic_batch(), tmp_path / "model.onnx")
    for extra in ([], ["--force-fallback-shape-inference"]):
        res = cli("debug", "reduce", "model.onnx", "-o", "out.onnx", "--model-input-shapes", "x:[3,4]", *extra,
                  "--fail-regex", "Op: Reshape", "--check", *INSPECT)
        assert res.code == 0, res.err
        out = _load(tmp_path / "out.onnx")
        assert node_names(out) == ["reshape"]
        r = next(i for i in out.graph.input if i.name == "r")
        assert [d.dim_value for d in r.type.tensor_type.shape.dim] == [3, 4]


def test_load_inputs_shapes_fix_dynamic_inputs(cli, tmp_path, monkeypatch):
    import numpy as np

    from toolkit.core.io.datafiles import save_inputs

    monkeypatch.chdir(tmp_path)
    modelzoo.save(modelzoo.dynamic_batch(), tmp_path / "model.onnx")
    save_inputs(str(tmp_path / "inputs.json"), [{"x": np.ones((5, 4), np.float32)}])
    res = cli("debug", "reduce", "model.onnx", "-o", "out.onnx", "--load-inputs", "inputs.json",
              "--fail-regex", "Op: Reshape", "--check", *INSPECT)
    assert res.code == 0, res.err
    r = next(i for i in _load(tmp_path / "out.onnx").graph.input if i.name == "r")
    assert [d.dim_value for d in r.type.tensor_type.shape.dim] == [5, 4]


def test_no_reduce_inputs_via_cli(cli, seed):
    res = cli("debug", "reduce", "model.onnx", "-o", "out.onnx", "--no-reduce-inputs", "--fail-regex", "Op: Mul",
              "--check", *INSPECT)
    assert res.code == 0
    out = _load(seed / "out.onnx")
    assert node_names(out) == [MUL] and [i.name for i in out.graph.input] == ["x0", "x1"]


@pytest.mark.parametrize(
    "args, code",
    [
        (["--no-reduce-inputs", "--no-reduce-outputs", "--check", "false"], 2),
        (["--mode", "quick", "--check", "false"], 2),
        (["--check"], 2),
        (["--check", "no-such-command-xyz"], 4),
        (["--check-timeout", "0", "--check", "false"], 2),
        (["--fail-regex", "(", "--check", "false"], 2),
        (["--model-input-shapes", "nope:[1]", "--check", "false"], 3),
        (["--load-debug-replay", "missing.json", "--check", "false"], 3),
    ],
)
def test_usage_and_input_errors(cli, seed, args, code):
    res = cli("debug", "reduce", "model.onnx", "-o", "out.onnx", *args)
    assert res.code == code, res.err
    assert "Traceback" not in res.err and "error:" in res.err
    assert not (seed / "out.onnx").exists()


def test_bad_model_and_bad_output_folder(cli, seed):
    (seed / "bad.onnx").write_bytes(b"not a model")
    res = cli("debug", "reduce", "bad.onnx", "-o", "out.onnx", "--check", "false")
    assert res.code == 3 and "bad.onnx" in res.err
    res = cli("debug", "reduce", "model.onnx", "-o", "nowhere/out.onnx", "--check", "false")
    assert res.code == 3 and "Iteration" not in res.err


def test_help_mentions_exit_codes():
    res = run_toolkit("debug", "reduce", "--help")
    assert res.code == 0
    assert "--check" in res.out and "130" in res.out


def test_iter_artifact_must_not_be_the_model(cli, seed):
    res = cli("debug", "reduce", "model.onnx", "-o", "out.onnx", "--iter-artifact", "model.onnx", "--check", "false")
    assert res.code == 2
    assert onnx.load(str(seed / "model.onnx")).graph.node  # untouched


def test_progress_bar_path(cli, seed, monkeypatch):
    import toolkit.cli.search_reporters as reporters

    monkeypatch.setattr(reporters, "is_terminal", lambda stream=None: True)
    res = cli("debug", "reduce", "model.onnx", "-o", "out.onnx", "--fail-regex", "Op: Mul", "--check", *INSPECT)
    assert res.code == 0, res.err
    assert "Iteration 2 | 1 node | FAIL" in res.err
    assert node_names(_load(seed / "out.onnx")) == [MUL]


def test_replay_keeps_check_times_for_identical_choices(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    modelzoo.save(modelzoo.chain(24), tmp_path / "model.onnx")
    cli("debug", "reduce", "model.onnx", "-o", "a.onnx", "--save-debug-replay", "r.json",
        "--fail-regex", "n17_", "--check", *INSPECT)
    entries = json.loads((tmp_path / "r.json").read_text())["entries"]
    assert all(isinstance(e["seconds"], float) for e in entries)


def _reshape_by_input():
    from onnx import TensorProto, helper

    nodes = [
        helper.make_node("Reshape", ["x", "s"], ["r"], name="reshape"),
        helper.make_node("Relu", ["r"], ["y"], name="relu"),
    ]
    graph = helper.make_graph(
        nodes,
        "reshape_by_input",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6]),
         helper.make_tensor_value_info("s", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    return modelzoo.make_model(graph)


def test_data_options_feed_the_shape_fallback(cli, tmp_path, monkeypatch):
    import numpy as np

    from toolkit.core.io.datafiles import save_inputs

    monkeypatch.chdir(tmp_path)
    modelzoo.save(_reshape_by_input(), tmp_path / "model.onnx")
    save_inputs(str(tmp_path / "in.json"), [{"x": np.ones((2, 6), np.float32), "s": np.array([3, 4], np.int64)}])
    res = cli("debug", "reduce", "model.onnx", "-o", "out.onnx", "--force-fallback-shape-inference",
              "--load-inputs", "in.json", "--fail-regex", "Op: Relu", "--check", *INSPECT)
    assert res.code == 0, res.err
    out = _load(tmp_path / "out.onnx")
    assert node_names(out) == ["relu"]
    (r,) = out.graph.input
    assert [d.dim_value for d in r.type.tensor_type.shape.dim] == [3, 4]
    res = cli("debug", "reduce", "model.onnx", "-o", "out.onnx", "--seed", "3", "--val-range", "nope",
              "--check", "false")
    assert res.code == 2


@pytest.mark.serial
def test_warm_worker_timeout_kills_the_child(monkeypatch):
    import toolkit.cli.app as cli_app
    from toolkit.reduce.check import WarmRunner

    def hang(argv=None):
        time.sleep(30)
        return 0

    monkeypatch.setattr(cli_app, "main", hang)  # the forked child calls this
    start = time.monotonic()
    res = WarmRunner(["inspect", "model", "x.onnx"], timeout=0.5, entry=worker_entry()).run()
    assert res.timed_out and time.monotonic() - start < 10


def test_warm_worker_crash_is_a_failure(monkeypatch):
    import toolkit.cli.app as cli_app
    from toolkit.reduce.check import WarmRunner
    from toolkit.reduce.verdict import FailureRule

    monkeypatch.setattr(cli_app, "main", lambda argv=None: os.kill(os.getpid(), signal.SIGKILL))
    res = WarmRunner(["inspect", "model", "x.onnx"], entry=worker_entry()).run()
    assert res.signal == signal.SIGKILL and FailureRule().failed(res)


def test_external_data_dir_and_no_reduce_outputs(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "weights").mkdir()
    modelzoo.save_with_external_data(modelzoo.seed_example(), tmp_path / "model.onnx", location="w.bin")
    os.replace(tmp_path / "w.bin", tmp_path / "weights" / "w.bin")
    res = cli("debug", "reduce", "model.onnx", "-o", "out.onnx", "--external-data-dir", "weights",
              "--no-reduce-outputs", "--fail-regex", "onnx_graphsurgeon_node_3", "--check", *INSPECT)
    assert res.code == 0, res.err
    out = _load(tmp_path / "out.onnx")
    assert node_names(out) == ["onnx_graphsurgeon_node_3", "onnx_graphsurgeon_node_5"]
    assert [o.name for o in out.graph.output] == ["Y"]
    assert all(t.data_location == onnx.TensorProto.DEFAULT and t.raw_data for t in out.graph.initializer)
    res = cli("debug", "reduce", "model.onnx", "-o", "out2.onnx", "--check", "false")
    assert res.code == 3 and "external data" in res.err


def test_side_branches_of_a_model_with_dynamic_dimensions_are_folded_on_generated_inputs(cli, tmp_path, monkeypatch):
    """--no-reduce-outputs folds the tensors of removed side branches into constants; on a model whose
    input has a symbolic dimension, the generated inputs take it as 1, as `toolkit run` does."""
    from onnx import TensorProto, helper

    monkeypatch.chdir(tmp_path)
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="r"), helper.make_node("Neg", ["x"], ["b"], name="n"),
             helper.make_node("Sigmoid", ["a"], ["c"], name="planted"), helper.make_node("Add", ["c", "b"], ["y"], name="add")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, "model.onnx")
    res = cli("debug", "reduce", "model.onnx", "-o", "out.onnx", "--no-reduce-outputs", "--mode", "bisect",
              "--fail-regex", "planted", "--check", *INSPECT)
    assert res.code == 0, res.err
    out = _load(tmp_path / "out.onnx")
    assert node_names(out) == ["planted", "add"]
    (folded,) = out.graph.initializer
    assert folded.name == "b" and list(folded.dims) == [1, 4]
    x = np.random.default_rng(0).random((1, 4), dtype=np.float32)
    import onnxruntime as ort

    (got,) = ort.InferenceSession("out.onnx").run(None, {"a": np.maximum(x, 0)})
    assert got.shape == (1, 4)


@pytest.mark.serial
def test_check_that_leaves_a_background_process_does_not_hang(tmp_path):
    from toolkit.reduce.check import SubprocessRunner

    start = time.monotonic()
    res = SubprocessRunner(["sh", "-c", f"sleep 30 & echo $! > {tmp_path}/bg.pid; echo done"]).run()
    assert res.code == 0 and b"done" in res.stdout and not res.timed_out
    assert time.monotonic() - start < 10
    time.sleep(0.2)
    assert not _alive(int((tmp_path / "bg.pid").read_text()))


def test_a_result_that_is_one_if_node_says_the_failure_is_in_its_bodies(cli, tmp_path, monkeypatch):
    import fp16_models

    monkeypatch.chdir(tmp_path)
    modelzoo.save(fp16_models.if_loop(), tmp_path / "model.onnx")
    res = cli("debug", "reduce", "model.onnx", "-o", "reduced.onnx", "--fail-regex", "then_mul", "--check", *INSPECT)
    assert res.code == 0, res.err
    assert node_names(_load(tmp_path / "reduced.onnx")) == ["if"]
    assert "the failure is inside this node's bodies (2 nodes)" in res.err
    # a result that is an ordinary node gets no such note
    res = cli("debug", "reduce", "model.onnx", "-o", "reduced.onnx", "--fail-regex", "Op: Abs", "--check", *INSPECT)
    assert res.code == 0, res.err
    assert "bodies" not in res.err


def test_a_check_naming_model_inputs_says_to_use_model_input_shapes(cli, tmp_path, monkeypatch):
    # `--check toolkit run ... --input-shapes x:[...]` breaks on every subgraph without x: say what to do
    monkeypatch.chdir(tmp_path)
    modelzoo.save(modelzoo.chain(4), tmp_path / "model.onnx")
    check = ["toolkit", "run", "polygraphy_debug.onnx", "--onnxrt", "--input-shapes", "x:[1,4]"]
    res = cli("debug", "reduce", "model.onnx", "-o", "r.onnx", "--fail-regex", r"\{y \[", "--check", *check)
    assert res.code == 0, res.err
    assert "--input-shapes names 'x'" in res.err
    assert "give the shapes to debug reduce instead (--model-input-shapes" in res.err


@pytest.mark.parametrize("option", ["-o", "--save-debug-replay", "--min-good"])
def test_no_output_replaces_a_file_the_checks_command_names(cli, tmp_path, monkeypatch, option):
    """-o check.py with --check python check.py ... would write the model over the user's check
    script: refused before anything runs (exit 2), the script intact."""
    monkeypatch.chdir(tmp_path)
    modelzoo.save(modelzoo.chain(4), tmp_path / "model.onnx")
    script = tmp_path / "check.py"
    script.write_text("import sys\nsys.exit(0)\n")
    before = script.read_bytes()
    outputs = {"-o": "check.py"} if option == "-o" else {"-o": "out.onnx", option: "check.py"}
    res = cli("debug", "reduce", "model.onnx", *[w for kv in outputs.items() for w in kv],
              "--check", sys.executable, "check.py", "polygraphy_debug.onnx")
    assert res.code == 2 and "check.py" in res.err and "the check's command" in res.err, res.err
    assert script.read_bytes() == before

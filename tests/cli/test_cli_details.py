"""Details a user meets first: help sections and examples, completion, 'did you mean',
advice for Polygraphy options toolkit refuses, inspect data's printing options."""

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import modelzoo as mz
from conftest import run_toolkit
from toolkit.core.io.datafiles import save_inputs


COMMANDS = [("run",), ("inspect", "model"), ("inspect", "data"), ("surgeon", "extract"), ("surgeon", "sanitize"),
            ("data", "to-input"), ("debug", "reduce"), ("convert",), ("debug", "precision")]


@pytest.mark.parametrize("path", COMMANDS, ids=" ".join)
def test_every_command_help_ends_with_examples(cli, path):
    res = cli(*path, "--help")
    assert res.code == 0
    head, examples = res.out.split("\nExamples:\n")
    lines = [ln.strip() for ln in examples.strip().splitlines()]
    assert 1 <= len(lines) <= 3
    assert all(ln.startswith("toolkit " + " ".join(path)) for ln in lines), lines
    assert "Logging:" in head
    usage = res.out.splitlines()[0]
    assert "{" not in usage and "}" not in usage


def test_every_option_help_text_belongs_to_an_option():
    """The help text of an option lives on its declaration (the field of the command's options
    dataclass it fills): every option has its words, and every declaration is an option."""
    from toolkit.cli.app import GROUPS, get_command
    from toolkit.core.declare import declarations

    flags = set()
    classes = set()

    def walk(cmd):
        for param in cmd.params:
            flags.update(getattr(param, "opts", ()))
            assert param.param_type_name != "option" or param.help, (cmd.name, param.name)
        classes.update(getattr(cmd, "declares", ()))
        for sub in getattr(cmd, "commands", {}).values():
            walk(sub)

    for group in GROUPS:
        walk(get_command(group))
    assert len(classes) >= 9  # run (and its kinds), inspect x2, surgeon x2, data, convert, debug x2
    for cls in classes:
        declared = [(d.flags[0].split("/")[0], d.help) for _f, d in declarations(cls) if d.flags]
        stale = [flag for flag, _help in declared if flag not in flags]
        assert not stale, f"{cls.__name__}: {stale} name no option"
        assert all(words for _flag, words in declared), cls


def test_root_suggests_a_close_command(cli):
    res = cli("inspekt")
    assert res.code == 2
    assert "Did you mean 'inspect'?" in res.err


@pytest.mark.parametrize("option", ["--save-tactics", "--layer-precisions", "--tf", "--gen-script", "--save-heatmaps"])
def test_known_polygraphy_option_gets_advice_not_no_such_option(cli, option):
    res = cli("run", "m.onnx", "--onnxrt", option, "x")
    assert res.code == 2
    assert "No such option" not in res.err
    assert option in res.err and "not supported" in res.err
    assert len(res.err.strip().splitlines()) == 1


def test_truly_unknown_option_still_gets_no_such_option(cli):
    res = cli("run", "m.onnx", "--no-such-thing")
    assert res.code == 2 and "No such option" in res.err


def test_completion_is_offered():
    # Name the shell: Typer's detection walks the process tree, which may hold no shell at all under a CI runner;
    # with detection off (Typer's own switch for this), the option takes the shell's name as its value.
    res = run_toolkit("--show-completion", "bash", env={"_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION": "1"})
    assert res.code == 0 and "_toolkit_completion" in res.out
    res = run_toolkit(env={"_TOOLKIT_COMPLETE": "complete_bash", "COMP_WORDS": "toolkit sur", "COMP_CWORD": "1"})
    assert res.out.split() == ["surgeon"]


@pytest.fixture
def data_file(tmp_path):
    path = str(tmp_path / "in.json")
    rng = np.random.RandomState(1)
    save_inputs(path, [{"x": rng.rand(2, 3, 24).astype(np.float32), "big": np.arange(1000, dtype=np.float32)}])
    return path


def _array_rows(out):
    return [ln.strip() for ln in out.splitlines() if ln.startswith(" " * 8) and ln.strip() and ln.strip() != "..."]


@pytest.mark.parametrize("n", [1, 2, 5])
def test_inspect_data_num_items_and_line_width(cli, data_file, n):
    res = cli("inspect", "data", data_file, "--show-values", "--line-width=-1", f"--num-items={n}")
    assert res.code == 0
    rows = _array_rows(res.out)
    x_rows = [r for r in rows if "..." in r]
    assert x_rows
    for row in x_rows:
        values = [v for v in row.strip("[]").split() if "..." not in v]
        assert len(values) == 2 * n, row


def test_inspect_data_all_items_one_line_per_row(cli, data_file):
    res = cli("inspect", "data", data_file, "--show-values", "--line-width=-1", "--num-items=-1")
    rows = _array_rows(res.out)
    assert not any("..." in r for r in rows)
    assert max(len(r.strip("[]").split()) for r in rows) == 1000  # the whole 1-D tensor on one line
    assert sum(1 for r in rows if len(r.strip("[]").split()) == 24) == 6  # x: 2x3 rows of 24


def test_inspect_data_shows_median_and_percentiles(cli, tmp_path):
    path = str(tmp_path / "d.json")
    save_inputs(path, [{"v": np.arange(101, dtype=np.float32)}])
    res = cli("inspect", "data", path)
    line = next(ln for ln in res.out.splitlines() if ln.strip().startswith("v "))
    assert "median=50" in line and "p90=90" in line and "p95=95" in line and "p99=99" in line


def test_full_mode_summarises_constant_node_values(cli, tmp_path):
    value = numpy_helper.from_array(np.arange(50000, dtype=np.float32).reshape(50, 1000), "v")
    node = helper.make_node("Constant", [], ["c"], value=value, name="const")
    graph = helper.make_graph([node], "g", [], [helper.make_tensor_value_info("c", TensorProto.FLOAT, [50, 1000])])
    path = mz.save(mz.make_model(graph), tmp_path / "c.onnx")
    res = cli("inspect", "model", path, "--mode=full")
    assert res.code == 0
    assert len(res.out) < 5000 and max(len(ln) for ln in res.out.splitlines()) < 1000
    assert "mean=24999.5" in res.out and "..." in res.out
    js = cli("inspect", "model", path, "--mode=full", "--json")
    assert len(js.out) < 5000
    json.loads(js.out)


@pytest.mark.parametrize("width", [80, 120, 160, 240])
def test_comparison_table_never_wraps_names(monkeypatch, width):
    import io
    import sys

    from rich.console import Console

    from toolkit.cli import output, run
    from toolkit.core.compare.arrays import compare_arrays

    buf = io.StringIO()
    monkeypatch.setattr(sys, "stderr", buf)
    monkeypatch.setitem(
        output._consoles, "err", Console(file=buf, width=width, force_terminal=True, soft_wrap=True, color_system=None)
    )
    names = ["depthwise_conv2d_13.tmp_0", "a_really_long_tensor_name/with/slashes:0_and_more_stuff_x"]
    rows = [compare_arrays(n, np.ones(4), np.ones(4) * 1.5, 1e-5, 1e-5) for n in names]
    run._rich_table(rows)
    text = buf.getvalue()
    for name in names:
        assert name in text, (width, text)


def _reshape_fails_at_run_time(tmp_path):
    shape = numpy_helper.from_array(np.array([3], np.int64), "shape")
    node = helper.make_node("Reshape", ["x", "shape"], ["y"], name="bad_reshape")
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [shape],
    )
    return mz.save(mz.make_model(graph), tmp_path / "bad.onnx")


def test_onnxruntime_failure_is_one_error_line_without_colour(tmp_path):
    model = _reshape_fails_at_run_time(tmp_path)
    res = run_toolkit("run", model, "--onnxrt", "--input-shapes", "x:[4]")
    assert res.code == 1
    assert "\x1b[" not in res.err
    errors = [ln for ln in res.err.splitlines() if "bad_reshape" in ln]
    assert len(errors) == 1 and errors[0].startswith("error: "), res.err
    assert "[E:onnxruntime" not in res.err


def test_onnxruntime_logs_follow_verbosity(tmp_path):
    model = _reshape_fails_at_run_time(tmp_path)
    res = run_toolkit("run", model, "--onnxrt", "--input-shapes", "x:[4]", "-v")
    assert res.code == 1
    assert "[E:onnxruntime" in res.err  # -v lets ONNX-Runtime's own warnings and errors through
    # ... through toolkit's log: one prefix, no colour codes in a pipe, and into --log-file too
    assert "\x1b[" not in res.err
    ort_lines = [ln for ln in res.err.splitlines() if "[E:onnxruntime" in ln]
    assert ort_lines and all(ln.startswith("onnxruntime | ") for ln in ort_lines), res.err
    log = tmp_path / "run.log"
    res = run_toolkit("run", model, "--onnxrt", "--input-shapes", "x:[4]", "-vv", "--log-file", str(log))
    assert res.code == 1
    assert "[I:onnxruntime" in res.err and "\x1b[" not in res.err  # -vv: its info lines as well
    assert "onnxruntime | " in log.read_text()


def test_model_to_a_terminal_is_refused(tmp_path):
    import os
    import pty
    import subprocess
    import sys

    model = mz.save(mz.seed_example((1, 3, 2, 2)), tmp_path / "m.onnx")
    master, slave = pty.openpty()
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "toolkit", "surgeon", "sanitize", model, "-o", "-"],
            stdout=slave, stderr=subprocess.PIPE, timeout=120,
        )
    finally:
        os.close(slave)
        os.close(master)
    assert proc.returncode == 2
    assert b"refusing to write a binary model to the terminal" in proc.stderr
    piped = run_toolkit("surgeon", "sanitize", model, "-o", "-")
    assert piped.code == 0 and piped.out  # into a pipe it is written


def test_trt_install_hint_names_the_extras_requirements():
    from toolkit.core.install import extra_install_command

    cmd = extra_install_command("trt")
    assert cmd.startswith("pip install ") and "toolkit[" not in cmd
    assert "tensorrt" in cmd and "cuda-python" in cmd


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--input-shapes", "x=1x3x4x4"], "the separator between name and shape is ':', not '='; write x:1x3x4x4"),
        (["--onnx-outputs", "mark"], "write '--onnx-outputs mark all'"),
    ],
)
def test_messages_that_say_what_to_type(cli, tmp_path, args, needle):
    model = mz.save(mz.seed_example((1, 3, 4, 4)), tmp_path / "m.onnx")
    res = cli("run", model, "--onnxrt", *args)
    assert res.code == 2 and needle in res.err, res.err


def test_output_option_after_check_is_explained(cli, tmp_path):
    model = mz.save(mz.seed_example((1, 3, 4, 4)), tmp_path / "m.onnx")
    res = cli("debug", "reduce", model, "--check", "toolkit", "run", "polygraphy_debug.onnx", "--onnxrt", "-o", "r.onnx")
    assert res.code == 2
    assert "-o is given after --check" in res.err and "put -o before --check" in res.err


def test_missing_model_is_reported_before_any_work(cli, tmp_path):
    res = cli("run", str(tmp_path / "nope.onnx"), "--onnxrt")
    assert res.code == 3 and "nope.onnx" in res.err
    assert "Activating" not in res.err


def test_inputs_file_given_as_outputs_is_refused_up_front(cli, tmp_path):
    model = mz.save(mz.seed_example((1, 3, 4, 4)), tmp_path / "m.onnx")
    ins = str(tmp_path / "inputs.json")
    assert cli("run", model, "--onnxrt", "--save-inputs", ins, "-q").code == 0
    res = cli("run", model, "--onnxrt", "--load-outputs", ins)
    assert res.code == 3 and "is an inputs file" in res.err and "--load-inputs" in res.err
    assert "Activating" not in res.err


def test_placeholders_follow_one_style():
    from toolkit.cli.app import get_command

    def walk(cmd):
        subs = getattr(cmd, "commands", None)
        if subs:
            for sub in subs.values():
                yield from walk(sub)
        else:
            yield cmd

    for cmd in walk(get_command()):
        for p in cmd.params:
            if p.param_type_name != "option" or getattr(p, "is_flag", False) or getattr(p, "count", False):
                continue
            long = next((o for o in p.opts if o.startswith("--")), "")
            if long.startswith(("--save-", "--load-")) and "input-shapes" not in long:
                assert p.metavar.rstrip(".") in ("PATH", "PATH..."), (cmd.name, long, p.metavar)
            if long.endswith("-shapes"):
                assert p.metavar.startswith("NAME:SHAPE"), (cmd.name, long, p.metavar)
            assert "_" not in (p.metavar or "") or long.lstrip("-").upper().replace("-", "_") != p.metavar.rstrip("."), (
                cmd.name, long, p.metavar
            )


@pytest.mark.parametrize(
    "shape,code",
    [
        ("x0:[1,3,4]", 3),  # wrong rank: does not fit the model
        ("nope:[1,3,4,4]", 3),  # unknown name: does not fit the model
        ("x0:[1,3,a,4]", 2),  # not a concrete shape: bad option text
        ("x0", 2),  # no shape at all
    ],
)
def test_input_shapes_one_rule(cli, tmp_path, shape, code):
    model = mz.save(mz.seed_example((1, 3, 4, 4)), tmp_path / "m.onnx")
    assert cli("run", model, "--onnxrt", "--input-shapes", shape).code == code


@pytest.mark.parametrize("path", COMMANDS, ids=" ".join)
def test_defaults_are_shown_one_way(cli, path):
    out = cli(*path, "--help").out
    assert "[default" not in out and "(default:" not in out


def test_run_help_is_grouped_in_sections(cli):
    out = cli("run", "--help").out
    heads = [ln[:-1] for ln in out.splitlines() if ln and not ln.startswith(" ") and ln.endswith(":")]
    assert heads == ["Arguments", "Options", "Inputs", "Outputs and comparison", "ONNX-Runtime", "TensorRT", "OpenVINO",
                     "Logging", "Examples"]
    section = out.split("\nInputs:\n")[1].split("\n\n")[0]
    assert "--load-inputs" in section and "--seed" in section and "--atol" not in section

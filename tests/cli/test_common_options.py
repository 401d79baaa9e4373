"""Options every command takes: -v/-q/--verbosity/--silent/--log-file/--log-format/--model-type,
in both places (after the group and after the command), and what they change."""

import re

import pytest

import modelzoo as mz
from conftest import run_toolkit
from toolkit.cli.options import take_common_options


@pytest.fixture
def model(tmp_path):
    return mz.save(mz.seed_example((1, 3, 4, 4)), tmp_path / "model.onnx")


@pytest.mark.parametrize(
    "args",
    [
        ("inspect", "-v", "model", "{m}"),
        ("inspect", "model", "{m}", "-v"),
        ("surgeon", "-vv", "sanitize", "{m}", "-o", "{o}"),
        ("surgeon", "sanitize", "{m}", "-o", "{o}", "--verbosity", "extra_verbose"),
        ("-q", "run", "{m}", "--onnxrt"),
        ("run", "{m}", "--onnxrt", "--model-type=onnx", "-qq"),
        ("data", "-v", "to-input", "{i}", "-o", "{o2}"),
    ],
)
def test_common_options_in_either_place(cli, model, tmp_path, args):
    ins = str(tmp_path / "in.json")
    assert cli("run", model, "--onnxrt", "--save-inputs", ins, "-q").code == 0
    fill = dict(m=model, o=str(tmp_path / "out.onnx"), i=ins, o2=str(tmp_path / "merged.json"))
    res = cli(*[a.format(**fill) for a in args])
    assert res.code == 0, res.err


def test_verbose_adds_detail_and_quiet_keeps_only_the_verdict(cli, model):
    def lines(*args):
        # timings vary from run to run, and the final line repeats the command
        err = cli("run", *args).err.replace(" -v", "")
        return [re.sub(r"[\d.]+ ms", "T ms", ln) for ln in err.splitlines()]

    normal = lines(model, "--onnxrt", "--seed", "3")
    more = lines(model, "--onnxrt", "--seed", "3", "-v")
    less = cli("run", "-q", model, "--onnxrt", "--seed", "3").err.splitlines()
    assert set(normal) - set(more) == set()  # -v only adds
    detail = [ln for ln in more if ln not in normal]
    assert any("seed 3" in ln for ln in detail), detail
    assert len(less) == 1 and less[0].startswith("PASSED | Command: toolkit run -q ")
    assert len(less) < len(normal) < len(more)


def test_verbosity_names_match_the_short_flags(cli, model):
    assert cli("run", model, "--onnxrt", "--verbosity", "warning").err == cli("run", model, "--onnxrt", "-q").err.replace(
        " -q", " --verbosity warning"
    )


def test_silent_prints_nothing_but_an_error(cli, model, tmp_path):
    ok = cli("run", model, "--onnxrt", "--silent")
    assert ok.code == 0 and ok.err == "" and ok.out == ""
    bad = cli("run", str(tmp_path / "missing.onnx"), "--onnxrt", "--silent")
    assert bad.code == 3
    assert bad.err.startswith("error: ") and len(bad.err.strip().splitlines()) == 1


def test_log_file_gets_the_log_and_the_error(cli, model, tmp_path):
    log = tmp_path / "logs" / "deep" / "run.log"
    res = cli("run", model, "--onnxrt", "--log-file", str(log))
    assert res.code == 0
    text = log.read_text()
    assert "PASSED | Command:" in text and "Activating" in text
    assert "\x1b[" not in text
    cli("inspect", "model", str(tmp_path / "nope.onnx"), "--log-file", str(log))
    assert log.read_text().splitlines()[-1].startswith("error: ")


def test_log_format_timestamp_and_line_info(cli, model):
    res = cli("run", model, "--onnxrt", "--log-format", "timestamp", "line-info")
    first = res.err.splitlines()[0]
    assert re.match(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] \[\w+\.py:\d+\] ", first), first


def test_model_type_other_than_onnx_is_refused(cli, model):
    res = cli("inspect", "model", model, "--model-type=frozen")
    assert res.code == 2
    assert "not supported" in res.err and "ONNX" in res.err
    assert "Traceback" not in res.err
    assert cli("surgeon", "sanitize", model, "-o", "-", "--model-type", "engine").code == 2


@pytest.mark.parametrize(
    "argv,message",
    [
        (["run", "m.onnx", "--verbosity", "loud"], "unknown level"),
        (["run", "m.onnx", "--log-format", "pretty"], "--log-format"),
        (["run", "m.onnx", "--log-file"], "needs a value"),
    ],
)
def test_bad_common_values_are_usage_errors(cli, argv, message):
    res = cli(*argv)
    assert res.code == 2 and message in res.err


def test_options_after_check_belong_to_the_check():
    rest, opts = take_common_options(
        ["debug", "-v", "reduce", "m.onnx", "-o", "r.onnx", "--check", "toolkit", "run", "x", "-q", "--log-file", "f"]
    )
    assert opts.verbose == 1 and opts.quiet == 0 and opts.log_file is None
    assert rest == ["debug", "reduce", "m.onnx", "-o", "r.onnx", "--check", "toolkit", "run", "x", "-q", "--log-file", "f"]


def test_verbosity_takes_several_values_but_not_the_model():
    rest, opts = take_common_options(["run", "--verbosity", "backend:info", "verbose", "m.onnx", "--onnxrt"])
    assert opts.verbosity == ["backend:info", "verbose"]
    assert rest == ["run", "m.onnx", "--onnxrt"]


def test_run_with_only_logging_options_does_nothing_and_passes(tmp_path):
    log = tmp_path / "sub" / "x.log"
    res = run_toolkit("run", "-v", "--log-file", str(log))
    assert res.code == 0
    assert "nothing to run" in res.err and "nothing to run" in log.read_text()
    assert run_toolkit("run", "--onnxrt").code == 2


def test_help_lists_the_common_options_in_their_own_section(cli):
    res = cli("inspect", "data", "--help")
    assert res.out.startswith("Usage: toolkit inspect data [OPTIONS] FILE\n")
    own, logging = res.out.split("\nLogging:\n")
    for opt in ("--verbosity", "--silent", "--log-file", "--log-format", "--model-type"):
        assert opt in logging and opt not in own
    assert "--show-values" in own


def test_verbose_frames_every_command_on_stderr_only(cli, model):
    plain = cli("inspect", "model", model)
    loud = cli("inspect", "-v", "model", model)
    assert loud.out == plain.out  # data is the same, whatever the level
    assert plain.err == ""
    lines = loud.err.splitlines()
    assert lines[0].startswith("toolkit ") and "inspect -v model" in lines[0]
    assert re.match(r"toolkit \| done in [\d.]+ s \(exit 0\)", lines[-1])
    quiet = cli("inspect", "model", str(model) + ".missing", "-v")
    assert "stopped after" in quiet.err and quiet.err.strip().splitlines()[-1].startswith("error: ")

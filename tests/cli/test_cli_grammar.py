"""toolkit.cli.grammar: Polygraphy's (argparse's) command-line grammar on Click, by behaviour."""

from dataclasses import dataclass, field
from typing import List, Optional

import pytest
import typer
from typer.testing import CliRunner

from toolkit.cli.app_settings import SUBAPP_SETTINGS
from toolkit.cli.grammar import (
    GROUP_SEP,
    cut_rest,
    expand_multi,
    expand_prefixes,
    is_value,
    split_group,
    take_flags,
)
from toolkit.cli.options import CommonOptions, bind, command_kwargs, values_for
from toolkit.core.declare import option, switch
from toolkit.core.errors import UsageError


def test_multi_value_options_take_every_value_up_to_the_next_option():
    args = ["m.onnx", "--outs", "mark", "all", "--lo", "-1", "-.5", "-", "--flag", "--", "--outs", "x"]
    assert expand_multi(args, {"--outs", "--lo"}) == [
        "m.onnx", "--outs", "mark", "--outs", "all", "--lo", "-1", "--lo", "-.5", "--lo", "-", "--flag",
        "--", "--outs", "x",
    ]
    with pytest.raises(UsageError, match=r"--outs needs a value \(--flag is an option\)"):
        expand_multi(["--outs", "--flag"], {"--outs"})


@pytest.mark.parametrize("token, value", [
    ("x", True), ("-", True), ("-1", True), ("-.5", True), ("-1.5", True), ("-1e-3", True), ("-2E+4", True),
    ("-x y", True), ("--onnxrt", False), ("-o", False), ("-1x", False), ("-e3", False), ("--", False),
])
def test_a_dash_token_is_a_value_only_when_it_is_a_number_as_in_argparse(token, value):
    assert is_value(token) is value


@pytest.mark.parametrize("argv, message", [
    (["--load-inputs", "--onnxrt"], "--load-inputs needs a value (--onnxrt is an option)"),
    (["--onnxrt", "--load-outputs"], "--load-outputs needs a value"),
    (["--onnxrt", "--onnx-outputs", "--atol", "1"], "--onnx-outputs needs a value (--atol is an option)"),
    (["--onnxrt", "--atol", "--rtol", "1"], "--atol needs a value (--rtol is an option)"),
    (["--onnxrt", "--save-outputs", "-x.json"], "--save-outputs needs a value (-x.json is an option)"),
    (["--onnxrt", "--log-file", "--onnxrt"], "--log-file needs a value (--onnxrt is an option)"),
])
def test_an_option_is_never_taken_as_the_value_of_another(cli, tmp_path, monkeypatch, argv, message):
    """argparse's grammar: `run MODEL --load-inputs --onnxrt` says --load-inputs has no value (Click took
    --onnxrt as the file name and then said to pass --onnxrt)."""
    import modelzoo as mz

    monkeypatch.chdir(tmp_path)  # (a parser that took -x.json as a file name would write it here)
    model = mz.save(mz.seed_example((1, 3, 4, 4)), tmp_path / "model.onnx")
    res = cli("run", model, *argv)
    assert res.code == 2, res.output
    assert res.err.strip().splitlines()[-1] == f"error: {message}"


def test_negative_numbers_and_stdio_stay_values(cli, tmp_path):
    import modelzoo as mz

    model = mz.save(mz.seed_example((1, 3, 4, 4)), tmp_path / "model.onnx")
    res = cli("run", model, "--onnxrt", "--val-range", "[-1,1]", "--atol", "-1e-3")
    assert res.code == 2 and "bad --atol value '-1e-3'" in res.err  # (the number reached its parser)
    res = cli("run", model, "--onnxrt", "--val-range", "x0:[-1,1]", "--atol", "1e-3", "--seed", "-1")
    assert "needs a value" not in res.err


def test_a_grouped_option_keeps_each_occurrence_apart():
    out = expand_multi(["--shapes", "x:[1]", "y:[2]", "--shapes", "x:[4]"], {"--shapes"}, {"--shapes"})
    assert out == ["--shapes", f"x:[1]{GROUP_SEP}y:[2]", "--shapes", "x:[4]"]
    assert [split_group(v) for v in out[1::2]] == [["x:[1]", "y:[2]"], ["x:[4]"]]


class _Param:
    def __init__(self, *opts):
        self.opts = opts


def test_prefixes_expand_when_unambiguous_and_stop_at_the_rest_option():
    params = [_Param("--fold-constants"), _Param("--iterations", "--iters"), _Param("--save-inputs"),
              _Param("--save-outputs"), _Param("--check")]
    args = ["--fold", "--iter=2", "--check", "run", "--fold"]
    assert expand_prefixes(args, params) == ["--fold-constants", "--iterations=2", "--check", "run", "--fold"]
    assert expand_prefixes(["--che", "x", "--fold"], params) == ["--check", "x", "--fold"]
    with pytest.raises(UsageError, match="ambiguous option --save: could match --save-inputs, --save-outputs"):
        expand_prefixes(["--save", "x"], params)
    with pytest.raises(UsageError, match="ambiguous option --fol"):  # a refused option counts as its own
        expand_prefixes(["--fol"], params, refused=["--fold-everything"])
    assert expand_prefixes(["--fold-everything"], params, refused=["--fold-everything"]) == ["--fold-everything"]


def test_the_rest_option_takes_the_rest_verbatim():
    assert cut_rest(["m", "--check", "run", "-o", "x", "--help"], "--check") == (["m"], ["run", "-o", "x", "--help"])
    assert cut_rest(["--check=run", "a"], "--check") == ([], ["run", "a"])
    assert cut_rest(["m", "--", "--check"], "--check") == (["m", "--", "--check"], None)


def test_common_options_are_taken_anywhere_before_the_rest():
    opts = CommonOptions()
    rest = take_flags(["-vv", "run", "-v", "--verbosity", "info", "a.py:verbose", "m.onnx", "--log-file=l.txt",
                       "--check", "x", "-v"], opts)
    assert rest == ["run", "m.onnx", "--check", "x", "-v"]
    assert opts.verbose == 3 and opts.verbosity == ["info", "a.py:verbose"] and opts.log_file == "l.txt"
    with pytest.raises(UsageError, match="--log-file needs a value"):
        take_flags(["--log-file", "-v"], CommonOptions())


@dataclass
class _Args:
    model: str = field(default="", metadata={})
    outs: List[str] = option("--outs", metavar="NAMES...", factory=list, help="Outputs.")
    shapes: List[List[str]] = option("--shapes", metavar="NAME:SHAPE...", factory=list, help="One profile per flag.")
    check: Optional[List[str]] = option("--check", metavar="COMMAND ARGS...", help="The rest.")
    fold_constants: bool = switch("--fold-constants", help="Fold.")


def _app(seen):
    app = typer.Typer(**SUBAPP_SETTINGS)

    @app.command("cut", **command_kwargs("Cut.", declares=[_Args], examples=["toolkit cut --outs a b"]))
    @bind(_Args)
    def cut(ctx: typer.Context, **params) -> None:
        seen.append(_Args(**values_for(_Args, params)))

    @app.command("other", **command_kwargs("Other."))
    def other() -> None:
        pass

    return app


def test_a_bound_command_parses_the_grammar_into_its_dataclass():
    seen: list = []
    res = CliRunner().invoke(_app(seen), ["cut", "--outs", "a", "b", "--shapes", "x:[1]", "y:[2]", "--shapes", "x:[3]",
                                          "--fold", "--check", "toolkit", "run", "--outs", "z"])
    assert res.exit_code == 0, res.output
    (a,) = seen
    assert a.outs == ["a", "b"] and a.shapes == [["x:[1]", "y:[2]"], ["x:[3]"]] and a.fold_constants
    assert a.check == ["toolkit", "run", "--outs", "z"]


def test_help_shows_declared_metavars_sections_and_examples(monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    text = CliRunner().invoke(_app([]), ["cut", "--help"]).output
    assert "--outs NAMES..." in text and "--shapes NAME:SHAPE..." in text
    assert text.index("Options:") < text.index("Logging:") < text.index("Examples:")
    assert text.rstrip().endswith("toolkit cut --outs a b")
    assert "Examples:" not in CliRunner().invoke(_app([]), ["other", "--help"]).output


def test_every_option_of_every_command_declares_its_metavar():
    """Metavars are declared with the option (core.declare), never guessed from its name."""
    from toolkit.cli.app import GROUPS, get_command

    def options(cmd):
        for sub in getattr(cmd, "commands", {}).values():
            yield from options(sub)
        for p in getattr(cmd, "params", ()):
            if p.param_type_name == "option" and not (p.is_flag or p.count or p.secondary_opts):
                yield cmd.name, p

    missing = [(name, p.opts) for g in GROUPS for name, p in options(get_command(g)) if p.metavar is None]
    assert not missing, missing

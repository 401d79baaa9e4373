"""One field list per concept: a command binds its library config (each option declared on the
config's field) plus a small dataclass of the options only the command line has, so a field
renamed is the option renamed, never a second list that falls back to a default."""

import dataclasses
import inspect
import typing

import pytest
import typer
from typer.testing import CliRunner

from toolkit.cli.debug import ReduceArgs, reduce_command
from toolkit.cli.options import bind, values_for
from toolkit.core.declare import declarations
from toolkit.reduce.config import ReduceConfig


def _renamed(cls, old: str, new: str):
    """``cls`` with its field ``old`` called ``new`` (a rename made on one side only)."""
    def copy(f):  # (a new Field, its declaration kept: make_dataclass names the one it is given)
        if f.default_factory is not dataclasses.MISSING:
            return dataclasses.field(default_factory=f.default_factory, metadata=f.metadata)
        if f.default is not dataclasses.MISSING:
            return dataclasses.field(default=f.default, metadata=f.metadata)
        return dataclasses.field(metadata=f.metadata)

    hints = typing.get_type_hints(cls)
    fields = [(new if f.name == old else f.name, hints[f.name], copy(f)) for f in dataclasses.fields(cls)]
    return dataclasses.make_dataclass(cls.__name__, fields)


def test_debug_reduce_binds_its_library_config_and_no_copy_of_it():
    """Every option of ``debug reduce`` fills a field of ReduceConfig or of ReduceArgs (the options the
    library does not take), and no option is declared in both: there is no second list to keep equal."""
    params = set(inspect.signature(reduce_command).parameters) - {"ctx"}
    config = {f.name for f, _d in declarations(ReduceConfig)}
    cli_only = {f.name for f, _d in declarations(ReduceArgs)}
    assert not config & cli_only
    assert params <= config | cli_only
    assert {"check_timeout", "iter_artifact", "remove_intermediate", "input_shapes", "load_inputs"} <= params


def test_a_renamed_config_field_is_still_filled_by_its_option(tmp_path):
    """Renaming a ReduceConfig field renames the command's parameter with it: ``--check-timeout``,
    ``--no-remove-intermediate`` and ``--model-input-shapes`` still reach the config, parsed."""
    renamed = _renamed(_renamed(ReduceConfig, "check_timeout", "check_timeout_s"), "input_shapes", "shapes")
    app, got = _bound(renamed)
    res = CliRunner().invoke(app, ["m.onnx", "-o", "o.onnx", "--check-timeout", "3", "--no-remove-intermediate",
                                   "--model-input-shapes", "x:[1,2]"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    assert got[0].check_timeout_s == 3.0 and got[0].remove_intermediate is False and got[0].shapes == {"x": (1, 2)}
    assert not hasattr(got[0], "check_timeout")


def test_debug_precision_binds_its_library_configs_and_no_copy_of_them():
    """``debug precision`` binds QdqConfig (the fp16 search's PrecisionConfig and the Q/DQ pair options)
    and PrecisionArgs (what the library does not take); the pair options it refuses on a model
    without pairs are read from QdqConfig's declarations, not from a list kept beside them."""
    from toolkit.cli import precision as P
    from toolkit.precision.config import PrecisionConfig, QdqConfig

    params = set(inspect.signature(_debug_command("precision")).parameters) - {"ctx"}
    config = {f.name for f, _d in declarations(QdqConfig)}
    cli_only = {f.name for f, _d in declarations(P.PrecisionArgs)}
    assert not config & cli_only and params == config | cli_only
    assert {"iterations", "keep_fp32", "load_replay", "weights", "order"} <= params
    fp16 = {f.name for f in dataclasses.fields(PrecisionConfig)}
    assert set(P.PAIR_OPTIONS) == {d.flags[0] for f, d in declarations(QdqConfig) if f.name not in fp16}
    assert "--qdq-weights" in P.PAIR_OPTIONS and "--keep-fp32" not in P.PAIR_OPTIONS


def _debug_command(name: str):
    """The function ``toolkit debug NAME`` runs."""
    from toolkit.cli.debug import app

    (cmd,) = [c for c in app.registered_commands if c.name == name]
    return cmd.callback


def _bound(cls):
    """(a Typer app whose one command binds ``cls``, the list each call's ``cls`` is appended to)."""
    got: list = []
    app = typer.Typer()

    @app.command()
    @bind(cls)
    def cmd(ctx: typer.Context, **params) -> None:
        got.append(cls(**values_for(cls, params)))

    return app, got


def test_debug_llm_binds_its_library_config_and_no_copy_of_it():
    from toolkit.cli.llm import LlmArgs
    from toolkit.llm.config import LlmConfig

    params = set(inspect.signature(_debug_command("llm")).parameters) - {"ctx"}
    config = {f.name for f, _d in declarations(LlmConfig)}
    cli_only = {f.name for f, _d in declarations(LlmArgs)}
    assert not config & cli_only and params == config | cli_only
    assert {"samples", "seed", "steps", "localize", "save_step_inputs"} <= config


def test_a_parsed_option_reaches_the_config_parsed_and_unset_gives_the_field_default():
    """``parse=`` runs once, where the command reads its options: ``--devices 0,1`` is a list,
    ``--no-reduce-inputs`` turns a True field off, and options left out give the config's defaults."""
    app, got = _bound(ReduceConfig)
    runner = CliRunner()
    assert runner.invoke(app, ["m.onnx", "-o", "o.onnx", "--devices", "0,,1", "--no-reduce-inputs"]).exit_code == 0
    assert runner.invoke(app, ["m.onnx", "-o", "o.onnx"]).exit_code == 0
    given, default = got
    assert given.devices == ["0", "1"] and given.reduce_inputs is False and given.reduce_outputs is True
    plain = ReduceConfig(model="m.onnx", output="o.onnx")
    assert [getattr(default, f.name) for f, _d in declarations(ReduceConfig)] == \
        [getattr(plain, f.name) for f, _d in declarations(ReduceConfig)]

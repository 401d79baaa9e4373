"""A library config is filled from a command's options by field name; a name on one side that
matches nothing on the other fails loudly instead of falling back to a default."""

import dataclasses

import pytest

from toolkit.cli.debug import ReduceArgs
from toolkit.cli.options import from_params
from toolkit.cli.precision import PrecisionArgs


def _renamed(cls, old: str, new: str):
    """``cls`` with its field ``old`` called ``new`` (a rename made on one side only)."""
    def copy(f):  # (a new Field: make_dataclass names the one it is given)
        if f.default_factory is not dataclasses.MISSING:
            return dataclasses.field(default_factory=f.default_factory)
        return dataclasses.field(default=f.default) if f.default is not dataclasses.MISSING else dataclasses.field()

    fields = [(new if f.name == old else f.name, f.type, copy(f)) for f in dataclasses.fields(cls)]
    return dataclasses.make_dataclass(cls.__name__, fields)


@dataclasses.dataclass
class Config:
    timeout: float = 1.0
    jobs: int = 1
    label: str = ""


def test_every_config_field_is_set_by_an_option_an_override_or_a_named_default():
    cfg = from_params(Config, {"timeout": 3.0, "unrelated": 1}, defaults=("label",), jobs=4)
    assert cfg == Config(3.0, 4, "")


@pytest.mark.parametrize("call", [
    lambda: from_params(Config, {"timeout": 3.0}, jobs=4),  # label: set by nothing
    lambda: from_params(Config, {"time_out": 3.0}, defaults=("label",), jobs=4),  # an option renamed
    lambda: from_params(Config, {"timeout": 3.0}, defaults=("label", "nosuch"), jobs=4),
    lambda: from_params(Config, {"timeout": 3.0}, defaults=("label",), jobs=4, nosuch=1),
])
def test_a_name_that_matches_nothing_fails(call):
    with pytest.raises(TypeError):
        call()


def test_renaming_a_reduce_config_field_fails_where_the_command_builds_it(monkeypatch):
    from toolkit.cli.debug import _reduce_config
    from toolkit.reduce import session

    args = ReduceArgs(model="m.onnx", output="out.onnx", check=["true"])
    assert _reduce_config(args, None, []).check_timeout == args.check_timeout  # (as the command builds it today)
    monkeypatch.setattr(session, "ReduceConfig", _renamed(session.ReduceConfig, "check_timeout", "check_timeout_s"))
    with pytest.raises(TypeError, match="check_timeout_s"):
        _reduce_config(args, None, [])
    monkeypatch.undo()
    assert "check_timeout" in {f.name for f in dataclasses.fields(session.ReduceConfig)}  # (the real one untouched)


def test_renaming_a_precision_option_fails_where_the_command_builds_the_config():
    from toolkit.precision.search import PrecisionConfig

    args = dataclasses.asdict(PrecisionArgs(model="m.onnx"))
    from_params(PrecisionConfig, args, reference="onnxrt", candidate="onnxrt:fp16", save_replay=None, load_replay=None)
    args["iteration_count"] = args.pop("iterations")
    with pytest.raises(TypeError, match="iterations"):
        from_params(PrecisionConfig, args, reference="onnxrt", candidate="onnxrt:fp16", save_replay=None,
                    load_replay=None)

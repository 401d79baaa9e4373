"""Options are declared once, on the options dataclass (toolkit.core.declare): the command line,
its help, the runner kinds' options and runner specs are read from that one declaration. A new
backend is one Runner class and one register() call."""

import dataclasses
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import toolkit.cli.app as app_module
from toolkit.cli.options import runner_specs
import toolkit.run.options as options_module
import toolkit.run.registry as registry
from toolkit.backends.base import Runner
from toolkit.core.declare import declarations, option
from toolkit.core.meta import TensorMeta
from toolkit.run.options import RunOptions
from toolkit.run.registry import RunnerKind, options_given, register
from toolkit.run.specs import parse_runner_spec


def _relu_model(path) -> str:
    node = helper.make_node("Relu", ["x"], ["y"])
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return str(path)


@pytest.fixture
def fresh_commands(monkeypatch):
    """Command trees built anew (they are cached per process), and kinds registered here undone."""
    monkeypatch.setattr(app_module, "_COMMANDS", {})
    monkeypatch.setattr(registry, "KINDS", dict(registry.KINDS))
    own = dict(options_module.KIND_DECLARATIONS)
    yield
    options_module.KIND_DECLARATIONS.clear()
    options_module.KIND_DECLARATIONS.update(own)


@dataclass
class _DummyRunOptions(RunOptions):
    dummy: bool = option("--dummy", default=False, help="A dummy switch of ONNX-Runtime.", panel="ONNX-Runtime",
                         runner="onnxrt", spec="dummy")


def test_a_dummy_option_declared_once_reaches_help_options_and_specs(cli, tmp_path, monkeypatch, fresh_commands):
    monkeypatch.setattr(options_module, "RunOptions", _DummyRunOptions)
    monkeypatch.setattr(registry, "RunOptions", _DummyRunOptions)
    model = _relu_model(tmp_path / "m.onnx")

    helped = cli("run", "--help")
    assert helped.code == 0
    onnxrt_panel = helped.out.split("ONNX-Runtime:")[1].split("TensorRT:")[0]
    assert "--dummy" in onnxrt_panel and "A dummy switch of ONNX-Runtime." in onnxrt_panel

    seen: List[RunOptions] = []
    monkeypatch.setattr("toolkit.cli.run.run_and_render", lambda opts, command, quiet=False: seen.append(opts) or 0)
    assert cli("run", model, "--onnxrt", "--dummy").code == 0
    assert seen[0].dummy is True and seen[0].runners == ["onnxrt"]

    # a runner option: the kind lists it, its spec sets it, and it counts as given for its kind
    assert "--dummy" in options_given(seen[0], "onnxrt")
    spec = parse_runner_spec("onnxrt:dummy")
    assert spec.apply(_DummyRunOptions("m.onnx")).dummy is True
    assert "dummy" in registry.get_kind("onnxrt").spec_options()


def test_every_run_option_is_declared_once():
    flags = [f for _field, d in declarations(RunOptions) for f in d.flags]
    assert len(flags) == len(set(flags))
    # the runner kinds' options are exactly the fields declared with their name, and those the
    # kind declares itself; no flag twice across them
    for kind in registry.KINDS.values():
        declared = {f.name for f, d in declarations(RunOptions) if d.runner == kind.name}
        own = {f.name for f, d in declarations(kind.declares)} if kind.declares else set()
        assert {o.field for o in kind.options} == declared | own
        flags += [f for _field, d in (declarations(kind.declares) if kind.declares else ()) for f in d.flags]
    assert len(flags) == len(set(flags))


def test_runner_options_warn_without_their_kind():
    opts = RunOptions("m.onnx", runners=["onnxrt"], fp16=True, save_engine="e.plan")
    assert registry.unused_options(opts, ["onnxrt"]) == ["--fp16, --save-engine ignored without --trt"]


# ------------------------------------------------------------------ a new backend, as docs/architecture.md says


@dataclass
class FakeOptions:
    """The fake backend's own option, declared in its module."""

    slope: Optional[str] = option("--fake-slope", metavar="SLOPE", spec="slope", choices=("0", "0.5"),
                                  help="Slope of the fake backend's Relu for negative values.")


class FakeRunner(Runner):
    """(Leaky) Relu in numpy: the whole backend."""

    name = "fake-runner"

    def __init__(self, model: str, name=None, slope: Optional[str] = None):
        super().__init__(name)
        self.model = model
        self.slope = float(slope or 0)

    def _activate(self) -> None:
        self.graph = onnx.load(self.model).graph

    def input_metadata(self) -> List[TensorMeta]:
        return [TensorMeta("x", (2, 3), "float32")]

    def output_names(self) -> List[str]:
        return ["y"]

    def _infer(self, feed: Mapping) -> Dict[str, object]:
        x = feed["x"]
        return {"y": np.where(x > 0, x, self.slope * x)}


def test_a_fake_backend_is_one_runner_and_one_register_call(cli, tmp_path, monkeypatch, fresh_commands):
    register(RunnerKind(
        name="fake",
        flag="--fake",
        help="Run the model with the fake backend.",
        factory=lambda opts, config, reporter, name: FakeRunner(opts.model, name, opts.of("fake").slope),
        declares=FakeOptions,
        title="Fake",
        warn_unused=True,
    ))
    model = _relu_model(tmp_path / "m.onnx")
    helped = cli("run", "--help").out
    assert "--fake" in helped
    assert "--fake-slope SLOPE" in helped.split("Fake:")[1]  # its own panel, named by the kind

    res = cli("run", model, "--fake", "--onnxrt", "--val-range", "[-1,1]", "--save-outputs", tmp_path / "o.json")
    assert res.code == 0, res.err
    assert "Comparing fake-runner vs onnxrt-runner" in res.err  # the order of the flags
    assert "PASSED" in res.err
    # its own option reaches the runner: a leaky Relu differs from ONNX-Runtime's Relu
    res = cli("run", model, "--fake", "--onnxrt", "--val-range", "[-1,1]", "--fake-slope", "0.5")
    assert res.code == 1, res.err
    res = cli("run", model, "--onnxrt", "--fake-slope", "0.5")
    assert "--fake-slope ignored without --fake" in res.err

    # and through a runner spec, as every command that takes one
    from toolkit.run.specs import make_runner

    feed = {"x": np.array([[-1, 2, -3], [4, -5, 6]], np.float32)}
    with make_runner("fake", model) as runner:
        assert runner.infer(feed)["y"].tolist() == [[0, 2, 0], [4, 0, 6]]
    with make_runner("fake:slope=0.5", model) as runner:
        assert runner.infer(feed)["y"].tolist() == [[-0.5, 2, -1.5], [4, -2.5, 6]]
    assert "fake:slope=0.5" in runner_specs()

    # the options object holds the values of the kind's own options
    seen: List[RunOptions] = []
    monkeypatch.setattr("toolkit.cli.run.run_and_render", lambda opts, command, quiet=False: seen.append(opts) or 0)
    assert cli("run", model, "--fake", "--fake-slope", "0.5").code == 0
    assert seen[0].of("fake").slope == "0.5" and "--fake-slope" in options_given(seen[0], "fake")


def test_kind_properties_replace_backend_names():
    onnxrt, trt = registry.get_kind("onnxrt"), registry.get_kind("trt")
    assert onnxrt.runs_in_process({}) and onnxrt.emulates_storage
    assert not onnxrt.runs_in_process({"providers": "cuda"})  # a device provider: checked in a worker
    assert not trt.runs_in_process({}) and not trt.emulates_storage
    fake = dataclasses.replace(onnxrt, name="fake2", flag="--fake2")
    assert fake.emulates_storage  # a property of the kind, not of its name


def test_common_options_are_declared_once():
    from toolkit.cli.options import CommonOptions, _common_params, take_common_options

    declared = {f for _field, d in declarations(CommonOptions) for f in d.flags}
    assert {o for p in _common_params() for o in p.opts} == declared
    rest, common = take_common_options(
        ["-vv", "run", "m.onnx", "--log-format", "timestamp", "line-info", "--model-type=onnx", "-q", "--onnxrt"]
    )
    assert rest == ["run", "m.onnx", "--onnxrt"]
    assert (common.verbose, common.quiet, common.log_format, common.model_type) == (
        2, 1, ["timestamp", "line-info"], "onnx")


def test_a_common_option_given_to_a_command_directly_is_applied(monkeypatch):
    """A command invoked without main (the common options are then its own Click parameters)."""
    from toolkit.cli import output
    from toolkit.cli.app import get_command

    applied = []
    monkeypatch.setattr(output, "configure", lambda level=None, **kw: applied.append(level))
    command = get_command("inspect").commands["inspect"].commands["model"]
    with pytest.raises(BaseException):
        command.main(["missing.onnx", "-vv"], standalone_mode=False)
    assert applied and applied[0] == output.EXTRA_VERBOSE


def _leaf_commands(cmd, path=()):
    subs = getattr(cmd, "commands", None)
    if subs:
        for name, sub in subs.items():
            yield from _leaf_commands(sub, path + (name,))
    else:
        yield " ".join(path), cmd


def test_every_command_option_comes_from_a_declaration():
    """Every option of every command is a declared field (bound with cli.options.bind), a common
    option, a runner kind's own flag or --help: none is named in a command's signature."""
    from toolkit.cli.app import get_command
    from toolkit.cli.options import CommonOptions

    common = {f for _field, d in declarations(CommonOptions) for f in d.flags} | {"-h", "--help"}
    kind_flags = {k.flag for k in registry.KINDS.values()}
    commands = dict(_leaf_commands(get_command()))
    assert len(commands) >= 10, sorted(commands)
    for path, cmd in commands.items():
        assert cmd.declares, f"{path}: its options dataclasses are not given (cli.options.command_kwargs(declares=...))"
        declared = {f for cls in cmd.declares for _field, d in declarations(cls) for f in d.flags}
        for param in cmd.params:
            if param.param_type_name != "option":
                continue
            flags = {o for o in param.opts + param.secondary_opts}
            if "/" in param.opts[0] or param.secondary_opts:  # --validate/--no-validate: declared as one flag
                flags = {"/".join(param.opts + param.secondary_opts)} | flags
            owned = flags & (declared | common | (kind_flags if path == "run" else set()))
            assert owned, f"{path}: {param.opts} is declared in no options dataclass"


def test_no_cli_module_names_options_in_a_signature_or_a_table():
    """Options are declared on dataclass fields only: no ``*_OPTS`` help tables, and no function
    of toolkit/cli takes a ``typer.Option``/``typer.Argument``/``Annotated`` parameter (the root's
    eager ``--version`` aside: it belongs to no command)."""
    import ast
    import pathlib

    import toolkit

    found = []
    for path in sorted((pathlib.Path(toolkit.__file__).parent / "cli").glob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
            for target in targets:
                if isinstance(target, ast.Name) and target.id.endswith("_OPTS"):
                    found.append(f"{path.name}:{node.lineno}: help table {target.id}")
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or node.name == "_root":
                continue
            args = node.args
            for arg, default in zip(args.args + args.kwonlyargs,
                                    [None] * (len(args.args) - len(args.defaults)) + args.defaults + args.kw_defaults):
                parts = [x for x in (arg.annotation, default) if x is not None]
                text = " ".join(ast.unparse(x) for x in parts)
                aliases = [n.id for x in parts for n in ast.walk(x) if isinstance(n, ast.Name)
                           and n.id.endswith(("Opt", "Arg"))]  # ModelArg, SeedOpt...
                if aliases or any(word in text for word in ("Option(", "Argument(", "Annotated")):
                    found.append(f"{path.name}:{arg.lineno}: {node.name}({arg.arg}: {text})")
    assert not found, "\n".join(found)

"""The options every command shares, and how a command's options dataclass becomes its parameters.

- :class:`ToolkitCommand`: the ``cls=`` of every command (:func:`command_kwargs`): the grammar of
  :mod:`toolkit.cli.grammar` with toolkit's common options, help sections and refused options.
- :class:`CommonOptions`: ``-v``, ``-q``, ``--log-file``... taken anywhere on the command line.
- :func:`bind` / :func:`values_for`: a command's options dataclass (each option declared once,
  :mod:`toolkit.core.declare`) as the command's parameters, and back.

Nothing heavy is imported here: the CLI must start fast.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import os
import typing
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import typer

from toolkit.cli import output
from toolkit.cli.grammar import TYPED_ARGS, GrammarCommand, is_grouped, is_value, split_group, take_flags
from toolkit.cli.unsupported import UNSUPPORTED_OPTIONS
from toolkit.core import limits
from toolkit.core.declare import Declared, declarations, in_order, switch
from toolkit.core.declare import option as declare
from toolkit.core.errors import UsageError

try:  # Python >= 3.9
    from typing import Annotated
except ImportError:  # pragma: no cover
    from typing_extensions import Annotated

# ------------------------------------------------------------ options common to every command
#
# Accepted anywhere on the command line before ``--check``/``--``, in the places Polygraphy
# accepts them (``toolkit surgeon -v sanitize m.onnx`` and ``toolkit surgeon sanitize m.onnx -v``):
# :func:`take_common_options` takes them out of argv before Click parses it. Every command also
# declares them (LOGGING_PANEL in its help), so a command invoked directly gets them too.

LOGGING_PANEL = "Logging"

# model types this product reads; anything else Polygraphy knows gets a clear refusal
MODEL_TYPES = {"onnx": None, "engine": ("run", "inspect")}
POLYGRAPHY_MODEL_TYPES = ("frozen", "keras", "ckpt", "onnx", "engine", "uff", "trt-network-script", "caffe")


@dataclass
class CommonOptions:
    """What the common options asked for, each declared once: :func:`take_common_options` reads
    them from argv by these declarations (an ``int`` counts its flag, ``-vv`` included; a list
    takes one or more values among its completions), and every command shows them in its help."""

    verbose: int = declare("-v", "--verbose", default=0, help="More detail; repeat for more (-vv, -vvv).")
    quiet: int = declare("-q", "--quiet", default=0,
                        help="Less: -q shows only warnings, errors and verdicts; -qq only errors.")
    verbosity: List[str] = declare("--verbosity", metavar="LEVEL", factory=list, complete=tuple(output.LEVEL_NAMES),
                                  help="Log level: ultra_verbose ... verbose, info (default), warning, error, critical.")
    silent: bool = switch("--silent", help="Print nothing but an error line when something fails.")
    log_file: Optional[str] = declare("--log-file", metavar="PATH",
                                     help="Also write the log to this file (created with its folders).")
    log_format: List[str] = declare("--log-format", metavar="FORMAT", factory=list, complete=output.LOG_FORMATS,
                                   help="Log line format: timestamp, line-info, no-colors (one or more).")
    model_type: Optional[str] = declare("--model-type", metavar="TYPE", complete=("onnx", "engine"),
                                       help="Type of MODEL: onnx (default); engine for TensorRT engines.")
    max_tensor_size: Optional[str] = declare("--max-tensor-size", metavar="SIZE",
                                            help="Largest array a data file may hold (default 1G).")
    max_nodes: Optional[str] = declare("--max-nodes", metavar="N",
                                      help="Most nodes a model may have with its local functions inlined "
                                           "(default 100000).")

    def level(self) -> int:
        if self.silent:
            return output.SILENT
        plain = [v for v in self.verbosity if ":" not in v]
        if plain:
            return output.LEVEL_NAMES[plain[-1].lower()]
        return output.level_from_counts(self.verbose, self.quiet)

    def apply(self, command: Optional[str] = None, set_level: bool = True) -> None:
        """Check the values (UsageError, exit 2) and configure logging."""
        self._check_log_values()
        if self.model_type is not None:
            check_model_type(self.model_type, command)
        self._set_limits()
        output.configure(level=self.level() if set_level else None, log_file=self.log_file, formats=self.log_format)
        if self.model_type is not None:
            output.state.model_type = self.model_type


    def _check_log_values(self) -> None:
        """--verbosity names levels (PATH:LEVEL too), --log-format known formats."""
        for v in self.verbosity:
            lvl = v.rsplit(":", 1)[-1].lower()
            if lvl not in output.LEVEL_NAMES:
                raise UsageError(
                    f"--verbosity {v}: unknown level '{lvl}'; use one of: {', '.join(output.LEVEL_NAMES)} "
                    "(or PATH:LEVEL)"
                )
        for f in self.log_format:
            if f not in output.LOG_FORMATS:
                raise UsageError(f"--log-format {f}: use one or more of: {', '.join(output.LOG_FORMATS)}")

    def _set_limits(self) -> None:
        """--max-tensor-size and --max-nodes, or the defaults: every command starts from them (a library
        caller may run several commands in one process)."""
        limits.max_tensor_bytes = (limits.parse_size(self.max_tensor_size) if self.max_tensor_size is not None
                                   else limits.DEFAULT_TENSOR_BYTES)
        limits.max_nodes = limits.parse_count(self.max_nodes) if self.max_nodes is not None else limits.DEFAULT_NODES


def check_model_type(value: str, command: Optional[str]) -> None:
    kind = value.lower()
    if kind in MODEL_TYPES:
        where = MODEL_TYPES[kind]
        if where is None or command is None or command in where:
            return
        raise UsageError(f"--model-type {value} is not supported by '{command}': it reads ONNX models only")
    known = "a Polygraphy model type" if kind in POLYGRAPHY_MODEL_TYPES else "not a model type"
    raise UsageError(
        f"--model-type {value} is not supported ({known}): toolkit reads ONNX models (and TensorRT engines "
        "for run --trt and inspect model); export the model to ONNX first, e.g. with tf2onnx or torch.onnx.export"
    )


def take_common_options(argv: List[str]):
    """Split ``argv`` into (the rest, :class:`CommonOptions`): the common options are taken out
    wherever they are before ``--check``/``--`` (:func:`toolkit.cli.grammar.take_flags`)."""
    opts = CommonOptions()
    return take_flags(argv, opts), opts


def _common_params():
    """The common options as Click parameters (help, and commands invoked without ``main``)."""

    from typer.core import TyperOption

    hints = typing.get_type_hints(CommonOptions)
    params = []
    for f, decl in declarations(CommonOptions):
        hint = hints[f.name]
        kw: dict = {"count": True, "default": 0} if hint is int else {"is_flag": True, "default": False} \
            if hint is bool else {"multiple": True} if typing.get_origin(hint) is list else {}
        params.append(TyperOption(
            param_decls=[f"common_{f.name}", *decl.flags], help=decl.help, expose_value=False,
            rich_help_panel=LOGGING_PANEL, callback=_common_callback, metavar=decl.metavar, **kw,
        ))
    return params


def _common_callback(ctx, param, value):
    # Only reached with a value when the option is still on the command line, i.e. the
    # command was invoked without `main` (which takes the common options out first).
    if value in (None, 0, False, (), []):
        return
    opts = CommonOptions()
    name = param.name[len("common_"):]
    attr = {"verbosity": list, "log_format": list}.get(name, lambda v: v)(value)
    setattr(opts, name, attr)
    opts.apply(ctx.command.name, set_level=name in ("verbose", "quiet", "verbosity", "silent"))


# Help sections of options several commands share (a command may place its own elsewhere).
SHARED_PANELS = {
    **{o: "Inputs" for o in ("--seed", "--val-range", "--iterations", "--load-inputs", "--data-loader-script",
                             "--data-loader-func-name", "--save-inputs", "--input-shapes", "--model-input-shapes")},
    **{o: "Shape inference" for o in ("--force-fallback-shape-inference", "--no-shape-inference",
                                      "--no-onnxruntime-shape-inference", "--no-per-pass-shape-inference",
                                      "--shape-inference")},
    **{o: "External data" for o in ("--external-data-dir", "--ignore-external-data", "--save-external-data",
                                    "--external-data-path", "--external-data-size-threshold",
                                    "--link-external-data")},
}
PANEL_ORDER = ["Options", "Inputs", "Outputs and comparison", "Shape inference", "External data", "ONNX-Runtime",
               "TensorRT"]

class ToolkitCommand(GrammarCommand):
    """Every toolkit command: Polygraphy's grammar, the common options in the Logging section
    last, the shared help sections, the Polygraphy options toolkit refuses with advice."""

    refused = UNSUPPORTED_OPTIONS
    shared_panels = SHARED_PANELS
    panel_order = tuple(PANEL_ORDER)
    last_panel = LOGGING_PANEL
    common_params = staticmethod(lambda: _common_params())


def command_kwargs(
    help_text: Optional[str] = None,
    *,
    declares: Sequence[type] = (),
    examples: Sequence[str] = (),
    cls: typing.Type[ToolkitCommand] = ToolkitCommand,
    **extra: Any,
) -> dict:
    """Keyword arguments for ``app.command(...)`` that every toolkit command uses: ``declares``, the
    options dataclasses its parameters are bound from (:func:`bind`), and ``examples``, the lines
    its help ends with, go to its command class (``cls``, a :class:`ToolkitCommand`)."""
    kw: dict = dict(cls=cls.variant(declares=declares, examples=examples),
                    context_settings={"help_option_names": ["-h", "--help"]})
    if help_text is not None:
        kw["help"] = help_text
    kw.update(extra)
    return kw


# ---------------------------------------------------------------------- declaring options
#
# An option is declared once, on the field of the options dataclass it fills
# (toolkit.core.declare): flags, help, panel, metavar, completions. :func:`bind` turns the
# declared fields of a dataclass into the parameters of a Typer command, and
# :func:`values_for` turns the parsed parameters back into the dataclass's values:
#
#     @dataclass
#     class ConvertOptions:
#         model: str = argument("Path to the ONNX model.", "MODEL")
#         fp16_io: bool = option("--fp16-io", default=False, help="Make float32 graph inputs and outputs float16 too.")
#
#     @app.command("convert", **command_kwargs())
#     @bind(ConvertOptions)
#     def convert_command(ctx: typer.Context, **params) -> None:
#         opts = ConvertOptions(**values_for(ConvertOptions, params))
#
# Every command works so; options several commands take are declared once in
# toolkit.core.shared_options (``external_data_dir: Optional[str] = declared(S.EXTERNAL_DATA_DIR)``).


def completes(values: Any):
    """A Typer ``autocompletion`` for a choice list, ``"runner-spec"`` (every runner spec) or
    ``"mark-all"`` (``mark``, then ``all``: ``--onnx-outputs mark all``)."""
    if not values:
        return None

    def complete(ctx: typer.Context, incomplete: str):
        if values == "mark-all":
            last = (ctx.meta.get(TYPED_ARGS) or [""])[-1]
            choices: Any = ["all"] if last == "mark" else ["mark"] if not is_value(last) else []
        else:
            choices = runner_specs() if values == "runner-spec" else values
        return [v for v in choices if v.startswith(incomplete)]

    return complete


def runner_specs() -> List[str]:
    """Every runner spec a shell may complete: each kind, and each kind with one spec option."""
    from toolkit.run.registry import KINDS  # the root --help never loads the registry

    specs = []
    for kind in KINDS.values():
        specs.append(kind.name)
        for name, opt in kind.spec_options().items():
            if opt.choices:
                specs += [f"{kind.name}:{name}={c}" for c in opt.choices]
            else:  # a switch, or KEY= for a free value (onnxrt:providers=)
                specs.append(f"{kind.name}:{name}" + ("=" if opt.convert else ""))
    return specs


def parameter(decl: Declared, hint: Any) -> Any:
    """The Typer ``Annotated`` type of one declared value of type ``hint``."""

    if decl.argument:
        typ = hint if decl.required else Optional[hint]
        return Annotated[typ, typer.Argument(help=decl.help, metavar=decl.metavar)]
    if typing.get_origin(hint) in (list, List):
        (item,) = typing.get_args(hint)
        typ = Optional[List[str] if typing.get_origin(item) in (list, List) else List[item]]  # type: ignore[valid-type]
    else:
        typ = hint
    info = typer.Option(
        *decl.flags, help=decl.help, metavar=decl.metavar, rich_help_panel=decl.panel,
        autocompletion=completes(decl.complete),
    )
    return Annotated[typ, info]


def _fields_for_cli(cls: Any):
    """(field, declaration, the type the command line gives) of every option of ``cls``."""
    hints = typing.get_type_hints(cls)
    for f, decl in declarations(cls):
        if decl.flags or decl.argument:
            yield f, decl, hints[f.name] if decl.takes is None else decl.takes


def _parameters(cls: Any, prefix: str = "", panel: Optional[str] = None):
    """(arguments, options, parsers) of the dataclass ``cls``: ``inspect.Parameter``s named
    ``prefix + field``, and the parser of each option that has one (``Declared.parse``) by that
    name (a list option's parser gets a list, [] when the option is not given); ``panel``: the
    help panel of a declaration that names none."""

    args: List[Any] = []
    opts: List[Tuple[Any, Optional[str]]] = []
    parsers: Dict[str, Callable[[Any], Any]] = {}
    for f, decl, hint in _fields_for_cli(cls):
        if decl.parse is not None:
            listed = typing.get_origin(hint) in (list, List)
            parsers[prefix + f.name] = functools.partial(_parse_list, decl.parse) if listed else decl.parse
        if panel and not decl.panel:
            decl = decl.replace(panel=panel)
        param = inspect.Parameter(prefix + f.name, inspect.Parameter.KEYWORD_ONLY, default=_cli_default(f, decl, hint),
                                  annotation=parameter(decl, hint))
        if decl.argument:
            args.append(param)
        else:
            opts.append((param, prefix + decl.after if decl.after else None))
    return args, opts, parsers


def _cli_default(f: "dataclasses.Field", decl: Declared, hint: Any) -> Any:
    """What the command line gives for field ``f`` when its option is left out."""
    if decl.argument:
        return inspect.Parameter.empty if decl.required else None
    if decl.parse is not None:  # (the field's default is the parsed one)
        return False if hint is bool else None
    if f.default_factory is not dataclasses.MISSING:  # lists: None when not given
        return None
    if f.default is dataclasses.MISSING or decl.needed:  # a required option
        return inspect.Parameter.empty
    return f.default


def _help_order(opts: List[Tuple[Any, Optional[str]]]) -> List[Any]:
    """The parameters of ``opts`` ((parameter, the option it follows in the help or None)), each
    one that names the option it follows (``Declared.after``) moved there."""
    return [p for p, _after in in_order(opts, lambda item: item[0].name, lambda item: item[1])]


def bind(cls: Any, *, extra: Sequence[Any] = (), more: Sequence[Tuple[Any, str, Optional[str]]] = ()):
    """Decorate ``body(ctx, **params)`` with the signature Typer reads: ``ctx``, the dataclass's
    argument, the ``extra`` parameters (``inspect.Parameter``), then one option per declared field,
    then those of each ``(dataclass, prefix, panel)`` of ``more`` (a runner kind's own options:
    parameters named ``prefix + field``, read back with ``values_for(cls, params, prefix)``)."""

    def decorate(body):
        ctx = inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=typer.Context)
        args, opts, parsers = _parameters(cls)
        for other, prefix, panel in more:
            _, more_opts, more_parsers = _parameters(other, prefix, panel)
            opts += more_opts
            parsers.update(more_parsers)
        params = [ctx] + args + list(extra) + _help_order(opts)

        @functools.wraps(body)
        def typed(ctx, **given):  # each option with a parser of its own reaches the command typed by it
            return body(ctx, **{k: parsers[k](v) if k in parsers else v for k, v in given.items()})

        typed.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        typed.__annotations__ = {p.name: p.annotation for p in params}
        return typed

    return decorate


def _parse_list(parse: Callable[[Any], Any], values: Optional[Sequence[Any]]) -> Any:
    return parse(list(values or []))


def values_for(cls: Any, params: Mapping[str, Any], prefix: str = "") -> dict:
    """The keyword arguments of ``cls`` for the parsed ``params`` (its declared fields, named
    ``prefix + field``): an option with its own parser as typed by it, other lists given as None
    made [], a grouped list (``List[List[str]]``) one list per occurrence."""
    out = {}
    for f, decl, hint in _fields_for_cli(cls):
        if prefix + f.name in params:
            out[f.name] = _value(params[prefix + f.name], decl, hint)
    return out


def _value(value: Any, decl: Declared, hint: Any) -> Any:
    if decl.parse is not None:  # (typed by its own parser where the command line read it)
        return value
    if is_grouped(hint):
        return [split_group(g) for g in value or []]
    if typing.get_origin(hint) in (list, List):  # (what the command line gives: a list, or None)
        return list(value or [])
    return value


DATA_EXTENSIONS = (".json", ".npz")


def check_data_output(flag: str, path: Optional[str]) -> None:
    """Refuse a data file name whose extension is neither .json nor .npz (exit 2): writing
    JSON to ``out.npy`` would mislead. No extension means JSON, as in Polygraphy. An empty name
    is refused too (it would write nothing, without a word)."""

    if path == "":
        raise UsageError(f"{flag}: the file name is empty: give a file name (or '-' for stdout)")
    if not path or path == "-":
        return
    ext = os.path.splitext(os.path.basename(path))[1].lower()
    if ext and ext not in DATA_EXTENSIONS:

        raise UsageError(
            f"{flag} {path}: toolkit writes data files as .json (Polygraphy's format) or .npz, not {ext}; "
            f"name the file {os.path.splitext(path)[0]}.json or .npz"
        )

"""Command-line plumbing shared by every command.

- :class:`ToolkitCommand`: the ``cls=`` for every command. It lets list options take
  several values after one flag (``--onnx-outputs mark all``, ``--fail-regex A B``),
  as Polygraphy spells them, and takes everything after ``--check`` verbatim.
- :func:`bind` / :func:`values_for`: a command's options dataclass (each option declared once,
  :mod:`toolkit.core.declare`) as the command's parameters, and back.

Nothing heavy is imported here: the CLI must start fast.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import re
import typing
from dataclasses import dataclass
from typing import Any, List, Mapping, Optional, Sequence, Tuple

import typer
from typer.core import TyperCommand

from toolkit.cli import output
from toolkit.core import limits
from toolkit.core.declare import Declared, declaration, declarations, switch
from toolkit.core.declare import option as declare
from toolkit.core.errors import UsageError

try:  # Python >= 3.9
    from typing import Annotated
except ImportError:  # pragma: no cover
    from typing_extensions import Annotated

# Separates the values of one occurrence of a grouped option: one declared ``List[List[str]]``,
# each occurrence of the flag one group of values (e.g. one TensorRT profile).
GROUP_SEP = "\x1f"
# Options after which the rest of the command line is taken verbatim.
REST_OPTIONS = ("--check",)

_NEG_NUMBER = re.compile(r"^-(\d|\.\d)")

# ------------------------------------------------------------ options common to every command
#
# Accepted anywhere on the command line before ``--check``/``--``, in the places Polygraphy
# accepts them (``toolkit surgeon -v sanitize m.onnx`` and ``toolkit surgeon sanitize m.onnx -v``):
# :func:`take_common_options` takes them out of argv before Click parses it. Every command also
# declares them (LOGGING_PANEL in its help), so a command invoked directly gets them too.

LOGGING_PANEL = "Logging"

# Examples at the end of each command's help (command path without "toolkit").
EXAMPLES = {
    "run": [
        "toolkit run model.onnx --onnxrt --save-inputs inputs.json --save-outputs golden.json",
        "toolkit run model.onnx --onnxrt --load-inputs inputs.json --load-outputs golden.json --atol 1e-4",
        "toolkit run model.onnx --trt --onnxrt --input-shapes x:[1,3,224,224]",
    ],
    "inspect model": [
        "toolkit inspect model model.onnx --mode=basic",
        "toolkit inspect model model.onnx --show layers attrs --json > model.json",
    ],
    "inspect data": [
        "toolkit inspect data golden.json",
        "toolkit inspect data inputs.json --show-values --num-items 5",
    ],
    "surgeon extract": [
        "toolkit surgeon extract model.onnx --inputs x:auto:auto --outputs y:auto -o sub.onnx",
    ],
    "surgeon sanitize": [
        "toolkit surgeon sanitize model.onnx --fold-constants -o folded.onnx",
        "toolkit surgeon sanitize model.onnx --override-input-shapes x:[1,3,224,224] -o fixed.onnx",
    ],
    "data to-input": [
        "toolkit data to-input inputs.json layerwise.json -o layerwise_inputs.json",
    ],
    "data merge": [
        "toolkit data merge inputs.json layerwise.json -o layerwise_inputs.json",
    ],
    "convert": [
        "toolkit convert model.onnx --fp-to-fp16 -o model_fp16.onnx",
        "toolkit convert model.onnx --fp-to-fp16 --keep-fp32 'Softmax*' LayerNormalization -o mixed.onnx",
    ],
    "debug precision": [
        "toolkit debug precision model.onnx -o mixed.onnx",
        "toolkit debug precision model.onnx -o mixed.onnx --load-inputs inputs.json --atol 1e-2 --rtol 1e-2",
    ],
    "debug reduce": [
        "toolkit debug reduce model.onnx -o reduced.onnx --check toolkit run polygraphy_debug.onnx --onnxrt",
        "toolkit debug reduce model.onnx -o reduced.onnx --mode=bisect --load-inputs layerwise_inputs.json "
        "--check toolkit run polygraphy_debug.onnx --onnxrt --load-inputs layerwise_inputs.json "
        "--load-outputs layerwise_golden.json",
    ],
}
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
        if self.model_type is not None:
            check_model_type(self.model_type, command)
        if self.max_tensor_size is not None:
            limits.max_tensor_bytes = limits.parse_size(self.max_tensor_size)
        if self.max_nodes is not None:
            limits.max_nodes = limits.parse_count(self.max_nodes)
        output.configure(level=self.level() if set_level else None, log_file=self.log_file, formats=self.log_format)
        if self.model_type is not None:
            output.state.model_type = self.model_type


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


def _takes(decl: Declared, token: str) -> bool:
    """Whether ``token`` is one more value of the list option ``decl`` (``--verbosity`` levels
    also as PATH:LEVEL)."""
    return token.rsplit(":", 1)[-1].lower() in decl.complete


def _common_flags():
    """{flag: (field name, declaration, kind)}: kind is count, switch, list or value."""

    hints = typing.get_type_hints(CommonOptions)
    table = {}
    for f, decl in declarations(CommonOptions):
        hint = hints[f.name]
        kind = {int: "count", bool: "switch"}.get(hint) or ("list" if typing.get_origin(hint) is list else "value")
        table.update({flag: (f.name, decl, kind) for flag in decl.flags})
    return table


def take_common_options(argv: List[str]):
    """Split ``argv`` into (the rest, :class:`CommonOptions`), by CommonOptions' declarations.

    Stops at ``--check`` (the rest belongs to the check command) and at ``--``. A short
    counted flag may repeat its letter (``-vvv``); a list option takes one or more values.
    """

    opts = CommonOptions()
    table = _common_flags()
    counted = {flag[1]: name for flag, (name, _d, kind) in table.items() if kind == "count" and len(flag) == 2}
    rest: List[str] = []
    i, n = 0, len(argv)
    while i < n:
        tok = argv[i]
        flag, eq, inline = tok.partition("=") if tok.startswith("--") else (tok, "", "")
        if tok == "--" or flag in REST_OPTIONS:
            rest.extend(argv[i:])
            break
        repeated = re.fullmatch(r"-(\w)\1*", tok)
        if repeated and repeated.group(1) in counted:
            name = counted[repeated.group(1)]
            setattr(opts, name, getattr(opts, name) + len(tok) - 1)
            i += 1
            continue
        if flag not in table:
            rest.append(tok)
            i += 1
            continue
        name, decl, kind = table[flag]
        i += 1
        if kind in ("count", "switch"):
            setattr(opts, name, getattr(opts, name) + 1 if kind == "count" else True)
            continue
        if not eq and (i >= n or (argv[i].startswith("-") and argv[i] != "-")):
            raise UsageError(f"{flag} needs a value")
        value = inline if eq else argv[i]
        i += 0 if eq else 1
        if kind == "value":
            setattr(opts, name, value)
            continue
        values = [value]
        while not eq and i < n and _takes(decl, argv[i]):
            values.append(argv[i])
            i += 1
        getattr(opts, name).extend(values)
    return rest, opts


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


def _is_value(token: str) -> bool:
    """True for tokens that are values, not options: ``-`` (stdio) and negative numbers count."""
    return token == "-" or not token.startswith("-") or bool(_NEG_NUMBER.match(token))


def split_group(value: str) -> List[str]:
    return [v for v in value.split(GROUP_SEP) if v != ""]


def _default_in_help(param) -> None:
    """Defaults are shown one way: "(default X)" in the help text, never Click's "[default: X]"."""
    if param.param_type_name != "option":
        return
    text = (param.help or "").replace("(default: ", "(default ")
    param.help = text
    param.show_default = False
    if getattr(param, "is_flag", False) or getattr(param, "count", False):
        return
    default = param.default
    if default not in (None, "", (), []) and not callable(default) and "default" not in text.lower():
        shown = " ".join(map(str, default)) if isinstance(default, (list, tuple)) else str(default)
        param.help = f"{text.rstrip()} (default {shown})".strip()


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

_PATH_WORDS = ("save", "load", "path", "file", "dir", "cache", "engine", "output", "artifact", "replay", "script",
               "report", "iter-info", "min-good")


def placeholder(option: str, type_name: str, multiple: bool) -> str:
    """One placeholder style for every option without its own metavar: PATH for files, N for
    counts, NAME:SHAPE for shapes, [NAME:]VALUE for per-tensor values, else the option's name."""
    more = "..." if multiple else ""
    if option.endswith("shapes"):
        return "NAME:SHAPE" + more
    if option.endswith(("-outputs", "-inputs")) and not option.startswith(("save", "load")):
        return "NAMES..." if multiple else "NAME"
    if "threshold" in option:
        return "SIZE" + more
    if option.endswith("upper-bound"):
        return "[NAME:]N" + more
    if option == "keep-fp32":
        return "NAMES..." if multiple else "NAME"
    if option == "val-range":
        return "[NAME:]RANGE" + more
    if option in ("pool-limit", "memory-pool-limit"):
        return "POOL:SIZE" + more
    if any(w in option for w in _PATH_WORDS):
        return "PATH" + more
    if type_name in ("integer", "int", "integer range"):
        return "N" + more
    if type_name == "float":
        return "NUMBER" + more
    if multiple and option in ("atol", "rtol", "abs-tol", "rel-tol"):
        return "[NAME:]VALUE..."
    if multiple and option == "check-error-stat":
        return "[NAME:]STAT..."
    return option.upper().replace("-", "_") + more


class ToolkitCommand(TyperCommand):
    """A Typer command whose list options are greedy, and whose ``--check`` takes the rest.

    Options without a metavar show their own name in help (``--atol ATOL...``), not a type.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        taken = {o for p in self.params for o in getattr(p, "opts", ())}
        self.params.extend(p for p in _common_params() if not taken.intersection(p.opts))
        for param in self.params:
            if param.param_type_name != "option" or param.metavar is not None or getattr(param, "is_flag", False):
                continue
            name = next((o for o in param.opts if o.startswith("--")), param.opts[0]).lstrip("-")
            param.metavar = placeholder(name, getattr(param.type, "name", ""), param.multiple)
        for param in self.params:
            _default_in_help(param)
            panel = next((SHARED_PANELS[o] for o in getattr(param, "opts", ()) if o in SHARED_PANELS), None)
            if panel and not getattr(param, "rich_help_panel", None):
                param.rich_help_panel = panel

    def collect_usage_pieces(self, ctx):
        # `Usage: toolkit run [OPTIONS] MODEL`, not `{MODEL}`
        pieces = super().collect_usage_pieces(ctx)
        return [p[1:-1] if p.startswith("{") and p.endswith("}") else p for p in pieces]

    def format_options(self, ctx, formatter) -> None:
        """Arguments, then options in sections (help panels): the command's own options first,
        then each panel in the order it first appears, the common options (Logging) last."""
        args: list = []
        panels: dict = {}
        for param in self.get_params(ctx):
            rec = param.get_help_record(ctx)
            if rec is None:
                continue
            if param.param_type_name == "argument":
                args.append(rec)
                continue
            rec = (rec[0], rec[1].replace("  [x>=0]", ""))
            panel = getattr(param, "rich_help_panel", None) or "Options"
            if "--help" in getattr(param, "opts", ()):
                panel = LOGGING_PANEL if LOGGING_PANEL in panels else "Options"
            panels.setdefault(panel, []).append(rec)
        if args:
            with formatter.section("Arguments"):
                formatter.write_dl(args)
        known = PANEL_ORDER
        order = sorted(panels, key=lambda p: (p == LOGGING_PANEL, known.index(p) if p in known else len(known)))
        for panel in order:
            with formatter.section(panel):
                formatter.write_dl(panels[panel])

    def format_epilog(self, ctx, formatter) -> None:
        super().format_epilog(ctx, formatter)
        examples = EXAMPLES.get(" ".join(ctx.command_path.split()[1:]))
        if examples:
            with formatter.section("Examples"):
                for line in examples:  # never wrapped: they are meant to be copied
                    formatter.write(f"{'':>{formatter.current_indent}}{line}\n")

    def _multi_opts(self):
        multi = set()
        for param in self.params:
            if getattr(param, "multiple", False) and getattr(param, "param_type_name", "") == "option":
                multi.update(o for o in param.opts if o.startswith("--"))
        return multi

    def _grouped_opts(self):
        """Flags of the declared ``List[List[str]]`` options (see :func:`bind`)."""
        return getattr(self.callback, "grouped_flags", frozenset())

    def _rest_param(self):
        for param in self.params:
            for opt in getattr(param, "opts", ()):
                if opt in REST_OPTIONS:
                    return param, opt
        return None, None

    def parse_args(self, ctx, args):
        args = expand_prefixes(list(args), self.params)
        rest: Optional[List[str]] = None
        rest_param, rest_opt = self._rest_param()
        if rest_param is not None:
            for i, tok in enumerate(args):
                if tok == "--":
                    break
                if tok == rest_opt or tok.startswith(rest_opt + "="):
                    first = [tok.split("=", 1)[1]] if "=" in tok else []
                    rest = first + args[i + 1 :]
                    args = args[:i]
                    break
        args = self._expand_multi(args)
        out = super().parse_args(ctx, args)
        if rest_param is not None:
            ctx.params[rest_param.name] = rest
        return out

    def _expand_multi(self, args: List[str]) -> List[str]:
        multi = self._multi_opts()
        if not multi:
            return args
        out: List[str] = []
        i = 0
        n = len(args)
        while i < n:
            tok = args[i]
            if tok == "--":
                out.extend(args[i:])
                break
            if tok in multi:
                values = []
                j = i + 1
                while j < n and _is_value(args[j]):
                    values.append(args[j])
                    j += 1
                if not values:
                    out.append(tok)  # let click report the missing value
                elif tok in self._grouped_opts():
                    out.extend([tok, GROUP_SEP.join(values)])
                else:
                    for v in values:
                        out.extend([tok, v])
                i = j
                continue
            out.append(tok)
            i += 1
        return out


def expand_prefixes(args: List[str], params: Sequence[Any]) -> List[str]:
    """Long options abbreviated as argparse allows (``--fold-constant``, ``--iter 2``): an
    unambiguous prefix of one option's flags becomes that flag; a prefix of several options is
    a usage error naming them. Stops at ``--`` and at ``--check`` (the rest is the check's)."""
    flags: dict = {o: id(p) for p in params for o in getattr(p, "opts", ()) + getattr(p, "secondary_opts", ())
                   if o.startswith("--")}
    # the options Polygraphy has that toolkit refuses count too (each its own): an exact one keeps
    # its advice, and a prefix of one of them and of an option of ours is ambiguous, as in Polygraphy
    flags.update({o: o for o in UNSUPPORTED_OPTIONS if o not in flags})
    out = list(args)
    for i, tok in enumerate(args):
        name, eq, value = tok.partition("=")
        if tok == "--" or name in REST_OPTIONS:
            break
        if not name.startswith("--") or name in flags or len(name) < 3:
            continue
        matches = [o for o in flags if o.startswith(name)]
        owners = {flags[o] for o in matches}
        if len(owners) > 1:

            raise UsageError(f"ambiguous option {name}: could match {', '.join(sorted(matches))}")
        if matches:
            out[i] = matches[0] + eq + value
            if matches[0] in REST_OPTIONS:
                break
    return out


def command_kwargs(help_text: Optional[str] = None, **extra):
    """Keyword arguments for ``app.command(...)`` that every toolkit command uses."""
    kw = dict(cls=ToolkitCommand, context_settings={"help_option_names": ["-h", "--help"]})
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
    """A Typer ``autocompletion`` for a choice list (or ``"runner-spec"``: every runner spec)."""
    if not values:
        return None

    def complete(incomplete: str):
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
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        decl = declaration(f)
        if decl is not None and (decl.flags or decl.argument):
            yield f, decl, hints[f.name]


def _parameters(cls: Any, prefix: str = "", panel: Optional[str] = None):
    """(arguments, options) of the dataclass ``cls`` as ``inspect.Parameter``s named
    ``prefix + field``; ``panel``: the help panel of a declaration that names none."""

    args: List[Any] = []
    opts: List[Any] = []
    for f, decl, hint in _fields_for_cli(cls):
        if decl.argument:
            default = inspect.Parameter.empty if decl.required else None
        elif f.default_factory is not dataclasses.MISSING:  # lists: None when not given
            default = None
        elif f.default is dataclasses.MISSING:  # a required option
            default = inspect.Parameter.empty
        else:
            default = f.default
        if panel and not decl.panel:
            decl = decl.replace(panel=panel)
        param = inspect.Parameter(prefix + f.name, inspect.Parameter.KEYWORD_ONLY, default=default,
                                  annotation=parameter(decl, hint))
        (args if decl.argument else opts).append(param)
    return args, opts


def bind(cls: Any, *, extra: Sequence[Any] = (), more: Sequence[Tuple[Any, str, Optional[str]]] = ()):
    """Decorate ``body(ctx, **params)`` with the signature Typer reads: ``ctx``, the dataclass's
    argument, the ``extra`` parameters (``inspect.Parameter``), then one option per declared field,
    then those of each ``(dataclass, prefix, panel)`` of ``more`` (a runner kind's own options:
    parameters named ``prefix + field``, read back with ``values_for(cls, params, prefix)``)."""

    def decorate(body):
        ctx = inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=typer.Context)
        args, opts = _parameters(cls)
        for other, prefix, panel in more:
            opts += _parameters(other, prefix, panel)[1]
        params = [ctx] + args + list(extra) + opts
        body.declares = (cls, *(m[0] for m in more))  # where every option of the command is declared
        body.grouped_flags = frozenset(
            o for c in [cls, *(m[0] for m in more)] for f, d, hint in _fields_for_cli(c) if _is_grouped(hint)
            for o in d.flags
        )
        body.__signature__ = inspect.Signature(params)
        body.__annotations__ = {p.name: p.annotation for p in params}
        return body

    return decorate


def _is_grouped(hint: Any) -> bool:
    """``List[List[str]]``: one list per occurrence of the flag (a TensorRT profile's shapes)."""

    args = typing.get_args(hint) if typing.get_origin(hint) in (list, List) else ()
    return bool(args) and typing.get_origin(args[0]) in (list, List)


def values_for(cls: Any, params: Mapping[str, Any], prefix: str = "") -> dict:
    """The keyword arguments of ``cls`` for the parsed ``params`` (its declared fields, named
    ``prefix + field``): lists given as None made [], a grouped list (``List[List[str]]``) one
    list per occurrence."""
    out = {}
    for f, _decl, hint in _fields_for_cli(cls):
        if prefix + f.name not in params:
            continue
        value = params[prefix + f.name]
        if _is_grouped(hint):
            value = [split_group(g) for g in value or []]
        elif f.default_factory is list:  # type: ignore[comparison-overlap]
            value = list(value or [])
        out[f.name] = value
    return out


def from_params(cls: Any, params: Mapping[str, Any], **overrides: Any) -> Any:
    """The dataclass ``cls`` of a command's parsed parameters named as its fields, list
    fields given as None made [], with ``overrides`` set."""

    kwargs = dict(overrides)
    for f in dataclasses.fields(cls):
        if f.name not in overrides and f.name in params:
            value = params[f.name]
            kwargs[f.name] = list(value or []) if f.default_factory is list else value
    return cls(**kwargs)


# ------------------------------------------------ Polygraphy options that toolkit does not support
#
# An option Polygraphy knows never gets the generic "No such option": the error boundary
# (toolkit.cli.errors) looks the option up here and prints its advice instead (exit 2).
# Add an entry when a Polygraphy option is refused on purpose; remove it when it is supported.
# Keys are option names; values are one sentence saying what to do instead.

_TF = "toolkit runs ONNX models only: convert the TensorFlow model to ONNX first (e.g. with tf2onnx)"
_SCRIPT = "toolkit writes no Python scripts: the command line is the interface, and toolkit's library API is described in docs/api.md"
_TRT_BUILDER = (
    "this TensorRT builder setting is not exposed by toolkit; build the engine with trtexec or Polygraphy "
    "and run it with toolkit run ENGINE --trt"
)
_TRT_PRECISION = (
    "per-layer precision lives in the model (TensorRT 11 builds strongly typed networks and has no precision "
    "constraints): keep layers in fp32 with toolkit convert MODEL --fp-to-fp16 --keep-fp32 NAMES (toolkit debug "
    "precision finds them), then run the converted model with --trt; this works the same on TensorRT 10"
)
_TRT_TACTICS = (
    "tactic replay needs TensorRT's algorithm selector, which TensorRT 11 removed: for identical tactics, save the "
    "engine once with --save-engine and run it again with toolkit run ENGINE --trt"
)
_VISUAL = "toolkit draws no plots: save the outputs (--save-outputs) and inspect them with toolkit inspect data"
_TF32_CKPT = "toolkit reads ONNX models only; TensorFlow checkpoints are not supported"

UNSUPPORTED_OPTIONS = {
    # models other than ONNX
    **{o: _TF for o in ("--tf", "--tftrt", "--use-tftrt", "--minimum-segment-size", "--dynamic-op", "--tf-outputs",
                        "--save-pb", "--save-tensorboard", "--freeze-graph", "--gpu-memory-fraction", "--allow-growth",
                        "--xla", "--save-timeline", "--opset")},
    "--ckpt": _TF32_CKPT,
    "--gen": _SCRIPT,
    "--gen-script": _SCRIPT,
    "--pluginref": "the plugin reference runner is not supported: compare --trt against --onnxrt instead",
    "--trt-network-postprocess-script": _SCRIPT,
    "--trt-npps": _SCRIPT,
    "--trt-config-script": _SCRIPT,
    "--trt-config-postprocess-script": _SCRIPT,
    "--trt-cpps": _SCRIPT,
    "--data-loader-backend-module": "generated data always comes from numpy; use --data-loader-script for your own data",
    "--compare-func-script": "custom comparison scripts are not supported: use --atol/--rtol/--check-error-stat, or compare saved outputs in Python",
    "--postprocess-func-script": "custom post-processing scripts are not supported: use --postprocess top-K, or post-process saved outputs in Python",
    # plots and heatmaps
    **{o: _VISUAL for o in ("--save-heatmaps", "--show-heatmaps", "--save-error-metrics-plot",
                            "--show-error-metrics-plot", "--visual", "--visual-port", "--save-visual", "--histogram")},
    # comparison metrics toolkit does not compute
    **{o: "this comparison metric is not supported: use --atol/--rtol with --check-error-stat elemwise, max, mean, median or quantile"
       for o in ("--l2-threshold", "--l2-tolerance", "--cosine-similarity-threshold", "--psnr-threshold",
                 "--psnr-tolerance", "--snr-threshold", "--snr-tolerance", "--lpips-threshold", "--lpips-tolerance")},
    "--warm-up": "time with --iterations N and read the average inference time",
    "--ignore-external-data": "this command needs the model's weights; --ignore-external-data applies to inspect model, surgeon and debug reduce",
    "--fp-to-fp16": "convert the model first with toolkit convert --fp-to-fp16 (toolkit run accepts --fp-to-fp16 itself)",
    **{o: "run --save-onnx writes the model as one file (with external data only over 2 GB); re-save it with "
          "toolkit surgeon sanitize MODEL -o OUT --save-external-data" for o in (
        "--save-external-data", "--external-data-path", "--external-data-size-threshold")},
    "--no-save-all-tensors-to-one-file": "external weights always go to one file (--external-data-path)",
    "--check-inference": "give the check command instead: --check toolkit run polygraphy_debug.onnx --onnxrt",
    # (options other commands take; the advice is what this command does instead)
    "--list-unbounded-dds": "listing unbounded data-dependent shapes is not supported by this command",
    "--shape-inference": "shapes are always inferred with ONNX shape inference here; drop the option",
    "--do-shape-inference": "shapes are always inferred with ONNX shape inference here; drop the option",
    "--no-onnxruntime-shape-inference": "ONNX-Runtime is used for shapes only with --force-fallback-shape-inference; drop the option",
    "--no-shape-inference": "this command needs shape inference; drop the option",
    "--no-per-pass-shape-inference": "drop the option: shape inference runs between folding passes",
    "--force-fallback-shape-inference": "this command uses ONNX shape inference; toolkit surgeon extract and debug reduce take --force-fallback-shape-inference",
    "--set-unbounded-dds-upper-bound": "bounding data-dependent shapes is not supported by this command",
    "--model-inputs": "use --model-input-shapes, the newer name of this option",
    "--outputs": "this command keeps the model's outputs; choose other outputs with toolkit surgeon extract --outputs",
    "--exclude-outputs": "this command keeps the model's outputs; choose other outputs with toolkit surgeon extract --outputs",
    "--seed": "this command generates no input data; give shapes instead (--model-input-shapes / --override-input-shapes)",
    "--val-range": "this command generates no input data; give shapes instead (--model-input-shapes / --override-input-shapes)",
    "--iterations": "this command uses one set of inputs; iterate in the check command (toolkit run --iterations N)",
    "--iters": "this command uses one set of inputs; iterate in the check command (toolkit run --iterations N)",
    "--load-inputs": "this command infers shapes without data; give shapes with --model-input-shapes or --override-input-shapes",
    "--load-input-data": "this command infers shapes without data; give shapes with --model-input-shapes or --override-input-shapes",
    "--data-loader-script": "save the script's data first (toolkit run MODEL --onnxrt --data-loader-script SCRIPT --save-inputs inputs.json) and pass inputs.json with --load-inputs",
    "--save-accuracy-results": "save the outputs (--save-outputs) instead; the comparison is printed and its verdict is the exit code",
    "--check-average": "each iteration is checked on its own; use --check-error-stat mean for an average over elements",
    "--fail-fast": "every output is compared and reported; the exit code is 1 as soon as one fails",
    "--save-input-blob": "save inputs with --save-inputs (JSON or .npz) instead",
    "--onnx-outputs-by-type": "mark outputs by name or glob pattern with --onnx-outputs instead",
    "--trt-outputs-by-type": "mark outputs by name or glob pattern with --trt-outputs instead",
    "--outputs-by-type": "name the outputs (or 'mark all') with --outputs instead",
    "--ext": "toolkit loads no ONNX extension libraries (onnxruntime-extensions); register custom ops in the model's runtime instead",
    "--onnx-flags": "TensorRT's ONNX parser flags are not exposed by toolkit",
    "--plugin-instancenorm": "TensorRT's ONNX parser flags are not exposed by toolkit",
    "--convert-to": "inspect model prints text or --json; use onnx.helper / netron for other views",
    "--combine-tensor-info": "use inspect model --json, which includes every tensor's dtype and shape",
    # TensorRT builder knobs not exposed
    **{o: _TRT_BUILDER for o in (
        "--fp8", "--sparse-weights", "--version-compatible", "--exclude-lean-runtime", "--calib-base-cls",
        "--calibration-base-class", "--quantile", "--regression-cutoff", "--load-timing-cache",
        "--error-on-timing-cache-miss", "--disable-compilation-cache", "--tactic-sources", "--trt-safety-restricted",
        "--refittable", "--strip-plan", "--use-dla", "--allow-gpu-fallback", "--preview-features",
        "--builder-optimization-level", "--hardware-compatibility-level", "--max-aux-streams", "--quantization-flags",
        "--profiling-verbosity", "--weight-streaming", "--runtime-platform", "--direct-io",
        "--tiling-optimization-level", "--plugins", "--enable-uint8-asymmetric-quantization-dla",
        "--decomposable-attentions", "--tensor-dtypes", "--tensor-datatypes", "--all-tensor-dtypes",
        "--all-tensor-datatypes", "--tensor-formats", "--all-tensor-formats", "--strongly-typed", "--mark-debug",
        "--mark-unfused-tensors-as-debug-tensors", "--save-timing-cache", "--load-runtime",
        "--dla-workspace-allocation-strategy", "--optimization-profile", "--allocation-strategy",
        "--weight-streaming-budget")},
    # TensorRT recipe options, decided one by one (docs/compatibility.md): TensorRT 11 is strongly typed
    **{o: _TRT_PRECISION for o in ("--layer-precisions", "--precision-constraints")},
    **{o: _TRT_TACTICS for o in ("--save-tactics", "--save-tactic-replay", "--load-tactics", "--load-tactic-replay")},
    "--display-as": "toolkit shows the TensorRT view of a model from its engine: build it with toolkit run MODEL "
    "--trt --save-engine model.engine, then run toolkit inspect model model.engine --show layers",
}


def unsupported_advice(option: str) -> Optional[str]:
    """The advice for a Polygraphy option toolkit refuses on purpose, or None."""
    return UNSUPPORTED_OPTIONS.get(option.split("=", 1)[0])


DATA_EXTENSIONS = (".json", ".npz")


def check_data_output(flag: str, path: Optional[str]) -> None:
    """Refuse a data file name whose extension is neither .json nor .npz (exit 2): writing
    JSON to ``out.npy`` would mislead. No extension means JSON, as in Polygraphy."""

    if not path or path == "-":
        return
    ext = os.path.splitext(os.path.basename(path))[1].lower()
    if ext and ext not in DATA_EXTENSIONS:

        raise UsageError(
            f"{flag} {path}: toolkit writes data files as .json (Polygraphy's format) or .npz, not {ext}; "
            f"name the file {os.path.splitext(path)[0]}.json or .npz"
        )

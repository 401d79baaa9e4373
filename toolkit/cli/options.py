"""Command-line plumbing shared by every command.

- :class:`ToolkitCommand`: the ``cls=`` for every command. It lets list options take
  several values after one flag (``--onnx-outputs mark all``, ``--fail-regex A B``),
  as the seeds spell them, and takes everything after ``--check`` verbatim.
- Option aliases used by more than one command, as ``Annotated`` types.

Nothing heavy is imported here: the CLI must start fast.
"""

from __future__ import annotations

import re
from typing import List, Optional

import typer
from typer.core import TyperCommand

try:  # Python >= 3.9
    from typing import Annotated
except ImportError:  # pragma: no cover
    from typing_extensions import Annotated

# Separates the values of one occurrence of a grouped option (see GROUPED_OPTIONS).
GROUP_SEP = "\x1f"
# Options after which the rest of the command line is taken verbatim.
REST_OPTIONS = ("--check",)
# Options where each occurrence is one group of values (e.g. one TensorRT profile).
GROUPED_OPTIONS = frozenset({"--trt-min-shapes", "--trt-opt-shapes", "--trt-max-shapes"})

_NEG_NUMBER = re.compile(r"^-(\d|\.\d)")


def _is_value(token: str) -> bool:
    """True for tokens that are values, not options: ``-`` (stdio) and negative numbers count."""
    return token == "-" or not token.startswith("-") or bool(_NEG_NUMBER.match(token))


def split_group(value: str) -> List[str]:
    return [v for v in value.split(GROUP_SEP) if v != ""]


class ToolkitCommand(TyperCommand):
    """A Typer command whose list options are greedy, and whose ``--check`` takes the rest.

    Options without a metavar show their own name in help (``--atol ATOL...``), not a type.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for param in self.params:
            if param.param_type_name != "option" or param.metavar is not None or getattr(param, "is_flag", False):
                continue
            name = next((o for o in param.opts if o.startswith("--")), param.opts[0]).lstrip("-")
            param.metavar = name.upper().replace("-", "_") + ("..." if param.multiple else "")

    def _multi_opts(self):
        multi = set()
        for param in self.params:
            if getattr(param, "multiple", False) and getattr(param, "param_type_name", "") == "option":
                multi.update(o for o in param.opts if o.startswith("--"))
        return multi

    def _rest_param(self):
        for param in self.params:
            for opt in getattr(param, "opts", ()):
                if opt in REST_OPTIONS:
                    return param, opt
        return None, None

    def parse_args(self, ctx, args):
        args = list(args)
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
                elif tok in GROUPED_OPTIONS:
                    out.extend([tok, GROUP_SEP.join(values)])
                else:
                    for v in values:
                        out.extend([tok, v])
                i = j
                continue
            out.append(tok)
            i += 1
        return out


def command_kwargs(help_text: Optional[str] = None, **extra):
    """Keyword arguments for ``app.command(...)`` that every toolkit command uses."""
    kw = dict(cls=ToolkitCommand, context_settings={"help_option_names": ["-h", "--help"]})
    if help_text is not None:
        kw["help"] = help_text
    kw.update(extra)
    return kw


# ---------------------------------------------------------------------- shared options

# The type of a list option (greedy: several values after one flag).
ListOpt = Optional[List[str]]

ModelArg = Annotated[str, typer.Argument(help="Path to the ONNX model, or '-' to read it from stdin.", metavar="MODEL")]

ExternalDataDirOpt = Annotated[
    Optional[str],
    typer.Option(
        "--external-data-dir",
        "--load-external-data",
        help="Folder holding the model's external data (default: the model's folder).",
    ),
]
IgnoreExternalDataOpt = Annotated[
    bool,
    typer.Option("--ignore-external-data", help="Do not load external weights; work on the structure only."),
]
OutputModelOpt = Annotated[str, typer.Option("-o", "--output", help="Where to write the model ('-' for stdout).")]
SeedOpt = Annotated[Optional[int], typer.Option("--seed", help="Seed for generated input data (reproducible).")]
InputShapesOpt = Annotated[
    Optional[List[str]],
    typer.Option(
        "--input-shapes",
        help="Shapes for dynamic inputs: name:[1,3,640,640] (or name:1x3x640x640, no quoting needed). "
        "Several after one flag.",
    ),
]
ModelInputShapesOpt = Annotated[
    Optional[List[str]],
    typer.Option(
        "--model-input-shapes",
        help="Fix the shapes of the model's dynamic inputs for shape inference: name:[1,3,224,224] ...",
    ),
]
ForceFallbackOpt = Annotated[
    bool,
    typer.Option(
        "--force-fallback-shape-inference",
        help="Infer tensor shapes and dtypes by running ONNX-Runtime instead of ONNX shape inference.",
    ),
]

"""Polygraphy's command-line grammar (argparse's) on Click/Typer, in one place.

Click takes a fixed number of values per option and no abbreviations; Polygraphy's users write
``--onnx-outputs mark all``, ``--fail-regex A B``, ``--trt-min-shapes x:[1,3] y:[1,4]`` (one
group per occurrence), ``--fold-constant`` (a prefix), ``--check CMD ARGS...`` (the rest of the
line, verbatim) and ``-v`` anywhere. :class:`GrammarCommand` rewrites the argument list into
what Click parses, before Click sees it:

1. :func:`expand_prefixes`: an unambiguous prefix of a long option becomes that option;
2. the rest option (``--check``) takes every token after it;
3. :func:`check_values`: an option that takes a value is followed by one (a token that starts
   with ``-`` is an option, unless it is a number, as in argparse: :func:`is_value`);
4. :func:`expand_multi`: ``--opt a b`` becomes ``--opt a --opt b`` for a multi-value option,
   ``--opt a<SEP>b`` for a grouped one (one list per occurrence, :func:`split_group`).

:func:`take_flags` takes options that may appear anywhere (the common options) out of argv.
The help is Click's, in sections (Typer's ``rich_help_panel`` names them), with the command's
examples last. Nothing heavy is imported here.
"""

from __future__ import annotations

import re
import typing
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from typer.core import TyperCommand

from toolkit.core.declare import Declared, declarations
from toolkit.core.errors import UsageError

# Separates the values of one occurrence of a grouped option (a ``List[List[str]]`` field).
GROUP_SEP = "\x1f"
# Options after which the rest of the command line is taken verbatim.
REST_OPTIONS = ("--check",)

# A negative number (argparse's ``-\d+`` and ``-\d*.\d+``, with an exponent: ``-1e-3``).
_NEG_NUMBER = re.compile(r"-(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")


def is_value(token: str) -> bool:
    """argparse's rule: a token is a value unless it starts with ``-``; ``-`` alone (stdio), a
    negative number and a token with a space in it (``"-x y"``) are values too."""
    return not token.startswith("-") or token == "-" or " " in token or bool(_NEG_NUMBER.fullmatch(token))


def needs_value(flag: str, args: Sequence[str], i: int) -> None:
    """A usage error unless ``args[i]`` is the value of option ``flag`` (given at ``args[i - 1]``)."""
    if i >= len(args):
        raise UsageError(f"{flag} needs a value")
    if not is_value(args[i]):
        raise UsageError(f"{flag} needs a value ({args[i]} is an option)")


def split_group(value: str) -> List[str]:
    """The values of one occurrence of a grouped option."""
    return [v for v in value.split(GROUP_SEP) if v != ""]


def is_grouped(hint: Any) -> bool:
    """``List[List[str]]``: one list per occurrence of the flag (a TensorRT profile's shapes)."""
    args = typing.get_args(hint) if typing.get_origin(hint) in (list, List) else ()
    return bool(args) and typing.get_origin(args[0]) in (list, List)


# ------------------------------------------------------------------ options taken anywhere


def flag_table(cls: Any) -> Dict[str, Tuple[str, Declared, str]]:
    """{flag: (field name, declaration, kind)} of a dataclass of declared options: kind is
    ``count`` (an int), ``switch`` (a bool), ``list`` or ``value``."""
    hints = typing.get_type_hints(cls)
    table = {}
    for f, decl in declarations(cls):
        hint = hints[f.name]
        kind = {int: "count", bool: "switch"}.get(hint) or ("list" if typing.get_origin(hint) is list else "value")
        table.update({flag: (f.name, decl, kind) for flag in decl.flags})
    return table


def _takes(decl: Declared, token: str) -> bool:
    """``token`` is one more value of the list option ``decl``: one of its completions (the part
    after the last ':' of PATH:LEVEL too)."""
    return token.rsplit(":", 1)[-1].lower() in decl.complete


def take_flags(argv: Sequence[str], opts: Any) -> List[str]:
    """Take the options the dataclass instance ``opts`` declares out of ``argv``, anywhere before
    ``--check`` or ``--``, into ``opts``; the rest of argv, in order. A short counted flag may repeat
    its letter (``-vvv``); a list option takes one or more values among its completions."""
    table = flag_table(type(opts))
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
        i += 1
        if repeated and repeated.group(1) in counted:
            name = counted[repeated.group(1)]
            setattr(opts, name, getattr(opts, name) + len(tok) - 1)
        elif flag not in table:
            rest.append(tok)
        else:
            i = _take_one(argv, i, opts, table[flag], flag, inline if eq else None)
    return rest


def _take_one(argv: Sequence[str], i: int, opts: Any, entry: Tuple[str, Declared, str], flag: str,
              inline: Optional[str]) -> int:
    """Set one option taken at ``argv[i - 1]``; the index after its values."""
    name, decl, kind = entry
    if kind in ("count", "switch"):
        setattr(opts, name, getattr(opts, name) + 1 if kind == "count" else True)
        return i
    if inline is None:
        needs_value(flag, argv, i)
    value = argv[i] if inline is None else inline
    i += 1 if inline is None else 0
    if kind == "value":
        setattr(opts, name, value)
        return i
    values = [value]
    while inline is None and i < len(argv) and _takes(decl, argv[i]):
        values.append(argv[i])
        i += 1
    getattr(opts, name).extend(values)
    return i


# ------------------------------------------------------------------ rewriting argv for Click


def expand_prefixes(args: List[str], params: Sequence[Any], refused: Iterable[str] = ()) -> List[str]:
    """Long options abbreviated as argparse allows (``--fold-constant``, ``--iter 2``): an
    unambiguous prefix of one option's flags becomes that flag; a prefix of several options is
    a usage error naming them. ``refused``: options the command refuses with advice, each its own
    (an exact one keeps its advice; a prefix of one of them and of an option of ours is ambiguous,
    as in Polygraphy). Stops at ``--`` and at ``--check`` (the rest is the check's)."""
    flags = _long_flags(params, refused)
    out = list(args)
    for i, tok in enumerate(args):
        name, eq, value = tok.partition("=")
        if tok == "--" or name in REST_OPTIONS:
            break
        full = _abbreviated(name, flags)
        if full is not None:
            out[i] = full + eq + value
            if full in REST_OPTIONS:
                break
    return out


def _long_flags(params: Sequence[Any], refused: Iterable[str]) -> Dict[str, Any]:
    """{long flag: its option} of the Click ``params`` and of the ``refused`` options (each its own)."""
    flags: Dict[str, Any] = {o: id(p) for p in params
                             for o in getattr(p, "opts", ()) + getattr(p, "secondary_opts", ()) if o.startswith("--")}
    flags.update({o: o for o in refused if o not in flags})
    return flags


def _abbreviated(name: str, flags: Dict[str, Any]) -> Optional[str]:
    """The flag of ``flags`` (flag -> its option) that ``name`` abbreviates; None when ``name`` is
    not a long option, is a flag itself or abbreviates none; a usage error when it abbreviates
    the flags of several options."""
    if not name.startswith("--") or name in flags or len(name) < 3:
        return None
    matches = [o for o in flags if o.startswith(name)]
    if len({flags[o] for o in matches}) > 1:
        raise UsageError(f"ambiguous option {name}: could match {', '.join(sorted(matches))}")
    return matches[0] if matches else None


def cut_rest(args: List[str], rest_opt: str) -> Tuple[List[str], Optional[List[str]]]:
    """(the tokens before ``rest_opt``, every token after it; None when it is absent)."""
    for i, tok in enumerate(args):
        if tok == "--":
            break
        if tok == rest_opt or tok.startswith(rest_opt + "="):
            first = [tok.split("=", 1)[1]] if "=" in tok else []
            return args[:i], first + args[i + 1 :]
    return args, None


def check_values(args: Sequence[str], value_flags: Iterable[str]) -> None:
    """Every option of ``value_flags`` (those that take a value) is followed by one (argparse's
    grammar: a token starting with '-' is an option, unless it is a number; see :func:`is_value`).
    Click would take the next option as the value (``--load-inputs --onnxrt``). Stops at ``--``."""
    flags = set(value_flags)
    for i, tok in enumerate(args):
        if tok == "--":
            break
        if tok in flags:
            needs_value(tok, args, i + 1)


def expand_multi(args: List[str], multi: Iterable[str], grouped: Iterable[str] = (), lenient: bool = False) -> List[str]:
    """``--opt a b`` as ``--opt a --opt b`` for each flag of ``multi`` (values run to the next
    option), as ``--opt a<GROUP_SEP>b`` for each of ``grouped``. Stops at ``--``. ``lenient``
    (a shell completing a line): an option without a value stays as it is."""
    multi, grouped = set(multi), set(grouped)
    out: List[str] = []
    i, n = 0, len(args)
    while i < n:
        tok = args[i]
        if tok == "--":
            out.extend(args[i:])
            break
        i += 1
        if tok not in multi:
            out.append(tok)
            continue
        values = _values_at(args, i)
        i += len(values)
        if not values and not lenient:
            needs_value(tok, args, i)
        if not values:
            out.append(tok)
        elif tok in grouped:
            out.extend([tok, GROUP_SEP.join(values)])
        else:
            for v in values:
                out.extend([tok, v])
    return out


def _values_at(args: List[str], i: int) -> List[str]:
    """The values from ``args[i]`` on, up to the next option."""
    end = i
    while end < len(args) and is_value(args[end]):
        end += 1
    return list(args[i:end])


# ------------------------------------------------------------------ the command class

# ctx.meta key: the arguments a shell has typed so far (while it completes the line)
TYPED_ARGS = "toolkit.typed_args"


def last_option(typed: Sequence[str]) -> Optional[str]:
    """The option whose values the end of ``typed`` holds (the last option before only values), or None."""
    for tok in reversed(typed):
        if not is_value(tok):
            return None if tok == "--" else tok.partition("=")[0]
    return None



def default_in_help(param) -> None:
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


class GrammarCommand(TyperCommand):
    """A Typer command that parses Polygraphy's grammar (see the module's help).

    Set per command with :meth:`variant`: ``declares`` (the options dataclasses its parameters
    come from; their ``List[List[str]]`` fields are grouped), ``examples`` (shown last in its
    help, never wrapped) and ``refused`` (options it refuses with advice). Set per product on a
    subclass: ``common_params`` (parameters every command takes), ``shared_panels`` (the help
    section of options that name none), ``panel_order`` and ``last_panel``.
    """

    declares: Tuple[type, ...] = ()
    examples: Tuple[str, ...] = ()
    refused: Iterable[str] = ()
    shared_panels: Mapping[str, str] = {}
    panel_order: Sequence[str] = ("Options",)
    last_panel: str = ""
    common_params: Callable[[], List[Any]] = staticmethod(lambda: [])

    @classmethod
    def variant(cls, **attrs: Any) -> type:
        """This class with the class attributes ``attrs`` (one command's declarations and examples)."""
        attrs = {k: tuple(v) if k in ("declares", "examples") else v for k, v in attrs.items()}
        return type(cls.__name__, (cls,), attrs)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        taken = {o for p in self.params for o in getattr(p, "opts", ())}
        self.params.extend(p for p in self.common_params() if not taken.intersection(p.opts))
        for param in self.params:
            default_in_help(param)
            panel = next((self.shared_panels[o] for o in getattr(param, "opts", ()) if o in self.shared_panels), None)
            if panel and not getattr(param, "rich_help_panel", None):
                param.rich_help_panel = panel

    def grouped_flags(self) -> frozenset:
        """The flags of the declared ``List[List[str]]`` options."""
        out: set = set()
        for cls in self.declares:
            hints = typing.get_type_hints(cls)
            out.update(o for f, d in declarations(cls) if is_grouped(d.takes or hints[f.name]) for o in d.flags)
        return frozenset(out)

    def value_flags(self) -> set:
        """The flags (long and short) of the options that take a value."""
        return {o for p in self.params if p.param_type_name == "option" and not getattr(p, "is_flag", False)
                and not getattr(p, "count", False) and p.nargs != 0 for o in p.opts}

    def multi_flags(self) -> set:
        return {o for p in self.params if getattr(p, "multiple", False) and p.param_type_name == "option"
                for o in p.opts if o.startswith("--")}

    def parse_args(self, ctx, args):
        args = expand_prefixes(list(args), self.params, self.refused)
        rest_param = next((p for p in self.params for o in getattr(p, "opts", ()) if o in REST_OPTIONS), None)
        rest = None
        if rest_param is not None:
            args, rest = cut_rest(args, next(o for o in rest_param.opts if o in REST_OPTIONS))
        if ctx.resilient_parsing:  # a shell completing the line: what it has typed so far, for shell_complete
            ctx.meta[TYPED_ARGS] = list(args)
        else:
            check_values(args, self.value_flags())
        out = super().parse_args(ctx, expand_multi(args, self.multi_flags(), self.grouped_flags(),
                                                   lenient=ctx.resilient_parsing))
        if rest_param is not None:
            ctx.params[rest_param.name] = rest
        return out

    def shell_complete(self, ctx, incomplete: str):
        """A shell completing a value: after ``--compare onnxrt `` (a second value of a multi-value
        option, which Click does not know takes more) the option's own completions."""
        typed = ctx.meta.get(TYPED_ARGS) or []
        if is_value(incomplete) or incomplete == "":
            flag = last_option(typed)
            param = next((p for p in self.params if flag in getattr(p, "opts", ()) and getattr(p, "multiple", False)
                          and p.param_type_name == "option"), None)
            if param is not None:
                return param.shell_complete(ctx, incomplete)
        return super().shell_complete(ctx, incomplete)

    def collect_usage_pieces(self, ctx):
        # `Usage: toolkit run [OPTIONS] MODEL`, not `{MODEL}`
        pieces = super().collect_usage_pieces(ctx)
        return [p[1:-1] if p.startswith("{") and p.endswith("}") else p for p in pieces]

    def format_options(self, ctx, formatter) -> None:
        """Arguments, then options in sections (help panels): the command's own options first,
        then each panel in ``panel_order``, then the others, ``last_panel`` last."""
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
                panel = self.last_panel if self.last_panel in panels else "Options"
            panels.setdefault(panel, []).append(rec)
        if args:
            with formatter.section("Arguments"):
                formatter.write_dl(args)
        known = list(self.panel_order)
        order = sorted(panels, key=lambda p: (p == self.last_panel, known.index(p) if p in known else len(known)))
        for panel in order:
            with formatter.section(panel):
                formatter.write_dl(panels[panel])

    def format_epilog(self, ctx, formatter) -> None:
        super().format_epilog(ctx, formatter)
        if self.examples:
            with formatter.section("Examples"):
                for line in self.examples:  # never wrapped: they are meant to be copied
                    formatter.write(f"{'':>{formatter.current_indent}}{line}\n")

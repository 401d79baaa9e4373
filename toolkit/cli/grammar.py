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
    rest: List[str] = []
    i = 0
    while i < len(argv):
        flag, inline = _split_inline(argv[i])
        if flag == "--" or flag in REST_OPTIONS:
            return rest + list(argv[i:])
        flag, times = _repeated_count(flag, table)
        if flag in table:
            i = _take_one(argv, i + 1, opts, table[flag], flag, inline, times)
        else:
            rest.append(argv[i])
            i += 1
    return rest


def _split_inline(tok: str) -> Tuple[str, Optional[str]]:
    """(the option, its value after '=' or None): ``--opt=v`` is ('--opt', 'v'); any other token is itself."""
    if not tok.startswith("--") or "=" not in tok:
        return tok, None
    flag, _, inline = tok.partition("=")
    return flag, inline


def _repeated_count(tok: str, table: Mapping[str, Tuple[str, Declared, str]]) -> Tuple[str, int]:
    """``-vvv``, the letter of a short counted flag repeated: ('-v', 3); any other token: (it, 1)."""
    repeated = re.fullmatch(r"-(\w)\1+", tok)
    short = "-" + repeated.group(1) if repeated else ""
    if table.get(short, ("", None, ""))[2] != "count":
        return tok, 1
    return short, len(tok) - 1


def _take_one(argv: Sequence[str], i: int, opts: Any, entry: Tuple[str, Declared, str], flag: str,
              inline: Optional[str], times: int = 1) -> int:
    """Set one option taken at ``argv[i - 1]`` (``times`` over, a counted one); the index after its values."""
    name, decl, kind = entry
    if kind == "count":
        setattr(opts, name, getattr(opts, name) + times)
        return i
    if kind == "switch":
        setattr(opts, name, True)
        return i
    values, i = _values_of(flag, argv, i, inline, decl if kind == "list" else None)
    if kind == "value":
        setattr(opts, name, values[0])
    else:
        getattr(opts, name).extend(values)
    return i


def _values_of(flag: str, argv: Sequence[str], i: int, inline: Optional[str],
               listed: Optional[Declared]) -> Tuple[List[str], int]:
    """The values of option ``flag`` from ``argv[i]`` on (its ``inline`` one when given after '='),
    and the index after them: a list option (``listed``) takes more while they are among its completions."""
    if inline is not None:
        return [inline], i
    needs_value(flag, argv, i)
    end = i + 1
    while listed is not None and end < len(argv) and _takes(listed, argv[end]):
        end += 1
    return list(argv[i:end]), end


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
    i = 0
    while i < len(args):
        tok = args[i]
        if tok == "--":
            return out + list(args[i:])
        values = _values_at(args, i + 1) if tok in multi else None
        i += 1 + len(values or ())
        if values is None:
            out.append(tok)
        else:
            out.extend(_occurrences(tok, values, tok in grouped, lenient, args, i))
    return out


def _occurrences(flag: str, values: List[str], grouped: bool, lenient: bool, args: Sequence[str], end: int) -> List[str]:
    """How Click reads the ``values`` of one occurrence of the multi-value option ``flag`` (they end at
    ``args[end]``): ``--opt a --opt b``, or ``--opt a<GROUP_SEP>b`` when ``grouped``; without values, a
    usage error, or the flag alone when ``lenient``."""
    if not values:
        if not lenient:
            needs_value(flag, args, end)
        return [flag]
    if grouped:
        return [flag, GROUP_SEP.join(values)]
    return [token for v in values for token in (flag, v)]


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
    shown = _shown_default(param, text)
    if shown is not None:
        param.help = f"{text.rstrip()} (default {shown})".strip()


def _shown_default(param, text: str) -> Optional[str]:
    """The default the help ``text`` of an option should add, or None: a flag, a counted option, an
    empty or computed default and a help that speaks of its default already add none."""
    if getattr(param, "is_flag", False) or getattr(param, "count", False) or "default" in text.lower():
        return None
    default = param.default
    if default in (None, "", (), []) or callable(default):
        return None
    return " ".join(map(str, default)) if isinstance(default, (list, tuple)) else str(default)


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
            self._place_in_shared_panel(param)

    def _place_in_shared_panel(self, param) -> None:
        """An option that names no help section goes to the section ``shared_panels`` gives its flags."""
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
        rest_param, rest_flag = self._rest_option()
        args, rest = cut_rest(args, rest_flag) if rest_param is not None else (args, None)
        if ctx.resilient_parsing:  # a shell completing the line: what it has typed so far, for shell_complete
            ctx.meta[TYPED_ARGS] = list(args)
        else:
            check_values(args, self.value_flags())
        out = super().parse_args(ctx, expand_multi(args, self.multi_flags(), self.grouped_flags(),
                                                   lenient=ctx.resilient_parsing))
        if rest_param is not None:
            ctx.params[rest_param.name] = rest
        return out

    def _rest_option(self) -> Tuple[Any, str]:
        """(the parameter that takes the rest of the line, its flag); (None, "") when there is none."""
        return next(((p, o) for p in self.params for o in getattr(p, "opts", ()) if o in REST_OPTIONS), (None, ""))

    def shell_complete(self, ctx, incomplete: str):
        """A shell completing a value: after ``--compare onnxrt `` (a second value of a multi-value
        option, which Click does not know takes more) the option's own completions."""
        typed = ctx.meta.get(TYPED_ARGS) or []
        param = self._multi_option(last_option(typed)) if is_value(incomplete) else None
        if param is not None:
            return param.shell_complete(ctx, incomplete)
        return super().shell_complete(ctx, incomplete)

    def _multi_option(self, flag: Optional[str]):
        """The multi-value option spelled ``flag``, or None."""
        return next((p for p in self.params if flag in getattr(p, "opts", ()) and getattr(p, "multiple", False)
                     and p.param_type_name == "option"), None)

    def collect_usage_pieces(self, ctx):
        # `Usage: toolkit run [OPTIONS] MODEL`, not `{MODEL}`
        pieces = super().collect_usage_pieces(ctx)
        return [p[1:-1] if p.startswith("{") and p.endswith("}") else p for p in pieces]

    def format_options(self, ctx, formatter) -> None:
        """Arguments, then options in sections (help panels): the command's own options first,
        then each panel in ``panel_order``, then the others, ``last_panel`` last."""
        args, panels = self._help_records(ctx)
        if args:
            with formatter.section("Arguments"):
                formatter.write_dl(args)
        known = list(self.panel_order)
        order = sorted(panels, key=lambda p: (p == self.last_panel, known.index(p) if p in known else len(known)))
        for panel in order:
            with formatter.section(panel):
                formatter.write_dl(panels[panel])

    def _help_records(self, ctx) -> Tuple[list, dict]:
        """(the arguments' help records, {section: its options' records}), in the parameters' order."""
        args: list = []
        panels: dict = {}
        for param in self.get_params(ctx):
            rec = param.get_help_record(ctx)
            if rec is None:
                continue
            if param.param_type_name == "argument":
                args.append(rec)
                continue
            panels.setdefault(self._help_panel(param, panels), []).append((rec[0], rec[1].replace("  [x>=0]", "")))
        return args, panels

    def _help_panel(self, param, panels: dict) -> str:
        """The help section of an option: its own; -h/--help's is ``last_panel`` once that section has options."""
        if "--help" in getattr(param, "opts", ()):
            return self.last_panel if self.last_panel in panels else "Options"
        return getattr(param, "rich_help_panel", None) or "Options"

    def format_epilog(self, ctx, formatter) -> None:
        super().format_epilog(ctx, formatter)
        if self.examples:
            with formatter.section("Examples"):
                for line in self.examples:  # never wrapped: they are meant to be copied
                    formatter.write(f"{'':>{formatter.current_indent}}{line}\n")

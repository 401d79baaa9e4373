"""Options declared once, next to the value they fill.

A command's options are a dataclass; each field the command line sets carries its
declaration in the field's metadata: flags, help text, help panel, metavar, the values a
shell may complete, and, for an option of a runner kind, that kind and its name in runner
specs (``trt:fp16`` -> ``fp16``). The command line (``toolkit.cli.options.bind``), the help
panels, the runner kinds' options (``toolkit.run.registry``) and the "ignored without --trt"
warnings are all read from these declarations::

    @dataclass
    class Options:
        seed: Optional[int] = option("--seed", help="Seed for generated input data.", panel="Inputs")
        fp16: bool = option("--fp16", help="...", runner="trt", spec="fp16")

A library's config declares its options itself, so a command binds the config (one field list,
not a copy of it kept equal): a field whose value the command line spells another way says how
(``parse=``: the option's value -> the field's value, applied once where the command reads its
options; ``takes=``: the type the option gives when it is not the field's); :func:`unless` is a
``True`` field that a ``--no-...`` flag turns off. Options several configs take are one dataclass
they inherit (:mod:`toolkit.core.shared_options`); a class that shows one of them with its own
help or metavar says so with :func:`shown_as`.

Nothing here imports Click, Typer or anything heavy: the library's dataclasses declare their
options without depending on the command line.
"""

from __future__ import annotations

import dataclasses
import operator
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

_KEY = "toolkit.option"
_SHOWN = "__toolkit_shown__"


@dataclass(frozen=True)
class Declared:
    """One option (or the argument, with ``argument=True``) as the command line shows it.

    ``flags``: empty for a value only a runner spec sets. ``complete``: values a shell may
    complete (a choice list) or the name of a completer (``"runner-spec"``).
    """

    flags: Tuple[str, ...] = ()
    help: str = ""
    panel: Optional[str] = None
    metavar: Optional[str] = None
    runner: Optional[str] = None
    spec: Optional[str] = None
    choices: Tuple[str, ...] = ()  # the values of a KEY=VALUE runner-spec option
    # a KEY=VALUE runner-spec option that takes any value (``onnxrt:providers=cuda``): text -> value
    convert: Optional[Callable[[str], Any]] = None
    complete: Any = ()
    argument: bool = False
    required: bool = True  # (an argument) the command line requires it; else it may be left out (None)
    needed: bool = False  # (an option) the command line requires it
    # the option's value (None, or False for a flag, when not given) -> the field's value
    parse: Optional[Callable[[Any], Any]] = None
    takes: Any = None  # the type the command line gives, when ``parse`` makes it another (default: the field's)
    # the option (field name) this one follows in the help and in messages that list options (an
    # inherited option placed where a command has always shown it; see :func:`declarations`)
    after: Optional[str] = None

    def replace(self, **changes: Any) -> "Declared":
        return dataclasses.replace(self, **changes)

    @property
    def flag(self) -> Optional[str]:
        return self.flags[0] if self.flags else None


def option(
    *flags: str,
    help: str = "",
    default: Any = None,
    factory: Optional[Callable[[], Any]] = None,
    **kw: Any,
) -> Any:
    """A dataclass field declared as the option ``flags`` (see :class:`Declared`)."""
    return declared(Declared(flags=tuple(flags), help=help, **kw), default=default, factory=factory)


def declared(
    decl: Declared, default: Any = None, factory: Optional[Callable[[], Any]] = None, required: bool = False
) -> Any:
    """A dataclass field carrying ``decl`` (a declaration several dataclasses share). A required
    argument, or an option with ``required``, gets no default: the command line must give it."""
    meta = {_KEY: decl}
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=meta)
    if required or (decl.argument and decl.required):
        return dataclasses.field(metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def switch(*flags: str, help: str = "", **kw: Any) -> Any:
    """A ``bool`` dataclass field, False unless its flag is given."""
    return option(*flags, help=help, default=False, **kw)


def unless(*flags: str, help: str = "", **kw: Any) -> Any:
    """A ``bool`` dataclass field, True unless its flag (``--no-...``) is given."""
    return option(*flags, help=help, default=True, takes=bool, parse=operator.not_, **kw)


def required(*flags: str, help: str = "", default: Any = dataclasses.MISSING, **kw: Any) -> Any:
    """A dataclass field declared as the option ``flags``, which the command line requires; without
    a default unless one is given (a field after inherited ones that have defaults needs one)."""
    return dataclasses.field(default=default, metadata={_KEY: Declared(flags=tuple(flags), help=help, needed=True, **kw)})


def argument(help: str, metavar: str, **kw: Any) -> Any:
    """A required dataclass field declared as the command's positional argument."""
    return dataclasses.field(metadata={_KEY: Declared(help=help, metavar=metavar, argument=True, **kw)})


def shown_as(**changes: Dict[str, Any]) -> Callable[[Any], Any]:
    """Class decorator: the class shows the inherited options named so with these changes to their
    declarations (``@shown_as(load_inputs=dict(help="...", metavar="PATH"))``); its bases are untouched."""

    def decorate(cls: Any) -> Any:
        setattr(cls, _SHOWN, {**getattr(cls, _SHOWN, {}), **changes})
        return cls

    return decorate


def declaration(f: "dataclasses.Field", cls: Any = None) -> Optional[Declared]:
    """The declaration of field ``f`` (as dataclass ``cls`` shows it, see :func:`shown_as`)."""
    decl = f.metadata.get(_KEY)
    changes = getattr(cls, _SHOWN, {}).get(f.name) if cls is not None else None
    return decl.replace(**changes) if decl is not None and changes else decl


def declarations(cls: Any) -> Iterator[Tuple["dataclasses.Field", Declared]]:
    """The declared fields of the dataclass ``cls``, in field order, each one that names the option
    it follows (``after=``) moved there (the order its help and its warnings name them in)."""
    found = [(f, decl) for f in dataclasses.fields(cls) for decl in [declaration(f, cls)] if decl is not None]
    yield from in_order(found, lambda item: item[0].name, lambda item: item[1].after)


def in_order(items: List[Any], name: Callable[[Any], str], after: Callable[[Any], Optional[str]]) -> List[Any]:
    """``items`` in order, each one whose ``after`` names another item moved right behind it (an
    item that follows none of them stays last)."""
    out = [item for item in items if after(item) is None]
    pending = [item for item in items if after(item) is not None]
    while pending:
        names = [name(item) for item in out]
        ready = next((item for item in pending if after(item) in names), None)
        if ready is None:
            return out + pending
        pending.remove(ready)
        out.insert(names.index(str(after(ready))) + 1, ready)
    return out

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

Nothing here imports Click, Typer or anything heavy: the library's dataclasses declare their
options without depending on the command line.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional, Tuple

_KEY = "toolkit.option"


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


def required(*flags: str, help: str = "", **kw: Any) -> Any:
    """A dataclass field without a default, declared as the required option ``flags``."""
    return dataclasses.field(metadata={_KEY: Declared(flags=tuple(flags), help=help, **kw)})


def argument(help: str, metavar: str, **kw: Any) -> Any:
    """A required dataclass field declared as the command's positional argument."""
    return dataclasses.field(metadata={_KEY: Declared(help=help, metavar=metavar, argument=True, **kw)})


def declaration(f: "dataclasses.Field") -> Optional[Declared]:
    return f.metadata.get(_KEY)


def declarations(cls: Any) -> Iterator[Tuple["dataclasses.Field", Declared]]:
    """The declared fields of the dataclass ``cls``, in field order."""
    for f in dataclasses.fields(cls):
        decl = declaration(f)
        if decl is not None:
            yield f, decl

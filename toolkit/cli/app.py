"""The root ``toolkit`` command: one Typer app, every command group registered here.

Start-up matters (``debug reduce`` may start the CLI hundreds of times), so a command line
that names one group (``toolkit run ...``, ``toolkit inspect model ...``) builds and imports
only that group; ``toolkit --help`` builds them all. Built command trees are cached, so a
warm process (the reducer's forked worker) builds each one once.
"""

import importlib
import os
import sys
from typing import Callable, Dict, List, Optional, Tuple

import typer

from toolkit import __version__
from toolkit.cli.app_settings import SUBAPP_SETTINGS

HELP = (
    "Debug ONNX models: run and compare backends, inspect, cut and fold graphs, "
    "and reduce failing models to minimal subgraphs."
)

# The one list of command groups, in help order: name -> (module, attribute). The attribute
# is a Typer group (`app`) or a function that registers a top-level command (`register`).
GROUPS: Dict[str, Tuple[str, str]] = {
    "run": ("toolkit.cli.run", "register"),
    "inspect": ("toolkit.cli.inspect", "app"),
    "surgeon": ("toolkit.cli.surgeon", "app"),
    "data": ("toolkit.cli.data", "app"),
    "debug": ("toolkit.cli.debug", "app"),
}


def _version(value: bool) -> None:
    if value:
        sys.stdout.write(f"toolkit {__version__}\n")
        raise typer.Exit()


def _root(
    version: bool = typer.Option(
        False, "--version", "-V", callback=_version, is_eager=True, help="Show the version and exit."
    ),
) -> None:
    """Debug ONNX models: run and compare backends, inspect, cut and fold graphs, and reduce
    failing models to minimal subgraphs."""


def build_app(names: Optional[List[str]] = None) -> typer.Typer:
    """The root Typer app with the named groups (default: all of them)."""
    root = typer.Typer(name="toolkit", help=HELP, **SUBAPP_SETTINGS)
    root.callback()(_root)
    for name in names or list(GROUPS):
        module, attr = GROUPS[name]
        obj = getattr(importlib.import_module(module), attr)
        if attr == "register":
            obj(root)
        else:
            root.add_typer(obj, name=name)
    return root


_COMMANDS: Dict[Optional[str], object] = {}


def get_command(group: Optional[str] = None):
    """The Click command tree for one group (or all, for None), built once per process."""
    if group not in _COMMANDS:
        _COMMANDS[group] = typer.main.get_command(build_app([group] if group else None))
    return _COMMANDS[group]


def __getattr__(name: str):
    # `toolkit.cli.app.app`: the full Typer app, built on first use.
    if name == "app":
        return build_app()
    raise AttributeError(name)


def _group_of(argv: List[str]) -> Optional[str]:
    for tok in argv:
        if tok.startswith("-"):
            return None  # root options (--help, --version) need the whole tree
        return tok if tok in GROUPS else None
    return None


def main(argv: Optional[List[str]] = None) -> int:
    """Run the CLI with ``argv`` (default: sys.argv[1:]) and return the exit code."""
    from toolkit.cli.errors import run_with_boundary

    if argv is None:
        argv = sys.argv[1:]
    argv = list(argv)
    # a process that already built the whole tree (a warm worker) reuses it for any command
    cmd = _COMMANDS.get(None) or get_command(_group_of(argv))
    return run_with_boundary(cmd.main, args=argv, prog_name="toolkit", standalone_mode=False)


def run(exit: Callable[[int], None] = os._exit) -> None:
    """Console-script entry point.

    Flushes the output, then leaves with ``os._exit``: everything the command writes is
    complete by then (files are closed and renamed before ``main`` returns), and skipping
    the interpreter's teardown of numpy/onnxruntime saves tens of milliseconds per call.
    """
    code = main()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (BrokenPipeError, ValueError, OSError):
            pass
    exit(code)

"""The root ``toolkit`` command: one Typer app, every command group registered here."""

from __future__ import annotations

import sys
from typing import List, Optional

import typer

from toolkit import __version__
from toolkit.cli import data as data_cli
from toolkit.cli import debug as debug_cli
from toolkit.cli import inspect as inspect_cli
from toolkit.cli import run as run_cli
from toolkit.cli import surgeon as surgeon_cli
from toolkit.cli.app_settings import SUBAPP_SETTINGS as APP_SETTINGS

app = typer.Typer(
    name="toolkit",
    help="Debug ONNX models: run and compare backends, inspect, cut and fold graphs, "
    "and reduce failing models to minimal subgraphs.",
    **APP_SETTINGS,
)


def _version(value: bool) -> None:
    if value:
        sys.stdout.write(f"toolkit {__version__}\n")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", "-V", callback=_version, is_eager=True, help="Show the version and exit."
    ),
) -> None:
    """Debug ONNX models: run and compare backends, inspect, cut and fold graphs, and reduce
    failing models to minimal subgraphs."""


# The one list of command groups.
run_cli.register(app)
for sub, name in (
    (inspect_cli.app, "inspect"),
    (surgeon_cli.app, "surgeon"),
    (data_cli.app, "data"),
    (debug_cli.app, "debug"),
):
    app.add_typer(sub, name=name)


def get_command():
    return typer.main.get_command(app)


def main(argv: Optional[List[str]] = None) -> int:
    """Run the CLI with ``argv`` (default: sys.argv[1:]) and return the exit code."""
    from toolkit.cli.errors import run_with_boundary

    if argv is None:
        argv = sys.argv[1:]
    cmd = get_command()
    return run_with_boundary(cmd.main, args=list(argv), prog_name="toolkit", standalone_mode=False)


def run() -> None:
    """Console-script entry point."""
    code = main()
    try:
        sys.stdout.flush()
    except (BrokenPipeError, ValueError):
        pass
    sys.exit(code)

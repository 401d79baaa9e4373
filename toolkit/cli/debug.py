"""`toolkit debug` commands (being built)."""

from __future__ import annotations

import typer

from toolkit.cli.app_settings import SUBAPP_SETTINGS

app = typer.Typer(help="debug commands.", **SUBAPP_SETTINGS)

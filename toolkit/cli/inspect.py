"""`toolkit inspect` commands."""

from __future__ import annotations

import typer

from toolkit.cli.app_settings import SUBAPP_SETTINGS

app = typer.Typer(help="Inspect models and data files.", **SUBAPP_SETTINGS)

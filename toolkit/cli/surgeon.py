"""`toolkit surgeon` commands (being built)."""

from __future__ import annotations

import typer

from toolkit.cli.app_settings import SUBAPP_SETTINGS

app = typer.Typer(help="surgeon commands.", **SUBAPP_SETTINGS)

"""`toolkit run` (being built)."""

from __future__ import annotations

import typer

from toolkit.cli.options import command_kwargs


def register(app: typer.Typer) -> None:
    @app.command("run", **command_kwargs())
    def run_command(model: str = typer.Argument(..., help="Model to run.")) -> None:
        """Run inference on ONNX-Runtime or TensorRT and compare results."""
        raise typer.Exit(3)

"""The command line: Typer commands over the library (see docs/architecture.md)."""

"""Typer settings shared by the root app and every command group."""

from typing import Any, Dict, Literal, Optional, TypedDict


class AppSettings(TypedDict, total=False):
    """The keyword arguments of ``typer.Typer`` that every group shares (typed, so that
    ``typer.Typer(**SUBAPP_SETTINGS)`` type-checks)."""

    rich_markup_mode: Optional[Literal["markdown", "rich"]]
    pretty_exceptions_enable: bool
    add_completion: bool
    no_args_is_help: bool
    context_settings: Dict[str, Any]


SUBAPP_SETTINGS = AppSettings(
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
    add_completion=False,
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def root_settings() -> AppSettings:
    """The shared settings plus shell completion (--install-completion / --show-completion)."""
    settings = AppSettings(**SUBAPP_SETTINGS)
    settings["add_completion"] = True
    return settings


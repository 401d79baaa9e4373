"""Typer settings shared by the root app and every command group."""

SUBAPP_SETTINGS = dict(
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
    add_completion=False,
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)

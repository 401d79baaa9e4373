"""The console script and ``python -m toolkit``: signals handled from the first statement.

Importing the CLI takes tens of milliseconds; a Ctrl-C (or SIGTERM, SIGHUP) in that time
would otherwise be a Python traceback (or a silent exit 143). Until the command's own
handlers take over (:func:`toolkit.cli.app.main`), such a signal ends the process at once
with one ``error: interrupted (SIGNAL) ...`` line and exit code 130: nothing has been read
or written yet. The same handler is back once the command has ended (until the process
exits): a signal then still ends it with exit 130, and the line says the command had ended.
"""

import os
import signal

EARLY_SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP")


def _early(signum, frame) -> None:
    try:
        name = signal.Signals(signum).name
    except ValueError:  # pragma: no cover
        name = f"signal {signum}"
    if getattr(_early, "ended", False):  # (set when the command's own handlers hand back)
        when = "after the command had ended; what it wrote is complete"
    else:
        when = "while starting; nothing was read or written"
    os.write(2, f"error: interrupted ({name}) {when}\n".encode())
    os._exit(130)


_early.toolkit_early = True  # type: ignore[attr-defined]  # the CLI's own handlers replace it


def hold_early_signals() -> None:
    """Install the start-up handler for each signal that still has its default action."""
    for name in EARLY_SIGNALS:
        num = getattr(signal, name, None)
        if num is None:
            continue
        try:
            if signal.getsignal(num) is (signal.default_int_handler if name == "SIGINT" else signal.SIG_DFL):
                signal.signal(num, _early)
        except (ValueError, OSError):  # pragma: no cover - not the main thread
            pass


def run() -> None:
    """Console-script entry point: :func:`toolkit.cli.app.run` with start-up signals handled."""
    hold_early_signals()
    from toolkit.cli.app import run as app_run

    app_run()

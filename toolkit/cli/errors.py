"""The one error boundary: exceptions -> one ``error: ...`` line and an exit code."""

from __future__ import annotations

import sys
import traceback

from toolkit.core.text import escape_controls
from toolkit.cli.grammar import REST_OPTIONS
from toolkit.cli.output import debug_enabled, interrupted_by, state, to_log_file
from toolkit.core.errors import ExitCode, ToolkitError


def _print_error(message: str) -> None:
    # one line, whatever the message holds (backend errors can span several)
    message = " ".join(part.strip() for part in str(message).splitlines() if part.strip())
    message = escape_controls(message)  # (a name's escape sequences never act on the terminal)
    try:
        sys.stderr.write(f"error: {message}\n")
        sys.stderr.flush()
    except (OSError, ValueError):  # pragma: no cover - stderr gone (closed or broken)
        pass

    to_log_file(f"error: {message}")


def _click_message(exc) -> str:
    """One line for a Click usage error (bad value, unknown or missing option), like ours."""
    advice = _unsupported_line(exc)
    if advice:
        return advice
    text = " ".join(str(exc.format_message()).split()) or type(exc).__name__
    if type(exc).__name__ == "MissingParameter":
        hint = _after_check_hint(getattr(exc, "param", None))
        text = text.rstrip(".") + hint if hint else text
    path = getattr(getattr(exc, "ctx", None), "command_path", None)
    return f"{text} (see '{path} --help')" if path else text


def _unsupported_line(exc) -> str:
    """For an unknown option that is a Polygraphy option toolkit does not support: that, and what to
    use instead ('' for any other error)."""
    option = getattr(exc, "option_name", None)
    if type(exc).__name__ != "NoSuchOption" or not option:
        return ""
    from toolkit.cli.unsupported import unsupported_advice

    advice = unsupported_advice(option)
    return f"{option} (a Polygraphy option) is not supported by toolkit: {advice}" if advice else ""


def _after_check_hint(param) -> str:
    """When the missing option was typed after --check, it went to the check command."""

    argv = state.argv or []
    opts = set(getattr(param, "opts", ()) or ())
    for rest in REST_OPTIONS:
        typed = _typed_after(rest, argv, opts)
        if typed:
            return (
                f"; {typed} is given after {rest}, and everything after {rest} belongs to the check "
                f"command: put {typed} before {rest}"
            )
    return ""


def _typed_after(rest: str, argv: list, opts: set):
    """The first option of ``opts`` typed after ``rest`` in ``argv`` (``--opt`` or ``--opt=value``), or None."""
    after = argv[argv.index(rest) + 1 :] if rest in argv else []
    return next((a for a in after if a.split("=", 1)[0] in opts), None)


def run_with_boundary(func, *args, **kwargs) -> int:
    """Call ``func`` and translate whatever it raises into an exit code.

    ToolkitError -> its code; Click usage errors -> 2; Ctrl-C -> 130; a corrupt file found
    only by an unexpected failure (text that is not UTF-8, an OS error) -> 3; anything else
    unexpected is a bug: 70 with a one-line message (``TOOLKIT_DEBUG=1`` shows the traceback).
    """
    try:
        rv = func(*args, **kwargs)
        return rv if isinstance(rv, int) else 0
    except Exception as exc:  # noqa: BLE001 - after a signal, any failure is the interruption's
        if state.signal is None:
            return _failed(exc)
        return report_interrupt()
    except KeyboardInterrupt:
        return report_interrupt()
    except SystemExit as exc:
        return _exit_status(exc.code)


def _exit_status(code) -> int:
    """The exit status of ``sys.exit(code)``: an int as it is, None 0, anything else (a message) 1."""
    if isinstance(code, int):
        return code
    return 0 if code is None else 1


def _failed(exc: Exception) -> int:
    """The exit code of an exception that reached the boundary, its line printed."""

    try:
        raise exc  # (dispatched by type below)
    except ToolkitError as exc:
        if debug_enabled():
            traceback.print_exc()
        _print_error(exc.message)
        return int(exc.exit_code)
    except BrokenPipeError:
        # the reader of our stdout went away (e.g. `| head`): not an error of ours
        try:
            sys.stdout = open("/dev/null", "w")
        except OSError:
            pass
        return 0
    except Exception as exc:  # noqa: BLE001 - this is the boundary
        return _not_ours(exc)


def _not_ours(exc: Exception) -> int:
    """The exit code of an exception that is not a ToolkitError (called while it is handled): a
    Click usage error (Click's own exceptions, without importing click: Typer bundles its own),
    Click's Abort (an interruption), else an unexpected failure."""
    if hasattr(exc, "show") and hasattr(exc, "exit_code"):
        if type(exc).__name__ == "NoArgsIsHelpError":
            exc.show()  # a bare group (`toolkit`, `toolkit inspect`): its help, as Click prints it
        else:
            _print_error(_click_message(exc))
        return int(exc.exit_code)
    if type(exc).__name__ == "Abort":
        return report_interrupt()
    if debug_enabled():
        traceback.print_exc()
    return _unexpected(exc)


def _unexpected(exc: Exception) -> int:
    """One error line for an exception no layer expected: a corrupt input found late (exit 3),
    else a bug in toolkit (exit 70)."""
    message = _late_bad_input(exc)
    if message is None:
        message = _corrupt_model_text()
        if not message:
            _print_error(
                f"unexpected {type(exc).__name__}: {exc} "
                "(this is a bug in toolkit; TOOLKIT_DEBUG=1 shows the traceback)"
            )
            return int(ExitCode.INTERNAL)
    _print_error(message)
    return int(ExitCode.BAD_INPUT)


def _late_bad_input(exc: Exception):
    """The line for an exception that means bad input found late (out of memory, text that is not
    UTF-8, an OS error), or None."""
    if isinstance(exc, MemoryError):
        return "out of memory"
    if isinstance(exc, UnicodeDecodeError):
        # protobuf decodes a model's text fields (names, op types) only when they are read
        return (
            f"the input model holds text that is not valid UTF-8 ({exc.reason} at byte {exc.start} of "
            "a name or other text field); the file is corrupt"
        )
    if isinstance(exc, OSError):
        name = getattr(exc, "filename", None)
        return f"{name + ': ' if name else ''}{exc.strerror or exc}"
    return None


def report_interrupt() -> int:
    """The one line an interrupted command ends with (what was and was not written); 130."""

    if not state.interrupt_reported:
        state.interrupt_reported = True
        paths = sys.modules.get("toolkit.core.files.paths")
        written = paths.written_summary() if paths is not None else ""
        _print_error(f"{interrupted_by()}{'; ' + written if written else ''}")
    return int(ExitCode.INTERRUPTED)


def _corrupt_model_text():
    """After an unexpected failure: a model read with names that are not valid UTF-8 is the
    likelier cause (protobuf hands them back as bytes). Checked only if a model was loaded."""
    model_module = sys.modules.get("toolkit.core.io.model")
    if model_module is None:
        return None
    try:
        return model_module.corrupt_text_in_models()
    except Exception:  # noqa: BLE001 - a second failure must not hide the first
        return None

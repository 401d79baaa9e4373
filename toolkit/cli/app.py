"""The root ``toolkit`` command: one Typer app, every command group registered here.

Start-up matters (``debug reduce`` may start the CLI hundreds of times), so the root group
loads its command groups lazily (Click's "lazily loading subcommands" pattern): the root
``--help`` lists the groups from the registry below without importing or building them,
and ``toolkit run ...`` imports and builds only ``run``. Built command trees are cached, so
a warm process (the reducer's forked worker) builds each one once.
"""

import importlib
import os
import sys
import time
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import typer
from typer.core import TyperGroup

from toolkit import __version__
from toolkit.cli import output, signals
from toolkit.cli.app_settings import root_settings
from toolkit.cli.errors import report_interrupt, run_with_boundary
from toolkit.cli.options import take_common_options
from toolkit.core.files import inplace

# The backends the root --help names: the title of every runner kind that toolkit.run.registry
# registers, in its order. Kept here rather than read from the registry, whose import (the
# backends' modules, RunOptions) would add about 18 ms to the 61 ms of `toolkit --help`;
# tests/cli/test_cli_basics.py keeps the two equal, and `run`'s own help is built from the registry.
BACKENDS: Tuple[str, ...] = ("ONNX-Runtime", "TensorRT", "OpenVINO")


def backends_text(titles: Sequence[str]) -> str:
    """``A, B and/or C``: the backends a run may use, one or several of them."""
    return titles[0] if len(titles) == 1 else f"{', '.join(titles[:-1])} and/or {titles[-1]}"


HELP = (
    f"Debug ONNX models: run and compare backends ({', '.join(BACKENDS)}), inspect, cut and fold graphs, "
    "and reduce failing models to minimal subgraphs."
)

# The one list of command groups, in help order: name -> (module, attribute, short help).
# The attribute is a Typer group (`app`) or a function that registers a top-level command
# (`register`). The short help is what the root --help lists (a test keeps it equal to the
# first sentence of the group's own help).
GROUPS: Dict[str, Tuple[str, str, str]] = {
    "run": ("toolkit.cli.run", "register", f"Run a model on {backends_text(BACKENDS)} with generated or loaded inputs."),
    "inspect": ("toolkit.cli.inspect", "app", "Inspect models and data files."),
    "convert": ("toolkit.cli.convert", "register", "Convert a model: mixed fp16 with --fp-to-fp16, mixed bf16 with --fp-to-bf16."),
    "surgeon": ("toolkit.cli.surgeon", "app", "Cut subgraphs out of ONNX models and simplify them."),
    "data": ("toolkit.cli.data", "app", "Work with inputs and outputs data files (JSON or .npz)."),
    "debug": (
        "toolkit.cli.debug",
        "app",
        "Debug failing models: reduce them to minimal failing subgraphs; find the nodes that must stay fp32.",
    ),
}


class LazyRootGroup(TyperGroup):
    """The root group: lists GROUPS without loading them; loads one when it is invoked."""

    def list_commands(self, ctx) -> List[str]:
        return list(GROUPS)

    def get_command(self, ctx, name: str):
        if name not in GROUPS:
            return None
        return get_command(name).commands[name]

    def resolve_command(self, ctx, args):
        try:
            return super().resolve_command(ctx, args)
        except Exception as exc:  # Click's UsageError (Typer bundles its own Click)
            if args and getattr(exc, "message", None) and args[0] not in GROUPS:
                from difflib import get_close_matches

                close = get_close_matches(args[0], list(GROUPS))
                if close and "Did you mean" not in exc.message:
                    exc.message = exc.message.rstrip(".") + f". Did you mean '{close[0]}'?"
            raise

    def format_commands(self, ctx, formatter) -> None:
        rows = [(name, GROUPS[name][2]) for name in GROUPS]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


def _version(value: bool) -> None:
    if value:
        sys.stdout.write(f"toolkit {__version__}\n")
        raise typer.Exit()


def _root(
    version: bool = typer.Option(
        False, "--version", "-V", callback=_version, is_eager=True, help="Show the version and exit."
    ),
) -> None:
    """The root command (its help is HELP)."""


def build_app(names: Optional[List[str]] = None, lazy: bool = False) -> typer.Typer:
    """The root Typer app with the named groups (default: all of them); with ``lazy``, an
    app with none registered whose root group loads them on demand."""
    root = typer.Typer(name="toolkit", help=HELP, cls=LazyRootGroup if lazy else None, **root_settings())
    root.callback()(_root)
    if lazy:
        return root
    for name in names or list(GROUPS):
        module, attr, _short = GROUPS[name]
        obj = getattr(importlib.import_module(module), attr)
        if attr == "register":
            obj(root)
        else:
            root.add_typer(obj, name=name)
    return root


_COMMANDS: Dict[Optional[str], TyperGroup] = {}


def get_command(group: Optional[str] = None, lazy: bool = False) -> TyperGroup:
    """The Click command tree: the lazy root (``lazy``), one group's tree (``group``) or the
    whole tree (neither); built once per process."""
    key = "<lazy>" if lazy else group
    if key not in _COMMANDS:
        command = typer.main.get_command(build_app([group] if group else None, lazy=lazy))
        assert isinstance(command, TyperGroup)  # the root always has a callback and groups
        _COMMANDS[key] = command
    return _COMMANDS[key]


def __getattr__(name: str):
    # `toolkit.cli.app.app`: the full Typer app, built on first use.
    if name == "app":
        return build_app()
    raise AttributeError(name)


def main(argv: Optional[List[str]] = None) -> int:
    """Run the CLI with ``argv`` (default: sys.argv[1:]) and return the exit code."""

    if argv is None:
        argv = sys.argv[1:]
    argv = list(argv)
    output.reset()
    output.state.argv = list(argv)
    _forget_parsed_models()
    try:
        with signals.handled():
            return run_with_boundary(_main, argv)
    finally:
        output.reset()
        inplace.release_all()  # (the locks of an in-place rewrite: a warm process runs more commands)


def _forget_parsed_models() -> None:
    """A command's unexpected failure is blamed on corrupt text only in the models it parsed itself,
    never in one an earlier command of the same process (a warm worker, a library user) parsed."""
    model_module = sys.modules.get("toolkit.core.io.model")
    if model_module is not None:
        model_module.forget_parsed_models()


def _main(argv: List[str]) -> int:

    # -v/-q/--log-file/... anywhere before --check, in either place (`surgeon -v sanitize` too)
    rest, common = take_common_options(argv)
    common.apply(next((a for a in rest if not a.startswith("-")), None))

    if output.is_verbose() and rest and not {"-h", "--help"} & set(rest):
        return _dispatch_timed(argv, rest)
    return _dispatch(rest)


def _dispatch_timed(argv: List[str], rest: List[str]):
    """-v: the command line, then the command, then how long it took and how it ended."""
    import shlex  # (-v only)

    output.verbose(f"toolkit {__version__} | {' '.join(shlex.quote(a) for a in argv)}")
    start = time.perf_counter()
    try:
        code = _dispatch(rest)
    except BaseException as exc:
        output.verbose(f"toolkit | stopped after {time.perf_counter() - start:.2f} s ({type(exc).__name__})")
        raise
    output.verbose(f"toolkit | done in {time.perf_counter() - start:.2f} s (exit {code if isinstance(code, int) else 0})")
    return code


def _dispatch(rest: List[str]):

    # a process that already built the whole tree (a warm worker) reuses it for any command
    cmd = _COMMANDS.get(None) or get_command(lazy=True)
    code = cmd.main(args=rest, prog_name="toolkit", standalone_mode=False)
    if code == 130 and output.state.signal is not None and not output.state.interrupt_reported:
        report_interrupt()  # Typer turned the KeyboardInterrupt into exit code 130, silently
    return code


def _worker_main(argv: List[str]) -> int:

    from toolkit.core.process.phases import disable_supervision

    output._consoles.clear()  # the forked child has new stdio objects
    disable_supervision()  # (the reducer counts a death by signal as a failure itself)
    return main(argv)


def _warm_up(argv: List[str]) -> None:
    get_command()  # the whole tree, built once in the parent; every forked check reuses it


def worker_entry():
    """How ``debug reduce``'s forked warm worker runs a toolkit check: this CLI's :func:`main`
    (the reduce package takes it as a :class:`toolkit.reduce.check.WorkerEntry`, never imports the CLI)."""

    from toolkit.reduce.check import WorkerEntry  # debug reduce only

    return WorkerEntry(main=_worker_main, prepare=_warm_up)


def run(exit: Callable[[int], None] = os._exit) -> None:
    """Console-script entry point.

    Flushes the output, then leaves with ``os._exit``: everything the command writes is
    complete by then (files are closed and renamed before ``main`` returns), and skipping
    the interpreter's teardown of numpy/onnxruntime saves tens of milliseconds per call.
    """
    from toolkit.core.process.phases import enable_supervision

    enable_supervision()  # (runs that crash a runtime are reported: see toolkit.cli.supervisor)
    code = main()
    scratch = sys.modules.get("toolkit.core.files.scratch")
    if scratch is not None:  # (the command made temp folders; ``os._exit`` skips atexit)
        scratch.remove_all()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (BrokenPipeError, ValueError, OSError):
            pass
    exit(_signal_before_exit(code) if exit is os._exit else code)


def _signal_before_exit(code: int) -> int:
    """The exit code, or 130 when a signal came after the command ended: from here on SIGINT,
    SIGTERM and SIGHUP are blocked (the process is leaving) and one already pending is exit 130 with
    its line, never an exit 0 that loses it."""
    import signal

    if not hasattr(signal, "pthread_sigmask"):  # pragma: no cover - not POSIX
        return code
    nums = {getattr(signal, n) for n in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, n)}
    signal.pthread_sigmask(signal.SIG_BLOCK, nums)  # (a Python handler still due runs as this returns)
    got = nums & signal.sigpending()
    if not got:
        return code
    name = signal.Signals(min(got)).name
    os.write(2, f"error: interrupted ({name}) after the command had ended; what it wrote is complete\n".encode())
    return 130

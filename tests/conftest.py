"""Shared test helpers: invoking the CLI in-process and as a real subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass

import pytest


REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Property-based tests draw the same examples on every run (a fixed seed), so a run of the suite
# judges the code, not the luck of the draw. TOOLKIT_FUZZ_RANDOM=1 draws fresh examples to hunt
# for new failures (TOOLKIT_FUZZ_EXAMPLES=N gives the command fuzzers more of them).
try:
    from hypothesis import settings as _hypothesis_settings
except ImportError:  # pragma: no cover - hypothesis is a test dependency
    pass
else:
    _hypothesis_settings.register_profile("fixed", derandomize=True, database=None)
    if os.environ.get("TOOLKIT_FUZZ_RANDOM") != "1":
        _hypothesis_settings.load_profile("fixed")


@dataclass
class Result:
    code: int
    out: str
    err: str

    @property
    def output(self) -> str:
        return self.out + self.err


@pytest.fixture
def cli(capfd, monkeypatch):
    """Run toolkit in-process: ``cli("inspect", "model", path)`` -> Result(code, out, err)."""
    from toolkit.cli.app import main

    monkeypatch.setenv("COLUMNS", "200")

    def invoke(*args, stdin: bytes = None):
        capfd.readouterr()
        if stdin is not None:
            import io

            fake = io.TextIOWrapper(io.BytesIO(stdin))
            monkeypatch.setattr(sys, "stdin", fake)
        code = main([str(a) for a in args])
        sys.stdout.flush()
        sys.stderr.flush()
        captured = capfd.readouterr()
        return Result(code, captured.out, captured.err)

    return invoke


@pytest.fixture
def cli_in(cli, monkeypatch):
    """``cli_in(*args, cwd=folder, env={...})``: the command in this process, run in ``folder`` (the
    in-process twin of :func:`run_toolkit`'s ``cwd``/``env``)."""

    def invoke(*args, cwd, env=None):
        monkeypatch.chdir(cwd)
        with monkeypatch.context() as m:
            for key, value in (env or {}).items():
                m.setenv(key, value)
            return cli(*args)

    return invoke


def run_toolkit(*args, stdin: bytes = None, cwd=None, env=None, timeout=120) -> Result:
    """Run the real `python -m toolkit` entry point in a subprocess."""
    full_env = dict(os.environ)
    full_env.setdefault("COLUMNS", "200")
    if env:
        full_env.update(env)
    proc = subprocess.run(
        [sys.executable, "-m", "toolkit", *[str(a) for a in args]],
        input=stdin,
        capture_output=True,
        cwd=cwd,
        env=full_env,
        timeout=timeout,
    )
    return Result(proc.returncode, proc.stdout.decode(errors="replace"), proc.stderr.decode(errors="replace"))


@pytest.fixture
def toolkit_proc():
    return run_toolkit


def modules_loaded_by(setup: str, argv, roots) -> list:
    """Module names under ``roots`` that a fresh interpreter has imported after running
    ``setup`` (Python statements) and then ``toolkit.cli.app.main(argv)``."""
    code = (
        f"import sys\n{setup}\n"
        "from toolkit.cli.app import main\n"
        f"main({list(argv)!r})\n"
        "print('LOADED', repr(sorted(sys.modules)))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    line = next((l for l in proc.stdout.splitlines() if l.startswith("LOADED ")), None)
    assert line is not None, proc.stdout + proc.stderr
    import ast

    loaded = ast.literal_eval(line[len("LOADED "):])
    return [m for m in loaded if m in roots or any(m.startswith(r + ".") for r in roots)]


def pytest_configure(config):
    """Each pytest-xdist worker runs in a folder of its own: a file a test leaves in the folder it runs
    in is then found by the fixture below in that worker, never blamed on a test of another worker."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker:
        import tempfile

        os.chdir(tempfile.mkdtemp(prefix=f"toolkit-tests-{worker}-"))


# Tests that send signals, time a command or start a cluster: the README's test command runs them after the
# others, one at a time (-m serial), so that no test running beside them decides their timing. SERIAL lists
# the modules where every test is of that kind; in a module of mixed tests, each such test carries
# ``@pytest.mark.serial`` itself and the others run in the parallel step.
SERIAL = (
    "guarantees/test_children.py", "guarantees/test_fault_injection.py",
    "guarantees/test_sigterm_every_command.py",
    "cli/test_signals_never_lost.py",
    "cli/test_supervisor.py", "cli/test_cli_entry.py",
    "convert/test_convert_runtime_check.py", "reduce/test_reduce_owner.py",
    "backends/test_trt_findings.py", "run/test_run_imports.py",
)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Marks the ``serial`` tests (SERIAL) before ``-m`` selects. Tests marked ``slow`` (every moment of every signal, minutes) run when asked for:
    ``TOOLKIT_SLOW_TESTS=1`` or ``-m slow``; the README's test command skips them."""
    tests = os.path.dirname(os.path.abspath(__file__)) + os.sep
    for item in items:
        if str(item.path).replace(os.sep, "/").startswith(tuple(tests + s for s in SERIAL)):
            item.add_marker(pytest.mark.serial)
    if os.environ.get("TOOLKIT_SLOW_TESTS") == "1" or "slow" in (config.getoption("-m") or ""):
        return
    skip = pytest.mark.skip(reason="slow: set TOOLKIT_SLOW_TESTS=1 (or -m slow) to run it")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


# Files a command writes into the current folder by default: a test must give its own folder.
_DEFAULT_OUTPUTS = ("polygraphy_debug_replay.json", "polygraphy_debug.onnx")


@pytest.fixture(autouse=True)
def _writes_only_in_its_own_folder():
    """Fail a test that leaves a default output in the folder pytest runs in (the repository)."""
    before = {name for name in _DEFAULT_OUTPUTS if os.path.exists(name)}
    yield
    left = [name for name in _DEFAULT_OUTPUTS if name not in before and os.path.exists(name)]
    for name in left:
        os.remove(name)
    assert not left, f"the test wrote {', '.join(left)} into {os.getcwd()}: run it in tmp_path (monkeypatch.chdir)"

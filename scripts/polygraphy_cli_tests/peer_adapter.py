"""
pytest plugin: run Polygraphy's own CLI tests (polygraphy_tests/tests/tools/*) against any
command-line tool that claims to speak Polygraphy's command lines.

Loaded with `-p peer_adapter --noconftest` (see scripts/polygraphy_cli_tests.sh). Polygraphy's tests are kept
byte-for-byte as in NVIDIA/TensorRT; everything that had to change lives here:

  * tests/conftest.py and tests/tools/conftest.py are NOT loaded (--noconftest): the latter does
    `import tensorrt` at module level and builds TensorRT tactic-replay fixtures. The `poly*`
    fixtures the five test files use are re-implemented below, with the same command line:
        [TOOL] + subtool + ["-v"] + additional_opts
    run with subprocess (pytest-console-scripts' "subprocess" launch mode; it is not installed,
    a minimal `script_runner`-like result object is used instead: success, returncode, stdout,
    stderr).
  * `tensorrt` and `torch` are imported at module level by test_run/test_inspect/test_debug but
    are not installed (no GPU; torch is heavy). Inert stub modules exist in sys.modules of the
    pytest process only while a test module is being imported (Polygraphy's lazy importer, used
    in-process by e.g. polygraphy.json, would otherwise take a lingering stub for the real
    thing); the tool's subprocess never sees them. Every test that really needs TensorRT/CUDA or
    torch is skipped with an explicit reason (SKIPS below).
  * The tool under test is PEER_TOOL (set by scripts/polygraphy_cli_tests.sh). Nested invocations
    are redirected too: tests.helper.POLYGRAPHY_CMD (used inside a `debug reduce --check`
    command) is set to the tool, and a `polygraphy` shim (shim/polygraphy -> $PEER_TOOL) is put
    first on PATH of the tool's subprocess, so `--check polygraphy run ...` also runs the tool
    under test ("write toolkit instead of polygraphy" everywhere). The anchor venv's bin/ comes
    next on that PATH so that tests/tools/fake_reduce_checker.py (`#!/usr/bin/env python3`,
    needs onnx) runs under a Python with onnx, for both tools alike. PYTHONPATH is removed from
    the tool's environment. Each tool invocation is killed after PEER_TOOL_TIMEOUT s (120).

Diagnostic switches (all off by default = the faithful run):
  PEER_DROP_V=1           do not inject the fixture's "-v" (Polygraphy's fixtures always put "-v"
                          right after the subtool, e.g. `surgeon -v sanitize`). Options a test
                          passes itself (e.g. "-v", "-vvvvv") are left alone.
  PEER_STDERR_TO_STDOUT=1 run the tool with stderr merged into stdout (Polygraphy logs to stdout;
                          a tool that logs to stderr then still shows its log lines in
                          status.stdout). status.stderr is then "".
  PEER_REWRITE=1          also drop -v/-vv.../--verbose, --log-format=X and --model-type=onnx from
                          every command the tests run directly (not inside --check commands), to
                          see what fails beyond these common options.
"""

import io
import os
import shlex
import subprocess as sp
import sys
import types

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
POLY_TESTS_ROOT = os.path.join(HERE, "polygraphy_tests")
SHIM_DIR = os.path.join(HERE, "shim")

TOOL = os.environ["PEER_TOOL"]
ANCHOR_BIN = os.environ["PEER_ANCHOR_BIN"]
DROP_V = os.environ.get("PEER_DROP_V", "0") == "1"
MERGE = os.environ.get("PEER_STDERR_TO_STDOUT", "0") == "1"
REWRITE = os.environ.get("PEER_REWRITE", "0") == "1"
TOOL_TIMEOUT = float(os.environ.get("PEER_TOOL_TIMEOUT", "120"))

# ---------------------------------------------------------------------------------------------
# Stub modules for imports the test files make at module level (pytest process only).
# ---------------------------------------------------------------------------------------------


_STUBS = {"tensorrt": {"__version__": "0.0.0"}, "torch": {"__version__": "0.0.0"}}


def _missing(name):
    if name in sys.modules:
        return False
    try:
        import importlib.util

        return importlib.util.find_spec(name) is None
    except (ImportError, ValueError):
        return True


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    """Stubs exist only while a test module is being imported: Polygraphy's own lazy importer
    (used in-process by e.g. polygraphy.json) treats any module in sys.modules as installed,
    so a lingering stub would change Polygraphy's behaviour in the test process."""
    added = []
    if isinstance(collector, pytest.Module):
        for name, attrs in _STUBS.items():
            if _missing(name):
                stub = types.ModuleType(name)
                stub.__dict__.update(attrs)
                stub.__peer_stub__ = True
                sys.modules[name] = stub
                added.append(name)
    try:
        yield
    finally:
        for name in added:
            if getattr(sys.modules.get(name), "__peer_stub__", False):
                del sys.modules[name]


# `tests` (Polygraphy's test package) importable for the POLYGRAPHY_CMD redirection below.
if POLY_TESTS_ROOT not in sys.path:
    sys.path.insert(0, POLY_TESTS_ROOT)


def _tool_env(extra_env=None):
    env = dict(os.environ)
    env["PEER_TOOL"] = TOOL
    env["PATH"] = os.pathsep.join([SHIM_DIR, ANCHOR_BIN, env.get("PATH", "")])
    env.pop("PYTHONPATH", None)
    if extra_env:
        env.update(extra_env)
    return env


def pytest_configure(config):
    import tests.helper as helper

    # Mutated in place: test_debug.py holds a reference to this very list.
    helper.POLYGRAPHY_CMD[:] = [TOOL]
    for marker in (
        "script_launch_mode(mode): pytest-console-scripts launch mode (always subprocess here)",
        "flaky: pytest-rerunfailures (not installed; no reruns)",
        "serial: Polygraphy marker",
        "slow: Polygraphy marker",
    ):
        config.addinivalue_line("markers", marker)


def pytest_report_header(config):
    return [
        f"peer tool: {TOOL}",
        f"peer modes: drop_fixture_v={DROP_V} stderr_to_stdout={MERGE} rewrite={REWRITE}",
    ]


# ---------------------------------------------------------------------------------------------
# Tests that cannot run on this machine (no TensorRT / CUDA / torch). Keys are pytest node-id
# prefixes relative to polygraphy_tests/ (a prefix matches all parametrizations).
# ---------------------------------------------------------------------------------------------
NEEDS_TRT = "needs TensorRT/CUDA (not on this machine)"
NEEDS_TORCH = "needs torch (not installed: heavy)"
SKIPS = {
    # test_run.py
    "tests/tools/test_run.py::TestTrt::": NEEDS_TRT,
    "tests/tools/test_run.py::TestOther::test_runner_coexistence": NEEDS_TRT,
    "tests/tools/test_run.py::TestPluginRef::test_ref_implementations": NEEDS_TRT,
    "tests/tools/test_run.py::TestOther::test_load_torch_inputs": NEEDS_TORCH,
    # test_inspect.py
    "tests/tools/test_inspect.py::TestInspectModel::test_trt_sanity": NEEDS_TRT,
    "tests/tools/test_inspect.py::TestInspectModel::test_trt_network_script": NEEDS_TRT,
    "tests/tools/test_inspect.py::TestInspectModel::test_trt_engine": NEEDS_TRT,
    "tests/tools/test_inspect.py::TestInspectTactics::": NEEDS_TRT,
    "tests/tools/test_inspect.py::TestCapability::": NEEDS_TRT,
    "tests/tools/test_inspect.py::TestDiffTactics::": NEEDS_TRT + " (replay_dir fixture builds TRT tactic replays)",
    "tests/tools/test_inspect.py::TestDebugTensors::": NEEDS_TRT,
    # test_debug.py
    "tests/tools/test_debug.py::TestBuild::": NEEDS_TRT,
    "tests/tools/test_debug.py::TestPrecision::": NEEDS_TRT,
}


def pytest_collection_modifyitems(config, items):
    for item in items:
        nodeid = item.nodeid
        # Node ids are relative to the rootdir; normalise to "tests/tools/...".
        idx = nodeid.find("tests/tools/")
        rel = nodeid[idx:] if idx >= 0 else nodeid
        for prefix, reason in SKIPS.items():
            if rel.startswith(prefix):
                item.add_marker(pytest.mark.skip(reason=reason))
                break


# ---------------------------------------------------------------------------------------------
# script_runner replacement and Polygraphy's poly_* fixtures.
# ---------------------------------------------------------------------------------------------


class RunResult:
    def __init__(self, cmd, returncode, stdout, stderr):
        self.cmd = cmd
        self.returncode = returncode
        self.success = returncode == 0
        self.stdout = stdout
        self.stderr = stderr

    def __bool__(self):  # some tests do `assert poly_run(...)`; console-scripts' result is truthy
        return True


def _rewrite(args):
    """PEER_REWRITE=1 (diagnostic only): drop the options every Polygraphy tool accepts but whose
    absence says nothing about the behaviour under test: -v/-vv.../--verbose, --log-format=X and
    --model-type=onnx (all the tests' models are ONNX)."""
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
            continue
        if a in ("--verbose", "--model-type=onnx") or (a.startswith("-v") and set(a[1:]) == {"v"}):
            continue
        if a.startswith("--log-format="):
            continue
        if a == "--log-format":
            skip = True
            continue
        out.append(a)
    return out


def _run_tool(args, cwd=None, env=None, stdin=None, **_ignored):
    args = [str(a) for a in args]
    if REWRITE:
        args = _rewrite(args)
    cmd = [TOOL] + args
    if isinstance(stdin, io.IOBase) or hasattr(stdin, "read"):
        stdin = stdin.read()
    print(f"# Running console script: {shlex.join(['polygraphy'] + cmd[1:])}")
    print(f"#   (as: {shlex.join(cmd)}; cwd={cwd or os.getcwd()})")
    try:
        proc = sp.run(
            cmd,
            cwd=cwd,
            env=_tool_env(env),
            input=stdin if stdin is not None else None,
            stdin=None if stdin is not None else sp.DEVNULL,
            stdout=sp.PIPE,
            stderr=sp.STDOUT if MERGE else sp.PIPE,
            text=True,
            errors="replace",
            timeout=TOOL_TIMEOUT,
        )
        rc, out, err = proc.returncode, proc.stdout, proc.stderr or ""
    except sp.TimeoutExpired as e:
        rc = 124
        out = e.stdout if isinstance(e.stdout, str) else (e.stdout or b"").decode(errors="replace")
        err = (e.stderr if isinstance(e.stderr, str) else (e.stderr or b"").decode(errors="replace")) + \
            f"\n[peer adapter] killed after {TOOL_TIMEOUT}s"
    print(f"# Script return code: {rc}")
    print("# Script stdout:\n" + out)
    print("# Script stderr:\n" + err)
    return RunResult(cmd, rc, out, err)


@pytest.fixture()
def script_runner():
    class _Runner:
        launch_mode = "subprocess"

        def run(self, command, *arguments, **kwargs):
            if isinstance(command, (list, tuple)):
                arguments = tuple(command[1:]) + arguments
                command = command[0]
            assert command == "polygraphy", command
            return _run_tool(list(arguments), **kwargs)

    return _Runner()


def make_poly_fixture(subtool):
    @pytest.fixture()
    def poly_fixture(script_runner):
        def poly_fixture_impl(additional_opts=[], expect_error=False, *args, **kwargs):
            cmd = ["polygraphy"] + subtool + ([] if DROP_V else ["-v"]) + additional_opts
            status = script_runner.run(*cmd, *args, **kwargs)
            assert status.success == (not expect_error)
            return status

        return poly_fixture_impl

    return poly_fixture


poly = make_poly_fixture([])
poly_run = make_poly_fixture(["run"])
poly_convert = make_poly_fixture(["convert"])
poly_inspect = make_poly_fixture(["inspect"])
poly_check = make_poly_fixture(["check"])
poly_surgeon = make_poly_fixture(["surgeon"])
poly_surgeon_extract = make_poly_fixture(["surgeon", "extract"])
poly_template = make_poly_fixture(["template"])
poly_debug = make_poly_fixture(["debug"])
poly_data = make_poly_fixture(["data"])

"""Running the ``--check`` command and deciding pass or fail.

Two ways to run a check, with the same output and exit status:

- :class:`SubprocessRunner`: any command, as a child process in its own session (so a
  timeout can kill it and everything it started).
- :class:`WarmRunner`: a check that is ``toolkit ...`` (or ``python -m toolkit ...``) runs
  in a forked copy of this process, which has already imported the CLI, numpy, onnx and
  onnxruntime and loaded the data files the check names. The child points fd 1/2 at
  pipes, calls the CLI's entry point and exits with its code, exactly as a fresh
  ``toolkit`` process would, minus the interpreter start-up and imports. The CLI hands
  that entry point in (a :class:`WorkerEntry`): this package never imports the CLI.

What a run's result means (pass, fail, broken, timeout) is decided in ``verdict.py``.

No Typer or Rich here.
"""

from __future__ import annotations

import gc
import importlib
import io
import os
import pkgutil
import re
import selectors
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Pattern, Sequence, Tuple

import toolkit
from toolkit.core.contain import optional
from toolkit.core.errors import ExitCode, ToolkitError, UsageError
from toolkit.core.process.supervise import fork, read_frames, send_frame
from toolkit.reduce.capture import Stream, found_patterns
from toolkit.reduce.evidence import Findings
from toolkit.reduce.verdict import CheckResult

WARM_ENV = "TOOLKIT_NO_WARM_WORKER"

# Verdict classes of one check.
# Options of a toolkit check whose values are data files worth loading once in the parent.
_DATA_OPTIONS = ("--load-inputs", "--load-input-data", "--load-outputs", "--load-output-data")


def _nothing(args: List[str]) -> None:
    return None


@dataclass(frozen=True)
class WorkerEntry:
    """How a forked warm worker runs ``toolkit ARGS``, given by the CLI.

    ``main(args) -> exit code`` runs one command in the child (fresh stdio already in place);
    ``prepare(args)`` warms the parent up once (e.g. builds the command tree the check uses);
    ``result()``, where given, is what the check found, typed (the built-in comparison's
    :class:`~toolkit.reduce.evidence.Findings`), called after ``main`` and handed back through a
    pipe of its own (:func:`toolkit.core.process.supervise.send_frame`): ``CheckResult.findings``.
    """

    main: Callable[[List[str]], int]
    prepare: Callable[[List[str]], None] = _nothing
    result: Optional[Callable[[], Optional[Findings]]] = None


# ---------------------------------------------------------------------- collecting output


def _collect(
    fds: List[int], deadline: Optional[float], tick: Optional[Callable[[], None]], exited: Callable[[], bool],
    patterns: Sequence[Pattern] = (), typed: Optional[Tuple[int, bytearray]] = None,
):
    """Read ``fds`` (stdout, stderr) to EOF into bounded :class:`~toolkit.reduce.capture.Stream`
    objects that search ``patterns`` as the output comes. Returns (streams, timed_out).
    ``typed``: (fd, buffer) of the pipe a typed result comes through, read whole into the buffer.

    Stops at ``deadline``. If the process has exited but something it started still
    holds the pipes, stops reading one second later (the caller then kills its group).
    """
    bufs: Dict[int, Stream] = {fd: Stream(patterns) for fd in fds}
    sel = selectors.DefaultSelector()
    for fd in fds + ([typed[0]] if typed is not None else []):
        sel.register(fd, selectors.EVENT_READ)
    try:
        timed_out = _read_to_end(sel, bufs, typed, deadline, tick, exited)
    finally:
        sel.close()
    return [bufs[fd] for fd in fds], timed_out


def _read_to_end(
    sel, bufs: Dict[int, Stream], typed: Optional[Tuple[int, bytearray]], deadline: Optional[float],
    tick: Optional[Callable[[], None]], exited: Callable[[], bool],
) -> Optional[bool]:
    """Read the pipes of ``sel`` until each is at its end (False), ``deadline`` is past (True), or
    the process exited more than a second ago while something it started holds them (None)."""
    exit_seen_at = None
    while sel.get_map():
        wait = _wait(deadline)
        if wait is None:
            return True
        _read_ready(sel, wait, bufs, typed)
        if tick is not None:
            tick()
        if sel.get_map():
            if exit_seen_at is None:
                if exited():
                    exit_seen_at = time.monotonic()
            elif time.monotonic() - exit_seen_at > 1.0:
                return None  # exited, but left something running that holds our pipes
    return False


def _wait(deadline: Optional[float]) -> Optional[float]:
    """How long to wait for output (at most 0.1 s); None once ``deadline`` is past."""
    if deadline is None:
        return 0.1
    now = time.monotonic()
    return min(0.1, deadline - now) if now < deadline else None


def _read_ready(sel, wait: float, bufs: Dict[int, Stream], typed: Optional[Tuple[int, bytearray]]) -> None:
    """Read what the pipes of ``sel`` have within ``wait`` seconds into ``bufs`` (the typed result's
    pipe into its buffer); a pipe at its end is unregistered."""
    for key, _ in sel.select(wait):
        try:
            data = os.read(key.fd, 1 << 16)
        except OSError:
            data = b""
        if not data:
            sel.unregister(key.fd)
        elif typed is not None and key.fd == typed[0]:
            typed[1].extend(data)
        else:
            bufs[key.fd].add(data)


def _result(streams: List[Stream], patterns: Sequence[Pattern], **fields) -> CheckResult:
    """The CheckResult of a check whose output ``streams`` were collected."""
    out, err = streams
    return CheckResult(
        stdout=out.value(), stderr=err.value(), found=found_patterns(streams, patterns), **fields
    )


# Every check process, and whatever it starts, carries this variable (the reduce's pid): what a
# check detached from its process group (a daemon) is found by it at the end of the reduce.
CHECK_TAG_ENV = "TOOLKIT_CHECK_OF"
_SETPRIV: list = []


def _with_pdeathsig(argv: List[str]) -> List[str]:
    """``argv`` run so that it gets SIGKILL when the reduce dies (Linux): through util-linux's
    ``setpriv --pdeathsig KILL``, which sets it and execs the check in the same process. (A
    ``preexec_fn`` would do it too, but it makes Python fork the whole reduce instead of
    vfork: 0.8 -> 160 ms per check for a 1 GB process.) Unchanged where setpriv is missing."""
    if not _SETPRIV:
        found = shutil.which("setpriv") if sys.platform.startswith("linux") else None
        if found:
            try:
                ok = subprocess.run([found, "--pdeathsig", "KILL", "--", "true"], stdin=subprocess.DEVNULL,
                                    capture_output=True, timeout=10).returncode == 0
            except (OSError, subprocess.SubprocessError):
                ok = False
            found = found if ok else None
        _SETPRIV.append(found)
    return [_SETPRIV[0], "--pdeathsig", "KILL", "--", *argv] if _SETPRIV[0] else list(argv)


def check_env(extra: Optional[dict]) -> dict:
    """The environment of a check: ours, ``extra``, and the tag that finds its strays."""
    return dict(os.environ, **(extra or {}), **{CHECK_TAG_ENV: str(os.getpid())})


def stop_strays() -> int:
    """Kill the processes the checks of this reduce left running outside their process group
    (found by :data:`CHECK_TAG_ENV` in their environment, Linux); how many there were."""
    if not os.path.isdir("/proc"):
        return 0
    tag = f"{CHECK_TAG_ENV}={os.getpid()}".encode() + b"\0"
    me = os.getpid()
    found = 0
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        if b"\0" + tag in _environ(name):
            found += _sigkill(int(name))
    return found


def _environ(pid: str) -> bytes:
    """The environment of process ``pid`` as /proc holds it, after a NUL (b"" when it cannot be read)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return b"\0" + f.read()
    except OSError:
        return b""


def _sigkill(pid: int) -> bool:
    """Send SIGKILL to ``pid``; whether it was sent."""
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        return False
    return True


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _kill_stragglers(pid: int) -> None:
    """Kill what is left in the process group of check ``pid`` (the check itself may be gone)."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _wait_for_exit(proc: subprocess.Popen, deadline: Optional[float]) -> bool:
    """After a check's output ended, wait for the check itself to exit (until ``deadline``):
    killing its group at once would kill a program that closes its output just before it
    exits (``cat``), and its exit would read as SIGKILL. True when the deadline passed."""
    try:
        proc.wait(timeout=None if deadline is None else max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        return True
    return False


def _reap(pid: int, deadline: Optional[float], status_box: list) -> bool:
    """:func:`_wait_for_exit` for a forked check ``pid``: its status into ``status_box``;
    False when ``deadline`` passed first."""
    while deadline is None or time.monotonic() < deadline:
        if poll_status(pid, status_box):
            return True
        time.sleep(0.002)
    return False


def poll_status(pid: int, status_box: list) -> bool:
    """Whether forked check ``pid`` has exited (its wait status appended to ``status_box``)."""
    try:
        wpid, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    if wpid:
        status_box.append(status)
        return True
    return False


def _decode_status(status: int):
    """(code, signal) from a waitpid status."""
    if os.WIFSIGNALED(status):
        return None, os.WTERMSIG(status)
    if os.WIFEXITED(status):
        return os.WEXITSTATUS(status), None
    return None, None


# ---------------------------------------------------------------------- runners


class SubprocessRunner:
    """Runs the check as a child process in a new session (its own process group)."""

    kind = "subprocess"

    def __init__(
        self, argv: Sequence[str], timeout: Optional[float] = None, env: Optional[dict] = None,
        patterns: Sequence[Pattern] = (),
    ):
        self.argv = list(argv)
        self.timeout = timeout
        self.env = dict(env) if env else None  # added to the environment of the check
        self.patterns = list(patterns)  # --fail-regex, searched as the output comes
        self.active_pid: Optional[int] = None  # the check running now (its process group)

    def run(self, tick: Optional[Callable[[], None]] = None) -> CheckResult:
        start = time.monotonic()
        exe = self.argv[0]
        if shutil.which(exe) is None:
            # as a shell would: 127, one line; the check is then classified as broken
            msg = f"error: check command '{exe}' not found; give a program on PATH or a path to it after --check\n"
            return CheckResult(127, b"", msg.encode(), seconds=time.monotonic() - start)
        try:
            proc = subprocess.Popen(
                _with_pdeathsig(self.argv),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
                env=check_env(self.env),
            )
        except OSError as exc:
            msg = f"error: cannot run check command '{exe}': {exc.strerror or exc}\n"
            return CheckResult(126, b"", msg.encode(), seconds=time.monotonic() - start)
        return self._watch(proc, start, tick)

    def _watch(self, proc: subprocess.Popen, start: float, tick: Optional[Callable[[], None]]) -> CheckResult:
        """The result of the check started as ``proc`` (at ``start``): its output read to its end
        (or its timeout), then what it left running in its group killed."""
        self.active_pid = proc.pid
        deadline = start + self.timeout if self.timeout else None
        assert proc.stdout is not None and proc.stderr is not None  # both piped
        fds = [proc.stdout.fileno(), proc.stderr.fileno()]
        try:
            streams, timed_out = _collect(fds, deadline, tick, lambda: proc.poll() is not None, self.patterns)
            if timed_out is False:  # its output ended (a program may close it just before it exits): let it exit
                timed_out = _wait_for_exit(proc, deadline)
            _kill_stragglers(proc.pid)  # timed out, or what the check left running in its group
            timed_out = bool(timed_out)
            proc.stdout.close()
            proc.stderr.close()
            rc = proc.wait()
        except BaseException:
            _kill_group(proc.pid)
            proc.wait()
            raise
        finally:
            self.active_pid = None
        seconds = time.monotonic() - start
        if timed_out:
            return _result(streams, self.patterns, code=None, timed_out=True, seconds=seconds)
        if rc < 0:
            return _result(streams, self.patterns, code=None, signal=-rc, seconds=seconds)
        return _result(streams, self.patterns, code=rc, seconds=seconds)

    def cancel(self) -> None:
        """Kill the running check and what it started (from another thread)."""
        _cancel(self)

    def close(self) -> None:
        pass


def _cancel(runner) -> None:
    pid = runner.active_pid
    if pid is not None:
        _kill_group(pid)


# A warm check is forked between making its pipes and closing their write ends in the
# parent; a fork by another thread (parallel checks) in between would hand those write
# ends to a second child and delay the first one's end of output.
_FORK_LOCK = threading.Lock()


def _fresh_fork_lock() -> None:  # pragma: no cover - child only
    global _FORK_LOCK
    _FORK_LOCK = threading.Lock()


def toolkit_args(argv: Sequence[str]) -> Optional[List[str]]:
    """The toolkit arguments if ``argv`` runs this toolkit (``toolkit ...``, ``python -m toolkit ...``)."""
    if not argv:
        return None
    exe = os.path.basename(argv[0])
    if exe == "toolkit":
        return list(argv[1:]) if _is_ours(argv[0]) else None
    if _python_m_toolkit(exe, argv):
        return list(argv[3:])
    return None


def _python_m_toolkit(exe: str, argv: Sequence[str]) -> bool:
    """Is ``argv`` (its program's name ``exe``) ``python -m toolkit ...``?"""
    return bool(re.fullmatch(r"python(\d+(\.\d+)?)?", exe)) and len(argv) >= 3 and argv[1] == "-m" and argv[2] == "toolkit"


def _is_ours(command: str) -> bool:
    """Whether the ``toolkit`` command ``command`` is this toolkit: one not on PATH (run
    in-process anyway, it is us), or one of our interpreter's (another installation's `toolkit`
    on PATH is not ours: it runs for real)."""
    found = shutil.which(command)
    if found is None:
        return True
    here = os.path.dirname(os.path.abspath(sys.executable))
    return os.path.dirname(os.path.abspath(found)) == here or _is_our_script(found)


def _is_our_script(path: str) -> bool:
    """True if the script at ``path`` starts with our interpreter's shebang."""
    try:
        with open(path, "rb") as fh:
            first = fh.readline(512)
    except OSError:
        return False
    if not first.startswith(b"#!"):
        return False
    ours = {sys.executable.encode(), os.path.realpath(sys.executable).encode()}
    return any(p in first for p in ours)


def data_files_in(args: Sequence[str]) -> List[str]:
    """Paths given to --load-inputs / --load-outputs in a toolkit command line."""
    out: List[str] = []
    taking = False  # (after one of those options: its values, up to the next option; '-' is stdin)
    for tok in args:
        if taking and (not tok.startswith("-") or tok == "-"):
            if tok != "-":
                out.append(tok)
            continue
        name, eq, value = tok.partition("=")
        taking = name in _DATA_OPTIONS
        if taking and eq:
            out.append(value)
    return out


class WarmRunner:
    """Runs ``toolkit ARGS`` in a forked copy of this (already warm) process."""

    kind = "warm"

    def __init__(
        self,
        args: Sequence[str],
        timeout: Optional[float] = None,
        argv0: str = "toolkit",
        *,
        entry: WorkerEntry,
        env: Optional[dict] = None,
        patterns: Sequence[Pattern] = (),
    ):
        self.args = list(args)
        self.patterns = list(patterns)  # --fail-regex, searched as the output comes
        self.timeout = timeout
        self.argv0 = argv0
        self.entry = entry
        self.env = dict(env) if env else None  # set in the check's environment
        self.active_pid: Optional[int] = None
        self._prepared = False

    def prepare(self, loading: Optional[Callable[[str, int], None]] = None) -> None:
        """Import what the check will need and load its data files (once, in the parent).

        ``loading(path, nbytes)`` is told about each data file before it is read."""
        if self._prepared:
            return
        self._prepared = True

        _import_for(self.args)
        _ = toolkit
        self.entry.prepare(list(self.args))  # (the check builds the same command tree: a failure is toolkit's)
        _load_data_files(self.args, loading)
        _warm_onnx()
        # What exists now lives as long as we do: keep the collector off it, so that
        # children do not copy its pages by touching it (copy-on-write).

        gc.collect()
        gc.freeze()

    def _fork(self) -> Tuple[int, int, int, Optional[int]]:
        """Start the check in a forked child: (pid, read end of its stdout, of its stderr, of the
        pipe its typed result comes through: None unless the entry gives one)."""
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        parent = os.getpid()
        with _FORK_LOCK:
            r_out, w_out = os.pipe()
            r_err, w_err = os.pipe()
            r_res, w_res = os.pipe() if self.entry.result is not None else (None, None)
            try:
                pid = fork()  # (the child dies with this process; no signal is lost meanwhile)
            except BaseException:
                _close(r_out, w_out, r_err, w_err, r_res, w_res)
                raise
            if pid == 0:  # pragma: no cover - runs in the child
                self._in_child(parent, (r_out, r_err, r_res), w_out, w_err, w_res)
            _close(w_out, w_err, w_res)
        return pid, r_out, r_err, r_res

    def _in_child(self, parent: int, read_ends: tuple, w_out: int, w_err: int, w_res: Optional[int]):  # pragma: no cover
        """The forked child: run the check, its output to ``w_out``/``w_err`` (its typed result to
        ``w_res``), and exit with its code."""
        code = 1
        _fresh_fork_lock()  # ours is held (copied locked): a check that forks needs its own
        try:
            _close(*read_ends)
            os.environ.update(self.env or {}, **{CHECK_TAG_ENV: str(parent)})
            code = _child(self.entry, self.argv0, self.args, w_out, w_err)
            if w_res is not None:
                _send_result(self.entry, w_res)
        finally:
            os._exit(code)

    def run(self, tick: Optional[Callable[[], None]] = None) -> CheckResult:
        self.prepare()
        start = time.monotonic()
        pid, r_out, r_err, r_res = self._fork()
        self.active_pid = pid
        deadline = start + self.timeout if self.timeout else None
        status_box: List[int] = []
        typed = (r_res, bytearray()) if r_res is not None else None

        def exited() -> bool:
            return bool(status_box) or poll_status(pid, status_box)

        try:
            streams, timed_out = _collect([r_out, r_err], deadline, tick, exited, self.patterns, typed)
            timed_out = _end_child(pid, deadline, timed_out, status_box)
        except BaseException:
            _kill_group(pid)
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
            raise
        finally:
            self.active_pid = None
            _close(r_out, r_err, r_res)
        seconds = time.monotonic() - start
        if timed_out:
            return _result(streams, self.patterns, code=None, timed_out=True, seconds=seconds)
        code, sig = _decode_status(status_box[0])
        findings = _typed_result(typed[1]) if typed is not None else None
        return _result(streams, self.patterns, code=code, signal=sig, seconds=seconds, findings=findings)

    def cancel(self) -> None:
        """Kill the running check and what it started (from another thread)."""
        _cancel(self)

    def close(self) -> None:
        pass


def _end_child(pid: int, deadline: Optional[float], timed_out: Optional[bool], status_box: List[int]) -> bool:
    """Once the output of check ``pid`` is collected (``timed_out`` as :func:`_collect` says): its
    group killed when it timed out or left something holding its pipes, else the check reaped
    (a timeout when it outlives ``deadline``) and what it left running killed; its status in
    ``status_box``. Whether it timed out."""
    if timed_out is not False:  # timed out, or stragglers of an exited check
        _kill_group(pid)
        timed_out = bool(timed_out)
    else:
        if not status_box and not _reap(pid, deadline, status_box):
            timed_out = True
        _kill_stragglers(pid)
    if not status_box:
        _, status = os.waitpid(pid, 0)
        status_box.append(status)
    return timed_out


def _import_for(args: Sequence[str]) -> None:
    """Import what a check of ``args`` will need: numpy, onnx, onnxruntime for run and debug
    commands, and toolkit's own modules (commands import them lazily; imported once here)."""
    for mod in ("numpy", "onnx"):
        importlib.import_module(mod)
    if args and args[0] in ("run", "debug"):
        _import_optional("onnxruntime")  # import only: no session, no device context
    for sub in ("core", "backends", "run"):
        _import_package(f"toolkit.{sub}")


def _import_package(name: str) -> None:
    """Every module of the package ``name`` that can be imported (optional extras may be missing).
    (They import tensorrt/onnxruntime lazily, inside functions: no device context here.)"""
    pkg = _import_optional(name)
    if pkg is None:
        return
    for info in pkgutil.iter_modules(pkg.__path__, prefix=f"{name}."):
        _import_optional(info.name)


def _import_optional(name: str):
    """The module ``name`` imported, or None when it cannot be."""
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def _load_data_files(args: Sequence[str], loading: Optional[Callable[[str, int], None]]) -> None:
    """Load the data files ``args`` name (``loading(path, nbytes)`` told before each is read)."""
    for path in data_files_in(args):
        if loading is not None:
            try:
                loading(path, os.path.getsize(path))
            except OSError:
                pass
        from toolkit.core.io.datafiles import load_data  # (numpy: not for a subprocess check, e.g. on a Ray node)

        try:
            load_data(path)  # cached by path/size/mtime; children inherit it
        except (ToolkitError, OSError):  # the check itself reports bad files
            pass


def _warm_onnx() -> None:
    """Initialise onnx's operator schema registry once (its first shape inference is slow)."""
    import onnx
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "warm", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 7
    optional(onnx.shape_inference.infer_shapes, model, data_prop=True)  # (only a warm-up)
    optional(onnx.checker.check_model, model)


def _close(*fds: Optional[int]) -> None:
    for fd in fds:
        if fd is not None:
            os.close(fd)


def _send_result(entry: WorkerEntry, fd: int) -> None:  # pragma: no cover - child only
    """In the check's child, after ``entry.main``: its typed result, one frame through ``fd``."""
    assert entry.result is not None
    with os.fdopen(fd, "wb") as pipe:
        send_frame(pipe, ("value", entry.result()))


def _typed_result(data: bytearray) -> Optional[Findings]:
    """The typed result a check's child sent (None when it ended before sending it)."""
    values = [payload for kind, payload in read_frames(bytes(data)) if kind == "value"]
    return values[-1] if values else None


def _exit_code(entry: WorkerEntry, args: List[str], crashes) -> int:
    """``entry.main(args)`` ended as a process would end: its exit code; an exception of the
    types ``crashes`` is a crash of the check (its traceback on stderr, exit code 70: a toolkit
    command ends at its own error boundary, so what escapes ``entry`` is a bug of toolkit's, as
    the command line says of one)."""
    try:
        code = entry.main(list(args))
        return int(code) if isinstance(code, int) else 0
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except crashes:  # noqa: BLE001 - a crash of the check is its failure
        import traceback

        traceback.print_exc()
        return int(ExitCode.INTERNAL)


def _child(entry: WorkerEntry, argv0: str, args: List[str], w_out: int, w_err: int) -> int:  # pragma: no cover - child only
    """Become a fresh ``toolkit`` process: own session, stdio on the pipes, run main()."""
    os.setsid()
    signal.signal(signal.SIGINT, signal.default_int_handler)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(w_out, 1)
    os.dup2(w_err, 2)
    os.close(w_out)
    os.close(w_err)
    enc = getattr(sys.stdout, "encoding", None) or "utf-8"
    streams = {
        "stdin": open(0, "r", closefd=False),
        "stdout": open(1, "w", encoding=enc, errors="strict", closefd=False),
        "stderr": open(2, "w", encoding=enc, errors="backslashreplace", closefd=False, buffering=1),
    }
    for name, opened in streams.items():  # sys.X and sys.__X__: a fresh process has both on fd 0/1/2
        setattr(sys, name, opened)
        setattr(sys, f"__{name}__", opened)
    sys.argv = [argv0] + list(args)
    code = _exit_code(entry, args, BaseException)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (BrokenPipeError, OSError, ValueError):
            pass
    return code & 0xFF


def run_in_process(entry: WorkerEntry, argv0: str, args: List[str]) -> CheckResult:
    """Run ``toolkit ARGS`` by ``entry.main`` in this very process, its stdout and stderr
    captured: the same exit code and output as :class:`WarmRunner`'s forked child gives,
    without the fork (for checks that open no device context and need no timeout).

    Ctrl-C is not the check's failure: it propagates."""

    start = time.monotonic()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    out, err = io.StringIO(), io.StringIO()
    saved = (sys.stdout, sys.stderr, sys.argv)
    sys.stdout, sys.stderr, sys.argv = out, err, [argv0] + list(args)
    try:
        code = _exit_code(entry, args, Exception)  # (Ctrl-C propagates)
    finally:
        sys.stdout, sys.stderr, sys.argv = saved
    return CheckResult(
        code & 0xFF, out.getvalue().encode("utf-8"), err.getvalue().encode("utf-8", "backslashreplace"),
        seconds=time.monotonic() - start, findings=entry.result() if entry.result is not None else None,
    )


def make_runner(
    argv: Sequence[str],
    timeout: Optional[float] = None,
    *,
    warm: Optional[bool] = None,
    entry: Optional[WorkerEntry] = None,
    env: Optional[dict] = None,
    patterns: Sequence[Pattern] = (),
):
    """The runner for ``argv``: warm fork for toolkit checks (unless disabled, or no ``entry``
    was given to run them with), else a subprocess. ``env``: variables added to the check's
    environment; ``patterns``: the --fail-regex patterns, searched in the output as it comes
    (only a bounded head and tail of it is kept)."""
    _validate_check(argv, timeout)
    if warm is None:
        warm = _warm_by_default()
    args = toolkit_args(argv)
    if args is not None and warm and entry is not None:
        return WarmRunner(args, timeout, argv0=argv[0], entry=entry, env=env, patterns=patterns)
    if args is not None and shutil.which(argv[0]) is None:
        # `toolkit` is not on PATH (venv not activated): it is this toolkit, run it by module
        argv = [sys.executable, "-m", "toolkit", *args]
    return SubprocessRunner(argv, timeout, env=env, patterns=patterns)


def _warm_by_default() -> bool:
    """Are toolkit checks run in a forked copy of this process (not turned off by the environment, and fork exists)?"""
    return os.environ.get(WARM_ENV, "") in ("", "0") and hasattr(os, "fork")


def _validate_check(argv: Sequence[str], timeout: Optional[float]) -> None:
    """UsageError for a --check without a command, or a --check-timeout that is not positive."""
    if not argv:
        raise UsageError("--check needs a command after it, e.g. --check toolkit run polygraphy_debug.onnx --onnxrt")
    if timeout is not None and timeout <= 0:
        raise UsageError(f"--check-timeout must be positive, got {timeout}")

"""Checks on a Ray cluster for ``debug reduce --cluster ray[:ADDRESS]``.

Everything that touches Ray lives here; ``ray`` is imported only when a cluster is asked for.

- :class:`RayCluster` connects (``ray.init``: the address given, else Ray's own discovery of a
  running cluster, else a local one), says how many checks fit at once, puts the check's data
  files (``--load-inputs``, ``--load-outputs``) in the object store once, and makes one
  :class:`RayRunner` per worker of the reduce.
- :class:`RayRunner` has the runner protocol of :mod:`toolkit.reduce.parallel` (``run(tick)``,
  ``cancel()``, ``close()``): it reads the candidate the reducer wrote (a small ``.onnx``; its
  weights are references to the model's data files) and runs :func:`run_check` as a Ray task
  with the resources of one check, so Ray places it and sets ``CUDA_VISIBLE_DEVICES``.
- :func:`run_check` is the task body, on the worker node: the candidate goes into a fresh
  folder (the data files' own folder when the candidate names them by their file names, else
  a fresh folder with a clone or copy of them), the
  data files into a per-node cache, and the check command runs there as a local check would
  (own session, ``--check-timeout``, output captured).

A task lost with its node is retried by Ray (``max_retries``); one lost every time is a
broken check (``CheckResult.lost``), never a failure. Cancelling (Ctrl-C) first interrupts
the task, which kills its check and everything the check started, then forces it.

No Typer or Rich here.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from toolkit.core.contain import optional
from toolkit.core.errors import DependencyError, InferenceError, ToolkitError, UsageError
from toolkit.core.graph.graphs import external_data_locations
from toolkit.core.install import import_extra
from toolkit.reduce.check import data_files_in, toolkit_args
from toolkit.reduce.parallel import WORKER_ENV
from toolkit.reduce.ray_task import call_task, clean_cache, ready, run_check
from toolkit.reduce.verdict import CheckResult
from toolkit.run.registry import KINDS, get_kind
from toolkit.run.specs import parse_runner_spec

RETRIES = 2  # Ray retries a task lost with its node (or worker process) this many times
CANCEL_GRACE = 3.0  # seconds a cancelled task has to kill its check before it is forced
_LOG_LOCK = threading.Lock()


def parse_cluster(text: str) -> Optional[str]:
    """``ray`` -> None (Ray finds the cluster); ``ray:ADDRESS`` -> ADDRESS."""
    kind, sep, address = text.partition(":")
    if kind != "ray":
        raise UsageError(f"--cluster {text}: the only cluster engine is ray; use --cluster ray or ray:ADDRESS")
    if sep and not address.strip():
        raise UsageError("--cluster ray: needs an address after the colon, e.g. ray:10.0.0.1:6379 (or plain ray)")
    return address.strip() or None


def import_ray():
    """The ``ray`` module, or exit 4 naming the extra."""
    return import_extra("ray", "ray", "--cluster ray needs Ray, which is not installed")


def uses_gpu(argv: Sequence[str]) -> bool:
    """Whether a toolkit check runs a runner that needs an NVIDIA GPU (its kind says so:
    ``--trt``, a ``trt`` spec, ONNX-Runtime with the CUDA or TensorRT provider)."""
    args = toolkit_args(argv)
    if args is None:
        return False
    providers = _option_value(args, "--providers") or _option_value(args, "--execution-providers")
    if providers and get_kind("onnxrt").uses_gpu({"providers": providers}):
        return True  # (the providers of ONNX-Runtime, the default runner)
    flags = {kind.flag: kind for kind in KINDS.values()}
    return any(_selects_gpu(args, i, flags) for i in range(1, len(args)))


def _selects_gpu(args: Sequence[str], i: int, flags: dict) -> bool:
    """Whether ``args[i]`` selects a runner that needs a GPU: its flag (``--trt``), or a runner
    spec after ``--compare`` / ``--runners``."""
    kind = flags.get(args[i])
    if kind is not None and kind.uses_gpu({}):
        return True
    if not _in_spec_list(args, i):
        return False
    try:
        spec = parse_runner_spec(args[i])
    except ToolkitError:
        return False
    return get_kind(spec.kind).uses_gpu(spec.options)


_SPEC_LISTS = ("--compare", "--runners")


def _in_spec_list(args: Sequence[str], i: int) -> bool:
    """Whether ``args[i]`` is one of the runner specs that follow ``--compare`` / ``--runners``."""
    j = i
    while j > 0 and not args[j - 1].startswith("-"):
        j -= 1
    return j > 0 and args[j - 1] in _SPEC_LISTS


def _option_value(args: Sequence[str], flag: str) -> Optional[str]:
    for i, tok in enumerate(args):
        if tok == flag and i + 1 < len(args):
            return args[i + 1]
        if tok.startswith(flag + "="):
            return tok.split("=", 1)[1]
    return None


@dataclass
class ClusterOptions:
    address: Optional[str] = None
    gpus_per_check: Optional[float] = None  # None: 1 for a GPU check, else 0
    cpus_per_check: float = 1.0
    retries: int = RETRIES


class RayCluster:
    """One reduce's connection to a Ray cluster and what its checks share."""

    def __init__(
        self, opts: ClusterOptions, check: Sequence[str], iter_artifact: str, timeout: Optional[float],
        log: Callable[[str], None],
    ):
        self.opts = opts
        self.check = list(check)
        self.iter_artifact = iter_artifact  # the path the check command names
        self.timeout = timeout
        self.log = log
        self.ray: Any = None
        self.run_id = uuid.uuid4().hex[:12]
        self.gpus = opts.gpus_per_check if opts.gpus_per_check is not None else (1.0 if uses_gpu(check) else 0.0)
        self.cpus = opts.cpus_per_check
        self.data: List[Tuple[str, str, Any]] = []  # (path in the command, file name, object ref)
        self._data_files: Callable[[], List[str]] = list
        self._task: Any = None
        self.runners: List["RayRunner"] = []
        self.retried = 0
        self._warming: list = []
        self._remotes: Dict[Callable, Any] = {}
        self.jobs = 1  # the most checks at once (set by open_for_reduce)
        self.started_here = False  # ray.init started a local cluster (it stops with this process)
        self.start_seconds = 0.0

    # -------------------------------------------------------------- set-up

    def connect(self) -> "RayCluster":
        if self.gpus < 0 or self.cpus < 0:
            raise UsageError("--gpus-per-check and --cpus-per-check cannot be negative")
        ray = self.ray = import_ray()
        _messages_to_stderr(ray)
        kw: Dict[str, Any] = dict(logging_level=logging.ERROR, log_to_driver=False, configure_logging=True)
        start = time.monotonic()
        try:
            if not ray.is_initialized():
                ray.init(address=self.opts.address, **kw)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            where = self.opts.address or "the cluster Ray found"
            raise DependencyError(f"--cluster ray: cannot connect to {where}: {exc}") from None
        self.start_seconds = time.monotonic() - start
        self.started_here = _started_here(ray)
        try:
            self._check_resources()
        except BaseException:
            ray.shutdown()  # (a cluster started for this reduce stops with it)
            raise
        self._task = ray.remote(run_check)
        self._share_data()
        return self

    def _check_resources(self) -> None:
        have = self.ray.cluster_resources()
        if self.gpus and have.get("GPU", 0) < self.gpus:
            raise DependencyError(
                f"each check asks for {self.gpus:g} GPU(s) but the Ray cluster has {have.get('GPU', 0):g}; "
                "add GPU nodes, or give --gpus-per-check 0 to run the checks on CPUs"
            )
        if have.get("CPU", 0) < self.cpus:
            raise DependencyError(
                f"each check asks for {self.cpus:g} CPU(s) but the Ray cluster has {have.get('CPU', 0):g}; "
                "give a smaller --cpus-per-check"
            )

    def default_jobs(self) -> int:
        """Checks that fit on the cluster at once: its GPUs (GPU checks) or CPUs per check."""
        have = self.ray.cluster_resources()
        if self.gpus:
            return max(int(have.get("GPU", 0) // self.gpus), 1)
        return max(int(have.get("CPU", 0) // self.cpus), 1) if self.cpus else max(int(have.get("CPU", 1)), 1)

    def _share_data(self) -> None:
        """The data files a toolkit check names: in the object store once for the whole reduce."""
        args = toolkit_args(self.check)
        if args is None:
            return
        for k, path in enumerate(dict.fromkeys(data_files_in(args))):
            try:
                with open(path, "rb") as fh:
                    blob = fh.read()
            except OSError:
                continue  # the check reports it, as it would locally
            self.data.append((path, f"{k}_{os.path.basename(path)}", self.ray.put(blob)))

    def warm_up(self, count: int) -> None:
        """Have Ray start the worker processes of ``count`` checks now (a worker process takes
        a second or more to start), while this process loads the model.

        The warm-up tasks are the check's own task (or the call task) doing nothing: the same
        scheduling class as the checks, so their worker leases pass straight to the first
        checks, and Ray does not start workers for a second class."""
        opts = dict(num_cpus=self.cpus, num_gpus=self.gpus)
        if self.check:
            task = self._task.options(**opts)
            self._warming = [task.remote(None, b"", []) for _ in range(max(count, 0))]
        else:
            task = self._call_remote().options(**opts)
            self._warming = [task.remote(ready) for _ in range(max(count, 0))]

    def bind(self, data_files: Callable[[], List[str]]) -> None:
        """``data_files()``: the real paths of the model's data files that candidates refer to."""
        self._data_files = data_files

    def runner(self, number: int, artifact: str, env: Optional[Dict[str, str]] = None) -> "RayRunner":
        r = RayRunner(self, number, artifact)
        self.runners.append(r)
        return r

    def close(self) -> None:
        """Stop every task still running, remove the data cache on each node, disconnect."""
        ray = self.ray
        if ray is None or not ray.is_initialized():
            return
        for r in self.runners:
            r.cancel(force=True)
        start = time.monotonic()
        try:
            self._clean_nodes()
        finally:
            ray.shutdown()
            what = "stopped the local Ray cluster" if self.started_here else "disconnected from the Ray cluster"
            self.log(f"Ray: {what} in {time.monotonic() - start:.1f} s")

    def fits(self, have: Dict[str, float]) -> int:
        """Checks the cluster runs at once: its CPUs and GPUs divided by what each check asks for."""
        counts = [int(have.get("CPU", 0) // self.cpus)] if self.cpus else []
        counts += [int(have.get("GPU", 0) // self.gpus)] if self.gpus else []
        return max(min(counts), 1) if counts else max(int(have.get("CPU", 1)), 1)

    def describe(self, jobs: Optional[int] = None) -> str:
        """What the cluster has, what a check asks for and how many run at once; how long Ray took
        to start (a local cluster started for this run) or to connect."""
        res = self.ray.cluster_resources()
        how = "started a local cluster (stopped at the end)" if self.started_here else "connected"
        line = (
            f"Ray cluster: {how} in {self.start_seconds:.1f} s; {res.get('CPU', 0):g} CPU(s), {res.get('GPU', 0):g} "
            f"GPU(s); each check asks for {self.cpus:g} CPU(s) and {self.gpus:g} GPU(s)"
        )
        if jobs is None:
            return line
        fits = self.fits(res)
        if jobs <= fits:
            return f"{line}; up to {jobs} at once"
        return f"{line}; {fits} at once (all the cluster fits; --jobs {jobs}: Ray queues the rest)"

    def _clean_nodes(self) -> None:
        if not self.data:
            return
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        clean = self.ray.remote(clean_cache)
        refs = []
        for node in self.ray.nodes():
            if node.get("Alive"):
                strategy = NodeAffinitySchedulingStrategy(node_id=node["NodeID"], soft=False)
                refs.append(clean.options(num_cpus=0, scheduling_strategy=strategy).remote(self.run_id))
        self.ray.wait(refs, num_returns=len(refs), timeout=10)

    # -------------------------------------------------------------- one check

    def submit(self, number: int, artifact: str, candidate: bytes, links: Dict[str, str]):
        spec = {
            "argv": self.check,
            "artifact": artifact,
            "named": self.iter_artifact,
            "links": links,
            "data": [(path, name) for path, name, _ in self.data],
            "timeout": self.timeout,
            "env": {WORKER_ENV: str(number)},
            "cwd": os.getcwd(),
            "run_id": self.run_id,
        }
        task = self._task.options(num_cpus=self.cpus, num_gpus=self.gpus, max_retries=self.opts.retries)
        return task.remote(spec, candidate, [ref for *_, ref in self.data])

    def links_for(self, artifact: str, candidate: bytes) -> Dict[str, str]:
        """{location in the candidate: the model's data file it is} for its external weights."""
        locations = external_locations(candidate)
        if not locations:
            return {}
        sources = self._data_files()
        folder = os.path.dirname(os.path.abspath(artifact))
        out = {}
        for loc in locations:
            local = os.path.join(folder, loc)
            found = next((s for s in sources if _same(local, s)), None)
            out[loc] = found or os.path.abspath(local)
        return out

    def put(self, value) -> Any:
        """``value`` in the object store (once; every task given it reads it from there)."""
        return self.ray.put(value)

    def call(self, fn: Callable, *args):
        """``fn(*args)`` as a task with one check's resources; its value, or its exception.

        A task lost every time raises InferenceError (the check could not run); Ctrl-C cancels it."""

        ray = self.ray
        ref = self._call_remote().options(num_cpus=self.cpus, num_gpus=self.gpus, max_retries=self.opts.retries).remote(fn, *args)
        try:
            while not ray.wait([ref], timeout=0.1)[0]:
                pass
        except BaseException:
            cancel_and_wait(ray, ref)
            raise
        value, attempt, node = self._outcome(ref)
        if attempt:
            self.note_retry(0, attempt, node)
        return value

    def _outcome(self, ref) -> tuple:
        """(value, attempt, node) of a finished call task; the exception it raised (a toolkit error,
        Ctrl-C) raised again, any other as InferenceError, as is a task lost every time."""
        ray = self.ray
        try:
            return ray.get(ref)
        except ray.exceptions.RayTaskError as exc:
            cause = getattr(exc, "cause", None)
            if isinstance(cause, (ToolkitError, KeyboardInterrupt)):
                raise cause from None
            raise InferenceError(f"the check failed on its Ray node: {cause or exc}") from None
        except ray.exceptions.RayError as exc:
            raise InferenceError(
                f"the check's Ray task was lost after {self.opts.retries + 1} tries ({type(exc).__name__})"
            ) from None

    def _call_remote(self):
        task = self._remotes.get(call_task)
        if task is None:
            task = self._remotes[call_task] = self.ray.remote(call_task)
        return task

    def note_retry(self, number: int, attempt: int, node: str) -> None:
        self.retried += 1
        with _LOG_LOCK:
            self.log(
                f"a check's Ray task (worker {number}) was lost with its node or process and retried by Ray: "
                f"attempt {attempt + 1} ran on {node}"
            )


def _started_here(ray) -> bool:
    """Whether ``ray.init`` started the cluster's head in this process (no cluster to join)."""
    worker = getattr(getattr(getattr(ray, "_private", None), "worker", None), "global_worker", None)
    return bool(getattr(getattr(worker, "node", None), "head", False))


def _messages_to_stderr(ray) -> None:
    """Ray's own messages (a node lost, ...) go to stderr: stdout carries data (``--json``)."""
    worker: Any = getattr(getattr(ray, "_private", None), "worker", None)
    original = getattr(worker, "print_to_stdstream", None)
    if worker is None or original is None or getattr(original, "_toolkit", False):
        return

    def to_stderr(data, *args, **kwargs):
        return original(dict(data, is_err=True), *args, **kwargs)

    to_stderr._toolkit = True  # type: ignore[attr-defined]
    worker.print_to_stdstream = to_stderr


def _same(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def external_locations(candidate: bytes) -> List[str]:
    """The external data locations a serialized model refers to (its own graph and subgraphs)."""
    if b"location" not in candidate:
        return []
    import onnx  # (after connecting: Ray starts the worker processes while onnx loads)

    model = onnx.ModelProto()
    model.ParseFromString(candidate)
    return external_data_locations(model)


class RayRunner:
    """One worker's checks as Ray tasks (the runner protocol of :mod:`toolkit.reduce.parallel`)."""

    kind = "ray"

    def __init__(self, cluster: RayCluster, number: int, artifact: str):
        self.cluster = cluster
        self.number = number
        self.artifact = artifact
        self.ref: Any = None
        self._cancelled_at: Optional[float] = None

    def run(self, tick: Optional[Callable[[], None]] = None) -> CheckResult:
        ray = self.cluster.ray
        start = time.monotonic()
        with open(self.artifact, "rb") as fh:
            candidate = fh.read()
        links = self.cluster.links_for(self.artifact, candidate)
        self._cancelled_at = None
        self.ref = self.cluster.submit(self.number, self.artifact, candidate, links)
        try:
            while not ray.wait([self.ref], timeout=0.1)[0]:
                if tick is not None:
                    tick()
            return self._result(start)
        except BaseException:
            self.cancel()
            self._wait_cancelled()
            raise
        finally:
            self.ref = None

    def _result(self, start: float) -> CheckResult:
        ray = self.cluster.ray
        try:
            out = ray.get(self.ref)
        except ray.exceptions.TaskCancelledError:
            if self._cancelled_at is not None:
                return CheckResult(None, b"", b"cancelled\n", signal=9, seconds=time.monotonic() - start)
            return _lost("its Ray task was cancelled", start)
        except ray.exceptions.RayError as exc:
            return _lost(f"its Ray task was lost after {self.cluster.opts.retries + 1} tries ({type(exc).__name__})", start)
        if out["attempt"]:
            self.cluster.note_retry(self.number, out["attempt"], out["node"])
        res = CheckResult(out["code"], out["stdout"], out["stderr"], out["signal"], out["timed_out"], out["seconds"])
        return res

    def cancel(self, force: bool = False) -> None:
        """Interrupt the running task (its check killed with what it started); force it later."""
        ref = self.ref
        if ref is None:
            return
        now = time.monotonic()
        if self._cancelled_at is None:
            self._cancelled_at = now
        force = force or now - self._cancelled_at > CANCEL_GRACE
        optional(self.cluster.ray.cancel, ref, force=force)  # (it fails when the task ended, or its node is gone)

    def _wait_cancelled(self) -> None:
        if self.ref is not None:
            cancel_and_wait(self.cluster.ray, self.ref, self._cancelled_at)

    def close(self) -> None:
        pass


def cancel_and_wait(ray, ref, since: Optional[float] = None) -> None:
    """Cancel the task ``ref`` (interrupted first: it kills its check; forced after
    CANCEL_GRACE seconds) and wait until it has ended."""
    since = since if since is not None else time.monotonic()
    limit = time.monotonic() + 2 * CANCEL_GRACE + 5
    while time.monotonic() < limit:
        optional(ray.cancel, ref, force=time.monotonic() - since > CANCEL_GRACE)  # (the task ended, or its node is gone)
        if ray.wait([ref], timeout=0.2)[0]:
            return


def _lost(why: str, start: float) -> CheckResult:
    msg = f"error: the check never finished: {why}\n"
    return CheckResult(None, b"", msg.encode(), seconds=time.monotonic() - start, lost=why)


def reduce_usage(text: str, *, check: Optional[Sequence[str]], devices: Optional[str], iter_info: bool) -> None:
    """The usage errors of ``debug reduce --cluster TEXT`` (before anything connects)."""
    parse_cluster(text)
    if check is None:
        raise UsageError("--cluster runs --check commands on the cluster; give --check (questions are asked here)")
    if devices:
        raise UsageError("--cluster: Ray gives each check its GPUs (CUDA_VISIBLE_DEVICES); leave --devices out")
    if iter_info:
        raise UsageError("--iter-info describes one local iteration artifact; it cannot be used with --cluster")


def open_for_reduce(
    text: str,
    *,
    check: Sequence[str],
    iter_artifact: str,
    check_timeout: Optional[float],
    jobs: Optional[int],
    gpus: Optional[float],
    cpus: Optional[float],
    log: Callable[[str], None],
) -> RayCluster:
    """Connect for ``debug reduce --cluster`` and start the workers of the first checks;
    ``.jobs`` is the most checks at once (default: what fits on the cluster).

    Called first, before the model is read: Ray starts worker processes (a second or more)
    while this process loads the model and builds the first candidates."""
    opts = ClusterOptions(parse_cluster(text), gpus, cpus if cpus is not None else 1.0)
    cluster = RayCluster(opts, check, iter_artifact, check_timeout, log).connect()
    cluster.jobs = jobs if jobs is not None else cluster.default_jobs()
    cluster.warm_up(cluster.jobs)
    log(cluster.describe(cluster.jobs))
    return cluster


def open_for_calls(
    text: str, *, gpus: Optional[float], cpus: Optional[float], gpu_check: bool, log: Callable[[str], None]
) -> RayCluster:
    """Connect for ``debug precision --cluster``: each check's run a task (:meth:`RayCluster.call`)."""
    address = parse_cluster(text)
    gpus = gpus if gpus is not None else (1.0 if gpu_check else 0.0)
    opts = ClusterOptions(address, gpus, cpus if cpus is not None else 1.0)
    cluster = RayCluster(opts, [], "", None, log).connect()
    cluster.warm_up(1)
    log(cluster.describe())
    return cluster

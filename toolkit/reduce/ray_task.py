"""The body of a ``debug reduce --cluster ray`` check: what runs on the Ray worker node.

A Ray worker process imports this module to run a task, so it imports only the standard
library and the local check runner (no onnx, no numpy): a worker process starts faster,
and the first round of checks waits for it. :mod:`toolkit.reduce.cluster` is the side
that submits the tasks.

- :func:`run_check`: one check of one candidate, as a local check runs it: the candidate
  in a fresh folder (beside the model's data files when it can, so that a copy-on-write
  clone of them works), the check's data files in a per-node cache, the check command run there (own
  session, ``--check-timeout``, output captured).
- :func:`call_task`: any function as a task (``debug precision --cluster``).
- :func:`ready`: what a warm-up call task runs (nothing: it has Ray start a worker process early).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
import uuid
from typing import Any, Callable, Dict, List, Optional

from toolkit.core.contain import optional
from toolkit.core.files.clone import clone_file
from toolkit.core.files.create import open_new, private_folder
from toolkit.reduce.check import make_runner
from toolkit.reduce.parallel import worker_argv


def _ray_call(path: str, default: Any) -> Any:
    """``ray.<path>()`` (a dotted path of attributes), or ``default`` where this Ray has no such
    call (a private one: it moves between versions) or the call fails: only a note depends on it."""
    import ray

    obj: Any = ray
    for name in path.split("."):
        obj = getattr(obj, name, None)
        if obj is None:
            return default
    return optional(obj, default=default)


def attempt_number() -> int:
    """The attempt this task is (0: the first; more: Ray retried it)."""
    return int(_ray_call("_private.worker.global_worker.core_worker.get_current_task_attempt_number", 0))


def node_name() -> str:
    """This node, for a message."""
    context = _ray_call("get_runtime_context", None)
    get_id = getattr(context, "get_node_id", None)
    node = optional(get_id) if get_id is not None else None
    ip = _ray_call("util.get_node_ip_address", None)
    if not isinstance(ip, str) or not isinstance(node, str):
        return "another node"  # (a Ray without these calls says no more)
    return f"{ip} (node {node[:8]})"


def call_task(fn: Callable, *args) -> tuple:
    """The task of :meth:`RayCluster.call`: ``fn``'s value, this attempt's number, this node."""
    return fn(*args), attempt_number(), node_name()


def ready() -> bool:
    return True


def cache_dir(run_id: str) -> str:
    return os.path.join(tempfile.gettempdir(), f"toolkit-ray-{run_id}")


def clean_cache(run_id: str) -> None:
    shutil.rmtree(cache_dir(run_id), ignore_errors=True)


def stage_data(spec: dict, refs: list) -> Dict[str, str]:
    """The check's data files in this node's cache (fetched from the object store once per node)."""
    import ray

    folder = private_folder(cache_dir(spec["run_id"]))
    paths = {}
    for (path, name), ref in zip(spec["data"], refs):
        local = os.path.join(folder, name)
        if not os.path.exists(local):
            blob = ray.get(ref)
            tmp = f"{local}.{uuid.uuid4().hex[:8]}.part"
            with open_new(tmp, "wb", final=local) as fh:
                fh.write(blob)
            os.replace(tmp, local)
        paths[path] = local
    return paths


def task_folder(links: Dict[str, str]) -> str:
    """A fresh folder for one check: beside the model's data files when it can (a copy-on-write
    clone of them then works on filesystems that have them), else in the node's temporary folder."""
    for src in links.values():
        try:
            return tempfile.mkdtemp(prefix=".toolkit-check-", dir=os.path.dirname(src))
        except OSError:
            break
    return tempfile.mkdtemp(prefix="toolkit-check-")


def data_folder(links: Dict[str, str]) -> Optional[str]:
    """The one folder holding every data file the candidate names, when the candidate names each
    by its own file name and the node can write there: the candidate is then written into it
    and reads the files themselves (nothing linked or copied)."""
    folders = {os.path.dirname(src) for src in links.values()}
    if len(folders) != 1 or any(loc != os.path.basename(src) for loc, src in links.items()):
        return None
    folder = folders.pop()
    return folder if os.access(folder, os.W_OK) else None


def place_weights(folder: str, links: Dict[str, str]) -> List[str]:
    """Each data file the candidate names, reachable at its location in ``folder``; notes on copies."""
    notes = []
    for loc, src in links.items():
        dest = os.path.join(folder, loc)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        if not clone_file(src, dest):  # (a hard link: onnx 1.23 refuses a data file with several)
            shutil.copyfile(src, dest)
            notes.append(f"note: {src} was copied into the check's folder (no copy-on-write clone possible there)\n")
    return notes


def _artifact_path(folder: str, given: str, beside: Optional[str]) -> str:
    """Where the candidate is written in ``folder``: under the artifact's name ``given``, or a name of
    its own when ``folder`` is the data files' own (``beside``: other checks share it)."""
    name = os.path.basename(given)
    return os.path.join(folder, f".toolkit-check-{uuid.uuid4().hex[:12]}-{name}" if beside else name)


def _check_argv(spec: dict, refs: list, artifact: str) -> List[str]:
    """The check's command on this node: the artifact and each data file it names at their local paths."""
    argv = worker_argv(spec["argv"], spec["named"], artifact)
    for path, local in stage_data(spec, refs).items():
        argv = worker_argv(argv, path, local)
    return argv


def run_check(spec: Optional[dict], candidate: bytes, refs: list) -> Optional[dict]:
    """The Ray task: one check of one candidate, as a local check runs it (``spec`` None: a
    warm-up, which only has Ray start this worker process)."""
    if spec is None:
        return None
    start = time.monotonic()
    links = spec["links"]
    beside = data_folder(links)
    folder = beside or task_folder(links)
    saved_cwd = os.getcwd()
    try:
        notes = [] if beside else place_weights(folder, links)
        artifact = _artifact_path(folder, spec["artifact"], beside)
        with open_new(artifact, "wb") as fh:
            fh.write(candidate)
        argv = _check_argv(spec, refs, artifact)
        os.chdir(spec["cwd"] if os.path.isdir(spec["cwd"]) else folder)
        res = make_runner(argv, spec["timeout"], warm=False, env=spec["env"]).run()
    finally:
        os.chdir(saved_cwd)
        if beside:
            if os.path.exists(artifact):
                os.unlink(artifact)
        else:
            shutil.rmtree(folder, ignore_errors=True)
    stderr = "".join(notes).encode() + res.stderr
    return {
        "code": res.code, "stdout": res.stdout, "stderr": stderr, "signal": res.signal,
        "timed_out": res.timed_out, "seconds": res.seconds or time.monotonic() - start,
        "attempt": attempt_number(), "node": node_name(),
    }

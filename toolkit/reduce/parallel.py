"""Checks in parallel for ``debug reduce --jobs N``.

Each worker has its own iteration artifact (worker 0 the one the user named, worker k a
copy of its name in the folder ``<artifact>.worker<k>``), its own runner and its own
environment: ``TOOLKIT_WORKER=k`` and, with ``--devices``, ``CUDA_VISIBLE_DEVICES`` set to
its device. The check command is the user's, with the iteration artifact's path replaced
by the worker's wherever it appears in an argument.

:func:`run_all` runs one check per worker at once, one thread each (each thread only
waits on its check's process); Ctrl-C in the main thread kills every running check with
the processes it started before the interrupt goes on. A runner may run its check
elsewhere: :class:`toolkit.reduce.cluster.RayRunner` runs it as a Ray task and waits for it
in its thread; its ``cancel()`` cancels the task.

No Typer or Rich here.
"""

from __future__ import annotations

import os
import re
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence

from toolkit.core.contain import carried

WORKER_ENV = "TOOLKIT_WORKER"
DEVICES_ENV = "CUDA_VISIBLE_DEVICES"


@dataclass
class Worker:
    number: int
    artifact: str
    runner: Any = None  # anything with run(tick) -> CheckResult
    env: Dict[str, str] = field(default_factory=dict)
    folder: Optional[str] = None  # its own folder (made by us, removed at the end)
    links: Optional[Dict[str, str]] = None  # model data file -> location beside the artifact
    made: List[str] = field(default_factory=list)  # links made for it


def worker_artifact(artifact: str, number: int) -> str:
    """Worker ``number``'s iteration artifact: the same file name in ``<artifact>.worker<k>/``."""
    if number == 0:
        return artifact
    return os.path.join(f"{artifact}.worker{number}", os.path.basename(artifact))


def worker_env(number: int, devices: Sequence[str]) -> Dict[str, str]:
    env = {WORKER_ENV: str(number)}
    if devices:
        env[DEVICES_ENV] = str(devices[number % len(devices)])
    return env


def worker_argv(argv: Sequence[str], artifact: str, replacement: str) -> List[str]:
    """``argv`` with the iteration artifact's path replaced by ``replacement`` wherever it
    appears as a whole path in an argument (``model.onnx``, ``--onnx=model.onnx``, or
    inside a shell command string), never as part of a longer name."""
    if artifact == replacement:
        return list(argv)
    pattern = re.compile(r"(?<![\w./-])" + re.escape(artifact) + r"(?![\w.-])")
    return [pattern.sub(lambda _m: replacement, a) for a in argv]


def parse_devices(text: Optional[str]) -> List[str]:
    """``0,1,2`` -> ["0", "1", "2"] (empty entries dropped)."""
    if not text:
        return []
    return [d.strip() for d in text.split(",") if d.strip()]


def run_all(
    workers: Sequence[Worker],
    tick: Optional[Callable[[], None]] = None,
    decisive: Optional[Callable[[int, Any], bool]] = None,
) -> list:
    """Run each worker's check at once; their results, in order.

    ``decisive(k, result)``: True when worker k's result alone answers the round; the
    checks still running are then cancelled, and their results are None.

    An exception in the main thread (Ctrl-C) kills every running check (process group)
    and waits for the threads to end before it goes on.
    """

    results: list = [None] * len(workers)
    errors: list = [None] * len(workers)
    left = [len(workers)]
    lock = threading.Lock()
    done = threading.Event()

    finished = [False] * len(workers)
    moot: set = set()  # checks cancelled because the round's answer was known

    def check(k: int):
        res = workers[k].runner.run(tick=None)
        if decisive is not None and k not in moot and decisive(k, res):
            with lock:
                moot.update(j for j in range(len(workers)) if not finished[j] and j != k)
        return res

    def one(k: int) -> None:
        try:
            got = carried(check, k)  # (its exception: raised by the main thread)
            results[k], errors[k] = got.value, got.error
        finally:
            with lock:
                finished[k] = True
                left[0] -= 1
                if not left[0]:
                    done.set()  # wakes the main thread at once

    threads = [threading.Thread(target=one, args=(k,), daemon=True) for k in range(len(workers))]
    _prepare(workers)
    try:
        for t in threads:
            t.start()
        while not done.wait(0.1):
            if tick is not None:
                tick()
            _cancel_moot(workers, moot, finished)
        for t in threads:
            t.join()
    except BaseException:
        _stop(workers, threads)
        raise
    return _outcome(results, errors, moot)


def _outcome(results: list, errors: list, moot: set) -> list:
    """The results in order (None for a moot check); the first error of another check is raised."""
    for k, exc in enumerate(errors):
        if exc is not None and k not in moot:
            raise exc
    return [None if k in moot else r for k, r in enumerate(results)]


def _prepare(workers: Sequence[Worker]) -> None:
    """Each runner's imports and data files, in this thread, before any fork."""
    for w in workers:
        prepare = getattr(w.runner, "prepare", None)
        if prepare is not None:
            prepare()


def _cancel_moot(workers: Sequence[Worker], moot: set, finished: List[bool]) -> None:
    """Cancel the checks made moot (the round's answer known) that are still running."""
    for j in list(moot):
        if not finished[j]:
            _cancel(workers[j])


def _cancel(worker: Worker) -> None:
    cancel = getattr(worker.runner, "cancel", None)
    if cancel is not None:
        cancel()


def _stop(workers: Sequence[Worker], threads) -> None:
    """Kill the running checks until every thread has noticed."""
    while any(t.is_alive() for t in threads):
        for w in workers:
            _cancel(w)
        for t in threads:
            t.join(0.05)

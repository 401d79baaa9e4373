"""What `--cluster ray` says when it starts: how many checks run at once (what the cluster's CPUs
and GPUs fit, not --jobs alone), whether Ray started a local cluster or connected, and how long
starting and stopping took."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from toolkit.reduce import cluster as cl


class _Task:
    def options(self, **_kw):
        return self

    def remote(self, *_args):
        return object()


class _FakeRay:
    """The part of the ray module the cluster set-up uses; ``head``: ray.init starts the cluster."""

    def __init__(self, resources, head: bool):
        self.resources = resources
        self.up = False
        self.shut = 0
        self._private = SimpleNamespace(worker=SimpleNamespace(global_worker=SimpleNamespace(node=None)))
        self.head = head

    def is_initialized(self):
        return self.up

    def init(self, address=None, **_kw):
        self.up = True
        self._private.worker.global_worker.node = SimpleNamespace(head=self.head)

    def cluster_resources(self):
        return dict(self.resources)

    def remote(self, _fn):
        return _Task()

    def shutdown(self):
        self.up = False
        self.shut += 1


def _open(monkeypatch, resources, head=True, **kw):
    fake = _FakeRay(resources, head)
    monkeypatch.setattr(cl, "import_ray", lambda: fake)
    lines = []
    args = dict(check=["sh", "check.sh"], iter_artifact="polygraphy_debug.onnx", check_timeout=None, jobs=None,
                gpus=None, cpus=None)
    args.update(kw)
    cluster = cl.open_for_reduce("ray", log=lines.append, **args)
    return cluster, lines, fake


def test_more_jobs_than_the_cluster_fits_says_how_many_run(monkeypatch):
    cluster, lines, _ = _open(monkeypatch, {"CPU": 2.0}, jobs=4)
    assert "2 at once (all the cluster fits; --jobs 4: Ray queues the rest)" in lines[-1]
    assert "up to 4 at once" not in lines[-1]


def test_gpu_checks_fit_by_cpus_too(monkeypatch):
    cluster, lines, _ = _open(monkeypatch, {"CPU": 1.0, "GPU": 4.0}, gpus=1.0, jobs=4)
    assert "1 at once" in lines[-1]


def test_jobs_that_fit_run_at_once(monkeypatch):
    cluster, lines, _ = _open(monkeypatch, {"CPU": 8.0}, jobs=4)
    assert lines[-1].endswith("; up to 4 at once")


@pytest.mark.parametrize("head, start, stop", [
    (True, "started a local cluster (stopped at the end) in ", "stopped the local Ray cluster in "),
    (False, "connected in ", "disconnected from the Ray cluster in "),
])
def test_start_and_stop_are_said_with_their_seconds(monkeypatch, head, start, stop):
    cluster, lines, fake = _open(monkeypatch, {"CPU": 2.0}, head=head)
    assert lines[-1].startswith(f"Ray cluster: {start}") and " s; 2 CPU(s), 0 GPU(s)" in lines[-1]
    cluster.close()
    assert fake.shut == 1 and lines[-1].startswith(f"Ray: {stop}") and lines[-1].endswith(" s")

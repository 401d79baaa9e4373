"""`debug reduce --cluster ray`: checks as Ray tasks on a local cluster of two worker nodes.

One cluster (``ray.cluster_utils.Cluster``: a head without CPUs, two worker nodes, one of
them with two virtual GPUs) serves the whole module; every reduce runs the real CLI in a
subprocess that connects to it. Skipped when ray is not installed (except the tests of
what happens without it).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import onnx
import pytest

import modelzoo
from conftest import run_toolkit

CULPRIT = 17


def _chain(folder, n=30, culprit=CULPRIT):
    model = modelzoo.chain(n)
    path = modelzoo.save(model, folder / "model.onnx")
    return path, model.graph.node[culprit].name


def _grep_check(culprit, sleep=0.0, log=None):
    """A check failing when ``culprit`` is in the artifact (after ``sleep`` seconds)."""
    script = ""
    if log:
        script += f'echo "$TOOLKIT_WORKER ${{CUDA_VISIBLE_DEVICES:-none}}" >> {log}; '
    if sleep:
        script += f"sleep {sleep}; "
    script += f"grep -q {culprit} polygraphy_debug.onnx && exit 1; exit 0"
    return ["--check", "sh", "-c", script]


# ---------------------------------------------------------------------- without Ray


def test_cluster_without_ray_is_exit_4_naming_the_extra(tmp_path):
    fake = tmp_path / "noray"
    fake.mkdir()
    (fake / "ray.py").write_text("raise ImportError('No module named ray')\n")
    path, culprit = _chain(tmp_path)
    env = {"PYTHONPATH": os.pathsep.join([str(fake), os.environ.get("PYTHONPATH", "")])}
    r = run_toolkit("debug", "reduce", path, "-o", "o.onnx", "--cluster", "ray", *_grep_check(culprit),
                    cwd=str(tmp_path), env=env)
    assert r.code == 4, r.output
    from toolkit.core.install import extra_install_command

    assert f"install it with: {extra_install_command('ray')}" in r.err and "ray" in extra_install_command("ray")
    assert "Traceback" not in r.err
    assert not (tmp_path / "o.onnx").exists()


@pytest.mark.parametrize(
    "extra, words",
    [
        (["--cluster", "dask"], "only cluster engine is ray"),
        (["--cluster", "ray:"], "needs an address"),
        (["--gpus-per-check", "1"], "need --cluster ray"),
        (["--cluster", "ray", "--devices", "0,1"], "leave --devices out"),
        (["--cluster", "ray", "--iter-info", "info.json"], "cannot be used with --cluster"),
    ],
)
def test_cluster_usage_errors(tmp_path, cli, monkeypatch, extra, words):
    path, culprit = _chain(tmp_path)
    monkeypatch.chdir(tmp_path)
    r = cli("debug", "reduce", path, "-o", "o.onnx", *extra, *_grep_check(culprit))
    assert r.code == 2, r.output
    assert words in r.err
    assert "Ray cluster:" not in r.err  # refused before connecting


def test_a_missing_model_is_refused_before_ray_starts(tmp_path):
    """No cluster is connected to (or started on this machine) for a model that is not there."""
    r = run_toolkit("debug", "reduce", str(tmp_path / "missing.onnx"), "-o", "o.onnx", "--cluster", "ray",
                    "--check", "true", cwd=str(tmp_path))
    assert r.code == 3, r.output
    assert "no such file" in r.err and "Ray cluster:" not in r.err


def test_the_task_a_ray_worker_imports_loads_neither_onnx_nor_numpy():
    """A Ray worker process imports the task's module before the first check runs (and the
    first round waits for it): it stays on the standard library and the local check runner."""
    code = (
        "import sys, toolkit.reduce.ray_task as t; "
        "print(t.run_check.__module__, sorted(m for m in ('onnx', 'numpy', 'ray') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["toolkit.reduce.ray_task", "[]"]


def test_gpu_checks_are_recognised():
    from toolkit.reduce.cluster import parse_cluster, uses_gpu

    assert uses_gpu(["toolkit", "run", "m.onnx", "--trt"])
    assert uses_gpu(["python", "-m", "toolkit", "run", "m.onnx", "--compare", "onnxrt", "trt:fp16"])
    assert not uses_gpu(["toolkit", "run", "m.onnx", "--onnxrt"])
    assert not uses_gpu(["sh", "-c", "trtexec --onnx=m.onnx"])  # not a toolkit check: give --gpus-per-check
    # what the runners are, not words in file names
    assert not uses_gpu(["toolkit", "run", "cuda_model.onnx", "--onnxrt", "--save-outputs", "trt_outputs.json"])
    assert uses_gpu(["toolkit", "run", "m.onnx", "--providers", "cuda"])
    assert not uses_gpu(["toolkit", "run", "m.onnx", "--onnxrt", "--providers=cpu"])
    assert uses_gpu(["toolkit", "run", "m.onnx", "--runners", "onnxrt:providers=cuda"])
    assert not uses_gpu(["toolkit", "run", "m.onnx", "--compare", "onnxrt", "openvino:precision=f32"])
    assert parse_cluster("ray") is None
    assert parse_cluster("ray:10.0.0.1:6379") == "10.0.0.1:6379"


def test_runner_kinds_say_which_runs_need_a_gpu():
    """debug precision --cluster asks Ray for a GPU per check when the candidate's runner needs one."""
    from toolkit.run.registry import get_kind

    assert get_kind("trt").uses_gpu({})
    assert get_kind("onnxrt").uses_gpu({"providers": "cuda"})
    assert get_kind("onnxrt").uses_gpu({"providers": "tensorrt+cuda+cpu"})
    assert not get_kind("onnxrt").uses_gpu({})
    assert not get_kind("onnxrt").uses_gpu({"providers": "cpu", "fp16": True})
    assert not get_kind("openvino").uses_gpu({"device": "CPU"})


def test_a_check_lost_with_its_node_is_broken_never_a_failure():
    from toolkit.reduce.verdict import BROKEN, CheckResult, FailureRule

    lost = CheckResult(None, b"", b"error: the check never finished: its Ray task was lost after 3 tries\n",
                       lost="its Ray task was lost after 3 tries")
    for rule in (FailureRule(), FailureRule(fail_regex=["error"]), FailureRule(fail_codes=[1])):
        assert rule.classify(lost) == BROKEN
        assert rule.classify(lost, toolkit_check=True, artifact="polygraphy_debug.onnx") == BROKEN


def _full_passes_others_hang(culprit_free_last, pids):
    """A check that passes at once on the full model (it holds the last node) and hangs on
    any other subgraph."""
    return (f"echo $$ >> {pids}; grep -q {culprit_free_last} polygraphy_debug.onnx && exit 0; "
            "sleep 60; exit 1")


@pytest.mark.serial
def test_a_passing_full_model_cancels_the_rest_of_its_round(tmp_path):
    """--jobs: the full model's pass answers the first round; the speculative checks are killed."""
    path, _ = _chain(tmp_path, 30)
    last = onnx.load(path).graph.node[-1].name
    pids = tmp_path / "pids"
    t0 = time.monotonic()
    r = run_toolkit("debug", "reduce", path, "-o", "o.onnx", "--jobs", "3", "--json", "--save-debug-replay", "r.json",
                    "--check", "sh", "-c", _full_passes_others_hang(last, pids), cwd=str(tmp_path), timeout=120)
    assert time.monotonic() - t0 < 30, r.output  # not the 60 s of the other checks
    assert r.code == 0, r.output
    assert json.loads(r.out)["status"] == "passed"
    assert "check cancelled" in r.err
    assert not (tmp_path / "r.json").exists()  # a full model that passes leaves nothing to replay: none is written
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert str(pids) not in ps  # no check left running


def test_debug_precision_cluster_usage_errors(tmp_path, cli, monkeypatch):
    path, _ = _chain(tmp_path, 6, 3)
    monkeypatch.chdir(tmp_path)
    r = cli("debug", "precision", path, "--gpus-per-check", "1")
    assert r.code == 2 and "need --cluster ray" in r.err
    r = cli("debug", "precision", path, "--cluster", "spark")
    assert r.code == 2 and "only cluster engine is ray" in r.err


# ---------------------------------------------------------------------- on a local cluster

ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def cluster():
    import socket

    from ray.cluster_utils import Cluster

    with socket.socket() as sock:  # a free port for the dashboard (the state API needs it; 8265 may be taken)
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    # a killed node is found dead after 3 failed health checks 0.5 s apart, from the start (Ray's defaults wait
    # seconds before the first and allow more, seconds apart); a slow but live node still has each check's timeout
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "dashboard_port": port, "_system_config": {
        "health_check_initial_delay_ms": 0, "health_check_period_ms": 500, "health_check_failure_threshold": 3}})
    c.add_node(num_cpus=2, num_gpus=2)
    c.add_node(num_cpus=2)
    c.wait_for_nodes()
    yield c
    c.shutdown()


def _reduce(tmp_path, name, *args, cwd=None, timeout=120):
    folder = tmp_path / name
    folder.mkdir()
    r = run_toolkit("debug", "reduce", *args, cwd=str(cwd or folder), timeout=timeout)
    return r


@pytest.mark.serial
def test_ray_gives_the_result_of_one_local_job(tmp_path, cluster):
    path, culprit = _chain(tmp_path, 40)
    log = tmp_path / "env.log"
    one = run_toolkit("debug", "reduce", path, "-o", "one.onnx", "--json", *_grep_check(culprit), cwd=str(tmp_path))
    assert one.code == 0, one.output
    many = run_toolkit(
        "debug", "reduce", path, "-o", "many.onnx", "--json", "--cluster", f"ray:{cluster.address}", "--jobs", "4",
        "--save-debug-replay", "many.json", *_grep_check(culprit, log=log), cwd=str(tmp_path),
    )
    assert many.code == 0, many.output
    a, b = json.loads(one.out), json.loads(many.out)
    assert a["status"] == b["status"] == "reduced"
    assert a["result_nodes"] == b["result_nodes"] == [f"{culprit} [Op: Exp]"]
    assert [n.name for n in onnx.load(str(tmp_path / "many.onnx")).graph.node] == [culprit]
    assert "Ray tasks" in many.err and "up to 4 at once" in many.err
    replay = json.loads((tmp_path / "many.json").read_text())
    assert replay  # the verdicts, as with --jobs
    workers = {line.split()[0] for line in log.read_text().splitlines()}
    assert workers == {"0", "1", "2", "3"}
    # nothing left beside the model: no worker folders, no iteration artifacts
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == ["env.log", "many.json", "many.onnx", "model.onnx", "one.onnx", "polygraphy_debug_replay.json"]


@pytest.mark.serial
def test_gpu_checks_get_their_own_device_from_ray(tmp_path, cluster):
    path, culprit = _chain(tmp_path, 12, 7)
    log = tmp_path / "env.log"
    r = run_toolkit(
        "debug", "reduce", path, "-o", "o.onnx", "--cluster", f"ray:{cluster.address}", "--gpus-per-check", "1",
        *_grep_check(culprit, sleep=0.3, log=log), cwd=str(tmp_path),
    )
    assert r.code == 0, r.output
    assert "up to 2 at once" in r.err  # the cluster's two GPUs, one per check
    devices = {line.split()[1] for line in log.read_text().splitlines()}
    assert devices and devices <= {"0", "1"}


@pytest.mark.serial
def test_no_gpu_for_a_gpu_check_is_exit_4(tmp_path, cluster):
    path, _ = _chain(tmp_path, 6, 3)
    r = run_toolkit(
        "debug", "reduce", path, "-o", "o.onnx", "--cluster", f"ray:{cluster.address}", "--gpus-per-check", "3",
        "--check", "true", cwd=str(tmp_path),
    )
    assert r.code == 4, r.output
    assert "asks for 3 GPU(s)" in r.err and "--gpus-per-check 0" in r.err


@pytest.mark.serial
def test_data_files_travel_through_the_object_store(tmp_path, cluster):
    """A toolkit check's --load-inputs file reaches the task even where its path does not exist."""
    import numpy as np

    from toolkit.core.io.datafiles import save_inputs
    from toolkit.reduce.cluster import ClusterOptions, RayCluster

    model = modelzoo.chain(3)
    artifact = tmp_path / "polygraphy_debug.onnx"
    modelzoo.save(model, artifact)
    data = tmp_path / "data" / "inputs.json"
    data.parent.mkdir()
    name = model.graph.input[0].name
    save_inputs(str(data), [{name: np.ones((1, 4), np.float32)}])
    check = [sys.executable, "-m", "toolkit", "run", str(artifact), "--onnxrt", "--load-inputs", str(data)]
    rc = RayCluster(ClusterOptions(cluster.address), check, str(artifact), 60, lambda _m: None).connect()
    try:
        assert [p for p, *_ in rc.data] == [str(data)]
        os.rename(data.parent, tmp_path / "moved")  # the path in the command is gone: only the object store has it
        res = rc.runner(0, str(artifact)).run()
    finally:
        rc.close()
    assert res.code == 0, res.stderr_text
    assert "PASSED" in res.stdout_text + res.stderr_text
    from toolkit.reduce.ray_task import cache_dir

    assert not os.path.exists(cache_dir(rc.run_id))  # each node's copy is removed at the end


ORT_CHECK = """import os, sys
import numpy as np, onnx, onnxruntime as ort
path = sys.argv[1]
with open(sys.argv[2], "a") as fh:
    fh.write(os.path.dirname(os.path.abspath(path)) + "\\n")
sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])  # reads the weights
sess.run(None, {i.name: np.ones((1, 300000), np.float32) for i in sess.get_inputs()})
names = {n.name for n in onnx.load(path, load_external_data=False).graph.node}
sys.exit(1 if "mul" in names else 0)
"""


@pytest.mark.serial
def test_candidates_reach_the_model_weights_by_path_without_carrying_them(tmp_path, cluster):
    """A model with 3 MiB of external weights, reduced from another folder: each task makes its
    candidate beside the weights its artifact names; the candidates are kilobytes."""
    from onnx import helper, numpy_helper

    import numpy as np

    n = 300000  # 1.2 MB per weight: left on disk, referred to by every candidate
    nodes = [
        helper.make_node("Add", ["x", "w0"], ["a"], name="add0"),
        helper.make_node("Mul", ["a", "w1"], ["m"], name="mul"),
        helper.make_node("Add", ["m", "w2"], ["y"], name="add2"),
    ]
    inits = [numpy_helper.from_array(np.full((1, n), i + 1, np.float32), f"w{i}") for i in range(3)]
    graph = helper.make_graph(nodes, "weighted", [modelzoo.vi("x", [1, n])], [modelzoo.vi("y", [1, n])], inits)
    src = tmp_path / "src"
    src.mkdir()
    model = modelzoo.save_with_external_data(modelzoo.make_model(graph), src / "model.onnx")
    work = tmp_path / "work"
    work.mkdir()
    (work / "check.py").write_text(ORT_CHECK)
    folders = work / "folders.log"
    r = run_toolkit(
        "debug", "reduce", model, "-o", "out.onnx", "--json", "--cluster", f"ray:{cluster.address}", "--jobs", "2",
        "--fail-code", "1", "--check", sys.executable, "check.py", "polygraphy_debug.onnx", str(folders),
        cwd=str(work), timeout=180,
    )
    assert r.code == 0, r.output
    assert json.loads(r.out)["result_nodes"] == ["mul [Op: Mul]"], r.err
    seen = set(folders.read_text().split())
    # each task's candidate is written beside the one copy of the weights the reduce made for its
    # artifact (never a hard link, which onnx refuses), and reads them there: nothing per task
    assert seen and all(f == str(work) or os.path.dirname(f) == str(work) for f in seen), seen
    assert not [n for n in os.listdir(work) if n.startswith(".toolkit-check-")]
    assert sorted(os.listdir(src)) == ["model.onnx", "weights.bin"]  # every task folder removed


def _running_tasks(cluster):
    """The tasks Ray's state API lists as running, once it has caught up (it reports with a delay;
    up to 10 s): [] when none is left."""
    from ray.util.state import list_tasks

    running = []
    for _ in range(40):
        running = list_tasks(address=cluster.address, filters=[("state", "=", "RUNNING")])
        if not running:
            break
        time.sleep(0.25)
    return running


@pytest.mark.serial
def test_a_passing_full_model_cancels_its_round_on_ray(tmp_path, cluster):
    path, _ = _chain(tmp_path, 30)
    last = onnx.load(path).graph.node[-1].name
    pids = tmp_path / "pids"
    t0 = time.monotonic()
    r = run_toolkit("debug", "reduce", path, "-o", "o.onnx", "--json", "--cluster", f"ray:{cluster.address}",
                    "--jobs", "3", "--cpus-per-check", "0.5", "--check", "sh", "-c",
                    _full_passes_others_hang(last, pids), cwd=str(tmp_path), timeout=120)
    assert time.monotonic() - t0 < 40, r.output
    assert r.code == 0, r.output
    assert json.loads(r.out)["status"] == "passed"
    assert "check cancelled" in r.err
    assert _running_tasks(cluster) == []


def _parents(pid):
    """``pid`` and its ancestors."""
    out = []
    while pid > 1:
        out.append(pid)
        try:
            with open(f"/proc/{pid}/stat") as fh:
                pid = int(fh.read().rsplit(")", 1)[1].split()[1])
        except (FileNotFoundError, ValueError, IndexError):
            break
    return out


def _raylet_pid(node):
    from ray._private import ray_constants

    return node.all_processes[ray_constants.PROCESS_TYPE_RAYLET][0].process.pid


def _kill_a_node_running_a_check(cluster, pids_file, done):
    """Once a check runs on one of the worker nodes, kill that node (its raylet and workers)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not done.is_set():
        pids = pids_file.read_text().split() if pids_file.exists() else []
        for pid in pids:
            chain = set(_parents(int(pid)))
            for node in list(cluster.worker_nodes):
                if _raylet_pid(node) in chain:
                    cluster.remove_node(node, allow_graceful=False)
                    done.killed = node
                    return
        time.sleep(0.1)


@pytest.mark.serial
def test_a_node_lost_mid_reduce_is_retried_and_the_result_is_the_same(tmp_path, cluster):
    path, culprit = _chain(tmp_path, 30)
    cluster.add_node(num_cpus=2)
    cluster.wait_for_nodes()
    pids = tmp_path / "pids"
    done = threading.Event()
    done.killed = None
    killer = threading.Thread(target=_kill_a_node_running_a_check, args=(cluster, pids, done), daemon=True)
    killer.start()
    check = f"echo $$ >> {pids}; sleep 1.5; grep -q {culprit} polygraphy_debug.onnx && exit 1; exit 0"
    r = run_toolkit(
        "debug", "reduce", path, "-o", "o.onnx", "--json", "--cluster", f"ray:{cluster.address}", "--jobs", "4",
        "--cpus-per-check", "0.5", "--check", "sh", "-c", check, cwd=str(tmp_path), timeout=180,
    )
    done.set()
    killer.join()
    assert done.killed is not None, "no node was killed"
    assert r.code == 0, r.output
    assert json.loads(r.out)["result_nodes"] == [f"{culprit} [Op: Exp]"], r.err
    assert "retried by Ray" in r.err, r.err
    assert "BROKEN" not in r.err


@pytest.mark.serial
def test_ctrl_c_cancels_every_task_and_writes_the_replay(tmp_path, cluster):
    path, culprit = _chain(tmp_path, 30)
    marker = tmp_path / "started"
    check = f"touch {marker}; sleep 60; grep -q {culprit} polygraphy_debug.onnx && exit 1; exit 0"
    proc = subprocess.Popen(
        [sys.executable, "-m", "toolkit", "debug", "reduce", path, "-o", "o.onnx", "--cluster",
         f"ray:{cluster.address}", "--jobs", "3", "--cpus-per-check", "0.5", "--check", "sh", "-c", check],
        cwd=str(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 60
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert marker.exists(), "no check started"
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    t0 = time.monotonic()
    out, err = proc.communicate(timeout=60)
    assert time.monotonic() - t0 < 25  # the checks were stopped, not waited for
    assert proc.returncode == 130, err.decode()
    assert (tmp_path / "polygraphy_debug_replay.json").exists()
    assert _running_tasks(cluster) == []
    # and no check process is left either
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert str(marker) not in ps


@pytest.mark.serial
def test_debug_precision_on_the_cluster_finds_the_same_nodes(tmp_path, cluster):
    import fp16_models as fm

    path = modelzoo.save(fm.layernorm_overflow(), tmp_path / "ln.onnx")
    local = run_toolkit("debug", "precision", path, "--json", cwd=str(tmp_path))
    assert local.code == 0, local.output
    remote = run_toolkit(
        "debug", "precision", path, "--json", "-o", "mixed.onnx", "--cluster", f"ray:{cluster.address}",
        "--cpus-per-check", "0.5", cwd=str(tmp_path),
    )
    assert remote.code == 0, remote.output
    a, b = json.loads(local.out), json.loads(remote.out)
    assert b["keep_fp32"] == a["keep_fp32"] == fm.LN_MUST_KEEP
    assert b["checks"] == a["checks"]
    assert "Ray cluster:" in remote.err
    assert (tmp_path / "mixed.onnx").exists()


"""`debug reduce` at scale: zero-copy candidates over external data, self-contained outputs.

The model's weights stay in its own folder (``src``); the iteration artifact is written in
another folder (``work``). Every candidate must reach the same bytes (same offsets) through one
file inside the artifact's folder -- a clone or one copy, never a hard link (onnx 1.23 refuses
those), a symbolic link or a path that leads out of it -- and must run on ONNX-Runtime there. What the user keeps
(-o, --min-good, --artifacts) carries its weights unless --link-external-data is given.
"""

from __future__ import annotations

import errno
import os
import shutil

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import modelzoo
from toolkit.reduce.verdict import CheckResult, FailureRule
from toolkit.reduce.session import ReduceConfig, Reducer, Reporter
from procs import alive as _alive

N = 256
W = {f"w{i}": (np.arange(N, dtype=np.float32) + 10 * i).reshape(1, N) for i in range(4)}


def weighted_chain():
    """x -> Add(w0) 'add0' -> Mul(w1) 'mul' -> Add(w2) 'add2' -> Sub(w3) 'sub' -> y."""
    nodes = [
        helper.make_node("Add", ["x", "w0"], ["a"], name="add0"),
        helper.make_node("Mul", ["a", "w1"], ["m"], name="mul"),
        helper.make_node("Add", ["m", "w2"], ["b"], name="add2"),
        helper.make_node("Sub", ["b", "w3"], ["y"], name="sub"),
    ]
    inits = [numpy_helper.from_array(v, k) for k, v in W.items()]
    graph = helper.make_graph(
        nodes, "weighted", [modelzoo.vi("x", [1, N])], [modelzoo.vi("y", [1, N])], inits
    )
    return modelzoo.make_model(graph)


@pytest.fixture
def dirs(tmp_path, monkeypatch):
    """(model path, its data file, work folder): the model in src/, weights external."""

    src = tmp_path / "src"
    work = tmp_path / "work"
    src.mkdir()
    work.mkdir()
    modelzoo.save_with_external_data(weighted_chain(), src / "model.onnx")
    monkeypatch.setattr("toolkit.reduce.loading.EAGER_WEIGHT_BYTES", 0)  # every weight stays on disk
    return str(src / "model.onnx"), str(src / "weights.bin"), work


def external_entries(path):
    """[(tensor, location, offset)] of a model file's external initializers."""
    m = onnx.load(str(path), load_external_data=False)
    out = []
    for t in m.graph.initializer:
        if t.data_location == TensorProto.EXTERNAL:
            info = {e.key: e.value for e in t.external_data}
            out.append((t.name, info["location"], int(info.get("offset", 0))))
    return out


def run_ort(path):
    import onnxruntime as ort

    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feed = {i.name: np.ones([d if isinstance(d, int) else 1 for d in i.shape], np.float32) for i in sess.get_inputs()}
    return sess.run(None, feed)


class ZeroCopyCheck:
    """Fails when ``culprit`` is in the artifact. On every run it asserts that each external
    weight is reached inside the artifact's folder, without a symbolic link, in the file
    ``expect_same`` (or, if None, one file the same for every run) at the original offset,
    and that ONNX-Runtime runs the artifact where it is."""

    kind = "test"

    def __init__(self, artifact, culprit, expect_same=None):
        self.artifact = str(artifact)
        self.culprit = culprit
        self.expect_same = expect_same
        self.inodes = set()
        self.offsets = {}
        self.calls = 0

    def run(self, tick=None):
        self.calls += 1
        folder = os.path.realpath(os.path.dirname(self.artifact))
        for root, subdirs, files in os.walk(folder):
            for name in subdirs + files:
                assert not os.path.islink(os.path.join(root, name)), f"symbolic link {name} in the artifact folder"
        for name, loc, offset in external_entries(self.artifact):
            assert not os.path.isabs(loc) and ".." not in loc.replace("\\", "/").split("/"), loc
            full = os.path.join(folder, loc)
            assert os.path.commonpath([os.path.realpath(full), folder]) == folder, f"{loc} leads out of {folder}"
            if self.expect_same is not None:
                assert os.path.samefile(full, self.expect_same), f"{loc} is a copy, not the model's data file"
            self.inodes.add(os.stat(full).st_ino)
            assert offset == self.offsets.setdefault(name, offset)
        run_ort(self.artifact)
        nodes = [n.name for n in onnx.load(self.artifact, load_external_data=False).graph.node]
        code = 1 if self.culprit in nodes else 0
        return CheckResult(code, f"nodes: {nodes}".encode(), b"")

    def close(self):
        pass


class Notes(Reporter):
    def __init__(self):
        self.messages = []

    def info(self, message):
        self.messages.append(message)

    def warn(self, message):
        self.messages.append(message)


def reduce(model, work, check, reporter=None, **cfg):
    config = ReduceConfig(
        model=model,
        output=str(work / "reduced.onnx"),
        check=["zero-copy-check"],
        rule=FailureRule(fail_codes=[1]),
        iter_artifact=str(work / "polygraphy_debug.onnx"),
        **cfg,
    )
    return Reducer(config, reporter, runner=check).run()


def test_candidates_reach_the_original_weights_through_links_inside_the_artifact_folder(dirs):
    model, data, work = dirs
    check = ZeroCopyCheck(work / "polygraphy_debug.onnx", "mul")
    outcome = reduce(model, work, check)
    assert outcome.status == "reduced" and outcome.final_nodes == ["mul [Op: Mul]"]
    assert check.calls >= 3
    assert len(check.inodes) == 1 and os.stat(data).st_ino not in check.inodes  # one file for every check
    # nothing left behind: the links are gone, the model's data file has one name again
    assert sorted(os.listdir(work)) == ["reduced.onnx"]
    assert os.stat(data).st_nlink == 1
    onnx.load(model)  # onnx's own loader accepts the model again (it refuses hard-linked data)


def test_outputs_are_self_contained_by_default(dirs, tmp_path):
    model, data, work = dirs
    check = ZeroCopyCheck(work / "polygraphy_debug.onnx", "mul")
    arts = work / "arts"
    outcome = reduce(
        model, work, check, min_good=str(work / "good.onnx"), artifacts=[str(work / "polygraphy_debug.onnx")],
        art_dir=str(arts),
    )
    assert outcome.status == "reduced" and outcome.min_good_written
    kept = [work / "reduced.onnx", work / "good.onnx"] + [arts / d / f for d in os.listdir(arts) for f in os.listdir(arts / d)]
    assert len(kept) == 2 + check.calls
    moved = tmp_path / "moved"
    for path in kept:
        assert external_entries(path) == [], f"{path} refers to external data"
        shutil.rmtree(moved, ignore_errors=True)
        moved.mkdir()
        shutil.copy(path, moved / "m.onnx")
        run_ort(moved / "m.onnx")  # runs anywhere
    np.testing.assert_array_equal(run_ort(work / "reduced.onnx")[0], W["w1"])
    assert os.stat(data).st_nlink == 1


def test_link_external_data_keeps_outputs_linked(dirs):
    model, data, work = dirs
    check = ZeroCopyCheck(work / "polygraphy_debug.onnx", "mul")
    outcome = reduce(model, work, check, min_good=str(work / "good.onnx"), link_external_data=True)
    assert outcome.status == "reduced"
    for name in ("reduced.onnx", "good.onnx"):
        entries = external_entries(work / name)
        assert entries and {loc for _, loc, _ in entries} == {f"{name}.weights"}
        assert os.path.samefile(work / f"{name}.weights", data)
    np.testing.assert_array_equal(run_ort(work / "reduced.onnx")[0], W["w1"])


def test_artifact_in_the_model_folder_uses_the_data_file_itself(dirs):
    model, data, work = dirs
    src = os.path.dirname(model)
    check = ZeroCopyCheck(os.path.join(src, "polygraphy_debug.onnx"), "mul", expect_same=data)
    config = ReduceConfig(
        model=model, output=str(work / "reduced.onnx"), check=["c"], rule=FailureRule(fail_codes=[1]),
        iter_artifact=os.path.join(src, "polygraphy_debug.onnx"),
    )
    assert Reducer(config, runner=check).run().status == "reduced"
    assert sorted(os.listdir(src)) == ["model.onnx", "weights.bin"]
    assert os.stat(data).st_nlink == 1  # no link was needed


def test_no_hard_link_possible_copies_the_data_once(dirs, monkeypatch):
    model, data, work = dirs

    def no_link(src, dst, *a, **k):
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(os, "link", no_link)
    check = ZeroCopyCheck(work / "polygraphy_debug.onnx", "mul")
    notes = Notes()
    outcome = reduce(model, work, check, reporter=notes)
    assert outcome.status == "reduced"
    assert len(check.inodes) == 1 and os.stat(data).st_ino not in check.inodes  # one copy, shared by all checks
    assert any("copied weights.bin" in m and "once" in m for m in notes.messages), notes.messages
    assert sorted(os.listdir(work)) == ["reduced.onnx"]


def test_a_stale_link_from_an_earlier_run_is_replaced(dirs):
    model, data, work = dirs
    (work / "polygraphy_debug.onnx.weights").write_bytes(b"stale")
    check = ZeroCopyCheck(work / "polygraphy_debug.onnx", "mul")
    assert reduce(model, work, check).status == "reduced"
    assert not os.path.exists(work / "polygraphy_debug.onnx.weights")


# ---------------------------------------------------------------------- --jobs

import signal  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402

import reduce_helpers as rh  # noqa: E402

CHECKER = rh.CHECKER


class NodesCheck:
    """Thread-safe in-process check: fails when all ``culprits`` are in a valid artifact.
    Notes every artifact it read and the environment it was given."""

    kind = "test"

    def __init__(self, artifact, culprits, env=None, seen=None, lock=None):
        self.artifact = str(artifact)
        self.culprits = list(culprits)
        self.env = dict(env or {})
        self.seen = seen if seen is not None else []
        self.lock = lock or threading.Lock()

    def run(self, tick=None):
        m = onnx.load(self.artifact, load_external_data=False)
        onnx.checker.check_model(m)
        present = {n.name for n in m.graph.node}
        with self.lock:
            self.seen.append((self.artifact, self.env.get("TOOLKIT_WORKER"), self.env.get("CUDA_VISIBLE_DEVICES")))
        code = 1 if all(c in present for c in self.culprits) else 0
        return CheckResult(code, b"", b"", seconds=0.001)

    def close(self):
        pass


def _long_chain():
    return modelzoo.chain(40)


MODELS = {
    "chain": (lambda: modelzoo.chain(12), ["n8_abs"]),
    "long_chain": (_long_chain, ["n23_exp"]),
    "long_chain_two": (_long_chain, ["n5_exp", "n31_sigmoid"]),
    "seed": (lambda: modelzoo.seed_example((1, 4)), ["onnx_graphsurgeon_node_3"]),
    "branch": (modelzoo.branch, None),
    "wide": (lambda: rh.wide(4, 3), ["b1_1", "b3_2"]),
    "multi_output": (rh.multi_output, ["neg"]),
    "optional_input": (rh.optional_input, ["clip"]),
    "with_loop": (rh.with_loop, ["loop"]),
}


def _reduce_jobs(tmp_path, model, culprits, jobs, mode=None, devices=()):
    folder = tmp_path / f"jobs{jobs}_{mode}"
    folder.mkdir()
    path = modelzoo.save(model, folder / "model.onnx")
    seen, lock = [], threading.Lock()
    artifact = folder / "polygraphy_debug.onnx"
    config = ReduceConfig(
        model=path, output=str(folder / "reduced.onnx"), check=["nodes-check"], mode=mode,
        rule=FailureRule(fail_codes=[1]), iter_artifact=str(artifact), jobs=jobs, devices=list(devices),
    )
    first = NodesCheck(artifact, culprits, {"TOOLKIT_WORKER": "0"}, seen, lock)
    outcome = Reducer(
        config, runner=first, runner_factory=lambda k, art, env: NodesCheck(art, culprits, env, seen, lock)
    ).run()
    return outcome, seen, folder


@pytest.mark.parametrize("mode", [None, "bisect", "linear"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_jobs_give_the_same_result_as_one_job(tmp_path, name, mode):
    build, culprits = MODELS[name]
    model = build()
    if culprits is None:
        culprits = [model.graph.node[len(model.graph.node) // 2].name]
    one, _, _ = _reduce_jobs(tmp_path, model, culprits, 1, mode)
    assert one.status == "reduced" and one.final_nodes
    for jobs in (2, 4):
        many, seen, folder = _reduce_jobs(tmp_path, model, culprits, jobs, mode)
        assert (many.status, many.final_nodes) == (one.status, one.final_nodes), (jobs, mode)
        assert many.one_minimal == one.one_minimal
        artifacts = {a for a, _, _ in seen}
        assert len(artifacts) <= jobs
        # every worker cleaned up after itself: only the model and the result are left
        assert sorted(os.listdir(folder)) == ["model.onnx", "reduced.onnx"]


def test_jobs_take_fewer_rounds_on_a_long_chain(tmp_path):
    model = modelzoo.chain(200)
    culprit = [model.graph.node[123].name]
    one, _, _ = _reduce_jobs(tmp_path, model, culprit, 1)
    many, seen, _ = _reduce_jobs(tmp_path, model, culprit, 4, devices=["3", "5"])
    assert many.final_nodes == one.final_nodes == [f"{culprit[0]} [Op: {model.graph.node[123].op_type}]"]
    assert many.checks > one.checks  # speculative: more checks...
    workers = {w for _, w, _ in seen}
    assert workers == {"0", "1", "2", "3"}
    assert {(w, d) for _, w, d in seen if w != "0"} == {("1", "5"), ("2", "3"), ("3", "5")}


def _chain_file(folder, n=30, culprit=17):
    model = modelzoo.chain(n)
    path = modelzoo.save(model, folder / "model.onnx")
    return path, model.graph.node[culprit].name


def test_jobs_on_the_command_line_rewrite_the_artifact_path_and_set_the_environment(tmp_path):
    from conftest import run_toolkit

    path, culprit = _chain_file(tmp_path)
    env_log = tmp_path / "env.log"
    script = (
        f'echo "$TOOLKIT_WORKER $CUDA_VISIBLE_DEVICES polygraphy_debug.onnx" >> {env_log}; '
        f"grep -q {culprit} polygraphy_debug.onnx && exit 1; exit 0"
    )
    results = {}
    for jobs in (1, 3):
        out = tmp_path / f"out{jobs}.onnx"
        r = run_toolkit(
            "debug", "reduce", path, "-o", str(out), "--jobs", str(jobs), "--devices", "0,1",
            "--check", "sh", "-c", script, cwd=str(tmp_path),
        )
        assert r.code == 0, r.output
        results[jobs] = [n.name for n in onnx.load(str(out)).graph.node]
    assert results[1] == results[3] == [culprit]
    lines = env_log.read_text().split("\n")
    seen = {tuple(line.split()) for line in lines if line}
    assert ("0", "0", "polygraphy_debug.onnx") in seen
    assert ("1", "1", "polygraphy_debug.onnx.worker1/polygraphy_debug.onnx") in seen
    assert ("2", "0", "polygraphy_debug.onnx.worker2/polygraphy_debug.onnx") in seen
    assert not any(p.name.startswith("polygraphy_debug.onnx") for p in tmp_path.iterdir())


def test_jobs_usage_errors(tmp_path, cli, monkeypatch):
    path, _ = _chain_file(tmp_path)
    monkeypatch.chdir(tmp_path)
    r = cli("debug", "reduce", path, "-o", "o.onnx", "--jobs", "0", "--check", "true")
    assert r.code == 2 and "--jobs" in r.output
    r = cli("debug", "reduce", path, "-o", "o.onnx", "--jobs", "2")
    assert r.code == 2 and "--jobs needs --check" in r.output
    r = cli("debug", "reduce", path, "-o", "o.onnx", "--jobs", "2", "--artifacts", "x.txt", "--check", "true")
    assert r.code == 2 and "x.txt" in r.output



@pytest.mark.serial
@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="reads /proc")
def test_ctrl_c_with_four_jobs_leaves_no_stray_process(tmp_path):
    path, _ = _chain_file(tmp_path)
    pids = tmp_path / "pids"
    # each check: a shell that starts a grandchild, records both, and waits
    script = f"sleep 60 & echo $! >> {pids}; echo $$ >> {pids}; wait"
    env = dict(os.environ, COLUMNS="200")
    proc = subprocess.Popen(
        [sys.executable, "-m", "toolkit", "debug", "reduce", path, "-o", "o.onnx", "--jobs", "4",
         "--check", "sh", "-c", script],
        cwd=str(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if pids.exists() and len(pids.read_text().split()) >= 8:
            break
        time.sleep(0.05)
    started = [int(p) for p in pids.read_text().split()]
    assert len(started) == 8 and all(_alive(p) for p in started)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 130, out.decode()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(_alive(p) for p in started):
        time.sleep(0.05)
    assert not [p for p in started if _alive(p)], "checks left running after Ctrl-C"
    assert not any(p.name.startswith("polygraphy_debug.onnx") for p in tmp_path.iterdir())


# ---------------------------------------------------------------------- inline weights: one spill


@pytest.fixture
def inline(tmp_path, monkeypatch):
    """The weighted chain with its weights inside the model file, and any weight worth a spill."""

    src = tmp_path / "src"
    work = tmp_path / "work"
    src.mkdir()
    work.mkdir()
    path = modelzoo.save(weighted_chain(), src / "model.onnx")
    monkeypatch.setattr("toolkit.reduce.artifacts.SPILL_BYTES", 1)
    monkeypatch.setattr("toolkit.reduce.artifacts.SPILL_MIN_TENSOR", 1)
    return path, work


@pytest.mark.parametrize("jobs", [1, 3])
def test_inline_weights_are_spilled_once_and_referenced(inline, jobs):
    model, work = inline
    before = open(model, "rb").read()
    spill = work / "polygraphy_debug.onnx.weights"
    seen = []

    class SpillCheck(ZeroCopyCheck):
        def run(self, tick=None):
            entries = external_entries(self.artifact)
            assert entries, "a candidate carries its weights inline"
            seen.append(os.stat(os.path.join(os.path.dirname(self.artifact), entries[0][1])).st_ino)
            return super().run(tick)

    notes = Notes()
    config = ReduceConfig(
        model=model, output=str(work / "reduced.onnx"), check=["c"], rule=FailureRule(fail_codes=[1]),
        iter_artifact=str(work / "polygraphy_debug.onnx"), min_good=str(work / "good.onnx"), jobs=jobs,
    )
    first = SpillCheck(work / "polygraphy_debug.onnx", "mul")
    outcome = Reducer(
        config, notes, runner=first, runner_factory=lambda k, art, env: SpillCheck(art, "mul")
    ).run()
    assert outcome.status == "reduced" and outcome.final_nodes == ["mul [Op: Mul]"]
    assert len(set(seen)) == jobs  # one data file, written once, for every check of a worker's folder
    assert sum("weights once to" in m for m in notes.messages) == 1
    assert not spill.exists() and sorted(os.listdir(work)) == ["good.onnx", "reduced.onnx"]
    for name in ("reduced.onnx", "good.onnx"):
        assert external_entries(work / name) == []  # self-contained
    np.testing.assert_array_equal(run_ort(work / "reduced.onnx")[0], W["w1"])
    assert open(model, "rb").read() == before


def test_small_inline_weights_are_not_spilled(tmp_path):
    path = modelzoo.save(weighted_chain(), tmp_path / "model.onnx")
    check = ZeroCopyCheck(tmp_path / "polygraphy_debug.onnx", "mul")
    outcome = reduce(path, tmp_path, check)
    assert outcome.status == "reduced" and check.inodes == set()  # nothing external: nothing spilled


@pytest.mark.serial
def test_jobs_with_timeouts_and_replay(tmp_path):
    """A check that hangs on the culprit is killed by --check-timeout in every worker (and
    counts as failing); a replay saved with --jobs answers a second run without checks."""
    from conftest import run_toolkit

    path, culprit = _chain_file(tmp_path, n=24, culprit=9)
    script = f"grep -q {culprit} polygraphy_debug.onnx && sleep 30; exit 0"
    finals = {}
    for jobs in (1, 3):
        out = tmp_path / f"out{jobs}.onnx"
        start = time.monotonic()
        r = run_toolkit(
            "debug", "reduce", path, "-o", str(out), "--jobs", str(jobs), "--check-timeout", "1",
            "--save-debug-replay", str(tmp_path / f"replay{jobs}.json"), "--check", "sh", "-c", script,
            cwd=str(tmp_path),
        )
        assert r.code == 0, r.output
        assert time.monotonic() - start < 25  # no check ran to its end
        finals[jobs] = [n.name for n in onnx.load(str(out)).graph.node]
    assert finals[1] == finals[3] == [culprit]
    r = run_toolkit(
        "debug", "reduce", path, "-o", str(tmp_path / "again.onnx"), "--jobs", "3", "--check-timeout", "1",
        "--load-debug-replay", str(tmp_path / "replay3.json"), "--check", "sh", "-c", script, cwd=str(tmp_path),
    )
    assert r.code == 0, r.output
    assert "0 checks run" in r.output, r.output
    assert [n.name for n in onnx.load(str(tmp_path / "again.onnx")).graph.node] == [culprit]


@pytest.mark.gpu
def test_tensorrt_reads_weights_through_the_hard_link(dirs):
    """A candidate's weights reached through the hard link run on TensorRT as on ONNX-Runtime."""
    from conftest import run_toolkit
    from toolkit.core.errors import ToolkitError

    try:
        from toolkit.backends.trt import check_available

        check_available()
    except (ToolkitError, ImportError) as exc:
        pytest.skip(f"TensorRT on a GPU is not usable here: {exc}")
    model, data, work = dirs
    seen = []

    class TrtCheck(ZeroCopyCheck):
        def run(self, tick=None):
            r = run_toolkit("run", self.artifact, "--trt", "--onnxrt", cwd=str(work))
            seen.append(r.code)
            assert r.code == 0, r.output
            return super().run(tick)

    outcome = reduce(model, work, TrtCheck(work / "polygraphy_debug.onnx", "mul", expect_same=data))
    assert outcome.status == "reduced" and seen

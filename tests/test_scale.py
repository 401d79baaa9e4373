"""`debug reduce` at scale: zero-copy candidates over external data, self-contained outputs.

The model's weights stay in its own folder (``src``); the iteration artifact is written in
another folder (``work``). Every candidate must reach the very same bytes (same file, same
offsets) through a hard link inside the artifact's folder, never through a symbolic link
or a path that leads out of it, and must run on ONNX-Runtime there. What the user keeps
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
from toolkit.reduce.check import CheckResult, FailureRule
from toolkit.reduce.session import ReduceConfig, Reducer, Reporter

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
    import toolkit.reduce.session as session

    src = tmp_path / "src"
    work = tmp_path / "work"
    src.mkdir()
    work.mkdir()
    modelzoo.save_with_external_data(weighted_chain(), src / "model.onnx")
    monkeypatch.setattr(session, "EAGER_WEIGHT_BYTES", 0)  # every weight stays on disk
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
    check = ZeroCopyCheck(work / "polygraphy_debug.onnx", "mul", expect_same=data)
    outcome = reduce(model, work, check)
    assert outcome.status == "reduced" and outcome.final_nodes == ["mul [Op: Mul]"]
    assert check.calls >= 3
    assert check.inodes == {os.stat(data).st_ino}  # never a copy
    # nothing left behind: the links are gone, the model's data file has one name again
    assert sorted(os.listdir(work)) == ["reduced.onnx"]
    assert os.stat(data).st_nlink == 1
    onnx.load(model)  # onnx's own loader accepts the model again (it refuses hard-linked data)


def test_outputs_are_self_contained_by_default(dirs, tmp_path):
    model, data, work = dirs
    check = ZeroCopyCheck(work / "polygraphy_debug.onnx", "mul", expect_same=data)
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
    check = ZeroCopyCheck(work / "polygraphy_debug.onnx", "mul", expect_same=data)
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
    check = ZeroCopyCheck(work / "polygraphy_debug.onnx", "mul", expect_same=data)
    assert reduce(model, work, check).status == "reduced"
    assert not os.path.exists(work / "polygraphy_debug.onnx.weights")

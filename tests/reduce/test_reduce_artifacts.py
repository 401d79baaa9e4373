"""`debug reduce`'s files under the one path rule: worker artifacts, --artifacts, --art-dir,
and an iteration artifact a check replaced by a link (written by rename, never through it)."""

from __future__ import annotations

import os

import pytest

import modelzoo as z
from reduce_helpers import FakeCheck

from toolkit.reduce.session import ReduceConfig, Reducer
from toolkit.reduce.verdict import FailureRule

# fails while n2_abs is in the artifact (a grep: these tests are about the files around the checks, and
# an onnx import costs a second per check)
CHECK = ["sh", "-c", "grep -q n2_abs polygraphy_debug.onnx && exit 1; exit 0"]


@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _model(path):
    z.save(z.chain(5), path)
    with open(path, "rb") as fh:
        return fh.read()


@pytest.mark.parametrize("how", ["file", "symlink"])
def test_a_worker_artifact_that_is_the_model_is_refused(cli, folder, how):
    worker = folder / "polygraphy_debug.onnx.worker1"
    worker.mkdir()
    if how == "file":
        model = str(worker / "polygraphy_debug.onnx")
    else:
        model = str(folder / "model.onnx")
        os.symlink(model, worker / "polygraphy_debug.onnx")
    before = _model(model)
    res = cli("debug", "reduce", model, "-o", "red.onnx", "--jobs", "2", "--check", *CHECK)
    assert res.code == 2, res.err
    assert "parallel check 1" in res.err and "nothing was read or written" in res.err
    assert open(model, "rb").read() == before
    assert not os.path.exists("red.onnx")


def test_output_at_a_worker_artifact_is_refused(cli, folder):
    _model("model.onnx")
    out = os.path.join("polygraphy_debug.onnx.worker1", "polygraphy_debug.onnx")
    os.mkdir("polygraphy_debug.onnx.worker1")
    res = cli("debug", "reduce", "model.onnx", "-o", out, "--jobs", "2", "--check", *CHECK)
    assert res.code == 2, res.err
    assert "-o" in res.err and "parallel check 1" in res.err


def test_artifacts_naming_the_model_never_move_it(cli, folder):
    before = _model("model.onnx")
    res = cli("debug", "reduce", "model.onnx", "-o", "red.onnx", "--artifacts", "model.onnx", "--check", *CHECK)
    assert res.code == 2, res.err
    assert "--artifacts model.onnx would overwrite MODEL" in res.err
    assert open("model.onnx", "rb").read() == before
    assert not os.path.exists("polygraphy_artifacts")


class PlantingCheck(FakeCheck):
    """Replaces the iteration artifact by a symbolic link to the model after each check."""

    def __init__(self, artifact, names, model):
        super().__init__(artifact, names)
        self.model = model

    def run(self, tick=None):
        res = super().run(tick)
        os.unlink(self.artifact)
        os.symlink(self.model, self.artifact)
        return res


def test_an_artifact_replaced_by_a_link_to_the_model_is_written_beside_it(folder):
    model = str(folder / "model.onnx")
    before = _model(model)
    artifact = str(folder / "polygraphy_debug.onnx")
    check = PlantingCheck(artifact, ["n2_abs"], model)
    cfg = ReduceConfig(model=model, output=str(folder / "red.onnx"), check=["fake"], iter_artifact=artifact,
                       rule=FailureRule(fail_codes=[1]))
    outcome = Reducer(cfg, runner=check).run()
    assert open(model, "rb").read() == before
    assert outcome.nodes_after == 1 and check.calls > 2


def test_a_second_run_numbers_its_artifacts_past_the_first(cli, folder):
    _model("model.onnx")
    args = ["debug", "reduce", "model.onnx", "-o", "red.onnx", "--artifacts", "polygraphy_debug.onnx",
            "--check", *CHECK]
    assert cli(*args).code == 0
    first = {p: open(os.path.join(d, p), "rb").read() for d in ("polygraphy_artifacts/bad",) for p in os.listdir(d)}
    n_first = len(os.listdir("polygraphy_artifacts/bad")) + len(os.listdir("polygraphy_artifacts/good"))
    res = cli(*args)
    assert res.code == 0, res.err
    assert f"numbered from {n_first + 1:03d}" in res.err
    for name, data in first.items():
        assert open(os.path.join("polygraphy_artifacts/bad", name), "rb").read() == data
    names = os.listdir("polygraphy_artifacts/bad") + os.listdir("polygraphy_artifacts/good")
    assert len(names) == 2 * n_first and f"{2 * n_first:03d}_polygraphy_debug.onnx" in names


def test_a_rerun_says_what_it_replaces_and_an_early_end_keeps_the_replay(cli, folder):
    _model("model.onnx")
    args = ["debug", "reduce", "model.onnx", "-o", "red.onnx", "--check", *CHECK]
    assert cli(*args).code == 0
    replay = (folder / "polygraphy_debug_replay.json").read_bytes()
    assert b'"verdict"' in replay
    res = cli(*args)
    assert res.code == 0
    assert "polygraphy_debug_replay.json is left from an earlier run; this run replaces it" in res.err
    # interactive, input at its end before the first answer: the replay is not replaced by an empty one
    kept = (folder / "polygraphy_debug_replay.json").read_bytes()
    res = cli("debug", "reduce", "model.onnx", "-o", "red2.onnx", stdin=b"")
    assert (folder / "polygraphy_debug_replay.json").read_bytes() == kept
    assert res.code == 3 and "error: end of input" in res.err and "resume with" not in res.err


def test_a_resumed_run_keeps_every_field_of_the_replay(cli, folder):
    import json

    _model("model.onnx")
    assert cli("debug", "reduce", "model.onnx", "-o", "red.onnx", "--check", *CHECK).code == 0
    first = json.loads((folder / "polygraphy_debug_replay.json").read_text())["entries"]
    res = cli("debug", "reduce", "model.onnx", "-o", "red.onnx", "--load-debug-replay",
              "polygraphy_debug_replay.json", "--check", *CHECK)
    assert res.code == 0, res.err
    again = json.loads((folder / "polygraphy_debug_replay.json").read_text())["entries"]
    assert [(e["verdict"], e["code"]) for e in again[: len(first)]] == [(e["verdict"], e["code"]) for e in first]

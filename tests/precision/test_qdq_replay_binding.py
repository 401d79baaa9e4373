"""`debug precision` replay files are bound to the models' and input files' contents, and record the
check normalized: a replay of another model or of changed files is refused naming what differs; the
same check spelled another way is accepted."""

import json
import os

import numpy as np
import pytest

import modelzoo as mz
import qdq_models as qm
from toolkit.core.io.datafiles import save_inputs


def _inputs(path, seed=0, scale=1.0):
    rng = np.random.default_rng(seed)
    save_inputs(str(path), [{"x": (rng.uniform(-1, 1, (1, 16)) * scale).astype(np.float32)} for _ in range(2)])
    return str(path)


@pytest.fixture()
def recorded(tmp_path, cli):
    """A replay of the sliced model (checked against a reference model file) on loaded inputs."""
    model = str(mz.save(qm.sliced(), tmp_path / "q.onnx"))
    ref = str(mz.save(qm.sliced(clip_scale=4 / 127), tmp_path / "ref.onnx"))
    feeds = _inputs(tmp_path / "in.json")
    replay = tmp_path / "r.json"
    args = [model, "--reference-model", ref, "--load-inputs", feeds, "--atol", "0.05", "--rtol", "0"]
    r = cli("debug", "precision", *args, "--save-debug-replay", replay)
    assert r.code == 0, r.err
    return {"model": model, "ref": ref, "feeds": feeds, "replay": str(replay), "args": args, "dir": tmp_path}


def _error(r) -> str:
    errors = [line for line in r.err.splitlines() if line.startswith("error:")]
    assert r.code == 3 and len(errors) == 1, r.err
    return errors[0]


def test_a_replay_of_a_model_with_the_same_names_but_other_scales_is_refused(recorded, cli):
    other = str(mz.save(qm.sliced(clip_scale=2 / 127), recorded["dir"] / "other.onnx"))
    args = [other, *recorded["args"][1:]]
    err = _error(cli("debug", "precision", *args, "--load-debug-replay", recorded["replay"]))
    assert "different model" in err
    # the same file changed in place: refused too
    mz.save(qm.sliced(clip_scale=2 / 127), recorded["model"])
    err = _error(cli("debug", "precision", *recorded["args"], "--load-debug-replay", recorded["replay"]))
    assert "different model" in err


@pytest.mark.parametrize("which", ["feeds", "ref"])
def test_a_changed_input_or_reference_file_under_the_same_name_is_refused(recorded, cli, which):
    if which == "feeds":
        _inputs(recorded["feeds"], seed=9, scale=3.0)
        flag = "--load-inputs"
    else:
        mz.save(qm.sliced(clip_scale=8 / 127), recorded["ref"])
        flag = "--reference-model"
    err = _error(cli("debug", "precision", *recorded["args"], "--load-debug-replay", recorded["replay"]))
    assert f"{flag} {os.path.realpath(recorded[which])}: the file's content changed" in err, err


def test_the_same_check_spelled_another_way_is_accepted(recorded, cli, monkeypatch):
    monkeypatch.chdir(recorded["dir"])
    before = cli("debug", "precision", *recorded["args"], "--load-debug-replay", recorded["replay"], "--json")
    assert before.code == 0, before.err
    args = [recorded["model"], "--reference-model", "ref.onnx", "--load-inputs", recorded["feeds"],
            "--atol", "5e-2", "--rtol", "0.0", "--held-out", "0"]  # (two sets: none held out by default)
    r = cli("debug", "precision", *args, "--load-debug-replay", recorded["replay"], "--json")
    assert r.code == 0, r.err
    new, old = json.loads(r.out), json.loads(before.out)
    assert new["remembered"] == old["remembered"] > 0 and new["checks"] == old["checks"]  # (verdicts from the file)
    assert [p["pair"] for p in new["float_pairs"]] == [p["pair"] for p in old["float_pairs"]]


def test_a_refusal_names_the_option_that_differs(recorded, cli):
    for extra, words in ((["--float-op-types", "Mul"], "--float-op-types"),
                         (["--compare", "onnxrt", "onnxrt:opt=disable"], "--compare"),
                         (["--qdq-weights"], "--qdq-weights")):
        err = _error(cli("debug", "precision", *recorded["args"], *extra, "--load-debug-replay", recorded["replay"]))
        assert f"recorded with {words}" in err and "different model" not in err, err
    doc = json.loads(open(recorded["replay"]).read())
    del doc["check"]  # (the words are for reading; the options decide)
    with open(recorded["replay"], "w") as f:
        json.dump(doc, f)
    assert cli("debug", "precision", *recorded["args"], "--load-debug-replay", recorded["replay"]).code == 0


def test_a_quantized_model_the_runtime_cannot_load_is_bad_input(tmp_path, cli):
    """The user's QDQ model does not load in ONNX-Runtime (a Transpose whose perm does not fit its
    input): one error line naming the model and the runtime's words, exit 3 (not a bug in toolkit)."""
    import onnx
    from onnx import helper

    model = qm.sliced()
    model.graph.node.append(helper.make_node("Transpose", ["y"], ["yt"], name="bad_transpose", perm=[0, 2, 3, 1]))
    model.graph.output[0].name = "yt"
    path = tmp_path / "bad.onnx"
    onnx.save(model, str(path))
    float_model = qm.sliced()
    float_model.graph.output[0].name = "yt"
    float_model.graph.node.append(helper.make_node("Identity", ["y"], ["yt"], name="identity"))
    ref = tmp_path / "ref.onnx"
    onnx.save(float_model, str(ref))
    feeds = _inputs(tmp_path / "in.json")
    for extra in ([], ["--float-op-types", "Mul"]):
        r = cli("debug", "precision", path, "--reference-model", ref, "--load-inputs", feeds, *extra)
        err = _error(r)
        assert str(path) in err and "ONNX-Runtime cannot load" in err and "bug" not in err, err


def test_a_replay_with_inputs_from_stdin_is_refused(tmp_path, cli):
    """Data read from stdin has no content to check a replay against: refused, never trusted."""
    model = str(mz.save(qm.sliced(), tmp_path / "q.onnx"))
    data = open(_inputs(tmp_path / "in.json"), "rb").read()
    replay = tmp_path / "r.json"
    args = [model, "--load-inputs", "-", "--atol", "0.05", "--rtol", "0"]
    assert cli("debug", "precision", *args, "--save-debug-replay", replay, stdin=data).code == 0
    err = _error(cli("debug", "precision", *args, "--load-debug-replay", replay, stdin=data))
    assert "--load-inputs -: data read from stdin cannot be checked" in err

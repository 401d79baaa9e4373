"""In-place rewrites (``surgeon sanitize -o MODEL MODEL``) take a lock on the model and
re-check its identity before the rename: a second one at the same time refuses in one
sentence, and a model changed by another program meanwhile is never overwritten."""

from __future__ import annotations

import fcntl

import onnx

import modelzoo as z

from toolkit.core.files import inplace
from toolkit.core.errors import InputError


def test_a_second_in_place_rewrite_of_one_model_refuses_in_one_sentence(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    z.save(z.chain(3), "m.onnx")
    before = (tmp_path / "m.onnx").read_bytes()
    with open("m.onnx", "rb") as other:  # another command rewriting it holds this lock
        fcntl.flock(other.fileno(), fcntl.LOCK_EX)
        res = cli("surgeon", "sanitize", "m.onnx", "--fold-constants", "-o", "m.onnx")
    assert res.code == 3, res.err
    assert res.err.count("\n") == 1 and "is being rewritten in place by another command" in res.err
    assert (tmp_path / "m.onnx").read_bytes() == before
    assert cli("surgeon", "sanitize", "m.onnx", "--fold-constants", "-o", "m.onnx").code == 0  # (lock released)


def test_a_model_changed_before_the_rename_is_not_overwritten(tmp_path):
    path = str(tmp_path / "m.onnx")
    z.save(z.chain(3), path)
    inplace.lock_for_rewrite(path)
    try:
        z.save(z.chain(5), path)  # another program rewrites it meanwhile
        from toolkit.core.io.model import save_model

        try:
            save_model(z.chain(2), path)
            raise AssertionError("the changed model was overwritten")
        except InputError as exc:
            assert "was changed by another program" in exc.message
    finally:
        inplace.release_all()
    assert len(onnx.load(path).graph.node) == 5

"""A child killed at any moment leaves none of the temp files it makes: the name is told to the
parent before the file exists, and a name that was another's is taken back, never removed."""

from __future__ import annotations

import os
import signal

import pytest

from toolkit.core.files import create
from toolkit.core.process.supervise import run_in_child

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="fork")


def _killed_just_after_the_create(_phase, folder):
    real = create.create_new

    def create_then_die(path, *args, **kwargs):
        fd = real(path, *args, **kwargs)
        os.kill(os.getpid(), signal.SIGKILL)  # (the moment between the file's creation and anything after)
        return fd

    create.create_new = create_then_die
    create.temp_beside(os.path.join(folder, "out.npz"))


def test_a_child_killed_right_after_creating_its_temp_file_leaves_none(tmp_path):
    out = run_in_child(_killed_just_after_the_create, str(tmp_path))
    assert out.signal == signal.SIGKILL
    assert os.listdir(tmp_path) == []


def _taken_name(_phase, folder, taken):
    names = iter([taken, ".out.npz.mine.tmp"])
    create.temp_name = lambda _base: next(names)
    create.temp_beside(os.path.join(folder, "out.npz"))
    os.kill(os.getpid(), signal.SIGKILL)


def test_a_name_that_was_anothers_file_is_never_removed(tmp_path):
    (tmp_path / ".out.npz.theirs.tmp").write_text("not mine")
    out = run_in_child(_taken_name, str(tmp_path), ".out.npz.theirs.tmp")
    assert out.signal == signal.SIGKILL
    assert sorted(os.listdir(tmp_path)) == [".out.npz.theirs.tmp"]
    assert (tmp_path / ".out.npz.theirs.tmp").read_text() == "not mine"

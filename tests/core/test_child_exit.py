"""Work in a child that calls ``sys.exit()`` (a library's or a custom op's own exit) ends the child
without a result: its parent sees a child that exited, never a ``SystemExit`` of its own. Before,
the child sent its SystemExit back and the parent raised it: `surgeon sanitize --fold-constants`
exited 0, "successful", with nothing written."""

from __future__ import annotations

import os
import sys

import pytest

from toolkit.core.files import create
from toolkit.core.process.interrupt import ChildDied, call_in_child
from toolkit.core.process.supervise import run_in_child

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="fork")


def _exits(_phase, code):
    sys.exit(code)


@pytest.mark.parametrize("code, status", [(0, 0), (None, 0), (5, 5), ("a message", 1)])
def test_an_exit_in_the_child_is_a_child_without_a_result(code, status):
    out = run_in_child(_exits, code)
    assert out.crashed and out.value is None
    assert out.signal is None and out.exit_code == status
    assert out.signal_name == f"exit {status}"


def test_call_in_child_says_the_child_exited():
    with pytest.raises(ChildDied, match=r"shape inference ended without a result \(exit 0\); something it ran "
                                        r"called exit\(\)"):
        call_in_child(sys.exit, 0, what="shape inference")


def _temp_then_exit(_phase, folder):
    create.temp_beside(os.path.join(folder, "out.npz"))
    sys.exit(0)


def test_its_temp_files_are_removed(tmp_path):
    out = run_in_child(_temp_then_exit, str(tmp_path))
    assert out.exit_code == 0
    assert os.listdir(tmp_path) == []

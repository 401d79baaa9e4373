"""`debug reduce --artifacts`: a symbolic link at `--art-dir` never leads the artifacts elsewhere.

A link there before the command starts is refused (exit 3, one line, nothing done); a link a
check plants there during the run is replaced by a folder of the reduce's own."""

from __future__ import annotations

import os
import sys

import pytest

import modelzoo as z
from reduce_helpers import CHECKER

CHECK = [sys.executable, CHECKER, "polygraphy_debug.onnx", "n2_abs"]


@pytest.fixture
def folder(tmp_path, monkeypatch):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    z.save(z.chain(4), str(work / "model.onnx"))
    outside = tmp_path / "outside"
    outside.mkdir()
    return work, outside


def _args(*art_dir):
    return ["debug", "reduce", "model.onnx", "-o", "red.onnx", "--artifacts", "polygraphy_debug.onnx", *art_dir]


@pytest.mark.parametrize("given", [[], ["--art-dir", "arts"], ["--art-dir", "arts/"]])
def test_an_art_dir_that_is_a_link_is_refused_before_any_work(cli, folder, given):
    work, outside = folder
    os.symlink(outside, work / (given[1].rstrip("/") if given else "polygraphy_artifacts"))
    res = cli(*_args(*given), "--check", *CHECK)
    assert res.code == 3, res.err
    lines = [line for line in res.err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: --art-dir") and "symbolic link" in lines[0], res.err
    assert os.listdir(outside) == [] and not os.path.exists("red.onnx")


def test_a_link_a_check_plants_at_the_art_dir_is_replaced_by_a_folder(cli, folder):
    work, outside = folder
    plant = (
        "import os, subprocess, sys\n"
        f"os.path.lexists('polygraphy_artifacts') or os.symlink({str(outside)!r}, 'polygraphy_artifacts')\n"
        f"sys.exit(subprocess.call({CHECK!r}))\n"
    )
    res = cli(*_args(), "--check", sys.executable, "-c", plant)
    assert res.code == 0, res.err
    assert os.listdir(outside) == []
    assert not os.path.islink("polygraphy_artifacts") and os.listdir("polygraphy_artifacts/bad")

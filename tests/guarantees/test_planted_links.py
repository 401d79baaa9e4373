"""No command writes through a link planted at a name it creates.

A check that ``debug reduce`` runs, or anyone sharing the folder, can leave a symbolic link (or
a hard link) under a name a command is about to create: its lock files, temp files, replay,
iteration artifact, worker folders, outputs. The names are not listed here by hand: each
command runs once with ``TOOLKIT_TRACE_CREATED`` set, which makes :mod:`toolkit.core.files.create`
(the one way the product creates a file) record every name it creates; then, in a fresh
folder, a link to a file (or folder) outside is planted at each of those names and the
command runs again. Nothing outside may change. (The commands run in-process: what they create and
where is the same code there, and the checks and supervised children are forked from this process.)
"""

from __future__ import annotations

import os

import onnx
import pytest
from test_faults import matmul_model

CHECK = ["--fail-regex", "mm2", "--check", "toolkit", "inspect", "model", "polygraphy_debug.onnx"]
COMMANDS = {
    "run": ["run", "m.onnx", "--onnxrt", "--openvino", "--save-outputs", "out.npz", "--save-inputs", "in.json",
            "--save-report", "rep.html", "--save-onnx", "saved.onnx"],
    "convert": ["convert", "m.onnx", "--fp-to-fp16", "-o", "conv.onnx"],
    "sanitize-external": ["surgeon", "sanitize", "m.onnx", "-o", "ext.onnx", "--save-external-data", "ext.data"],
    "sanitize-in-place": ["surgeon", "sanitize", "m.onnx", "-o", "m.onnx", "--fold-constants", "--save-external-data",
                          "m.data"],
    "reduce": ["debug", "reduce", "m.onnx", "-o", "red.onnx", "--min-good", "good.onnx", "--artifacts",
               "polygraphy_debug.onnx", "--art-dir", "art", *CHECK],
    "reduce-jobs-2": ["debug", "reduce", "m.onnx", "-o", "red.onnx", "--jobs", "2", "--save-debug-replay", "rp.json",
                      *CHECK],
    "precision": ["debug", "precision", "m.onnx", "-o", "prec.onnx", "--save-debug-replay", "prp.json"],
}


@pytest.fixture
def toolkit(cli_in):
    """``toolkit(*args, cwd=folder)``: the command in this process, run in ``folder``."""
    return cli_in


def _model(folder):
    onnx.save(matmul_model(depth=4, size=32), str(folder / "m.onnx"))


def _created(toolkit, folder, args, trace) -> list:
    """The names (relative to ``folder``) the command creates there, folders first."""
    res = toolkit(*args, cwd=folder, env={"TOOLKIT_TRACE_CREATED": str(trace)})
    names = []
    for line in trace.read_text().splitlines() if trace.exists() else []:
        rel = os.path.relpath(line, folder)
        if not rel.startswith("..") and rel not in names and rel != "m.onnx":
            names.append(rel)
    return res.code, sorted(names, key=lambda n: n.count(os.sep))


def _plant(folder, outside, names) -> dict:
    """A link at each name to its own victim outside (a folder for a name something is created
    in); returns {victim: its bytes (None for a folder)}."""
    victims = {}
    folders = {os.path.dirname(n) for n in names if os.path.dirname(n)}
    for k, name in enumerate(names):
        at = folder / name
        if not at.parent.is_dir() or at.parent.is_symlink():
            continue  # (inside a planted folder link: that link covers it)
        if name in folders:
            victim = outside / f"dir{k}"
            victim.mkdir()
            victims[victim] = None
        else:
            victim = outside / f"victim{k}"
            victim.write_bytes(f"victim {k}\n".encode())
            victims[victim] = victim.read_bytes()
        at.symlink_to(victim)
    return victims


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_no_command_writes_through_a_link_planted_at_a_name_it_creates(toolkit, tmp_path, command):
    args = COMMANDS[command]
    first, planted, outside = tmp_path / "first", tmp_path / "planted", tmp_path / "outside"
    for d in (first, planted, outside):
        d.mkdir()
    _model(first)
    code, names = _created(toolkit, first, args, tmp_path / "trace1")
    assert names, "the trace recorded nothing"
    _model(planted)
    model = (planted / "m.onnx").read_bytes()
    victims = _plant(planted, outside, names)
    before = sorted(os.listdir(outside))
    res = toolkit(*args, cwd=planted)
    for victim, data in victims.items():
        if data is None:
            assert os.listdir(victim) == [], f"{command} wrote into {victim} through a planted link"
        else:
            assert victim.read_bytes() == data, f"{command} wrote through a link to {victim.name}: {names}"
    assert sorted(os.listdir(outside)) == before
    if command == "reduce":  # (a link at --art-dir is refused before any work: test_art_dir_link.py)
        code = 3 if "art" in names else code
        assert code == 0 or "error: --art-dir art is a symbolic link" in res.err, res.err
    assert res.code == code, res.err
    if command != "sanitize-in-place":
        assert (planted / "m.onnx").read_bytes() == model


@pytest.mark.parametrize("kind", ["symlink", "hardlink"])
def test_a_lock_name_planted_as_a_link_leaves_its_target_whole(toolkit, tmp_path, kind):
    """A link at each lock's name (to the model, and to an unrelated file): the locks are files of the run's own."""
    _model(tmp_path)
    model = (tmp_path / "m.onnx").read_bytes()
    other = tmp_path / "notes.txt"
    other.write_text("unrelated\n")
    for lock, target in ((".polygraphy_debug.onnx.lock", "m.onnx"), (".polygraphy_debug_replay.json.lock", "notes.txt")):
        if kind == "symlink":
            (tmp_path / lock).symlink_to(target)
        else:
            os.link(tmp_path / target, tmp_path / lock)
    res = toolkit("debug", "reduce", "m.onnx", "-o", "red.onnx", *CHECK, cwd=tmp_path)
    assert res.code == 0, res.err
    assert (tmp_path / "m.onnx").read_bytes() == model
    assert other.read_text() == "unrelated\n"


def test_a_log_file_name_that_is_a_link_is_refused(toolkit, tmp_path):
    _model(tmp_path)
    victim = tmp_path / "victim"
    victim.write_text("victim\n")
    (tmp_path / "run.log").symlink_to(victim)
    res = toolkit("run", "m.onnx", "--onnxrt", "--log-file", "run.log", cwd=tmp_path)
    assert res.code == 2 and "symbolic link" in res.err, res.err
    assert victim.read_text() == "victim\n"

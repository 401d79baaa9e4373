"""Nothing lost: a user's files survive every command, every signal and every mistake.

The tests of signals, of a full ``stdout`` and of the entry point run the real command
(``python -m toolkit``) in a subprocess; the others run it in this process (``toolkit``), as the
path rules, the order of writes and the refusals are the same code there:

- one rule for paths: no file a command writes is a file it reads (the model, its
  external data files, data files, replay, scripts) or another file it writes, checked
  before any work, through ``./``, symlinks and hard links (exit 2 naming both);
- a model and its data file are committed data first, model last: a data file that cannot
  be written leaves the original model untouched, an in-place rewrite never leaves the old
  model beside new data;
- SIGTERM and SIGHUP end a command as Ctrl-C does: exit 130, one line saying what was and was
  not written, no temp file; the reduce writes what it has and its check dies with it;
- a reduce that cannot judge the model stops with exit 3 and keeps its replay;
- small ones: ``../`` data paths, ``-o -`` into a full device, a full ``--log-file``, a write
  failure in the middle of a reduce.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

import modelzoo as z
from conftest import run_toolkit
from test_faults import files, interrupt_after_output, matmul_model, toolkit_popen
from procs import alive as _alive

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses /proc, /dev/full and POSIX signals")


def weights_model():
    """y = x @ w with w (64x64, 16 KiB) big enough to go to an external data file."""
    w = numpy_helper.from_array(np.arange(4096, dtype=np.float32).reshape(64, 64) / 4096, "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "g", [z.vi("x", [1, 64])], [z.vi("y", [1, 64])], [w]
    )
    return z.make_model(graph)


def save_external(folder, name="d.onnx", location="d.onnx.data"):
    onnx.save_model(weights_model(), str(folder / name), save_as_external_data=True, location=location,
                    size_threshold=0)
    return folder / name


def compute(path):
    x = np.linspace(0, 1, 64, dtype=np.float32).reshape(1, 64)
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


@pytest.fixture
def toolkit(cli_in):
    """``toolkit(*args, cwd=folder)``: the command in this process, run in ``folder``."""
    return cli_in


def assert_one_clash(res, *names):
    assert res.code == 2, res.err
    assert "Traceback" not in res.err and len(res.err.strip().splitlines()) == 1, res.err
    for name in names:
        assert name in res.err, res.err


# ---------------------------------------------------------------------- 1. one rule for paths


@pytest.mark.parametrize("flag, location", [
    ("--save-outputs", "w.npz"), ("--save-inputs", "w.json"), ("--save-onnx", "w.npz"),
])
def test_run_never_writes_over_the_models_external_data(toolkit, tmp_path, flag, location):
    model = save_external(tmp_path, "m.onnx", location)
    before = files(tmp_path)
    res = toolkit("run", "m.onnx", "--onnxrt", flag, location, cwd=tmp_path)
    assert_one_clash(res, flag, "external data file")
    assert files(tmp_path) == before
    assert compute(model).shape == (1, 64)


def test_save_inputs_and_save_outputs_naming_one_file(tmp_path):
    z.save(z.chain(3), tmp_path / "m.onnx")
    res = run_toolkit("run", "m.onnx", "--onnxrt", "--save-inputs", "a.json", "--save-outputs", "./a.json",
                      cwd=tmp_path)
    assert_one_clash(res, "--save-inputs a.json", "--save-outputs ./a.json")
    assert not (tmp_path / "a.json").exists()


@pytest.mark.parametrize("flag", ["-o", "--min-good", "--save-debug-replay", "--iter-info", "--iter-artifact"])
@pytest.mark.parametrize("via", ["name", "symlink", "dot"])
def test_reduce_outputs_never_name_the_model(toolkit, tmp_path, flag, via):
    z.save(z.chain(6), tmp_path / "model.onnx")
    os.symlink("model.onnx", tmp_path / "link.onnx")
    target = {"name": "model.onnx", "symlink": "link.onnx", "dot": "./sub/../model.onnx"}[via]
    (tmp_path / "sub").mkdir()
    before = files(tmp_path)
    args = ["debug", "reduce", "model.onnx"] + ([] if flag == "-o" else ["-o", "out.onnx"]) + [flag, target]
    res = toolkit(*args, "--check", "false", cwd=tmp_path)
    assert_one_clash(res, flag, "model.onnx")
    assert files(tmp_path) == before


def test_reduce_outputs_never_name_the_models_external_data(toolkit, tmp_path):
    save_external(tmp_path, "model.onnx", "w.bin")
    before = files(tmp_path)
    res = toolkit("debug", "reduce", "model.onnx", "-o", "out.onnx", "--save-debug-replay", "w.bin",
                  "--check", "false", cwd=tmp_path)
    assert_one_clash(res, "--save-debug-replay", "external data file")
    assert files(tmp_path) == before


@pytest.mark.parametrize("case", ["sanitize-model", "data-input", "run-data", "external-data", "reduce-check-data"])
def test_log_file_never_names_an_input(toolkit, tmp_path, case):
    save_external(tmp_path, "m.onnx", "w.bin")
    (tmp_path / "in.json").write_text("[]")
    assert toolkit("run", "m.onnx", "--onnxrt", "--save-inputs", "feed.json", cwd=tmp_path).code == 0
    before = files(tmp_path)
    args = {
        "sanitize-model": ["surgeon", "sanitize", "m.onnx", "-o", "o.onnx", "--log-file", "m.onnx"],
        "data-input": ["data", "to-input", "feed.json", "-o", "o.json", "--log-file", "feed.json"],
        "run-data": ["run", "m.onnx", "--onnxrt", "--load-inputs", "feed.json", "--log-file", "./feed.json"],
        "external-data": ["surgeon", "sanitize", "m.onnx", "-o", "o.onnx", "-v", "--log-file", "w.bin"],
        "reduce-check-data": ["debug", "reduce", "m.onnx", "-o", "r.onnx", "--log-file", "feed.json",
                              "--check", "toolkit", "run", "polygraphy_debug.onnx", "--load-inputs", "feed.json"],
    }[case]
    res = toolkit(*args, cwd=tmp_path)
    assert_one_clash(res, "--log-file")
    assert files(tmp_path) == before


def test_surgeon_data_file_never_overwrites_the_inputs(toolkit, tmp_path):
    save_external(tmp_path, "d.onnx", "d.onnx.data")
    before = files(tmp_path)
    res = toolkit("surgeon", "sanitize", "d.onnx", "-o", "new.onnx", "--external-data-path", "d.onnx.data",
                  cwd=tmp_path)
    assert_one_clash(res, "--external-data-path", "d.onnx.data")
    assert files(tmp_path) == before


# ---------------------------------------------------------------------- 2. pairs in order


def test_a_data_file_that_cannot_be_written_leaves_the_model_untouched(toolkit, tmp_path):
    save_external(tmp_path)
    (tmp_path / "wdir").mkdir()
    before = files(tmp_path)
    res = toolkit("surgeon", "sanitize", "d.onnx", "-o", "d.onnx", "--fold-constants", "--save-external-data",
                  "wdir", cwd=tmp_path)
    assert res.code in (2, 3) and "Traceback" not in res.err, res.err
    assert "wdir" in res.err
    assert files(tmp_path) == before
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]


def test_in_place_rewrite_with_its_own_data_file_name(toolkit, tmp_path):
    """d.onnx + d.onnx.data rewritten in place with the same data file name: the new pair is
    complete, loads, computes what the old one did, and the old data file is gone."""
    model = save_external(tmp_path)
    want = compute(model)
    res = toolkit("surgeon", "sanitize", "d.onnx", "-o", "d.onnx", "--fold-constants", "--save-external-data",
                  cwd=tmp_path)
    assert res.code == 0, res.err
    np.testing.assert_array_equal(compute(model), want)
    names = sorted(n for n in os.listdir(tmp_path))
    assert len(names) == 2 and "d.onnx" in names, names  # the model and one data file, no temp file


# ---------------------------------------------------------------------- 3. signals


@pytest.mark.serial
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def test_run_interrupted_by_any_signal(tmp_path, sig):
    z.save(matmul_model(), tmp_path / "model.onnx")
    before = files(tmp_path)
    proc = toolkit_popen(
        ["run", "model.onnx", "--onnxrt", "--iterations", "200000", "--save-outputs", "out.json"], tmp_path
    )
    code, _, err, sent = interrupt_after_output(proc, b"Iteration 1 ", sig=sig)
    assert sent, err[-2000:]
    assert code == 130, err[-2000:]
    last = err.strip().splitlines()[-1]
    assert last == f"error: interrupted ({sig.name}); --save-outputs out.json was not written", last
    assert files(tmp_path) == before
    assert not os.listdir(tmp_path) == [] and not [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]


@pytest.mark.serial
def test_data_to_input_interrupted_says_so(tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "toolkit", "data", "to-input", "-", "-o", "out.json"],
                            cwd=tmp_path, stdin=subprocess.PIPE, stderr=subprocess.PIPE)
    time.sleep(1.5)  # reading stdin, which stays open
    proc.send_signal(signal.SIGINT)
    err = proc.communicate(timeout=60)[1].decode()
    assert proc.returncode == 130, err
    assert err.strip().splitlines()[-1] == "error: interrupted (SIGINT); -o out.json was not written", err
    assert os.listdir(tmp_path) == []


HANG_CHECK = """#!/bin/sh
echo $$ >> pids
n=$(wc -l < pids)
if [ "$n" -ge 3 ]; then sleep 300 & echo $! >> grandchildren; wait; fi
exit 1
"""



@pytest.mark.serial
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGKILL], ids=lambda s: s.name)
def test_reduce_signal_kills_the_check_and_writes_what_it_has(tmp_path, sig):
    z.save(z.chain(6), tmp_path / "model.onnx")
    (tmp_path / "check.sh").write_text(HANG_CHECK)
    os.chmod(tmp_path / "check.sh", 0o755)
    proc = toolkit_popen(["debug", "reduce", "model.onnx", "-o", "out.onnx", "--check", "./check.sh"], tmp_path)
    code, _, err, sent = interrupt_after_output(proc, b"Iteration 2 ", sig=sig)
    assert sent, err[-2000:]
    time.sleep(0.3)
    pids = [int(p) for p in (tmp_path / "pids").read_text().split()]
    alive = [p for p in pids if _alive(p)]
    grand = tmp_path / "grandchildren"
    left = [int(p) for p in grand.read_text().split() if _alive(int(p))] if grand.exists() else []
    for p in alive + left:  # (clean up before judging; after SIGKILL of the reduce a grandchild may live on)
        os.kill(p, signal.SIGKILL)
    assert not alive, "a check outlived the reduce"
    if sig == signal.SIGKILL:
        return
    assert not left, "a check's child outlived the reduce"
    assert code == 130, err[-2000:]
    assert f"Interrupted ({sig.name}): the smallest failing model so far (3 nodes) was written to out.onnx" in err
    assert onnx.load(str(tmp_path / "out.onnx")).graph.node


DETACH_CHECK = """#!/bin/sh
setsid sleep 300 >/dev/null 2>&1 </dev/null &
echo $! >> strays
sleep 0.2
grep -q n2_ polygraphy_debug.onnx && exit 1
exit 0
"""


@pytest.mark.serial
def test_detached_processes_of_the_check_are_stopped_and_reported(tmp_path):
    z.save(z.chain(4), tmp_path / "model.onnx")
    (tmp_path / "check.sh").write_text(DETACH_CHECK)
    os.chmod(tmp_path / "check.sh", 0o755)
    res = run_toolkit("debug", "reduce", "model.onnx", "-o", "out.onnx", "--check", "./check.sh", cwd=tmp_path)
    assert res.code == 0, res.err
    strays = [int(p) for p in (tmp_path / "strays").read_text().split()]
    time.sleep(0.2)
    alive = [p for p in strays if _alive(p)]
    for p in alive:  # (clean up before failing)
        os.kill(p, signal.SIGKILL)
    assert not alive
    assert f"the checks left {len(strays)} process(es) running in the background" in res.err


# ---------------------------------------------------------------------- 4. a reduce that cannot judge



def _reduce_changing_files_at_iteration_2(folder, args, change):
    """``debug reduce big.onnx ARGS`` in ``folder``; ``change()`` runs at each stderr line from the
    one starting "Iteration 2 " on. (The process, its stderr lines.)"""
    proc = subprocess.Popen([sys.executable, "-m", "toolkit", "debug", "reduce", "big.onnx", *args],
                            cwd=folder, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    lines = []
    for line in proc.stderr:
        lines.append(line)
        if line.startswith("Iteration 2 "):
            change()
    proc.wait(timeout=120)
    return proc, lines

@pytest.mark.serial
def test_reduce_whose_data_file_vanishes_stops(tmp_path):
    z.save(z.chain(40), tmp_path / "big.onnx")
    assert run_toolkit("run", "big.onnx", "--onnxrt", "--save-inputs", "in.json", cwd=tmp_path).code == 0
    proc, lines = _reduce_changing_files_at_iteration_2(
        tmp_path, ["-o", "out.onnx", "--fail-regex", "PASSED",
                   "--check", "toolkit", "run", "polygraphy_debug.onnx", "--onnxrt", "--load-inputs", "in.json"],
        lambda: os.unlink(tmp_path / "in.json") if (tmp_path / "in.json").exists() else None,
    )
    err = "".join(lines)
    assert proc.returncode == 3, err
    assert "in.json: a data file the check reads disappeared" in err
    assert "Reduced" not in err and not (tmp_path / "out.onnx").exists()
    assert (tmp_path / "polygraphy_debug_replay.json").exists()


def test_reduce_whose_checks_are_mostly_broken_stops(toolkit, tmp_path):
    z.save(z.chain(40), tmp_path / "big.onnx")
    check = "n=$(cat n 2>/dev/null || echo 0); echo $((n+1)) > n; [ $n -eq 0 ] && exit 1; exit 127"
    res = toolkit("debug", "reduce", "big.onnx", "-o", "out.onnx", "--save-debug-replay", "r.json",
                  "--check", "sh", "-c", check, cwd=tmp_path)
    assert res.code == 3, res.err
    assert "could not judge" in res.err and "r.json" in res.err.splitlines()[-1]
    assert (tmp_path / "r.json").exists() and not (tmp_path / "out.onnx").exists()


# ---------------------------------------------------------------------- 5. small ones


def test_external_data_path_outside_the_folder(toolkit, tmp_path):
    save_external(tmp_path)
    before = files(tmp_path)
    res = toolkit("surgeon", "sanitize", "d.onnx", "-o", "o.onnx", "--external-data-path", "../escape.data",
                  cwd=tmp_path)
    assert res.code == 2 and "bug" not in res.err and "leaves the model's folder" in res.err, res.err
    assert files(tmp_path) == before and not (tmp_path.parent / "escape.data").exists()


def test_stdout_on_a_full_device_is_named_stdout(tmp_path):
    z.save(z.chain(3), tmp_path / "m.onnx")
    with open("/dev/full", "wb") as full:
        proc = subprocess.run([sys.executable, "-m", "toolkit", "surgeon", "sanitize", "m.onnx", "-o", "-"],
                              cwd=tmp_path, stdout=full, stderr=subprocess.PIPE, text=True, timeout=120)
    assert proc.returncode == 3, proc.stderr
    assert "<stdout>: cannot write: No space left on device" in proc.stderr


def test_log_file_on_a_full_filesystem_says_so(toolkit, tmp_path):
    z.save(z.chain(3), tmp_path / "m.onnx")
    res = toolkit("run", "m.onnx", "--onnxrt", "--log-file", "/dev/full", cwd=tmp_path)
    assert "--log-file /dev/full: cannot write (No space left on device)" in res.err, res.err


@pytest.mark.serial
def test_write_failure_mid_reduce_still_writes_the_smallest_failing_model(tmp_path):
    z.save(z.chain(40), tmp_path / "big.onnx")
    (tmp_path / "sub").mkdir()
    proc, lines = _reduce_changing_files_at_iteration_2(
        tmp_path, ["-o", "out.onnx", "--iter-artifact", "sub/a.onnx", "--fail-regex", "PASSED",
                   "--check", "toolkit", "run", "sub/a.onnx", "--onnxrt"],
        # the artifact's folder disappears
        lambda: os.rename(tmp_path / "sub", tmp_path / "gone") if (tmp_path / "sub").exists() else None,
    )
    err = "".join(lines)
    assert proc.returncode == 3, err
    assert "the smallest failing model found so far (20 node(s)) was written to out.onnx" in err
    assert len(onnx.load(str(tmp_path / "out.onnx")).graph.node) == 20


@pytest.mark.parametrize(
    "stop_at", [None, 1, 2, 3], ids=["whole", "stopped-at-repoint", "stopped-at-data-rename", "stopped-at-commit"]
)
def test_in_place_pair_is_usable_at_every_rename(tmp_path, monkeypatch, stop_at):
    """Saving over a model whose data file has the same name: before each rename the model on
    disk computes what the old one did; Ctrl-C at a rename puts the old pair back byte for byte."""
    from toolkit.core.io.model import load_model, save_model

    model_path = save_external(tmp_path)
    want = compute(model_path)
    before = files(tmp_path)
    new = load_model(str(model_path))
    renames = []
    real_replace = os.replace

    def replace(src, dst):
        if os.path.basename(str(src)).startswith(".") and not str(dst).endswith(".tmp"):
            renames.append(dst)
            np.testing.assert_array_equal(compute(model_path), want)  # the pair on disk is whole
            if len(renames) == stop_at:
                raise KeyboardInterrupt
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    if stop_at is None:
        save_model(new, str(model_path), external_data=True, size_threshold=0)
        assert len(renames) >= 2
        np.testing.assert_array_equal(compute(model_path), want)
        assert sorted(os.listdir(tmp_path)) == ["d.onnx", "d.onnx.data"]
        return
    with pytest.raises(KeyboardInterrupt):
        save_model(new, str(model_path), external_data=True, size_threshold=0)
    assert files(tmp_path) == before
    assert sorted(os.listdir(tmp_path)) == ["d.onnx", "d.onnx.data"]


@pytest.mark.serial
def test_an_ignored_sighup_stays_ignored(tmp_path):
    """nohup: SIGHUP ignored by the parent is not turned into an interruption."""
    z.save(matmul_model(), tmp_path / "model.onnx")
    log = tmp_path / "err.txt"
    with open(log, "wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-c", "import signal, sys, runpy; signal.signal(signal.SIGHUP, signal.SIG_IGN); "
             "sys.argv = ['toolkit', 'run', 'model.onnx', '--onnxrt', '--iterations', '200000']; "
             "runpy.run_module('toolkit', run_name='__main__')"],
            cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=err,
        )
    try:
        deadline = time.monotonic() + 120
        while b"Iteration 1 " not in log.read_bytes() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        proc.send_signal(signal.SIGHUP)
        time.sleep(1.0)
        assert proc.poll() is None, log.read_text()[-2000:]
    finally:
        proc.terminate()
    assert proc.wait(timeout=60) == 130


@pytest.mark.serial
def test_a_signal_just_after_the_temp_file_is_made_leaves_no_temp_file(tmp_path):
    """SIGINT landing between the temp file's creation and its name being kept (the moment
    a fault-injection run found) still removes it. (In a fresh interpreter: signal state left
    by other tests in this process must not decide it.)"""
    code = (
        "import os, signal, sys\n"
        "from toolkit.core.files import create\n"
        "from toolkit.core.io.model import write_bytes_atomic\n"
        "real = create.temp_beside\n"
        "def temp_beside(*args, **kwargs):\n"
        "    made = real(*args, **kwargs)\n"
        "    os.kill(os.getpid(), signal.SIGINT)\n"
        "    return made\n"
        "create.temp_beside = temp_beside\n"
        "try:\n"
        "    write_bytes_atomic(sys.argv[1], b'data')\n"
        "except KeyboardInterrupt:\n"
        "    sys.exit(130)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path / "out.bin")], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 130, proc.stderr
    assert os.listdir(tmp_path) == []

"""Hardening matrix: every subcommand against bad paths, bad files and bad option values.

One table, one row per case. Every row checks the same contract:

- the documented exit code;
- no traceback; for an error, exactly one stderr line starting with ``error:``, naming the
  file or value;
- every file in the work folder is byte-identical afterwards (unless the row writes over
  its input with ``-o``, which must then be a complete, valid file);
- no partial output: the folder holds exactly the files it held before plus the row's
  expected outputs — no half-written target, no leftover temporary file.

Most rows run in-process (the ``cli`` fixture); rows marked ``sub`` run the real
``python -m toolkit`` entry point, and permission rows run it as an unprivileged user
(root reads and writes anything, so as root they drop to ``nobody``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from typing import Optional, Tuple

import numpy as np
import onnx
import pytest

import modelzoo as z
from conftest import Result, run_toolkit
from toolkit.core.io import datafiles as d

# ---------------------------------------------------------------------- the work folder


def build_workspace(root: str) -> None:
    """Every input file the rows use, built in code."""
    j = lambda *p: os.path.join(root, *p)  # noqa: E731
    os.makedirs(j("adir"))
    os.makedirs(j("ext"))
    os.makedirs(j("ext_missing"))
    model = z.seed_example((1, 4))
    good = model.SerializeToString()
    z.save(model, j("m.onnx"))
    open(j("empty.onnx"), "wb").close()
    with open(j("text.onnx"), "wb") as f:
        f.write(b"this is a text file, not an ONNX model\n" * 4)
    with open(j("trunc.onnx"), "wb") as f:
        f.write(good[: len(good) // 2])
    corrupt = bytearray(good)
    for i in range(8, 80, 3):
        corrupt[i] ^= 0xFF
    with open(j("corrupt.onnx"), "wb") as f:
        f.write(bytes(corrupt))
    bad = z.seed_example((1, 4))
    bad.graph.node[0].input[1] = "nonexistent"  # fails onnx.checker: an input nobody produces
    z.save(bad, j("checker.onnx"))
    cyc = z.chain(3)
    cyc.graph.node[0].input[0] = "t1"  # n0 reads n1's output: a cycle
    z.save(cyc, j("cycle.onnx"))
    dup = z.chain(3)
    dup.graph.node[2].output[0] = "t0"  # two nodes define t0
    z.save(dup, j("duplicate.onnx"))
    badtype = z.seed_example((1, 4))
    badtype.graph.initializer[0].data_type = 40  # no such element type
    z.save(badtype, j("badtype.onnx"))
    huge = z.chain(2)
    huge.graph.input[0].type.tensor_type.shape.dim[1].dim_value = 2**62
    z.save(huge, j("huge.onnx"))
    z.save(z.with_if(), j("if.onnx"))
    z.save_with_external_data(z.seed_example((1, 4)), j("ext", "ext.onnx"), "ext.bin")
    shutil.copy(j("ext", "ext.onnx"), j("ext_missing", "ext.onnx"))  # ... without ext.bin

    x = np.ones((1, 4), np.float32)
    d.save_inputs(j("in.json"), [{"x0": x, "x1": x}])
    d.save_inputs(j("in.npz"), [{"x0": x, "x1": x}])
    d.save_outputs(j("out.json"), d.RunResults([("golden", [d.IterationResult({"Y": x * 2.5}, 0.0, "golden")])]))
    d.save_inputs(j("wrong_names.json"), [{"a": x, "b": x}])
    # int64 values float32 cannot hold exactly (a cast that keeps values would be made, with a warning)
    big = np.full(x.shape, 2**31 + 1, np.int64)
    d.save_inputs(j("wrong_dtype.json"), [{"x0": big, "x1": big}])
    d.save_inputs(j("wrong_shape.json"), [{"x0": np.ones((2, 5), np.float32), "x1": np.ones((2, 5), np.float32)}])
    with open(j("notdata.json"), "w") as f:
        f.write('{"hello": [1, 2, 3], "polygraphy_class": "nothing"}\n')
    obj = np.empty(1, dtype=object)
    obj[0] = {"payload": "never unpickle me"}
    np.savez(j("pickled.npz"), x0=obj, x1=obj, allow_pickle=True)
    with open(j("in.npz"), "rb") as f:
        npz = f.read()
    with open(j("trunc.npz"), "wb") as f:
        f.write(npz[: len(npz) // 2])


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("hardening_template"))
    build_workspace(root)
    return root


@pytest.fixture
def ws(template, tmp_path, monkeypatch):
    root = str(tmp_path / "ws")
    shutil.copytree(template, root)
    monkeypatch.chdir(root)
    d.clear_cache()
    return root


def snapshot(root: str) -> dict:
    """{relative path: bytes} for files, {relative path/: None} for folders."""
    snap = {}
    for dirpath, dirnames, filenames in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        for name in dirnames:
            snap[os.path.normpath(os.path.join(rel, name)) + "/"] = None
        for name in filenames:
            path = os.path.join(dirpath, name)
            with open(path, "rb") as f:
                snap[os.path.normpath(os.path.join(rel, name))] = f.read()
    return snap


# ---------------------------------------------------------------------- the table


@dataclass
class Row:
    id: str
    args: Tuple[str, ...]
    code: int
    msg: str = ""  # must appear in the `error:` line (or in stderr, for exit 0/1)
    new: Tuple[str, ...] = ()  # files the command must create
    changed: Tuple[str, ...] = ()  # inputs it is asked to replace (-o = input)
    sub: bool = False  # run the real entry point in a subprocess
    perm: bool = False  # needs an unprivileged user (unreadable file / read-only folder)
    stdin: Optional[bytes] = None
    xfail: Optional[str] = None


def R(id, cmd, code, msg="", **kw):
    return Row(id, tuple(cmd.split()), code, msg, **kw)


INSPECT, DATA = "inspect model", "inspect data"
RUN = "run"
EXTRACT, SANITIZE = "surgeon extract", "surgeon sanitize"
TOIN, MERGE = "data to-input", "data merge"
REDUCE = "debug reduce"

# (id suffix, model path, code, message) shared by every command that reads a model
MODEL_FILE_ROWS = [
    ("missing", "nope.onnx", 3, "nope.onnx: no such file"),
    ("directory", "adir", 3, "adir: is a directory"),
    ("empty", "empty.onnx", 3, "empty.onnx: empty file"),
    ("not-onnx", "text.onnx", 3, "text.onnx"),
    ("truncated", "trunc.onnx", 3, "trunc.onnx"),
    ("corrupted", "corrupt.onnx", 3, "corrupt.onnx"),
    ("missing-external-data", "ext_missing/ext.onnx", 3, "ext.bin"),
]
MODEL_CMDS = {
    "inspect": "inspect model {} --mode=full",
    "run": "run {} --onnxrt --save-outputs o.json",
    "extract": "surgeon extract {} -o o.onnx",
    "sanitize": "surgeon sanitize {} -o o.onnx --fold-constants",
    "reduce": "debug reduce {} -o o.onnx --check false",
    "convert": "convert {} --fp-to-fp16 -o o.onnx",
    "precision": "debug precision {} -o o.onnx",
    "llm": "debug llm {} --steps 2",
}
# run reads models through ONNX-Runtime, whose messages differ; the file name is always there
RUN_MSG = {"empty": "empty.onnx", "directory": "adir", "missing": "nope.onnx"}

ROWS = []
for cmd, tmpl in MODEL_CMDS.items():
    for suffix, path, code, msg in MODEL_FILE_ROWS:
        if cmd == "run":
            msg = RUN_MSG.get(suffix, msg)
        ROWS.append(R(f"{cmd}-model-{suffix}", tmpl.format(path), code, msg, sub=(cmd, suffix) == ("run", "not-onnx")))

ROWS += [
    # ------------------------------------------------------------------ debug llm
    R("llm-not-a-decoder", "debug llm m.onnx", 3, "not a decoder with a KV cache"),
    R("llm-compare-unknown-runner", "debug llm m.onnx --compare onnxrt gpu", 2, "gpu"),
    R("llm-bad-prompt-ids", "debug llm m.onnx --prompt-ids 1,x", 2, "--prompt-ids"),
    R("llm-step-inputs-equal-to-model", "debug llm m.onnx --save-step-inputs m.onnx", 2, "m.onnx"),
]
ROWS += [
    # ------------------------------------------------------------------ convert, debug precision
    R("convert-no-conversion-asked", "convert m.onnx -o o.onnx", 2, "--fp-to-fp16"),
    R("convert-keep-fp32-unknown", "convert m.onnx --fp-to-fp16 --keep-fp32 nope -o o.onnx", 3, "nope"),
    R("convert-output-equal-to-input", "convert m.onnx --fp-to-fp16 -o m.onnx", 2, "m.onnx"),
    R("convert-output-missing-folder", "convert m.onnx --fp-to-fp16 -o nodir/o.onnx", 3, "does not exist"),
    R("convert-json-to-stdout-model", "convert m.onnx --fp-to-fp16 -o - --json", 2, "--json"),
    R("convert-ok", "convert m.onnx --fp-to-fp16 --keep-fp32 Mul -o o.onnx", 0, new=("o.onnx",)),
    R("precision-compare-one-spec", "debug precision m.onnx --compare onnxrt", 2, "two runner specs"),
    R("precision-compare-unknown-runner", "debug precision m.onnx --compare onnxrt gpu:fp16", 2, "gpu"),
    R("precision-compare-unknown-option", "debug precision m.onnx --compare onnxrt onnxrt:fp8", 2, "fp8"),
    R("precision-candidate-not-reduced", "debug precision m.onnx --compare onnxrt onnxrt", 2, "reduced precision"),
    R("precision-keep-fp32-unknown", "debug precision m.onnx --keep-fp32 nope", 3, "nope"),
    R("precision-bad-mode", "debug precision m.onnx --mode fast", 2, "--mode"),
    R("precision-output-equal-to-input", "debug precision m.onnx -o m.onnx", 2, "m.onnx"),
    R("precision-load-inputs-wrong-names", "debug precision m.onnx --load-inputs wrong_names.json", 3, "wrong_names.json"),
    R("precision-replay-not-a-replay", "debug precision m.onnx --load-debug-replay notdata.json", 3, "notdata.json"),
    R("precision-ok-nothing-needed", "debug precision m.onnx -o o.onnx", 0, new=("o.onnx",)),
    # ------------------------------------------------------------------ inspect model
    R("inspect-model-missing-subprocess", f"{INSPECT} nope.onnx", 3, "nope.onnx: no such file", sub=True),
    R("inspect-model-empty-stdin", f"{INSPECT} -", 3, "<stdin>: empty file", stdin=b""),
    R("inspect-model-garbage-stdin", f"{INSPECT} -", 3, "<stdin>", stdin=b"\x00\xff" * 50),
    R("inspect-model-checker-fails-still-shown", f"{INSPECT} checker.onnx --mode=basic", 0),
    R("inspect-model-missing-external-data-structure-only", f"{INSPECT} ext_missing/ext.onnx --mode=basic", 0),
    R("inspect-model-bad-mode", f"{INSPECT} m.onnx --mode=everything", 2, "--mode"),
    R("inspect-model-bad-show", f"{INSPECT} m.onnx --show nodes", 2, "--show"),
    R("inspect-model-unknown-option", f"{INSPECT} m.onnx --bogus", 2, "--bogus", sub=True),
    R("inspect-model-unreadable", f"{INSPECT} unreadable.onnx", 3, "unreadable.onnx: permission denied", perm=True),
    # ------------------------------------------------------------------ inspect data
    R("inspect-data-missing", f"{DATA} nope.json", 3, "nope.json: no such file"),
    R("inspect-data-directory", f"{DATA} adir", 3, "adir: is a directory"),
    R("inspect-data-empty", f"{DATA} empty.onnx", 3, "empty.onnx: empty file"),
    R("inspect-data-onnx-bytes", f"{DATA} m.onnx", 3, "m.onnx: not a JSON or .npz data file"),
    R("inspect-data-json-not-data", f"{DATA} notdata.json", 3, "notdata.json: JSON is not a data file"),
    R("inspect-data-pickled-npz-refused", f"{DATA} pickled.npz", 3, "pickled Python objects"),
    R("inspect-data-truncated-npz", f"{DATA} trunc.npz", 3, "trunc.npz"),
    R("inspect-data-empty-stdin", f"{DATA} -", 3, "<stdin>: empty file", stdin=b""),
    R("inspect-data-unreadable", f"{DATA} unreadable.json", 3, "unreadable.json: permission denied", perm=True),
    # ------------------------------------------------------------------ run
    R("run-model-checker-fails", f"{RUN} checker.onnx --onnxrt", 3, "checker.onnx"),
    R(
        "run-model-input-dims-too-big",
        f"{RUN} huge.onnx --onnxrt",
        3,
        "'x'",
    ),
    R("run-input-shapes-malformed", f"{RUN} m.onnx --onnxrt --input-shapes x0:[1,4", 2, "x0:[1,4"),
    R("run-input-shapes-with-dtype", f"{RUN} m.onnx --onnxrt --input-shapes x0:[1,4]:float32", 2, "x0:[1,4]:float32"),
    R("run-input-shapes-unknown-name", f"{RUN} m.onnx --onnxrt --input-shapes nope:[1,4]", 3, "'nope'"),
    R("run-val-range-malformed", f"{RUN} m.onnx --onnxrt --val-range [a,b]", 2, "--val-range"),
    R("run-val-range-reversed", f"{RUN} m.onnx --onnxrt --val-range [2,1]", 2, "--val-range"),
    R("run-val-range-unknown-name", f"{RUN} m.onnx --onnxrt --val-range nope:[0,1]", 3, "'nope'"),
    R("run-atol-not-a-number", f"{RUN} m.onnx --onnxrt --atol abc", 2, "--atol"),
    R("run-atol-negative", f"{RUN} m.onnx --onnxrt --atol -1", 2, "--atol"),
    R("run-rtol-per-output-malformed", f"{RUN} m.onnx --onnxrt --rtol Y:x", 2, "--rtol"),
    R("run-atol-nan", f"{RUN} m.onnx --onnxrt --atol nan", 2, "--atol"),
    R("run-error-stat-unknown", f"{RUN} m.onnx --onnxrt --check-error-stat p99", 2, "--check-error-stat"),
    R("run-seed-not-int", f"{RUN} m.onnx --onnxrt --seed x", 2, "--seed", sub=True),
    R("run-iterations-negative", f"{RUN} m.onnx --onnxrt --iterations -1", 2, "--iterations"),
    R("run-onnx-outputs-unknown-name", f"{RUN} m.onnx --onnxrt --onnx-outputs nope", 3, "'nope'"),
    R("run-onnx-outputs-bad-glob", f"{RUN} m.onnx --onnxrt --onnx-outputs [", 3, "'['"),
    R(
        "run-ort-optimization-unknown",
        f"{RUN} m.onnx --onnxrt --ort-optimization fastest",
        2,
        "fastest",
    ),
    R("run-provider-missing", f"{RUN} m.onnx --onnxrt --providers nosuchprovider", 4, "nosuchprovider"),
    R("run-nothing-to-run", f"{RUN} m.onnx", 2, "nothing to run"),
    R("run-load-inputs-wrong-names", f"{RUN} m.onnx --onnxrt --load-inputs wrong_names.json --save-outputs o.json", 3, "wrong_names.json"),
    R("run-load-inputs-wrong-dtype", f"{RUN} m.onnx --onnxrt --load-inputs wrong_dtype.json --save-outputs o.json", 3, "int64"),
    R("run-load-inputs-wrong-shape", f"{RUN} m.onnx --onnxrt --load-inputs wrong_shape.json --save-outputs o.json", 3, "(2, 5)"),
    R("run-load-inputs-json-not-data", f"{RUN} m.onnx --onnxrt --load-inputs notdata.json", 3, "notdata.json"),
    R("run-load-inputs-pickled-npz-refused", f"{RUN} m.onnx --onnxrt --load-inputs pickled.npz", 3, "pickled Python objects"),
    R("run-load-inputs-onnx-bytes", f"{RUN} m.onnx --onnxrt --load-inputs m.onnx", 3, "m.onnx"),
    R("run-load-inputs-missing", f"{RUN} m.onnx --onnxrt --load-inputs nope.json", 3, "nope.json"),
    R("run-load-inputs-directory", f"{RUN} m.onnx --onnxrt --load-inputs adir", 3, "adir: is a directory"),
    R("run-load-inputs-empty", f"{RUN} m.onnx --onnxrt --load-inputs empty.onnx", 3, "empty.onnx: empty file"),
    R("run-load-inputs-truncated-npz", f"{RUN} m.onnx --onnxrt --load-inputs trunc.npz", 3, "trunc.npz"),
    R("run-load-inputs-unreadable", f"{RUN} m.onnx --onnxrt --load-inputs unreadable.json", 3, "permission denied", perm=True),
    R("run-load-outputs-json-not-data", f"{RUN} m.onnx --onnxrt --load-outputs notdata.json", 3, "notdata.json"),
    R("run-load-outputs-no-common-name", f"{RUN} m.onnx --onnxrt --load-outputs wrong_names.json", 3, "no output name in common"),
    R("run-load-outputs-pickled-npz-refused", f"{RUN} m.onnx --load-outputs pickled.npz in.json", 3, "pickled Python objects"),
    R("run-save-outputs-missing-folder", f"{RUN} m.onnx --onnxrt --save-outputs nodir/o.json", 3, "does not exist"),
    R("run-save-inputs-missing-folder", f"{RUN} m.onnx --onnxrt --save-inputs nodir/i.json", 3, "does not exist"),
    R("run-save-outputs-is-directory", f"{RUN} m.onnx --onnxrt --save-outputs adir", 3, "is a directory"),
    R("run-save-outputs-read-only-folder", f"{RUN} m.onnx --onnxrt --save-outputs ro/o.json", 3, "not writable", perm=True),
    R("run-model-unreadable", f"{RUN} unreadable.onnx --onnxrt", 3, "unreadable.onnx", perm=True),
    R("run-ok-writes-outputs", f"{RUN} m.onnx --onnxrt --save-outputs o.json --save-inputs i.npz", 0, new=("o.json", "i.npz")),
    R(
        "run-save-outputs-equal-to-model",
        f"{RUN} m.onnx --onnxrt --save-outputs m.onnx",
        2,
        "m.onnx",
    ),
    R(
        "run-save-inputs-equal-to-load-inputs",
        f"{RUN} m.onnx --onnxrt --load-inputs in.npz --save-inputs in.npz",
        2,
        "in.npz",
    ),
    # ------------------------------------------------------------------ surgeon extract
    R("extract-checker-fails-dangling", f"{EXTRACT} checker.onnx -o o.onnx", 3, "nonexistent"),
    R("extract-cycle", f"{EXTRACT} cycle.onnx -o o.onnx", 3, "cycle"),
    R("extract-duplicate-tensor", f"{EXTRACT} duplicate.onnx -o o.onnx", 3, "'t0' is defined twice"),
    R("extract-invalid-data-type", f"{EXTRACT} badtype.onnx -o o.onnx", 3, "invalid data type"),
    R("extract-fallback-input-too-big", f"{EXTRACT} huge.onnx -o o.onnx --force-fallback-shape-inference", 3, "GiB"),
    R("extract-output-is-initializer-of-a-body", f"{EXTRACT} if.onnx -o o.onnx --outputs outer_b", 0, new=("o.onnx",)),
    R("extract-unknown-input-name", f"{EXTRACT} m.onnx -o o.onnx --inputs nope:auto:auto", 3, "'nope'"),
    R("extract-unknown-output-name", f"{EXTRACT} m.onnx -o o.onnx --outputs nope", 3, "'nope'"),
    R("extract-input-shape-malformed", f"{EXTRACT} m.onnx -o o.onnx --inputs x0:[1,4:float32", 2, "x0:[1,4:float32"),
    R("extract-input-dtype-unknown", f"{EXTRACT} m.onnx -o o.onnx --inputs x0:[1,4]:float99", 2, "float99"),
    R("extract-output-dtype-unknown", f"{EXTRACT} m.onnx -o o.onnx --outputs Y:float99", 2, "float99"),
    R("extract-output-with-shape", f"{EXTRACT} m.onnx -o o.onnx --outputs Y:[1,4]", 2, "Y:[1,4]"),
    R("extract-model-input-shapes-malformed", f"{EXTRACT} m.onnx -o o.onnx --model-input-shapes x0:[a", 2, "x0:[a"),
    R("extract-size-threshold-malformed", f"{EXTRACT} m.onnx -o o.onnx --external-data-size-threshold lots", 2, "lots"),
    R("extract-external-path-absolute", f"{EXTRACT} m.onnx -o o.onnx --external-data-path /abs/w.bin", 2, "/abs/w.bin"),
    R("extract-output-missing-folder", f"{EXTRACT} m.onnx -o nodir/o.onnx", 3, "does not exist"),
    R("extract-output-is-directory", f"{EXTRACT} m.onnx -o adir", 3, "is a directory"),
    R("extract-output-read-only-folder", f"{EXTRACT} m.onnx -o ro/o.onnx", 3, "not writable", perm=True),
    R("extract-model-unreadable", f"{EXTRACT} unreadable.onnx -o o.onnx", 3, "permission denied", perm=True),
    R("extract-missing-option", f"{EXTRACT} m.onnx", 2, "'-o'"),
    R("extract-output-equal-to-input", f"{EXTRACT} m.onnx -o m.onnx --outputs add_out", 0, changed=("m.onnx",)),
    R("extract-ok", f"{EXTRACT} m.onnx -o o.onnx --inputs x0:auto:auto mul_out:auto:auto --outputs Y", 0, new=("o.onnx",)),
    # ------------------------------------------------------------------ surgeon sanitize
    R("sanitize-checker-fails-is-rewritten", f"{SANITIZE} checker.onnx -o o.onnx --cleanup", 0, new=("o.onnx",)),
    R("sanitize-cycle", f"{SANITIZE} cycle.onnx -o o.onnx --toposort", 3, "cycle"),
    R("sanitize-duplicate-tensor", f"{SANITIZE} duplicate.onnx -o o.onnx --fold-constants", 3, "'t0' is defined twice"),
    R("sanitize-invalid-data-type", f"{SANITIZE} badtype.onnx -o o.onnx --cleanup", 3, "invalid data type"),
    R("sanitize-override-shapes-unknown-name", f"{SANITIZE} m.onnx -o o.onnx --override-input-shapes nope:[1,4]", 3, "'nope' is not a tensor of the model; its inputs: x0, x1"),
    R("sanitize-override-shapes-malformed", f"{SANITIZE} m.onnx -o o.onnx --override-input-shapes x0:[1,a", 2, "x0:[1,a"),
    R("sanitize-fold-threshold-malformed", f"{SANITIZE} m.onnx -o o.onnx --fold-size-threshold huge", 2, "huge"),
    R("sanitize-partitioning-unknown", f"{SANITIZE} m.onnx -o o.onnx --partitioning smart", 2, "--partitioning"),
    R("sanitize-num-passes-zero", f"{SANITIZE} m.onnx -o o.onnx --num-passes 0", 2, "--num-passes"),
    R("sanitize-num-passes-not-int", f"{SANITIZE} m.onnx -o o.onnx --num-passes two", 2, "--num-passes"),
    R("sanitize-output-missing-folder", f"{SANITIZE} m.onnx -o nodir/o.onnx", 3, "does not exist"),
    R("sanitize-output-is-directory", f"{SANITIZE} m.onnx -o adir", 3, "is a directory"),
    R("sanitize-output-read-only-folder", f"{SANITIZE} m.onnx -o ro/o.onnx --fold-constants", 3, "not writable", perm=True),
    R("sanitize-model-unreadable", f"{SANITIZE} unreadable.onnx -o o.onnx", 3, "permission denied", perm=True),
    R("sanitize-output-equal-to-input", f"{SANITIZE} m.onnx -o m.onnx --fold-constants --toposort", 0, changed=("m.onnx",), sub=True),
    R(
        "sanitize-external-data-in-place",
        f"{SANITIZE} ext/ext.onnx -o ext/ext.onnx --fold-constants --external-data-path ext.bin --external-data-size-threshold 0",
        0,
        changed=("ext/ext.onnx", "ext/ext.bin"),
    ),
    R(
        "sanitize-external-data-over-the-inputs-weights",
        f"{SANITIZE} ext/ext.onnx -o ext/other.onnx --external-data-path ext.bin",
        2,
        "ext.bin",
    ),
    R(
        "extract-external-data-over-the-inputs-weights",
        f"{EXTRACT} ext/ext.onnx -o ext/other.onnx --save-external-data --external-data-path ext.bin",
        2,
        "ext.bin",
    ),
    # ------------------------------------------------------------------ data to-input / merge
    R("to-input-missing", f"{TOIN} in.json nope.json -o o.json", 3, "nope.json: no such file"),
    R("to-input-directory", f"{TOIN} adir -o o.json", 3, "adir: is a directory"),
    R("to-input-empty", f"{TOIN} empty.onnx -o o.json", 3, "empty.onnx: empty file"),
    R("to-input-onnx-bytes", f"{TOIN} m.onnx -o o.json", 3, "m.onnx: not a JSON or .npz data file"),
    R("to-input-json-not-data", f"{TOIN} in.json notdata.json -o o.json", 3, "notdata.json: JSON is not a data file"),
    R("to-input-pickled-npz-refused", f"{TOIN} pickled.npz -o o.npz", 3, "pickled Python objects", sub=True),
    R("to-input-truncated-npz", f"{TOIN} trunc.npz -o o.json", 3, "trunc.npz"),
    R("to-input-stdin-twice", f"{TOIN} - - -o o.json", 2, "stdin", stdin=b"[]"),
    R("to-input-output-missing-folder", f"{TOIN} in.json -o nodir/o.json", 3, "does not exist"),
    R("to-input-output-is-directory", f"{TOIN} in.json -o adir", 3, "is a directory"),
    R("to-input-output-read-only-folder", f"{TOIN} in.json -o ro/o.json", 3, "not writable", perm=True),
    R("to-input-unreadable", f"{TOIN} unreadable.json -o o.json", 3, "permission denied", perm=True),
    R("to-input-output-equal-to-input", f"{TOIN} in.npz out.json -o in.npz", 2, "would overwrite FILE in.npz"),
    R("merge-json-not-data", f"{MERGE} notdata.json -o o.json", 3, "notdata.json"),
    R("to-input-ok", f"{TOIN} in.json out.json -o o.npz", 0, new=("o.npz",)),
    # ------------------------------------------------------------------ debug reduce
    R("reduce-checker-fails-still-reduced", f"{REDUCE} checker.onnx -o o.onnx --fail-code 0 --check grep -q onnx_graphsurgeon_node_3 polygraphy_debug.onnx", 0,
      new=("o.onnx", "polygraphy_debug_replay.json")),
    # a check that fails whatever the model blames no node: exit 3, no -o
    R("reduce-check-never-passes", f"{REDUCE} m.onnx -o o.onnx --check false", 3, "does not depend on the model",
      new=("polygraphy_debug_replay.json",)),
    R("reduce-bad-regex", f"{REDUCE} m.onnx -o o.onnx --fail-regex ( --check false", 2, "--fail-regex", sub=True),
    R("reduce-check-command-missing", f"{REDUCE} m.onnx -o o.onnx --check no-such-command-xyz", 4, "no-such-command-xyz"),
    R("reduce-check-empty", f"{REDUCE} m.onnx -o o.onnx --check", 2, "--check"),
    R("reduce-check-timeout-malformed", f"{REDUCE} m.onnx -o o.onnx --check-timeout soon --check false", 2, "--check-timeout"),
    R("reduce-check-timeout-negative", f"{REDUCE} m.onnx -o o.onnx --check-timeout -1 --check false", 2, "--check-timeout"),
    R("reduce-mode-unknown", f"{REDUCE} m.onnx -o o.onnx --mode quick --check false", 2, "quick"),
    R("reduce-model-input-shapes-malformed", f"{REDUCE} m.onnx -o o.onnx --model-input-shapes x0:[1 --check false", 2, "x0:[1"),
    R("reduce-model-input-shapes-unknown-name", f"{REDUCE} m.onnx -o o.onnx --model-input-shapes nope:[1,4] --check false", 3, "'nope'"),
    R("reduce-load-inputs-json-not-data", f"{REDUCE} m.onnx -o o.onnx --load-inputs notdata.json --check false", 3, "notdata.json"),
    R("reduce-load-inputs-pickled-npz-refused", f"{REDUCE} m.onnx -o o.onnx --load-inputs pickled.npz --check false", 3, "pickled Python objects"),
    R("reduce-load-inputs-wrong-names", f"{REDUCE} m.onnx -o o.onnx --load-inputs wrong_names.json --check false", 3, "'a'"),
    R(
        "reduce-load-inputs-wrong-shape",
        f"{REDUCE} m.onnx -o o.onnx --load-inputs wrong_shape.json --check false",
        3,
        "wrong_shape.json",
    ),
    R(
        "reduce-load-inputs-wrong-dtype",  # used with a warning (cast where reduce runs the model)
        f"{REDUCE} m.onnx -o o.onnx --load-inputs wrong_dtype.json --fail-code 0 --check grep -q onnx_graphsurgeon_node_3 polygraphy_debug.onnx",
        0,
        new=("o.onnx", "polygraphy_debug_replay.json"),
    ),
    R("reduce-load-inputs-missing", f"{REDUCE} m.onnx -o o.onnx --load-inputs nope.json --check false", 3, "nope.json"),
    R("reduce-load-replay-not-replay", f"{REDUCE} m.onnx -o o.onnx --load-debug-replay notdata.json --check false", 3, "notdata.json"),
    R("reduce-load-replay-onnx-bytes", f"{REDUCE} m.onnx -o o.onnx --load-debug-replay m.onnx --check false", 3, "m.onnx"),
    R("reduce-load-replay-missing", f"{REDUCE} m.onnx -o o.onnx --load-debug-replay nope.json --check false", 3, "nope.json"),
    R("reduce-save-replay-missing-folder", f"{REDUCE} m.onnx -o o.onnx --save-debug-replay nodir/r.json --check false", 3, "does not exist"),
    R("reduce-min-good-missing-folder", f"{REDUCE} m.onnx -o o.onnx --min-good nodir/g.onnx --check false", 3, "does not exist"),
    R("reduce-iter-artifact-missing-folder", f"{REDUCE} m.onnx -o o.onnx --iter-artifact nodir/a.onnx --check false", 3, "does not exist"),
    R("reduce-output-missing-folder", f"{REDUCE} m.onnx -o nodir/o.onnx --check false", 3, "does not exist"),
    R("reduce-output-is-directory", f"{REDUCE} m.onnx -o adir --check false", 3, "is a directory"),
    R("reduce-output-read-only-folder", f"{REDUCE} m.onnx -o ro/o.onnx --check false", 3, "not writable", perm=True),
    R("reduce-model-unreadable", f"{REDUCE} unreadable.onnx -o o.onnx --check false", 3, "permission denied", perm=True),
    R("reduce-output-equal-to-input", f"{REDUCE} m.onnx -o m.onnx --check false", 2, "-o m.onnx would overwrite MODEL"),
]

_IDS = [r.id for r in ROWS]
assert len(_IDS) == len(set(_IDS)), "duplicate row ids"


def _params():
    for row in ROWS:
        marks = [pytest.mark.xfail(strict=True, reason=row.xfail)] if row.xfail else []
        yield pytest.param(row, id=row.id, marks=marks)


# ---------------------------------------------------------------------- running a row


def _drop_dac_capabilities() -> None:
    """In the child, before exec: drop root's power to ignore file permissions.

    The process stays uid 0 but loses CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH from its
    bounding set, so after exec a 0o000 file is unreadable and a 0o555 folder read-only,
    as for any user (and the interpreter under /root stays reachable).
    """
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    pr_capbset_drop, cap_dac_override, cap_dac_read_search = 24, 1, 2
    for cap in (cap_dac_override, cap_dac_read_search):
        if libc.prctl(pr_capbset_drop, cap, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP) failed")


def _run_unprivileged(args, cwd, stdin=None) -> Result:
    """The real entry point, unable to read 0o000 files or write into 0o555 folders."""
    kw = {}
    if os.geteuid() == 0:
        if not sys.platform.startswith("linux"):
            pytest.skip("running as root: cannot test file permissions here")
        kw["preexec_fn"] = _drop_dac_capabilities
    env = dict(os.environ, COLUMNS="200")
    proc = subprocess.run(
        [sys.executable, "-m", "toolkit", *args], input=stdin, capture_output=True, cwd=cwd, env=env, timeout=120, **kw
    )
    return Result(proc.returncode, proc.stdout.decode(errors="replace"), proc.stderr.decode(errors="replace"))


def _add_locked_files(ws) -> None:
    shutil.copy(os.path.join(ws, "m.onnx"), os.path.join(ws, "unreadable.onnx"))
    shutil.copy(os.path.join(ws, "in.json"), os.path.join(ws, "unreadable.json"))
    os.makedirs(os.path.join(ws, "ro"))


def _lock(ws, locked: bool) -> None:
    os.chmod(os.path.join(ws, "unreadable.onnx"), 0o000 if locked else 0o644)
    os.chmod(os.path.join(ws, "unreadable.json"), 0o000 if locked else 0o644)
    os.chmod(os.path.join(ws, "ro"), 0o555 if locked else 0o755)


def _valid_output(path: str) -> None:
    """A written file must be complete: a model that parses, or a data file that loads."""
    if path.endswith(".onnx"):
        onnx.load(path, load_external_data=False)
    elif path.endswith("_replay.json"):  # debug reduce's verdicts, not a data file
        with open(path) as fh:
            assert json.load(fh)["entries"]
    elif path.endswith((".json", ".npz")):
        d.clear_cache()
        data = d.load_data(path)
        for feed in (data if isinstance(data, list) else [it.outputs for _, its in data.runs for it in its]):
            for name in feed:
                np.asarray(feed[name])
    elif path.endswith(".bin"):
        assert os.path.getsize(path) > 0


def check_contract(row: Row, res: Result, before: dict, after: dict, ws: str) -> None:
    assert res.code == row.code, f"exit {res.code}, expected {row.code}\nstderr:\n{res.err}"
    assert "Traceback" not in res.err and "Traceback" not in res.out, res.err
    assert "this is a bug in toolkit" not in res.err, res.err
    errors = [line for line in res.err.splitlines() if line.startswith("error:")]
    if row.code in (0, 1):
        assert not errors, res.err
    else:
        assert len(errors) == 1, f"expected one 'error:' line:\n{res.err}"
        assert row.msg in errors[0], f"{row.msg!r} not in {errors[0]!r}"
    # inputs untouched (or replaced by a complete file when -o names them)
    for path, data in before.items():
        if path in row.changed:
            assert path in after, f"{path} disappeared"
            _valid_output(os.path.join(ws, path))
        else:
            assert after.get(path, b"<gone>") == data, f"input {path} was modified"
    # no partial outputs, no leftover temp files
    created = set(after) - set(before)
    assert created == set(row.new), f"unexpected files: {sorted(created - set(row.new))}, missing: {sorted(set(row.new) - created)}"
    for path in row.new:
        _valid_output(os.path.join(ws, path))


@pytest.mark.parametrize("row", list(_params()))
def test_matrix(row: Row, ws, cli):
    if row.perm:
        _add_locked_files(ws)
    before = snapshot(ws)
    if row.perm:
        _lock(ws, True)
        try:
            res = _run_unprivileged(row.args, ws, row.stdin)
        finally:
            _lock(ws, False)
    elif row.sub:
        res = run_toolkit(*row.args, stdin=row.stdin, cwd=ws)
    else:
        res = cli(*row.args, stdin=row.stdin)
    after = snapshot(ws)
    check_contract(row, res, before, after, ws)


# ---------------------------------------------------------------------- rows that need a closer look


def test_output_equal_to_input_gives_the_right_model(ws, cli):
    """-o = input for surgeon: the result is the extracted model, written atomically."""
    res = cli("surgeon", "extract", "m.onnx", "-o", "m.onnx", "--outputs", "add_out")
    assert res.code == 0, res.err
    m = onnx.load("m.onnx")
    assert [n.op_type for n in m.graph.node] == ["Mul", "Add"]
    assert [o.name for o in m.graph.output] == ["add_out"]


def test_to_input_over_its_own_input_is_refused(ws, cli):
    before = open("in.npz", "rb").read()
    res = cli("data", "to-input", "in.npz", "out.json", "-o", "in.npz")
    assert res.code == 2, res.err
    assert open("in.npz", "rb").read() == before


def test_sanitize_external_data_in_place_keeps_weights(ws, cli):
    """The weights file is rewritten in place after it was read: the model still runs the same."""
    import onnxruntime as ort

    x = {"x0": np.full((1, 4), 1.0, np.float32), "x1": np.full((1, 4), 3.0, np.float32)}
    ref = ort.InferenceSession("ext/ext.onnx", providers=["CPUExecutionProvider"]).run(None, x)[0]
    res = cli(
        "surgeon", "sanitize", "ext/ext.onnx", "-o", "ext/ext.onnx", "--fold-constants",
        "--external-data-path", "ext.bin", "--external-data-size-threshold", "0",
    )
    assert res.code == 0, res.err
    got = ort.InferenceSession("ext/ext.onnx", providers=["CPUExecutionProvider"]).run(None, x)[0]
    np.testing.assert_allclose(got, ref)


def test_pickled_npz_is_never_unpickled(ws, cli, monkeypatch):
    """Loading a pickled .npz must not call pickle at all (not just fail afterwards)."""
    import pickle

    def boom(*a, **k):
        raise AssertionError("pickle.load called")

    monkeypatch.setattr(pickle, "load", boom)
    monkeypatch.setattr(pickle, "loads", boom)
    for args in (
        ("inspect", "data", "pickled.npz"),
        ("data", "to-input", "pickled.npz", "-o", "o.json"),
        ("run", "m.onnx", "--onnxrt", "--load-inputs", "pickled.npz"),
    ):
        d.clear_cache()
        res = cli(*args)
        assert res.code == 3 and "pickled" in res.err, (args, res.err)


def test_every_subcommand_is_in_the_matrix():
    """A new subcommand must get rows here."""
    from toolkit.cli.app import get_command

    root = get_command()
    commands = []
    for name, cmd in root.commands.items():
        sub = getattr(cmd, "commands", None)
        commands += [f"{name} {s}" for s in sub] if sub else [name]
    covered = {" ".join(r.args[:2]) if r.args[0] not in ("run", "convert") else r.args[0] for r in ROWS}
    missing = [c for c in commands if c not in covered]
    assert not missing, f"subcommands without hardening rows: {missing}"


def test_a_name_that_is_not_utf8_is_called_a_corrupt_file_not_a_bug(tmp_path, cli):
    """Protobuf hands a name holding invalid UTF-8 back as bytes; whatever trips on it, the
    user hears that the file is corrupt (exit 3), never 'a bug in toolkit'."""
    from onnx import helper

    nodes = [helper.make_node("Relu", ["QQQ"], ["y"], name="relu")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("QQQ", onnx.TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 4])])
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    path = tmp_path / "bad.onnx"
    path.write_bytes(data.replace(b"QQQ", b"\xf8\xf8\xf8"))
    res = cli("surgeon", "sanitize", path, "-o", tmp_path / "o.onnx", "--fold-constants",
              "--override-input-shapes", "x:[2,4]")
    assert res.code == 3, res.err
    assert "bad.onnx: a tensor name in graph 'g' is not valid UTF-8 text; the file is corrupt" in res.err
    assert "bug in toolkit" not in res.err and res.err.count("error:") == 1
    assert not (tmp_path / "o.onnx").exists()

"""Property-based tests: mutated models and data files through `run`, `surgeon` and `data`.

tests/guarantees/test_fuzz.py covers `inspect`. Here every example is a valid model or data file,
mutated either byte by byte (flips, cuts, inserts) or structurally (op types, tensor
names, dims, dtypes, initializers, opsets changed through the protobuf), then fed to a
command. The property, whatever the mutation: no uncaught exception, ever —

- the exit code is one the command documents;
- no traceback and no "this is a bug in toolkit" message (the error boundary's word for an
  exception nobody turned into a clear error); an error is one `error:` line;
- the input file is byte-identical afterwards; an output exists only after success, and
  then it loads.

Each example runs in a forked child of the test process (imports already done, ~20 ms),
so a crash inside ONNX-Runtime is reported as a failure instead of killing pytest.
``TOOLKIT_FUZZ_EXAMPLES=500`` runs a longer campaign (default 25 per property).
"""

from __future__ import annotations

import io
import os
import signal
import sys
import tempfile
import time
import traceback

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto

import modelzoo as z
from conftest import Result
from test_fuzz import mutate, ops as byte_ops
from toolkit.core.io import datafiles as d

EXAMPLES = int(os.environ.get("TOOLKIT_FUZZ_EXAMPLES", "25"))
SETTINGS = settings(
    max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")

# Heavy imports happen once here, so each forked example starts warm.
import onnxruntime  # noqa: E402,F401

import toolkit.cli.app  # noqa: E402,F401
import toolkit.surgeon.extract  # noqa: E402,F401
import toolkit.surgeon.optimize  # noqa: E402,F401
import toolkit.surgeon.sanitize  # noqa: E402,F401


# ---------------------------------------------------------------------- running a command


def run_forked(args, cwd, timeout: float = 60.0) -> Result:
    """``toolkit ARGS`` in a forked child (in ``cwd``); a signal death is code -SIGNUM."""
    out = tempfile.TemporaryFile()
    err = tempfile.TemporaryFile()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # child: never return into pytest
        code = 98
        try:
            import faulthandler

            faulthandler.disable()  # pytest's handler would print the child's crash on our stderr
            os.chdir(cwd)
            os.dup2(out.fileno(), 1)
            os.dup2(err.fileno(), 2)
            fd = os.open(os.devnull, os.O_RDONLY)
            os.dup2(fd, 0)
            sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), write_through=True)
            sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), write_through=True)
            sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False))
            os.environ["COLUMNS"] = "200"
            d.clear_cache()
            from toolkit.cli.app import main

            code = main([str(a) for a in args])
            sys.stdout.flush()
            sys.stderr.flush()
        except BaseException:  # noqa: BLE001 - report anything that escaped main()
            try:
                sys.stderr.write("escaped main():\n" + traceback.format_exc())
                sys.stderr.flush()
            finally:
                code = 99
        os._exit(code if isinstance(code, int) else 97)
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail(f"toolkit {' '.join(map(str, args))} hung for {timeout} s")
        time.sleep(0.002)
    code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
    out.seek(0)
    err.seek(0)
    return Result(code, out.read().decode(errors="replace"), err.read().decode(errors="replace"))


def assert_clean(res: Result, allowed, what: str = "") -> None:
    ctx = f"{what}\nexit {res.code}\nstderr:\n{res.err[-3000:]}"
    assert res.code >= 0, f"killed by signal {-res.code}: {ctx}"
    assert res.code in allowed, ctx
    assert "Traceback" not in res.err and "escaped main()" not in res.err, ctx
    assert "this is a bug in toolkit" not in res.err, ctx
    errors = [line for line in res.err.splitlines() if line.startswith("error:")]
    if res.code == 0:
        assert not errors, ctx
    elif res.code == 1:  # run: a failed inference shows the backend's error, then FAILED
        assert len(errors) <= 1, ctx
    else:
        assert len(errors) == 1, ctx


def assert_output(res: Result, path: str) -> None:
    """An output exists only after success, and is then complete."""
    if res.code != 0:
        assert not os.path.exists(path), f"partial output left after exit {res.code}"
        return
    assert os.path.exists(path), "exit 0 without the output"
    if path.endswith(".onnx"):
        onnx.load(path)  # with its external data, if it has any: the file must be whole
    else:
        d.clear_cache()
        d.load_data(path)


def no_temp_files(folder: str) -> None:
    left = [n for n in os.listdir(folder) if n.endswith(".tmp")]
    assert not left, f"temporary files left: {left}"


# ---------------------------------------------------------------------- structural mutations

MODELS = {
    "seed": z.seed_example((1, 4)),
    "branch": z.branch(),
    "constant": z.with_constant(),
    "if": z.with_if(),
    "dynamic": z.dynamic_batch(),
}
MODEL_BYTES = {k: m.SerializeToString() for k, m in MODELS.items()}

OP_TYPES = ["Relu", "Add", "Mul", "Conv", "Reshape", "Gather", "Concat", "If", "Constant", "NoSuchOp", ""]
NAMES = ["", "ghost", "x", "y", "Y", "r", "a", "t", "x0"]
ELEM_TYPES = [0, 1, 2, 6, 7, 8, 9, 10, 11, 16, 17, 23, 40]
DIMS = [0, 1, 2, 4, -1, -7, 2**31, 2**62, None, "batch", ""]
# `run` refuses to generate huge inputs (test_hardening: run-model-input-dims-too-big); the
# fuzzer keeps to small dims so a run never allocates much in a loop.
SMALL_DIMS = [0, 1, 2, 4, -1, -7, None, "batch", ""]


def _tensor_names(graph):
    names = [i.name for i in graph.input] + [t.name for t in graph.initializer]
    for n in graph.node:
        names += list(n.output)
    return names


def _pick(seq, i):
    return seq[i % len(seq)] if len(seq) else None


def _set_dim(vi, k, value):
    tt = vi.type.tensor_type
    if not tt.HasField("shape") or not tt.shape.dim:
        tt.shape.dim.add()
    dim = tt.shape.dim[k % len(tt.shape.dim)]
    if value is None:
        dim.Clear()
    elif isinstance(value, str):
        dim.dim_param = value
    else:
        dim.dim_value = value


def apply_structural(model, edits, dims=DIMS):
    """Apply (kind, a, b) edits to a copy of ``model``; every edit is something a broken
    exporter or a hand-edited file could produce. Returns the mutated bytes."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    for kind, a, b in edits:
        nodes = g.node
        if kind == "op_type" and nodes:
            _pick(nodes, a).op_type = _pick(OP_TYPES, b)
        elif kind == "drop_node" and nodes:
            del nodes[a % len(nodes)]
        elif kind == "node_input" and nodes:
            n = _pick(nodes, a)
            pool = _tensor_names(g) + NAMES
            if n.input:
                n.input[b % len(n.input)] = _pick(pool, b // 7)
            else:
                n.input.append(_pick(pool, b))
        elif kind == "node_output" and nodes:
            n = _pick(nodes, a)
            if n.output:
                n.output[b % len(n.output)] = _pick(_tensor_names(g) + NAMES, b // 5)
        elif kind == "extra_input" and nodes:
            _pick(nodes, a).input.append(_pick(_tensor_names(g) + NAMES, b))
        elif kind == "attr" and nodes:
            n = _pick(nodes, a)
            choice = b % 4
            if choice == 0:
                n.attribute.append(onnx.helper.make_attribute("axis", b % 9 - 4))
            elif choice == 1:
                n.attribute.append(onnx.helper.make_attribute("bogus", "text"))
            elif choice == 2 and n.attribute:
                del n.attribute[b % len(n.attribute)]
            else:
                n.attribute.append(onnx.helper.make_attribute("perm", [b % 3, 5, -1]))
        elif kind == "domain" and nodes:
            _pick(nodes, a).domain = ["com.unknown", "ai.onnx.ml", "com.microsoft"][b % 3]
        elif kind == "io_dim":
            vis = list(g.input) + list(g.output)
            if vis:
                _set_dim(_pick(vis, a), b, _pick(dims, b // 3))
        elif kind == "io_dtype":
            vis = list(g.input) + list(g.output)
            if vis:
                _pick(vis, a).type.tensor_type.elem_type = _pick(ELEM_TYPES, b)
        elif kind == "io_no_type":
            vis = list(g.input) + list(g.output)
            if vis:
                _pick(vis, a).ClearField("type")
        elif kind == "drop_output" and g.output:
            del g.output[a % len(g.output)]
        elif kind == "dup_output" and g.output:
            g.output.append(_pick(g.output, a))
        elif kind == "output_name" and g.output:
            _pick(g.output, a).name = _pick(_tensor_names(g) + NAMES, b)
        elif kind == "drop_input" and g.input:
            del g.input[a % len(g.input)]
        elif kind == "input_name" and g.input:
            _pick(g.input, a).name = _pick(NAMES + _tensor_names(g), b)
        elif kind == "drop_init" and g.initializer:
            del g.initializer[a % len(g.initializer)]
        elif kind == "init_dims" and g.initializer:
            t = _pick(g.initializer, a)
            del t.dims[:]
            t.dims.extend([b % 5, (b // 5) % 3 + 1][: 1 + b % 2])
        elif kind == "init_dtype" and g.initializer:
            _pick(g.initializer, a).data_type = _pick(ELEM_TYPES, b)
        elif kind == "init_data" and g.initializer:
            t = _pick(g.initializer, a)
            try:
                raw = t.raw_data or onnx.numpy_helper.to_array(t).tobytes()
            except Exception:  # noqa: BLE001 - an earlier edit already broke it
                raw = b""
            t.ClearField("float_data")
            t.raw_data = raw[: b % (len(raw) + 1)]
        elif kind == "init_external":
            if g.initializer:
                t = _pick(g.initializer, a)
                t.data_location = TensorProto.EXTERNAL
                del t.external_data[:]
                entry = t.external_data.add()
                entry.key, entry.value = "location", ["nothere.bin", "../escape.bin", "/etc/passwd", ""][b % 4]
        elif kind == "ir_version":
            m.ir_version = b % 16
        elif kind == "opset" and m.opset_import:
            m.opset_import[0].version = [1, 7, 11, 13, 17, 21, 22, 99, 0][b % 9]
        elif kind == "opset_domain" and m.opset_import:
            m.opset_import[0].domain = ["", "ai.onnx", "com.unknown"][b % 3]
    return m.SerializeToString()


STRUCT_KINDS = [
    "op_type", "drop_node", "node_input", "node_output", "extra_input", "attr", "domain", "io_dim", "io_dtype",
    "io_no_type", "drop_output", "dup_output", "output_name", "drop_input", "input_name", "drop_init", "init_dims",
    "init_dtype", "init_data", "init_external", "ir_version", "opset", "opset_domain",
]
struct_edits = st.lists(
    st.tuples(st.sampled_from(STRUCT_KINDS), st.integers(0, 1000), st.integers(0, 1000)), min_size=1, max_size=4
)


@st.composite
def mutated_models(draw, dims=DIMS):
    """(name, bytes): half structural edits, half raw byte edits (a few of both)."""
    which = draw(st.sampled_from(sorted(MODELS)))
    how = draw(st.sampled_from(["struct", "struct", "bytes", "both"]))
    data = MODEL_BYTES[which]
    if how in ("struct", "both"):
        data = apply_structural(MODELS[which], draw(struct_edits), dims)
    if how in ("bytes", "both"):
        data = mutate(data, draw(byte_ops))
    return which, data


def _workdir(tmp_path) -> str:
    folder = tempfile.mkdtemp(dir=str(tmp_path))
    return folder


def _write(folder, name, data: bytes) -> str:
    path = os.path.join(folder, name)
    with open(path, "wb") as f:
        f.write(data)
    return path


def _unchanged(path, data: bytes) -> None:
    with open(path, "rb") as f:
        assert f.read() == data, f"input {os.path.basename(path)} was modified"


# ---------------------------------------------------------------------- run


@SETTINGS
@given(model=mutated_models(SMALL_DIMS), extra=st.sampled_from([[], ["--onnx-outputs", "mark", "all"], ["--validate"]]))
def test_run_survives_mutated_models(tmp_path, model, extra):
    which, data = model
    folder = _workdir(tmp_path)
    path = _write(folder, "m.onnx", data)
    shapes = ["--input-shapes", "x:[2,4]"] if which == "dynamic" else []
    res = run_forked(["run", "m.onnx", "--onnxrt", "--save-outputs", "o.json", *shapes, *extra], folder)
    assert_clean(res, {0, 1, 2, 3}, f"run on mutated {which} model")
    _unchanged(path, data)
    out = os.path.join(folder, "o.json")
    if res.code == 0:
        assert_output(res, out)
    else:
        # exit 1 (inference failed or a check failed) may still have saved the outputs it got
        if os.path.exists(out):
            d.clear_cache()
            d.load_data(out)
    no_temp_files(folder)


def _data_files():
    x = np.arange(8, dtype=np.float32).reshape(2, 4) / 8
    feeds = [{"x0": x[:1], "x1": x[1:]}]
    with tempfile.TemporaryDirectory() as tmp:
        d.save_inputs(os.path.join(tmp, "in.json"), feeds)
        d.save_inputs(os.path.join(tmp, "in.npz"), feeds)
        outs = d.RunResults([("golden", [d.IterationResult({"Y": x[:1] * 2}, 0.0, "golden")])])
        d.save_outputs(os.path.join(tmp, "out.json"), outs)
        d.save_outputs(os.path.join(tmp, "out.npz"), outs)
        files = {}
        for name in ("in.json", "in.npz", "out.json", "out.npz"):
            with open(os.path.join(tmp, name), "rb") as f:
                files[name] = f.read()
    return files


DATA_FILES = _data_files()


@SETTINGS
@given(name=st.sampled_from(sorted(DATA_FILES)), edits=byte_ops, as_outputs=st.booleans())
def test_run_survives_mutated_data_files(tmp_path, name, edits, as_outputs):
    folder = _workdir(tmp_path)
    z.save(MODELS["seed"], os.path.join(folder, "m.onnx"))
    data = mutate(DATA_FILES[name], edits)
    path = _write(folder, name, data)
    opt = "--load-outputs" if as_outputs else "--load-inputs"
    res = run_forked(["run", "m.onnx", "--onnxrt", opt, name], folder)
    assert_clean(res, {0, 1, 3}, f"run {opt} mutated {name}")
    _unchanged(path, data)


# ---------------------------------------------------------------------- surgeon


def _cut_options(which, data, k):
    """Valid-looking cut options for the original model (names may be gone after mutation)."""
    names = [n for n in _tensor_names(MODELS[which].graph) if n]
    outs = [o.name for o in MODELS[which].graph.output]
    choice = k % 4
    if choice == 0:
        return []
    if choice == 1:
        return ["--outputs", _pick(names, k)]
    if choice == 2:
        return ["--inputs", f"{_pick(names, k)}:auto:auto", "--outputs", *outs]
    return ["--force-fallback-shape-inference", "--outputs", _pick(names, k // 4)]


@SETTINGS
@given(model=mutated_models(), k=st.integers(0, 1000))
def test_extract_survives_mutated_models(tmp_path, model, k):
    which, data = model
    folder = _workdir(tmp_path)
    path = _write(folder, "m.onnx", data)
    shapes = ["--model-input-shapes", "x:[2,4]"] if which == "dynamic" and k % 2 else []
    res = run_forked(["surgeon", "extract", "m.onnx", "-o", "o.onnx", *_cut_options(which, data, k), *shapes], folder)
    assert_clean(res, {0, 2, 3}, f"extract on mutated {which} model")
    _unchanged(path, data)
    assert_output(res, os.path.join(folder, "o.onnx"))
    no_temp_files(folder)


SANITIZE_OPTIONS = [
    ["--fold-constants"],
    ["--fold-constants", "--cleanup", "--toposort"],
    ["--cleanup"],
    ["--toposort"],
    ["--fold-constants", "--partitioning", "recursive"],
    ["--fold-constants", "--num-passes", "1", "--no-fold-shapes"],
    ["--fold-constants", "--optimize"],
]


@SETTINGS
@given(model=mutated_models(), opts=st.sampled_from(SANITIZE_OPTIONS), override=st.booleans(), in_place=st.booleans())
def test_sanitize_survives_mutated_models(tmp_path, model, opts, override, in_place):
    which, data = model
    folder = _workdir(tmp_path)
    path = _write(folder, "m.onnx", data)
    extra = []
    if override:
        extra = ["--override-input-shapes", "x:[2,4]" if which in ("dynamic", "branch", "constant", "if") else "x0:[1,4]"]
    out = "m.onnx" if in_place else "o.onnx"
    res = run_forked(["surgeon", "sanitize", "m.onnx", "-o", out, *opts, *extra], folder)
    assert_clean(res, {0, 2, 3}, f"sanitize {opts + extra} on mutated {which} model")
    if in_place and res.code == 0:
        onnx.load(path, load_external_data=False)  # replaced by a complete model
    else:
        _unchanged(path, data)
    if not in_place:
        assert_output(res, os.path.join(folder, "o.onnx"))
    no_temp_files(folder)


@SETTINGS
@given(
    which=st.sampled_from(sorted(MODELS)),
    edits=struct_edits,
    data_edits=st.one_of(st.just([]), byte_ops),
    cmd=st.sampled_from(["extract", "sanitize"]),
    save_external=st.booleans(),
    k=st.integers(0, 1000),
)
def test_surgeon_survives_mutated_external_data_models(tmp_path, monkeypatch, which, edits, data_edits, cmd, save_external, k):
    """Models whose every weight is in an external file (and the file itself mutated now
    and then); with lazy loading forced for all of them, so that weights are copied from
    the file when the result is saved."""
    import toolkit.surgeon.load as surgery_load

    monkeypatch.setattr(surgery_load, "EAGER_EXTERNAL_BYTES", 0)
    folder = _workdir(tmp_path)
    m = onnx.ModelProto()
    m.ParseFromString(apply_structural(MODELS[which], edits))
    try:
        onnx.save_model(m, os.path.join(folder, "m.onnx"), save_as_external_data=True,
                        all_tensors_to_one_file=True, location="w.bin", size_threshold=0)
    except Exception:  # noqa: BLE001 - an edit onnx itself cannot save that way
        return
    wpath = os.path.join(folder, "w.bin")
    if os.path.exists(wpath) and data_edits:
        with open(wpath, "rb") as f:
            data = f.read()
        _write(folder, "w.bin", mutate(data, data_edits))
    before = {n: open(os.path.join(folder, n), "rb").read() for n in os.listdir(folder)}
    extra = ["--save-external-data"] if save_external else []
    if cmd == "extract":
        args = ["surgeon", "extract", "m.onnx", "-o", "o.onnx", *_cut_options(which, b"", k), *extra]
    else:
        args = ["surgeon", "sanitize", "m.onnx", "-o", "o.onnx", *SANITIZE_OPTIONS[k % len(SANITIZE_OPTIONS)], *extra]
    res = run_forked(args, folder)
    assert_clean(res, {0, 2, 3}, f"{cmd} on mutated {which} model with external data")
    for name, data in before.items():
        _unchanged(os.path.join(folder, name), data)
    assert_output(res, os.path.join(folder, "o.onnx"))
    if res.code != 0:
        assert not os.path.exists(os.path.join(folder, "o.onnx.data"))
    no_temp_files(folder)


# ---------------------------------------------------------------------- data to-input


@SETTINGS
@given(
    names=st.lists(st.sampled_from(sorted(DATA_FILES)), min_size=1, max_size=3, unique=True),
    edits=byte_ops,
    victim=st.integers(0, 2),
    out=st.sampled_from(["o.json", "o.npz"]),
)
def test_to_input_survives_mutated_data_files(tmp_path, names, edits, victim, out):
    folder = _workdir(tmp_path)
    contents = {}
    for i, name in enumerate(names):
        data = DATA_FILES[name]
        if i == victim % len(names):
            data = mutate(data, edits)
        contents[name] = data
        _write(folder, name, data)
    res = run_forked(["data", "to-input", *names, "-o", out], folder)
    assert_clean(res, {0, 3}, f"to-input {names} (mutated {names[victim % len(names)]})")
    for name, data in contents.items():
        _unchanged(os.path.join(folder, name), data)
    assert_output(res, os.path.join(folder, out))
    no_temp_files(folder)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda children: st.lists(children, max_size=3)
    | st.dictionaries(
        st.sampled_from(["array", "polygraphy_class", "lst", "outputs", "values", "runtime", "x", "runner_name"]),
        children | st.sampled_from(["ndarray", "RunResults", "IterationResult", "LazyArray", "k05TlVNUFk="]),
        max_size=4,
    ),
    max_leaves=12,
)


@SETTINGS
@given(obj=json_values)
def test_to_input_rejects_arbitrary_json_cleanly(tmp_path, obj):
    import json

    folder = _workdir(tmp_path)
    _write(folder, "any.json", json.dumps(obj).encode())
    res = run_forked(["data", "to-input", "any.json", "-o", "o.npz"], folder)
    assert_clean(res, {0, 3}, f"to-input of {obj!r}")
    assert_output(res, os.path.join(folder, "o.npz"))


def test_forked_runner_reports_crashes(tmp_path, monkeypatch):
    """The harness itself: exit codes come back, and a child killed by a signal is reported."""
    res = run_forked(["inspect", "model", "-"], str(tmp_path))
    assert res.code == 3 and "empty" in res.err
    import toolkit.cli.app as app

    monkeypatch.setattr(app, "main", lambda argv: os.kill(os.getpid(), signal.SIGSEGV))
    assert run_forked(["inspect", "model", "-"], str(tmp_path)).code == -signal.SIGSEGV

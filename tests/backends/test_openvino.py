"""The OpenVINO runner (``run --openvino``, runner spec ``openvino:...``), ONNX-Runtime providers as a
runner spec option (``onnxrt:providers=...``), reduce and diagnosis across backends, and the Model
Explorer node data of ``--save-report``. Skipped when openvino is not installed (the missing-extra
test hides it instead)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import REPO, modules_loaded_by
from toolkit.core.compare.tolerances import Tolerances

HAS_OPENVINO = True
try:
    import openvino  # noqa: F401
except ImportError:  # pragma: no cover - CI installs the [openvino] extra
    HAS_OPENVINO = False

needs_openvino = pytest.mark.skipif(not HAS_OPENVINO, reason="openvino is not installed (the [openvino] extra)")


def _save(nodes, inits, inputs, outputs, path):
    graph = helper.make_graph(nodes, "g", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    onnx.save(model, str(path))
    return str(path)


def planted_model(path, pre: int = 6, post: int = 3) -> str:
    """x -> Mul x pre -> Add 1e4 -> MatMul 'cancel' (columns +1/-1: the 1e4 cancels) -> Tanh x post.

    In bfloat16 (8 bits of mantissa) the MatMul's inputs near 1e4 are rounded to multiples of 64,
    so its differences of values in [0, 10] are lost: the node fails in bf16 and only it."""
    nodes, inits, prev = [], [], "x"
    for i in range(pre):
        inits.append(numpy_helper.from_array(np.full((1, 8), 0.9 + 0.01 * i, np.float32), f"w{i}"))
        nodes.append(helper.make_node("Mul", [prev, f"w{i}"], [f"m{i}"], name=f"mul{i}"))
        prev = f"m{i}"
    inits.append(numpy_helper.from_array(np.array(1e4, np.float32), "big"))
    nodes.append(helper.make_node("Add", [prev, "big"], ["shifted"], name="add_big"))
    w = np.zeros((8, 4), np.float32)
    for j in range(4):
        w[2 * j, j], w[2 * j + 1, j] = 1, -1
    inits.append(numpy_helper.from_array(w, "W"))
    nodes.append(helper.make_node("MatMul", ["shifted", "W"], ["diff"], name="cancel"))
    prev = "diff"
    for i in range(post):
        nodes.append(helper.make_node("Tanh", [prev], [f"t{i}"], name=f"tanh{i}"))
        prev = f"t{i}"
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])
    y = helper.make_tensor_value_info(prev, TensorProto.FLOAT, [1, 4])
    return _save(nodes, inits, [x], [y], path)


def two_output_model(path) -> str:
    """x[?,16] -> MatMul -> 'good' = Relu(...), 'bad' = the planted cancellation (fails in bf16)."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.standard_normal((16, 16)).astype(np.float32) * 0.25, "W1"),
        numpy_helper.from_array(np.array(1e4, np.float32), "big"),
    ]
    w = np.zeros((16, 8), np.float32)
    for j in range(8):
        w[2 * j, j], w[2 * j + 1, j] = 1, -1
    inits.append(numpy_helper.from_array(w, "W2"))
    nodes = [
        helper.make_node("Relu", ["x"], ["good"], name="relu"),
        helper.make_node("MatMul", ["x", "W1"], ["h"], name="mm"),
        helper.make_node("Add", ["h", "big"], ["shifted"], name="add_big"),
        helper.make_node("MatMul", ["shifted", "W2"], ["bad"], name="cancel"),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 16])
    outs = [
        helper.make_tensor_value_info("good", TensorProto.FLOAT, None),
        helper.make_tensor_value_info("bad", TensorProto.FLOAT, None),
    ]
    return _save(nodes, inits, [x], outs, path)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("ov")
    return {"planted": planted_model(d / "planted.onnx"), "two": two_output_model(d / "two.onnx"), "dir": d}


# ----------------------------------------------------------------------------- the runner


@needs_openvino
def test_run_names_the_inference_precision_and_f32_matches_onnxrt(cli, models):
    res = cli("run", models["two"], "--onnxrt", "--openvino", "--openvino-precision", "f32",
              "--input-shapes", "x:[3,16]", "--val-range", "[0,10]", "--atol", "1e-4", "--rtol", "1e-4")
    assert res.code == 0, res.err
    assert "openvino-runner | OpenVINO" in res.err and "inference precision f32 (as asked)" in res.err
    assert "PASSED | onnxrt-runner vs openvino-runner" in res.err


@needs_openvino
def test_bf16_mismatch_is_reported_per_output(cli, models):
    res = cli("run", models["two"], "--onnxrt", "--openvino", "--openvino-precision", "bf16",
              "--input-shapes", "x:[3,16]", "--val-range", "[0,10]", "--atol", "1e-2", "--rtol", "1e-2")
    assert res.code == 1
    assert "inference precision bf16" in res.err
    assert "PASSED | good" in res.err and "FAILED | bad" in res.err
    assert res.err.rstrip().endswith("mismatched: bad")


@needs_openvino
def test_default_precision_is_shown_as_the_devices_choice(cli, models):
    res = cli("run", models["two"], "--openvino", "--input-shapes", "x:[2,16]")
    assert res.code == 0, res.err
    assert "(the device's default)" in res.err


@needs_openvino
def test_spec_runners_side_by_side_save_and_load(cli, models, tmp_path):
    """Two OpenVINO runners by spec, named by their spec in the saved file; loaded inputs feed
    the next run, whose outputs compare with the saved ones."""
    from toolkit.run import RunOptions, execute

    out = tmp_path / "out.json"
    inputs = tmp_path / "in.npz"
    rep = execute(RunOptions(models["two"], runners=["openvino:precision=f32", "onnxrt"], input_shapes=["x:[2,16]"],
                             save_outputs=str(out), save_inputs=str(inputs), tolerances=Tolerances.of(atol=1e-4, rtol=1e-4)))
    assert rep.passed
    from toolkit.core.io.datafiles import load_outputs

    assert [name for name, _ in load_outputs(str(out)).runs] == ["openvino:precision=f32", "onnxrt-runner"]
    res = cli("run", models["two"], "--openvino", "--openvino-precision", "f32", "--load-inputs", inputs,
              "--load-outputs", out, "--atol", "1e-4", "--rtol", "1e-4")
    assert res.code == 0, res.err


@needs_openvino
def test_mark_all_returns_every_tensor(cli, models, tmp_path):
    out = tmp_path / "all.npz"
    res = cli("run", models["planted"], "--openvino", "--openvino-outputs", "mark", "all", "--save-outputs", out)
    assert res.code == 0, res.err
    from toolkit.core.io.datafiles import load_outputs

    names = set(load_outputs(str(out)).runs[0][1][0].outputs)
    want = {o for n in onnx.load(models["planted"]).graph.node for o in n.output}
    assert names == want


def test_the_kind_declares_its_options_in_its_module():
    """OpenVINO's options live in toolkit/backends/openvino.py and are registered with the kind:
    the run options hold them per kind, specs and "mark all" reach them, the CLI shows them."""
    from toolkit.backends.openvino import OpenvinoOptions
    from toolkit.core.declare import declarations
    from toolkit.run.options import RunOptions
    from toolkit.run.registry import get_kind, mark_all_outputs
    from toolkit.run.specs import parse_runner_spec

    kind = get_kind("openvino")
    assert kind.declares is OpenvinoOptions and kind.panel == "OpenVINO"
    assert not any(d.runner == "openvino" for _f, d in declarations(RunOptions))  # nothing in run/options.py
    assert RunOptions("m.onnx").of("openvino") == OpenvinoOptions()
    marked = mark_all_outputs(RunOptions("m.onnx"))
    assert marked.of("openvino").outputs == ["mark", "all"] and marked.onnx_outputs == ["mark", "all"]
    opts = parse_runner_spec("openvino:precision=f32,device=cpu").apply(RunOptions("m.onnx"))
    assert (opts.of("openvino").precision, opts.of("openvino").device) == ("f32", "cpu")
    assert RunOptions("m.onnx").of("openvino").precision is None  # the default object is not shared


@needs_openvino
def test_spec_options_parse_and_bad_values_are_usage_errors(cli, models):
    from toolkit.run.specs import parse_runner_spec

    spec = parse_runner_spec("openvino:device=CPU,precision=BF16")
    assert spec.options == {"device": "cpu", "precision": "bf16"} and spec.in_process()
    assert not parse_runner_spec("openvino:device=gpu").in_process()
    res = cli("run", models["two"], "--openvino", "--openvino-precision", "f8")
    assert res.code == 2 and "use one of: f32, bf16, f16" in res.err
    res = cli("debug", "reduce", models["planted"], "-o", "x.onnx", "--compare", "onnxrt", "openvino:precision=f8")
    assert res.code == 2 and "precision=VALUE with VALUE one of: f32, bf16, f16" in res.err


@needs_openvino
def test_unavailable_device_is_exit_4(cli, models):
    res = cli("run", models["two"], "--openvino", "--openvino-device", "npu")
    assert res.code == 4
    lines = [line for line in res.err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "OpenVINO device 'NPU' is not available" in lines[0] and "available: CPU" in lines[0]


def test_missing_openvino_is_exit_4_naming_the_extra(tmp_path):
    """openvino hidden (sys.modules entry None): one error line, exit 4, the install command."""
    model = two_output_model(tmp_path / "m.onnx")
    code = (
        "import sys\nsys.modules['openvino'] = None\n"
        "from toolkit.cli.app import main\n"
        f"sys.exit(main(['run', {model!r}, '--openvino']))\n"
    )
    env = dict(os.environ, PYTHONPATH=REPO)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 4
    from toolkit.core.install import extra_install_command

    assert proc.stderr.strip() == f"error: OpenVINO is not installed; install it with: {extra_install_command('openvino')}"
    assert "openvino" in extra_install_command("openvino").split("install", 1)[1]


def test_cli_does_not_import_openvino():
    assert modules_loaded_by("", ["--help"], ("openvino",)) == []
    assert modules_loaded_by("", ["run", "--help"], ("openvino",)) == []


# ----------------------------------------------------------------------------- ONNX-Runtime providers


def test_onnxrt_providers_spec_runs_side_by_side(models):
    from toolkit.run import RunOptions, execute
    from toolkit.run.specs import parse_runner_spec

    spec = parse_runner_spec("onnxrt:providers=cpu")
    assert spec.options == {"providers": "cpu"} and spec.in_process()
    assert not parse_runner_spec("onnxrt:providers=cuda+cpu").in_process()
    rep = execute(RunOptions(models["two"], runners=["onnxrt", "onnxrt:providers=CPUExecutionProvider"],
                             input_shapes=["x:[2,16]"]))
    assert rep.passed and [c.label_b for c in rep.comparisons] == ["onnxrt:providers=CPUExecutionProvider"]


def test_missing_provider_is_exit_4_naming_the_available_ones(cli, models):
    import onnxruntime

    if "CUDAExecutionProvider" in onnxruntime.get_available_providers():  # pragma: no cover
        pytest.skip("this installation has CUDA")
    res = cli("debug", "reduce", models["planted"], "-o", "x.onnx", "--compare", "onnxrt", "onnxrt:providers=cuda")
    assert res.code == 4, res.err
    lines = [line for line in res.err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "'cuda' is not available" in lines[0] and "CPUExecutionProvider" in lines[0]


def test_provider_spec_needs_a_value(cli, models):
    res = cli("run", models["two"], "--onnxrt", "--providers", "cpu")
    assert res.code == 0
    from toolkit.core.errors import UsageError
    from toolkit.run.specs import parse_runner_spec

    with pytest.raises(UsageError, match="providers=VALUE"):
        parse_runner_spec("onnxrt:providers")


# ----------------------------------------------------------------------------- reduce and diagnosis


def _reduce(cli, model, test, tmp_path, name):
    out = tmp_path / f"{name}.onnx"
    res = cli("debug", "reduce", model, "-o", out, "--compare", "onnxrt", test, "--val-range", "[0,10]", "--json")
    assert res.code == 0, res.err
    summary = json.loads(res.out)
    return [n.name for n in onnx.load(str(out)).graph.node], summary


@needs_openvino
def test_reduce_across_backends_ends_at_the_planted_node_in_as_many_checks(cli, models, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ov_nodes, ov = _reduce(cli, models["planted"], "openvino:precision=bf16", tmp_path, "ov")
    ort_nodes, ort = _reduce(cli, models["planted"], "onnxrt:bf16", tmp_path, "ort")
    assert ov_nodes == ort_nodes == ["cancel"]
    assert ov["checks"] == ort["checks"]


@needs_openvino
def test_diagnosis_of_an_openvino_run_ranks_the_planted_node_first(cli, models, tmp_path):
    """OpenVINO's own bf16 default: the diagnosis judges its rounding as bf16's, so the
    planted node leads the ranking (not the first node fed exact inputs)."""
    report = tmp_path / "r.json"
    res = cli("run", models["planted"], "--onnxrt", "--openvino", "--onnx-outputs", "mark", "all",
              "--openvino-outputs", "mark", "all", "--val-range", "[0,10]", "--save-report", report)
    assert res.code == 1
    comp = json.loads(report.read_text())["comparisons"][0]
    assert comp["ranked_nodes"][0]["node"] == "cancel"
    assert "1. cancel [Op: MatMul]" in res.err


# ----------------------------------------------------------------------------- Model Explorer node data


def test_model_explorer_node_data_names_every_compared_node(cli, models, tmp_path):
    path = tmp_path / "errors.model-explorer.json"
    res = cli("run", models["planted"], "--onnxrt", "--onnxrt", "--onnx-outputs", "mark", "all",
              "--val-range", "[0,10]", "--bf16", "--save-report", path)
    assert res.code == 1
    data = json.loads(path.read_text())
    assert set(data) == {"results", "gradient"}
    graph = onnx.load(models["planted"]).graph
    assert set(data["results"]) == {n.name for n in graph.node} | {f"[value] {o.name}" for o in graph.output}
    assert all(set(v) == {"value"} and 0 <= v["value"] <= 2 for v in data["results"].values())
    assert data["results"]["cancel"]["value"] > 0.5 > data["results"]["mul0"]["value"]
    stops = [g["stop"] for g in data["gradient"]]
    assert stops[0] == 0 and stops[-1] == 1 and all("bgColor" in g for g in data["gradient"])


@needs_openvino
def test_debug_precision_with_an_openvino_candidate(cli, models, tmp_path):
    """`openvino:precision=bf16` is a reduced-precision candidate: the mixed bf16 model runs on
    OpenVINO in f32 (the reference `openvino` too), and the nodes to keep match the emulation's."""
    found = {}
    for ref, cand in (("openvino", "openvino:precision=bf16"), ("onnxrt", "onnxrt:bf16")):
        out = tmp_path / f"{cand.replace(':', '_')}.onnx"
        res = cli("debug", "precision", models["planted"], "-o", out, "--compare", ref, cand, "--val-range", "[0,10]",
                  "--json")
        assert res.code == 0, res.err
        found[cand] = sorted(json.loads(res.out)["keep_fp32"])
    assert found["openvino:precision=bf16"] == found["onnxrt:bf16"] and "cancel" in found["onnxrt:bf16"]


def _ort_providers():
    import onnxruntime

    return onnxruntime.get_available_providers()


@pytest.mark.skipif("OpenVINOExecutionProvider" not in _ort_providers(),
                    reason="this onnxruntime has no OpenVINO execution provider (the onnxruntime-openvino wheel)")
def test_onnxrt_openvino_provider_side_by_side_and_in_reduce(cli, models, tmp_path, monkeypatch):
    """ONNX-Runtime's OpenVINO execution provider is a runner spec option like any provider."""
    from toolkit.run import RunOptions, execute

    rep = execute(RunOptions(models["two"], runners=["onnxrt", "onnxrt:providers=openvino"], input_shapes=["x:[2,16]"],
                             tolerances=Tolerances.of(atol=1e-4, rtol=1e-4)))
    assert rep.passed and rep.comparisons[0].label_b == "onnxrt:providers=openvino"
    monkeypatch.chdir(tmp_path)
    res = cli("debug", "reduce", models["planted"], "-o", "r.onnx", "--compare", "onnxrt", "onnxrt:providers=openvino",
              "--val-range", "[0,10]", "--atol", "1e-4", "--rtol", "1e-4")
    assert res.code == 0 and "checking each subgraph on onnxrt:providers=openvino" in res.err


@needs_openvino
def test_run_runners_option_takes_specs_side_by_side(cli, models):
    res = cli("run", models["planted"], "--onnxrt", "--runners", "onnxrt:providers=cpu", "openvino:precision=f32",
              "openvino:precision=bf16", "--val-range", "[0,10]")
    assert res.code == 1
    for label in ("onnxrt-runner vs onnxrt:providers=cpu", "onnxrt:providers=cpu vs openvino:precision=f32"):
        assert f"PASSED | {label}" in res.err
    assert "FAILED | openvino:precision=f32 vs openvino:precision=bf16" in res.err
    res = cli("run", models["planted"], "--runners", "onnxrt:providers=nosuch")
    assert res.code == 4 and "is not available in this installation; available: " in res.err


@needs_openvino
def test_the_precision_openvino_chose_sets_the_amplification_floor(models):
    """A runner that picks a reduced precision itself (OpenVINO's default on bf16 CPUs) has its
    result set say so, and the diagnosis floor of its comparisons is that precision's step."""
    import openvino as ov

    from toolkit.run import RunOptions, execute
    from toolkit.run.diagnose import pair_floor
    from toolkit.run.diagnosis import FLOOR

    opts = RunOptions(models["planted"], runners=["onnxrt", "openvino"], val_range=["[0,10]"])
    rep = execute(opts)
    chosen = ov.Core().get_property("CPU", "INFERENCE_PRECISION_HINT").get_type_name()
    assert rep.results[1].precision == {"bf16": "bf16", "f16": "fp16"}.get(chosen)
    pair = rep.comparisons[0]
    assert pair_floor(opts, pair, {pair.label_b: "bf16"}) == 2.0**-8
    assert pair_floor(opts, pair, {}) == FLOOR
    assert pair_floor(opts, type(pair)("onnxrt-runner", "openvino:precision=bf16", [], [])) == 2.0**-8


@needs_openvino
def test_bad_inputs_are_one_error_line(cli, models, tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_text("garbage\n")
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    for path, text in ((bad, "OpenVINO cannot read the model: Model can't be parsed"),
                       (empty, "empty file, expected an ONNX model")):
        res = cli("run", path, "--openvino")
        assert res.code == 3 and res.err.strip().splitlines()[-1] == f"error: {path}: {text}"
    res = cli("run", models["planted"], "--openvino", "--openvino-outputs", "nosuch")
    assert res.code == 3 and "--openvino-outputs names 'nosuch'" in res.err


@needs_openvino
def test_stdin_and_external_data(models, tmp_path):
    from conftest import run_toolkit

    with open(models["planted"], "rb") as fh:
        res = run_toolkit("run", "-", "--openvino", "--openvino-outputs", "mark", "all", stdin=fh.read())
    assert res.code == 0, res.err
    model = onnx.load(models["planted"])
    ext = tmp_path / "ext" / "m.onnx"
    ext.parent.mkdir()
    onnx.save(model, str(ext), save_as_external_data=True, location="m.data", size_threshold=0)
    res = run_toolkit("run", ext, "--onnxrt", "--openvino", "--openvino-precision", "f32",
                      "--openvino-outputs", "mark", "all", "--onnx-outputs", "mark", "all", cwd=tmp_path)
    assert res.code == 0 and "PASSED | onnxrt-runner vs openvino-runner" in res.err, res.err
    res = run_toolkit("run", ext, "--openvino", "--external-data-dir", tmp_path)
    assert res.code == 2 and "reads external data from the model's own folder" in res.err


# OpenVINO's text when one of its graph passes fails (a QDQ classifier quantized by onnxruntime)
PASS_FAILURE = (
    "Exception from src/inference/src/cpp/core.cpp:117:\nException from src/inference/src/dev/plugin.cpp:54:\n"
    "Exception from src/core/src/pass/graph_rewrite.cpp:298:\n[AddTransformation] END: node: opset1::Add Add@1 "
    "(opset1::Multiply conv_DequantizeLinear[0]:f32[?,2,1,1], opset1::Multiply r_DequantizeLinear[0]:f32[1,2,1,1]) "
    "-> (f32[?,2,1,1]) CALLBACK HAS THROWN: Check 'index < m_inputs.size()' failed at src/core/src/node.cpp:304:\n"
    "index '0' out of range\n\n\n"
)


@needs_openvino
def test_a_failed_compile_names_the_pass_and_the_node(cli, models, monkeypatch):
    import openvino as ov

    def fail(*_a, **_k):
        raise RuntimeError(PASS_FAILURE)

    monkeypatch.setattr(ov.Core, "compile_model", fail)
    res = cli("run", models["two"], "--openvino", "--input-shapes", "x:[3,16]")
    assert res.code == 3 and "Traceback" not in res.err
    line = res.err.strip().splitlines()[-1]
    assert line.startswith("error: ") and "OpenVINO cannot compile the model for CPU: index '0' out of range" in line
    assert "AddTransformation pass, at node Add@1" in line


def _if_rank2_model(path) -> str:
    """y = If(c) then x + 1 else x - 1, the condition of shape [1, 1]: one element, as ONNX asks and
    ONNX-Runtime runs, where OpenVINO's If wants rank 0 or 1 (so do openWakeWord's models)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    one = numpy_helper.from_array(np.ones(2, np.float32), "one")

    def branch(op, out):
        return helper.make_graph([helper.make_node(op, ["x", "one"], [out])], f"b_{op}", [],
                                 [helper.make_tensor_value_info(out, TensorProto.FLOAT, [2])])

    node = helper.make_node("If", ["c"], ["y"], then_branch=branch("Add", "t"), else_branch=branch("Sub", "e"))
    return _save([node], [one], [helper.make_tensor_value_info("c", TensorProto.BOOL, [1, 1]), x],
                 [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])], path)


@needs_openvino
def test_unconvertible_operator_names_openvinos_reason(cli, tmp_path):
    """OpenVINO's own last line (``Conversion is failed for: If-13``) does not say why: the error
    names the operator, the ONNX node and OpenVINO's reason."""
    path = _if_rank2_model(tmp_path / "if.onnx")
    assert cli("run", path, "--onnxrt").code == 0  # (a valid model: ONNX-Runtime runs it)
    res = cli("run", path, "--openvino")
    last = res.err.strip().splitlines()[-1]
    assert res.code == 3 and "Traceback" not in res.err, res.err
    assert last.startswith(f"error: {path}: OpenVINO cannot read the model: its ONNX reader cannot convert If-"), last
    assert "the If node writing 'y'" in last and "Rank of If condition input must be equal to 0 or 1" in last, last


@needs_openvino
def test_int64_scalars_as_onnxruntime_returns_them(tmp_path):
    """ONNX-Runtime returns int64 tensors typed numpy ``longlong`` (dtype char 'q'); fed back as a
    0-d array (what ``debug reduce --compare`` feeds a subgraph from the reference's tensors: a
    YOLOv8 head's ``Gather`` of a shape), OpenVINO's binding refused it ("Unsupported data type:
    int64"), and the reduce took that for the fault: one ``Unsqueeze``."""
    import onnxruntime as ort

    from toolkit.backends.openvino import OpenvinoRunner

    n_in = helper.make_tensor_value_info("n", TensorProto.INT64, [])
    path = _save([helper.make_node("Unsqueeze", ["n", "axes"], ["u"]), helper.make_node("Add", ["u", "u"], ["y"])],
                 [numpy_helper.from_array(np.array([0], np.int64), "axes")], [n_in],
                 [helper.make_tensor_value_info("y", TensorProto.INT64, [1])], tmp_path / "scalar.onnx")
    shape_of = helper.make_graph(
        [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Gather", ["s", "zero"], ["n"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 2])], [n_in],
        [numpy_helper.from_array(np.array(0, np.int64), "zero")])
    shape_model = helper.make_model(shape_of, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    n = ort.InferenceSession(shape_model.SerializeToString()).run(None, {"x": np.zeros((3, 2), np.float32)})[0]
    assert n.shape == () and n.dtype == np.int64  # (typed 'q' by ONNX-Runtime)
    with OpenvinoRunner(path, precision="f32") as runner:
        out = runner.infer({"n": n})
    np.testing.assert_array_equal(out["y"], [6])

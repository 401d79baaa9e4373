"""`run`'s Q/DQ table and `debug precision --qdq-table` are one table: row for row the same
verdict, local SQNR, clipped share and upstream SQNR, with Clips the quantizer folded into its Qs
(Clip(-1, 1), Clip(min only), ReLU6's Clip(0, 6)), at ONNX-Runtime's default optimization level and
with optimizations off."""

import json

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import modelzoo as mz
from toolkit.core.io.datafiles import save_inputs

SHAPE = (4, 16)


def _clips_mlp():
    """x -> MatMul -> Clip(-1, 1) -> MatMul -> Clip(min=0.5) -> MatMul -> Clip(0, 6) -> MatMul -> y."""
    rng = np.random.default_rng(11)
    inits = [numpy_helper.from_array(np.array(v, np.float32), n) for n, v in
             (("m1", -1.0), ("p1", 1.0), ("half", 0.5), ("zero", 0.0), ("six", 6.0))]
    inits += [numpy_helper.from_array((rng.standard_normal((16, 16)) * s).astype(np.float32), f"W{i}")
              for i, s in enumerate((0.8, 0.6, 3.0, 0.5))]
    nodes = [
        helper.make_node("MatMul", ["x", "W0"], ["a0"], name="fc0"),
        helper.make_node("Clip", ["a0", "m1", "p1"], ["c11"], name="clip11"),
        helper.make_node("MatMul", ["c11", "W1"], ["a1"], name="fc1"),
        helper.make_node("Clip", ["a1", "half"], ["cmin"], name="clipmin"),
        helper.make_node("MatMul", ["cmin", "W2"], ["a2"], name="fc2"),
        helper.make_node("Clip", ["a2", "zero", "six"], ["c6"], name="relu6"),
        helper.make_node("MatMul", ["c6", "W3"], ["y"], name="fc3"),
    ]
    graph = helper.make_graph(nodes, "clips", [mz.vi("x", list(SHAPE))], [mz.vi("y", [4, 16])], inits)
    return mz.make_model(graph, opset=17)


class _Reader:
    def __init__(self, data):
        self.data = iter(data)

    def get_next(self):
        return next(self.data, None)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static

    d = tmp_path_factory.mktemp("clips")
    float_path = mz.save(_clips_mlp(), d / "float.onnx")
    rng = np.random.default_rng(2)
    calibration = [{"x": rng.uniform(0, 1, SHAPE).astype(np.float32)} for _ in range(4)]
    qdq_path = str(d / "qdq.onnx")
    quantize_static(float_path, qdq_path, _Reader(calibration), quant_format=QuantFormat.QDQ,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    model = onnx.load(qdq_path)
    assert "Clip" not in {n.op_type for n in model.graph.node}  # (all three folded into the Qs)
    model.ir_version = mz.IR_VERSION
    onnx.save(model, qdq_path)
    inputs = str(d / "in.json")  # wider than the calibration: the input pair clips, error arrives downstream
    save_inputs(inputs, [{"x": rng.uniform(-0.5, 1.5, SHAPE).astype(np.float32)} for _ in range(3)])
    return {"float": float_path, "qdq": qdq_path, "inputs": inputs, "dir": d}


def _precision_rows(files, cli):
    r = cli("debug", "precision", files["qdq"], "--reference-model", files["float"], "--load-inputs", files["inputs"],
            "--atol", "1000", "--held-out", "0", "--qdq-table", "--json")
    assert r.code == 0, r.err
    return {row["pair"]: row for row in json.loads(r.out)["table"]}


@pytest.mark.parametrize("level", ["default", "disable"])
def test_run_and_debug_precision_agree_row_for_row(files, cli, level):
    opt = [] if level == "default" else ["--ort-optimization", "disable"]
    golden, report = str(files["dir"] / f"float_{level}.npz"), str(files["dir"] / f"report_{level}.json")
    r = cli("run", files["float"], "--onnxrt", *opt, "--onnx-outputs", "mark", "all", "--load-inputs", files["inputs"],
            "--save-outputs", golden)
    assert r.code == 0, r.err
    r = cli("run", files["qdq"], "--onnxrt", *opt, "--onnx-outputs", "mark", "all", "--load-inputs", files["inputs"],
            "--load-outputs", golden, "--atol", "1000", "--save-report", report)
    assert r.code == 0, r.err
    run_rows = {row["pair"]: row for row in json.loads(open(report).read())["qdq_pairs"][0]["pairs"]}
    precision_rows = _precision_rows(files, cli)
    assert set(run_rows) == set(precision_rows)
    for pair, row in run_rows.items():
        other = precision_rows[pair]
        assert (row["rank"], row["verdict"], row["clipped"]) == (other["rank"], other["verdict"], other["clipped"]), pair
        for key in ("local_sqnr_db", "upstream_sqnr_db", "after_vs_float_sqnr_db"):
            assert row[key] == pytest.approx(other[key], abs=1e-3), (pair, key)
    by_tensor = {row["tensor"]: row for row in run_rows.values()}
    # Clip(-1, 1) on a grid of about [-1, 1]: the values past it are the float model's clamp, not clipping
    assert by_tensor["c11"]["verdict"] == "rounding" and by_tensor["c11"]["clipped"] == 0
    # Clip(min=0.5) on a grid from 0: the quantized model lets [0, 0.5) through, which the float model clamps
    assert by_tensor["cmin"]["verdict"] == "adds error"


def _pooled_cnn():
    """Conv -> AveragePool -> Conv -> AveragePool -> Conv over 32 channels: at ONNX-Runtime's default
    level the marked quantized model computes other values than with optimizations off (its pools and
    Q/DQ run in other kernels), and values that move cross rounding steps."""
    rng = np.random.default_rng(5)
    inits = [numpy_helper.from_array((rng.standard_normal((32, 32, 3, 3)) * 0.3).astype(np.float32), f"W{i}")
             for i in range(3)]
    nodes = [helper.make_node("Conv", ["x", "W0"], ["a"], pads=[1] * 4, name="c0"),
             helper.make_node("AveragePool", ["a"], ["p"], kernel_shape=[3, 3], pads=[1] * 4, name="pool"),
             helper.make_node("Conv", ["p", "W1"], ["b"], pads=[1] * 4, name="c1"),
             helper.make_node("AveragePool", ["b"], ["p2"], kernel_shape=[3, 3], pads=[1] * 4, name="pool2"),
             helper.make_node("Conv", ["p2", "W2"], ["y"], pads=[1] * 4, name="c2")]
    shape = [1, 32, 16, 16]
    graph = helper.make_graph(nodes, "pooled", [mz.vi("x", shape)], [mz.vi("y", shape)], inits)
    return mz.make_model(graph, opset=17), rng


def test_the_table_is_the_same_at_the_default_optimization_level(tmp_path, cli):
    from onnxruntime.quantization import QuantFormat, quantize_static

    model, rng = _pooled_cnn()
    float_path, qdq_path = mz.save(model, tmp_path / "float.onnx"), str(tmp_path / "qdq.onnx")
    feeds = [{"x": rng.standard_normal((1, 32, 16, 16)).astype(np.float32)} for _ in range(3)]
    quantize_static(float_path, qdq_path, _Reader(feeds[:2]), quant_format=QuantFormat.QDQ)
    inputs, golden, report = str(tmp_path / "in.json"), str(tmp_path / "float.npz"), str(tmp_path / "report.json")
    save_inputs(inputs, feeds[2:])
    r = cli("run", float_path, "--onnxrt", "--onnx-outputs", "mark", "all", "--load-inputs", inputs, "--save-outputs", golden)
    assert r.code == 0, r.err
    r = cli("run", qdq_path, "--onnxrt", "--onnx-outputs", "mark", "all", "--load-inputs", inputs, "--load-outputs", golden,
            "--atol", "1000", "--save-report", report)
    assert r.code == 0, r.err
    run_rows = {row["pair"]: row for row in json.loads(open(report).read())["qdq_pairs"][0]["pairs"]}
    precision_rows = _precision_rows({"qdq": qdq_path, "float": float_path, "inputs": inputs}, cli)
    assert set(run_rows) == set(precision_rows)
    for pair, row in run_rows.items():
        other = precision_rows[pair]
        assert (row["verdict"], row["clipped"], row["local_max"]) == (other["verdict"], other["clipped"], other["local_max"])
        assert row["local_sqnr_db"] == pytest.approx(other["local_sqnr_db"], abs=1e-3), pair


def test_a_failing_marked_run_leaves_the_table_out_and_the_run_goes_on(files, cli, monkeypatch):
    from toolkit.core.errors import InputError
    from toolkit.run import qdq_table

    def refused(*_args, **_kwargs):
        raise InputError("the provider refused the model")

    monkeypatch.setattr(qdq_table, "marked_runner", refused)
    golden = str(files["dir"] / "float_default.npz")
    cli("run", files["float"], "--onnxrt", "--onnx-outputs", "mark", "all", "--load-inputs", files["inputs"],
        "--save-outputs", golden)
    r = cli("run", files["qdq"], "--onnxrt", "--onnx-outputs", "mark", "all", "--load-inputs", files["inputs"],
            "--load-outputs", golden, "--atol", "0")
    assert r.code == 1  # (the comparison's verdict, not an error)
    assert "no Q/DQ table: the model's marked run failed (the provider refused the model)" in r.err
    assert "Q/DQ pairs (" not in r.err


def test_a_comparison_of_graph_outputs_only_makes_no_table(files, cli):
    golden, report = str(files["dir"] / "outputs_only.npz"), str(files["dir"] / "report_outputs_only.json")
    r = cli("run", files["float"], "--onnxrt", "--load-inputs", files["inputs"], "--save-outputs", golden)
    assert r.code == 0, r.err
    r = cli("run", files["qdq"], "--onnxrt", "--load-inputs", files["inputs"], "--load-outputs", golden,
            "--atol", "1000", "--save-report", report)
    assert r.code == 0, r.err
    assert not json.loads(open(report).read()).get("qdq_pairs") and "Q/DQ pairs (" not in r.err

"""`toolkit run`'s table of local versus propagated error per Q/DQ pair (a QDQ model's tensors
against its float model's)."""

import re

import numpy as np
import onnx
import pytest
from onnxruntime.quantization.qdq_loss_debug import compute_signal_to_quantization_noice_ratio as ort_sqnr

import modelzoo as mz
import qdq_models as qm
from toolkit.core.io.datafiles import save_inputs
from toolkit.quant import qdq
from toolkit.quant import stats as qdq_stats
from toolkit.precision.qdq_search import marked_run


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("table")
    float_path = mz.save(qm.transformer(), d / "float.onnx")
    planted = qm.quantize(float_path, str(d / "planted.onnx"), qm.feeds(64, seed=1))
    qm.coarsen(planted, "ctx", 40.0)
    inputs = str(d / "in.json")
    save_inputs(inputs, qm.feeds(4, seed=5))
    return {"float": float_path, "planted": planted, "inputs": inputs, "golden": str(d / "float_all.json")}


def table_rows(err: str):
    return [line for line in err.splitlines() if re.match(r"^\s+\d+ \| ", line)]


def test_run_ranks_the_pair_that_adds_the_error_first(files, cli):
    r = cli("run", files["float"], "--onnxrt", "--onnx-outputs", "mark", "all", "--load-inputs", files["inputs"],
            "--save-outputs", files["golden"])
    assert r.code == 0, r.err
    r = cli("run", files["planted"], "--onnxrt", "--onnx-outputs", "mark", "all", "--load-inputs", files["inputs"],
            "--load-outputs", files["golden"], "--atol", "0.1")
    assert r.code == 1
    rows = table_rows(r.err)
    # every pair, the one on the graph input too (its tensor is the input set's)
    assert {row.split(" | ")[1] for row in rows} == {p.shown for p in qdq.find_pairs(onnx.load(files["planted"]))}
    first = rows[0].split(" | ")
    assert first[1] == "ctx" and first[2] == "ADDS ERROR" and "coarse scale" in rows[0]
    # downstream pairs receive the error (low upstream SQNR) but add none of their own
    residual = next(row for row in rows if row.split(" | ")[1] == "r1")
    assert "| rounding |" in residual
    up = float(re.search(r"upstream SQNR (-?[\d.]+) dB", residual).group(1))
    assert up < 20


def test_local_error_is_qdq_loss_debugs(files):
    model = onnx.load(files["planted"])
    pairs = [p for p in qdq.find_pairs(model) if not p.starts_at_zero]
    feeds = qm.feeds(3, seed=8)
    names = sorted({p.tensor for p in pairs} | {p.outputs[0] for p in pairs})
    outs = marked_run(model, names, feeds, files["planted"], None)
    for p in pairs:
        before, after = [o[p.tensor] for o in outs], [o[p.outputs[0]] for o in outs]
        ours = qdq_stats.pair_stats(p, before, after).local_sqnr
        assert ours == pytest.approx(ort_sqnr(before, after), abs=1e-3), p.tensor


def test_one_step_is_rounding_and_a_coarse_range_is_not():
    pair = qdq.Pair("q", "t", ["t_dq"], ["dq"], np.array(0.1, np.float32), np.array(0, np.int8), -128, 127)
    x = np.linspace(-5, 5, 1001, dtype=np.float32)
    y = np.clip(np.round(x / 0.1), -128, 127) * 0.1
    assert qdq_stats.pair_stats(pair, [x], [y]).rounding_only
    coarse = qdq.Pair("q", "t", ["t_dq"], ["dq"], np.array(2.0, np.float32), np.array(0, np.int8), -128, 127)
    st = qdq_stats.pair_stats(coarse, [x], [np.round(x / 2.0) * 2.0])
    assert not st.rounding_only and st.levels < qdq_stats.COARSE_LEVELS


def test_a_float_model_gets_no_table(files, cli):
    r = cli("run", files["float"], "--onnxrt", "--onnx-outputs", "mark", "all", "--load-inputs", files["inputs"],
            "--load-outputs", files["golden"], "--atol", "0")
    assert "Q/DQ pairs" not in r.err


def test_the_table_goes_into_the_json_report(files, cli, tmp_path):
    import json

    r = cli("run", files["float"], "--onnxrt", "--onnx-outputs", "mark", "all", "--load-inputs", files["inputs"],
            "--save-outputs", files["golden"])
    report = tmp_path / "report.json"
    r = cli("run", files["planted"], "--onnxrt", "--onnx-outputs", "mark", "all", "--load-inputs", files["inputs"],
            "--load-outputs", files["golden"], "--atol", "0.1", "--save-report", report)
    assert r.code == 1
    data = json.loads(report.read_text())
    assert data["comparisons"]  # the diagnosis is still there
    first = data["qdq_pairs"][0]["pairs"][0]
    assert first["tensor"] == "ctx" and first["verdict"] == "adds error" and first["levels"] < 16


@pytest.mark.parametrize("with_float", [True, False])
def test_debug_precision_prints_the_table_against_the_float_model_or_itself_in_float(files, cli, with_float):
    import json

    ref = ["--reference-model", files["float"]] if with_float else []
    r = cli("debug", "precision", files["planted"], *ref, "--load-inputs", files["inputs"], "--atol", "1", "--rtol", "0",
            "--qdq-table", "--json")
    assert r.code == 0, r.err
    table = json.loads(r.out)["table"]
    assert table[0]["tensor"] == "ctx" and table[0]["verdict"] == "adds error"
    rows = {row["tensor"]: row for row in table}
    # the residual only receives the error ctx adds; the folded Relu's pair is compared after its Relu
    assert rows["r1"]["verdict"] == "rounding" and rows["r1"]["upstream_sqnr_db"] < 20
    assert rows["ha"]["verdict"] == "rounding" and rows["ha"]["upstream_sqnr_db"] > 5
    assert len(table_rows(r.err)) == len(table)


def test_run_and_debug_precision_give_one_table_with_folded_clips(tmp_path, cli):
    """ReLU6 (Clip(0, 6)) folded into the Qs: run, which has only the float model's tensors, reads the
    bound from them; debug precision reads it from the float model. Their rows agree."""
    import json

    float_path = mz.save(qm.relu6_mlp(), tmp_path / "r6.onnx")
    q_path = qm.quantize(float_path, str(tmp_path / "r6_qdq.onnx"), qm.mlp_feeds(16))
    assert "Clip" not in {n.op_type for n in onnx.load(q_path).graph.node}
    rng = np.random.default_rng(0)
    inputs = str(tmp_path / "in.json")
    save_inputs(inputs, [{"x": (rng.standard_normal((4, 16)) * 1.5).astype(np.float32)} for _ in range(2)])
    golden, report = str(tmp_path / "golden.json"), str(tmp_path / "report.json")
    cli("run", float_path, "--onnxrt", "--onnx-outputs", "mark", "all", "--load-inputs", inputs, "--save-outputs", golden)
    cli("run", q_path, "--onnxrt", "--onnx-outputs", "mark", "all", "--load-inputs", inputs, "--load-outputs", golden,
        "--atol", "100", "--save-report", report)
    run_rows = {row["tensor"]: row for row in json.loads(open(report).read())["qdq_pairs"][0]["pairs"]}
    r = cli("debug", "precision", q_path, "--reference-model", float_path, "--load-inputs", inputs, "--atol", "100",
            "--qdq-table", "--json")
    precision_rows = {row["tensor"]: row for row in json.loads(r.out)["table"]}
    assert {"c", "d"} <= set(run_rows)
    for tensor, row in run_rows.items():
        other = precision_rows[tensor]
        assert (row["verdict"], row["clipped"]) == (other["verdict"], other["clipped"]), tensor
        assert row["local_sqnr_db"] == pytest.approx(other["local_sqnr_db"], abs=1e-3), tensor
    assert run_rows["c"]["verdict"] == "rounding"  # the values past 6 are the float model's clamp, not clipping


def test_a_folded_clip_is_read_only_where_the_float_tensor_clamps_its_input():
    from toolkit.quant.table import clip_bounds

    ref = np.array([1.0, 3.0, 3.0, 3.0, 2.0], np.float32)  # a MaxPool's output repeats its maximum
    assert clip_bounds(ref, ref.copy()) is None  # (nothing clamped: no bound read)
    assert clip_bounds(ref, np.array([1.0, 4.0, 5.0, 3.5, 2.0], np.float32)) == (None, 3.0)
    assert clip_bounds(ref, np.array([0.5, 4.0, 5.0, 3.5, 2.0], np.float32)) == (1.0, 3.0)
    assert clip_bounds(ref, np.array([0.5, 4.0, 5.0, 2.5, 2.0], np.float32)) is None  # (no one value below)
    assert clip_bounds(np.array([0.5, 0.5, 2.0], np.float32), np.array([-1.0, 0.2, 2.0], np.float32)) == (0.5, None)


def test_a_model_with_external_data_gets_its_table_from_any_folder(files, cli, tmp_path, monkeypatch):
    """The pairs' scales are read from the model's own folder (they crashed the run, or came from
    a file of that name in the current folder)."""
    golden = tmp_path / "float_all.json"
    r = cli("run", files["float"], "--onnxrt", "--onnx-outputs", "mark", "all", "--load-inputs", files["inputs"],
            "--save-outputs", golden)
    assert r.code == 0, r.err
    model = onnx.load(files["planted"])
    onnx.save(model, str(tmp_path / "ext.onnx"), save_as_external_data=True, location="ext.bin", size_threshold=0)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    r = cli("run", tmp_path / "ext.onnx", "--onnxrt", "--onnx-outputs", "mark", "all", "--load-inputs", files["inputs"],
            "--load-outputs", golden, "--atol", "0.1")
    assert r.code == 1, r.err
    rows = table_rows(r.err)
    assert rows and rows[0].split(" | ")[1] == "ctx", r.err

"""Layerwise diagnosis (core) and the JSON/HTML reports, on models with planted faults."""

from __future__ import annotations

import json
import math

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from accuracy_models import all_tensors, conv_net, feed, save_pair
from modelzoo import make_model
from toolkit.core.compare.arrays import PairComparison, compare_iteration
from toolkit.core.compare.tolerances import Tolerances
from toolkit.run.diagnosis import (
    amplification,
    depth_line,
    depth_table,
    diagnose,
    pair_errors,
    sparkline,
    tensor_error,
    text_lines,
    topology_of,
)
from toolkit.run.report import check_report_path, render_html, save_report


def compare_pair(label_a, iters_a, label_b, iters_b, tol):
    its = [compare_iteration(k, a, b, tol) for k, (a, b) in enumerate(zip(iters_a, iters_b))]
    return PairComparison(label_a, label_b, its)


def diagnose_pair(pair, iters_a, iters_b, model):
    return diagnose(pair_errors(pair, iters_a, iters_b), topology_of(model), pair.label_a, pair.label_b)


def _diagnosis(tmp_path, perturb=(3,), layers=8, **kw):
    paths = save_pair(tmp_path, layers=layers, perturb=perturb, **kw)
    x = feed()
    test = all_tensors(paths["faulty"], x)
    ref = all_tensors(paths["clean"], x)
    pair = compare_pair("faulty", [test], "clean", [ref], Tolerances())
    return diagnose_pair(pair, [test], [ref], onnx.load(paths["faulty"])), pair


def test_perturbed_conv_is_ranked_first_and_is_the_first_failure(tmp_path):
    diag, pair = _diagnosis(tmp_path, perturb=(3,))
    assert not pair.passed
    assert diag.first_failure.name == "c3"
    assert diag.first_failure.node == "conv3" and diag.first_failure.op == "Conv"
    top = diag.ranked[0]
    assert top.node == "conv3" and not top.passed
    assert top.input_error == 0.0  # its input is exact
    # error that is only carried on downstream is not amplified much
    assert top.amplification > 1e4
    assert all(s.amplification < top.amplification / 100 for s in diag.ranked[1:])
    assert diag.culprit.node == "conv3"
    # tensors before the fault are exact, the ones after are not
    by_name = {t.name: t for t in diag.tensors}
    assert by_name["r2"].tol_ratio == 0.0 and by_name["r2"].passed
    assert not by_name["r7"].passed


def test_tensors_in_topological_order_with_depth(tmp_path):
    diag, _ = _diagnosis(tmp_path)
    names = [t.name for t in diag.tensors]
    assert names == [f"{p}{i}" for i in range(8) for p in ("c", "r")]
    assert [t.depth for t in diag.tensors][:4] == [1, 2, 3, 4]
    rows = diag.depth
    assert [r.depth for r in rows] == list(range(1, 17))
    first_bad = next(r.depth for r in rows if r.failed)
    assert first_bad == 7  # conv3 is the 7th node in the chain


def _topology(nodes, output: str):
    """The topology of a graph of ``nodes`` from input x[2] to ``output``."""
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info(output, TensorProto.FLOAT, [2])],
    )
    return topology_of(make_model(graph))


def test_unsorted_graph_gets_a_topological_order():
    # nodes listed backwards in the file
    nodes = [
        helper.make_node("Relu", ["b"], ["c"], name="last"),
        helper.make_node("Neg", ["a"], ["b"], name="middle"),
        helper.make_node("Abs", ["x"], ["a"], name="first"),
    ]
    topo = _topology(nodes, "c")
    assert [n.name for n in topo.nodes] == ["first", "middle", "last"]
    assert topo.tensor_order() == ["a", "b", "c"]


def test_small_fault_is_still_ranked_first(tmp_path):
    diag, _ = _diagnosis(tmp_path, perturb=(5,), scale=1e-3)
    assert diag.ranked[0].node == "conv5" and diag.first_failure.node == "conv5"
    assert diag.ranked[0].amplification > 100 * max(s.amplification for s in diag.ranked[1:])


def test_uncompared_tensors_pass_error_through(tmp_path):
    # only the Relu outputs are compared: the error reaching relu4 comes through c4, unseen
    paths = save_pair(tmp_path, perturb=(3,))
    x = feed()
    test = {k: v for k, v in all_tensors(paths["faulty"], x).items() if k.startswith("r")}
    ref = {k: v for k, v in all_tensors(paths["clean"], x).items() if k.startswith("r")}
    pair = compare_pair("a", [test], "b", [ref], Tolerances())
    diag = diagnose_pair(pair, [test], [ref], onnx.load(paths["faulty"]))
    assert diag.ranked[0].node == "relu3"  # the first compared tensor after the fault
    relu4 = next(s for s in diag.ranked if s.node == "relu4")
    assert relu4.input_error > 0


def test_only_the_final_output_compared_names_no_culprit(tmp_path):
    # the fault is in conv3 of 8 blocks; only the last tensor is compared (a run without
    # mark all): the last Relu must not be called the culprit with its input error taken as 0
    paths = save_pair(tmp_path, perturb=(3,))
    x = feed()
    test = {"r7": all_tensors(paths["faulty"], x)["r7"]}
    ref = {"r7": all_tensors(paths["clean"], x)["r7"]}
    pair = compare_pair("a", [test], "b", [ref], Tolerances())
    diag = diagnose_pair(pair, [test], [ref], onnx.load(paths["faulty"]))
    assert not diag.passed and diag.first_failure.name == "r7"
    top = diag.ranked[0]
    assert top.node == "relu7" and top.unseen == 15  # conv0 .. conv7, relu0 .. relu6
    assert diag.culprit is None
    text = "\n".join(text_lines(diag))
    assert "error may start up to 15 node(s) earlier" in text and "--onnx-outputs mark all" in text
    assert "culprit:" not in render_html([diag]) and "estimated: 15 uncompared" in render_html([diag])
    # with every tensor compared, nothing is estimated and the culprit is the fault
    full, _ = _diagnosis(tmp_path, perturb=(3,))
    assert all(s.unseen == 0 for s in full.ranked) and full.culprit.node == "conv3"
    assert not any("not compared" in n for n in full.notes)


def test_nodes_after_uncompared_tensors_rank_last():
    # x -> Cast (not compared, as a converter's Casts) -> conv0 -> relu0 -> conv1 -> y.
    # conv0's input error is estimated 0, so its small rounding error gives a huge ratio;
    # the compared fault (conv1) must still rank first and be the culprit
    from toolkit.run.diagnosis import TensorError

    nodes = [
        helper.make_node("Cast", ["x"], ["x16"], name="cast", to=TensorProto.FLOAT),
        helper.make_node("Relu", ["x16"], ["c0"], name="conv0"),
        helper.make_node("Relu", ["c0"], ["r0"], name="relu0"),
        helper.make_node("Neg", ["r0"], ["y"], name="conv1"),
    ]
    topo = _topology(nodes, "y")

    def err(name, rel, passed):
        return TensorError(name=name, passed=passed, max_abs=rel, max_rel=rel, atol=1e-5, rtol=1e-5, stat="elemwise",
                           rel_l2=rel, tol_ratio=rel / 1e-5)

    errors = {"c0": err("c0", 1e-3, True), "r0": err("r0", 1e-3, True), "y": err("y", 0.5, False)}
    diag = diagnose(errors, topo)
    conv0 = next(s for s in diag.ranked if s.node == "conv0")
    assert conv0.unseen == 1 and conv0.amplification > diag.ranked[0].amplification
    assert diag.ranked[0].node == "conv1" and diag.culprit.node == "conv1"
    assert diag.ranked[-1].node == "conv0"
    # a failing node after uncompared tensors with a larger ratio than any other leaves no culprit
    errors["c0"] = err("c0", 0.9, False)
    assert diagnose(errors, topo).culprit is None


def test_fp16_storage_floors_the_amplification():
    # fp16 emulation rounds even the graph input (compared exact): the first node's output error
    # of about 2**-11 is that rounding, not an amplification of 4000x; a real amplifier stays first
    from toolkit.run.diagnosis import FLOOR, TensorError, storage_floor

    assert storage_floor("onnxrt-runner", "onnxrt:fp16") == 2.0**-11
    assert storage_floor("onnxrt:bf16", "trt:fp16") == 2.0**-8
    assert storage_floor("onnxrt-runner", "onnxrt-runner (from golden.json)") == FLOOR
    assert storage_floor("trt:fp16,int8") == 2.0**-11
    nodes = [
        helper.make_node("Relu", ["x"], ["c0"], name="conv0"),
        helper.make_node("Neg", ["c0"], ["y"], name="conv1"),
    ]
    topo = _topology(nodes, "y")

    def err(name, rel, passed):
        return TensorError(name=name, passed=passed, max_abs=rel, max_rel=rel, atol=1e-3, rtol=1e-3, stat="elemwise",
                           rel_l2=rel, tol_ratio=rel / 1e-3)

    errors = {"c0": err("c0", 3.9e-4, True), "y": err("y", 0.01, False)}
    assert diagnose(errors, topo).ranked[0].node == "conv0"  # float32's floor: 3.3e3x
    diag = diagnose(errors, topo, "onnxrt-runner", "onnxrt:fp16")
    assert diag.ranked[0].node == "conv1" and diag.culprit.node == "conv1"
    assert next(s for s in diag.ranked if s.node == "conv0").amplification == 1.0


def test_the_floor_of_a_run_follows_its_reduced_precision_runners():
    from types import SimpleNamespace

    from toolkit.run.diagnosis import FLOOR
    from toolkit.run.diagnose import pair_floor

    def pair(a, b):
        return SimpleNamespace(label_a=a, label_b=b)

    plain = SimpleNamespace(fp16=False, bf16=False)
    half = SimpleNamespace(fp16=True, bf16=False)
    assert pair_floor(plain, pair("onnxrt-runner", "trt-runner")) == FLOOR
    assert pair_floor(half, pair("onnxrt-runner", "trt-runner")) == 2.0**-11  # run --onnxrt --trt --fp16
    assert pair_floor(plain, pair("onnxrt-runner", "onnxrt:bf16")) == 2.0**-8
    assert pair_floor(half, pair("onnxrt-runner", "onnxrt-runner (from golden.json)")) == FLOOR


def test_tolerance_ratio_matches_the_verdict():
    tol = Tolerances.parse(["1e-3"], ["1e-3"])
    a = np.array([1.0, 2.0, 3.0], np.float32)
    for delta, passed in ((5e-4, True), (5e-2, False)):
        b = a + np.float32(delta)
        pair = compare_pair("a", [{"t": a}], "b", [{"t": b}], tol)
        e = pair_errors(pair, [{"t": a}], [{"t": b}])["t"]
        assert e.passed is passed
        assert (e.tol_ratio <= 1.0) is passed
    # a statistic check uses that statistic
    tol = Tolerances.parse(["1e-3"], ["0"], ["mean"])
    b = a.copy()
    b[0] += 2.4e-3  # mean abs error 8e-4: passes by mean, fails elementwise
    pair = compare_pair("a", [{"t": a}], "b", [{"t": b}], tol)
    e = pair_errors(pair, [{"t": a}], [{"t": b}])["t"]
    assert e.passed and 0.7 < e.tol_ratio < 0.9


def test_nan_and_shape_mismatch_are_infinite_errors():
    from toolkit.core.compare.arrays import compare_arrays

    a = np.array([1.0, np.nan], np.float32)
    b = np.array([1.0, 2.0], np.float32)
    e = tensor_error("t", a, b, compare_arrays("t", a, b, 1e-5, 1e-5))
    assert math.isinf(e.rel_l2) and math.isinf(e.tol_ratio) and not e.passed
    c = np.zeros(3, np.float32)
    e = tensor_error("t", c, b, compare_arrays("t", c, b, 1e-5, 1e-5))
    assert math.isinf(e.tol_ratio) and e.message


def test_amplification_floor_and_infinities():
    assert amplification(0.0, 0.0) == 1.0
    assert amplification(1e-2, 0.0) > 1e4
    assert amplification(1e-2, 1e-2) == 1.0
    assert amplification(math.inf, math.inf) == 1.0
    assert math.isinf(amplification(math.inf, 1e-3))


def test_without_topology_the_order_is_the_comparison_order():
    a = {"p": np.ones(2, np.float32), "q": np.zeros(2, np.float32)}
    b = {"p": np.ones(2, np.float32), "q": np.ones(2, np.float32)}
    pair = compare_pair("a", [a], "b", [b], Tolerances())
    diag = diagnose(pair_errors(pair, [a], [b]), None, "a", "b")
    assert diag.first_failure.name == "q" and not diag.ranked and not diag.topology_known


def test_text_and_sparkline(tmp_path):
    diag, _ = _diagnosis(tmp_path)
    lines = text_lines(diag)
    text = "\n".join(lines)
    assert "First out of tolerance: 'c3'" in text and "conv3 [Op: Conv]" in text
    assert lines[4].strip().startswith("1. conv3 [Op: Conv]")
    line = depth_line(diag)
    assert "out of tolerance from depth 7" in line
    spark = sparkline([0.0, 1e-3, 1.0, 1e3, math.inf])
    assert len(spark) == 5 and spark[0] == "▁" and spark[-1] == "█" and spark[1] < spark[3]
    assert sparkline([1e-3, 1.0], ascii_only=True).isascii()
    # one positive level (0, 98x, 98x): the errors are drawn full height, not as low as the zero
    assert sparkline([0.0, 97.9, 97.9]) == "▁██"
    rows = depth_table(diag, max_rows=5)
    assert len(rows) <= 5 and sum(r.tensors for r in rows) == len(diag.tensors)
    assert rows[0].last_depth is not None


def test_json_report(tmp_path):
    diag, _ = _diagnosis(tmp_path)
    path = tmp_path / "report.json"
    save_report(str(path), [diag], model="faulty.onnx", command="toolkit run ...")
    data = json.loads(path.read_text())
    assert data["format"] == "toolkit-accuracy-report" and data["version"] == 1
    comp = data["comparisons"][0]
    assert comp["first_failure"]["node"] == "conv3"
    assert comp["ranked_nodes"][0]["node"] == "conv3"
    assert [t["name"] for t in comp["tensors"]][:3] == ["c0", "r0", "c1"]
    assert comp["passed"] is False


def test_json_report_writes_infinities_as_strings(tmp_path):
    a = {"t": np.array([np.nan], np.float32), "u": np.ones(1, np.float32), "v": np.ones(1, np.float32)}
    b = {"t": np.array([1.0], np.float32), "u": np.ones(1, np.float32), "v": np.ones(1, np.float32)}
    pair = compare_pair("a", [a], "b", [b], Tolerances())
    diag = diagnose(pair_errors(pair, [a], [b]), None, "a", "b")
    path = tmp_path / "r.json"
    save_report(str(path), [diag])
    text = path.read_text()
    assert "Infinity" not in text and "NaN" not in text
    assert json.loads(text)["comparisons"][0]["first_failure"]["rel_l2"] == "inf"


def test_html_report_is_self_contained(tmp_path):
    diag, _ = _diagnosis(tmp_path)
    page = render_html([diag], model="faulty.onnx", command="toolkit run <x>")
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    for remote in ("http://", "https://", "<script", "src=", "@import", "url("):
        if remote == "http://":
            # the SVG namespace is a name, not a fetch
            assert page.count("http://") == page.count('xmlns="http://www.w3.org/2000/svg"')
            continue
        assert remote not in page
    assert "culprit: conv3 [Conv]" in page
    assert "tolerance</text>" in page
    assert page.count("<circle") == len(diag.tensors)
    assert "toolkit run &lt;x&gt;" in page  # escaped
    # the ranked table starts with the culprit
    table = page[page.index("Nodes ranked by error amplification"):]
    assert table.index("conv3") < table.index("conv0")


def test_report_path_must_be_json_or_html(tmp_path):
    from toolkit.core.errors import InputError, UsageError

    with pytest.raises(UsageError):
        check_report_path(str(tmp_path / "r.txt"))
    with pytest.raises(InputError):
        check_report_path(str(tmp_path / "missing" / "r.json"))
    check_report_path(str(tmp_path / "r.HTML"))


def test_conv_net_is_valid():
    onnx.checker.check_model(conv_net(3, (1,)))


def _browser():
    import shutil

    return next((shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)


@pytest.mark.skipif(_browser() is None, reason="no headless browser (chromium) installed")
def test_html_report_renders_in_a_headless_browser(tmp_path):
    import subprocess

    diag, _ = _diagnosis(tmp_path)
    page = tmp_path / "report.html"
    save_report(str(page), [diag], model="faulty.onnx")
    shot = tmp_path / "shot.png"
    base = [_browser(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1000,800"]
    subprocess.run(base + [f"--screenshot={shot}", page.as_uri()], capture_output=True, timeout=120)
    assert shot.exists() and shot.stat().st_size > 10_000  # a drawn page, not a blank one
    dom = subprocess.run(base + ["--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120).stdout
    assert "<svg" in dom and "culprit: conv3 [Conv]" in dom and dom.count("<circle") == len(diag.tensors)

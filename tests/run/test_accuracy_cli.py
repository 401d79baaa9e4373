"""The accuracy workflow end to end: `run` diagnosis and --save-report, `debug reduce --compare`,
`--all-faults`. Faults are planted in models built here."""

from __future__ import annotations

import json
import os

import onnx
import pytest

from accuracy_models import conv_net, save_pair
from modelzoo import save
from conftest import modules_loaded_by

REPORT_MODULES = ("toolkit.run.diagnosis", "toolkit.run.report", "toolkit.cli.diagnosis")


def _nodes(path):
    return [n.name for n in onnx.load(str(path)).graph.node]


@pytest.fixture
def golden(tmp_path, cli):
    """clean.onnx, faulty.onnx (conv3 perturbed) and golden.npz: every tensor of the clean model."""
    paths = save_pair(tmp_path, layers=8, perturb=(3,))
    res = cli("run", paths["clean"], "--onnxrt", "--seed", "1", "--onnx-outputs", "mark", "all",
              "--save-inputs", tmp_path / "inputs.npz", "--save-outputs", tmp_path / "golden.npz")
    assert res.code == 0, res.err
    paths.update(inputs=str(tmp_path / "inputs.npz"), golden=str(tmp_path / "golden.npz"))
    return paths


# ---------------------------------------------------------------------- run: diagnosis and reports


def test_run_diagnosis_ranks_the_perturbed_conv_first(golden, cli):
    res = cli("run", golden["faulty"], "--onnxrt", "--onnx-outputs", "mark", "all",
              "--load-inputs", golden["inputs"], "--load-outputs", golden["golden"])
    assert res.code == 1
    err = res.err
    assert "Diagnosis |" in err
    assert "First out of tolerance: 'c3'" in err and "produced by node conv3 [Op: Conv]" in err
    ranked = [ln.strip() for ln in err.splitlines() if ln.strip().startswith("1. ")]
    assert ranked and ranked[0].startswith("1. conv3 [Op: Conv]")
    # not a terminal: error by depth as a compact table
    assert "Error by depth" in err
    first_bad = next(ln for ln in err.splitlines() if "out of tolerance" in ln and ln.strip().startswith("depth"))
    assert first_bad.strip().startswith("depth 7")
    # the diagnosis comes before the final line
    assert err.index("Diagnosis |") < err.index("FAILED | Command:")


def test_run_without_failure_or_many_tensors_shows_no_diagnosis(golden, cli):
    res = cli("run", golden["clean"], "--onnxrt", "--onnx-outputs", "mark", "all",
              "--load-inputs", golden["inputs"], "--load-outputs", golden["golden"])
    assert res.code == 0 and "Diagnosis" not in res.err
    res = cli("run", golden["faulty"], "--onnxrt", "--load-inputs", golden["inputs"], "--load-outputs", golden["golden"])
    assert res.code == 1 and "Diagnosis" not in res.err  # one output compared


def test_save_report_json_and_html(golden, cli, tmp_path):
    for name in ("report.json", "report.html"):
        res = cli("run", golden["faulty"], "--onnxrt", "--onnx-outputs", "mark", "all",
                  "--load-inputs", golden["inputs"], "--load-outputs", golden["golden"],
                  "--save-report", tmp_path / name)
        assert res.code == 1, res.err
        assert f"Saved report to {tmp_path / name}" in res.err
    data = json.loads((tmp_path / "report.json").read_text())
    comp = data["comparisons"][0]
    assert data["model"] == golden["faulty"] and "--save-report" in data["command"]
    assert comp["ranked_nodes"][0]["node"] == "conv3" and comp["first_failure"]["name"] == "c3"
    assert len(comp["tensors"]) == 16
    page = (tmp_path / "report.html").read_text()
    assert "culprit: conv3 [Conv]" in page and "<script" not in page


def test_save_report_written_when_the_comparison_passes(golden, cli, tmp_path):
    res = cli("run", golden["clean"], "--onnxrt", "--onnx-outputs", "mark", "all",
              "--load-inputs", golden["inputs"], "--load-outputs", golden["golden"],
              "--save-report", tmp_path / "ok.json")
    assert res.code == 0
    comp = json.loads((tmp_path / "ok.json").read_text())["comparisons"][0]
    assert comp["passed"] is True and comp["first_failure"] is None


def test_save_report_usage_errors(golden, cli, tmp_path):
    res = cli("run", golden["clean"], "--onnxrt", "--save-report", tmp_path / "r.txt")
    assert res.code == 2 and ".json" in res.err and not (tmp_path / "r.txt").exists()
    res = cli("run", golden["clean"], "--onnxrt", "--save-report", tmp_path / "r.json")
    assert res.code == 2 and "compar" in res.err and not (tmp_path / "r.json").exists()
    # a report never overwrites a file the run reads or writes
    golden_json = tmp_path / "golden.json"
    golden_json.write_text("[]")
    res = cli("run", golden["clean"], "--onnxrt", "--load-outputs", golden_json, "--save-report", golden_json)
    assert res.code == 2 and "overwrite" in res.err and golden_json.read_text() == "[]"


def test_report_code_is_not_imported_by_a_plain_run(golden):
    args = ["run", golden["clean"], "--onnxrt", "--load-inputs", golden["inputs"], "--load-outputs", golden["golden"]]
    assert modules_loaded_by("", args, REPORT_MODULES) == []


# ---------------------------------------------------------------------- debug reduce --compare


def test_compare_reduce_ends_at_the_perturbed_conv(golden, cli, tmp_path):
    out = tmp_path / "reduced.onnx"
    res = cli("debug", "reduce", golden["faulty"], "-o", out, "--compare", "onnxrt", "onnxrt",
              "--reference-model", golden["clean"], "--iter-artifact", tmp_path / "artifact.onnx")
    assert res.code == 0, res.err
    assert _nodes(out) == ["conv3"]
    assert "Reduced 16 -> 1 node" in res.err


@pytest.mark.parametrize("fork", ["", "1"])
def test_compare_checks_in_process_or_forked_give_the_same_result(golden, cli, tmp_path, monkeypatch, fork):
    """ONNX-Runtime checks run in the reducing process itself, unless TOOLKIT_FORK_CHECKS=1 (or a
    --check-timeout) asks for the forked worker; verdicts, evidence and result are the same."""
    monkeypatch.setenv("TOOLKIT_FORK_CHECKS", fork)
    out = tmp_path / "reduced.onnx"
    extra = ["--check-timeout", "60"] if fork else []
    res = cli("debug", "reduce", golden["faulty"], "-o", out, "--compare", "onnxrt", "onnxrt", "--mode", "bisect",
              "--reference-model", golden["clean"], "--iter-artifact", tmp_path / "artifact.onnx", "--json", *extra)
    assert res.code == 0, res.err
    summary = json.loads(res.out)
    assert summary["runner"] == ("warm" if fork else "in-process")
    assert ("[warm worker]" if fork else "[in this process]") in res.err
    assert _nodes(out) == ["conv3"]
    assert summary["evidence"]["reduced"]["worst"]["name"] == "c3"
    assert "FAILED" in res.err and "c3" in res.err  # the first failing check's own output is shown


def test_compare_reduce_with_parallel_checks(golden, cli, tmp_path):
    out = tmp_path / "reduced.onnx"
    res = cli("debug", "reduce", golden["faulty"], "-o", out, "--compare", "onnxrt", "onnxrt",
              "--reference-model", golden["clean"], "--iter-artifact", tmp_path / "artifact.onnx", "--jobs", "2")
    assert res.code == 0, res.err
    assert _nodes(out) == ["conv3"]
    assert res.err.count("Computing every tensor") == 1  # one reference for every worker


def test_compare_reduce_without_a_difference_has_nothing_to_reduce(golden, cli, tmp_path):
    res = cli("debug", "reduce", golden["clean"], "-o", tmp_path / "r.onnx", "--compare", "onnxrt",
              "--iter-artifact", tmp_path / "artifact.onnx")
    assert res.code == 0 and not (tmp_path / "r.onnx").exists()
    assert "passes" in res.err


def test_compare_reduce_json_summary(golden, cli, tmp_path):
    out = tmp_path / "reduced.onnx"
    res = cli("debug", "reduce", golden["faulty"], "-o", out, "--compare", "onnxrt", "onnxrt",
              "--reference-model", golden["clean"], "--iter-artifact", tmp_path / "artifact.onnx", "--json")
    assert res.code == 0, res.err
    summary = json.loads(res.out)
    assert summary["nodes_after"] == 1 and summary["artifacts"]["output"] == str(out)
    comp = summary["compare"]
    assert comp["reference"] == "onnxrt" and comp["test"] == "onnxrt" and comp["reference_model"] == golden["clean"]
    assert comp["tensors"] == 17 and comp["iterations"] == 1  # the input and 16 node outputs
    # the same evidence as any comparing reduce
    assert summary["evidence"]["reduced"] is not None
    assert "faults" not in summary


def test_all_faults_finds_both_faults_each_minimal(tmp_path, cli):
    paths = save_pair(tmp_path, layers=10, perturb=(1, 8))
    out = tmp_path / "reduced.onnx"
    res = cli("debug", "reduce", paths["faulty"], "-o", out, "--compare", "onnxrt", "onnxrt",
              "--reference-model", paths["clean"], "--all-faults", "--iter-artifact", tmp_path / "a.onnx")
    assert res.code == 0, res.err
    assert _nodes(tmp_path / "reduced_1.onnx") == ["conv1"]
    assert _nodes(tmp_path / "reduced_2.onnx") == ["conv8"]
    assert not (tmp_path / "reduced_3.onnx").exists() and not out.exists()
    assert "Found 2 faulty subgraphs" in res.err
    lines = [ln.strip() for ln in res.err.splitlines() if ln.strip()[:3] in ("1. ", "2. ")]
    assert lines[0].startswith("1. conv1 [Op: Conv] | max abs") and lines[0].endswith("reduced_1.onnx")
    assert lines[1].startswith("2. conv8 [Op: Conv] | max abs") and lines[1].endswith("reduced_2.onnx")
    for line in lines:
        amp = float(line.split("amplification ")[1].split("x")[0])
        assert amp > 100  # exact inputs, wrong outputs
    res = cli("debug", "reduce", paths["faulty"], "-o", out, "--compare", "onnxrt", "onnxrt",
              "--reference-model", paths["clean"], "--all-faults", "--iter-artifact", tmp_path / "a.onnx", "--json")
    faults = json.loads(res.out)["faults"]
    assert [f["nodes"] for f in faults] == [["conv1"], ["conv8"]]
    for f in faults:
        assert f["max_abs"] > 1e-3 and f["tol_ratio"] > 1 and f["amplification"] > 100
        assert os.path.exists(f["path"])


def test_all_faults_goes_past_subgraphs_that_fail_by_rounding_alone(tmp_path, cli):
    """At a tolerance below fp16 rounding, the first nodes of a chain fail by rounding alone; what
    remains fails by an overflow three nodes on (inf): that is a fault, found, not called rounding."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    consts = [numpy_helper.from_array(np.array(v, np.float32), n) for n, v in (("one", 1.0), ("K", 1000.0), ("D", 1e6))]
    nodes = [helper.make_node("Abs", ["x"], ["ab"], name="abs0"), helper.make_node("Add", ["ab", "one"], ["ab1"], name="add_one"),
             helper.make_node("Mul", ["ab1", "K"], ["k1"], name="mul1"),
             helper.make_node("Mul", ["k1", "K"], ["k2"], name="mul2_overflow"),
             helper.make_node("Div", ["k2", "D"], ["d"], name="div0"), helper.make_node("Relu", ["d"], ["y"], name="relu_out")]
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])], consts)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(tmp_path / "m.onnx"))
    res = cli("debug", "reduce", tmp_path / "m.onnx", "-o", tmp_path / "r.onnx", "--compare", "onnxrt", "onnxrt:fp16",
              "--all-faults", "--iter-artifact", tmp_path / "a.onnx", "--json")
    assert res.code == 0, res.err
    summary = json.loads(res.out)
    found = [f["nodes"] for f in summary["faults"]]
    assert ["mul2_overflow"] in found, res.err
    assert all(w["noise"] for w in summary["noise_windows"]) and ["mul2_overflow"] not in [w["nodes"] for w in summary["noise_windows"]]
    assert "searching the rest of the model" in res.err


def test_compare_reduce_reads_its_inputs_from_stdin_once(golden, cli, tmp_path):
    """--load-inputs - : the reduction and every check read the inputs; stdin is read once, kept."""
    inputs = tmp_path / "in.json"
    assert cli("run", golden["faulty"], "--onnxrt", "--save-inputs", inputs).code == 0
    out = tmp_path / "reduced.onnx"
    res = cli("debug", "reduce", golden["faulty"], "-o", out, "--compare", "onnxrt", "onnxrt", "--reference-model",
              golden["clean"], "--load-inputs", "-", "--iter-artifact", tmp_path / "a.onnx", stdin=inputs.read_bytes())
    assert res.code == 0 and out.exists(), res.err
    res = cli("debug", "reduce", "-", "-o", out, "--load-inputs", "-", "--check", "true", stdin=inputs.read_bytes())
    assert res.code == 2 and "cannot both be read from stdin" in res.err, res.err


def test_compare_usage_errors(golden, cli, tmp_path):
    base = ["debug", "reduce", golden["faulty"], "-o", tmp_path / "r.onnx"]
    res = cli(*base, "--compare", "onnxrt", "nosuch")
    assert res.code == 2 and "onnxrt" in res.err and "trt" in res.err
    res = cli(*base, "--compare", "onnxrt", "--check", "toolkit", "inspect", "model", "x.onnx")
    assert res.code == 2 and "--check" in res.err
    res = cli(*base, "--all-faults", "--check", "toolkit", "inspect", "model", "x.onnx")
    assert res.code == 2 and "--compare" in res.err
    res = cli(*base, "--compare", "a", "b", "c")
    assert res.code == 2
    res = cli(*base, "--compare", "onnxrt", "--check-timeout", "0")
    assert res.code == 2 and "--check-timeout" in res.err
    res = cli(*base, "--compare", "onnxrt", "--reference-model", tmp_path / "missing.onnx")
    assert res.code == 3
    other = conv_net(4, ())
    other.graph.input[0].name = "image"
    for node in other.graph.node:
        node.input[:] = ["image" if i == "x" else i for i in node.input]
    res = cli(*base, "--compare", "onnxrt", "--reference-model", save(other, tmp_path / "renamed.onnx"),
              "--iter-artifact", tmp_path / "a.onnx")
    assert res.code == 3 and "no input named x" in res.err
    assert not (tmp_path / "r.onnx").exists()


def test_compare_against_fp16_emulation_finds_the_overflowing_pow(tmp_path, cli):
    import numpy as np

    from fp16_models import layernorm_overflow, ln_input
    from modelzoo import save

    model = save(layernorm_overflow(), tmp_path / "ln.onnx")
    np.savez(tmp_path / "in.npz", **ln_input())
    res = cli("debug", "reduce", model, "-o", tmp_path / "out.onnx", "--compare", "onnxrt", "onnxrt:fp16",
              "--load-inputs", tmp_path / "in.npz", "--atol", "1e-2", "--rtol", "1e-2", "--all-faults",
              "--iter-artifact", tmp_path / "a.onnx")
    assert res.code == 0, res.err
    found = [_nodes(tmp_path / f"out_{k}.onnx") for k in range(1, 4) if (tmp_path / f"out_{k}.onnx").exists()]
    assert ["square"] in found  # x**2 overflows float16 (inf), fed exact inputs
    assert "Wrote the reduced model" not in res.err


def test_reference_computed_in_a_child_process(golden, tmp_path):
    """Device runners compute the reference in a child (no device context in the forking parent);
    shown here with ONNX-Runtime forced down that path: the values come back through .npz files."""
    from toolkit.core.io.datafiles import load_inputs, load_outputs
    from toolkit.reduce.accuracy import CompareOptions, compute_reference, isolated_reference

    assert isolated_reference("trt:fp16") and not isolated_reference("onnxrt:opt=disable")
    opts = CompareOptions(reference="onnxrt", test="onnxrt", reference_model=golden["clean"], seed=1)
    ref = compute_reference(golden["faulty"], opts, isolate=True)
    try:
        assert not ref.held and ref.outputs_path.endswith(".npz") and os.path.exists(ref.outputs_path)
        assert ref.iterations == 1 and ref.tensors == 17
        values = load_outputs(ref.outputs_path).runs[0][1][0].outputs
        feed = load_inputs(ref.inputs_path)[0]
        assert set(values) >= {"x", "c0", "r7"} and "x" in feed
    finally:
        ref.close()
    assert not os.path.exists(ref.folder)
    bad = CompareOptions(reference="onnxrt", test="onnxrt", reference_model=str(tmp_path / "nope.onnx"))
    with pytest.raises(Exception) as err:
        compute_reference(golden["faulty"], bad, isolate=True)
    assert getattr(err.value, "exit_code", None) == 3


def test_diagnosis_on_a_terminal_draws_a_sparkline(tmp_path, monkeypatch):
    import io

    from rich.console import Console

    from accuracy_models import all_tensors, feed
    from toolkit.cli import diagnosis as render
    from toolkit.core.compare.arrays import PairComparison, compare_iteration
    from toolkit.core.compare.tolerances import Tolerances
    from toolkit.run.diagnosis import diagnose, pair_errors, topology_of

    paths = save_pair(tmp_path, layers=6, perturb=(2,))
    x = feed()
    a, b = all_tensors(paths["faulty"], x), all_tensors(paths["clean"], x)
    pair = PairComparison("a", "b", [compare_iteration(0, a, b, Tolerances())])
    diag = diagnose(pair_errors(pair, [a], [b]), topology_of(onnx.load(paths["faulty"])), "a", "b")
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, width=160)
    monkeypatch.setattr(render, "err_console", lambda: console)
    render.render_diagnosis(diag, rich=True)
    text = buf.getvalue()
    assert "conv2 [Op: Conv]" in text and "\x1b[" in text  # coloured
    assert "error/tolerance by depth" in text and any(ch in text for ch in "▁▂▃▄▅▆▇█")


# ---------------------------------------------------------------------- the guided search


def test_guided_search_ends_at_the_planted_fault_in_two_checks(golden, cli, tmp_path):
    """The hint (every tensor of the model under test against the reference) ranks conv3 first;
    checked alone it fails, so the search ends there: the full model, then conv3."""
    out = tmp_path / "reduced.onnx"
    res = cli("debug", "reduce", golden["faulty"], "-o", out, "--compare", "onnxrt", "onnxrt",
              "--reference-model", golden["clean"], "--iter-artifact", tmp_path / "artifact.onnx", "--json")
    assert res.code == 0, res.err
    assert _nodes(out) == ["conv3"]
    summary = json.loads(res.out)
    # (+1: the window before conv3, checked to say that conv3 is the first node failing alone)
    assert summary["checks"] == 3 and summary["phases"] == {"full model": 1, "guided": 1, "first node failing alone": 1}
    assert summary["first_alone"].startswith("conv3 is the first node in topological order that fails alone")
    search = summary["compare"]["search"]
    assert search["found_by"] == "guided" and search["hinted_checks"] == 1
    assert search["ranked"][0]["node"] == "conv3" and search["ranked"][0]["amplification"] > 100
    assert "Found by the guided search" in res.err and "Hint (" in res.err
    # an explicit --mode searches without the hint, and ends at the same node
    res = cli("debug", "reduce", golden["faulty"], "-o", tmp_path / "plain.onnx", "--compare", "onnxrt", "onnxrt",
              "--reference-model", golden["clean"], "--iter-artifact", tmp_path / "artifact.onnx", "--mode", "default",
              "--json")
    assert res.code == 0, res.err
    assert _nodes(tmp_path / "plain.onnx") == ["conv3"]
    plain = json.loads(res.out)
    assert plain["checks"] > 2 and plain["compare"]["search"]["found_by"] == "default"
    assert "Hint (" not in res.err
    # --min-good wants passing subgraphs next to the result: the localized search checks them
    res = cli("debug", "reduce", golden["faulty"], "-o", tmp_path / "r2.onnx", "--compare", "onnxrt", "onnxrt",
              "--reference-model", golden["clean"], "--iter-artifact", tmp_path / "artifact.onnx",
              "--min-good", tmp_path / "good.onnx")
    assert res.code == 0, res.err
    assert _nodes(tmp_path / "r2.onnx") == ["conv3"] and (tmp_path / "good.onnx").exists()
    assert "Hint (" not in res.err


@pytest.mark.parametrize("all_faults", [False, True])
def test_misleading_hint_still_gives_a_correct_minimal_result(tmp_path, cli, monkeypatch, all_faults):
    """Two real faults (conv1, conv6); the hint is made to rank nodes that are fine (relu4, conv0)
    first. Each passes alone, so the normal search takes over and ends where it would anyway."""
    from toolkit.reduce.accuracy import CompareRunner

    paths = save_pair(tmp_path, layers=8, perturb=(1, 6))
    misleading = {"c0": 1e-3, "r4": 0.9}  # amplifications: ~8e3 for conv0, 900 for relu4 (both are fine)
    monkeypatch.setattr(CompareRunner, "hint_errors", lambda self: dict(misleading))
    out = tmp_path / "reduced.onnx"
    extra = ["--all-faults"] if all_faults else []
    res = cli("debug", "reduce", paths["faulty"], "-o", out, "--compare", "onnxrt", "onnxrt",
              "--reference-model", paths["clean"], "--iter-artifact", tmp_path / "a.onnx", "--json", *extra)
    assert res.code == 0, res.err
    summary = json.loads(res.out)
    search = summary["compare"]["search"]
    assert [r["node"] for r in search["ranked"][:2]] == ["conv0", "relu4"]
    assert search["found_by"] == "search" and search["hinted_checks"] >= 2
    if all_faults:
        assert [f["nodes"] for f in summary["faults"]] == [["conv1"], ["conv6"]]
        assert summary["faults"][0]["found_by"] == "search"  # conv0 and relu4 tried first, both pass
    else:
        assert _nodes(out) == ["conv1"] and summary["one_minimal"]
        assert "The hinted nodes passed alone" in res.err


def test_guided_search_finds_every_fault_with_few_checks(tmp_path, cli):
    paths = save_pair(tmp_path, layers=10, perturb=(1, 8))
    res = cli("debug", "reduce", paths["faulty"], "-o", tmp_path / "r.onnx", "--compare", "onnxrt", "onnxrt",
              "--reference-model", paths["clean"], "--all-faults", "--iter-artifact", tmp_path / "a.onnx", "--json")
    assert res.code == 0, res.err
    summary = json.loads(res.out)
    assert [f["nodes"] for f in summary["faults"]] == [["conv1"], ["conv8"]]
    assert [f["found_by"] for f in summary["faults"]] == ["guided", "guided"]
    # the full model; each fault alone (hinted), then the rest with it taken out: 5 checks
    assert summary["compare"]["search"]["hinted_checks"] == 2
    assert summary["checks"] == 5


def test_hint_ranking_follows_error_amplification():
    """rank(): a node with exact inputs and a wrong output first; propagated error ranks near 1."""
    from toolkit.reduce.guide import rank
    from toolkit.reduce.loading import load_for_index
    from toolkit.reduce.graph import GraphIndex

    model = conv_net(4, ())
    index = GraphIndex(model, None)
    errors = {"c0": 0.0, "r0": 0.0, "c1": 0.3, "r1": 0.31, "c2": 0.33, "r2": 0.33, "c3": 0.34, "r3": 0.34}
    ranked = rank(index, errors)
    assert index.names[ranked[0][0]] == "conv1" and ranked[0][1] > 1e5
    assert all(amp < 1.2 for _i, amp, _e in ranked[1:])
    _ = load_for_index


def test_hint_ranks_nodes_after_uncompared_tensors_last():
    """rank(): c0 not compared (a converter's Cast output, missing from the reference): relu0's
    ratio is estimated from an input error of 0 and must not be tried before conv2."""
    from toolkit.reduce.graph import GraphIndex
    from toolkit.reduce.guide import rank

    index = GraphIndex(conv_net(4, ()), None)
    errors = {"r0": 1e-3, "c1": 1e-3, "r1": 1e-3, "c2": 0.3, "r2": 0.3, "c3": 0.3, "r3": 0.3}
    ranked = rank(index, errors)
    names = [index.names[i] for i, _amp, _e in ranked]
    assert names[0] == "conv2" and names[-1] == "relu0"
    relu0 = next(amp for i, amp, _e in ranked if index.names[i] == "relu0")
    assert relu0 > ranked[0][1]  # the larger (estimated) ratio, ranked last all the same
    # with an fp16 runner under test, errors below fp16's rounding step are that rounding
    errors = {"c0": 3e-4, "r0": 3e-4, "c1": 3e-4, "r1": 3e-4, "c2": 0.3, "r2": 0.3, "c3": 0.3, "r3": 0.3}
    assert index.names[rank(index, errors)[0][0]] == "conv0"  # 3e-4 over float32's epsilon
    assert index.names[rank(index, errors, 2.0**-11)[0][0]] == "conv2"


def test_run_in_process_captures_output_and_exit_codes():
    import sys

    from toolkit.reduce.check import WorkerEntry, run_in_process

    def speaks(args):
        print("out line")
        print("err line", file=sys.stderr)
        return 1

    def crashes(args):
        raise ValueError("boom")

    def exits(args):
        raise SystemExit(3)

    before = (sys.stdout, sys.stderr, list(sys.argv))
    res = run_in_process(WorkerEntry(main=speaks), "toolkit", ["run", "m.onnx"])
    assert (res.code, res.stdout_text, res.stderr_text) == (1, "out line\n", "err line\n")
    res = run_in_process(WorkerEntry(main=crashes), "toolkit", ["run"])
    assert res.code == 70 and "ValueError: boom" in res.stderr_text and "Traceback" in res.stderr_text
    assert run_in_process(WorkerEntry(main=exits), "toolkit", ["run"]).code == 3

    def interrupted(args):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_in_process(WorkerEntry(main=interrupted), "toolkit", ["run"])
    assert (sys.stdout, sys.stderr, list(sys.argv)) == before

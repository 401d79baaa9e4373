"""`debug precision`'s inputs: held-out sets that are the search's own are not held out, loaded
reference outputs must match the input sets one to one, and per-iteration folders are read as
`toolkit run` reads them (the fp16 search and the Q/DQ search)."""

import json
import os

import numpy as np
import pytest

import modelzoo as mz
import qdq_models as qm
from toolkit.core.io.datafiles import IterationResult, RunResults, save_inputs, save_outputs


def _x(values):
    return [{"x": np.full((1, 4), v, np.float32)} for v in values]


def inputs_file(path, feeds):
    save_inputs(str(path), feeds)
    return str(path)


def inputs_folder(path, feeds):
    """Polygraphy 0.53's per-iteration folder of inputs: 0000000000.json, 0000000001.json, ..."""
    os.mkdir(path)
    for k, feed in enumerate(feeds):
        save_inputs(str(path / f"{k:010d}.json"), [feed])
    return str(path)


def outputs_folder(path, outputs, runner="onnxrt-runner"):
    """A per-iteration folder of outputs: one RunResults with one iteration per file."""
    os.mkdir(path)
    for k, outs in enumerate(outputs):
        save_outputs(str(path / f"{k:010d}.json"), RunResults([(runner, [IterationResult(outs, 0.0, runner)])]))
    return str(path)


@pytest.fixture(scope="module")
def two_or_one(tmp_path_factory):
    d = tmp_path_factory.mktemp("two")
    return mz.save(qm.two_or_one(), d / "two.onnx")


def _search(cli, model, *args):
    r = cli("debug", "precision", model, *args, "--atol", "0.95", "--rtol", "0", "--json")
    return r, (json.loads(r.out) if r.out.strip() else None)


def test_the_search_sets_given_again_as_held_out_are_not_a_held_out_check(two_or_one, tmp_path, cli):
    feeds = inputs_file(tmp_path / "in.json", _x([0.45, 0.4, 0.42]))
    for held in (feeds, inputs_file(tmp_path / "copy.json", _x([0.45, 0.4, 0.42]))):  # the file, a copy
        r, result = _search(cli, two_or_one, "--load-inputs", feeds, "--validate-inputs", held)
        assert r.code == 0, r.err
        assert result["held_out"] is None and "it holds" not in r.err
        assert "3 equal input sets the search runs on" in r.err and "No held-out check" in r.err
        assert "equals an input set the search runs on" in result["held_out_note"]


def test_only_the_new_held_out_sets_are_checked(two_or_one, tmp_path, cli):
    feeds = inputs_file(tmp_path / "in.json", _x([0.45]))
    # 0.45 is the search's own set, 0.4 is new and is given twice: one set is held out
    held = inputs_file(tmp_path / "held.json", _x([0.45, 0.4, 0.4]))
    r, result = _search(cli, two_or_one, "--load-inputs", feeds, "--validate-inputs", held)
    assert r.code == 0, r.err
    assert result["held_out"]["count"] == 1 and result["held_out"]["holds"]
    assert "1 equal input sets the search runs on and 1 repeat other held-out sets" in r.err
    # the same file loaded twice: the quarter split off it repeats the search's sets
    r, result = _search(cli, two_or_one, "--load-inputs", feeds, feeds, feeds, feeds)
    assert result["held_out"] is None and "No held-out check" in r.err


def test_generated_held_out_sets_that_do_not_vary_are_not_held_out(two_or_one, cli):
    r, result = _search(cli, two_or_one, "--val-range", "x:[0.45,0.45]")
    assert r.code == 0, r.err
    assert result["held_out"] is None and "(generated)" in result["held_out_note"]


@pytest.fixture(scope="module")
def classifier(tmp_path_factory):
    d = tmp_path_factory.mktemp("clf")
    float_path = mz.save(qm.classifier(), d / "float.onnx")
    q_path = qm.quantize(float_path, str(d / "qdq.onnx"), qm.uniform_feeds(16, 0, 1))
    return {"float": float_path, "qdq": q_path}


def _outputs(cli, model, inputs, path):
    r = cli("run", model, "--onnxrt", "--load-inputs", inputs, "--save-outputs", path)
    assert r.code == 0, r.err
    return str(path)


def test_loaded_outputs_are_the_reference_and_must_match_the_inputs_one_to_one(classifier, tmp_path, cli):
    four = inputs_file(tmp_path / "in4.json", qm.uniform_feeds(4, -1, 1, seed=9))
    eight = inputs_file(tmp_path / "in8.json", qm.uniform_feeds(8, -1, 1, seed=9))
    out4, out8 = (_outputs(cli, classifier["float"], f, tmp_path / f"out{n}.json") for n, f in ((4, four), (8, eight)))
    tol = ["--atol", "0.5", "--rtol", "0"]
    r = cli("debug", "precision", classifier["qdq"], "--load-inputs", four, "--load-outputs", out4, *tol)
    assert r.code == 0, r.err
    assert f"reference: the outputs loaded from {out4} (--load-outputs)" in r.err
    assert "every pair in float" not in r.err.split("\n")[0]
    for inputs, outputs, counts in ((four, out8, ("8 iteration(s)", "4 input set(s)")),
                                    (eight, out4, ("4 iteration(s)", "8 input set(s)"))):
        for model in (classifier["qdq"], classifier["float"]):  # the Q/DQ search and the fp16 search
            r = cli("debug", "precision", model, "--load-inputs", inputs, "--load-outputs", outputs, *tol)
            assert r.code == 3, r.err
            errors = [line for line in r.err.splitlines() if line.startswith("error:")]
            assert len(errors) == 1 and all(c in errors[0] for c in counts) and "Traceback" not in r.err


def test_per_iteration_folders_are_read_as_run_reads_them(classifier, tmp_path, cli):
    feeds = qm.uniform_feeds(4, -1, 1, seed=9)
    held = qm.uniform_feeds(2, -1, 1, seed=10)
    args = ["--reference-model", classifier["float"], "--atol", "0.5", "--rtol", "0", "--json"]
    files = ["--load-inputs", inputs_file(tmp_path / "in.json", feeds),
             "--validate-inputs", inputs_file(tmp_path / "held.json", held)]
    folders = ["--load-inputs", inputs_folder(tmp_path / "infold", feeds),
               "--validate-inputs", inputs_folder(tmp_path / "heldfold", held)]
    r = cli("run", classifier["float"], "--onnxrt", "--load-inputs", folders[1])
    assert r.code == 0, r.err  # (what `run` reads)
    by_file, by_folder = (cli("debug", "precision", classifier["qdq"], *given, *args) for given in (files, folders))
    assert by_folder.code == by_file.code == 0, by_folder.err
    a, b = json.loads(by_file.out), json.loads(by_folder.out)
    assert a["float_pairs"] == b["float_pairs"] and a["held_out"] == b["held_out"] and b["held_out"]["count"] == 2
    # --load-outputs as a folder (the Q/DQ search), and the fp16 search's --load-inputs
    from toolkit.core.io.datafiles import load_outputs

    outs = [it.outputs for it in load_outputs(_outputs(cli, classifier["float"], files[1], tmp_path / "o.json")).runs[0][1]]
    r = cli("debug", "precision", classifier["qdq"], "--load-inputs", folders[1],
            "--load-outputs", outputs_folder(tmp_path / "outfold", outs), "--atol", "0.5", "--rtol", "0", "--json")
    assert r.code == 0, r.err
    assert json.loads(r.out)["float_pairs"] == a["float_pairs"]
    r = cli("debug", "precision", classifier["float"], "--load-inputs", folders[1])
    assert r.code in (0, 1) and "is a directory" not in r.err, r.err
    r = cli("debug", "precision", classifier["float"], "--load-inputs", str(tmp_path / "nofold"))
    assert r.code == 3 and "no such file" in r.err


def test_no_write_replaces_a_file_the_command_reads_held_out_or_in_a_folder(classifier, tmp_path, cli):
    feeds = inputs_file(tmp_path / "in.json", qm.uniform_feeds(4, -1, 1, seed=9))
    held = inputs_file(tmp_path / "held.json", qm.uniform_feeds(2, -1, 1, seed=10))
    folder = inputs_folder(tmp_path / "fold", qm.uniform_feeds(2, -1, 1, seed=11))
    before = {p: open(p, "rb").read() for p in (held, os.path.join(folder, "0000000000.json"))}
    tol = ["--reference-model", classifier["float"], "--atol", "0.5", "--rtol", "0"]
    for given, written in ((["--validate-inputs", held], held),
                           (["--validate-inputs", folder], os.path.join(folder, "0000000000.json")),
                           (["--validate-inputs", folder], os.path.join(folder, "0000000007.json"))):
        r = cli("debug", "precision", classifier["qdq"], "--load-inputs", feeds, *given, "-o", written, *tol)
        assert r.code == 2 and "nothing was read or written" in r.err, r.err
    r = cli("run", classifier["float"], "--onnxrt", "--load-inputs", folder,
            "--save-outputs", os.path.join(folder, "0000000001.json"))
    assert r.code == 2 and "per-iteration folder" in r.err, r.err
    assert sorted(os.listdir(folder)) == ["0000000000.json", "0000000001.json"]
    assert all(open(p, "rb").read() == data for p, data in before.items())
    r = cli("run", classifier["float"], "--onnxrt", "--load-inputs", folder,  # (any other name in it: not an iteration)
            "--save-outputs", os.path.join(folder, "outputs.json"))
    assert r.code == 0, r.err


def test_convert_checks_on_a_per_iteration_folder(classifier, tmp_path, cli):
    folder = inputs_folder(tmp_path / "fold", qm.uniform_feeds(2, -1, 1, seed=11))
    r = cli("convert", classifier["float"], "--fp-to-fp16", "--load-inputs", folder, "-o", tmp_path / "f16.onnx")
    assert r.code == 0 and "2 input sets" in r.err, r.err


def test_a_library_caller_s_sets_are_searched_and_validate_inputs_are_held_out(two_or_one, tmp_path):
    from toolkit.core.compare.tolerances import Tolerances
    from toolkit.precision.qdq_search import QdqConfig, QdqSearch

    held = inputs_file(tmp_path / "held.json", _x([0.4, 0.41]))
    config = QdqConfig(two_or_one, validate_inputs=[held], tolerances=Tolerances.of(atol=0.95, rtol=0.0))
    outcome = QdqSearch(config, feeds=_x([0.45])).run()
    assert outcome.held_out is not None and outcome.held_out.source == "file" and outcome.held_out.count == 2

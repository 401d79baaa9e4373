"""`toolkit data to-input` / `data merge`: inputs + outputs files -> one inputs file."""

import json

import numpy as np
import pytest

from toolkit.core.io.datafiles import IterationResult, RunResults, load_inputs, save_inputs, save_outputs


def _feeds(n, name, base):
    return [{name: np.full((2,), base + k, np.float32)} for k in range(n)]


@pytest.fixture
def files(tmp_path):
    ins = str(tmp_path / "inputs.json")
    outs = str(tmp_path / "outputs.npz")
    save_inputs(ins, [{"x": np.full((2,), k, np.float32), "shared": np.zeros(1, np.int64)} for k in range(3)])
    save_outputs(
        outs,
        RunResults(
            [("runner", [IterationResult({"t": np.full((2,), 10 + k, np.float32), "shared": np.ones(1, np.int64)}) for k in range(3)])]
        ),
    )
    return ins, outs


@pytest.mark.parametrize("cmd", ["to-input", "merge"])
@pytest.mark.parametrize("ext", ["json", "npz"])
def test_every_iteration_is_merged_separately(cli, files, tmp_path, cmd, ext):
    ins, outs = files
    out = str(tmp_path / f"merged.{ext}")
    res = cli("data", cmd, ins, outs, "-o", out)
    assert res.code == 0, res.err
    assert "3 iteration(s)" in res.err
    merged = load_inputs(out)
    assert len(merged) == 3
    for k, feed in enumerate(merged):
        assert sorted(feed) == ["shared", "t", "x"]
        assert feed["x"][0] == k and feed["t"][0] == 10 + k  # iteration k, not the last one
        assert feed["shared"][0] == 1  # later files win


def test_later_file_wins_both_ways(cli, files, tmp_path):
    ins, outs = files
    out = str(tmp_path / "m.npz")
    assert cli("data", "to-input", outs, ins, "-o", out).code == 0
    assert load_inputs(out)[0]["shared"][0] == 0


def test_files_with_different_iteration_counts(cli, tmp_path):
    a, b = str(tmp_path / "a.npz"), str(tmp_path / "b.npz")
    save_inputs(a, _feeds(1, "a", 0))
    save_inputs(b, _feeds(2, "b", 5))
    out = str(tmp_path / "m.json")
    res = cli("data", "to-input", a, b, "-o", out)
    assert res.code == 0
    merged = load_inputs(out)
    assert sorted(merged[0]) == ["a", "b"] and sorted(merged[1]) == ["b"] and merged[1]["b"][0] == 6
    # said, since a layerwise check on iteration 1 would miss the tensors of a.npz
    assert f"different numbers of iterations ({a}: 1, {b}: 2); iterations 1 and later" in res.err
    assert "different numbers" not in cli("data", "to-input", b, b, "-o", out).err


def test_merge_to_stdout(cli, files):
    ins, outs = files
    res = cli("data", "to-input", ins, outs, "-o", "-")
    assert res.code == 0
    data = json.loads(res.out)
    assert isinstance(data, list) and len(data) == 3 and "t" in data[0]


def test_errors(cli, files, tmp_path):
    ins, _ = files
    res = cli("data", "to-input", ins, str(tmp_path / "missing.json"), "-o", str(tmp_path / "o.json"))
    assert res.code == 3 and "missing.json" in res.err
    assert not (tmp_path / "o.json").exists()
    assert cli("data", "to-input", ins).code == 2  # no -o
    assert cli("data", "to-input", "-o", str(tmp_path / "o.json")).code == 2  # no files
    res = cli("data", "to-input", ins, "-o", str(tmp_path / "nodir" / "o.json"))
    assert res.code == 3 and "does not exist" in res.err


def test_help_lists_both_commands(cli):
    res = cli("data", "--help")
    assert res.code == 0 and "to-input" in res.out and "merge" in res.out

"""Data files: our JSON/npz round trips, and interchange with polygraphy both ways."""

import json
import os

import numpy as np
import pytest

from toolkit.core.io import datafiles as d
from toolkit.core.errors import InputError

polygraphy_json = pytest.importorskip("polygraphy.json")


def feeds():
    rng = np.random.default_rng(0)
    return [
        {"x": rng.standard_normal((2, 3)).astype(np.float32), "ids": np.array([1, 2, 3], np.int64)},
        {"x": rng.standard_normal((2, 3)).astype(np.float32), "ids": np.array([4, 5, 6], np.int64)},
    ]


def results():
    return d.RunResults(
        [
            ("onnxrt-runner-N0", [d.IterationResult({"y": np.arange(3, dtype=np.float16), "z": np.ones((2,), bool)}, 0.25)]),
            ("trt-runner-N0", [d.IterationResult({"y": np.arange(3, dtype=np.float16)}, 0.125)]),
        ]
    )


@pytest.mark.parametrize("ext", ["json", "npz"])
def test_inputs_round_trip(tmp_path, ext):
    path = str(tmp_path / f"in.{ext}")
    d.save_inputs(path, feeds())
    loaded = d.load_inputs(path)
    assert len(loaded) == 2
    for a, b in zip(loaded, feeds()):
        assert list(a) == list(b)
        for k in a:
            assert a[k].dtype == b[k].dtype
            np.testing.assert_array_equal(a[k], b[k])


@pytest.mark.parametrize("ext", ["json", "npz"])
def test_outputs_round_trip(tmp_path, ext):
    path = str(tmp_path / f"out.{ext}")
    d.save_outputs(path, results())
    loaded = d.load_outputs(path)
    assert loaded.runner_names() == ["onnxrt-runner-N0", "trt-runner-N0"]
    it = loaded.runs[0][1][0]
    assert it.runtime == 0.25
    assert it.outputs["y"].dtype == np.float16 and it.outputs["z"].dtype == bool
    np.testing.assert_array_equal(it.outputs["y"], np.arange(3))


def test_our_json_loads_in_polygraphy(tmp_path):
    from polygraphy.comparator import RunResults

    ins = str(tmp_path / "in.json")
    outs = str(tmp_path / "out.json")
    d.save_inputs(ins, feeds())
    d.save_outputs(outs, results())
    theirs_in = polygraphy_json.load_json(ins)
    assert len(theirs_in) == 2
    np.testing.assert_array_equal(theirs_in[1]["ids"], feeds()[1]["ids"])
    theirs_out = RunResults.load(outs)
    runner, iters = theirs_out[0]
    assert runner == "onnxrt-runner-N0"
    np.testing.assert_array_equal(iters[0]["y"], np.arange(3, dtype=np.float16))
    assert iters[0].runtime == 0.25


def test_polygraphy_json_loads_in_toolkit(tmp_path):
    from polygraphy.comparator import IterationResult, RunResults

    ins = str(tmp_path / "pin.json")
    outs = str(tmp_path / "pout.json")
    polygraphy_json.save_json(feeds(), ins)
    rr = RunResults()
    rr.append(("onnxrt-runner-N0", [IterationResult(outputs={"y": np.full(4, 2.0, np.float32)}, runtime=0.5, runner_name="onnxrt-runner-N0")]))
    rr.save(outs)
    loaded_in = d.load_inputs(ins)
    np.testing.assert_array_equal(loaded_in[0]["x"], feeds()[0]["x"])
    loaded_out = d.load_outputs(outs)
    assert loaded_out.runner_names() == ["onnxrt-runner-N0"]
    np.testing.assert_array_equal(loaded_out.runs[0][1][0].outputs["y"], np.full(4, 2.0, np.float32))


def test_legacy_marker_keys_accepted(tmp_path):
    arr = np.arange(3, dtype=np.int32)
    enc = d.encode_array(arr)
    legacy = {"__polygraphy_encoded_ndarray": None, "array": enc["array"]}
    path = tmp_path / "legacy.json"
    path.write_text(json.dumps([{"a": legacy}]))
    np.testing.assert_array_equal(d.load_inputs(str(path))[0]["a"], arr)
    lazy = {"values": enc, "polygraphy_class": "LazyNumpyArray"}
    rr = {"lst": [["r", [{"outputs": {"o": lazy}, "runtime": 1.0, "runner_name": "r", "polygraphy_class": "IterationResult"}]]], "polygraphy_class": "RunResults"}
    path2 = tmp_path / "legacy_out.json"
    path2.write_text(json.dumps(rr))
    np.testing.assert_array_equal(d.load_outputs(str(path2)).runs[0][1][0].outputs["o"], arr)


def test_npz_members_load_lazily(tmp_path):
    path = str(tmp_path / "big.npz")
    d.save_inputs(path, [{"a": np.zeros(10, np.float32), "b": np.ones(10, np.float32)}])
    d.clear_cache()
    feed = d.load_inputs(path)[0]
    assert isinstance(feed, d.LazyTensors)
    reads = []
    reader = feed._reader
    array = reader.array

    def spy(member, what):  # counts the members read from the archive
        reads.append(member)
        return array(member, what)

    reader.array = spy
    assert "a" in feed and len(feed) == 2 and reads == []  # names come from the index
    np.testing.assert_array_equal(feed["b"], np.ones(10))
    assert len(reads) == 1  # only b's member was read


def test_plain_npz_is_one_iteration(tmp_path):
    path = str(tmp_path / "plain.npz")
    np.savez(path, x=np.arange(3), y=np.ones(2))
    loaded = d.load_inputs(path)
    assert len(loaded) == 1 and sorted(loaded[0]) == ["x", "y"]


def test_pickled_npz_is_refused(tmp_path):
    path = str(tmp_path / "evil.npz")
    np.savez(path, x=np.array([{"a": 1}], dtype=object))
    feed = d.load_inputs(path)[0]
    with pytest.raises(InputError, match="pickled"):
        feed["x"]


def test_pickled_array_in_json_is_refused(tmp_path):
    import base64
    import io

    buf = io.BytesIO()
    np.save(buf, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    path = tmp_path / "evil.json"
    path.write_text(json.dumps([{"x": {"array": base64.b64encode(buf.getvalue()).decode(), "polygraphy_class": "ndarray"}}]))
    with pytest.raises(InputError, match="pickled"):
        d.load_inputs(str(path))


@pytest.mark.parametrize("content", ["[1, 2]", '{"lst": 5, "polygraphy_class": "RunResults"}', '[{"x": {"array": "!!!", "polygraphy_class": "ndarray"}}]'])
def test_json_that_is_not_a_data_file(tmp_path, content):
    path = tmp_path / "f.json"
    path.write_text(content)
    with pytest.raises(InputError) as info:
        d.load_data(str(path), cache=False)
    assert "f.json" in info.value.message


def test_merge_gives_each_iteration_its_own_values():
    ins = [{"x": np.array([0])}, {"x": np.array([1])}]
    outs = d.RunResults([("r", [d.IterationResult({"t": np.array([10]), "x": np.array([99])}), d.IterationResult({"t": np.array([11])})])])
    merged = d.merge_to_inputs([ins, outs])
    assert len(merged) == 2
    assert merged[0]["t"][0] == 10 and merged[1]["t"][0] == 11
    assert merged[0]["x"][0] == 99  # later file wins
    assert merged[1]["x"][0] == 1
    assert merged[0] is not merged[1]


def test_failed_write_leaves_no_partial_file(tmp_path, monkeypatch):
    path = tmp_path / "out.json"
    path.write_text("original")

    def boom(obj, level=0):  # fails half-way through the (streamed) write
        yield b"[" + b" " * (1 << 17)
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(d, "_json_chunks", boom)
    with pytest.raises(RuntimeError):
        d.save_inputs(str(path), feeds())
    assert path.read_text() == "original"
    assert os.listdir(tmp_path) == ["out.json"]


def test_cache_reloads_changed_files(tmp_path):
    path = str(tmp_path / "in.json")
    d.save_inputs(path, [{"x": np.array([1])}])
    assert d.load_inputs(path)[0]["x"][0] == 1
    d.save_inputs(path, [{"x": np.array([2, 3])}])
    assert d.load_inputs(path)[0]["x"][0] == 2


@pytest.mark.parametrize("text", ["\u0080", "not base64!", "QUJD="])
def test_array_text_that_is_not_base64_is_corrupt_data(tmp_path, text):
    """Non-ASCII, stray characters, bad padding: each is the file's fault, said as such."""
    path = tmp_path / "bad.json"
    path.write_text(json.dumps([{"x": {"array": text, "polygraphy_class": "ndarray"}}]))
    with pytest.raises(InputError, match="corrupt array data"):
        d.load_inputs(str(path))

"""Data files of many iterations: the work per tensor is constant (no header parsed twice, no
archive member opened through zipfile, no statistic computed per call for small tensors), and
the kind of a file given to the wrong option is read from its head, not its body."""

from __future__ import annotations

import zipfile

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from toolkit.core.io import datafiles as d
from toolkit.core.errors import InputError


def _feeds(n: int):
    rng = np.random.default_rng(0)
    return [{"x": rng.standard_normal((1, 4)).astype(np.float32)} for _ in range(n)]


def _model(path: str) -> str:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return path


class _Counter:
    def __init__(self, monkeypatch, owner, name):
        self.calls = 0
        real = getattr(owner, name)

        def counted(*args, **kwargs):
            self.calls += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(owner, name, counted)


def _read_all(path: str) -> int:
    d.clear_cache()
    return sum(float(feed[name].sum()) != 0.5 for feed in d.load_inputs(path) for name in feed)


@pytest.mark.parametrize("ext", ["json", "npz"])
def test_headers_are_parsed_once_per_distinct_header_not_per_tensor(tmp_path, monkeypatch, ext):
    counts = []
    for n in (500, 1000):
        path = str(tmp_path / f"in{n}.{ext}")
        d.save_inputs(path, _feeds(n))
        parses = _Counter(monkeypatch, np.lib.format, "read_array_header_1_0")
        opens = _Counter(monkeypatch, zipfile.ZipFile, "open")
        assert _read_all(path) == n
        counts.append((parses.calls, opens.calls))
    # one header shape for every tensor: parsed at most once per file (was twice per tensor);
    # toolkit's .npz members are read at their offset (was two zipfile opens per tensor)
    assert all(p <= 1 for p, _o in counts), counts
    assert all(o <= 2 for _p, o in counts), counts  # (the index member)


def test_inspect_data_statistics_are_computed_per_window_not_per_tensor(monkeypatch):
    from toolkit.inspect.data import data_lines

    calls = _Counter(monkeypatch, np, "percentile")
    lines = [line for chunk in data_lines(_feeds(3000)) for line in chunk]
    assert sum(line.strip().startswith("x [") for line in lines) == 3000
    assert calls.calls <= 5, calls.calls  # (was one per tensor)


def test_an_npz_inputs_file_given_as_outputs_is_refused_without_reading_its_directory(tmp_path, monkeypatch):
    from toolkit.run.pipeline import _refuse_inputs_files

    path = str(tmp_path / "inputs.npz")
    d.save_inputs(path, _feeds(2000))
    model = _model(str(tmp_path / "m.onnx"))
    d.clear_cache()

    def no_archive(*args, **kwargs):
        raise AssertionError("the archive was opened whole")

    monkeypatch.setattr(zipfile, "ZipFile", no_archive)
    with pytest.raises(InputError, match="is an inputs file"):
        _refuse_inputs_files([path], model)


def test_a_json_inputs_file_given_as_outputs_is_refused_from_its_head(tmp_path):
    """Only the head is read: a body that is not even text does not change the answer."""
    from toolkit.run.pipeline import _refuse_inputs_files

    path = tmp_path / "inputs.json"
    d.save_inputs(str(path), _feeds(3000))
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2] + b"\xff\xfe" * 1000 + data[len(data) // 2:])
    model = _model(str(tmp_path / "m.onnx"))
    with pytest.raises(InputError, match="is an inputs file"):
        _refuse_inputs_files([str(path)], model)


@pytest.mark.parametrize("ext", ["json", "npz"])
def test_outputs_files_and_plain_npz_are_not_taken_for_inputs(tmp_path, ext):
    from toolkit.core.io.datahead import first_feed_names

    outputs = str(tmp_path / f"out.{ext}")
    d.save_outputs(outputs, d.RunResults([("r", [d.IterationResult({"y": np.ones(3)})])]))
    assert first_feed_names(outputs) is None
    plain = str(tmp_path / "plain.npz")
    np.savez(plain, x=np.ones(3))
    assert first_feed_names(plain) is None
    inputs = str(tmp_path / f"in.{ext}")
    d.save_inputs(inputs, [{"a b": np.ones(2), "c": np.zeros(1)}] * 3)
    assert first_feed_names(inputs) == ["a b", "c"]

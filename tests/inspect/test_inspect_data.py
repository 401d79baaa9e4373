"""`inspect data --show-values`: bounded like Polygraphy (3 values at each end of every dimension by
default, --num-items to choose, -1 for all) and streamed tensor by tensor."""

from __future__ import annotations

import json
from collections.abc import Mapping

import numpy as np

from toolkit.core.io.datafiles import IterationResult, RunResults, save_inputs


def _file(tmp_path) -> str:
    path = str(tmp_path / "in.json")
    save_inputs(path, [{"big": np.arange(100000, dtype=np.float32).reshape(100, 1000), "s": np.array(["a", "bc"])}])
    return path


def test_show_values_prints_three_items_at_each_end_by_default(cli, tmp_path):
    res = cli("inspect", "data", _file(tmp_path), "--show-values")
    assert res.code == 0, res.err
    assert len(res.out) < 2000, res.out
    assert "[[0.0000e+00 1.0000e+00 2.0000e+00 ... 9.9700e+02 9.9800e+02 9.9900e+02]" in res.out
    assert "s [dtype=string, shape=(2,)]" in res.out and "['a' 'bc']" in res.out


def test_num_items_minus_one_prints_all(cli, tmp_path):
    res = cli("inspect", "data", _file(tmp_path), "--show-values", "--num-items", "-1")
    assert res.code == 0, res.err
    assert "..." not in res.out and "9.9999e+04]]" in res.out


def test_json_values_are_bounded_unless_all_are_asked_for(cli, tmp_path):
    path = _file(tmp_path)
    big = json.loads(cli("inspect", "data", path, "--show-values", "--json").out)["iterations"][0]["tensors"][0]
    assert "values" not in big and "..." in big["values_text"] and len(big["values_text"]) < 500
    big = json.loads(cli("inspect", "data", path, "--show-values", "-n", "-1", "--json").out)["iterations"][0]["tensors"][0]
    assert len(big["values"]) == 100 and big["values"][99][999] == 99999.0


class _Counting(Mapping):
    """Tensors read on access, counting the reads (as a .npz file's members load)."""

    def __init__(self, n: int):
        self.reads = 0
        self.names = [f"t{i}" for i in range(n)]

    def __getitem__(self, name):
        self.reads += 1
        return np.full((4, 4), self.names.index(name), np.float32)

    def __iter__(self):
        return iter(self.names)

    def __len__(self):
        return len(self.names)


def test_a_window_is_printed_before_the_next_is_read(monkeypatch):
    """Memory stays near one window: tensors are read a window at a time (bounded by bytes),
    and each window's lines come out before the next window's tensors are read."""
    import toolkit.inspect.data as data

    monkeypatch.setattr(data, "WINDOW_BYTES", 64)  # one (4, 4) float32 tensor fills a window
    tensors = _Counting(3)
    lines = data.data_lines(RunResults([("r", [IterationResult(tensors)])]), show_values=True)
    text = []
    for chunk in lines:
        text += chunk
        if any(line.strip().startswith("t0 [") for line in chunk):
            assert tensors.reads == 1
    assert tensors.reads == 3 and sum(line.strip().startswith("t") for line in text) == 3


def test_small_tensors_are_read_in_bounded_windows(monkeypatch):
    import toolkit.inspect.data as data

    monkeypatch.setattr(data, "WINDOW_TENSORS", 4)
    tensors = _Counting(10)
    seen = []
    for chunk in data.data_lines(RunResults([("r", [IterationResult(tensors)])])):
        seen.append((tensors.reads, sum(line.strip().startswith("t") for line in chunk)))
    assert seen == [(4, 4), (8, 4), (10, 2)]


def test_lines_before_an_unreadable_tensor_are_printed_first():
    from toolkit.inspect.data import data_lines

    class Broken(_Counting):
        def __getitem__(self, name):
            if name == "t2":
                raise ValueError("unreadable")
            return super().__getitem__(name)

    text = []
    try:
        for chunk in data_lines([Broken(4)]):
            text += chunk
    except ValueError:
        pass
    else:
        raise AssertionError("the unreadable tensor was not reported")
    assert [line.split()[0] for line in text if line.strip().startswith("t")] == ["t0", "t1"]

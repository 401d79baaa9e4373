"""`inspect data --show-values`: bounded like Polygraphy (3 values at each end of every dimension by
default, --num-items to choose, -1 for all) and streamed tensor by tensor."""

from __future__ import annotations

import json
from collections.abc import Mapping

import numpy as np

from toolkit.core.datafiles import IterationResult, RunResults, save_inputs


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


def test_each_tensor_is_printed_before_the_next_is_read():
    from toolkit.inspect.data import data_lines

    tensors = _Counting(3)
    lines = data_lines(RunResults([("r", [IterationResult(tensors)])]), show_values=True)
    text = []
    for chunk in lines:
        text += chunk
        if any(line.strip().startswith("t0 [") for line in chunk):
            assert tensors.reads == 1
    assert tensors.reads == 3 and sum(line.strip().startswith("t") for line in text) == 3

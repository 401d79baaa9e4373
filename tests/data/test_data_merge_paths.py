"""`data to-input` / `data merge` follow the one path rule: -o naming one of the files it
reads is a usage error (exit 2), nothing read or written."""

from __future__ import annotations

import numpy as np
import pytest

from toolkit.core.io.datafiles import save_inputs


@pytest.mark.parametrize("out", ["a.json", "./b.json"])
@pytest.mark.parametrize("command", ["to-input", "merge"])
def test_an_output_that_is_one_of_the_files_read_is_refused(cli, tmp_path, monkeypatch, out, command):
    monkeypatch.chdir(tmp_path)
    save_inputs("a.json", [{"x": np.ones((1, 4), np.float32)}])
    save_inputs("b.json", [{"y": np.zeros((2, 3), np.float32)}])
    before = {n: (tmp_path / n).read_bytes() for n in ("a.json", "b.json")}
    res = cli("data", command, "a.json", "b.json", "-o", out)
    assert res.code == 2, res.err
    assert f"-o {out} would overwrite FILE" in res.err and "nothing was read or written" in res.err
    assert {n: (tmp_path / n).read_bytes() for n in before} == before

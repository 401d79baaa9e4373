"""Data files read headers before payloads, bound what an array may take, and name a corrupt
field with exit 3 (never a crash) in every command that reads them."""

from __future__ import annotations

import json
import zipfile

import numpy as np
import pytest

import modelzoo as z
from test_large_model import measure

from toolkit.core.io.datafiles import IterationResult, RunResults, save_outputs

MB = 1 << 20


def write_bomb(path, nbytes: int) -> None:
    """An .npz whose one float32 array 'x' of ``nbytes`` zeros is deflated to a few hundred KB."""
    header = {"descr": "<f4", "fortran_order": False, "shape": (nbytes // 4,)}
    zeros = bytes(16 * MB)
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        with zf.open("x.npy", "w", force_zip64=True) as f:
            np.lib.format.write_array_header_1_0(f, header)
            for _ in range(nbytes // len(zeros)):
                f.write(zeros)


@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    z.save(z.chain(2, shape=(1, 4)), tmp_path / "m.onnx")
    return tmp_path


def test_a_shape_mismatch_is_refused_from_the_header(folder):
    write_bomb(folder / "bomb.npz", 512 * MB)
    assert (folder / "bomb.npz").stat().st_size < 2 * MB
    code, out, peak, seconds = measure(["run", "m.onnx", "--onnxrt", "--load-inputs", "bomb.npz"], folder)
    assert code == 3, out
    assert "input 'x' has shape (134217728,), but the model expects" in out
    assert peak < 300 * MB, f"peak {peak / MB:.0f} MB: the array was inflated before its shape was compared"


@pytest.mark.parametrize("command", [["inspect", "data"], ["data", "to-input"]])
def test_an_array_over_the_limit_is_refused_before_it_is_inflated(cli, folder, command):
    write_bomb(folder / "bomb.npz", 64 * MB)
    extra = ["-o", "o.json"] if command[0] == "data" else []
    res = cli(*command, "bomb.npz", *extra, "--max-tensor-size", "32M")
    assert res.code == 3, res.err
    assert "tensor 'x' would take 64.0 MiB in memory" in res.err and "--max-tensor-size" in res.err
    assert not (folder / "o.json").exists()
    assert cli(*command, "bomb.npz", *extra, "--max-tensor-size", "65M").code == 0


def _corrupt(folder, kind: str) -> str:
    x = np.ones((1, 4), np.float32)
    name = "out.npz" if kind.endswith("npz") else "out.json"
    save_outputs(str(folder / name), RunResults([("r", [IterationResult({"y": x}, 0.5, "r")])]))
    if name.endswith(".json"):
        doc = json.loads((folder / name).read_text())
        it = doc["lst"][0][1][0]
        if kind == "runtime-json":
            it["runtime"] = "abc"
        else:
            it["outputs"]["y"] = [1]
        (folder / name).write_text(json.dumps(doc))
        return name
    with np.load(folder / name) as f:
        arrays = {k: f[k] for k in f.files}
    idx = json.loads(str(arrays.pop("__toolkit__")[()]))
    if kind == "runtime-npz":
        idx["runs"][0]["iterations"][0]["runtime"] = "abc"
    else:
        idx["runs"][0]["iterations"] = [[1]]
    np.savez(folder / name, __toolkit__=np.array(json.dumps(idx)), **arrays)
    return name


COMMANDS = [["inspect", "data", "F"], ["data", "to-input", "F", "-o", "o.json"],
            ["run", "m.onnx", "--onnxrt", "--load-inputs", "F"], ["run", "m.onnx", "--onnxrt", "--load-outputs", "F"]]
FIELDS = {"runtime-json": "field 'runtime' is \"abc\"", "value-json": "output 'y' is [1], expected an array",
          "runtime-npz": "field 'runtime' is \"abc\"", "list-npz": "iteration is [1], expected a dict"}


@pytest.mark.parametrize("kind", list(FIELDS))
def test_a_corrupt_field_is_bad_input_naming_it(cli, folder, kind):
    name = _corrupt(folder, kind)
    for command in COMMANDS:
        res = cli(*[name if a == "F" else a for a in command])
        assert res.code == 3, (command, res.err)
        assert FIELDS[kind] in res.err and res.err.startswith(f"error: {name}: "), (command, res.err)
        assert not (folder / "o.json").exists()


def test_a_npy_header_that_is_not_a_literal_is_corrupt_data(cli, tmp_path):
    """numpy tokenizes a header's text before parsing it: an unclosed bracket raised tokenize's
    TokenError, which reached the user as a bug (exit 70)."""
    import base64
    import io

    buf = io.BytesIO()
    np.save(buf, np.arange(3, dtype=np.float32))
    raw = bytearray(buf.getvalue())
    start = raw.index(b"{")
    raw[start] ^= 0xF0  # "{" becomes a byte that is not a bracket: the "}" after it is unmatched
    path = tmp_path / "d.json"
    path.write_text(json.dumps([{"x": {"array": base64.b64encode(bytes(raw)).decode(), "polygraphy_class": "ndarray"}}]))
    r = cli("inspect", "data", path)
    assert r.code == 3, r.output
    assert "corrupt" in r.output and "Traceback" not in r.output


def test_forked_readers_of_one_compressed_npz_read_their_own_bytes(tmp_path):
    """Forked processes reading members of one open compressed .npz at once (debug reduce's
    parallel checks) each get the right arrays: zipfile's reads seek the file offset they share."""
    import os

    from toolkit.core.io.datafiles import load_data

    rng = np.random.default_rng(0)
    arrays = {f"t{i}": rng.random((200, 300)).astype(np.float32) for i in range(4)}
    np.savez_compressed(tmp_path / "c.npz", **arrays)
    feed = load_data(str(tmp_path / "c.npz"), cache=False)[0]
    pids = []
    for _ in range(3):
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            bad = 0
            for _ in range(20):
                for name, want in arrays.items():
                    try:
                        bad += not np.array_equal(feed[name], want)
                    except Exception:  # noqa: BLE001 - counted
                        bad += 1
            os._exit(min(bad, 100))
        pids.append(pid)
    assert [os.waitpid(pid, 0)[1] >> 8 for pid in pids] == [0, 0, 0]


def test_a_damaged_compressed_member_is_refused(tmp_path):
    from toolkit.core.errors import InputError
    from toolkit.core.io.datafiles import load_data

    values = np.random.default_rng(1).random((100, 100))
    np.savez_compressed(tmp_path / "c.npz", x=values)
    raw = bytearray((tmp_path / "c.npz").read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    (tmp_path / "d.npz").write_bytes(bytes(raw))
    with pytest.raises(InputError, match="unreadable"):
        load_data(str(tmp_path / "d.npz"), cache=False)[0]["x"]
    assert np.array_equal(load_data(str(tmp_path / "c.npz"), cache=False)[0]["x"], values)


@pytest.mark.parametrize("version", [99, "1", None])
def test_an_index_of_an_unknown_format_version_is_refused(tmp_path, version):
    from toolkit.core.errors import InputError
    from toolkit.core.io.datafiles import load_data, save_inputs

    save_inputs(str(tmp_path / "v.npz"), [{"x": np.ones(3, np.float32)}])
    with np.load(tmp_path / "v.npz") as npz:
        members = {k: npz[k] for k in npz.files}
    index = json.loads(str(members["__toolkit__"][()]))
    index["version"] = version
    members["__toolkit__"] = np.array(json.dumps(index))
    np.savez(tmp_path / "w.npz", **members)
    with pytest.raises(InputError, match="format version"):
        load_data(str(tmp_path / "w.npz"), cache=False)


@pytest.mark.parametrize("content,said", [(b'[{"x": 1}]', "JSON"), (b"\x93NUMPY", ".npy"), (b"garbage", "zip")])
def test_a_npz_name_on_another_kind_of_file_says_what_it_is(cli, tmp_path, content, said):
    if content.startswith(b"\x93"):
        np.save(tmp_path / "a.npy", np.ones(2))
        content = (tmp_path / "a.npy").read_bytes()
    (tmp_path / "d.npz").write_bytes(content)
    res = cli("inspect", "data", str(tmp_path / "d.npz"))
    assert res.code == 3 and said in res.err and "pickle" not in res.err, res.err

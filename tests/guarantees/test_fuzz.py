"""Property-based tests: mutated models and data files never cause an uncaught exception.

Every command must answer a mutated file with exit 0 (it happened to still be valid) or a
documented error code and one `error:` line, never a traceback.
"""

import json

import modelzoo as z
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from toolkit.core.io import datafiles as d

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
ALLOWED = {0, 1, 2, 3}

_MODEL_BYTES = {
    "if": z.with_if().SerializeToString(),
    "constant": z.with_constant().SerializeToString(),
    "branch": z.branch().SerializeToString(),
}


def mutate(data: bytes, draw_ops) -> bytes:
    buf = bytearray(data)
    for kind, pos, val in draw_ops:
        if not buf:
            break
        pos %= len(buf)
        if kind == "flip":
            buf[pos] ^= val or 1
        elif kind == "cut":
            del buf[pos:]
        elif kind == "insert":
            buf[pos:pos] = bytes([val])
        elif kind == "delete":
            del buf[pos : pos + 1 + val % 8]
    return bytes(buf)


ops = st.lists(
    st.tuples(st.sampled_from(["flip", "cut", "insert", "delete"]), st.integers(0, 10**6), st.integers(0, 255)),
    min_size=1,
    max_size=6,
)


def assert_clean(res):
    assert res.code in ALLOWED, (res.code, res.err)
    assert "Traceback" not in res.err
    assert "this is a bug in toolkit" not in res.err, res.err
    if res.code not in (0, 1):
        assert res.err.startswith("error: ") or "Error:" in res.err, res.err


@SETTINGS
@given(which=st.sampled_from(sorted(_MODEL_BYTES)), edits=ops, mode=st.sampled_from(["none", "basic", "full"]))
def test_inspect_model_survives_mutations(cli, tmp_path, which, edits, mode):
    path = tmp_path / "m.onnx"
    path.write_bytes(mutate(_MODEL_BYTES[which], edits))
    assert_clean(cli("inspect", "model", path, f"--mode={mode}"))


def _json_inputs() -> str:
    path = "/tmp/_toolkit_fuzz_inputs.json"
    d.save_inputs(path, [{"x": np.arange(6, dtype=np.float32).reshape(2, 3)}])
    return open(path).read()


_JSON_TEXT = _json_inputs()


@SETTINGS
@given(edits=ops)
def test_inspect_data_survives_json_mutations(cli, tmp_path, edits):
    path = tmp_path / "d.json"
    path.write_bytes(mutate(_JSON_TEXT.encode(), edits))
    assert_clean(cli("inspect", "data", path))


@SETTINGS
@given(edits=ops)
def test_inspect_data_survives_npz_mutations(cli, tmp_path, edits):
    src = tmp_path / "src.npz"
    d.save_inputs(str(src), [{"x": np.arange(6, dtype=np.float32)}])
    path = tmp_path / "d.npz"
    path.write_bytes(mutate(src.read_bytes(), edits))
    d.clear_cache()
    assert_clean(cli("inspect", "data", path))


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.sampled_from(["array", "polygraphy_class", "lst", "outputs", "values", "runtime", "x"]), children, max_size=3),
    max_leaves=10,
)


@SETTINGS
@given(obj=json_values)
def test_arbitrary_json_is_rejected_cleanly(cli, tmp_path, obj):
    path = tmp_path / "any.json"
    path.write_text(json.dumps(obj))
    d.clear_cache()
    assert_clean(cli("inspect", "data", path))

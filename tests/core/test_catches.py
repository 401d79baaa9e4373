"""Catches name what the call raises: bad values keep their behaviour, toolkit's own bugs surface."""

from __future__ import annotations

import io

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto, helper


# ---------------------------------------------------------------------- bad values, named exceptions


def test_a_truncated_protobuf_varint_is_a_value_error():
    from toolkit.core.io.protowire import read_varint, scan_fields

    with pytest.raises(ValueError, match="truncated"):
        read_varint(b"\x80\x80", 0)
    with pytest.raises(ValueError, match="truncated"):
        scan_fields(b"\x0a\x80")  # a length-delimited field whose length never ends
    assert read_varint(b"\xac\x02", 0) == (300, 2)


def test_a_truncated_model_file_has_no_functions_and_is_no_piece_list(tmp_path):
    from toolkit.core.io.functions import file_has_functions
    from toolkit.reduce.pieces import RawPieces

    path = tmp_path / "cut.onnx"
    path.write_bytes(b"\x3a\x80")
    assert file_has_functions(str(path)) is False
    assert RawPieces.scan(path.read_bytes()) is None


def test_statistics_of_values_numpy_cannot_take_as_floats_are_left_out():
    from toolkit.inspect.describe import summarize_array

    info = summarize_array(np.zeros(3, dtype="V2"))
    assert info["size"] == 3 and "mean" not in info
    bf = summarize_array(np.array([1.0, 3.0], dtype=ml_dtypes.bfloat16))
    assert bf["mean"] == 2.0 and bf["max"] == 3.0


def test_a_bug_inside_the_statistics_now_surfaces(monkeypatch):
    """It was swallowed (the statistics silently left out)."""
    from toolkit.inspect import describe

    monkeypatch.setattr(describe.np, "percentile", lambda *a, **k: None)  # unpacking None: a TypeError
    with pytest.raises(TypeError):
        describe.summarize_array(np.arange(4, dtype=np.float32))


def test_equal_bfloat16_or_string_constants_get_one_key_and_different_ones_two():
    from toolkit.surgeon.optimize import _array_key

    a = np.array([1.5, 2.0], dtype=ml_dtypes.bfloat16)
    assert _array_key(a) == _array_key(a.copy()) != _array_key(a * 2)
    s = np.array(["a", "b"], dtype=object)
    assert _array_key(s) == _array_key(np.array(["a", "b"], dtype=object)) != _array_key(np.array(["a", "c"], dtype=object))


def test_is_terminal_of_streams_without_isatty_or_closed():
    from toolkit.cli.output import is_terminal

    closed = io.StringIO()
    closed.close()
    assert is_terminal(object()) is False and is_terminal(closed) is False


def test_graphsurgeon_dtypes_numpy_has_no_name_for():
    import onnx_graphsurgeon as gs

    from toolkit.surgeon.fold_noops import numpy_dtype

    assert numpy_dtype(gs.Variable("v", dtype=np.float32)) == np.dtype(np.float32)
    assert numpy_dtype(gs.Variable("v", dtype=np.dtype("int8"))) == np.dtype("int8")
    assert numpy_dtype(gs.Variable("v", dtype=TensorProto.BFLOAT16)) is None  # (an int: the ONNX type number)
    assert numpy_dtype(gs.Variable("v")) is None


def _cost_model(dtype, values):
    value = helper.make_tensor("n", dtype, [1], values)
    g = helper.make_graph(
        [helper.make_node("Constant", [], ["n"], value=value), helper.make_node("ConstantOfShape", ["n"], ["y"])],
        "g", [], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def test_run_cost_reads_only_number_constants():
    from toolkit.core.graph.bounds import run_cost_refusal

    assert "ConstantOfShape" in run_cost_refusal(_cost_model(TensorProto.INT64, [10**13]))
    assert run_cost_refusal(_cost_model(TensorProto.STRING, [b"10000000000000"])) is None
    assert run_cost_refusal(_cost_model(TensorProto.FLOAT, [float("nan")])) is None
    bad = _cost_model(TensorProto.INT64, [10**13])
    bad.graph.node[0].attribute[0].t.data_type = 99  # a type onnx does not know: nothing known of it
    assert run_cost_refusal(bad) is None


def test_a_bug_in_the_validation_thread_surfaces(monkeypatch):
    """It became "validation could not run (...)", a skipped validation, before."""
    from toolkit.surgeon import validate

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])
    model = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y]))
    model.ir_version = 8

    monkeypatch.setattr(validate, "_foldable_tensors", lambda graph: None)  # (toolkit then iterates over None)
    check = validate.Validation(model, None)
    check.start()
    with pytest.raises(TypeError):
        check.prepare()


def test_a_bug_while_describing_a_constant_is_exit_70(cli, tmp_path, monkeypatch):
    """A value onnx cannot read is shown without values; toolkit's own bug there was hidden the
    same way, and is exit 70 now."""
    from toolkit.inspect import describe

    value = helper.make_tensor("v", TensorProto.FLOAT, [2], [1.0, 2.0])
    g = helper.make_graph([helper.make_node("Constant", [], ["c"], value=value, name="k")], "g", [],
                          [helper.make_tensor_value_info("c", TensorProto.FLOAT, [2])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    path = tmp_path / "m.onnx"
    path.write_bytes(m.SerializeToString())
    res = cli("inspect", "model", path, "--show", "layers", "attrs")
    assert res.code == 0 and "[1. 2.]" in res.out, res.err
    monkeypatch.setattr(describe, "values_text", lambda *a, **k: None)  # (toolkit then calls None.replace)
    res = cli("inspect", "model", path, "--show", "layers", "attrs")
    assert res.code == 70 and "AttributeError" in res.err, res.err

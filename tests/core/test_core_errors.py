"""toolkit.core.errors: a library's refusal is bad input; a bug in toolkit is exit 70, whatever its type."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from toolkit.core import errors


def _model(path):
    """x[1,3] + (c * c) -> y, c a Constant: the product is a value computed from constants only."""
    c = numpy_helper.from_array(np.full((1, 3), 300.0, np.float32), "cv")
    nodes = [
        helper.make_node("Constant", [], ["c"], name="const", value=c),
        helper.make_node("Mul", ["c", "c"], ["cc"], name="square"),
        helper.make_node("Add", ["x", "cc"], ["y"], name="add"),
    ]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    onnx.save(model, str(path))
    return str(path)


def test_python_errors_are_not_library_errors():
    assert not set(errors.PYTHON_ERRORS) & set(errors.LIBRARY_ERRORS)
    assert {AttributeError, KeyError, TypeError, IndexError} == set(errors.PYTHON_ERRORS)


def test_reraise_bug_tells_toolkit_frames_from_library_frames():
    try:
        errors.one_line(None, limit="x")  # a TypeError inside toolkit's own code
    except TypeError as exc:
        with pytest.raises(TypeError):
            errors.reraise_bug(exc)
    try:
        np.zeros(2)["a"]  # raised by numpy
    except IndexError as exc:
        errors.reraise_bug(exc)  # a library's refusal: not raised again


def test_a_bug_inside_a_graphsurgeon_step_is_exit_70_with_its_traceback(cli, tmp_path, monkeypatch):
    """An AttributeError in toolkit's code between onnx-graphsurgeon calls is a bug (exit 70), not
    'onnx-graphsurgeon cannot export this model' (exit 3)."""
    from toolkit.surgeon import extract

    model = _model(tmp_path / "m.onnx")
    monkeypatch.setattr(extract, "model_shell", lambda model: None)  # restore_model_fields(..., None) then fails
    out = tmp_path / "sub.onnx"
    res = cli("surgeon", "extract", model, "--outputs", "cc", "-o", out)
    assert res.code == 70 and "AttributeError" in res.err and "bug in toolkit" in res.err
    assert "Traceback" not in res.err and not out.exists()
    monkeypatch.setenv("TOOLKIT_DEBUG", "1")
    res = cli("surgeon", "extract", model, "--outputs", "cc", "-o", out)
    assert res.code == 70 and "Traceback" in res.err and "restore_model_fields" in res.err


def test_an_attribute_error_while_computing_constants_is_exit_70(cli, tmp_path, monkeypatch):
    """convert's range check computes constant-only values with ONNX-Runtime; an AttributeError there is
    not ONNX-Runtime refusing the subgraph (which skips the values), it ends the command as a bug."""
    import onnxruntime

    real = onnxruntime.InferenceSession

    def session(model, *args, **kwargs):
        if isinstance(model, bytes) and b"constants" in model:
            raise AttributeError("'NoneType' object has no attribute 'run'")
        return real(model, *args, **kwargs)

    monkeypatch.setattr(onnxruntime, "InferenceSession", session)
    out = tmp_path / "fp16.onnx"
    res = cli("convert", _model(tmp_path / "m.onnx"), "--fp-to-fp16", "-o", out)
    assert res.code == 70 and "AttributeError" in res.err, res.err
    assert not out.exists()


def test_a_bug_is_not_blamed_on_a_corrupt_model_an_earlier_command_read(cli, tmp_path, monkeypatch):
    """A process that runs several commands (a library user, a warm worker): when one of them hits a
    bug, the corrupt model a previous command read is not named as its cause."""
    from toolkit.surgeon import extract

    corrupt = tmp_path / "corrupt.onnx"  # the name of tensor 'cc' is not UTF-8
    corrupt.write_bytes(onnx.load(_model(tmp_path / "c.onnx")).SerializeToString().replace(b"cc", b"\xf8\xf8"))
    cli("inspect", "model", corrupt)
    model = _model(tmp_path / "m.onnx")
    monkeypatch.setattr(extract, "model_shell", lambda model: None)  # restore_model_fields(..., None) then fails
    res = cli("surgeon", "extract", model, "--outputs", "cc", "-o", tmp_path / "sub.onnx")
    assert res.code == 70 and "bug in toolkit" in res.err, res.err
    assert "corrupt" not in res.err

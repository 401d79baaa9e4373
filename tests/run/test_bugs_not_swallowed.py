"""A catch names what a library call raises: a bug in toolkit's own code under it (AttributeError,
KeyError, TypeError...) is never taken for a file it cannot read."""

import types

import pytest
from onnx import TensorProto, helper

from modelzoo import make_model, save, vi
from toolkit.core.compare import undefined
from toolkit.run import pipeline


def _cast_model(path):
    node = helper.make_node("Cast", ["x"], ["y"], to=TensorProto.INT32, name="cast")
    graph = helper.make_graph([node], "g", [vi("x", [2])], [vi("y", [2], TensorProto.INT32)])
    return save(make_model(graph), path)


def _streams(model):
    plan = types.SimpleNamespace(opts=types.SimpleNamespace(model=model))
    return pipeline.Streams(plan, [])


def test_the_casts_of_a_model_and_of_a_file_that_is_no_model(tmp_path):
    assert list(_streams(_cast_model(tmp_path / "m.onnx")).casts()) == ["y"]
    engine = tmp_path / "m.engine"
    engine.write_bytes(b"\x00not an onnx model\xff" * 10)
    assert _streams(str(engine)).casts() == {}


def test_a_bug_under_the_casts_is_not_taken_for_an_unreadable_model(tmp_path, monkeypatch):
    model = _cast_model(tmp_path / "m.onnx")

    def bug(_model):
        raise AttributeError("'NoneType' object has no attribute 'graph'")

    monkeypatch.setattr(undefined, "float_to_int_casts", bug)
    with pytest.raises(AttributeError):
        _streams(model).casts()


def test_a_bug_in_the_built_in_check_stops_the_reduce_with_exit_70(tmp_path, cli, monkeypatch):
    """A bug under ``debug reduce --compare``'s check (outside the run's own error boundary) is not
    a verdict on the model: before, every check 'failed otherwise' and the reduce wrote the
    unreduced model with exit 0."""
    from accuracy_models import save_pair
    from toolkit.reduce import accuracy

    models = save_pair(tmp_path)

    def bug(*_a, **_k):
        raise AttributeError("'CompareOptions' object has no attribute 'atol'")

    monkeypatch.setattr(accuracy, "deployed_options", bug)
    out = tmp_path / "reduced.onnx"
    res = cli("debug", "reduce", models["faulty"], "-o", out, "--compare", "onnxrt", "onnxrt",
              "--reference-model", models["clean"], "--iter-artifact", tmp_path / "artifact.onnx")
    assert res.code == 70 and "internal error" in res.err and "AttributeError" in res.err
    assert not out.exists()

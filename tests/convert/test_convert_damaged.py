"""A damaged model (a tensor whose stored data does not fill its dims, of any type) is refused by
`convert` before any work: exit 3, one line naming the tensor, nothing written. Before, only raw
float32 weights were measured: a damaged int64 weight reached the type check and was blamed on the
conversion (exit 1, "keep that node in fp32"), a damaged float16 weight was called mixed precision."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import modelzoo as mz
from toolkit.convert import fp16
from toolkit.core.errors import InputError


def _damaged(kind: str):
    """x[2,2] @ w -> m, then a node reading the damaged tensor 's' (its data one element short)."""
    w = numpy_helper.from_array(np.ones((2, 4), np.float32), "w")
    if kind == "int64":
        s = numpy_helper.from_array(np.array([2, 4], np.int64), "s")
        tail = [helper.make_node("Reshape", ["m", "s"], ["y"], name="reshape")]
    else:
        dtype = np.float16 if kind == "float16" else np.float32
        s = numpy_helper.from_array(np.ones((4,), dtype), "s")
        tail = [helper.make_node("Cast", ["s"], ["sc"], name="cast", to=TensorProto.FLOAT),
                helper.make_node("Add", ["m", "sc"], ["y"], name="add")]
    s.raw_data = s.raw_data[:len(s.raw_data) * (s.dims[0] - 1) // s.dims[0]]  # one element short
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"], name="mm")] + tail
    inits = [w, s]
    if kind == "constant":  # a float32 Constant node's value, not an initializer
        inits = [w]
        nodes.insert(0, helper.make_node("Constant", [], ["s"], name="const", value=s))
    graph = helper.make_graph(nodes, "g", [mz.vi("x", [2, 2])], [mz.vi("y", None)], inits)
    return mz.make_model(graph, opset=17)


@pytest.mark.parametrize("kind", ["int64", "float16", "constant"])
@pytest.mark.parametrize("flag", ["--fp-to-fp16", "--fp-to-bf16"])
def test_a_damaged_tensor_of_any_type_is_refused_before_any_work(cli, tmp_path, kind, flag):
    src = mz.save(_damaged(kind), tmp_path / "m.onnx")
    out = tmp_path / "o.onnx"
    r = cli("convert", src, flag, "-o", out)
    assert r.code == 3, r.err
    held = "1 value(s) but its dims [2] need 2" if kind == "int64" else "3 value(s) but its dims [4] need 4"
    assert f"error: the model's data is damaged: tensor 's' holds {held}" in r.err
    assert "nothing was converted" in r.err and "keep-fp32" not in r.err
    assert r.err.count("error:") == 1 and "Traceback" not in r.err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]


def test_the_library_refuses_it_too():
    with pytest.raises(InputError, match="tensor 's' holds 3 value"):
        fp16.convert(_damaged("float16"), if_mixed="keep")

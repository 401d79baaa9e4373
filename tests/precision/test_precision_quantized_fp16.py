"""``debug precision`` on models quantized in integer ops (``quantize_dynamic`` with a dequantized
embedding, ``quantize_static`` in QOperator format): a note and the fp16 node search, as
docs/quantization.md says, not an error."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import modelzoo as mz


def _embedding_model():
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.standard_normal((50, 16)).astype(np.float32), "emb"),
        numpy_helper.from_array((rng.standard_normal((3, 16)) * 0.1).astype(np.float32), "pos"),
        numpy_helper.from_array((rng.standard_normal((16, 8)) * 0.3).astype(np.float32), "w"),
    ]
    nodes = [
        helper.make_node("Gather", ["emb", "ids"], ["e"], name="gather"),
        helper.make_node("Add", ["e", "pos"], ["ep"], name="add_pos"),
        helper.make_node("MatMul", ["ep", "w"], ["y"], name="mm"),
    ]
    graph = helper.make_graph(nodes, "emb", [mz.vi("ids", [2, 3], TensorProto.INT64)], [mz.vi("y", [2, 3, 8])], inits)
    return mz.make_model(graph)


def _conv_model():
    rng = np.random.default_rng(1)
    inits = [
        numpy_helper.from_array((rng.standard_normal((4, 3, 3, 3)) * 0.3).astype(np.float32), "wc"),
        numpy_helper.from_array(np.zeros(4, np.float32), "bc"),
        numpy_helper.from_array((rng.standard_normal((64, 8)) * 0.3).astype(np.float32), "w2"),
        numpy_helper.from_array(np.array([1, 64], np.int64), "shape"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "wc", "bc"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("Reshape", ["r", "shape"], ["f"], name="flat"),
        helper.make_node("MatMul", ["f", "w2"], ["m"], name="mm"),
        helper.make_node("Exp", ["m"], ["y"], name="exp"),
    ]
    graph = helper.make_graph(nodes, "cnn", [mz.vi("x", [1, 3, 4, 4])], [mz.vi("y", [1, 8])], inits)
    return mz.make_model(graph)


def test_quantize_dynamic_with_a_dequantized_embedding(cli, tmp_path):
    from onnxruntime.quantization import QuantType, quantize_dynamic

    src = mz.save(_embedding_model(), tmp_path / "f.onnx")
    dyn = tmp_path / "dyn.onnx"
    quantize_dynamic(src, str(dyn), weight_type=QuantType.QInt8)
    assert "DequantizeLinear" in {n.op_type for n in onnx.load(str(dyn)).graph.node}
    res = cli("debug", "precision", dyn, "--atol", "0.05", "-o", tmp_path / "mixed.onnx")
    assert res.code == 0, res.err
    assert "quantized in integer ops (DynamicQuantizeLinear, MatMulInteger)" in res.err and "error:" not in res.err
    assert "Searching" in res.err and (tmp_path / "mixed.onnx").exists()


def test_qoperator_model(cli, tmp_path):
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.sets = iter([{"x": np.random.default_rng(i).random((1, 3, 4, 4), dtype=np.float32)} for i in range(4)])

        def get_next(self):
            return next(self.sets, None)

    src = mz.save(_conv_model(), tmp_path / "f.onnx")
    qop = tmp_path / "qop.onnx"
    quantize_static(src, str(qop), Reader(), quant_format=QuantFormat.QOperator)
    ops = {n.op_type for n in onnx.load(str(qop)).graph.node}
    assert {"QLinearConv", "QLinearMatMul", "QuantizeLinear"} <= ops
    res = cli("debug", "precision", qop, "--json")
    assert res.code == 0, res.err
    assert "quantized in integer ops (QLinearConv, QLinearMatMul)" in res.err and "error:" not in res.err
    assert "Searching" in res.err  # the Exp after the DequantizeLinear is searched

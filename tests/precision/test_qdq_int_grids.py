"""The integer range of every type a Q/DQ pair can carry: int32 biases (onnxruntime's quantizer
stores every Conv bias so), int16/uint16, int4/uint4; a float8 grid is no integer range."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import modelzoo as mz
from toolkit.quant import qdq
from toolkit.quant import stats as qdq_stats

RNG = np.random.default_rng(3)
BIAS = (RNG.standard_normal(8) * 0.2).astype(np.float32)


def _stored(elem: int, values: np.ndarray, scale: float, zero: int = 0):
    """(initializers, DQ node) of a weight stored as ``elem`` integers (``values`` quantized with ``scale``)."""
    q = np.clip(np.round(values / scale) + zero, *qdq._INT_RANGES[elem]).astype(np.int64)
    inits = [helper.make_tensor("w_q", elem, list(values.shape), q.ravel().tolist()),
             numpy_helper.from_array(np.array(scale, np.float32), "w_scale"),
             helper.make_tensor("w_zp", elem, [], [zero])]
    return inits, helper.make_node("DequantizeLinear", ["w_q", "w_scale", "w_zp"], ["w"], name="w_dq")


def _pair(elem: int, values: np.ndarray, scale: float, zero: int = 0):
    inits, dq = _stored(elem, values, scale, zero)
    add = helper.make_node("Add", ["x", "w"], ["y"], name="add")
    shape = list(values.shape)
    graph = helper.make_graph([dq, add], "g", [mz.vi("x", shape)], [mz.vi("y", shape)], inits)
    model = mz.make_model(graph, opset=21, ir_version=10)
    float_graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"], name="add")], "f", [mz.vi("x", shape)],
                                    [mz.vi("y", shape)], [numpy_helper.from_array(values, "w")])
    pairs = qdq.find_pairs(model, weights=True, float_model=mz.make_model(float_graph, opset=21, ir_version=10))
    return model, pairs


def test_an_int32_bias_is_measured_on_the_int32_range():
    scale = 1.2e-5  # (input scale times weight scale: the bias's ints reach ~1e4, far past 255)
    _, pairs = _pair(TensorProto.INT32, BIAS, scale)
    (pair,) = pairs
    assert (pair.qmin, pair.qmax) == (-(2 ** 31), 2 ** 31 - 1)
    st = qdq_stats.weight_stats(pair, pair.float_value)
    assert st.clipped == 0 and st.local_steps <= 0.5 + 1e-3
    truth = 20 * np.log10(np.linalg.norm(BIAS) / np.linalg.norm(BIAS - qdq.fake_quantize(pair, BIAS)))
    assert st.local_sqnr == pytest.approx(truth, abs=0.01) and st.local_sqnr > 60
    assert not any(r.startswith("clipping") for r in st.reasons), st.reasons


@pytest.mark.parametrize("elem, lo, hi", [(TensorProto.INT16, -32768, 32767), (TensorProto.UINT16, 0, 65535),
                                          (TensorProto.INT4, -8, 7), (TensorProto.UINT4, 0, 15),
                                          (TensorProto.INT8, -128, 127), (TensorProto.UINT8, 0, 255)])
def test_every_integer_type_has_its_own_range(elem, lo, hi):
    zero = 0 if lo < 0 else (hi + 1) // 2
    model, pairs = _pair(elem, BIAS, float(np.abs(BIAS).max()) / (hi - zero), zero)
    (pair,) = pairs
    assert (pair.qmin, pair.qmax) == (lo, hi)
    assert qdq_stats.weight_stats(pair, pair.float_value).clipped == 0


def test_a_float8_grid_makes_no_pair_with_a_made_up_range():
    inits = [helper.make_tensor("w_q", TensorProto.FLOAT8E4M3FN, [8], BIAS.tolist()),
             numpy_helper.from_array(np.array(1.0, np.float32), "w_scale"),
             helper.make_tensor("w_zp", TensorProto.FLOAT8E4M3FN, [], [0.0])]
    dq = helper.make_node("DequantizeLinear", ["w_q", "w_scale", "w_zp"], ["w"], name="w_dq")
    q = helper.make_node("QuantizeLinear", ["x", "w_scale", "w_zp"], ["xq"], name="x_q")
    dq_x = helper.make_node("DequantizeLinear", ["xq", "w_scale", "w_zp"], ["xd"], name="x_dq")
    add = helper.make_node("Add", ["xd", "w"], ["y"], name="add")
    graph = helper.make_graph([dq, q, dq_x, add], "g", [mz.vi("x", [8])], [mz.vi("y", [8])], inits)
    model = mz.make_model(graph, opset=21, ir_version=10)
    onnx.checker.check_model(model)
    float_graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "f", [mz.vi("x", [8])],
                                    [mz.vi("y", [8])], [numpy_helper.from_array(BIAS, "w")])
    assert qdq.find_pairs(model, weights=True, float_model=mz.make_model(float_graph, opset=21, ir_version=10)) == []


def test_a_value_half_a_step_past_the_grid_is_not_clipped():
    """On an int16 grid of step 1/32767.5 the top is 32767 steps: 1.0 lies half a step past it (a tie,
    which float64 puts a few millionths of a step beyond) and is quantized to the top with half a step
    of error, as any rounding: it is not clipped; 1.01 is."""
    import numpy as np
    import onnxruntime as ort
    from onnx import helper, numpy_helper

    import modelzoo as mz
    from toolkit.quant import qdq
    from toolkit.quant import stats as qdq_stats

    step = np.float32(1 / 32767.5)
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], name="xq"),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], name="xdq")]
    inits = [numpy_helper.from_array(np.array(step, np.float32), "s"),
             numpy_helper.from_array(np.array(0, np.int16), "z")]
    model = mz.make_model(helper.make_graph(nodes, "g", [mz.vi("x", [4])], [mz.vi("y", [4])], inits), opset=21)
    run = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    acc = qdq_stats.PairAccumulator(qdq.find_pairs(model)[0])
    x = np.array([1.0, 1.0, 0.5, -1.0], np.float32)
    acc.add(x, run.run(None, {"x": x})[0])
    assert acc.clipped == 0 and acc.steps <= 0.5
    x = np.array([1.01, 0.0, 0.0, 0.0], np.float32)
    acc.add(x, run.run(None, {"x": x})[0])
    assert acc.clipped == 1

"""The emulation is the written model: what ``run --fp16`` and ``debug precision`` emulate for a set of
nodes kept in fp32 (:func:`toolkit.convert.emulate.emulate`) computes exactly what the model
``convert --keep-fp32`` writes for that set computes, run in ONNX-Runtime with its reduced tensors
stored as it stores them (:func:`toolkit.convert.emulate.emulate_mixed`, the figure ``convert``'s
check reports): equal element for element, NaNs at the same places, on every output.

The corpus is every fp16 test model of tests/fp16_models.py and tests/modelzoo.py, in fp16 and
bf16, each with nothing kept, everything kept, every single node kept and seeded random sets."""

from __future__ import annotations

import random

import numpy as np
import onnxruntime as ort
import pytest

import fp16_models as fm
import modelzoo as mz
from toolkit.convert import fp16
from toolkit.core.inputs import generate_inputs
from toolkit.core.io.model import graph_io_meta

CORPUS = {
    "layernorm_overflow": fm.layernorm_overflow,
    "shape_resize": fm.shape_resize,
    "if_loop": fm.if_loop,
    "shared_and_kept_output": fm.shared_and_kept_output,
    "ocr_detector": lambda: fm.ocr_detector(32),
    "offset_cancellation": fm.offset_cancellation,
    "conv_block": lambda: fm.conv_block(17),
    "shape_decided_if": lambda: fm.shape_decided_if(False),
    "nested_shape_decided_if": lambda: fm.shape_decided_if(True),
    "constant_weights_past_fp16": fm.constant_weights_past_fp16,
    "overflow_before_int_cast": fm.overflow_before_int_cast,
    "int_cast_of_a_kept_output": fm.int_cast_of_a_kept_output,
    "seed_example": lambda: mz.seed_example((1, 3, 8, 8)),
    "chain": mz.chain,
    "branch": mz.branch,
    "with_constant": mz.with_constant,
    "with_if": mz.with_if,
    "dynamic_batch": mz.dynamic_batch,
}
SINGLES_UP_TO = 16  # nodes: every single node is kept in turn (larger models: random sets only)


def _run(model, feed):
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    wanted = {i.name for i in sess.get_inputs()}
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, {k: v for k, v in feed.items() if k in wanted})))


def _feed(model):
    metas, _ = graph_io_meta(model)
    feed = generate_inputs(metas, iterations=1, seed=3)[0][0]
    for name, value in feed.items():  # values that overflow fp16 and bf16's rounding in places
        if value.dtype == np.float32:
            feed[name] = np.linspace(-120.3, 119.9, value.size, dtype=np.float32).reshape(value.shape)
    return feed


def _keep_sets(model):
    names = [n.name for n in fp16.iter_nodes(model) if n.op_type != "Constant"]
    rng = random.Random(0)
    sets = [[], names] + [rng.sample(names, max(1, len(names) // k)) for k in (2, 3, 4)]
    if len(names) <= SINGLES_UP_TO:
        sets += [[n] for n in names]
    return sets


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("name", sorted(CORPUS))
def test_the_emulation_computes_what_the_written_model_computes(name, dtype):
    model = CORPUS[name]()
    fp16.name_nodes(model)
    feed = _feed(model)
    for keep in _keep_sets(model):
        emulated = _run(fp16.emulate(model, keep, dtype=dtype).model, feed)
        written = fp16.convert(model, keep, dtype=dtype).model
        stored = _run(fp16.emulate_mixed(written).model, feed)
        assert set(emulated) == set(stored)
        for out, value in emulated.items():
            assert value.dtype == stored[out].dtype and value.shape == stored[out].shape, (keep, out)
            assert np.array_equal(value, stored[out], equal_nan=value.dtype.kind == "f"), (
                f"{name} ({dtype}) with {keep} kept in fp32: output {out} differs: "
                f"{value.ravel()[:6]} emulated, {stored[out].ravel()[:6]} written"
            )


def test_a_float_to_int_cast_reads_a_kept_value_in_float32():
    """The converted model feeds a Cast to int32 the float32 value of a kept node, and the emulation
    does the same (it used to round it to fp16: inf past 65504, an undefined integer)."""
    model = fm.int_cast_of_a_kept_output()
    feed = {"x": np.linspace(60, 100, 8, dtype=np.float32).reshape(1, 8)}
    written = fp16.convert(model, ["up"])
    assert written.kept["to_int"] == fp16.REASON_CAST_OUT
    want = (feed["x"] * 1000).astype(np.int32)
    for m in (fp16.emulate(model, ["up"]).model, fp16.emulate_mixed(written.model).model, written.model):
        np.testing.assert_array_equal(_run(m, feed)["yi"], want)

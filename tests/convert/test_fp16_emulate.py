"""fp16 storage emulation (toolkit.convert.fp16.emulate) against a numpy reference."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

import fp16_models as fm
import modelzoo as mz
from toolkit.convert import fp16


def ort_run(model, feed, outputs=None):
    so = ort.SessionOptions()
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    names = outputs or [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, feed)))


def marked(model, names):
    """``model`` with ``names`` as its outputs (what ``--onnx-outputs`` does before emulating)."""
    from toolkit.core.graph.layerwise import set_outputs

    set_outputs(model, names)
    return model


def r16(a):
    """fp16 storage: round to nearest fp16 (overflow -> inf, underflow -> subnormal/0)."""
    with np.errstate(over="ignore"):
        return np.asarray(a, np.float32).astype(np.float16).astype(np.float32)


def elementwise_model():
    """x -> Mul(w) -> Add(b) -> Pow(2) -> Sub(c) -> Mul(tiny) -> y, and Exp(x) -> e."""
    w = np.array([[1.0, 300.0, 0.1, -2.5, 1e-5, 1000.0]], np.float32)
    b = np.array([[0.3333333, 1.0, 1e-5, 0.7, 2.0, 7.0]], np.float32)
    c = np.array([[1.0001, 0.0, 3.14159265, -1.0, 100000.0, 0.5]], np.float32)  # 1e5: past fp16
    tiny = np.array([[1e-6, 1e-4, 1e-7, 3e-8, 1.0, 1e-3]], np.float32)
    inits = [numpy_helper.from_array(v, k) for k, v in dict(w=w, b=b, c=c, tiny=tiny, two=np.float32(2)).items()]
    nodes = [
        helper.make_node("Mul", ["x", "w"], ["m"], name="mul"),
        helper.make_node("Add", ["m", "b"], ["a"], name="add"),
        helper.make_node("Pow", ["a", "two"], ["p"], name="pow"),
        helper.make_node("Sub", ["p", "c"], ["s"], name="sub"),
        helper.make_node("Mul", ["s", "tiny"], ["y"], name="scale_down"),
        helper.make_node("Exp", ["x"], ["e"], name="exp"),
    ]
    graph = helper.make_graph(
        nodes, "elementwise", [mz.vi("x", [1, 6])], [mz.vi("y", [1, 6]), mz.vi("e", [1, 6])], inits
    )
    return mz.make_model(graph), dict(w=w, b=b, c=c, tiny=tiny)


def clamp16(a):
    """Weights as the conversion stores them: clamped to +-65504, tiny values to +-2**-24."""
    a = np.asarray(a, np.float32)
    a = np.where((a > 0) & (a < 2**-24), 2**-24, a)
    a = np.where((a < 0) & (a > -(2**-24)), -(2**-24), a)
    return r16(np.clip(a, -65504, 65504))


def numpy_reference(x, p, keep=()):
    """The same graph in numpy: a converted node reads fp16 values (weights as the conversion
    stores them, tensors rounded) and its output is stored in fp16; a kept node reads and
    writes fp32."""
    k = set(keep)

    def read(consumer, v, weight=False):
        if consumer in k:
            return v
        return clamp16(v) if weight else r16(v)

    def out(producer, v):
        return v if producer in k else r16(v)

    with np.errstate(over="ignore", invalid="ignore"):
        m = out("mul", read("mul", x) * read("mul", p["w"], True))
        a = out("add", read("add", m) + read("add", p["b"], True))
        pw = out("pow", read("pow", a) * read("pow", a))
        s = out("sub", read("sub", pw) - read("sub", p["c"], True))
        y = out("scale_down", read("scale_down", s) * read("scale_down", p["tiny"], True))
        e = out("exp", np.exp(read("exp", x)))
    return dict(m=m, a=a, p=pw, s=s, y=y, e=e)


X = np.array([[1.0001, 1.7, 65.0, 3.0, 0.001, 12.0]], np.float32)


def test_every_tensor_matches_numpy_fp16_reference():
    model, params = elementwise_model()
    names = ["m", "a", "p", "s", "y", "e"]
    emu = fp16.emulate(marked(model, names), auto_keep=False)
    got = ort_run(emu.model, {"x": X}, names)  # tensors keep their names
    ref = numpy_reference(X, params)
    for name in names:
        np.testing.assert_array_equal(got[name], ref[name], err_msg=name)
    # what it shows: overflow past 65504 -> inf, underflow -> 0, rounding of every tensor
    assert np.isinf(got["p"][0, 1]) and np.isinf(got["y"][0, 1])  # (1.7*300+1)^2 = 2.6e5
    assert got["e"][0, 2] == np.inf  # exp(65) is past fp16 (fine in fp32)
    assert got["s"][0, 4] == -65504  # the weight 1e5 is stored clamped to 65504 (as converted)
    plain = ort_run(elementwise_model()[0], {"x": X})
    assert np.isfinite(plain["y"]).all() and np.isfinite(plain["e"]).all()
    # underflow: 0.001 * 1e-5 is below half of fp16's smallest subnormal
    assert got["m"][0, 4] == 0 and np.float32(0.001) * np.float32(1e-5) != 0


def test_rounding_of_inputs_and_subnormals():
    model = mz.chain(1, shape=(1, 4), ops=["Relu"])
    emu = fp16.emulate_fp16(model, auto_keep=False)
    x = np.array([[1.0001, 2049.0, 1e-6, 70000.0]], np.float32)
    y = ort_run(emu, {"x": x})["y"]
    np.testing.assert_array_equal(y, r16(x))
    assert y[0, 0] == 1.0 and y[0, 1] in (2048.0, 2050.0) and 0 < y[0, 2] < 1e-6 * 1.1 and np.isinf(y[0, 3])


@pytest.mark.parametrize("keep", [["pow"], ["pow", "sub"], ["mul", "exp"]])
def test_kept_nodes_are_not_rounded(keep):
    model, params = elementwise_model()
    names = ["m", "a", "p", "s", "y", "e"]
    emu = fp16.emulate(marked(model, names), keep, auto_keep=False)
    assert set(emu.kept) == set(keep)
    got = ort_run(emu.model, {"x": X}, names)
    ref = numpy_reference(X, params, keep)
    for name in names:
        np.testing.assert_allclose(got[name], ref[name], rtol=1e-6, err_msg=name)
    if "pow" in keep:
        assert np.isfinite(got["p"]).all()  # fp32 output, no overflow


def test_layernorm_overflow_shown_and_fixed_by_keeping_two_nodes():
    model = fm.layernorm_overflow()
    feed = fm.ln_input()
    ref = ort_run(model, feed)["y"]
    full = ort_run(fp16.emulate_fp16(model), feed)["y"]
    assert np.abs(full - ref).max() > 0.5  # the overflow
    for partial in (["square"], ["variance"]):
        err = np.abs(ort_run(fp16.emulate_fp16(model, partial), feed)["y"] - ref).max()
        assert err > 0.5, partial
    fixed = ort_run(fp16.emulate_fp16(model, fm.LN_MUST_KEEP), feed)["y"]
    assert np.abs(fixed - ref).max() < 0.01
    # the converted model (ORT CPU) hides the overflow: why emulation exists
    conv = ort_run(fp16.convert_to_fp16(model), feed)["y"]
    assert np.abs(conv - ref).max() < 0.01


def test_emulation_of_subgraph_and_shape_models_runs():
    model = fm.if_loop()
    feed = {"x": np.array([[0.5, 1.0001, -3.0, 70000.0]], np.float32), "cond": np.array(True)}
    got = ort_run(fp16.emulate_fp16(model), feed)["y"]
    # relu -> r16; then: *2 -> r16; loop acc = r16(r16(acc*0.5) + r) three times
    r = r16(np.maximum(feed["x"], 0))
    acc = r16(r * 2)
    for _ in range(3):
        acc = r16(r16(acc * 0.5) + r)
    np.testing.assert_array_equal(got, np.abs(acc))
    shp = fm.shape_resize()
    x = np.random.default_rng(0).standard_normal((1, 3, 6, 10)).astype(np.float32)
    ref = ort_run(shp, {"x": x})["y"]
    np.testing.assert_allclose(ort_run(fp16.emulate_fp16(shp), {"x": x})["y"], ref, atol=5e-3)


def _cases():
    x_img = np.random.default_rng(0).random((1, 3, 64, 64)).astype(np.float32)
    return [
        ("ln", fm.layernorm_overflow, fm.ln_input(), [[], ["square"], fm.LN_MUST_KEEP]),
        (
            "shape_resize",
            fm.shape_resize,
            {"x": np.random.default_rng(0).standard_normal((1, 3, 6, 10)).astype(np.float32)},
            [[]],
        ),
        (
            "if_loop",
            fm.if_loop,
            {"x": np.array([[0.5, 1.0001, -3.0, 300.0]], np.float32), "cond": np.array(True)},
            [[], ["body_add"], ["loop"]],
        ),
        ("shared", fm.shared_and_kept_output, {"x": np.linspace(-2, 2, 8, dtype=np.float32).reshape(1, 8)}, [[], ["mul"]]),
        ("ocr", lambda: fm.ocr_detector(size=64), {"x": x_img}, [[]]),
    ]


@pytest.mark.parametrize("case", _cases(), ids=lambda c: c[0])
def test_emulating_the_fp32_model_equals_emulating_its_conversion(case):
    """emulate(model, keep) rounds exactly the tensors convert_to_fp16(model, keep) stores in
    fp16: emulating the converted (mixed) model gives the same bits."""
    _name, build, feed, keeps = case
    model = build()
    for keep in keeps:
        a = ort_run(fp16.emulate_fp16(model, keep), feed)
        mixed = fp16.convert_to_fp16(model, keep)
        assert fp16.has_fp16(mixed) and not fp16.has_fp16(model)
        b = ort_run(fp16.emulate_any(mixed).model, feed)
        for k in a:
            np.testing.assert_array_equal(a[k], b[k], err_msg=f"{keep} {k}")

"""`surgeon sanitize --optimize` beyond ONNX-Runtime's basic level: Slice-of-Slice merged,
per-channel Add and BatchNormalization folded into ConvTranspose, Reshape targets that copy
a dynamic dim with 0 made constant. Each rewrite must give the same outputs and must leave
alone what it cannot prove. Models built here."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_graphsurgeon as gs
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import modelzoo
from toolkit.surgeon import fusions
from toolkit.surgeon.optimize import optimize
from toolkit.surgeon.sanitize import sanitize


def _c(name, values, dtype=np.int64):
    return numpy_helper.from_array(np.asarray(values, dtype), name)


def _run(model, feed):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, feed)))


def _same(a, b, feed, rtol=1e-5, atol=1e-6):
    want, got = _run(a, feed), _run(b, feed)
    assert set(want) == set(got)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=rtol, atol=atol)


def _ops(model):
    return [n.op_type for n in model.graph.node]


# ---------------------------------------------------------------------- Slice of Slice


def slices(second_axes=(-1,), inner_read_twice=False, with_steps=True):
    """x:[N,6,8] -> Slice(axis 1, 1:5) -> Slice(``second_axes``, 2:7 step 2) -> Relu -> y."""
    inner_in = ["x", "s1", "e1", "a1"] + (["st1"] if with_steps else [])
    nodes = [
        helper.make_node("Slice", inner_in, ["m"], name="inner"),
        helper.make_node("Slice", ["m", "s2", "e2", "a2", "st2"], ["o"], name="outer"),
        helper.make_node("Relu", ["o"], ["y"], name="relu"),
    ]
    outs = [modelzoo.vi("y", None)]
    if inner_read_twice:
        nodes.append(helper.make_node("Neg", ["m"], ["z"], name="other_reader"))
        outs.append(modelzoo.vi("z", None))
    inits = [_c("s1", [1]), _c("e1", [5]), _c("a1", [1]), _c("st1", [1]),
             _c("s2", [2]), _c("e2", [7]), _c("a2", list(second_axes)), _c("st2", [2])]
    graph = helper.make_graph(nodes, "slices", [modelzoo.vi("x", ["N", 6, 8])], outs, inits)
    return modelzoo.make_model(graph, opset=17)


@pytest.mark.parametrize("with_steps", [True, False])
def test_a_slice_of_a_slice_on_other_axes_becomes_one(with_steps):
    model = slices(with_steps=with_steps)
    out = optimize(model)
    assert _ops(out).count("Slice") == 1
    feed = {"x": np.arange(2 * 48, dtype=np.float32).reshape(2, 6, 8) - 40}
    _same(model, out, feed)


@pytest.mark.parametrize("kw", [{"second_axes": (1,)}, {"second_axes": (-2,)}, {"inner_read_twice": True}])
def test_slices_on_the_same_axis_or_with_a_shared_inner_result_stay_two(kw):
    model = slices(**kw)
    graph = gs.import_onnx(model)
    assert fusions.merge_slices(gs, graph) == 0


# ---------------------------------------------------------------------- into ConvTranspose


def deconv(group=1, bias=True, add_shape=(1, 4, 1, 1), bn=True, add=True, expose=False):
    """x:[1,4,5,5] -> ConvTranspose(stride 2, ``group``) [-> Add const] [-> BatchNorm] -> Relu -> y."""
    rng = np.random.default_rng(7)
    c_in, c_out = 4, 4
    w = rng.standard_normal((c_in, c_out // group, 3, 3)).astype(np.float32)
    inits = [numpy_helper.from_array(w, "w")]
    ins = ["x", "w"]
    if bias:
        inits.append(numpy_helper.from_array(rng.standard_normal(c_out).astype(np.float32), "b"))
        ins.append("b")
    nodes = [helper.make_node("ConvTranspose", ins, ["ct"], name="deconv", strides=[2, 2], group=group)]
    last = "ct"
    if add:
        inits.append(numpy_helper.from_array(rng.standard_normal(add_shape).astype(np.float32), "shift"))
        nodes.append(helper.make_node("Add", [last, "shift"], ["added"], name="add"))
        last = "added"
    if bn:
        for name, lo in (("gamma", 0.5), ("beta", -1), ("mean", -1), ("var", 0.1)):
            inits.append(numpy_helper.from_array((rng.random(c_out) * 2 + lo).astype(np.float32), name))
        nodes.append(helper.make_node("BatchNormalization", [last, "gamma", "beta", "mean", "var"], ["bn"],
                                      name="bn", epsilon=1e-3))
        last = "bn"
    nodes.append(helper.make_node("Relu", [last], ["y"], name="relu"))
    outs = [modelzoo.vi("y", None)] + ([modelzoo.vi("ct", None)] if expose else [])
    graph = helper.make_graph(nodes, "deconv", [modelzoo.vi("x", [1, 4, 5, 5])], outs, inits)
    return modelzoo.make_model(graph, opset=17)


@pytest.mark.parametrize("kw", [{}, {"group": 2}, {"bias": False}, {"add": False}, {"bn": False},
                                {"add_shape": (4, 1, 1)}, {"add_shape": (1,)}])
def test_add_and_batchnorm_fold_into_the_conv_transpose(kw):
    model = deconv(**kw)
    out = optimize(model)
    assert _ops(out) == ["ConvTranspose", "Relu"]
    feed = {"x": np.random.default_rng(1).standard_normal((1, 4, 5, 5)).astype(np.float32)}
    _same(model, out, feed, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("kw", [{"add_shape": (1, 4, 1, 11)}, {"expose": True}])
def test_an_add_varying_in_space_or_a_conv_transpose_read_elsewhere_is_kept(kw):
    model = deconv(bn=False, **kw)
    graph = gs.import_onnx(model)
    assert fusions.fold_into_conv_transpose(gs, graph) == 0


# ---------------------------------------------------------------------- Reshape targets


def reshape_copying_batch():
    """x:[N,T,24] -> Relu -> Reshape(Concat([0], Shape(x)[1:2], [2, 12])): the computed entry can
    only be T once the 0 copies N, so --optimize makes the target [0, -1, 2, 12]."""
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("Shape", ["x"], ["s"], name="shape"),
        helper.make_node("Slice", ["s", "one", "two"], ["t"], name="time"),
        helper.make_node("Concat", ["zero", "t", "rest"], ["target"], name="target", axis=0),
        helper.make_node("Reshape", ["r", "target"], ["y"], name="reshape"),
    ]
    inits = [_c("one", [1]), _c("two", [2]), _c("zero", [0]), _c("rest", [2, 12])]
    graph = helper.make_graph(nodes, "rs", [modelzoo.vi("x", ["N", "T", 24])],
                              [modelzoo.vi("y", ["N", "T", 2, 12])], inits)
    return modelzoo.make_model(graph, opset=17)


def test_a_reshape_target_that_copies_a_dynamic_dim_is_made_constant_by_optimize_only():
    model = reshape_copying_batch()
    folded, _ = sanitize(model, fold_constants=True)
    assert "Shape" in _ops(folded)  # folding alone keeps it (an empty batch would differ)
    out = optimize(folded)
    assert _ops(out) == ["Relu", "Reshape"]
    target = numpy_helper.to_array(next(t for t in out.graph.initializer if t.name == out.graph.node[1].input[1]))
    assert target.tolist() == [0, -1, 2, 12]
    for n, t in ((1, 3), (2, 5)):
        _same(model, out, {"x": np.arange(n * t * 24, dtype=np.float32).reshape(n, t, 24) - 30})


def test_optimize_says_what_it_added(tmp_path, cli):
    path = modelzoo.save(deconv(), tmp_path / "m.onnx")
    res = cli("surgeon", "sanitize", path, "-o", tmp_path / "o.onnx", "--fold-constants", "--optimize")
    assert res.code == 0, res.err
    assert "2 node(s) folded into ConvTranspose" in res.err
    assert all(n.domain in ("", "ai.onnx") for n in onnx.load(str(tmp_path / "o.onnx")).graph.node)
    assert TensorProto.FLOAT == onnx.load(str(tmp_path / "o.onnx")).graph.output[0].type.tensor_type.elem_type


def test_symbolic_inference_runs_only_for_a_computed_target_on_a_small_graph(monkeypatch):
    """Symbolic shape inference costs about 2 ms a node: the rules after ONNX-Runtime's pass ask
    for it when a Reshape target is still computed and the graph is within the limit."""
    from toolkit.surgeon import optimize as optimize_module

    calls = []
    real = optimize_module._symbolic_shapes
    monkeypatch.setattr(optimize_module, "_symbolic_shapes", lambda m: calls.append(1) or real(m))
    folded, _ = sanitize(reshape_copying_batch(), fold_constants=True)
    done, out = optimize_module._after_optimizer(folded, folded)
    assert calls == [1] and done == {"Reshape target(s) made constant": 1} and "Shape" not in _ops(out)
    optimize_module._after_optimizer(deconv(), deconv())  # no computed Reshape target
    assert calls == [1]
    monkeypatch.setattr(optimize_module, "SYMBOLIC_SHAPES_MAX_NODES", 1)
    optimize_module._after_optimizer(folded, folded)
    assert calls == [1]


def test_optimize_works_on_a_model_with_external_data(tmp_path, cli):
    """Weights in a separate file: ONNX-Runtime's basic level still fuses Conv + BatchNormalization
    (it used to be skipped: ONNX-Runtime looked for the weights it keeps as they are beside its
    temporary output)."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.normal(0, 1, (16, 3, 3, 3)).astype(np.float32), "W"),
        *(numpy_helper.from_array(rng.uniform(0.5, 1.5, 16).astype(np.float32), n) for n in ("s", "b", "m", "v")),
        numpy_helper.from_array(rng.normal(0, 1, (1, 16, 64, 320)).astype(np.float32), "k"),  # stays as it is, on disk
    ]
    nodes = [
        helper.make_node("Conv", ["x", "W"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "s", "b", "m", "v"], ["n"]),
        helper.make_node("Mul", ["n", "k"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 64, 320])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 64, 320])], inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    src = tmp_path / "m.onnx"
    onnx.save(onnx.ModelProto.FromString(model.SerializeToString()), str(src), save_as_external_data=True,
              location="m.onnx.data", size_threshold=0)
    out = tmp_path / "o.onnx"
    res = cli("surgeon", "sanitize", src, "-o", out, "--optimize")
    assert res.code == 0, res.err
    assert "skipped" not in res.err and "nodes 3 -> 2" in res.err, res.err
    got = onnx.load(str(out))
    assert _ops(got) == ["Conv", "Mul"]
    _same(model, got, {"x": rng.normal(0, 1, (1, 3, 64, 320)).astype(np.float32)}, rtol=1e-4, atol=1e-5)


def test_symbolic_shape_inference_writes_nothing_in_the_current_folder(tmp_path, monkeypatch):
    """ONNX-Runtime's symbolic inference, left with an unknown shape (a com.microsoft Inverse), saves
    sym_shape_infer_temp.onnx and a data file into the current folder: --optimize and extract must not."""
    from toolkit.surgeon.optimize import _symbolic_shapes

    inits = [_c("i0", 0), _c("ax", [0]), _c("c16", [16])]
    nodes = [
        helper.make_node("Inverse", ["x"], ["inv"], domain="com.microsoft"),
        helper.make_node("Shape", ["inv"], ["s"]),
        helper.make_node("Gather", ["s", "i0"], ["n"], axis=0),
        helper.make_node("Unsqueeze", ["n", "ax"], ["n1"]),
        helper.make_node("Concat", ["n1", "c16"], ["t"], axis=0),
        helper.make_node("Reshape", ["inv", "t"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits,
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    model = helper.make_model(graph, opset_imports=opsets, ir_version=8)
    monkeypatch.chdir(tmp_path)
    assert _symbolic_shapes(model) == {}
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    complete = helper.make_model(
        helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]),
        opset_imports=[helper.make_opsetid("", 17)], ir_version=8,
    )
    assert _symbolic_shapes(complete)["y"] == (None, 4)

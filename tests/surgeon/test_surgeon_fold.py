"""`surgeon sanitize --fold-constants` never writes a broken model: onnx-graphsurgeon's folding
bugs are worked around, and what is written is validated (with fallbacks) before saving."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import modelzoo
from toolkit.core.errors import InputError
from toolkit.surgeon import fold, load, plumbing, validate
from toolkit.surgeon.plumbing import count_model_nodes
from toolkit.surgeon.sanitize import sanitize


def run(model, feed):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, feed)))


def shape_slices(dynamic_batch: bool):
    """x -> Shape(start=1) -> y; x -> Shape(start=-2, end=-1) -> Gather(0) -> z; x -> Shape(start=1) -> Gather(1) -> w."""
    batch = "n" if dynamic_batch else 3
    nodes = [
        helper.make_node("Shape", ["x"], ["y"], name="shape_start", start=1),
        helper.make_node("Shape", ["x"], ["s2"], name="shape_mid", start=-2, end=-1),
        helper.make_node("Gather", ["s2", "zero"], ["z"], name="gather_mid", axis=0),
        helper.make_node("Shape", ["x"], ["s3"], name="shape_start2", start=1),
        helper.make_node("Gather", ["s3", "one"], ["w"], name="gather_last", axis=0),
    ]
    inits = [numpy_helper.from_array(np.array(0, np.int64), "zero"), numpy_helper.from_array(np.array(1, np.int64), "one")]
    graph = helper.make_graph(
        nodes,
        "shape_slices",
        [modelzoo.vi("x", [batch, 4, 5])],
        [modelzoo.vi("y", [2], TensorProto.INT64), modelzoo.vi("z", [], TensorProto.INT64),
         modelzoo.vi("w", [], TensorProto.INT64)],
        inits,
    )
    return modelzoo.make_model(graph, opset=17)


@pytest.mark.parametrize("dynamic_batch", [False, True])
def test_shape_with_start_end_folds_to_the_right_dims(dynamic_batch):
    model = shape_slices(dynamic_batch)
    folded, _ = sanitize(model, fold_constants=True)
    consts = {t.name: numpy_helper.to_array(t).tolist() for t in folded.graph.initializer}
    # The dims the attributes select are static even when the batch is not: all three fold.
    assert consts.get("y") == [4, 5]
    assert consts.get("z") == 4
    assert consts.get("w") == 5
    assert count_model_nodes(folded) == 0


def test_shape_with_start_over_dynamic_dims_is_kept():
    nodes = [helper.make_node("Shape", ["x"], ["y"], name="shape_head", end=2)]
    graph = helper.make_graph(nodes, "g", [modelzoo.vi("x", ["n", 4, 5])], [modelzoo.vi("y", [2], TensorProto.INT64)])
    folded, _ = sanitize(modelzoo.make_model(graph, opset=17), fold_constants=True)
    assert [n.op_type for n in folded.graph.node] == ["Shape"]
    assert run(folded, {"x": np.zeros((7, 4, 5), np.float32)})["y"].tolist() == [7, 4]


def if_feeding_split(cond: bool):
    """A constant-condition If whose taken branch ends in a two-output Split; both If outputs are used."""
    split_then = helper.make_node("Split", ["c"], ["t0", "t1"], name="then_split", axis=0, num_outputs=2)
    then_g = helper.make_graph(
        [split_then], "then", [], [modelzoo.vi("t0", [2]), modelzoo.vi("t1", [2])],
        [numpy_helper.from_array(np.array([1, 2, 3, 4], np.float32), "c")],
    )
    else_g = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["e0"], name="else_neg"), helper.make_node("Identity", ["x"], ["e1"], name="else_id")],
        "else", [], [modelzoo.vi("e0", [2]), modelzoo.vi("e1", [2])],
    )
    nodes = [
        helper.make_node("If", ["cond"], ["a", "b"], name="if", then_branch=then_g, else_branch=else_g),
        helper.make_node("Add", ["a", "x"], ["ax"], name="add_a"),
        helper.make_node("Mul", ["b", "x"], ["bx"], name="mul_b"),
    ]
    inits = [numpy_helper.from_array(np.array(cond), "cond")]
    graph = helper.make_graph(
        nodes, "if_split", [modelzoo.vi("x", [2])], [modelzoo.vi("ax", [2]), modelzoo.vi("bx", [2])], inits
    )
    return modelzoo.make_model(graph, opset=18)


@pytest.mark.parametrize("cond", [True, False])
def test_constant_if_feeding_multi_output_node_folds_and_loads(cond):
    model = if_feeding_split(cond)
    x = np.array([10, 20], np.float32)
    expected = run(model, {"x": x})
    folded, _ = sanitize(model, fold_constants=True, validate=False)  # the folding itself is right
    onnx.checker.check_model(folded)
    assert not any(n.op_type == "If" for n in folded.graph.node)
    got = run(folded, {"x": x})
    for name in expected:
        np.testing.assert_allclose(got[name], expected[name])


def test_validation_falls_back_and_says_what_was_left(monkeypatch):
    """With the Shape(start) workaround switched off, graphsurgeon folds wrong values; validation
    notices, the wrong tensors are left unfolded, the rest is folded, and one line says so."""
    monkeypatch.setattr(fold, "_prepare_shape_slices", lambda gs, graph: [])
    model = shape_slices(False)
    x = np.zeros((3, 4, 5), np.float32)
    expected = run(model, {"x": x})
    logs = []
    folded, _ = sanitize(model, fold_constants=True, log=logs.append)
    got = run(folded, {"x": x})
    for name in expected:
        np.testing.assert_array_equal(got[name], expected[name])
    left = [m for m in logs if "left unfolded" in m]
    assert len(left) == 1, logs
    assert "wrong" in left[0]


def test_no_validation_writes_what_graphsurgeon_folds(monkeypatch):
    monkeypatch.setattr(fold, "_prepare_shape_slices", lambda gs, graph: [])
    folded, _ = sanitize(shape_slices(False), fold_constants=True, validate=False)
    consts = {t.name: numpy_helper.to_array(t).tolist() for t in folded.graph.initializer}
    assert consts["y"] == [3, 4, 5]  # graphsurgeon's answer, which validation exists to catch


def test_every_level_failing_writes_the_model_unfolded(monkeypatch):
    class AlwaysBroken(validate.Validation):
        def check(self, result):
            return "test: always broken"

        def wrong_constants(self, result):
            return None

    monkeypatch.setattr(fold, "Validation", AlwaysBroken)
    model = shape_slices(False)
    logs = []
    folded, report = sanitize(model, fold_constants=True, log=logs.append)
    assert [n.op_type for n in folded.graph.node] == ["Shape", "Shape", "Gather", "Shape", "Gather"]
    assert any("left unfolded: everything" in m and "test: always broken" in m for m in logs)
    assert report.passes == []  # (the model written had no folding pass: the summary counts none)


def optional_model():
    """Optional(x) -> OptionalGetElement: a valid model with an optional value inside."""
    nodes = [
        helper.make_node("Optional", ["x"], ["opt"], name="wrap"),
        helper.make_node("OptionalGetElement", ["opt"], ["y"], name="unwrap"),
    ]
    graph = helper.make_graph(nodes, "opt", [modelzoo.vi("x", [2])], [modelzoo.vi("y", [2])])
    return modelzoo.make_model(graph, opset=18)


def test_optional_values_pass_through(tmp_path, cli):
    path = modelzoo.save(optional_model(), tmp_path / "opt.onnx")
    out = tmp_path / "f.onnx"
    res = cli("surgeon", "sanitize", path, "--fold-constants", "-o", out)
    assert res.code == 0, res.err
    x = np.array([1, 2], np.float32)
    np.testing.assert_array_equal(run(onnx.load(str(out)), {"x": x})["y"], x)


def test_sanitize_cli_log_names_validation_fallback(tmp_path, cli, monkeypatch):
    monkeypatch.setattr(fold, "_prepare_shape_slices", lambda gs, graph: [])
    path = modelzoo.save(shape_slices(False), tmp_path / "m.onnx")
    out = tmp_path / "f.onnx"
    res = cli("surgeon", "sanitize", path, "--fold-constants", "-o", out)
    assert res.code == 0, res.err
    assert "left unfolded" in res.err
    x = np.zeros((3, 4, 5), np.float32)
    assert run(onnx.load(str(out)), {"x": x})["y"].tolist() == [4, 5]


def test_known_issues_repros_still_reproduce(capsys):
    """docs/known-issues.md's repros run as written and show the bugs toolkit works around."""
    import os
    import re

    path = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "known-issues.md")
    blocks = re.findall(r"```python\n(.*?)```", open(path).read(), re.S)
    preamble, shape_start, if_outputs, optional = blocks
    exec(preamble + shape_start, {})
    assert capsys.readouterr().out.strip() == "[3 4 5]"
    with pytest.raises(Exception, match="is not a graph input"):
        exec(preamble + if_outputs, {})
    with pytest.raises(UnboundLocalError):
        exec(preamble + optional, {})


def test_identity_chains_fold_away():
    """Identities on constants fold; identities on the input are removed (readers read the input)."""
    nodes, x, c = [], "x", "c"
    for k in range(5):
        nodes += [helper.make_node("Identity", [x], [f"i{k}"], name=f"ix{k}"),
                  helper.make_node("Identity", [c], [f"c{k}"], name=f"ic{k}")]
        x, c = f"i{k}", f"c{k}"
    nodes += [helper.make_node("Add", [x, c], ["s"], name="add"), helper.make_node("Identity", ["s"], ["y"], name="out")]
    graph = helper.make_graph(nodes, "ids", [modelzoo.vi("x", [2])], [modelzoo.vi("y", [2])],
                              [numpy_helper.from_array(np.ones(2, np.float32), "c")])
    model = modelzoo.make_model(graph)
    folded, _ = sanitize(model, fold_constants=True, remove_noops=True)
    assert [n.op_type for n in folded.graph.node] == ["Add"]
    assert [o.name for o in folded.graph.output] == ["y"] and folded.graph.node[0].output[0] == "y"
    x = np.array([1, 2], np.float32)
    np.testing.assert_array_equal(run(folded, {"x": x})["y"], x + 1)


def test_identity_from_input_to_output_is_kept():
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"], name="id")], "g",
                              [modelzoo.vi("x", [2])], [modelzoo.vi("y", [2])])
    folded, _ = sanitize(modelzoo.make_model(graph), fold_constants=True)
    assert [n.op_type for n in folded.graph.node] == ["Identity"]


def test_shapes_inside_loop_bodies_fold():
    """A Loop body computes a Reshape target from the shape of a tensor computed in the body."""
    body = helper.make_graph(
        [
            helper.make_node("Relu", ["acc_in"], ["r0"], name="body_relu"),
            helper.make_node("Shape", ["r0"], ["s"], name="body_shape"),
            helper.make_node("Gather", ["s", "one_b"], ["d"], name="body_gather", axis=0),
            helper.make_node("Unsqueeze", ["d", "ax0_b"], ["du"], name="body_unsq"),
            helper.make_node("Concat", ["m1_b", "du"], ["tgt"], name="body_concat", axis=0),
            helper.make_node("Reshape", ["r0", "tgt"], ["r"], name="body_reshape"),
            helper.make_node("Add", ["r", "x"], ["acc_out"], name="body_add"),
            helper.make_node("Identity", ["cond_in"], ["cond_out"], name="body_cond"),
        ],
        "body",
        [modelzoo.vi("i", [], TensorProto.INT64), modelzoo.vi("cond_in", [], TensorProto.BOOL), modelzoo.vi("acc_in", [2, 3])],
        [modelzoo.vi("cond_out", [], TensorProto.BOOL), modelzoo.vi("acc_out", [2, 3])],
        [numpy_helper.from_array(np.array(1, np.int64), "one_b"), numpy_helper.from_array(np.array([0], np.int64), "ax0_b"),
         numpy_helper.from_array(np.array([-1], np.int64), "m1_b")],
    )
    graph = helper.make_graph(
        [helper.make_node("Loop", ["trips", "", "x"], ["y"], name="loop", body=body)], "g",
        [modelzoo.vi("x", [2, 3])], [modelzoo.vi("y", [2, 3])], [numpy_helper.from_array(np.array(3, np.int64), "trips")])
    model = modelzoo.make_model(graph)
    x = np.arange(6, dtype=np.float32).reshape(2, 3) - 2
    expected = run(model, {"x": x})["y"]
    folded, _ = sanitize(model, fold_constants=True)
    body_ops = [n.op_type for n in folded.graph.node[0].attribute[0].g.node]
    assert "Shape" not in body_ops and "Concat" not in body_ops, body_ops
    np.testing.assert_allclose(run(folded, {"x": x})["y"], expected)


def test_inference_dropout_is_removed_training_dropout_kept():
    nodes = [
        helper.make_node("Dropout", ["x", "ratio"], ["d"], name="drop"),
        helper.make_node("Relu", ["d"], ["y"], name="relu"),
        helper.make_node("Dropout", ["x", "ratio", "train"], ["t", "mask"], name="train_drop"),
    ]
    inits = [numpy_helper.from_array(np.array(0.5, np.float32), "ratio"), numpy_helper.from_array(np.array(True), "train")]
    graph = helper.make_graph(nodes, "g", [modelzoo.vi("x", [4])],
                              [modelzoo.vi("y", [4]), modelzoo.vi("t", [4]), modelzoo.vi("mask", [4], TensorProto.BOOL)], inits)
    folded, _ = sanitize(modelzoo.make_model(graph), fold_constants=True, remove_noops=True)
    assert sorted(n.op_type for n in folded.graph.node) == ["Dropout", "Relu"]
    assert next(n for n in folded.graph.node if n.op_type == "Relu").input[0] == "x"


def test_reshape_to_its_own_shape_is_removed():
    """x:[N,8] -> Relu -> Reshape([-1, 8]) is a no-op even with N unknown; Reshape([-1, 4]) is not."""
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("Reshape", ["r", "same"], ["s"], name="noop"),
        helper.make_node("Reshape", ["s", "other"], ["y"], name="real"),
    ]
    inits = [numpy_helper.from_array(np.array([-1, 8], np.int64), "same"),
             numpy_helper.from_array(np.array([-1, 4], np.int64), "other")]
    graph = helper.make_graph(nodes, "g", [modelzoo.vi("x", ["N", 8])], [modelzoo.vi("y", ["M", 4])], inits)
    folded, _ = sanitize(modelzoo.make_model(graph), fold_constants=True, remove_noops=True)
    assert [n.name for n in folded.graph.node] == ["relu", "real"]
    x = np.arange(-8, 8, dtype=np.float32).reshape(2, 8)
    np.testing.assert_array_equal(run(folded, {"x": x})["y"], np.maximum(x, 0).reshape(-1, 4))


def big_constants_model():
    """Weights made by ConstantOfShape (folded into big arrays), a big fp16 initializer read
    through a Cast, a big initializer used as is, and a small shape computation."""
    rng = np.random.default_rng(3)
    w16 = rng.standard_normal((600, 600)).astype(np.float16)
    w32 = rng.standard_normal((600, 64)).astype(np.float32)
    nodes = [
        helper.make_node("ConstantOfShape", ["wshape"], ["w"], name="make_w",
                         value=numpy_helper.from_array(np.array([0.5], np.float32))),
        helper.make_node("MatMul", ["x", "w"], ["h"], name="mm1"),
        helper.make_node("Cast", ["w16"], ["w16f"], name="cast", to=TensorProto.FLOAT),
        helper.make_node("MatMul", ["h", "w16f"], ["h2"], name="mm2"),
        helper.make_node("MatMul", ["h2", "w32"], ["h3"], name="mm3"),
        helper.make_node("Shape", ["h3"], ["s"], name="shape"),
        helper.make_node("Reshape", ["h3", "s"], ["y"], name="reshape"),
    ]
    inits = [numpy_helper.from_array(np.array([256, 600], np.int64), "wshape"),
             numpy_helper.from_array(w16, "w16"), numpy_helper.from_array(w32, "w32")]
    graph = helper.make_graph(nodes, "big_constants", [modelzoo.vi("x", [2, 256])], [modelzoo.vi("y", [2, 64])], inits)
    return modelzoo.make_model(graph, opset=17)


def test_big_folded_constants_are_exported_as_graphsurgeon_would():
    """Big constants skip graphsurgeon's copies on export (stubs filled once): same bytes."""
    import onnx_graphsurgeon as gs

    model = big_constants_model()
    feed = {"x": np.random.default_rng(0).random((2, 256), dtype=np.float32)}
    want = run(model, feed)
    graph = gs.import_onnx(model)
    graph.fold_constants().cleanup()
    direct = gs.export_onnx(graph)
    fast = plumbing.export_graph(gs, graph, model)
    got = {t.name: numpy_helper.to_array(t) for t in fast.graph.initializer}
    assert sorted(got) == sorted(t.name for t in direct.graph.initializer)
    assert {"w", "w16f", "w32"} <= set(got)
    for t in direct.graph.initializer:
        assert got[t.name].dtype == numpy_helper.to_array(t).dtype
        np.testing.assert_array_equal(got[t.name], numpy_helper.to_array(t))
    assert all(not t.external_data for t in fast.graph.initializer)
    np.testing.assert_allclose(run(fast, feed)["y"], want["y"], rtol=1e-3)
    # and export is unpatched afterwards
    again = gs.export_onnx(graph)
    assert all(not t.external_data for t in again.graph.initializer)


def test_sanitize_with_big_folded_constants_matches():
    model = big_constants_model()
    feed = {"x": np.random.default_rng(1).random((2, 256), dtype=np.float32)}
    want = run(model, feed)
    result, report = sanitize(model, fold_constants=True)
    assert count_model_nodes(result) < 7
    np.testing.assert_allclose(run(result, feed)["y"], want["y"], rtol=1e-3)


def test_model_size_estimate_is_close_and_not_below():
    from toolkit.core.io.model import model_size_estimate

    model = big_constants_model()
    exact = model.ByteSize()
    estimate = model_size_estimate(model)
    assert exact <= estimate <= exact * 1.05 + 512


def test_no_second_pass_when_nothing_was_unlocked():
    """Folding ConstantOfShape weights teaches shape inference nothing new: one pass, same
    result as folding until nothing changes."""
    logs = []
    result, report = sanitize(big_constants_model(), fold_constants=True, log=logs.append)
    assert len(report.passes) == 1 and report.converged
    again, _ = sanitize(result, fold_constants=True)
    assert count_model_nodes(again) == count_model_nodes(result)


def test_saved_model_with_big_weights_loads_the_same(tmp_path):
    """Big weights are written after the rest of the model, as further pieces of the graph
    field: onnx and ONNX-Runtime read the same model (big initializers last)."""
    from toolkit.core.io.model import save_model

    model = big_constants_model()
    big = numpy_helper.from_array(np.arange(300_000, dtype=np.float32).reshape(600, 500), "unused_big")
    model.graph.initializer.insert(0, big)
    model.metadata_props.add(key="k", value="v")
    path = tmp_path / "m.onnx"
    save_model(model, str(path))
    back = onnx.load(str(path))
    assert [t.name for t in back.graph.initializer] == ["wshape", "w16", "w32", "unused_big"]
    want = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    for t in back.graph.initializer:
        np.testing.assert_array_equal(numpy_helper.to_array(t), want[t.name])
    assert [n.name for n in back.graph.node] == [n.name for n in model.graph.node]
    assert back.metadata_props[0].value == "v" and back.ir_version == model.ir_version
    onnx.checker.check_model(str(path))
    feed = {"x": np.random.default_rng(4).random((2, 256), dtype=np.float32)}
    np.testing.assert_allclose(run(back, feed)["y"], run(model, feed)["y"], rtol=1e-6)


def _const(name, values):
    return numpy_helper.from_array(np.asarray(values), name)


def test_pass_through_nodes_are_removed_and_real_ones_kept():
    """Cast to the same dtype, Slice over whole axes, Transpose(identity), Mul/Div by ones and
    Add/Sub of zeros that broadcast nothing go; the look-alikes that change something stay."""
    big = np.iinfo(np.int64).max
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("Cast", ["r"], ["c"], name="cast_same", to=TensorProto.FLOAT),
        helper.make_node("Slice", ["c", "zero1", "big1", "one1"], ["s"], name="slice_whole"),
        helper.make_node("Slice", ["s", "zero1", "three1", "zero1"], ["s2"], name="slice_whole_dim"),
        helper.make_node("Transpose", ["s2"], ["t"], name="transpose_id", perm=[0, 1]),
        helper.make_node("Mul", ["ones1", "t"], ["m"], name="mul_one"),
        helper.make_node("Add", ["m", "zero_s"], ["a"], name="add_zero"),
        helper.make_node("Sub", ["a", "zeros3"], ["b"], name="sub_zeros"),
        helper.make_node("Div", ["b", "ones1"], ["y"], name="div_one"),
        # look-alikes that do something
        helper.make_node("Mul", ["y", "ones223"], ["grown"], name="mul_broadcasts"),
        helper.make_node("Cast", ["y"], ["as_int"], name="cast_other", to=TensorProto.INT32),
        helper.make_node("Slice", ["y", "zero1", "two1", "one1"], ["part"], name="slice_part"),
        helper.make_node("Div", ["ones1", "y"], ["inv"], name="one_over"),
    ]
    inits = [_const("zero1", np.array([0], np.int64)), _const("big1", np.array([big], np.int64)),
             _const("one1", np.array([1], np.int64)), _const("three1", np.array([3], np.int64)),
             _const("two1", np.array([2], np.int64)), _const("ones1", np.ones([1], np.float32)),
             _const("zero_s", np.array(0, np.float32)), _const("zeros3", np.zeros([3], np.float32)),
             _const("ones223", np.ones([2, 2, 3], np.float32))]
    outputs = [modelzoo.vi("y", [2, 3]), modelzoo.vi("grown", [2, 2, 3]), modelzoo.vi("as_int", [2, 3], TensorProto.INT32),
               modelzoo.vi("part", [2, 2]), modelzoo.vi("inv", [2, 3])]
    model = modelzoo.make_model(helper.make_graph(nodes, "g", [modelzoo.vi("x", [2, 3])], outputs, inits), opset=17)
    x = np.arange(-3, 3, dtype=np.float32).reshape(2, 3)
    expected = run(model, {"x": x})
    folded, _ = sanitize(model, fold_constants=True, remove_noops=True)
    assert sorted(n.name for n in folded.graph.node) == ["cast_other", "mul_broadcasts", "one_over", "relu", "slice_part"]
    got = run(folded, {"x": x})
    for name, value in expected.items():
        np.testing.assert_array_equal(got[name], value)


def test_pass_through_nodes_inside_if_bodies_are_removed():
    """Branch bodies lose their same-dtype Casts and Identities; a branch output that is an
    outer tensor passed through keeps its Identity (the branch needs a node for it)."""
    then_g = helper.make_graph(
        [helper.make_node("Cast", ["x"], ["tc"], name="then_cast", to=TensorProto.FLOAT),
         helper.make_node("Identity", ["tc"], ["ti"], name="then_id"),
         helper.make_node("Neg", ["ti"], ["t0"], name="then_neg")],
        "then", [], [modelzoo.vi("t0", [2])])
    else_g = helper.make_graph([helper.make_node("Identity", ["x"], ["e0"], name="else_id")], "else", [],
                               [modelzoo.vi("e0", [2])])
    nodes = [helper.make_node("If", ["cond"], ["y"], name="if", then_branch=then_g, else_branch=else_g)]
    graph = helper.make_graph(nodes, "g", [modelzoo.vi("x", [2]), modelzoo.vi("cond", [], TensorProto.BOOL)],
                              [modelzoo.vi("y", [2])])
    model = modelzoo.make_model(graph, opset=17)
    folded, _ = sanitize(model, fold_constants=True, remove_noops=True)
    attrs = {a.name: a.g for a in folded.graph.node[0].attribute}
    assert [n.op_type for n in attrs["then_branch"].node] == ["Neg"]
    assert [n.op_type for n in attrs["else_branch"].node] == ["Identity"]
    x = np.array([1, -2], np.float32)
    for cond in (True, False):
        feed = {"x": x, "cond": np.array(cond)}
        np.testing.assert_array_equal(run(folded, feed)["y"], run(model, feed)["y"])


def test_multiply_by_one_after_an_unranked_conv_is_removed():
    """A Reshape to a target of unknown length hides the rank; the Conv after it still has at
    least 3 dims, so Mul by a one-element 1 changes nothing and goes. Mul by 2 stays."""
    nodes = [
        helper.make_node("Reshape", ["x", "target"], ["r"], name="reshape"),
        helper.make_node("Conv", ["r", "w"], ["c"], name="conv"),
        helper.make_node("Mul", ["c", "one"], ["m"], name="mul_one"),
        helper.make_node("Mul", ["m", "two"], ["y"], name="mul_two"),
    ]
    inits = [_const("w", np.ones([2, 1, 1, 1], np.float32)), _const("one", np.ones([1], np.float32)),
             _const("two", np.full([1], 2, np.float32))]
    graph = helper.make_graph(nodes, "g", [modelzoo.vi("x", [1, 16]), modelzoo.vi("target", [None], TensorProto.INT64)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = modelzoo.make_model(graph, opset=17)
    folded, _ = sanitize(model, fold_constants=True, remove_noops=True)
    assert [n.name for n in folded.graph.node] == ["reshape", "conv", "mul_two"]
    feed = {"x": np.arange(16, dtype=np.float32).reshape(1, 16), "target": np.array([1, 1, 4, 4], np.int64)}
    np.testing.assert_array_equal(run(folded, feed)["y"], run(model, feed)["y"])


def test_output_stated_as_minus_one_gets_its_dim_after_override():
    """An exporter writes the output as [-1, 3]; once the input shape is fixed and the Reshape
    target (the batch dim taken from the input's shape through int32 Casts, and -1) is folded,
    the output's shape is [1, 3]."""
    nodes = [
        helper.make_node("GlobalAveragePool", ["x"], ["p"], name="pool"),
        helper.make_node("Shape", ["p"], ["s"], name="shape"),
        helper.make_node("Cast", ["s"], ["s32"], name="to_int32", to=TensorProto.INT32),
        helper.make_node("Slice", ["s32", "zero1", "one1", "zero1", "one1"], ["n32"], name="batch"),
        helper.make_node("Cast", ["n32"], ["n"], name="n_to_int64", to=TensorProto.INT64),
        helper.make_node("Cast", ["minus1_32"], ["minus1"], name="m_to_int64", to=TensorProto.INT64),
        helper.make_node("Concat", ["n", "minus1"], ["target"], name="target", axis=-1),
        helper.make_node("Reshape", ["p", "target"], ["r"], name="reshape"),
        helper.make_node("Softmax", ["r"], ["sm"], name="softmax", axis=1),
        helper.make_node("Identity", ["sm"], ["y"], name="out"),
    ]
    inits = [_const("zero1", np.array([0], np.int64)), _const("one1", np.array([1], np.int64)),
             _const("minus1_32", np.array([-1], np.int32))]
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, [-1, 3])
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [-1, 3, None, None])],
                              [out], inits)
    folded, _ = sanitize(modelzoo.make_model(graph, opset=11), fold_constants=True, remove_noops=True,
                         input_shapes={"x": [1, 3, 2, 2]})
    assert [d.dim_value for d in folded.graph.output[0].type.tensor_type.shape.dim] == [1, 3]
    assert [n.op_type for n in folded.graph.node] == ["GlobalAveragePool", "Reshape", "Softmax"]


def branch_that_squeezes():
    """If on a runtime flag: the then branch squeezes x's dim 1 (it runs only where that dim is
    1), the else branch negates x; x:[N, M]. The model loads while M is dynamic."""
    then_g = helper.make_graph([helper.make_node("Squeeze", ["x", "axes1"], ["t0"], name="t_squeeze")], "then", [],
                               [helper.make_tensor_value_info("t0", TensorProto.FLOAT, None)])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e0"], name="else_neg")], "else", [],
                               [helper.make_tensor_value_info("e0", TensorProto.FLOAT, None)])
    nodes = [helper.make_node("If", ["flag"], ["y"], name="if", then_branch=then_g, else_branch=else_g)]
    graph = helper.make_graph(nodes, "g", [modelzoo.vi("x", ["N", "M"]), modelzoo.vi("flag", [], TensorProto.BOOL)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [_const("axes1", np.array([1], np.int64))])
    return modelzoo.make_model(graph, opset=17)


def test_override_shapes_a_branch_cannot_take_is_an_error():
    """With x:[2,3] the then branch would squeeze a dim of 3: ONNX-Runtime refuses the model at
    load, folded or not. No such model is written: an InputError (exit 3) naming the override,
    unless validation is off. With x:[2,1] every branch is fine."""
    with pytest.raises(InputError, match="override-input-shapes"):
        sanitize(branch_that_squeezes(), fold_constants=True, input_shapes={"x": [2, 3]})
    with pytest.raises(InputError, match="override-input-shapes"):  # without folding too
        sanitize(branch_that_squeezes(), input_shapes={"x": [2, 3]})
    folded, _ = sanitize(branch_that_squeezes(), fold_constants=True, input_shapes={"x": [2, 3]}, validate=False)
    assert folded is not None
    sanitize(branch_that_squeezes(), input_shapes={"x": [2, 1]})
    folded, _ = sanitize(branch_that_squeezes(), fold_constants=True, input_shapes={"x": [2, 1]})
    x = np.array([[1], [2]], np.float32)
    for flag in (True, False):
        np.testing.assert_array_equal(run(folded, {"x": x, "flag": np.array(flag)})["y"],
                                      run(branch_that_squeezes(), {"x": x, "flag": np.array(flag)})["y"])


def test_malformed_neutral_looking_initializer_is_no_crash(tmp_path, cli):
    """An initializer whose data disagrees with its dims (4 floats, shape [0]) beside a Mul: the
    pass-through removal skips it instead of stopping sanitize with an internal error."""
    w = numpy_helper.from_array(np.zeros(4, np.float32), "w")
    w.dims[:] = [0]
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Mul", ["r", "w"], ["m"]),
             helper.make_node("Add", ["r", "m"], ["y"])]
    graph = helper.make_graph(nodes, "g", [modelzoo.vi("x", [1, 4])], [modelzoo.vi("y", [1, 4])], [w])
    path = modelzoo.save(modelzoo.make_model(graph, opset=17), tmp_path / "bad.onnx")
    res = cli("surgeon", "sanitize", path, "--fold-constants", "-o", tmp_path / "out.onnx")
    assert "bug in toolkit" not in res.err
    assert res.code in (0, 3), res.err


def test_reshape_target_from_the_batch_dim_becomes_a_constant():
    """Reshape(x:[N,8,4], Concat(Shape(x)[0:1], [4], [8]) as int32 then int64): the computed entry can
    only be N, so the target is [-1, 4, 8] and Shape/Slice/Concat/Casts go. Data with two
    dynamic dims (z:[N,M,8]) keeps its target's computation."""
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("Shape", ["r"], ["s"], name="shape"),
        helper.make_node("Cast", ["s"], ["s32"], name="to_int32", to=TensorProto.INT32),
        helper.make_node("Slice", ["s32", "zero1", "one1"], ["n"], name="batch"),
        helper.make_node("Concat", ["n", "four", "eight"], ["t32"], name="target", axis=0),
        helper.make_node("Cast", ["t32"], ["t"], name="to_int64", to=TensorProto.INT64),
        helper.make_node("Reshape", ["r", "t"], ["y"], name="reshape"),
        helper.make_node("Concat", ["n", "four", "four"], ["u32"], name="other_target", axis=0),
        helper.make_node("Cast", ["u32"], ["u"], name="other_to_int64", to=TensorProto.INT64),
        helper.make_node("Reshape", ["z", "u"], ["w"], name="other_reshape"),
    ]
    inits = [_const("zero1", np.array([0], np.int64)), _const("one1", np.array([1], np.int64)),
             _const("four", np.array([4], np.int32)), _const("eight", np.array([8], np.int32))]
    graph = helper.make_graph(nodes, "g", [modelzoo.vi("x", ["N", 8, 4]), modelzoo.vi("z", ["N", "M", 8])],
                              [modelzoo.vi("y", ["N", 4, 8]), modelzoo.vi("w", ["N", 4, 4])], inits)
    model = modelzoo.make_model(graph, opset=17)
    folded, _ = sanitize(model, fold_constants=True)
    names = [n.name for n in folded.graph.node]
    assert "reshape" in names and "target" not in names and "to_int64" not in names
    assert "other_target" in names and "other_reshape" in names
    for batch in (1, 3):
        feed = {"x": np.arange(batch * 32, dtype=np.float32).reshape(batch, 8, 4) - 5,
                "z": np.ones((batch, 2, 8), np.float32)}
        want, got = run(model, feed), run(folded, feed)
        for name in want:
            np.testing.assert_array_equal(got[name], want[name])


@pytest.mark.parametrize("external", [False, True])
@pytest.mark.parametrize("dims, keep", [([0], 4), ([3], 0), ([2, 2], 3)])
def test_damaged_weights_are_refused_in_one_line(tmp_path, cli, monkeypatch, dims, keep, external):
    """A weight whose data does not fill its dims (too much, none, too little) is exit 3 naming
    the tensor, before folding reads it; the input files are left as they were. Weights kept in
    their external file (loaded lazily) are measured there."""
    w = numpy_helper.from_array(np.ones(4, np.float32), "w")
    w.dims[:] = dims
    w.raw_data = w.raw_data[: keep * 4]
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Add", ["r", "w"], ["y"])]
    graph = helper.make_graph(nodes, "g", [modelzoo.vi("x", [2, 2])], [modelzoo.vi("y", [2, 2])], [w])
    model = modelzoo.make_model(graph, opset=17)
    path = tmp_path / "bad.onnx"
    if external:
        monkeypatch.setattr(load, "EAGER_EXTERNAL_BYTES", 0)
        onnx.save_model(model, str(path), save_as_external_data=True, location="w.bin", size_threshold=0)
    else:
        modelzoo.save(model, path)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    out = tmp_path / "out.onnx"
    res = cli("surgeon", "sanitize", path, "--fold-constants", "-o", out)
    assert res.code == 3, res.err
    assert "tensor 'w'" in res.err and "damaged" in res.err and "bug in toolkit" not in res.err
    assert not out.exists()
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_validation_takes_minus_one_for_a_reshape_targets_computed_dim():
    """An optimizer folds Reshape(x, Concat(Shape(x)[0], [4])) to the target [-1, 4]: a different
    value from what the input model computes on generated inputs ([1, 4]) but the same Reshape.
    Validation accepts it; a target that differs otherwise, or is read by another node too, is not."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"], name="shape"),
        helper.make_node("Gather", ["s", "zero"], ["n"], name="n", axis=0),
        helper.make_node("Unsqueeze", ["n", "axes0"], ["nu"], name="nu"),
        helper.make_node("Concat", ["nu", "four"], ["target"], name="target", axis=0),
        helper.make_node("Reshape", ["x", "target"], ["y"], name="reshape"),
    ]
    inits = [_const("zero", np.array(0, np.int64)), _const("axes0", np.array([0], np.int64)),
             _const("four", np.array([4], np.int64))]
    original = modelzoo.make_model(helper.make_graph(nodes, "g", [modelzoo.vi("x", ["N", 2, 2])],
                                                     [modelzoo.vi("y", ["N", 4])], inits), opset=17)

    def folded(target, extra_reader=False):
        extra = [helper.make_node("Cast", ["target"], ["t_f"], name="reader", to=TensorProto.FLOAT)] if extra_reader else []
        outs = [modelzoo.vi("y", ["N", 4])] + ([modelzoo.vi("t_f", [2])] if extra_reader else [])
        graph = helper.make_graph([nodes[-1]] + extra, "g", [modelzoo.vi("x", ["N", 2, 2])], outs,
                                  [_const("target", np.array(target, np.int64))])
        return modelzoo.make_model(graph, opset=17)

    assert validate.Validation(original, None).check(folded([-1, 4])) is None
    assert "target" in (validate.Validation(original, None).check(folded([2, 2])) or "")
    check = validate.Validation(original, None)
    check.prepare()
    assert not check._same_reshape_target(folded([-1, 4], extra_reader=True), "target")


@pytest.mark.parametrize("dtype, dims, nbytes, whole", [
    (TensorProto.FLOAT8E4M3FN, [1, 4], 4, True), (TensorProto.FLOAT8E4M3FN, [1, 4], 16, False),
    (TensorProto.INT4, [5], 3, True), (TensorProto.INT4, [5], 2, False), (TensorProto.UINT4, [4], 4, False),
    (TensorProto.FLOAT4E2M1, [3], 2, True), (TensorProto.UINT8, [2, 2], 4, True),
    (TensorProto.STRING, [1, 4], 16, False),
])
def test_damage_is_measured_in_each_type_storage(dtype, dims, nbytes, whole):
    """8-bit floats take a byte per value; 4-bit types two values per byte (rounded up)."""
    from toolkit.core.graph.graphs import damaged_tensor

    t = TensorProto(name="w", data_type=dtype, dims=dims)
    t.raw_data = b"\x11" * nbytes  # onnx's helper refuses a wrong size; a damaged file does not ask
    if dtype == TensorProto.STRING:  # strings live in string_data: bytes elsewhere leave it short
        t.string_data.extend([b"a", b"b"])
    graph = helper.make_graph([], "g", [], [modelzoo.vi("w", dims, dtype)], [t])
    found = damaged_tensor(helper.make_model(graph))
    assert (found is None) == whole, found
    if not whole:
        assert "tensor 'w'" in found and f"need {int(np.prod(dims))}" in found

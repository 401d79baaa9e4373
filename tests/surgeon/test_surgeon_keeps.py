"""What `surgeon sanitize` and `extract` keep: nodes that read runtime values under --fold-constants
(pass-through removal is --remove-noops / --optimize), the types of sequence and map values,
and --optimize never writes more nodes than it was given."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import modelzoo
from toolkit.surgeon.extract import extract
from toolkit.surgeon.optimize import optimize
from toolkit.surgeon.sanitize import sanitize
from toolkit.core.meta import TensorMeta


def run(model, feed):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, feed)))


def ops(model):
    return [n.op_type for n in model.graph.node]


def const(name, values):
    return numpy_helper.from_array(np.asarray(values), name)


# ---------------------------------------------------------------------- --fold-constants folds constants only


def reference_example(a_value: float = 1.0):
    """The reference's reducing-failing-models example: Y = x0 + (x1 * a + b), ``a`` all ones."""
    shape = [1, 3, 4, 4]
    nodes = [
        helper.make_node("Mul", ["x1", "a"], ["mul_out"], name="mul"),
        helper.make_node("Add", ["mul_out", "b"], ["add_out"], name="add"),
        helper.make_node("Add", ["x0", "add_out"], ["Y"], name="add_y"),
    ]
    inits = [const("a", np.full(shape, a_value, np.float32)), const("b", np.full(shape, 0.5, np.float32))]
    graph = helper.make_graph(nodes, "example", [modelzoo.vi("x0", shape), modelzoo.vi("x1", shape)],
                              [modelzoo.vi("Y", shape)], inits)
    return modelzoo.make_model(graph)


def pass_throughs():
    """x read by every pass-through kind ONNX states: x*1, x+0, x-0, x/1, identity Transpose,
    same-type Cast, whole-axis Slice, Identity, inference Dropout; their sum is the output."""
    shape = [2, 3]
    nodes = [
        helper.make_node("Mul", ["x", "one"], ["m"], name="mul_one"),
        helper.make_node("Add", ["x", "zero"], ["a"], name="add_zero"),
        helper.make_node("Sub", ["x", "zero"], ["s"], name="sub_zero"),
        helper.make_node("Div", ["x", "one"], ["d"], name="div_one"),
        helper.make_node("Transpose", ["x"], ["t"], name="transpose_id", perm=[0, 1]),
        helper.make_node("Cast", ["x"], ["c"], name="cast_same", to=TensorProto.FLOAT),
        helper.make_node("Slice", ["x", "starts", "ends", "axes"], ["sl"], name="slice_whole"),
        helper.make_node("Identity", ["x"], ["i"], name="identity"),
        helper.make_node("Dropout", ["x"], ["dr"], name="dropout"),
        helper.make_node("Sum", ["m", "a", "s", "d", "t", "c", "sl", "i", "dr"], ["y"], name="sum"),
    ]
    inits = [const("one", np.ones([1], np.float32)), const("zero", np.zeros([1], np.float32)),
             const("starts", np.array([0], np.int64)), const("ends", np.array([2**62], np.int64)),
             const("axes", np.array([1], np.int64))]
    graph = helper.make_graph(nodes, "noops", [modelzoo.vi("x", shape)], [modelzoo.vi("y", shape)], inits)
    return modelzoo.make_model(graph, opset=13)


def test_fold_constants_keeps_the_reference_examples_mul_by_ones(tmp_path, cli):
    path = modelzoo.save(reference_example(), tmp_path / "model.onnx")
    out = tmp_path / "folded.onnx"
    res = cli("surgeon", "sanitize", path, "-o", out, "--fold-constants",
              "--override-input-shapes", "x0:[1,3,4,4]", "x1:[1,3,4,4]")
    assert res.code == 0, res.err
    assert ops(onnx.load(str(out))) == ["Mul", "Add", "Add"]
    res = cli("surgeon", "sanitize", path, "-o", out, "--fold-constants", "--remove-noops")
    assert res.code == 0, res.err
    assert ops(onnx.load(str(out))) == ["Add", "Add"]


def test_fold_constants_keeps_every_node_reading_a_runtime_value():
    model = pass_throughs()
    x = np.arange(6, dtype=np.float32).reshape(2, 3) - 2
    want = run(model, {"x": x})["y"]
    folded, _ = sanitize(pass_throughs(), fold_constants=True)
    assert ops(folded) == ops(model)
    np.testing.assert_array_equal(run(folded, {"x": x})["y"], want)
    for kwargs in ({"fold_constants": True, "remove_noops": True}, {"remove_noops": True}):
        logs = []
        cleaned, _ = sanitize(pass_throughs(), log=logs.append, **kwargs)
        assert ops(cleaned) == ["Sum"], kwargs
        np.testing.assert_array_equal(run(cleaned, {"x": x})["y"], want)
    assert "Pass-through nodes removed: 9" in logs
    optimized = optimize(sanitize(pass_throughs(), fold_constants=True)[0])
    assert ops(optimized) == ["Sum"]


def test_help_names_the_flag_that_removes_pass_through_nodes(cli):
    res = cli("surgeon", "sanitize", "--help")
    assert "--remove-noops" in res.out


# ---------------------------------------------------------------------- types are kept


def zipmap_classifier():
    """A skl2onnx-like classifier: X -> Mul by a folded constant -> LinearClassifier -> label, and
    probabilities as seq(map(int64, tensor(float))) by ZipMap; plus an Identity for --remove-noops."""
    seq_map = helper.make_sequence_type_proto(
        helper.make_map_type_proto(TensorProto.INT64, helper.make_tensor_type_proto(TensorProto.FLOAT, [])))
    nodes = [
        helper.make_node("Add", ["one", "one"], ["two"], name="const_add"),
        helper.make_node("Mul", ["X", "two"], ["xs"], name="scale"),
        helper.make_node("Identity", ["xs"], ["xi"], name="identity"),
        helper.make_node("LinearClassifier", ["xi"], ["label", "probs"], name="clf", domain="ai.onnx.ml",
                         classlabels_ints=[0, 1, 2], coefficients=[(i % 5) / 5 for i in range(12)],
                         intercepts=[0.1, 0.2, 0.3], post_transform="SOFTMAX"),
        helper.make_node("ZipMap", ["probs"], ["probabilities"], name="zipmap", domain="ai.onnx.ml",
                         classlabels_int64s=[0, 1, 2]),
    ]
    graph = helper.make_graph(
        nodes, "classifier", [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["n", 4])],
        [helper.make_tensor_value_info("label", TensorProto.INT64, ["n"]),
         helper.make_value_info("probabilities", seq_map)],
        [const("one", np.ones([1], np.float32))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)])
    model.ir_version = 8
    return model


def sequence_output():
    """x -> Relu -> SequenceConstruct(r, r) -> seq(tensor(float)) output, with a foldable constant."""
    nodes = [
        helper.make_node("Add", ["one", "one"], ["two"], name="const_add"),
        helper.make_node("Mul", ["x", "two"], ["r"], name="scale"),
        helper.make_node("SequenceConstruct", ["r", "r"], ["seq"], name="construct"),
    ]
    seq = helper.make_value_info("seq", helper.make_sequence_type_proto(
        helper.make_tensor_type_proto(TensorProto.FLOAT, [2, 3])))
    graph = helper.make_graph(nodes, "seq", [modelzoo.vi("x", [2, 3])], [seq], [const("one", np.ones([1], np.float32))])
    return modelzoo.make_model(graph, opset=17)


SANITIZE_OPTIONS = [
    ["--fold-constants"], ["--cleanup"], ["--optimize"], ["--toposort"], ["--remove-noops"],
    ["--override-input-shapes", "X:[2,4]"], ["--override-input-shapes", "X:[2,4]", "--fold-constants"],
    ["--fold-constants", "--cleanup", "--toposort", "--optimize"],
]


@pytest.mark.parametrize("options", SANITIZE_OPTIONS, ids=" ".join)
def test_seq_map_classifier_survives_sanitize(tmp_path, cli, options):
    model = zipmap_classifier()
    path = modelzoo.save(model, tmp_path / "clf.onnx")
    out = tmp_path / "out.onnx"
    res = cli("surgeon", "sanitize", path, "-o", out, *options)
    assert res.code == 0, res.err
    written = onnx.load(str(out))
    assert [o.name for o in written.graph.output] == ["label", "probabilities"]
    assert written.graph.output[1].type == model.graph.output[1].type  # seq(map(int64, tensor(float)))
    if "--override-input-shapes" not in options:  # (which sets the dims of 'label')
        assert written.graph.output[0].type == model.graph.output[0].type
    assert written.graph.output[0].type.tensor_type.elem_type == TensorProto.INT64
    x = np.arange(8, dtype=np.float32).reshape(2, 4) / 8
    want, got = run(model, {"X": x}), run(written, {"X": x})  # it loads in ONNX-Runtime
    np.testing.assert_array_equal(got["label"], want["label"])
    assert got["probabilities"] == want["probabilities"]


@pytest.mark.parametrize("kwargs", [{"fold_constants": True}, {"cleanup": True}, {"toposort": True}])
def test_sequence_output_keeps_its_type(kwargs):
    model = sequence_output()
    result, _ = sanitize(sequence_output(), **kwargs)
    assert result.graph.output[0].type == model.graph.output[0].type
    x = np.ones((2, 3), np.float32)
    got = run(result, {"x": x})["seq"]
    assert len(got) == 2 and np.array_equal(got[0], 2 * x)
    optimized = optimize(sequence_output())
    assert optimized.graph.output[0].type == model.graph.output[0].type


def test_extract_cuts_at_the_zipmap_input_and_at_non_tensor_values(tmp_path, cli):
    model = zipmap_classifier()
    piece = extract(zipmap_classifier(), inputs=[TensorMeta("probs")], outputs=[TensorMeta("probabilities")])
    assert ops(piece) == ["ZipMap"]
    assert piece.graph.output[0].type == model.graph.output[1].type
    probs = np.array([[0.2, 0.3, 0.5]], np.float32)
    assert run(piece, {"probs": probs})["probabilities"][0] == pytest.approx({0: 0.2, 1: 0.3, 2: 0.5})
    path = modelzoo.save(model, tmp_path / "clf.onnx")
    res = cli("surgeon", "extract", path, "-o", tmp_path / "head.onnx", "--outputs", "probabilities")
    assert res.code == 0, res.err
    head = onnx.load(str(tmp_path / "head.onnx"))
    assert head.graph.output[0].type == model.graph.output[1].type
    assert len(run(head, {"X": np.ones((3, 4), np.float32)})["probabilities"]) == 3


def test_run_mark_all_refuses_a_non_tensor_model_output_as_a_plain_run_does(tmp_path, cli):
    path = modelzoo.save(zipmap_classifier(), tmp_path / "clf.onnx")
    plain = cli("run", path, "--onnxrt")
    marked = cli("run", path, "--onnxrt", "--onnx-outputs", "mark", "all")
    assert plain.code == marked.code == 3
    assert "'probabilities'" in marked.err and "not a tensor" in marked.err and "PASSED" not in marked.err
    res = cli("run", path, "--onnxrt", "--onnx-outputs", "mark", "all", "--onnx-exclude-outputs", "probabilities")
    assert res.code == 0, res.err


# ---------------------------------------------------------------------- --optimize never grows a model


def qdq_shared_dequantize():
    """x -> QuantizeLinear -> DequantizeLinear 'xd', read by a Relu and a Conv (int8 weights through
    their own DequantizeLinear) and also a graph output. ONNX-Runtime's basic level gives each
    reader its own DequantizeLinear."""
    shape = [1, 2, 4, 4]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"], name="q"),
        helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"], name="dq"),
        helper.make_node("DequantizeLinear", ["wq", "ws", "z"], ["w"], name="wdq"),
        helper.make_node("Relu", ["xd"], ["a"], name="relu"),
        helper.make_node("Conv", ["xd", "w"], ["b"], name="conv"),
        helper.make_node("Add", ["a", "b"], ["y"], name="add"),
    ]
    inits = [const("s", np.array(0.05, np.float32)), const("z", np.array(0, np.int8)),
             const("wq", (np.arange(4).reshape(2, 2, 1, 1) - 2).astype(np.int8)), const("ws", np.array(0.1, np.float32))]
    graph = helper.make_graph(nodes, "qdq", [modelzoo.vi("x", shape)], [modelzoo.vi("y", shape), modelzoo.vi("xd", shape)],
                              inits)
    return modelzoo.make_model(graph, opset=17)


def test_optimize_never_writes_more_nodes_than_it_was_given(tmp_path):
    model = qdq_shared_dequantize()
    path = str(tmp_path / "qdq.onnx")
    onnx.save(model, path)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    so.optimized_model_filepath = str(tmp_path / "ort.onnx")
    ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    assert len(onnx.load(so.optimized_model_filepath).graph.node) > len(model.graph.node)  # what is guarded against
    logs = []
    result = optimize(qdq_shared_dequantize(), log=logs.append)
    assert len(result.graph.node) <= len(model.graph.node)
    assert any("basic level skipped" in line and "nodes where the model has 6" in line for line in logs), logs
    x = np.linspace(-1, 1, 32, dtype=np.float32).reshape(1, 2, 4, 4)
    np.testing.assert_array_equal(run(result, {"x": x})["y"], run(model, {"x": x})["y"])


# ---------------------------------------------------------------------- a typo in --override-input-shapes


def test_override_of_a_name_that_is_no_tensor_is_an_error(tmp_path, cli):
    path = modelzoo.save(modelzoo.dynamic_batch(), tmp_path / "m.onnx")
    out = tmp_path / "o.onnx"
    res = cli("surgeon", "sanitize", path, "-o", out, "--override-input-shapes", "nope:[1]")
    assert res.code == 3 and not out.exists()
    lines = [line for line in res.err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "'nope'" in lines[0] and "inputs: x" in lines[0]


def _sequence_inside(tmp_path):
    """x -> Relu -> SequenceConstruct(r, r) -> ConcatFromSequence -> y: a sequence value inside the
    graph whose type the model does not state; saved as m.onnx."""
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("SequenceConstruct", ["r", "r"], ["seq"], name="construct"),
        helper.make_node("ConcatFromSequence", ["seq"], ["y"], name="concat", axis=0),
    ]
    graph = helper.make_graph(nodes, "seq_inside", [modelzoo.vi("x", [2, 3])], [modelzoo.vi("y", [4, 3])])
    return modelzoo.save(modelzoo.make_model(graph, opset=17), tmp_path / "m.onnx")


def test_marking_an_intermediate_sequence_as_output_gives_it_its_type(tmp_path, cli):
    path = _sequence_inside(tmp_path)
    out = tmp_path / "o.onnx"
    res = cli("surgeon", "sanitize", path, "-o", out, "--outputs", "mark", "all", "--cleanup")
    assert res.code == 0, res.err
    written = onnx.load(str(out))
    kinds = {o.name: o.type.WhichOneof("value") for o in written.graph.output}
    assert kinds == {"r": "tensor_type", "seq": "sequence_type", "y": "tensor_type"}
    got = run(written, {"x": np.ones((2, 3), np.float32)})
    assert len(got["seq"]) == 2 and got["y"].shape == (4, 3)


def test_rebuilt_model_with_a_huge_input_dim_is_written_unvalidated(tmp_path, cli):
    """Generated inputs over 64 MiB are not made (the element count is not wrapped around in int64)."""
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "huge",
                              [modelzoo.vi("x", [2**62, 4])], [modelzoo.vi("y", [2**62, 4])])
    path = modelzoo.save(modelzoo.make_model(graph), tmp_path / "m.onnx")
    res = cli("surgeon", "sanitize", path, "-o", tmp_path / "o.onnx", "--cleanup")
    assert res.code == 0, res.err
    assert ops(onnx.load(str(tmp_path / "o.onnx"))) == ["Relu"]


def test_folding_says_when_outputs_are_not_compared():
    """A sequence input cannot be generated: the folded model is only loaded, and a line says so."""
    seq = helper.make_value_info("s", helper.make_sequence_type_proto(helper.make_tensor_type_proto(TensorProto.FLOAT, [2])))
    nodes = [
        helper.make_node("Add", ["one", "one"], ["two"], name="const_add"),
        helper.make_node("SequenceAt", ["s", "zero"], ["t"], name="at"),
        helper.make_node("Mul", ["t", "two"], ["y"], name="mul"),
    ]
    graph = helper.make_graph(nodes, "seq_in", [seq], [modelzoo.vi("y", [2])],
                              [const("one", np.ones([1], np.float32)), const("zero", np.array(0, np.int64))])
    model = modelzoo.make_model(graph, opset=17)
    logs = []
    folded, _ = sanitize(model, fold_constants=True, log=logs.append)
    assert ops(folded) == ["SequenceAt", "Mul"] and folded.graph.input[0].type == seq.type
    assert any("its outputs were not compared: input 's' is not a tensor" in line for line in logs), logs


def test_folding_names_dynamic_dims_set_to_one_when_the_model_does_not_run_on_them():
    """Generated inputs set dynamic dims to 1; a model that cannot take that size (a detector's
    1x1 image) is only loaded, and the line says which inputs were so and how to give sizes."""
    nodes = [
        helper.make_node("Add", ["one", "one"], ["two"], name="const_add"),
        helper.make_node("Mul", ["x", "two"], ["y"], name="mul"),
        helper.make_node("Shape", ["x"], ["shape"], name="shape"),
        helper.make_node("Gather", ["shape", "last"], ["n"], name="n"),
        helper.make_node("Sub", ["n", "two_i"], ["m"], name="minus_two"),
        helper.make_node("ConstantOfShape", ["m"], ["c"], name="c"),  # (n = 1: a negative size)
    ]
    graph = helper.make_graph(
        nodes, "dyn", [modelzoo.vi("x", [1, "n"])], [modelzoo.vi("y", [1, "n"]), modelzoo.vi("c", None)],
        [const("one", np.ones([1], np.float32)), const("last", np.array([1], np.int64)),
         const("two_i", np.array([2], np.int64))])
    logs = []
    folded, _ = sanitize(modelzoo.make_model(graph, opset=17), fold_constants=True, log=logs.append)
    assert "Add" not in ops(folded)
    line = [x for x in logs if "its outputs were not compared" in x]
    assert line and "does not run on generated inputs with its dynamic dims as 1 (x:1x1)" in line[0], logs
    assert "--override-input-shapes" in line[0], logs


def test_the_old_surgery_module_still_gives_its_public_names():
    from toolkit.surgeon import surgery

    for name in surgery.__all__:
        assert getattr(surgery, name) is not None, name
    assert surgery.sanitize is sanitize and surgery.extract is extract and surgery.optimize is optimize


@pytest.mark.parametrize("cut", [("seq", "y"), ("x", "seq")])
def test_extract_cuts_at_an_intermediate_sequence(tmp_path, cli, cut):
    """The sequence between SequenceConstruct and ConcatFromSequence, whose type the model does not
    state (shape inference gives it), as the subgraph's input or output."""
    path = _sequence_inside(tmp_path)
    out = tmp_path / "cut.onnx"
    res = cli("surgeon", "extract", path, "-o", out, "--inputs", f"{cut[0]}:auto:auto", "--outputs", cut[1])
    assert res.code == 0, res.err
    piece = onnx.load(str(out))
    x = np.ones((2, 3), np.float32)
    if cut[0] == "seq":
        assert piece.graph.input[0].type.WhichOneof("value") == "sequence_type"
        assert run(piece, {"seq": [x, x]})["y"].shape == (4, 3)
    else:
        assert piece.graph.output[0].type.WhichOneof("value") == "sequence_type"
        assert len(run(piece, {"x": x})["seq"]) == 2

"""Polygraphy's `surgeon sanitize/extract` options and `inspect model --list-unbounded-dds`."""

import os

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import modelzoo


def run(path, feed):
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, feed)))


def dds_model():
    """x -> ReduceMax -> Cast(int64) -> Range(0, limit, 1) -> Cast(float) -> y: the Range's size depends on x."""
    inits = [numpy_helper.from_array(np.array(0, np.int64), "start"), numpy_helper.from_array(np.array(1, np.int64), "step")]
    nodes = [
        helper.make_node("ReduceMax", ["x"], ["mx"], name="rmax", keepdims=0),
        helper.make_node("Cast", ["mx"], ["limit"], name="to_int", to=TensorProto.INT64),
        helper.make_node("Range", ["start", "limit", "step"], ["r"], name="range"),
        helper.make_node("Cast", ["r"], ["y"], name="to_float", to=TensorProto.FLOAT),
    ]
    graph = helper.make_graph(nodes, "dds", [modelzoo.vi("x", [4])], [modelzoo.vi("y", ["n"])], inits)
    return modelzoo.make_model(graph, opset=17)


def two_identities():
    nodes = [helper.make_node("Identity", ["x"], ["a"], name="id1"), helper.make_node("Identity", ["a"], ["b"], name="id2")]
    graph = helper.make_graph(nodes, "ids", [modelzoo.vi("x", ["n", 3])], [modelzoo.vi("b", ["n", 3])])
    return modelzoo.make_model(graph)


def test_list_unbounded_dds(tmp_path, cli):
    path = modelzoo.save(dds_model(), tmp_path / "dds.onnx")
    res = cli("inspect", "model", path, "--list-unbounded-dds")
    assert res.code == 0, res.err
    assert res.out.splitlines() == ["Tensors with unbounded data-dependent shapes: 1", "  limit"]
    res = cli("inspect", "model", modelzoo.save(two_identities(), tmp_path / "ids.onnx"), "--list-unbounded-dds")
    assert res.out.splitlines() == ["Tensors with unbounded data-dependent shapes: 0"]


def test_set_unbounded_dds_upper_bound(tmp_path, cli):
    path = modelzoo.save(dds_model(), tmp_path / "dds.onnx")
    out = tmp_path / "b.onnx"
    res = cli("surgeon", "sanitize", path, "-o", out, "--set-unbounded-dds-upper-bound", "2", "limit:3")
    assert res.code == 0, res.err
    m = onnx.load(str(out))
    mins = [n for n in m.graph.node if n.op_type == "Min"]
    assert len(mins) == 1 and mins[0].output[0] == "limit"
    bound = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}[mins[0].input[1]]
    assert bound.tolist() == 3 and bound.dtype == np.int64  # the named bound wins over the global one
    y = run(out, {"x": np.array([1, 9, 2, 5], np.float32)})["y"]
    assert y.tolist() == [0, 1, 2]
    # Once bounded, nothing is left to list.
    assert cli("inspect", "model", out, "--list-unbounded-dds").out.splitlines()[0].endswith(": 0")
    res = cli("surgeon", "sanitize", path, "-o", out, "--set-unbounded-dds-upper-bound", "x:3")
    assert res.code == 3 and "'x'" in res.err and "limit" in res.err
    res = cli("surgeon", "sanitize", path, "-o", out, "--set-unbounded-dds-upper-bound", "lots")
    assert res.code == 2


def test_outputs_mark_all_and_names(tmp_path, cli):
    path = modelzoo.save(two_identities(), tmp_path / "ids.onnx")
    out = tmp_path / "o.onnx"
    res = cli("surgeon", "sanitize", path, "-o", out, "--outputs", "mark", "all")
    assert res.code == 0, res.err
    m = onnx.load(str(out))
    assert [o.name for o in m.graph.output] == ["a", "b"]
    assert m.graph.output[0].type.tensor_type.elem_type == TensorProto.FLOAT
    res = cli("surgeon", "sanitize", path, "-o", out, "--outputs", "a", "--cleanup")
    assert res.code == 0, res.err
    m = onnx.load(str(out))
    assert [o.name for o in m.graph.output] == ["a"] and [n.name for n in m.graph.node] == ["id1"]
    res = cli("surgeon", "sanitize", path, "-o", out, "--outputs", "nope")
    assert res.code == 3 and "'nope'" in res.err


def test_force_fallback_shape_inference_assumes_dynamic_dims(tmp_path, cli):
    path = modelzoo.save(two_identities(), tmp_path / "ids.onnx")
    out = tmp_path / "o.onnx"
    res = cli("surgeon", "sanitize", path, "-o", out, "--force-fallback-shape-inference")
    assert res.code == 0, res.err
    assert len([line for line in res.err.splitlines() if "assumed" in line]) == 1
    m = onnx.load(str(out))
    dims = lambda vi: [d.dim_value for d in vi.type.tensor_type.shape.dim]  # noqa: E731
    assert dims(m.graph.input[0]) == [1, 3] and dims(m.graph.output[0]) == [1, 3]
    assert [(v.name, dims(v)) for v in m.graph.value_info] == [("a", [1, 3])]
    # extract does the same, and the extracted model runs at the assumed shape
    res = cli("surgeon", "extract", path, "-o", out, "--outputs", "a:auto", "--force-fallback-shape-inference")
    assert res.code == 0, res.err
    assert "assumed" in res.err
    m = onnx.load(str(out))
    assert dims(m.graph.input[0]) == [1, 3] and dims(m.graph.output[0]) == [1, 3]


def test_save_external_data_takes_an_optional_path(tmp_path, cli):
    w = numpy_helper.from_array(np.arange(4096, dtype=np.float32).reshape(64, 64), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "g",
                              [modelzoo.vi("x", [1, 64])], [modelzoo.vi("y", [1, 64])], [w])
    path = modelzoo.save(modelzoo.make_model(graph), tmp_path / "m.onnx")
    out = tmp_path / "out" / "o.onnx"
    os.makedirs(out.parent)
    res = cli("surgeon", "sanitize", path, "-o", out, "--save-external-data", "weights.bin", "--fold-constants")
    assert res.code == 0, res.err
    assert (out.parent / "weights.bin").stat().st_size == 4096 * 4
    res = cli("surgeon", "sanitize", path, "--save-external-data", "-o", tmp_path / "out" / "p.onnx")
    assert res.code == 0, res.err
    assert (out.parent / "p.onnx.data").exists()
    x = np.ones((1, 64), np.float32)
    np.testing.assert_allclose(run(out, {"x": x})["y"], x @ np.arange(4096, dtype=np.float32).reshape(64, 64))


def test_no_per_pass_shape_inference_folds_less_on_shape_chains(tmp_path, cli):
    from test_surgeon import shape_chain

    path = modelzoo.save(shape_chain(blocks=3), tmp_path / "chain.onnx")
    out = tmp_path / "o.onnx"
    counts = {}
    for flag in ([], ["--no-per-pass-shape-inference"]):
        res = cli("surgeon", "sanitize", path, "-o", out, "--fold-constants", *flag)
        assert res.code == 0, res.err
        counts[bool(flag)] = len(onnx.load(str(out)).graph.node)
    assert counts[False] <= counts[True]
    res = cli("surgeon", "sanitize", path, "-o", out, "--fold-constants", "--no-onnxruntime-shape-inference")
    assert res.code == 0, res.err


# ---------------------------------------------------------------------- extract on dynamic models


def dynamic_unknown_rank():
    """x:[N,8] -> Relu -> t; y = Reshape(t, Concat([-1], Range(0, k) + 8)) where k comes from data:
    ONNX shape inference cannot tell y's rank, and N is dynamic."""
    inits = [
        numpy_helper.from_array(np.array(0, np.int64), "zero"),
        numpy_helper.from_array(np.array(1, np.int64), "one"),
        numpy_helper.from_array(np.array([-1], np.int64), "minus1"),
        numpy_helper.from_array(np.array(8, np.int64), "eight"),
        numpy_helper.from_array(np.array(0.0, np.float32), "fzero"),
    ]
    nodes = [
        helper.make_node("Relu", ["x"], ["t"], name="relu"),
        helper.make_node("Sigmoid", ["t"], ["s"], name="sigmoid"),
        helper.make_node("ReduceMin", ["s"], ["mn"], name="rmin", keepdims=0),
        helper.make_node("Mul", ["mn", "fzero"], ["z"], name="zero_out"),
        helper.make_node("Cast", ["z"], ["zi"], name="cast", to=TensorProto.INT64),
        helper.make_node("Add", ["zi", "one"], ["k"], name="k"),
        helper.make_node("Range", ["zero", "k", "one"], ["rg"], name="range"),
        helper.make_node("Add", ["rg", "eight"], ["tail"], name="plus8"),
        helper.make_node("Concat", ["minus1", "tail"], ["newshape"], name="concat", axis=0),
        helper.make_node("Reshape", ["s", "newshape"], ["y"], name="reshape"),
    ]
    graph = helper.make_graph(nodes, "dyn", [modelzoo.vi("x", ["N", 8])], [modelzoo.vi("y", None)], inits)
    return modelzoo.make_model(graph, opset=17)


def test_extract_dynamic_model_with_given_cut_shapes(tmp_path, cli):
    path = modelzoo.save(dynamic_unknown_rank(), tmp_path / "dyn.onnx")
    out = tmp_path / "cut.onnx"
    res = cli("surgeon", "extract", path, "-o", out, "--inputs", "t:[2,8]:float32", "--outputs", "y:float32")
    assert res.code == 0, res.err
    m = onnx.load(str(out))
    onnx.checker.check_model(m)
    assert [d.dim_value for d in m.graph.output[0].type.tensor_type.shape.dim] == [2, 8]
    t = np.linspace(-1, 1, 16, dtype=np.float32).reshape(2, 8)
    np.testing.assert_allclose(run(out, {"t": t})["y"], 1 / (1 + np.exp(-t)), rtol=1e-6)
    # Without the cut's shapes, the model's dynamic input is still needed, and the error says so.
    res = cli("surgeon", "extract", path, "-o", out, "--inputs", "t:auto:auto", "--outputs", "y:float32")
    assert res.code == 3 and "--model-input-shapes" in res.err


def test_extract_keeps_symbolic_dims(tmp_path, cli):
    """The model names its dims (sequence_length); ONNX inference would invent unk__N names for the
    ones it cannot derive: the model's own names and values are kept."""
    model = dynamic_unknown_rank()
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "sequence_length"
    model.graph.value_info.append(helper.make_tensor_value_info("y2", TensorProto.FLOAT, ["sequence_length", 8]))
    model.graph.node.append(helper.make_node("Neg", ["y"], ["y2"], name="neg"))
    del model.graph.output[:]
    model.graph.output.append(helper.make_tensor_value_info("y2", TensorProto.FLOAT, ["sequence_length", 8]))
    path = modelzoo.save(model, tmp_path / "sym.onnx")
    out = tmp_path / "cut.onnx"
    res = cli("surgeon", "extract", path, "-o", out, "--inputs", "s:auto:auto", "--outputs", "y2:auto")
    assert res.code == 0, res.err
    m = onnx.load(str(out))
    dims = lambda vi: [d.dim_param or d.dim_value for d in vi.type.tensor_type.shape.dim]  # noqa: E731
    assert dims(m.graph.input[0]) == ["sequence_length", 8]
    assert dims(m.graph.output[0]) == ["sequence_length", 8]
    assert not any(str(d).startswith("unk__") for vi in m.graph.value_info for d in dims(vi))


def padded_sequence():
    """x:[sequence_length, 8] -> Pad (pads computed by a Concat, as exporters write them) -> Relu.
    ONNX shape inference cannot size the Pad's output: every dim of it comes out unknown."""
    nodes = [
        helper.make_node("Concat", ["pads_begin", "pads_end"], ["pads"], name="pads", axis=0),
        helper.make_node("Pad", ["x", "pads"], ["p"], name="pad", mode="reflect"),
        helper.make_node("Relu", ["p"], ["y"], name="relu"),
    ]
    inits = [numpy_helper.from_array(np.array([0, 2], np.int64), "pads_begin"),
             numpy_helper.from_array(np.array([0, 2], np.int64), "pads_end")]
    graph = helper.make_graph(nodes, "pad", [modelzoo.vi("x", ["sequence_length", 8])],
                              [modelzoo.vi("y", ["sequence_length", 12])], inits)
    return modelzoo.make_model(graph, opset=17)


def test_extract_names_dims_that_onnx_inference_loses(tmp_path, cli):
    """The cut's output is sized by symbolic shape inference: the model's dim name and the
    padded width, where ONNX inference knows neither."""
    path = modelzoo.save(padded_sequence(), tmp_path / "pad.onnx")
    out = tmp_path / "cut.onnx"
    res = cli("surgeon", "extract", path, "-o", out, "--outputs", "p:auto")
    assert res.code == 0, res.err
    m = onnx.load(str(out))
    onnx.checker.check_model(m)
    assert [d.dim_param or d.dim_value for d in m.graph.output[0].type.tensor_type.shape.dim] == ["sequence_length", 12]
    x = np.arange(24, dtype=np.float32).reshape(3, 8)
    assert run(out, {"x": x})["p"].shape == (3, 12)


def test_extract_refuses_cut_shapes_that_contradict_inference(tmp_path, cli):
    path = modelzoo.save(dynamic_unknown_rank(), tmp_path / "dyn.onnx")
    out = tmp_path / "cut.onnx"
    res = cli("surgeon", "extract", path, "-o", out, "--inputs", "t:[2,8,1]:float32", "--outputs", "y:float32")
    assert res.code == 3, res.err
    assert "'t'" in res.err and "[2,8,1]" in res.err and "model computes t:[N,8]:float32" in res.err
    assert not out.exists()
    res = cli("surgeon", "extract", path, "-o", out, "--inputs", "t:[2,9]:float32", "--outputs", "y:float32")
    assert res.code == 3 and "t:[N,8]:float32" in res.err
    res = cli("surgeon", "extract", path, "-o", out, "--inputs", "t:[2,8]:int64", "--outputs", "y:float32")
    assert res.code == 3 and "given as int64" in res.err and "t:[N,8]:float32" in res.err
    res = cli("surgeon", "extract", path, "-o", out, "--inputs", "t:[2,8]:float32", "--outputs", "y:int32")
    assert res.code == 3 and "'y'" in res.err


def conv_bn():
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w"),
        numpy_helper.from_array(rng.random(4).astype(np.float32) + 0.5, "scale"),
        numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "bias"),
        numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "mean"),
        numpy_helper.from_array(rng.random(4).astype(np.float32) + 0.5, "var"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "scale", "bias", "mean", "var"], ["bn"], name="bn"),
        helper.make_node("Identity", ["bn"], ["i"], name="identity"),
        helper.make_node("Relu", ["i"], ["y"], name="relu"),
    ]
    graph = helper.make_graph(nodes, "convbn", [modelzoo.vi("x", [1, 3, 8, 8])], [modelzoo.vi("y", [1, 4, 8, 8])], inits)
    return modelzoo.make_model(graph, opset=17)


def test_optimize_fuses_and_keeps_standard_onnx(tmp_path, cli):
    path = modelzoo.save(conv_bn(), tmp_path / "m.onnx")
    out = tmp_path / "o.onnx"
    res = cli("surgeon", "sanitize", path, "-o", out, "--fold-constants", "--optimize")
    assert res.code == 0, res.err
    assert "Optimizing | ONNX-Runtime basic level" in res.err
    m = onnx.load(str(out))
    ops = [n.op_type for n in m.graph.node]
    assert "BatchNormalization" not in ops and "Identity" not in ops and len(ops) < 4
    assert all(n.domain in ("", "ai.onnx") for n in m.graph.node)
    assert [(o.domain, o.version) for o in m.opset_import] == [("", 17)] and m.ir_version == 8
    x = np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype(np.float32)
    np.testing.assert_allclose(run(out, {"x": x})["y"], run(path, {"x": x})["y"], rtol=1e-4, atol=1e-5)


def test_optimize_ir3_models(tmp_path, cli):
    """Before IR 4 initializers are graph inputs too; they are constants for the optimizer
    (as for folding), and the result keeps IR 3 with its initializers listed as inputs (and
    only those: no input left without its initializer)."""
    model = conv_bn()
    model.ir_version = 3
    model.opset_import[0].version = 9
    # Two Reshapes reading equal shapes stored twice: ONNX-Runtime keeps one of them and, at IR 3,
    # left the other listed as a graph input without its initializer (a model that does not run).
    g = model.graph
    g.output[0].name = "y0"
    g.node[-1].output[0] = "y0"
    g.node.extend([helper.make_node("Reshape", ["y0", "flat"], ["f"], name="flatten"),
                   helper.make_node("Relu", ["f"], ["f2"], name="relu2"),
                   helper.make_node("Reshape", ["f2", "back"], ["y"], name="unflatten"),
                   helper.make_node("Reshape", ["y0", "flat_again"], ["yf"], name="flatten_again")])
    g.output.append(modelzoo.vi("y", [1, 4, 8, 8]))
    g.output.append(modelzoo.vi("yf", [1, 256]))
    g.output[0].CopyFrom(modelzoo.vi("y0", [1, 4, 8, 8]))
    g.initializer.extend([numpy_helper.from_array(np.array([1, 256], np.int64), "flat"),
                          numpy_helper.from_array(np.array([1, 4, 8, 8], np.int64), "back"),
                          numpy_helper.from_array(np.array([1, 256], np.int64), "flat_again")])
    for t in model.graph.initializer:
        model.graph.input.append(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    path = modelzoo.save(model, tmp_path / "m.onnx")
    out = tmp_path / "o.onnx"
    res = cli("surgeon", "sanitize", path, "-o", out, "--fold-constants", "--optimize")
    assert res.code == 0, res.err
    m = onnx.load(str(out))
    assert "BatchNormalization" not in [n.op_type for n in m.graph.node]
    assert m.ir_version == 3
    assert {t.name for t in m.graph.initializer} <= {i.name for i in m.graph.input}
    assert "Optimizing | ONNX-Runtime basic level" in res.err
    x = np.random.default_rng(2).standard_normal((1, 3, 8, 8)).astype(np.float32)
    np.testing.assert_allclose(run(out, {"x": x})["y"], run(path, {"x": x})["y"], rtol=1e-4, atol=1e-5)


def parallel_branches():
    """Inception-like: three Conv+Relu branches on x; two read equal (separately stored)
    weights, the third different ones; a RandomNormalLike pair that must stay two; the
    branches are concatenated."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 3, 1, 1)).astype(np.float32)
    inits = [numpy_helper.from_array(w, "w_a"), numpy_helper.from_array(w.copy(), "w_b"),
             numpy_helper.from_array(w + 1, "w_c")]
    nodes = []
    for k in "abc":
        nodes += [helper.make_node("Conv", ["x", f"w_{k}"], [f"c_{k}"], name=f"conv_{k}"),
                  helper.make_node("Relu", [f"c_{k}"], [f"r_{k}"], name=f"relu_{k}")]
    nodes += [helper.make_node("RandomNormalLike", ["r_a"], [f"n_{k}"], name=f"noise_{k}", seed=float(i))
              for i, k in enumerate("ab")]
    nodes += [helper.make_node("Concat", ["r_a", "r_b", "r_c"], ["y"], name="concat", axis=1),
              helper.make_node("Concat", ["n_a", "n_b"], ["noise"], name="concat_noise", axis=1)]
    graph = helper.make_graph(nodes, "branches", [modelzoo.vi("x", [1, 3, 8, 8])],
                              [modelzoo.vi("y", [1, 12, 8, 8]), modelzoo.vi("noise", [1, 8, 8, 8])], inits)
    return modelzoo.make_model(graph, opset=17)


def test_optimize_merges_duplicate_nodes(tmp_path, cli):
    path = modelzoo.save(parallel_branches(), tmp_path / "m.onnx")
    out = tmp_path / "o.onnx"
    res = cli("surgeon", "sanitize", path, "-o", out, "--fold-constants", "--optimize", "--no-validate")
    assert res.code == 0, res.err
    assert "2 duplicate node(s) merged" in res.err
    m = onnx.load(str(out))
    ops = [n.op_type for n in m.graph.node]
    assert ops.count("Conv") == 2 and ops.count("Relu") == 2 and ops.count("RandomNormalLike") == 2
    assert all(n.domain in ("", "ai.onnx") for n in m.graph.node)
    x = np.random.default_rng(3).standard_normal((1, 3, 8, 8)).astype(np.float32)
    np.testing.assert_allclose(run(out, {"x": x})["y"], run(path, {"x": x})["y"], rtol=1e-5, atol=1e-6)


def test_merging_keeps_nodes_that_differ_or_are_graph_outputs():
    import onnx_graphsurgeon as gs

    from toolkit.surgeon.optimize import eliminate_common_subexpressions

    model = parallel_branches()
    # r_b becomes a graph output: conv_b/relu_b must stay (relu_b is not merged, conv_b is)
    model.graph.output.append(modelzoo.vi("r_b", [1, 4, 8, 8]))
    for n in model.graph.node:
        if n.name == "relu_b":
            n.attribute.append(helper.make_attribute("unused", 1))  # attributes differ too
    graph = gs.import_onnx(model)
    assert eliminate_common_subexpressions(gs, graph) == 1
    graph.cleanup()
    names = sorted(n.name for n in graph.nodes)
    assert "relu_b" in names and "conv_b" not in names and "conv_c" in names


def test_a_dim_named_by_symbolic_inference_is_named_on_the_input_too(tmp_path, cli):
    """The input's dynamic dim has no name: symbolic inference calls it x_d0 and sizes the Pad's
    output with it; the written input carries x_d0 too, so the output names a dim that exists."""
    model = padded_sequence()
    model.graph.input[0].type.tensor_type.shape.dim[0].ClearField("dim_param")
    model.graph.output[0].type.tensor_type.shape.dim[0].ClearField("dim_param")
    path = modelzoo.save(model, tmp_path / "pad.onnx")
    out = tmp_path / "cut.onnx"
    res = cli("surgeon", "extract", path, "-o", out, "--outputs", "p:auto")
    assert res.code == 0, res.err
    m = onnx.load(str(out))
    onnx.checker.check_model(m)
    dims = lambda vi: [d.dim_param or d.dim_value for d in vi.type.tensor_type.shape.dim]  # noqa: E731
    assert dims(m.graph.output[0])[1] == 12
    name = dims(m.graph.output[0])[0]
    assert isinstance(name, str) and name and dims(m.graph.input[0]) == [name, 8]
    assert run(out, {"x": np.zeros((3, 8), np.float32)})["p"].shape == (3, 12)

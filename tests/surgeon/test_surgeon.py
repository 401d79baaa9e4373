"""`toolkit surgeon extract` and `toolkit surgeon sanitize` (toolkit.surgeon)."""

import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import modelzoo
from toolkit.core.errors import InputError
from toolkit.core.meta import TensorMeta
from toolkit.core.meta import parse_size
from toolkit.surgeon.extract import dangling_tensors, extract
from toolkit.surgeon.sanitize import sanitize


def run(model_or_path, feed):
    data = model_or_path if isinstance(model_or_path, str) else model_or_path.SerializeToString()
    sess = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, feed)))


def shape_chain(blocks=4, channels=8):
    """Per block: Relu, Add(scalar), Shape -> Gather(1) -> Unsqueeze -> Concat([-1], .) -> Reshape, Sigmoid.

    The batch dim is dynamic. Without data propagation each Reshape hides the next block's
    channel dim, so a folder that does not re-infer shapes needs one pass per block.
    """
    inits = [
        numpy_helper.from_array(np.array([-1], np.int64), "minus1"),
        numpy_helper.from_array(np.array(1, np.int64), "one"),
        numpy_helper.from_array(np.array([0], np.int64), "axes0"),
    ]
    nodes = []
    x = "x"
    for k in range(blocks):
        p = f"b{k}_"
        inits.append(numpy_helper.from_array(np.full((1,), 0.1 * (k + 1), np.float32), f"bias{k}"))
        nodes += [
            helper.make_node("Relu", [x], [p + "relu"], name=p + "relu"),
            helper.make_node("Add", [p + "relu", f"bias{k}"], [p + "add"], name=p + "add"),
            helper.make_node("Shape", [p + "add"], [p + "shape"], name=p + "shape"),
            helper.make_node("Gather", [p + "shape", "one"], [p + "c"], name=p + "gather", axis=0),
            helper.make_node("Unsqueeze", [p + "c", "axes0"], [p + "cu"], name=p + "unsqueeze"),
            helper.make_node("Concat", ["minus1", p + "cu"], [p + "newshape"], name=p + "concat", axis=0),
            helper.make_node("Reshape", [p + "add", p + "newshape"], [p + "reshaped"], name=p + "reshape"),
            helper.make_node("Sigmoid", [p + "reshaped"], [p + "out"], name=p + "sigmoid"),
        ]
        x = p + "out"
    graph = helper.make_graph(
        nodes, "shape_chain", [modelzoo.vi("x", ["batch", channels])], [modelzoo.vi(x, ["batch", channels])], inits
    )
    return modelzoo.make_model(graph)


def input_dims(model, i=0):
    return [d.dim_param or d.dim_value for d in model.graph.input[i].type.tensor_type.shape.dim]


# ---------------------------------------------------------------------- extract


def test_extract_by_name_with_auto_on_branching_model(tmp_path, cli):
    path = modelzoo.save(modelzoo.branch(), tmp_path / "branch.onnx")
    out = tmp_path / "sub.onnx"
    res = cli("surgeon", "extract", path, "-o", out, "--inputs", "r:auto:auto", "--outputs", "a:auto")
    assert res.code == 0, res.err
    assert res.out == ""
    sub = onnx.load(str(out))
    onnx.checker.check_model(sub)
    assert [n.name for n in sub.graph.node] == ["sigmoid", "mul", "add"]
    assert [i.name for i in sub.graph.input] == ["r"]
    assert input_dims(sub) == [1, 4]
    assert sub.graph.input[0].type.tensor_type.elem_type == TensorProto.FLOAT
    assert [o.name for o in sub.graph.output] == ["a"]
    assert sub.ir_version == 8 and sub.opset_import[0].version == 17
    r = np.array([[0.0, 1.0, 2.0, 3.0]], np.float32)
    got = run(sub, {"r": r})["a"]
    np.testing.assert_allclose(got, 1 / (1 + np.exp(-r)) + 3 * r, rtol=1e-6)


def test_extract_keeps_model_inputs_and_outer_reads_of_if_bodies():
    model = modelzoo.with_if()
    sub = extract(model, outputs=[TensorMeta("if_out")])
    # relu feeds the If only through its bodies; it must be kept
    assert [n.name for n in sub.graph.node] == ["relu", "if"]
    assert [i.name for i in sub.graph.input] == ["x", "cond"]
    onnx.checker.check_model(sub)
    x = np.array([[-1, 2, -3, 4]], np.float32)
    got = run(sub, {"x": x, "cond": np.array(True)})["if_out"]
    np.testing.assert_allclose(got, np.maximum(x, 0) * 2)


def test_extract_if_body_reading_a_cut_tensor_is_dangling():
    with pytest.raises(InputError) as exc:
        extract(modelzoo.with_if(), inputs=[TensorMeta("cond")], outputs=[TensorMeta("if_out")])
    assert "'x'" in str(exc.value)
    sub = extract(modelzoo.with_if(), inputs=[TensorMeta("cond"), TensorMeta("r")], outputs=[TensorMeta("y")])
    assert [n.name for n in sub.graph.node] == ["if", "abs"]
    assert dangling_tensors(sub) == []


def test_dangling_input_is_an_error_naming_the_tensor(tmp_path, cli):
    path = modelzoo.save(modelzoo.branch(), tmp_path / "branch.onnx")
    out = tmp_path / "sub.onnx"
    # 'a' needs s and m; m needs r, which needs x: cutting only at s leaves x without producer
    res = cli("surgeon", "extract", path, "-o", out, "--inputs", "s:auto:auto", "--outputs", "a")
    assert res.code == 3
    assert "'x'" in res.err and "--inputs" in res.err
    assert "add 'm' to --inputs" in res.err  # where the cut should be widened
    assert "Traceback" not in res.err
    assert not out.exists()
    res = cli("surgeon", "extract", path, "-o", out, "--inputs", "s:auto:auto", "m:auto:auto", "--outputs", "a")
    assert res.code == 0, res.err


def test_extract_from_ir3_model_lists_initializers_as_inputs():
    model = modelzoo.branch()
    model.ir_version = 3
    model.opset_import[0].version = 9
    w = model.graph.initializer[0]
    model.graph.input.append(helper.make_tensor_value_info(w.name, w.data_type, list(w.dims)))
    sub = extract(model, inputs=[TensorMeta("r")], outputs=[TensorMeta("a")])
    assert sub.ir_version == 3
    onnx.checker.check_model(sub)
    assert run(sub, {"r": np.ones((1, 4), np.float32)})["a"].shape == (1, 4)


def test_unknown_tensor_name_is_an_error(tmp_path, cli):
    path = modelzoo.save(modelzoo.branch(), tmp_path / "branch.onnx")
    out = tmp_path / "sub.onnx"
    res = cli("surgeon", "extract", path, "-o", out, "--outputs", "sigmoidd")
    assert res.code == 3
    assert "'sigmoidd'" in res.err
    assert not out.exists()
    res = cli("surgeon", "extract", path, "-o", out, "--inputs", "w:auto:auto")
    assert res.code == 3 and "'w'" in res.err  # an initializer cannot be cut at


def test_extract_explicit_shapes_and_names_with_colons(tmp_path, cli):
    model = modelzoo.chain(3)
    for node in model.graph.node:
        node.input[:] = [n.replace("t", "t:0") for n in node.input]
        node.output[:] = [n.replace("t", "t:0") for n in node.output]
    path = modelzoo.save(model, tmp_path / "m.onnx")
    out = tmp_path / "sub.onnx"
    res = cli("surgeon", "extract", path, "-o", out, "--inputs", "t:00:[1,4]:float32", "--outputs", "t:01:float32")
    assert res.code == 0, res.err
    sub = onnx.load(str(out))
    assert [i.name for i in sub.graph.input] == ["t:00"]
    assert [o.name for o in sub.graph.output] == ["t:01"]
    assert len(sub.graph.node) == 1


def gelu_model():
    """x[batch,4] -> com.microsoft.Gelu (ONNX inference does not know it) -> Relu -> y."""
    nodes = [
        helper.make_node("Gelu", ["x"], ["g"], name="gelu", domain="com.microsoft"),
        helper.make_node("Relu", ["g"], ["y"], name="relu"),
    ]
    graph = helper.make_graph(nodes, "gelu", [modelzoo.vi("x", ["batch", 4])], [modelzoo.vi("y", ["batch", 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    return model


def test_extract_falls_back_to_onnxruntime(tmp_path, cli):
    path = modelzoo.save(gelu_model(), tmp_path / "gelu.onnx")
    out = tmp_path / "sub.onnx"
    res = cli("surgeon", "extract", path, "-o", out, "--inputs", "g:auto:auto")
    assert res.code == 3 and "--model-input-shapes" in res.err and "'x'" in res.err
    res = cli("surgeon", "extract", path, "-o", out, "--inputs", "g:auto:auto", "--model-input-shapes", "x:[2,4]")
    assert res.code == 0, res.err
    sub = onnx.load(str(out))
    assert input_dims(sub) == [2, 4]
    res = cli(
        "surgeon", "extract", path, "-o", out, "--inputs", "x:auto:auto", "--outputs", "g:auto",
        "--force-fallback-shape-inference", "--model-input-shapes", "x:1x4",
    )
    assert res.code == 0, res.err
    sub = onnx.load(str(out))
    assert input_dims(sub) == [1, 4] and [n.op_type for n in sub.graph.node] == ["Gelu"]


def test_failed_extract_over_the_input_leaves_it_intact(tmp_path, cli):
    path = modelzoo.save(modelzoo.branch(), tmp_path / "branch.onnx")
    before = open(path, "rb").read()
    res = cli("surgeon", "extract", path, "-o", path, "--inputs", "s:auto:auto", "--outputs", "a")
    assert res.code == 3
    assert open(path, "rb").read() == before
    res = cli("surgeon", "extract", path, "-o", path, "--outputs", "m")
    assert res.code == 0
    assert [n.name for n in onnx.load(path).graph.node] == ["relu", "mul"]
    assert [f for f in os.listdir(tmp_path) if f.endswith(".tmp")] == []


# ---------------------------------------------------------------------- sanitize


def test_fold_shape_chain_in_few_passes_keeps_dynamic_batch():
    model = shape_chain(blocks=6)
    original = onnx.ModelProto()
    original.CopyFrom(model)
    logs = []
    folded, report = sanitize(model, fold_constants=True, remove_noops=True, log=logs.append)
    # all of Shape/Gather/Unsqueeze/Concat fold, and the Reshape to [-1, 8] of a [batch, 8] tensor
    # is a no-op that goes too (with remove_noops); Relu, Add, Sigmoid stay per block
    assert len(folded.graph.node) == 6 * 3
    assert {n.op_type for n in folded.graph.node} == {"Relu", "Add", "Sigmoid"}
    assert len(report.passes) <= 2 and report.converged
    assert any("pass 1 | nodes 48 -> 18" in line for line in logs)
    assert input_dims(folded) == ["batch", 8]
    assert folded.ir_version == 8 and [o.version for o in folded.opset_import] == [17]
    onnx.checker.check_model(folded)
    for batch in (1, 5):
        x = np.random.default_rng(batch).standard_normal((batch, 8)).astype(np.float32)
        want = run(original, {"x": x})
        got = run(folded, {"x": x})
        np.testing.assert_allclose(got["b5_out"], want["b5_out"], rtol=1e-6)


def test_num_passes_caps_folding():
    logs = []
    _, report = sanitize(shape_chain(blocks=3), fold_constants=True, num_passes=1, log=logs.append)
    assert len(report.passes) == 1


def test_dynamic_batch_model_folds_only_static_parts():
    folded, _ = sanitize(modelzoo.dynamic_batch(), fold_constants=True)
    ops = [n.op_type for n in folded.graph.node]
    assert "Shape" in ops  # the batch dim is dynamic: its shape computation stays
    assert input_dims(folded) == ["batch", 4]
    x = np.ones((3, 4), np.float32)
    assert run(folded, {"x": x})["y"].shape == (3, 4)


def test_override_input_shapes_freezes_and_folds(tmp_path, cli):
    path = modelzoo.save(modelzoo.dynamic_batch(), tmp_path / "m.onnx")
    out = tmp_path / "o.onnx"
    x = np.arange(12, dtype=np.float32).reshape(3, 4) - 6
    for extra, ops in (([], ["Relu", "Reshape"]), (["--remove-noops"], ["Relu"])):
        res = cli("surgeon", "sanitize", path, "-o", out, "--override-input-shapes", "x:[3,4]", "--fold-constants", *extra)
        assert res.code == 0, res.err
        m = onnx.load(str(out))
        assert input_dims(m) == [3, 4]
        assert [d.dim_value for d in m.graph.output[0].type.tensor_type.shape.dim] == [3, 4]
        # the Reshape to [-1, 4] of a [3, 4] is a no-op: folding keeps it, --remove-noops removes it
        assert [n.op_type for n in m.graph.node] == ops
        np.testing.assert_array_equal(run(m, {"x": x})["y"], np.maximum(x, 0))
    # A tensor that is not a graph input is ignored with a warning naming the inputs (as Polygraphy does).
    inner = next(o for n in modelzoo.dynamic_batch().graph.node for o in n.output)
    res = cli("surgeon", "sanitize", path, "-o", out, "--override-input-shapes", f"{inner}:[3,4]")
    assert res.code == 0 and f"warning: '{inner}' is not an input of the model (its inputs: x)" in res.err
    assert input_dims(onnx.load(str(out))) == ["batch", 4]


def bad_node_model():
    """Two constant chains: one through an op ONNX-Runtime does not have, one foldable."""
    c1 = numpy_helper.from_array(np.ones((2, 2), np.float32), "c1")
    c2 = numpy_helper.from_array(np.full((2, 2), 3.0, np.float32), "c2")
    nodes = [
        helper.make_node("Mystery", ["c1"], ["bad"], name="mystery", domain="custom.ops"),
        helper.make_node("Add", ["x", "bad"], ["t"], name="add_bad"),
        helper.make_node("Mul", ["c2", "c2"], ["sq"], name="square"),
        helper.make_node("Neg", ["sq"], ["nsq"], name="neg"),
        helper.make_node("Add", ["t", "nsq"], ["y"], name="add_good"),
    ]
    graph = helper.make_graph(nodes, "bad", [modelzoo.vi("x", [2, 2])], [modelzoo.vi("y", [2, 2])], [c1, c2])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("custom.ops", 1)])
    model.ir_version = 8
    return model


def test_one_bad_node_does_not_stop_folding():
    logs = []
    folded, _ = sanitize(bad_node_model(), fold_constants=True, log=logs.append)
    names = [n.name for n in folded.graph.node]
    assert "mystery" in names
    assert "square" not in names and "neg" not in names
    assert any("Mystery cannot be folded" in line for line in logs)


@pytest.mark.parametrize("named", [True, False])
def test_node_failing_at_run_time_is_left_unfolded(named):
    """A Gather out of bounds on constants fails in ONNX-Runtime; the other chain still folds."""
    c = numpy_helper.from_array(np.ones((2, 2), np.float32), "c")
    idx = numpy_helper.from_array(np.array([5], np.int64), "idx")
    c2 = numpy_helper.from_array(np.full((2, 2), 3.0, np.float32), "c2")
    nodes = [
        helper.make_node("Gather", ["c", "idx"], ["g"], name="gather" if named else ""),
        helper.make_node("Add", ["x", "g"], ["t"], name="add_bad"),
        helper.make_node("Mul", ["c2", "c2"], ["sq"], name="square"),
        helper.make_node("Add", ["t", "sq"], ["y"], name="add_good"),
    ]
    graph = helper.make_graph(nodes, "g", [modelzoo.vi("x", [2, 2])], [modelzoo.vi("y", None)], [c, idx, c2])
    logs = []
    folded, report = sanitize(modelzoo.make_model(graph), fold_constants=True, log=logs.append)
    assert [n.op_type for n in folded.graph.node] == ["Gather", "Add", "Add"]
    assert folded.graph.node[0].name == ("gather" if named else "")
    assert report.passes[0].partitioning.startswith("none")
    assert any("cannot be folded" in line for line in logs)


def test_fold_size_threshold_keeps_big_constants():
    shape = numpy_helper.from_array(np.array([256, 256], np.int64), "shape")
    one = numpy_helper.from_array(np.array(1.0, np.float32), "one")
    nodes = [
        helper.make_node("Expand", ["one", "shape"], ["big"], name="expand"),
        helper.make_node("Add", ["x", "big"], ["y"], name="add"),
    ]
    graph = helper.make_graph(nodes, "exp", [modelzoo.vi("x", [256, 256])], [modelzoo.vi("y", [256, 256])], [shape, one])
    kept, _ = sanitize(modelzoo.make_model(graph), fold_constants=True, fold_size_threshold=parse_size("1K"))
    assert [n.op_type for n in kept.graph.node] == ["Expand", "Add"]
    folded, _ = sanitize(modelzoo.make_model(graph), fold_constants=True)
    assert [n.op_type for n in folded.graph.node] == ["Add"]


def test_cleanup_and_toposort(tmp_path, cli):
    model = modelzoo.branch()
    nodes = list(model.graph.node)
    nodes.append(helper.make_node("Neg", ["r"], ["unused"], name="unused"))
    del model.graph.node[:]
    model.graph.node.extend(reversed(nodes))
    path = modelzoo.save(model, tmp_path / "m.onnx")
    out = tmp_path / "o.onnx"
    res = cli("surgeon", "sanitize", path, "-o", out, "--cleanup", "--toposort")
    assert res.code == 0, res.err
    m = onnx.load(str(out))
    assert [n.name for n in m.graph.node][0] == "relu" and "unused" not in [n.name for n in m.graph.node]
    onnx.checker.check_model(m)


def test_sanitize_pipe_to_inspect(tmp_path):
    """`toolkit surgeon sanitize m.onnx --fold-constants -o - | toolkit inspect model - --mode=basic`."""
    import subprocess
    import sys

    path = modelzoo.save(shape_chain(blocks=3), tmp_path / "m.onnx")
    cmd = [sys.executable, "-m", "toolkit"]
    san = subprocess.Popen(
        cmd + ["surgeon", "sanitize", path, "--fold-constants", "--remove-noops", "-o", "-"], stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    ins = subprocess.run(cmd + ["inspect", "model", "-", "--mode=basic"], stdin=san.stdout, capture_output=True)
    san.stdout.close()
    san_err = san.stderr.read().decode()
    assert san.wait() == 0, san_err
    assert "pass 1 | nodes 24 -> 9" in san_err
    assert ins.returncode == 0, ins.stderr
    out = ins.stdout.decode()
    assert "b2_sigmoid" in out and "Op: Shape" not in out and "Op: Reshape" not in out


def test_external_data_in_and_out(tmp_path, cli):
    big = np.arange(4096, dtype=np.float32).reshape(1, 4096)
    w = numpy_helper.from_array(big, "w")
    c = numpy_helper.from_array(np.full((1, 4096), 2.0, np.float32), "c")
    nodes = [
        helper.make_node("Mul", ["w", "c"], ["wc"], name="fold_me"),
        helper.make_node("Add", ["x", "wc"], ["y"], name="add"),
    ]
    graph = helper.make_graph(nodes, "ext", [modelzoo.vi("x", [1, 4096])], [modelzoo.vi("y", [1, 4096])], [w, c])
    src_dir = tmp_path / "src"
    src_dir.mkdir()
    path = modelzoo.save_with_external_data(modelzoo.make_model(graph), src_dir / "m.onnx")
    out = tmp_path / "o.onnx"
    res = cli("surgeon", "sanitize", path, "-o", out, "--fold-constants", "--save-external-data")
    assert res.code == 0, res.err
    assert (tmp_path / "o.onnx.data").exists()
    m = onnx.load(str(out))
    assert [n.name for n in m.graph.node] == ["add"]
    x = np.ones((1, 4096), np.float32)
    np.testing.assert_allclose(run(str(out), {"x": x})["y"], 1 + 2 * big)
    # stdin model, weights found through --external-data-dir
    res = cli("surgeon", "extract", "-", "-o", tmp_path / "e.onnx", "--external-data-dir", src_dir,
              "--outputs", "wc", stdin=open(path, "rb").read())
    assert res.code == 0, res.err


def test_external_data_out_takes_constant_values_and_branch_weights(tmp_path, cli):
    """Weights held by Constant nodes (paddle2onnx writes every weight so) and by an If branch
    go to the data file too: --save-external-data wrote them inside the model (a model over
    2 GB so could not be written at all)."""
    big = np.linspace(-1, 1, 4096, dtype=np.float32).reshape(1, 4096)
    const = helper.make_node("Constant", [], ["w"], name="w", value=numpy_helper.from_array(big, "w"))
    branch = helper.make_graph([helper.make_node("Mul", ["wa", "b"], ["t"], name="scale")], "then", [],
                               [modelzoo.vi("t", [1, 4096])], [numpy_helper.from_array(2 * big, "b")])
    other = helper.make_graph([helper.make_node("Identity", ["wa"], ["e"], name="keep")], "else", [],
                              [modelzoo.vi("e", [1, 4096])])
    nodes = [const, helper.make_node("Add", ["x", "w"], ["wa"], name="add"),
             helper.make_node("If", ["c"], ["y"], name="branch", then_branch=branch, else_branch=other)]
    graph = helper.make_graph(nodes, "consts", [modelzoo.vi("x", [1, 4096]), modelzoo.vi("c", [], TensorProto.BOOL)],
                              [modelzoo.vi("y", [1, 4096])])
    path = str(tmp_path / "m.onnx")
    onnx.save(modelzoo.make_model(graph, opset=17), path)
    feed = {"x": np.ones((1, 4096), np.float32), "c": np.array(True)}
    out = tmp_path / "o.onnx"
    res = cli("surgeon", "sanitize", path, "-o", out, "--cleanup", "--save-external-data")
    assert res.code == 0, res.err
    assert os.path.getsize(out) < 4096 and os.path.getsize(str(out) + ".data") >= 2 * big.nbytes
    np.testing.assert_array_equal(run(str(out), feed)["y"], (1 + big) * 2 * big)
    conv = tmp_path / "h.onnx"
    res = cli("convert", path, "--fp-to-fp16", "-o", conv, "--external-data", "--no-validate")
    assert res.code == 0, res.err
    assert os.path.getsize(conv) < 4096 and os.path.exists(str(conv) + ".data")
    np.testing.assert_allclose(run(str(conv), feed)["y"], (1 + big) * 2 * big, rtol=2e-3)


def test_parse_size():
    assert parse_size("1024") == 1024
    assert parse_size("4K") == 4096
    assert parse_size("1.5M") == 3 * 2**19
    assert parse_size("1GiB") == 2**30


def test_sanitize_reads_stdin(tmp_path, cli):
    data = shape_chain(blocks=2).SerializeToString()
    out = tmp_path / "o.onnx"
    res = cli("surgeon", "sanitize", "-", "--fold-constants", "--remove-noops", "-o", out, stdin=data)
    assert res.code == 0, res.err
    assert len(onnx.load(str(out)).graph.node) == 6

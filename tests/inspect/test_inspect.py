import json
import re

import modelzoo as z
import numpy as np
import onnx
import pytest

from conftest import run_toolkit


@pytest.fixture
def seed_model(tmp_path):
    return z.save(z.seed_example(), tmp_path / "model.onnx")


def test_none_mode_shows_io_and_initializers_but_no_nodes(cli, seed_model):
    res = cli("inspect", "model", seed_model)
    assert res.code == 0, res.err
    assert "Name: seed_example" in res.out
    assert "ONNX Opset: 17" in res.out
    assert "{x0 [dtype=float32, shape=(1, 3, 224, 224)], x1 [dtype=float32, shape=(1, 3, 224, 224)]}" in res.out
    assert "---- 2 Initializer(s) ----" in res.out
    assert "a [dtype=float32, shape=(1, 3, 224, 224)]" in res.out
    assert "---- 3 Node(s) ----" in res.out
    assert "[Op: Mul]" not in res.out


def test_basic_mode_node_lines_are_greppable(cli, seed_model):
    res = cli("inspect", "model", seed_model, "--mode=basic")
    assert res.code == 0
    lines = res.out.splitlines()
    node_lines = [l.strip() for l in lines if l.strip().startswith("Node ")]
    assert node_lines == [
        "Node 0    | onnx_graphsurgeon_node_1 [Op: Mul]",
        "Node 1    | onnx_graphsurgeon_node_3 [Op: Add]",
        "Node 2    | onnx_graphsurgeon_node_5 [Op: Add]",
    ]
    assert re.search("Op: Mul", res.out)
    # initializer inputs are marked, outputs follow '->'; intermediate shapes as the reference
    # shows them: none recorded, none shown (--shape-inference infers them)
    assert "Initializer | a [dtype=float32" in res.out
    assert "-> {mul_out}" in res.out
    res = cli("inspect", "model", seed_model, "--mode=basic", "--shape-inference")
    assert "-> {mul_out [dtype=float32, shape=(1, 3, 224, 224)]}" in res.out


def test_show_words_equal_mode(cli, tmp_path):
    path = z.save(z.with_constant(), tmp_path / "c.onnx")
    by_mode = cli("inspect", "model", path, "--mode=full")
    by_show = cli("inspect", "model", path, "--show", "layers", "attrs", "weights")
    assert by_mode.code == by_show.code == 0
    assert by_mode.out == by_show.out
    assert "const_c.value = Tensor [dtype=float32, shape=(1, 4)] [[1. 1. 1. 1.]]" in by_mode.out
    attrs_only = cli("inspect", "model", path, "--mode=attrs")
    assert "---- Attributes ----" in attrs_only.out
    basic = cli("inspect", "model", path, "--mode=basic")
    assert "---- Attributes ----" not in basic.out


def test_full_mode_summarises_weights(cli, seed_model):
    res = cli("inspect", "model", seed_model, "--mode=full")
    assert res.code == 0
    assert "Stats: mean=2, std=0, min=2, max=2" in res.out
    assert "..." in res.out  # 150528 values are summarised, not printed


def test_attributes_printed(cli, tmp_path):
    from onnx import helper

    node = helper.make_node("LeakyRelu", ["x"], ["y"], name="lrelu", alpha=0.01)
    g = helper.make_graph([node], "g", [z.vi("x", [1, 3])], [z.vi("y", [1, 3])])
    path = z.save(z.make_model(g), tmp_path / "l.onnx")
    res = cli("inspect", "model", path, "--mode=attrs")
    assert "lrelu.alpha = 0.009999999776482582" in res.out


def test_if_subgraph_nested_under_node(cli, tmp_path):
    path = z.save(z.with_if(), tmp_path / "if.onnx")
    res = cli("inspect", "model", path, "--mode=basic")
    assert res.code == 0
    lines = res.out.splitlines()
    if_line = next(i for i, l in enumerate(lines) if "[Op: If]" in l)
    then_line = next(i for i, l in enumerate(lines) if "then_mul [Op: Mul]" in l)
    abs_line = next(i for i, l in enumerate(lines) if "[Op: Abs]" in l)
    assert if_line < then_line < abs_line
    indent = lambda s: len(s) - len(s.lstrip())
    assert indent(lines[then_line]) > indent(lines[if_line])
    assert "Subgraph: then_branch" in res.out and "Subgraph: else_branch" in res.out


def test_tensors_inside_bodies_get_inferred_types(cli, tmp_path):
    # silero-vad's If branches hold Constant weights and intermediate tensors with no value_info:
    # shape inference types them, and the listing shows it (not dtype=?, shape=?)
    from onnx import helper

    model = z.with_if()
    then_g = next(a.g for a in model.graph.node[1].attribute if a.name == "then_branch")
    then_g.node[0].output[0] = "doubled"
    then_g.node.append(helper.make_node("Neg", ["doubled"], ["then_out"], name="then_neg"))
    path = z.save(model, tmp_path / "if.onnx")
    res = cli("inspect", "model", path, "--mode=basic", "--shape-inference")
    assert res.code == 0, res.err
    assert "-> {doubled [dtype=float32, shape=(1, 4)]}" in res.out
    res = cli("inspect", "model", path, "--mode=basic")  # without it: what the model records (nothing)
    assert res.code == 0, res.err
    assert "-> {doubled}" in res.out


def test_shape_inference_flag_decides_intermediate_shapes(cli, tmp_path, monkeypatch):
    """Like the reference: intermediate tensors show inferred shapes only with --shape-inference;
    without it they show what the model records, and shape inference does not run at all."""
    from onnx import TensorProto, helper

    import toolkit.core.io.model as core_model

    nodes = [helper.make_node("Relu", ["x"], ["a"], name="r"), helper.make_node("Sigmoid", ["a"], ["y"], name="s")]
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
    )
    path = z.save(z.make_model(g), tmp_path / "two.onnx")
    res = cli("inspect", "model", path, "--show", "layers", "--shape-inference")
    assert res.code == 0, res.err
    assert "-> {a [dtype=float32, shape=(1, 4)]}" in res.out
    calls = []
    real = core_model.infer_shapes
    monkeypatch.setattr(core_model, "infer_shapes", lambda *a, **k: calls.append(1) or real(*a, **k))
    res = cli("inspect", "model", path, "--show", "layers")
    assert res.code == 0, res.err
    assert "-> {a}" in res.out and "{a}\n" in res.out + "\n" and "a [dtype" not in res.out
    assert calls == []  # the fast path: no shape inference
    recorded = onnx.load(path)
    recorded.graph.value_info.append(helper.make_tensor_value_info("a", TensorProto.FLOAT, [1, 4]))
    onnx.save(recorded, path)
    res = cli("inspect", "model", path, "--show", "layers")
    assert "-> {a [dtype=float32, shape=(1, 4)]}" in res.out  # what the model records is shown


def test_symbolic_and_unknown_dims(cli, tmp_path):
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, None])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
    path = z.save(z.make_model(g), tmp_path / "d.onnx")
    res = cli("inspect", "model", path)
    assert "{x [dtype=float32, shape=('batch', 3, ?)]}" in res.out
    assert "{y [dtype=float32, shape=?]}" in res.out


def test_json_output(cli, tmp_path):
    path = z.save(z.with_if(), tmp_path / "if.onnx")
    res = cli("inspect", "model", path, "--mode=attrs", "--json")
    assert res.code == 0
    desc = json.loads(res.out)
    assert desc["opsets"] == {"ai.onnx": 17}
    g = desc["graph"]
    assert [i["name"] for i in g["inputs"]] == ["x", "cond"]
    assert g["inputs"][0]["shape"] == [1, 4]
    ops = [n["op"] for n in g["nodes"]]
    assert ops == ["Relu", "If", "Abs"]
    sub = g["nodes"][1]["subgraphs"]["then_branch"]
    assert sub["nodes"][0]["op"] == "Mul"


def test_model_from_stdin_pipe(tmp_path, seed_model):
    data = open(seed_model, "rb").read()
    res = run_toolkit("inspect", "model", "-", "--mode=basic", stdin=data)
    assert res.code == 0, res.err
    assert "[Op: Mul]" in res.out


def test_external_data_beside_model_and_elsewhere(cli, tmp_path):
    ext = tmp_path / "ext"
    ext.mkdir()
    path = z.save_with_external_data(z.seed_example(shape=(1, 4)), ext / "m.onnx")
    res = cli("inspect", "model", path, "--mode=full")
    assert res.code == 0, res.err
    assert "Stats: mean=2" in res.out
    # model moved away from its data: --external-data-dir finds it
    moved = tmp_path / "moved.onnx"
    moved.write_bytes(open(path, "rb").read())
    res = cli("inspect", "model", moved, "--mode=full")
    assert res.code == 3 and "weights.bin" in res.err and "--external-data-dir" in res.err
    res = cli("inspect", "model", moved, "--mode=full", "--external-data-dir", ext)
    assert res.code == 0 and "Stats: mean=2" in res.out
    res = cli("inspect", "model", moved, "--mode=full", "--ignore-external-data")
    assert res.code == 0 and "external data not loaded" in res.out


def _write(d, name, data):
    path = d / name
    path.write_bytes(data)
    return path


BAD_CASES = {
    "missing": (lambda d: d / "nope.onnx", "no such file"),
    "directory": (lambda d: d, "is a directory"),
    "empty": (lambda d: _write(d, "e.onnx", b""), "empty file"),
    "text": (lambda d: _write(d, "t.onnx", b"hello, I am not a model\n"), "not"),
    "truncated": (lambda d: _write(d, "tr.onnx", z.seed_example().SerializeToString()[:5000]), "truncated"),
}


@pytest.mark.parametrize("case", sorted(BAD_CASES))
def test_bad_model_inputs_give_one_error_line(case, tmp_path):
    make, expected = BAD_CASES[case]
    target = make(tmp_path)
    res = run_toolkit("inspect", "model", target)
    assert res.code == 3
    assert "Traceback" not in res.err
    lines = [l for l in res.err.splitlines() if l.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), res.err
    assert str(target.name) in lines[0] or case == "directory"
    assert expected in lines[0]


def test_bad_mode_is_usage_error(cli, seed_model):
    res = cli("inspect", "model", seed_model, "--mode=everything")
    assert res.code == 2 and "none, basic, attrs, full" in res.err


def test_inspect_data_stats_and_values(cli, tmp_path):
    from toolkit.core.io import datafiles as d

    path = str(tmp_path / "in.json")
    d.save_inputs(path, [{"x": np.arange(4, dtype=np.float32)}, {"x": np.full(4, 7, np.float32)}])
    res = cli("inspect", "data", path)
    assert res.code == 0
    assert "2 iteration(s)" in res.out
    assert "x [dtype=float32, shape=(4,)] | mean=1.5, std=1.11803, min=0, max=3" in res.out
    assert "mean=7" in res.out
    res = cli("inspect", "data", path, "--show-values")
    assert "[0. 1. 2. 3.]" in res.out


def test_inspect_data_outputs_npz(cli, tmp_path):
    from toolkit.core.io import datafiles as d

    path = str(tmp_path / "out.npz")
    rr = d.RunResults([("onnxrt-runner", [d.IterationResult({"y": np.array([1.0, np.nan, 3.0])}, 0.5, "onnxrt-runner")])])
    d.save_outputs(path, rr)
    res = cli("inspect", "data", path)
    assert res.code == 0
    assert "onnxrt-runner: 1 iteration(s)" in res.out
    assert "nan=1" in res.out


@pytest.mark.parametrize("content", [b"", b"{not json", b'{"a": 1}', b"PK\x03\x04garbage"])
def test_inspect_data_corrupt(content, tmp_path):
    path = tmp_path / ("bad.npz" if content.startswith(b"PK") else "bad.json")
    path.write_bytes(content)
    res = run_toolkit("inspect", "data", path)
    assert res.code == 3
    assert "Traceback" not in res.err
    assert res.err.startswith("error: ") and "bad." in res.err

"""`debug reduce` on a model whose work sits in an If: with the condition known for the data
(--compare, --load-inputs), the If is replaced by its taken branch and the reduce ends at a
node inside it. Models built here."""

from __future__ import annotations

import json
import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from modelzoo import make_model, save, vi
from reduce_helpers import node_names

from toolkit.core.io.datafiles import save_inputs

INSPECT = ["toolkit", "inspect", "model", "polygraphy_debug.onnx", "--mode=basic"]


def _const(name: str, value: float):
    return numpy_helper.from_array(np.full((1, 4), value, np.float32), name)


def branchy(mul: float = 2.0, nested: bool = False):
    """x -> Abs -> If(flag > 0) -> Mul(0.5) -> out. then: Relu, Mul(``mul``), Add, Sigmoid, Tanh
    (with ``nested``, the Sigmoid sits in an If of its own on the same condition); else: Neg, Mul, Exp."""
    then_nodes = [
        helper.make_node("Relu", ["xa"], ["t1"], name="then_relu"),
        helper.make_node("Mul", ["t1", "two"], ["t2"], name="then_mul"),
        helper.make_node("Add", ["t2", "one"], ["t3"], name="then_add"),
    ]
    sigmoid = helper.make_node("Sigmoid", ["t3"], ["t4"], name="then_sigmoid")
    if nested:
        inner_then = helper.make_graph([sigmoid], "inner_then", [], [vi("t4", [1, 4])])
        inner_else = helper.make_graph(
            [helper.make_node("Identity", ["t3"], ["t4e"], name="inner_identity")], "inner_else", [], [vi("t4e", [1, 4])]
        )
        sigmoid = helper.make_node(
            "If", ["cond"], ["t4"], name="inner_if", then_branch=inner_then, else_branch=inner_else
        )
    then_nodes += [sigmoid, helper.make_node("Tanh", ["t4"], ["ty"], name="then_tanh")]
    then_g = helper.make_graph(then_nodes, "then", [], [vi("ty", [1, 4])], [_const("two", mul), _const("one", 1.0)])
    else_g = helper.make_graph(
        [
            helper.make_node("Neg", ["xa"], ["e1"], name="else_neg"),
            helper.make_node("Mul", ["e1", "three"], ["e2"], name="else_mul"),
            helper.make_node("Exp", ["e2"], ["ey"], name="else_exp"),
        ],
        "else",
        [],
        [vi("ey", [1, 4])],
        [_const("three", 3.0)],
    )
    nodes = [
        helper.make_node("Abs", ["x"], ["xa"], name="pre_abs"),
        helper.make_node("Greater", ["flag", "zero"], ["cond"], name="is_positive"),
        helper.make_node("If", ["cond"], ["y"], name="if", then_branch=then_g, else_branch=else_g),
        helper.make_node("Mul", ["y", "half"], ["out"], name="post_mul"),
    ]
    inits = [numpy_helper.from_array(np.zeros(1, np.int64), "zero"), _const("half", 0.5)]
    graph = helper.make_graph(
        nodes, "branchy", [vi("x", [1, 4]), vi("flag", [1], TensorProto.INT64)], [vi("out", [1, 4])], inits
    )
    return make_model(graph)


@pytest.fixture
def models(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    save(branchy(), tmp_path / "clean.onnx")
    save(branchy(mul=2.5), tmp_path / "faulty.onnx")
    x = np.array([[0.5, -1.0, 2.0, 0.25]], np.float32)
    save_inputs(str(tmp_path / "then.json"), [{"x": x, "flag": np.array([1], np.int64)}])
    save_inputs(str(tmp_path / "else.json"), [{"x": x, "flag": np.array([-1], np.int64)}])
    return tmp_path


def _sigmoid_reduce(cli, model, *options):
    """``debug reduce MODEL`` until a Sigmoid is left, with ``inspect`` as the check."""
    return cli("debug", "reduce", model, "-o", "reduced.onnx", *options, "--fail-regex", "Op: Sigmoid",
               "--check", *INSPECT)


def _nodes(path):
    return node_names(onnx.load(str(path)))


def _compare(cli, inputs, *extra):
    return cli("debug", "reduce", "faulty.onnx", "-o", "reduced.onnx", "--compare", "onnxrt", "onnxrt",
               "--reference-model", "clean.onnx", "--load-inputs", inputs, *extra)


def test_compare_ends_at_the_faulty_node_inside_the_taken_branch(cli, models):
    res = _compare(cli, "then.json", "--json")
    assert res.code == 0, res.err
    assert _nodes(models / "reduced.onnx") == ["then_mul"]
    assert "if: condition true for the given inputs; reducing its then-branch (5 nodes)" in res.err
    assert "only valid for inputs that take the same If branches (if: then)" in res.err
    summary = json.loads(res.out)
    assert summary["model"] == "faulty.onnx"
    assert summary["valid_for"] == "inputs that take the same If branches"
    assert {"node": "if", "model": "model", "condition": True, "branch": "then", "nodes": 5, "constant": False} in summary[
        "inlined_branches"
    ]
    assert any(d["model"] == "reference model" for d in summary["inlined_branches"])
    # the result loads and fails on its own, fed the clean model's values
    import onnxruntime as ort

    feed = {"t1": np.array([[0.5, 1.0, 2.0, 0.25]], np.float32)}
    got = ort.InferenceSession(str(models / "reduced.onnx"), providers=["CPUExecutionProvider"]).run(None, feed)[0]
    assert not np.allclose(got, feed["t1"] * 2.0)


def test_compare_with_the_other_branch_taken_reports_no_fault(cli, models):
    res = _compare(cli, "else.json")
    assert res.code == 0, res.err
    assert "if: condition false for the given inputs; reducing its else-branch (3 nodes)" in res.err
    assert "nothing to reduce" in res.err and not (models / "reduced.onnx").exists()


def test_compare_on_generated_inputs_decides_by_their_values(cli, models):
    res = cli("debug", "reduce", "faulty.onnx", "-o", "reduced.onnx", "--compare", "onnxrt", "onnxrt",
              "--reference-model", "clean.onnx", "--val-range", "flag:[3,3]")
    assert res.code == 0, res.err
    assert "condition true" in res.err
    assert _nodes(models / "reduced.onnx") == ["then_mul"]


def test_nested_ifs_are_inlined_in_rounds(cli, models):
    save(branchy(nested=True), models / "nested.onnx")
    res = _sigmoid_reduce(cli, "nested.onnx", "--load-inputs", "then.json")
    assert res.code == 0, res.err
    assert "inner_if: condition true for the given inputs; reducing its then-branch (1 node)" in res.err
    assert _nodes(models / "reduced.onnx") == ["then_sigmoid"]


def test_check_with_loaded_inputs_ends_at_a_node_inside_the_branch(cli, models):
    res = _sigmoid_reduce(cli, "clean.onnx", "--load-inputs", "then.json")
    assert res.code == 0, res.err
    assert _nodes(models / "reduced.onnx") == ["then_sigmoid"]
    assert "bodies" not in res.err
    # the inputs reach the else-branch: it has no Sigmoid, the model passes
    res = _sigmoid_reduce(cli, "clean.onnx", "--load-inputs", "else.json")
    assert res.code == 0, res.err
    assert "nothing to reduce" in res.err


def test_opt_out_and_unknown_conditions_keep_the_if_whole(cli, models):
    opt_out = _sigmoid_reduce(cli, "clean.onnx", "--load-inputs", "then.json", "--no-inline-branches", "--json")
    no_data = _sigmoid_reduce(cli, "clean.onnx")
    for res in (opt_out, no_data):
        assert res.code == 0, res.err
        assert "for the given inputs" not in res.err and "If branches" not in res.err
        assert "the failure is inside this node's bodies (8 nodes)" in res.err
    assert _nodes(models / "reduced.onnx") == ["if"]
    summary = json.loads(opt_out.out)
    assert summary["inlined_branches"] == [] and summary["valid_for"] == "any input"


def test_a_condition_that_differs_between_feeds_keeps_the_if_whole(cli, models):
    x = np.ones((1, 4), np.float32)
    feeds = [{"x": x, "flag": np.array([f], np.int64)} for f in (1, -1)]
    save_inputs(str(models / "both.json"), feeds)
    res = _sigmoid_reduce(cli, "clean.onnx", "--load-inputs", "both.json")
    assert res.code == 0, res.err
    assert "if: condition differs between the given inputs; kept whole" in res.err
    assert _nodes(models / "reduced.onnx") == ["if"]


def test_models_with_external_weights_are_inlined_with_them(cli, models):
    from modelzoo import save_with_external_data

    (models / "data").mkdir()
    save_with_external_data(branchy(mul=2.5), models / "data" / "faulty.onnx", location="faulty.bin")
    save_with_external_data(branchy(), models / "data" / "clean.onnx", location="clean.bin")
    for name in ("faulty", "clean"):
        (models / "data" / f"{name}.onnx").rename(models / f"{name}_ext.onnx")
    res = cli("debug", "reduce", "faulty_ext.onnx", "-o", "reduced.onnx", "--compare", "onnxrt", "onnxrt",
              "--reference-model", "clean_ext.onnx", "--external-data-dir", "data", "--load-inputs", "then.json")
    assert res.code == 0, res.err
    assert "reducing its then-branch" in res.err
    assert _nodes(models / "reduced.onnx") == ["then_mul"]


def test_a_model_onnxruntime_cannot_run_is_reduced_as_before(cli, models):
    model = branchy()
    model.graph.node[0].op_type, model.graph.node[0].domain = "MyAbs", "custom.ops"
    model.opset_import.append(helper.make_opsetid("custom.ops", 1))
    save(model, models / "custom.onnx")
    res = _sigmoid_reduce(cli, "custom.onnx", "--load-inputs", "then.json")
    assert res.code == 0, res.err
    assert "note: the If conditions could not be computed on the given inputs" in res.err
    assert _nodes(models / "reduced.onnx") == ["if"]
    # a data file that cannot be read is the user's error, said once
    res = _sigmoid_reduce(cli, "clean.onnx", "--load-inputs", "nosuch.json")
    assert res.code == 3 and res.err.count("error:") == 1 and "conditions" not in res.err


def _constant_condition(model, value: bool, how: str):
    """``branchy`` with its condition a constant: a bool initializer, or a Constant node."""
    graph = model.graph
    keep = [n for n in graph.node if n.name != "is_positive"]
    del graph.node[:]
    cond = numpy_helper.from_array(np.array(value), "cond")
    if how == "initializer":
        graph.initializer.append(cond)
        graph.node.extend(keep)
    else:
        graph.node.extend([helper.make_node("Constant", [], ["cond"], name="cond_const", value=cond)] + keep)
    return model


@pytest.mark.parametrize("how", ["initializer", "constant"])
def test_a_constant_condition_is_inlined_without_data_and_valid_for_any_input(cli, models, how):
    save(_constant_condition(branchy(), True, how), models / "const.onnx")
    res = _sigmoid_reduce(cli, "const.onnx", "--json")
    assert res.code == 0, res.err
    assert "if: condition true (a constant of the model); reducing its then-branch (5 nodes)" in res.err
    assert "could not be computed" not in res.err and "only valid for inputs" not in res.err
    assert _nodes(models / "reduced.onnx") == ["then_sigmoid"]
    summary = json.loads(res.out)
    assert summary["valid_for"] == "any input"
    assert summary["inlined_branches"][0]["constant"] is True
    # the else-branch has no Sigmoid: the model passes
    save(_constant_condition(branchy(), False, how), models / "const_false.onnx")
    res = _sigmoid_reduce(cli, "const_false.onnx")
    assert res.code == 0, res.err
    assert "condition false (a constant of the model)" in res.err and "nothing to reduce" in res.err


def test_without_data_an_input_dependent_if_is_kept_whole_with_a_hint(cli, models):
    res = _sigmoid_reduce(cli, "clean.onnx")
    assert res.code == 0, res.err
    assert "if: condition depends on the inputs" in res.err and "--load-inputs" in res.err
    assert _nodes(models / "reduced.onnx") == ["if"]


def test_inlined_nodes_never_take_the_name_of_a_kept_if(tmp_path):
    """Two Ifs: the first decided, the second kept whole; a node of the first's branch carries
    the second If's name and is renamed."""
    from toolkit.reduce.branches import inline_ifs

    model = branchy()
    graph = model.graph
    then_g = graph.node[2].attribute[0].g if graph.node[2].attribute[0].name == "then_branch" else graph.node[2].attribute[1].g
    then_g.node[0].name = "second_if"
    second = helper.make_node(
        "If", ["cond"], ["z"], name="second_if",
        then_branch=helper.make_graph([helper.make_node("Neg", ["out"], ["zt"], name="n1")], "t", [], [vi("zt", [1, 4])]),
        else_branch=helper.make_graph([helper.make_node("Abs", ["out"], ["ze"], name="n2")], "e", [], [vi("ze", [1, 4])]),
    )
    graph.node.append(second)
    graph.output.append(vi("z", [1, 4]))
    save(model, tmp_path / "two.onnx")
    inline_ifs(str(tmp_path / "two.onnx"), {"if": True}, str(tmp_path / "out.onnx"))
    names = [n.name for n in onnx.load(str(tmp_path / "out.onnx")).graph.node]
    assert names.count("second_if") == 1 and len(set(names)) == len(names)
    assert [n.op_type for n in onnx.load(str(tmp_path / "out.onnx")).graph.node if n.name == "second_if"] == ["If"]


def test_a_constant_condition_stored_in_an_external_file_is_read_from_it(cli, models):
    from modelzoo import save_with_external_data

    (models / "ext").mkdir()
    save_with_external_data(_constant_condition(branchy(), True, "initializer"), models / "ext" / "const.onnx",
                            location="const.bin")
    cond = next(t for t in onnx.load(str(models / "ext" / "const.onnx"), load_external_data=False).graph.initializer
                if t.name == "cond")
    assert cond.data_location == onnx.TensorProto.EXTERNAL
    res = _sigmoid_reduce(cli, "ext/const.onnx")
    assert res.code == 0, res.err
    assert "if: condition true (a constant of the model)" in res.err
    assert _nodes(models / "reduced.onnx") == ["then_sigmoid"]


def test_a_model_read_from_stdin_is_read_once(cli, models):
    """stdin cannot be read twice: branches are not inlined, and the reduce still runs."""
    save(_constant_condition(branchy(), True, "initializer"), models / "const.onnx")
    res = cli("debug", "reduce", "-", "-o", "reduced.onnx", "--fail-regex", "Op: Sigmoid", "--check", *INSPECT,
              stdin=(models / "const.onnx").read_bytes())
    assert res.code == 0, res.err
    assert _nodes(models / "reduced.onnx") == ["if"]


def _plain(mul: float):
    """x -> Relu -> Mul(``mul``) -> Add(1) -> Tanh -> out (no If)."""
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="relu"), helper.make_node("Mul", ["a", "m"], ["b"], name="mul"),
             helper.make_node("Add", ["b", "one"], ["c"], name="add"), helper.make_node("Tanh", ["c"], ["out"], name="tanh")]
    graph = helper.make_graph(nodes, "plain", [vi("x", [1, 4])], [vi("out", [1, 4])], [_const("m", mul), _const("one", 1.0)])
    return make_model(graph)


def test_a_replay_is_refused_when_an_input_or_reference_file_changed_under_its_name(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    save(_plain(2.0), tmp_path / "clean.onnx")
    save(_plain(2.5), tmp_path / "faulty.onnx")
    x = np.array([[0.5, -1.0, 2.0, 0.25]], np.float32)
    save_inputs("in.json", [{"x": x}])
    assert _compare(cli, "in.json", "--save-debug-replay", "r.json").code == 0
    again = _compare(cli, "in.json", "--load-debug-replay", "r.json")
    assert again.code == 0, again.err
    save_inputs("in.json", [{"x": x * 3}])  # other inputs, same name
    res = _compare(cli, "in.json", "--load-debug-replay", "r.json")
    assert res.code == 3 and "--load-inputs" in res.err and "content changed" in res.err, res.err
    save_inputs("in.json", [{"x": x}])
    save(_plain(3.0), tmp_path / "clean.onnx")  # another reference, same name
    res = _compare(cli, "in.json", "--load-debug-replay", "r.json")
    assert res.code == 3 and "--reference-model" in res.err and "content changed" in res.err, res.err


def _resumed(cli, model, replay, *options):
    """Reduce ``model`` (inlined with then.json) saving ``replay`` (None: the default replay), then
    again loading it: (first run's --json summary, second run's result)."""
    save_opt = ["--save-debug-replay", replay] if replay else []
    first = _sigmoid_reduce(cli, model, "--load-inputs", "then.json", *options, *save_opt, "--json")
    assert first.code == 0, first.err
    assert "reducing its then-branch" in first.err
    summary = json.loads(first.out)
    assert summary["checks"] > 2 and _nodes("reduced.onnx") == ["then_sigmoid"]
    again = _sigmoid_reduce(cli, model, "--load-inputs", "then.json", *options,
                            "--load-debug-replay", replay or "polygraphy_debug_replay.json", "--json")
    return summary, again


def _same_end(summary, again):
    """``again`` resumed the run of ``summary``: no check repeated, the same node reached."""
    assert again.code == 0, again.err
    resumed = json.loads(again.out)
    assert resumed["checks"] == 0 and resumed["remembered"] >= summary["checks"], again.err
    assert resumed["result_nodes"] == summary["result_nodes"] and _nodes("reduced.onnx") == ["then_sigmoid"]


@pytest.mark.parametrize("replay", ["r.json", None])
def test_a_replay_of_a_model_with_inlined_branches_resumes_an_unchanged_run(cli, models, replay):
    summary, again = _resumed(cli, "clean.onnx", replay)
    _same_end(summary, again)
    # inputs that take the other branch make another model to reduce: refused, saying so
    res = _sigmoid_reduce(cli, "clean.onnx", "--load-inputs", "else.json", "--load-debug-replay",
                          replay or "polygraphy_debug_replay.json")
    assert res.code == 3 and "or for inputs that take other If branches" in res.err, res.err
    # the same model named through a link is the same model
    (models / "link.onnx").symlink_to(models / "clean.onnx")
    again = _sigmoid_reduce(cli, "link.onnx", "--load-inputs", "then.json", "--load-debug-replay",
                            replay or "polygraphy_debug_replay.json", "--json")
    _same_end(summary, again)
    # a changed model is still refused: its verdicts answer another question
    save(branchy(mul=3.0), models / "clean.onnx")
    res = _sigmoid_reduce(cli, "clean.onnx", "--load-inputs", "then.json", "--load-debug-replay",
                          replay or "polygraphy_debug_replay.json")
    assert res.code == 3 and "recorded for a different model" in res.err, res.err


def test_a_replay_of_a_linked_model_with_inlined_branches_resumes(cli, models):
    (models / "real").mkdir()
    save(branchy(), models / "real" / "model.onnx")
    (models / "link.onnx").symlink_to(models / "real" / "model.onnx")
    summary, again = _resumed(cli, "link.onnx", "r.json")
    _same_end(summary, again)
    # the link pointed at another model: refused
    save(branchy(mul=3.0), models / "real" / "other.onnx")
    (models / "link.onnx").unlink()
    (models / "link.onnx").symlink_to(models / "real" / "other.onnx")
    res = _sigmoid_reduce(cli, "link.onnx", "--load-inputs", "then.json", "--load-debug-replay", "r.json")
    assert res.code == 3 and "recorded for a different model" in res.err, res.err


def test_a_replay_of_a_model_with_external_data_and_inlined_branches_resumes(cli, models):
    from modelzoo import save_with_external_data

    (models / "data").mkdir()
    save_with_external_data(branchy(), models / "data" / "ext.onnx", location="ext.bin")
    summary, again = _resumed(cli, "data/ext.onnx", "r.json")
    _same_end(summary, again)
    # other weights in the external data file (the model's file unchanged): refused
    weights = onnx.load(str(models / "data" / "ext.onnx"), load_external_data=False)
    save_with_external_data(branchy(mul=3.0), models / "other.onnx", location="other.bin")
    (models / "other.bin").replace(models / "data" / "ext.bin")
    assert onnx.load(str(models / "data" / "ext.onnx"), load_external_data=False) == weights
    res = _sigmoid_reduce(cli, "data/ext.onnx", "--load-inputs", "then.json", "--load-debug-replay", "r.json")
    assert res.code == 3 and "recorded for a different model" in res.err, res.err


def test_a_compare_replay_with_inlined_reference_model_resumes(cli, models):
    first = _compare(cli, "then.json", "--save-debug-replay", "r.json", "--json")
    assert first.code == 0, first.err
    summary = json.loads(first.out)
    assert any(d["model"] == "reference model" for d in summary["inlined_branches"])
    assert summary["compare"]["reference_model"] == "clean.onnx"
    again = _compare(cli, "then.json", "--load-debug-replay", "r.json", "--json")
    assert again.code == 0, again.err
    resumed = json.loads(again.out)
    assert resumed["checks"] == 0 and resumed["result_nodes"] == summary["result_nodes"], again.err
    assert _nodes(models / "reduced.onnx") == ["then_mul"]
    # other inputs under the same name, taking the other branch: the inputs are named, not the model
    (models / "then.json").rename(models / "kept.json")
    (models / "else.json").rename(models / "then.json")
    res = _compare(cli, "then.json", "--load-debug-replay", "r.json")
    assert res.code == 3 and "--load-inputs" in res.err and "content changed" in res.err, res.err
    assert "different model" not in res.err
    (models / "kept.json").replace(models / "then.json")
    save(branchy(mul=3.0), models / "clean.onnx")  # another reference, same name
    res = _compare(cli, "then.json", "--load-debug-replay", "r.json")
    assert res.code == 3 and "--reference-model" in res.err and "content changed" in res.err, res.err


def test_a_model_rewritten_while_its_branches_are_inlined_is_refused(cli, models, monkeypatch):
    """The rewrite reduced is of the model as it was read: a replay must not bind its verdicts to
    the file as it is afterwards (a later run on it would reuse verdicts about another model)."""
    import toolkit.reduce.branches as branches

    inline = branches.inline_taken_branches

    def rewritten_meanwhile(path, *args, **kw):
        found = inline(path, *args, **kw)
        if path == "clean.onnx":
            save(branchy(mul=3.0), models / "clean.onnx")
        return found

    monkeypatch.setattr(branches, "inline_taken_branches", rewritten_meanwhile)
    res = _sigmoid_reduce(cli, "clean.onnx", "--load-inputs", "then.json")
    assert res.code == 3 and res.err.count("error:") == 1, res.err
    assert "clean.onnx: the file changed while debug reduce was reading it" in res.err
    assert not (models / "polygraphy_debug_replay.json").exists()


def _same_times(path, stamp):
    os.utime(path, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))


def test_a_replay_is_refused_when_the_reference_models_external_data_changed(cli, tmp_path, monkeypatch):
    """The reference model's weights in an external data file are part of what the replay is bound
    to, and a rewrite that keeps a file's size and modification time is still a change."""
    monkeypatch.chdir(tmp_path)
    save(_plain(2.5), tmp_path / "faulty.onnx")
    clean = _plain(2.0)
    onnx.save(clean, str(tmp_path / "clean.onnx"), save_as_external_data=True, all_tensors_to_one_file=True,
              location="clean.bin", size_threshold=0)
    save_inputs("in.json", [{"x": np.array([[0.5, -1.0, 2.0, 0.25]], np.float32)}])
    assert _compare(cli, "in.json", "--save-debug-replay", "r.json").code == 0
    assert _compare(cli, "in.json", "--load-debug-replay", "r.json").code == 0
    stamp = os.stat(tmp_path / "clean.bin")
    data = bytearray((tmp_path / "clean.bin").read_bytes())
    assert np.float32(2.0).tobytes() in data
    data = data.replace(np.float32(2.0).tobytes(), np.float32(2.5).tobytes())  # now the same as the faulty model
    (tmp_path / "clean.bin").write_bytes(bytes(data))
    _same_times(tmp_path / "clean.bin", stamp)
    res = _compare(cli, "in.json", "--load-debug-replay", "r.json")
    assert res.code == 3 and "--reference-model" in res.err, res.err


def test_a_replay_is_refused_when_big_weights_are_rewritten_keeping_size_and_time(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    big = np.full((1, 300_000), 2.0, np.float32)  # (1.2 MB: weights this size stand in by their file's stamp)

    def model(value):
        nodes = [helper.make_node("ReduceSum", ["w"], ["s"], keepdims=1),
                 helper.make_node("Mul", ["x", "s"], ["a"]), helper.make_node("Tanh", ["a"], ["out"])]
        w = numpy_helper.from_array(np.full_like(big, value), "w")
        return make_model(helper.make_graph(nodes, "g", [vi("x", [1, 1])], [vi("out", [1, 1])], [w]))

    save(model(1.0), tmp_path / "m.onnx")
    args = ["debug", "reduce", "m.onnx", "-o", "r.onnx", "--fail-regex", "Op: Tanh", "--check",
            "toolkit", "inspect", "model", "polygraphy_debug.onnx", "--show", "layers"]
    first = cli(*args[:5], "--save-debug-replay", "r.json", *args[5:])
    assert first.code == 0, first.err
    stamp = os.stat(tmp_path / "m.onnx")
    onnx.save(model(3.0), str(tmp_path / "m.onnx"))  # the same size, other weights
    assert os.stat(tmp_path / "m.onnx").st_size == stamp.st_size
    _same_times(tmp_path / "m.onnx", stamp)
    res = cli(*args[:5], "--load-debug-replay", "r.json", *args[5:])
    assert res.code == 3 and "replay" in res.err.lower(), res.err


def test_compare_reads_a_per_iteration_folder_as_run_does_and_binds_its_replay_to_its_files(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    save(_plain(2.0), tmp_path / "clean.onnx")
    save(_plain(2.5), tmp_path / "faulty.onnx")
    (tmp_path / "data").mkdir()
    x = np.array([[0.5, -1.0, 2.0, 0.25]], np.float32)
    for k in range(2):
        save_inputs(f"data/{k:010d}.json", [{"x": x * (k + 1)}])
    first = _compare(cli, "data", "--save-debug-replay", "r.json")
    assert first.code == 0, first.err
    assert _nodes(tmp_path / "reduced.onnx") == ["mul"]
    assert _compare(cli, "data", "--load-debug-replay", "r.json").code == 0
    save_inputs("data/0000000001.json", [{"x": x * 5}])
    res = _compare(cli, "data", "--load-debug-replay", "r.json")
    assert res.code == 3 and "--load-inputs" in res.err, res.err

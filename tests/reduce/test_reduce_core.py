"""`debug reduce` core: candidate subgraphs (valid, runnable) and search results.

Every reduction here runs the fake check of tests/checkers/ in-process on the iteration
artifact the reducer wrote, with onnx.checker (full) on every candidate; most also run
the candidate on ONNX-Runtime.
"""

from __future__ import annotations

import onnx
import pytest

import modelzoo
from reduce_helpers import (
    multi_output,
    node_names,
    optional_input,
    reduce_model,
    unsorted_chain,
    wide,
    with_loop,
)
from toolkit.reduce.graph import GraphIndex
from toolkit.search.masks import mask_indices
from toolkit.search.strategy import Plan, bisect, default, linear


def _assert_all_valid(check):
    records = check.records()
    assert records, "the check never ran"
    bad = [r for r in records if r["verdict"] not in ("pass", "fail")]
    assert not bad, bad


# ---------------------------------------------------------------------- candidates


def test_candidate_bytes_parse_back_and_pass_the_checker():
    model = modelzoo.seed_example()
    idx = GraphIndex(model)
    for mask in (idx.full_mask, 0b001, 0b010, 0b100, 0b011, 0b110, 0b101):
        cand = idx.candidate(mask)
        m = onnx.ModelProto()
        m.ParseFromString(cand.serialize())
        onnx.checker.check_model(m, full_check=True)
        assert m.ir_version == model.ir_version
        assert [(o.domain, o.version) for o in m.opset_import] == [(o.domain, o.version) for o in model.opset_import]
        assert [n.name for n in m.graph.node] == [idx.names[i] for i in mask_indices(mask)]


def test_candidate_io_rules():
    idx = GraphIndex(modelzoo.seed_example())
    mul = idx.candidate(0b001)
    assert mul.inputs == ["x1"] and mul.outputs == ["mul_out"]
    tail = idx.candidate(0b110)
    assert tail.inputs == ["mul_out", "x0"] and tail.outputs == ["Y"]
    ends = idx.candidate(0b101)  # Mul and the last Add: not connected inside the set
    assert set(ends.inputs) == {"x1", "x0", "add_out"} and set(ends.outputs) == {"mul_out", "Y"}
    m = onnx.ModelProto()
    m.ParseFromString(ends.serialize())
    assert {i.name for i in m.graph.initializer} == {"a"}


def test_full_candidate_is_the_original_model():
    model = modelzoo.branch()
    idx = GraphIndex(model)
    m = onnx.ModelProto()
    m.ParseFromString(idx.candidate(idx.full_mask, keep_inputs=True).serialize())
    assert [n.name for n in m.graph.node] == [n.name for n in model.graph.node]
    assert [o.name for o in m.graph.output] == [o.name for o in model.graph.output]
    assert [i.name for i in m.graph.input] == [i.name for i in model.graph.input]


def test_new_inputs_get_dtype_and_shape_from_inference():
    from toolkit.reduce.metas import MetaProvider

    model = modelzoo.seed_example()
    metas = MetaProvider(model, input_shapes={}, force_fallback=False, external_data_dir=None, warn=print)
    idx = GraphIndex(model, metas)
    m = onnx.ModelProto()
    m.ParseFromString(idx.candidate(0b010).serialize())
    (inp,) = m.graph.input
    assert inp.name == "mul_out"
    assert inp.type.tensor_type.elem_type == onnx.TensorProto.FLOAT
    assert [d.dim_value for d in inp.type.tensor_type.shape.dim] == [1, 3, 224, 224]


def test_unsorted_graph_is_indexed_in_topological_order():
    idx = GraphIndex(unsorted_chain())
    assert idx.names == ["first", "middle", "last"]


def test_constant_nodes_are_lowered_to_constant_tensors():
    idx = GraphIndex(modelzoo.with_constant())
    assert idx.names == ["add", "mul"]
    mul = idx.candidate(0b10)
    assert mul.inputs == ["t"]  # k comes from its Constant node, written as a constant tensor
    m = onnx.ModelProto()
    m.ParseFromString(mul.serialize())
    assert [n.op_type for n in m.graph.node] == ["Mul"]
    (k,) = [t for t in m.graph.initializer]
    onnx.checker.check_model(m)
    const = next(n for n in modelzoo.with_constant().graph.node if n.name == "const_k")
    assert k.name == const.output[0]
    assert onnx.numpy_helper.to_array(k).tolist() == onnx.numpy_helper.to_array(const.attribute[0].t).tolist()


def test_optional_empty_input_is_not_a_tensor():
    idx = GraphIndex(optional_input())
    clip = idx.candidate(0b010)
    assert "" not in clip.inputs and clip.inputs == ["r"]


def test_if_body_outer_reads_become_inputs_or_initializers():
    idx = GraphIndex(modelzoo.with_if())
    if_only = idx.candidate(1 << idx.names.index("if"))
    assert set(if_only.inputs) == {"cond", "r"}
    m = onnx.ModelProto()
    m.ParseFromString(if_only.serialize())
    assert {t.name for t in m.graph.initializer} == {"two", "outer_b"}


# ---------------------------------------------------------------------- search results


def test_seed_example_reduces_to_the_mul(tmp_path):
    outcome, reduced, check = reduce_model(tmp_path, modelzoo.seed_example(), ["onnx_graphsurgeon_node_1"], ort=True)
    assert outcome.status == "reduced"
    assert node_names(reduced) == ["onnx_graphsurgeon_node_1"]
    assert outcome.checks <= 3
    _assert_all_valid(check)


@pytest.mark.parametrize("mode", [None, "bisect", "linear"])
@pytest.mark.parametrize("culprit", [0, 5, 11])
def test_chain_isolates_any_node_first_and_last_included(tmp_path, mode, culprit):
    model = modelzoo.chain(12)
    name = model.graph.node[culprit].name
    outcome, reduced, check = reduce_model(tmp_path, model, [name], mode=mode)
    assert node_names(reduced) == [name]
    _assert_all_valid(check)


def test_bisect_alone_isolates_the_first_node(tmp_path):
    # the reference tool never tries the first node as an output cut (it ends with Mul+Add)
    outcome, reduced, _ = reduce_model(tmp_path, modelzoo.seed_example(), ["onnx_graphsurgeon_node_1"], mode="bisect")
    assert node_names(reduced) == ["onnx_graphsurgeon_node_1"]


@pytest.mark.parametrize("mode", [None, "bisect", "linear"])
def test_branching_graph_reduces_to_the_failing_branch_node(tmp_path, mode):
    outcome, reduced, check = reduce_model(tmp_path, modelzoo.branch(), ["sigmoid"], mode=mode, ort=True)
    assert node_names(reduced) == ["sigmoid"]
    _assert_all_valid(check)


@pytest.mark.parametrize("culprit", ["b0_0", "b2_1", "b3_2", "stem", "sum"])
def test_wide_graph_each_branch_node(tmp_path, culprit):
    outcome, reduced, check = reduce_model(tmp_path, wide(), [culprit], ort=True)
    assert node_names(reduced) == [culprit]
    _assert_all_valid(check)


@pytest.mark.parametrize("mode", [None, "linear"])
def test_two_node_failure_keeps_exactly_both(tmp_path, mode):
    model = modelzoo.chain(16)
    a, b = model.graph.node[3].name, model.graph.node[12].name
    outcome, reduced, check = reduce_model(tmp_path, model, [a, b], mode=mode, ort=True)
    assert node_names(reduced) == [a, b]
    assert outcome.one_minimal
    _assert_all_valid(check)


def test_two_node_failure_bisect_keeps_the_range_between_them(tmp_path):
    model = modelzoo.chain(16)
    a, b = model.graph.node[3].name, model.graph.node[12].name
    _, reduced, _ = reduce_model(tmp_path, model, [a, b], mode="bisect")
    assert node_names(reduced) == [n.name for n in model.graph.node[3:13]]


def test_two_branch_failure(tmp_path):
    outcome, reduced, check = reduce_model(tmp_path, wide(), ["b0_1", "b3_0"], ort=True)
    assert sorted(node_names(reduced)) == ["b0_1", "b3_0"]
    _assert_all_valid(check)


def test_three_node_failure(tmp_path):
    model = modelzoo.chain(20)
    names = [model.graph.node[i].name for i in (2, 9, 17)]
    outcome, reduced, check = reduce_model(tmp_path, model, names, ort=True)
    assert node_names(reduced) == names
    assert outcome.one_minimal


def test_optional_input_model(tmp_path):
    outcome, reduced, check = reduce_model(tmp_path, optional_input(), ["clip"], ort=True)
    assert node_names(reduced) == ["clip"]
    assert [i.name for i in reduced.graph.input] == ["r"]
    _assert_all_valid(check)


def test_constant_model_keeps_constant_as_constant(tmp_path):
    outcome, reduced, check = reduce_model(tmp_path, modelzoo.with_constant(), ["mul"], ort=True)
    assert [n.op_type for n in reduced.graph.node] == ["Mul"]
    assert [t.name for t in reduced.graph.initializer] == ["k"]
    assert [i.name for i in reduced.graph.input] == ["t"]
    assert outcome.nodes_after == 1
    _assert_all_valid(check)


def test_if_model_keeps_outer_reads(tmp_path):
    outcome, reduced, check = reduce_model(tmp_path, modelzoo.with_if(), ["if"], ort=True)
    assert node_names(reduced) == ["if"]
    assert {i.name for i in reduced.graph.input} == {"cond", "r"}
    _assert_all_valid(check)


def test_loop_model_keeps_outer_reads(tmp_path):
    outcome, reduced, check = reduce_model(tmp_path, with_loop(), ["loop"], ort=True)
    assert node_names(reduced) == ["loop"]
    assert [i.name for i in reduced.graph.input] == ["r"]
    _assert_all_valid(check)


def test_multiple_graph_outputs_from_one_node(tmp_path):
    outcome, reduced, check = reduce_model(tmp_path, multi_output(), ["split"], ort=True)
    assert node_names(reduced) == ["split"]
    assert [o.name for o in reduced.graph.output] == ["a", "b"]
    _assert_all_valid(check)


def test_dynamic_shapes_symbolic_and_fixed(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    _, reduced, check = reduce_model(tmp_path / "a", modelzoo.dynamic_batch(), ["reshape"])
    assert node_names(reduced) == ["reshape"]
    r = next(i for i in reduced.graph.input if i.name == "r")
    assert r.type.tensor_type.shape.dim[0].dim_param == "batch"
    _assert_all_valid(check)
    _, reduced, _ = reduce_model(
        tmp_path / "b", modelzoo.dynamic_batch(), ["reshape"], input_shapes={"x": (2, 4)}
    )
    r = next(i for i in reduced.graph.input if i.name == "r")
    assert [d.dim_value for d in r.type.tensor_type.shape.dim] == [2, 4]


def test_external_data_model_gives_self_contained_subgraphs(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    path = modelzoo.save_with_external_data(modelzoo.seed_example(), src / "model.onnx")
    work = tmp_path / "work"
    work.mkdir()
    outcome, reduced, check = reduce_model(work, str(path), ["onnx_graphsurgeon_node_1"], ort=True)
    assert node_names(reduced) == ["onnx_graphsurgeon_node_1"]
    assert reduced.graph.initializer[0].data_location == onnx.TensorProto.DEFAULT
    _assert_all_valid(check)


def test_no_reduce_inputs_keeps_model_inputs(tmp_path):
    outcome, reduced, check = reduce_model(
        tmp_path, modelzoo.seed_example(), ["onnx_graphsurgeon_node_3"], reduce_inputs=False, ort=True
    )
    assert node_names(reduced) == ["onnx_graphsurgeon_node_1", "onnx_graphsurgeon_node_3"]
    assert [i.name for i in reduced.graph.input] == ["x0", "x1"]
    _assert_all_valid(check)


def test_no_reduce_outputs_keeps_model_outputs(tmp_path):
    outcome, reduced, check = reduce_model(
        tmp_path, modelzoo.seed_example(), ["onnx_graphsurgeon_node_3"], reduce_outputs=False, ort=True
    )
    assert node_names(reduced) == ["onnx_graphsurgeon_node_3", "onnx_graphsurgeon_node_5"]
    assert [o.name for o in reduced.graph.output] == ["Y"]
    _assert_all_valid(check)


def test_full_model_passing_writes_nothing(tmp_path):
    outcome, reduced, check = reduce_model(tmp_path, modelzoo.seed_example(), ["no_such_node"], min_good=str(tmp_path / "good.onnx"))
    assert outcome.status == "passed" and reduced is None
    assert outcome.checks == 1
    assert not (tmp_path / "good.onnx").exists()


def test_min_good_is_a_checked_passing_model(tmp_path):
    model = modelzoo.chain(16)
    a, b = model.graph.node[3].name, model.graph.node[12].name
    good = tmp_path / "good.onnx"
    outcome, reduced, check = reduce_model(tmp_path, model, [a, b], min_good=str(good))
    assert outcome.min_good_written
    good_model = onnx.load(str(good))
    names = node_names(good_model)
    passed = [sorted(r["nodes"]) for r in check.records() if r["verdict"] == "pass"]
    assert sorted(names) in passed  # it was checked, and it passed
    assert len(set(names) ^ {a, b}) == 1  # one node away from the result


def test_iteration_artifact_is_removed_unless_asked(tmp_path):
    reduce_model(tmp_path, modelzoo.seed_example(), ["onnx_graphsurgeon_node_1"])
    assert not (tmp_path / "polygraphy_debug.onnx").exists()
    (tmp_path / "k").mkdir()
    reduce_model(tmp_path / "k", modelzoo.seed_example(), ["onnx_graphsurgeon_node_1"], remove_intermediate=False)
    assert (tmp_path / "k" / "polygraphy_debug.onnx").exists()


# ---------------------------------------------------------------------- check counts


def _drive(strategy, plan, culprits):
    """Run a strategy against a monotone oracle; returns (result nodes, distinct checks)."""
    need = 0
    for c in culprits:
        need |= 1 << c
    seen = {plan.index.full_mask: True}
    gen = strategy(plan)
    try:
        mask = next(gen)
        while True:
            if mask not in seen:
                seen[mask] = (mask & need) == need
            mask = gen.send(seen[mask])
    except StopIteration as stop:
        return mask_indices(stop.value), len(seen)


def _bisect_then_linear(n, culprits):
    """Checks for --mode=bisect, then --mode=linear on its result (the second run checks its model first)."""
    first, c1 = _drive(bisect, Plan(GraphIndex(modelzoo.chain(n))), culprits)
    span = first[-1] - first[0] + 1
    second, c2 = _drive(linear, Plan(GraphIndex(modelzoo.chain(span))), [c - first[0] for c in culprits])
    assert [first[0] + k for k in second] == sorted(culprits)
    return c1 + c2


@pytest.mark.parametrize("n", [7, 40, 300])
def test_default_uses_fewer_checks_than_bisect_then_linear(n):
    for culprits in ([0], [n // 2], [n - 1], [n // 3, n // 3 + 4], [2, n - 2]):
        idx = GraphIndex(modelzoo.chain(n))
        nodes, checks = _drive(default, Plan(idx), culprits)
        assert nodes == sorted(culprits)
        assert checks < _bisect_then_linear(n, culprits), (n, culprits)


def test_single_node_costs_about_log2_checks():
    idx = GraphIndex(modelzoo.chain(300))
    for c in (0, 1, 150, 299):
        nodes, checks = _drive(default, Plan(idx), [c])
        assert nodes == [c]
        assert checks <= 1 + 9 + 1  # full model, prefix bisection, one suffix check


def test_linear_stops_early_and_is_one_minimal():
    idx = GraphIndex(modelzoo.chain(30))
    nodes, checks = _drive(linear, Plan(idx), [10])
    assert nodes == [10]
    assert checks <= 31


# ---------------------------------------------------------------------- bytes and windows


def test_output_is_the_very_model_the_check_failed_on(tmp_path):
    import hashlib

    model = modelzoo.chain(12)
    outcome, reduced, check = reduce_model(tmp_path, model, [model.graph.node[7].name])
    digest = hashlib.sha256((tmp_path / "reduced.onnx").read_bytes()).hexdigest()
    failing = {r["sha256"] for r in check.records() if r["verdict"] == "fail"}
    assert digest in failing


def test_candidates_from_file_slices_equal_serialized_ones(tmp_path):
    from toolkit.reduce.loading import load_model_and_pieces

    model = modelzoo.seed_example()  # 600 KB initializers: stubs in the light model
    path = modelzoo.save(model, tmp_path / "m.onnx")
    light, pieces = load_model_and_pieces(path)
    assert pieces is not None
    assert all(not t.raw_data for t in light.graph.initializer)  # weights stay in the file
    sliced = GraphIndex(light, raw=pieces)
    plain = GraphIndex(model)
    for mask in range(1, 8):
        a, b = onnx.ModelProto(), onnx.ModelProto()
        a.ParseFromString(sliced.candidate(mask).serialize())
        b.ParseFromString(plain.candidate(mask).serialize())
        assert a.SerializeToString(deterministic=True) == b.SerializeToString(deterministic=True)


def test_shapes_of_new_inputs_with_stubbed_weights(tmp_path):
    _, reduced, _ = reduce_model(tmp_path, modelzoo.seed_example(), ["onnx_graphsurgeon_node_3"])
    (inp,) = reduced.graph.input
    assert inp.name == "mul_out"
    assert [d.dim_value for d in inp.type.tensor_type.shape.dim] == [1, 3, 224, 224]
    assert len(reduced.graph.initializer[0].raw_data) == 4 * 3 * 224 * 224


def _drive_costed(plan, culprits, per_check, per_node, strategy=None):
    """Like _drive, feeding the plan a linear cost model so that window checks kick in."""
    strategy = strategy or default
    need = 0
    for c in culprits:
        need |= 1 << c
    full = plan.index.full_mask
    seen = {full: True}
    sizes = []
    plan.observe(plan.index.size, per_check + per_node * plan.index.size)
    gen = strategy(plan)
    try:
        mask = next(gen)
        while True:
            if mask not in seen:
                seen[mask] = (mask & need) == need
                n = bin(mask).count("1")
                sizes.append(n)
                plan.observe(n, per_check + per_node * n)
            mask = gen.send(seen[mask])
    except StopIteration as stop:
        return mask_indices(stop.value), len(seen), sizes


def test_window_checks_when_they_pay_and_results_stay_exact():
    n = 64
    idx = GraphIndex(modelzoo.chain(n))
    total_plain = total_windows = 0
    for c in range(n):
        nodes, checks, sizes = _drive_costed(Plan(idx), [c], 0.01, 0.001)
        assert nodes == [c]
        assert checks <= 1 + 6 + 1 + 3  # log2(64) + full + suffix + at most MAX_RAISES windows
        total_windows += sum(sizes)
        _, _, plain_sizes = _drive_costed(Plan(idx), [c], 1.0, 0.0)  # fixed cost: no windows
        total_plain += sum(plain_sizes)
    assert total_windows < 0.7 * total_plain
    for pair in ([3, 40], [20, 21], [0, 63]):
        nodes, _, _ = _drive_costed(Plan(idx), pair, 0.01, 0.001)
        assert nodes == pair


def test_adjacent_pair_default_beats_bisect_then_linear():
    for n in (40, 300):
        for pair in ([n // 2, n // 2 + 1], [n - 2, n - 1], [0, 1]):
            nodes, checks = _drive(default, Plan(GraphIndex(modelzoo.chain(n))), pair)
            assert nodes == pair
            assert checks < _bisect_then_linear(n, pair)


def test_huge_candidates_are_written_with_external_data(tmp_path, monkeypatch):
    import toolkit.reduce.graph as graph_mod
    import toolkit.reduce.session as session_mod

    monkeypatch.setattr(graph_mod, "BIG_MODEL_BYTES", 1000)
    monkeypatch.setattr(session_mod, "BIG_MODEL_BYTES", 1000)
    outcome, reduced, check = reduce_model(tmp_path, modelzoo.seed_example(), ["onnx_graphsurgeon_node_1"], ort=True)
    assert node_names(reduced) == ["onnx_graphsurgeon_node_1"]
    assert (tmp_path / "reduced.onnx.data").exists()
    assert reduced.graph.initializer[0].raw_data  # onnx.load read it back from the .data file
    assert not (tmp_path / "polygraphy_debug.onnx.data").exists()  # removed with the artifact
    _assert_all_valid(check)

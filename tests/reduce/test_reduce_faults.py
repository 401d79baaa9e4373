"""`--all-faults` search (toolkit.reduce.faults) with an in-process fake check."""

from __future__ import annotations

import os

import onnx

from modelzoo import chain, save
from reduce_helpers import FakeCheck, node_names
from toolkit.reduce.faults import AllFaultsReducer, numbered, within
from toolkit.search.masks import range_mask


def _reduce(tmp_path, model, culprits, mode=None):
    from toolkit.reduce.verdict import FailureRule
    from toolkit.reduce.session import ReduceConfig

    path = save(model, tmp_path / "model.onnx")
    artifact = tmp_path / "polygraphy_debug.onnx"
    check = FakeCheck(artifact, culprits, any_=True)
    cfg = ReduceConfig(
        model=path, output=str(tmp_path / "reduced.onnx"), check=["fake"], mode=mode,
        rule=FailureRule(fail_codes=[1]), iter_artifact=str(artifact),
    )
    reducer = AllFaultsReducer(cfg, runner=check)
    return reducer, reducer.run()


def test_two_faults_far_apart_are_both_found_each_minimal(tmp_path):
    reducer, outcome = _reduce(tmp_path, chain(24), ["n3_neg", "n20_abs"])
    assert outcome.status == "reduced"
    assert [f.nodes for f in reducer.faults] == [["n3_neg [Op: Neg]"], ["n20_abs [Op: Abs]"]]
    for k, fault in enumerate(reducer.faults, 1):
        path = tmp_path / f"reduced_{k}.onnx"
        assert fault.path == str(path) and os.path.exists(path)
        assert node_names(onnx.load(str(path))) == [fault.nodes[0].split(" ")[0]]
    assert not (tmp_path / "reduced.onnx").exists()


def test_one_fault_is_one_file(tmp_path):
    reducer, _ = _reduce(tmp_path, chain(12), ["n7_sigmoid"])
    assert len(reducer.faults) == 1 and os.path.exists(tmp_path / "reduced_1.onnx")


def test_every_mode_finds_every_fault(tmp_path):
    for mode in ("bisect", "linear"):
        sub = tmp_path / mode
        sub.mkdir()
        reducer, _ = _reduce(sub, chain(10), ["n1_sigmoid", "n5_exp", "n8_abs"], mode=mode)
        assert [f.nodes[0].split(" ")[0] for f in reducer.faults] == ["n1_sigmoid", "n5_exp", "n8_abs"]


def test_within_restricts_a_search():
    seen = []

    def search():
        failed = yield range_mask(0, 4)
        seen.append(failed)
        failed = yield range_mask(4, 8)
        seen.append(failed)
        return range_mask(0, 8)

    gen = within(search(), allowed=range_mask(0, 4))
    assert next(gen) == range_mask(0, 4)
    try:
        gen.send(True)  # the second set has no allowed node: it passes unchecked
    except StopIteration as stop:
        assert stop.value == range_mask(0, 4)
    assert seen == [True, False]


def test_numbered():
    assert numbered("out/reduced.onnx", 2) == "out/reduced_2.onnx"
    assert numbered("reduced", 1) == "reduced_1.onnx"

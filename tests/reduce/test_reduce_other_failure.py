"""`debug reduce --compare`: a subgraph the runner under test cannot run at all is a different
failure from the mismatch the full model showed, never the fault the reduce reports."""

from __future__ import annotations

import onnx

from modelzoo import chain, save
from toolkit.reduce.verdict import CheckResult

ROW = ("{verdict} | y | max abs {err}, mean abs {err}, max rel {err} | would pass with atol {err} or rtol {err} "
       "(max) | tolerance atol 1e-05, rtol 1e-05\n")


class FakeCompare:
    """A compare check: the outputs differ when ``culprit`` is in the candidate; the runner under
    test cannot run a candidate whose output is node ``bad_end``'s (as OpenVINO refused a 0-d
    int64 shape value)."""

    kind = "test"

    def __init__(self, artifact, culprit: str, bad_end: int):
        self.artifact, self.culprit, self.bad_end = str(artifact), culprit, bad_end

    def run(self, tick=None):
        names = [n.name for n in onnx.load(self.artifact).graph.node]
        last = int(names[-1].split("_")[0][1:])
        if self.culprit in names:
            return CheckResult(1, ROW.format(verdict="FAILED", err="0.5").encode(), b"")
        if last == self.bad_end:
            return CheckResult(1, b"", b"error: openvino: inference failed: Unsupported data type: int64\n")
        return CheckResult(0, ROW.format(verdict="PASSED", err="0").encode(), b"")

    def close(self):
        pass


def _reduce(tmp_path, mode=None):
    from toolkit.reduce.faults import CompareReducer
    from toolkit.reduce.session import ReduceConfig
    from toolkit.reduce.verdict import FailureRule

    path = save(chain(12), tmp_path / "model.onnx")
    artifact = tmp_path / "polygraphy_debug.onnx"
    cfg = ReduceConfig(model=path, output=str(tmp_path / "reduced.onnx"), check=["fake"], mode=mode,
                       rule=FailureRule(), iter_artifact=str(artifact))
    return CompareReducer(cfg, runner=FakeCompare(artifact, "n7_sigmoid", bad_end=5)).run()


def test_a_subgraph_the_runner_cannot_run_is_not_the_mismatch(tmp_path):
    for mode in (None, "bisect"):  # (the searches that check 0..5, which the runner cannot run)
        sub = tmp_path / str(mode)
        sub.mkdir()
        outcome = _reduce(sub, mode)
        assert outcome.status == "reduced"
        assert outcome.final_nodes == ["n7_sigmoid [Op: Sigmoid]"], (mode, outcome.final_nodes)
        assert outcome.other_failures >= 1


def test_the_full_models_own_error_is_still_the_failure(tmp_path):
    """A full model the runner cannot run: that error is what is reduced (no mismatch to compare with)."""
    from toolkit.reduce.faults import CompareReducer
    from toolkit.reduce.session import ReduceConfig
    from toolkit.reduce.verdict import FailureRule

    class Crash(FakeCompare):
        def run(self, tick=None):
            names = [n.name for n in onnx.load(self.artifact).graph.node]
            if self.culprit in names:
                return CheckResult(1, b"", b"error: openvino: inference failed: Unsupported data type: int64\n")
            return CheckResult(0, ROW.format(verdict="PASSED", err="0").encode(), b"")

    path = save(chain(12), tmp_path / "model.onnx")
    artifact = tmp_path / "polygraphy_debug.onnx"
    cfg = ReduceConfig(model=path, output=str(tmp_path / "reduced.onnx"), check=["fake"],
                       rule=FailureRule(), iter_artifact=str(artifact))
    outcome = CompareReducer(cfg, runner=Crash(artifact, "n7_sigmoid", bad_end=99)).run()
    assert outcome.final_nodes == ["n7_sigmoid [Op: Sigmoid]"] and outcome.other_failures == 0

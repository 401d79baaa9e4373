"""`debug reduce` with a check that fails whatever the model (`--check false`, golden values of
other inputs than the check feeds) stops with an error naming what the check reported, instead of
blaming the first node it tried; a real fault in the first node is still found."""

from __future__ import annotations

import json
import os

import onnx
import pytest

from conftest import run_toolkit
from modelzoo import chain, save
from toolkit.reduce.verdict import CheckResult, FailureRule

ROW = ("FAILED | {name} | max abs 3.2, mean abs 1.1, max rel 9, mean rel 2 | would pass with atol 3.2 or rtol 9 "
       "(elemwise) | tolerance atol 1e-05, rtol 1e-05\n")


class Check:
    """Compares every output of the candidate; ``culprit`` None: every output differs (golden values
    of other inputs), else only outputs of candidates holding that node."""

    kind = "test"

    def __init__(self, artifact, culprit=None):
        self.artifact, self.culprit = str(artifact), culprit

    def run(self, tick=None):
        m = onnx.load(self.artifact)
        if self.culprit is not None and self.culprit not in {n.name for n in m.graph.node}:
            return CheckResult(0, b"", b"")
        return CheckResult(1, "".join(ROW.format(name=o.name) for o in m.graph.output).encode(), b"")

    def close(self):
        pass


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the replay file goes to the working folder


def _reduce(tmp_path, culprit):
    from toolkit.reduce.session import ReduceConfig, Reducer

    path = save(chain(6), tmp_path / "model.onnx")
    cfg = ReduceConfig(model=path, output=str(tmp_path / "reduced.onnx"), check=["fake"], rule=FailureRule(),
                       iter_artifact=str(tmp_path / "polygraphy_debug.onnx"))
    return Reducer(cfg, runner=Check(cfg.iter_artifact, culprit)).run(), cfg


def test_a_check_that_fails_on_everything_blames_no_node(tmp_path):
    from toolkit.core.errors import InputError

    with pytest.raises(InputError) as err:
        _reduce(tmp_path, None)
    assert "does not depend on the model" in err.value.message
    assert "it compared 'y'" in err.value.message
    assert not os.path.exists(tmp_path / "reduced.onnx")


def test_a_fault_in_the_first_node_is_still_found(tmp_path):
    outcome, cfg = _reduce(tmp_path, "n0_relu")
    assert outcome.final_nodes == ["n0_relu [Op: Relu]"]


def test_check_false_exits_non_zero(tmp_path):
    save(chain(4), tmp_path / "model.onnx")
    res = run_toolkit("debug", "reduce", "model.onnx", "-o", "out.onnx", "--check", "false", cwd=tmp_path)
    assert res.code == 3, res.err
    assert "does not depend on the model" in res.err and "exit code 1, with no comparison" in res.err
    assert "Traceback" not in res.err and not os.path.exists(tmp_path / "out.onnx")


# ---------------------------------------------------------------------- the rounding warnings' words


def _evidence(max_abs, max_rel, atol, rtol):
    from toolkit.reduce.evidence import Evidence, TensorEvidence

    return Evidence([TensorEvidence(name="t", passed=False, max_abs=max_abs, max_rel=max_rel, atol=atol, rtol=rtol, stat="elemwise", needed_atol=max_abs, needed_rtol=max_rel)])


def test_amplification_is_never_shown_as_infx():
    from toolkit.core.compare.noise import times

    assert times(float("inf")) == "unbounded" and times(1e9) == "1e+09x"
    assert times(2.5) == "2.5x"


def test_storage_rounding_words():
    from toolkit.reduce.evidence import storage_rounding_warning

    ev = _evidence(1e-4, 2e-4, 1e-5, 1e-5)
    assert "every node of the model fails alone" in storage_rounding_warning(ev, "fp16")
    passed = storage_rounding_warning(ev, "fp16", some_passed=True)
    assert "every node" not in passed and "a single node can fail by that rounding alone" in passed
    given = storage_rounding_warning(_evidence(1e-4, 2e-4, 1e-5, 0.01), "fp16")  # rtol given above the advice
    assert "--rtol" not in given and "an --atol above" in given


def test_rounding_is_named_as_the_storage_and_the_tolerance_given_is_not_repeated():
    from toolkit.reduce.evidence import noise_warning

    ev = _evidence(3e-5, 0.5, 1e-5, 1e-5)  # within 10x of a small atol
    fp16 = noise_warning(None, ev, ["toolkit", "run"], "fp16")
    assert "fp16 storage rounding" in fp16 and "kernels" not in fp16
    assert "atol 1e-05" not in fp16
    assert "ONNX-Runtime's kernels" in noise_warning(None, ev, ["toolkit", "run"])


# ---------------------------------------------------------------------- a one-node result


class _Stub:
    """A reducer as first_alone sees it; ``faulty``: the nodes that fail alone (its verdicts, fed exact inputs)."""

    def __init__(self, memo, own_check=True, faulty=()):
        from types import SimpleNamespace

        self.index = SimpleNamespace(names=[f"n{i}" for i in range(6)])
        self.memo, self.broken_masks, self.own_check, self.plan = memo, set(), own_check, None
        self.faulty, self.checked = set(faulty), []

    def verdict(self, mask):
        self.checked.append(mask)
        return any(mask >> i & 1 for i in self.faulty)


def test_a_one_node_result_says_whether_it_is_the_first_that_fails_alone():
    from toolkit.reduce.sanity import first_alone

    assert "first node in topological order" in first_alone(_Stub({}), 1 << 0)
    every = {1 << i: False for i in range(3)}
    assert "n3 is the first node in topological order that fails alone" in first_alone(_Stub(every), 1 << 3)
    earlier = {1 << 0: False, 1 << 1: True}
    assert first_alone(_Stub(earlier), 1 << 3).startswith("n1 (node 1) also fails alone and comes before n3")
    assert "2 earlier node(s) were not checked alone" in first_alone(_Stub({1 << 0: False}), 1 << 3)
    # the built-in comparison feeds exact inputs: a passing window's nodes each pass alone
    assert "fails alone (every earlier one passes)" in first_alone(_Stub({0b111: False}, own_check=False), 1 << 3)
    assert first_alone(_Stub({}), 0b11) is None
    # the built-in comparison: the window before the result is checked (one check)
    passing = _Stub({}, own_check=False, faulty={4})
    assert "n4 is the first node in topological order that fails alone" in first_alone(passing, 1 << 4)
    assert passing.checked == [0b1111]
    earlier = _Stub({}, own_check=False, faulty={1, 4})
    assert first_alone(earlier, 1 << 4).startswith("the 4 node(s) before n4 fail too") and earlier.checked == [0b1111]


def test_the_note_is_in_the_summary(tmp_path):
    save(chain(6), tmp_path / "model.onnx")
    res = run_toolkit("debug", "reduce", "model.onnx", "-o", "out.onnx", "--mode", "linear", "--json", "--check",
                      "sh", "-c", "grep -q n3_neg polygraphy_debug.onnx && exit 1 || exit 0", cwd=tmp_path)
    assert res.code == 0, res.err
    assert "note: n3_neg is the first" in res.err
    assert json.loads(res.out)["first_alone"].startswith("n3_neg is the first")

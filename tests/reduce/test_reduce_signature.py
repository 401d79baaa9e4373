"""`debug reduce` reduces the full model's failure, fixed by its check: a subgraph that fails
another way (another mismatch, an error where the full model crashed) is an other failure,
never the result; frozen input shapes never hide a crash."""

from __future__ import annotations

import signal
import sys

import onnx
from onnx import helper

from modelzoo import chain, make_model, save, vi
from toolkit.reduce.verdict import CheckResult, FailureRule

ROW = ("{verdict} | {name} | max abs {err}, mean abs {err}, max rel {err} | would pass with atol {err} or rtol {err} "
       "(max) | tolerance atol 1e-05, rtol 1e-05\n")


def _two_branches():
    """x -> b0 -> b1 (a Cast whose values differ across runtimes) -> b2 -> out2, and
    x -> a0 -> a1 (the fault) -> a2 -> out1; b0, b1 first in topological order, b2 last."""
    nodes = [
        helper.make_node("Relu", ["x"], ["tb0"], name="b0"),
        helper.make_node("Abs", ["tb0"], ["tb1"], name="b1"),
        helper.make_node("Sigmoid", ["x"], ["ta0"], name="a0"),
        helper.make_node("Tanh", ["ta0"], ["ta1"], name="a1"),
        helper.make_node("Exp", ["ta1"], ["out1"], name="a2"),
        helper.make_node("Neg", ["tb1"], ["out2"], name="b2"),
    ]
    graph = helper.make_graph(nodes, "g", [vi("x", [1, 4])], [vi("out1", [1, 4]), vi("out2", [1, 4])])
    return make_model(graph)


class MismatchCheck:
    """A comparison check: every output of the candidate is compared. The outputs that depend on
    node a1 differ (the fault); b1's output differs when it is an output itself (a difference
    that b2 hides in the full model)."""

    kind = "test"

    def __init__(self, artifact):
        self.artifact = str(artifact)

    def run(self, tick=None):
        m = onnx.load(self.artifact)
        names = {n.name for n in m.graph.node}
        rows, failed = [], False
        for out in (o.name for o in m.graph.output):
            bad = (out in ("ta1", "out1") and "a1" in names) or out == "tb1"
            failed |= bad
            rows.append(ROW.format(verdict="FAILED" if bad else "PASSED", name=out, err="0.58" if bad else "0"))
        return CheckResult(1 if failed else 0, "".join(rows).encode(), b"")

    def close(self):
        pass


def _config(tmp_path, model, **kw):
    from toolkit.reduce.session import ReduceConfig

    path = save(model, tmp_path / "model.onnx")
    kw.setdefault("rule", FailureRule())
    return ReduceConfig(model=path, output=str(tmp_path / "reduced.onnx"), check=["fake"],
                        iter_artifact=str(tmp_path / "polygraphy_debug.onnx"), **kw)


def test_a_mismatch_that_does_not_feed_the_failing_output_is_another_failure(tmp_path):
    from toolkit.reduce.session import Reducer

    for mode in (None, "bisect", "linear"):
        sub = tmp_path / str(mode)
        sub.mkdir()
        cfg = _config(sub, _two_branches(), mode=mode)
        reducer = Reducer(cfg, runner=MismatchCheck(cfg.iter_artifact))
        outcome = reducer.run()
        assert outcome.final_nodes == ["a1 [Op: Tanh]"], (mode, outcome.final_nodes)
        assert outcome.signature["kind"] == "mismatch" and outcome.signature["outputs"] == ["out1"]
        assert outcome.other_failures >= 1, mode


def test_any_failure_reduces_on_the_other_mismatch_too(tmp_path):
    from toolkit.reduce.session import Reducer

    cfg = _config(tmp_path, _two_branches(), mode="bisect", any_failure=True)
    outcome = Reducer(cfg, runner=MismatchCheck(cfg.iter_artifact)).run()
    assert outcome.final_nodes == ["b1 [Op: Abs]"]
    assert outcome.other_failures == 0 and outcome.signature["any_failure"]


class CrashCheck:
    """ONNX-Runtime crashes (SIGSEGV) on n3 fed n2's values; on generated inputs (n3 without n2)
    the check fails with an index error instead."""

    kind = "test"

    def __init__(self, artifact, frozen_passes=False):
        self.artifact = str(artifact)
        self.frozen_passes = frozen_passes

    def run(self, tick=None):
        m = onnx.load(self.artifact)
        names = {n.name.split("_")[0] for n in m.graph.node}
        dim = m.graph.input[0].type.tensor_type.shape.dim
        if self.frozen_passes and dim and dim[0].HasField("dim_value"):
            return CheckResult(0, b"", b"")  # (the frozen shape takes another kernel)
        if "n3" in names and "n2" in names:
            return CheckResult(None, signal=int(signal.SIGSEGV))
        if "n3" in names:
            return CheckResult(3, b"", b"error: IndexError: indices element out of data bounds\n")
        return CheckResult(0, b"", b"")

    def close(self):
        pass


def test_a_crash_that_turns_into_an_index_error_is_not_the_crash(tmp_path):
    from toolkit.reduce.session import Reducer

    for mode in (None, "bisect", "linear"):
        sub = tmp_path / str(mode)
        sub.mkdir()
        cfg = _config(sub, chain(8), mode=mode)
        outcome = Reducer(cfg, runner=CrashCheck(cfg.iter_artifact)).run()
        nodes = [n.split(" ")[0] for n in outcome.final_nodes]
        assert nodes == ["n2_abs", "n3_neg"], (mode, nodes)
        assert outcome.signature["kind"] == "signal" and outcome.signature["signal"] == "SIGSEGV"
        assert outcome.other_failures >= 1


def _dynamic_chain(n=6):
    m = chain(n)
    for vi_ in (*m.graph.input, *m.graph.output):
        vi_.type.tensor_type.shape.dim[0].dim_param = "N"
    return m


def test_frozen_shapes_never_hide_a_crash(tmp_path):
    from toolkit.reduce.session import Reducer

    warnings = []
    from toolkit.reduce.session import Reporter

    class Rep(Reporter):
        def warn(self, msg):
            warnings.append(msg)

    cfg = _config(tmp_path, _dynamic_chain(), input_shapes={"x": (1, 4)})
    outcome = Reducer(cfg, Rep(), runner=CrashCheck(cfg.iter_artifact, frozen_passes=True)).run()
    assert outcome.status == "reduced"
    assert [n.split(" ")[0] for n in outcome.final_nodes] == ["n2_abs", "n3_neg"]
    assert any("freezing hides the failure" in w for w in warnings)
    reduced = onnx.load(cfg.output)
    assert reduced.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "N"


def test_the_signature_is_said_first_and_in_json(tmp_path):
    from toolkit.reduce.session import Reducer, Reporter

    infos = []

    class Rep(Reporter):
        def info(self, msg):
            infos.append(msg)

    cfg = _config(tmp_path, chain(8), mode="bisect")
    Reducer(cfg, Rep(), runner=CrashCheck(cfg.iter_artifact)).run()
    assert infos and infos[0].startswith("Failure to reduce (the full model's): a crash (killed by SIGSEGV)")


def test_frozen_shapes_stay_in_the_result_when_both_fail_alike(cli, tmp_path, monkeypatch):
    """The full model is checked frozen and as given; when both fail the same way the frozen
    model is the one reduced, and -o keeps the frozen shapes (not the bytes of the as-given check)."""
    monkeypatch.chdir(tmp_path)
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"], name="id0")], "dyn",
                              [vi("x", [1, 2, "h", "w"])], [vi("y", [1, 2, "h", "w"])])
    save(make_model(graph), tmp_path / "m.onnx")
    res = cli("debug", "reduce", "m.onnx", "-o", "r.onnx", "--model-input-shapes", "x:[1,2,5,5]", "--check", "false")
    assert res.code == 0, res.err
    dims = [d.dim_value or d.dim_param for d in onnx.load(str(tmp_path / "r.onnx")).graph.input[0].type.tensor_type.shape.dim]
    assert dims == [1, 2, 5, 5]


def test_a_replayed_failure_of_the_model_as_given_is_not_called_a_pass(cli, tmp_path, monkeypatch):
    """With frozen input shapes and --load-debug-replay, the model fails as given and frozen: no
    warning says that it passes (the warning once read a missing failure signature as a pass)."""
    monkeypatch.chdir(tmp_path)
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"], name="id0")], "dyn",
                              [vi("x", [1, 2, "h", "w"])], [vi("y", [1, 2, "h", "w"])])
    save(make_model(graph), tmp_path / "m.onnx")
    args = ("debug", "reduce", "m.onnx", "-o", "r.onnx", "--model-input-shapes", "x:[1,2,5,5]")
    first = cli(*args, "--save-debug-replay", "r.json", "--check", "false")
    assert first.code == 0, first.err
    again = cli(*args, "--load-debug-replay", "r.json", "--check", "false")
    assert again.code == 0, again.err
    assert "passes the check with its own input shapes" not in again.err, again.err


def _fails_only_as_given(folder) -> str:
    """m.onnx (a chain whose batch dim is 'symdim') and check.py, which fails only on a model that
    keeps 'symdim' and holds n2_ (the model as given, not frozen); returns the frozen shape to give."""
    model = chain(4)
    for vinfo in (model.graph.input[0], model.graph.output[0]):
        vinfo.type.tensor_type.shape.dim[0].dim_param = "symdim"
    save(model, folder / "m.onnx")
    (folder / "check.py").write_text(
        "import sys\ndata = open('polygraphy_debug.onnx', 'rb').read()\n"
        "sys.exit(1 if b'symdim' in data and b'n2_' in data else 0)\n")
    return f"x:[2,{model.graph.input[0].type.tensor_type.shape.dim[1].dim_value}]"


def test_a_replay_never_answers_the_full_model_with_frozen_shapes(cli, tmp_path, monkeypatch):
    """The check fails only with the model's own (symbolic) shapes: the first run goes on as given
    and records those verdicts. Resumed from its replay, the run checks the full model frozen and as
    given again (a replay holds one verdict per node set, not which shapes it was for): the same
    warning, the same -o, one that fails the check (with the frozen shapes it would pass)."""
    monkeypatch.chdir(tmp_path)
    shape = _fails_only_as_given(tmp_path)
    args = ("debug", "reduce", "m.onnx", "--model-input-shapes", shape)
    check = ("--check", sys.executable, "check.py")
    first = cli(*args, "-o", "r1.onnx", "--save-debug-replay", "r.json", *check)
    assert first.code == 0 and "freezing hides the failure" in first.err, first.err
    again = cli(*args, "-o", "r2.onnx", "--load-debug-replay", "r.json", *check)
    assert again.code == 0 and "freezing hides the failure" in again.err, again.err
    assert "2 checks run" in again.err, again.err  # (the full model, frozen and as given; the rest replayed)
    assert (tmp_path / "r2.onnx").read_bytes() == (tmp_path / "r1.onnx").read_bytes()
    assert b"symdim" in (tmp_path / "r2.onnx").read_bytes()


class TracebackCheck:
    """Fails on n3 with exit 1 and no error class; crashes with a Python traceback (exit 1,
    ZeroDivisionError) on any other subgraph that holds n1."""

    kind = "test"

    def __init__(self, artifact):
        self.artifact = str(artifact)

    def run(self, tick=None):
        names = {n.name.split("_")[0] for n in onnx.load(self.artifact).graph.node}
        if "n3" in names:
            return CheckResult(1, b"", b"the output differs\n")
        if "n1" in names:
            tb = (b'Traceback (most recent call last):\n  File "check.py", line 9, in <module>\n    1 / 0\n'
                  b"    ~~^~~\nZeroDivisionError: division by zero\n")
            return CheckResult(1, b"", tb)
        return CheckResult(0, b"", b"")

    def close(self):
        pass


def test_a_traceback_where_the_full_model_named_no_error_is_another_failure(tmp_path):
    from toolkit.reduce.session import Reducer

    for mode in (None, "bisect", "linear"):
        sub = tmp_path / str(mode)
        sub.mkdir()
        cfg = _config(sub, chain(8), mode=mode)
        outcome = Reducer(cfg, runner=TracebackCheck(cfg.iter_artifact)).run()
        nodes = [n.split(" ")[0] for n in outcome.final_nodes]
        assert nodes == ["n3_neg"], (mode, nodes)
        assert outcome.signature["kind"] == "exit" and outcome.signature["error"] is None
        assert outcome.other_failures >= 1, mode
    # --any-failure widens: the crash counts too
    sub = tmp_path / "any"
    sub.mkdir()
    cfg = _config(sub, chain(8), mode="linear", any_failure=True)
    outcome = Reducer(cfg, runner=TracebackCheck(cfg.iter_artifact)).run()
    assert outcome.other_failures == 0 and outcome.signature["any_failure"]


def test_the_error_class_of_a_traceback_is_its_last_exception():
    from toolkit.reduce.signature import error_class

    tb = b'Traceback (most recent call last):\n  File "x.py", line 1, in <module>\nmypkg.Boom: no\n'
    assert error_class(CheckResult(1, b"", tb)) == "Boom"
    assert error_class(CheckResult(1, b"", b"values differ\n")) == ""


def _nodes(path):
    return [n.name for n in onnx.load(str(path)).graph.node]


_CRASHES_ON_N1 = (
    "import sys\ndata = open('polygraphy_debug.onnx', 'rb').read()\n"
    "if b'n5_' in data:\n    print('the output differs', file=sys.stderr)\n    sys.exit(1)\n"
    "if b'n1_' in data:\n    1 / 0\n"
)


def test_a_resumed_reduce_judges_new_checks_by_the_full_models_recorded_failure(cli, tmp_path, monkeypatch):
    """The full model fails with exit 1 (n5); subgraphs holding n1 but not n5 crash with a
    ZeroDivisionError (another failure). A run resumed from a replay that holds only the full
    model's verdict reduces n5 again, judging its new checks by the failure recorded with that
    verdict; a replay without it (an older toolkit's) has the full model checked again."""
    import json

    monkeypatch.chdir(tmp_path)
    save(chain(8), tmp_path / "m.onnx")
    (tmp_path / "check.py").write_text(_CRASHES_ON_N1)
    args = ("debug", "reduce", "m.onnx", "--mode", "bisect")
    check = ("--check", sys.executable, "check.py")
    first = cli(*args, "-o", "r1.onnx", "--save-debug-replay", "r.json", *check)
    assert first.code == 0 and _nodes(tmp_path / "r1.onnx") == ["n5_exp"], first.err
    doc = json.loads((tmp_path / "r.json").read_text())
    doc["entries"] = doc["entries"][:1]  # (a run stopped after the full model's check)
    (tmp_path / "cut.json").write_text(json.dumps(doc))
    resumed = cli(*args, "-o", "r2.onnx", "--load-debug-replay", "cut.json", *check)
    assert resumed.code == 0 and _nodes(tmp_path / "r2.onnx") == ["n5_exp"], resumed.err
    assert "Failure to reduce (the full model's): exit code 1" in resumed.err
    assert "ZeroDivisionError" in resumed.err and "a different failure" in resumed.err
    assert doc["entries"][0]["signature"]["kind"] == "exit" and doc["entries"][0]["signature"]["exit_code"] == 1
    del doc["entries"][0]["signature"]
    (tmp_path / "unsigned.json").write_text(json.dumps(doc))
    older = cli(*args, "-o", "r3.onnx", "--load-debug-replay", "unsigned.json", *check)
    assert older.code == 0 and _nodes(tmp_path / "r3.onnx") == ["n5_exp"], older.err
    assert "Iteration 1 | 8 nodes | FAIL | full model | 0." in older.err  # (checked, not replayed)


def test_a_signature_reads_back_as_written():
    from toolkit.reduce.signature import EXIT, MISMATCH, RULE, SIGNAL, TIMEOUT_KIND, Signature

    for sig in (Signature(SIGNAL, signal=signal.SIGSEGV), Signature(SIGNAL, signal=99), Signature(TIMEOUT_KIND),
                Signature(EXIT, code=3, error="IndexError"), Signature(EXIT, code=1),
                Signature(MISMATCH, outputs=("y", "t3"), worst=0.5), Signature(RULE, widened=True), Signature(RULE)):
        assert Signature.from_json(sig.to_json()) == sig
    for bad in (None, [], {}, {"kind": "nope"}, {"kind": ["exit"]}, {"kind": "signal", "signal": "SIGNOPE"},
                {"kind": "mismatch", "outputs": "y"}, {"kind": "exit", "exit_code": "one"}):
        assert Signature.from_json(bad) is None, bad



def test_frozen_shapes_are_checked_against_the_model_as_given_with_parallel_checks(cli, tmp_path, monkeypatch):
    """As above with --jobs 2: the full model is checked frozen and as given before the parallel
    search (it was checked frozen only, along with the search's first round: 'passes')."""
    monkeypatch.chdir(tmp_path)
    shape = _fails_only_as_given(tmp_path)
    res = cli("debug", "reduce", "m.onnx", "--model-input-shapes", shape, "-o", "r.onnx", "--jobs", "2",
              "--check", sys.executable, str(tmp_path / "check.py"))
    assert res.code == 0 and "freezing hides the failure" in res.err, res.err
    assert b"symdim" in (tmp_path / "r.onnx").read_bytes() and b"n2_" in (tmp_path / "r.onnx").read_bytes()

"""`debug precision` on QDQ models: pairs that only re-quantize another pair's values (after a Slice,
Reshape, ...) are searched as one unit with it, and a replay is bound to the check it answers."""

import json

import numpy as np
import pytest

import modelzoo as mz
import qdq_models as qm
from toolkit.core.compare.tolerances import Tolerances
from toolkit.quant import qdq
from toolkit.core.io.datafiles import save_inputs
from toolkit.precision.qdq_search import QdqConfig, QdqSearch


@pytest.fixture(scope="module")
def sliced(tmp_path_factory):
    d = tmp_path_factory.mktemp("sliced")
    feeds = d / "in.json"
    rng = np.random.default_rng(0)
    save_inputs(str(feeds), [{"x": rng.uniform(-1, 1, (1, 16)).astype(np.float32)} for _ in range(2)])
    return str(mz.save(qm.sliced(), d / "sliced.onnx")), str(feeds)


def test_pairs_on_the_same_grid_after_a_slice_are_tied_to_their_input_pair(sliced, tmp_path):
    import onnx

    model = onnx.load(sliced[0])
    tied = qdq.tied_pairs(model, qdq.find_pairs(model))
    assert tied == {"s_QuantizeLinear": "a_QuantizeLinear", "t_QuantizeLinear": "a_QuantizeLinear"}
    model = qm.sliced(t_scale=0.5)  # t on another grid
    assert qdq.tied_pairs(model, qdq.find_pairs(model)) == {"s_QuantizeLinear": "a_QuantizeLinear"}


def test_a_unit_of_tied_pairs_is_found_in_few_checks(sliced):
    search = QdqSearch(QdqConfig(sliced[0], load_inputs=[sliced[1]], tolerances=Tolerances.of(atol=0.05, rtol=0.0), held_out=0,
                                 suggest_scales=False))
    out = search.run()
    assert out.status == "found"
    assert sorted(out.kept) == ["a_QuantizeLinear", "s_QuantizeLinear", "t_QuantizeLinear"]
    assert out.candidates == 3
    # nothing in float fails; one unit (a with s and t) passes; s and t each cannot be left out
    assert out.checks <= 4


def test_a_replay_from_another_check_is_refused(sliced, tmp_path, cli):
    replay = tmp_path / "r.json"
    r = cli("debug", "precision", sliced[0], "--load-inputs", sliced[1], "--atol", "0.05", "--rtol", "0",
            "--save-debug-replay", replay)
    assert r.code == 0, r.err
    assert "--atol" in json.loads(replay.read_text())["check"]
    assert "3 Q/DQ pair(s) that could go back to float, searched as 1 unit(s)" in r.err
    assert "without the tied pair s" in r.err  # (a trimming check says what it leaves out)
    same = cli("debug", "precision", sliced[0], "--load-inputs", sliced[1], "--atol", "0.05", "--rtol", "0",
               "--load-debug-replay", replay)
    assert same.code == 0 and same.out == r.out, same.err
    other = cli("debug", "precision", sliced[0], "--load-inputs", sliced[1], "--atol", "0.5", "--rtol", "0",
                "--load-debug-replay", replay)
    assert other.code == 3
    errors = [line for line in other.err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "recorded with --atol 0.05, where this run has 0.5" in errors[0], errors


def test_a_per_channel_pair_gets_a_scale_per_channel(tmp_path, cli):
    model = str(mz.save(qm.per_channel_clip(), tmp_path / "pc.onnx"))
    rng = np.random.default_rng(1)
    feeds = tmp_path / "in.json"
    save_inputs(str(feeds), [{"x": rng.uniform(-1, 1, (1, 4, 8)).astype(np.float32)} for _ in range(2)])
    r = cli("debug", "precision", model, "--load-inputs", feeds, "--atol", "0.02", "--rtol", "0", "--held-out", "0",
            "--json")
    assert r.code == 0, r.err
    pair = json.loads(r.out)["float_pairs"][0]
    sug = pair["suggested"]
    assert len(sug["scale"]) == 4 and sug["zero_point"] == [0, 0, 0, 0]
    assert 0.005 < sug["scale"][2] <= 1 / 127 + 1e-6  # channel 2: its observed range, no longer clipping
    assert sug["passes"] is True
    assert "suggested per-channel scales" in r.err and "(4 channels)" in r.err
    assert "most at channel 2 of 4" in r.err  # the clipping named at the channel that clips


def _moved_per_channel(op: str, **attrs):
    """x[1,16] -> Reshape [1,4,4] -> r, a per-channel pair on r (axis 1) -> ``op`` -> t, a pair on t with the
    same scales (axis 1) -> Reshape [1,16] -> y. Channel 3's scale is 3x the others'."""
    from onnx import helper, numpy_helper

    i = numpy_helper.from_array
    nodes = [helper.make_node("Reshape", ["x", "s1"], ["r"], name="reshape_in")]
    inits = [i(np.array([1, 4, 4], np.int64), "s1"), i(np.array([1, 16], np.int64), "s2"),
             i(np.array([1 / 127] * 3 + [3 / 127], np.float32), "sc"), i(np.zeros(4, np.int8), "zp")]
    for name, src in (("r", "r"), ("t", "t")):
        if name == "t":
            extra = ["shape_mid"] if op == "Reshape" else []
            nodes.append(helper.make_node(op, ["r_dq", *extra], ["t"], name="moving", **attrs))
        nodes += [helper.make_node("QuantizeLinear", [src, "sc", "zp"], [f"{name}_q"], name=f"{name}_QuantizeLinear", axis=1),
                  helper.make_node("DequantizeLinear", [f"{name}_q", "sc", "zp"], [f"{name}_dq"],
                                   name=f"{name}_DequantizeLinear", axis=1)]
    inits.append(i(np.array([1, 4, 2, 2], np.int64), "shape_mid"))
    nodes.append(helper.make_node("Reshape", ["t_dq", "s2"], ["y"], name="reshape_out"))
    graph = helper.make_graph(nodes, "moved", [mz.vi("x", [1, 16])], [mz.vi("y", [1, 16])], inits)
    return mz.make_model(graph, opset=17)


@pytest.mark.parametrize("op, attrs, tied", [("Transpose", {"perm": [0, 2, 1]}, False),
                                             ("Transpose", {"perm": [0, 1, 2]}, True),
                                             ("Identity", {}, True),
                                             ("Reshape", {}, True)])  # ([1,4,4] -> [1,4,2,2]: channels in place)
def test_per_channel_pairs_are_tied_only_where_the_channel_axis_stays(op, attrs, tied):
    model = _moved_per_channel(op, **attrs)
    expected = {"t_QuantizeLinear": "r_QuantizeLinear"} if tied else {}
    assert qdq.tied_pairs(model, qdq.find_pairs(model)) == expected

"""`debug reduce` on a detector-like model against ONNX-Runtime's fusion noise.

A stack of Conv + BatchNormalization + Relu blocks, one Conv's weights perturbed by 0.1 %.
Golden values come from the clean model with every tensor marked (which keeps ONNX-Runtime
from fusing anything), so a small subgraph, fused and laid out differently, differs from them
by a few 1e-5 at the default tolerances (atol = rtol = 1e-5): the documented noise case.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import run_toolkit

BLOCKS, FAULTY = 8, 5
pytestmark = pytest.mark.skipif(
    __import__("importlib").util.find_spec("onnxruntime") is None, reason="needs onnxruntime"
)


def detector(perturb_block=None, channels=32, blocks=BLOCKS):
    rng = np.random.default_rng(0)
    nodes, inits = [], []
    prev, cin = "images", 3
    for b in range(blocks):
        w = rng.normal(0, (2.0 / (cin * 9)) ** 0.5, (channels, cin, 3, 3)).astype(np.float32)
        if b == perturb_block:
            w = w * np.float32(1.001)
        inits += [numpy_helper.from_array(w, f"w{b}"),
                  numpy_helper.from_array(rng.normal(0, 0.1, channels).astype(np.float32), f"cb{b}")]
        nodes.append(helper.make_node("Conv", [prev, f"w{b}", f"cb{b}"], [f"conv{b}"], name=f"conv_{b}",
                                      pads=[1, 1, 1, 1]))
        bn = {
            "s": rng.uniform(0.5, 1.5, channels), "b": rng.normal(0, 0.1, channels),
            "m": rng.normal(0, 0.1, channels), "v": rng.uniform(0.5, 1.5, channels),
        }
        for k, v in bn.items():
            inits.append(numpy_helper.from_array(v.astype(np.float32), f"bn{k}{b}"))
        nodes.append(helper.make_node("BatchNormalization", [f"conv{b}"] + [f"bn{k}{b}" for k in "sbmv"],
                                      [f"bn{b}"], name=f"bn_{b}"))
        nodes.append(helper.make_node("Relu", [f"bn{b}"], [f"relu{b}"], name=f"relu_{b}"))
        prev, cin = f"relu{b}", channels
    graph = helper.make_graph(
        nodes, "detector", [helper.make_tensor_value_info("images", TensorProto.FLOAT, [1, 3, 32, 32])],
        [helper.make_tensor_value_info(prev, TensorProto.FLOAT, None)], inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    folder = tmp_path_factory.mktemp("detector")
    onnx.save(detector(), str(folder / "clean.onnx"))
    onnx.save(detector(FAULTY), str(folder / "faulty.onnx"))
    return folder


def _golden(folder, *opt):
    """Layerwise golden values of the clean model (the docs' recipe), with ``opt`` on the run."""
    tag = "_".join(opt[1:]) or "default"
    res = run_toolkit("run", "clean.onnx", "--onnxrt", *opt, "--val-range", "[0,30]",
                      "--save-inputs", f"inputs_{tag}.json", "--onnx-outputs", "mark", "all",
                      "--save-outputs", f"golden_{tag}.json", cwd=folder)
    assert res.code == 0, res.err
    res = run_toolkit("data", "to-input", f"inputs_{tag}.json", f"golden_{tag}.json", "-o", f"layerwise_{tag}.json",
                      cwd=folder)
    assert res.code == 0, res.err
    return f"layerwise_{tag}.json", f"golden_{tag}.json"


def _reduce(folder, out, layerwise, golden, *opt):
    res = run_toolkit("debug", "reduce", "faulty.onnx", "-o", out, "--json",
                      "--check", "toolkit", "run", "polygraphy_debug.onnx", "--onnxrt", *opt,
                      "--load-inputs", layerwise, "--load-outputs", golden, cwd=folder)
    assert res.code == 0, res.err
    import json

    return res, json.loads(res.out)


def test_tolerance_at_fusion_noise_warns(models):
    layerwise, golden = _golden(models)
    res, doc = _reduce(models, "noisy.onnx", layerwise, golden)
    reduced = doc["evidence"]["reduced"]["worst"]
    full = doc["evidence"]["full_model"]["worst"]
    assert full["max_abs"] > 1e-3  # the perturbed Conv shows plainly at the output
    assert reduced["max_abs"] < 1e-4  # what the search converged on is the size of the noise
    assert doc["evidence"]["noise_warning"]
    assert "warning: the reduced model fails by" in res.err and "may be noise" in res.err
    assert "--ort-optimization disable" in res.err and "mark all" in res.err


def test_recommended_recipe_finds_the_perturbed_conv(models):
    # the docs' remedy: no graph optimizations in the golden run nor in the check
    layerwise, golden = _golden(models, "--ort-optimization", "disable")
    res, doc = _reduce(models, "found.onnx", layerwise, golden, "--ort-optimization", "disable")
    assert doc["result_nodes"] == [f"conv_{FAULTY} [Op: Conv]"], res.err
    assert doc["evidence"]["noise_warning"] is None
    assert doc["evidence"]["reduced"]["worst"]["name"] == f"conv{FAULTY}"


def test_a_step_function_off_by_one_step_is_explained(tmp_path, cli, monkeypatch):
    """Floor(x / 0.1) in fp16 storage: fed the reference's values, the Floor alone fails (its fp16
    input crosses an integer), off by exactly one step; the result says that rounding at a step's
    input does this, and how to tell it from a wrong kernel. The same graph with a Relu does not get it."""
    monkeypatch.chdir(tmp_path)  # the replay file goes beside the iteration artifact
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Div", ["r", "s"], ["d"]),
        helper.make_node("Floor", ["d"], ["f"], name="the_floor"),
        helper.make_node("Mul", ["f", "s"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 64])],
        [numpy_helper.from_array(np.array(0.1, np.float32), "s")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    src = tmp_path / "step.onnx"
    onnx.save(model, str(src))
    res = cli("debug", "reduce", src, "-o", tmp_path / "min.onnx", "--compare", "onnxrt", "onnxrt:fp16",
              "--val-range", "[0,4]", "--rtol", "0.004", "--atol", "0.001")
    assert res.code == 0, res.err
    assert [n.op_type for n in onnx.load(str(tmp_path / "min.onnx")).graph.node] == ["Floor"]
    assert "'f' comes from Floor (the_floor), a step function, and is off by 1, at most one step" in res.err
    assert "so would a wrong kernel" in res.err
    model.graph.node[2].op_type = "Relu"  # no step: a failure there is not explained so
    onnx.save(model, str(src))
    other = cli("debug", "reduce", src, "-o", tmp_path / "min2.onnx", "--compare", "onnxrt", "onnxrt:fp16",
                "--val-range", "[0,4]")
    assert other.code == 0 and "step function" not in other.err


def test_a_qdq_pair_off_by_one_scale_step_is_explained(tmp_path, cli, monkeypatch):
    """Relu -> QuantizeLinear -> DequantizeLinear (a QDQ pair, as onnxruntime.quantization writes):
    in fp16 storage some Relu outputs cross a half step, so the dequantized output is off by one
    scale step (0.1). Reduced to the pair (the outputs kept), the result names the QuantizeLinear
    behind the DequantizeLinear as a step function and suggests an --atol past one step; OpenVINO
    and ONNX-Runtime differ so on a QDQ-quantized classifier's input (one element at a half step)."""
    monkeypatch.chdir(tmp_path)  # the replay file goes beside the iteration artifact
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("QuantizeLinear", ["r", "s", "zp"], ["q"], name="the_quant"),
        helper.make_node("DequantizeLinear", ["q", "s", "zp"], ["y"], name="the_dequant"),
    ]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [32, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [32, 64])],
        [numpy_helper.from_array(np.array(0.1, np.float32), "s"), numpy_helper.from_array(np.array(0, np.int8), "zp")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    src = tmp_path / "qdq.onnx"
    onnx.save(model, str(src))
    res = cli("debug", "reduce", src, "-o", tmp_path / "min.onnx", "--compare", "onnxrt", "onnxrt:fp16",
              "--val-range", "[0,4]", "--rtol", "0.004", "--atol", "0.001", "--no-reduce-outputs")
    assert res.code == 0, res.err
    assert [n.op_type for n in onnx.load(str(tmp_path / "min.onnx")).graph.node][-2:] == [
        "QuantizeLinear", "DequantizeLinear"]
    assert ("'y' comes from QuantizeLinear (the_quant) through DequantizeLinear (the_dequant), a step function, "
            "and is off by 0.1, at most one step") in res.err, res.err
    assert "--atol 0.11 looks past it" in res.err  # (the float32 scale is a little over 0.1)

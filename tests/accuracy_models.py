"""Models with planted numerical faults, built in code for the accuracy tests."""

from __future__ import annotations

from typing import Dict, Iterable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from modelzoo import make_model, save

CHANNELS = 4
SIZE = 8


def conv_net(layers: int = 8, perturb: Iterable[int] = (), scale: float = 0.05, seed: int = 0):
    """``layers`` x [Conv 3x3, Relu] on a (1, 4, 8, 8) input; the Convs in ``perturb`` get
    their weights changed by ``scale`` (relative). Node names: ``conv{i}``, ``relu{i}``."""
    rng = np.random.default_rng(seed)
    perturb = set(perturb)
    nodes, inits, prev = [], [], "x"
    for i in range(layers):
        w = (rng.standard_normal((CHANNELS, CHANNELS, 3, 3)) / 6.0).astype(np.float32)
        b = (rng.standard_normal(CHANNELS) * 0.1).astype(np.float32)
        if i in perturb:
            w = w * np.float32(1.0 + scale) + np.float32(scale)
        inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(b, f"b{i}")]
        nodes.append(helper.make_node("Conv", [prev, f"w{i}", f"b{i}"], [f"c{i}"], name=f"conv{i}", pads=[1, 1, 1, 1]))
        nodes.append(helper.make_node("Relu", [f"c{i}"], [f"r{i}"], name=f"relu{i}"))
        prev = f"r{i}"
    shape = [1, CHANNELS, SIZE, SIZE]
    graph = helper.make_graph(
        nodes,
        "convnet",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info(prev, TensorProto.FLOAT, shape)],
        inits,
    )
    return make_model(graph)


def save_pair(tmp_path, layers: int = 8, perturb: Iterable[int] = (3,), **kw) -> Dict[str, str]:
    """clean.onnx and faulty.onnx (same names, same structure) in ``tmp_path``."""
    return {
        "clean": save(conv_net(layers, (), **kw), tmp_path / "clean.onnx"),
        "faulty": save(conv_net(layers, perturb, **kw), tmp_path / "faulty.onnx"),
    }


def all_tensors(path: str, feed: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
    """Every node output of the model at ``path`` on ONNX-Runtime (CPU, no graph optimization)."""
    import onnxruntime as ort

    model = onnx.load(path)
    names = [o for n in model.graph.node for o in n.output]
    have = {o.name for o in model.graph.output}
    model.graph.output.extend(helper.make_empty_tensor_value_info(n) for n in names if n not in have)
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    outs = sess.run(None, feed)
    return {o.name: v for o, v in zip(sess.get_outputs(), outs)}


def feed(seed: int = 1) -> Dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((1, CHANNELS, SIZE, SIZE)).astype(np.float32)}

"""Test models built in code (onnx.helper), shared by every test module.

Every model sets ``ir_version`` explicitly (onnxruntime rejects onnx's newest default)
and opset 17. Each builder returns an ``onnx.ModelProto``; ``save(model, path)`` writes it.
"""

from __future__ import annotations

import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

IR_VERSION = 8
OPSET = 17


def make_model(graph, opset: int = OPSET, ir_version: int = IR_VERSION):
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="toolkit-tests")
    model.ir_version = ir_version
    return model


def save(model, path) -> str:
    onnx.save_model(model, str(path))
    return str(path)


def vi(name, shape, dtype=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, dtype, shape)


def seed_example(shape=(1, 3, 224, 224)):
    """Polygraphy's example model: Y = x0 + (a * x1 + b); nodes Mul -> Add -> Add."""
    a = numpy_helper.from_array(np.full(shape, 2.0, dtype=np.float32), "a")
    b = numpy_helper.from_array(np.full(shape, 0.5, dtype=np.float32), "b")
    nodes = [
        helper.make_node("Mul", ["x1", "a"], ["mul_out"], name="onnx_graphsurgeon_node_1"),
        helper.make_node("Add", ["mul_out", "b"], ["add_out"], name="onnx_graphsurgeon_node_3"),
        helper.make_node("Add", ["x0", "add_out"], ["Y"], name="onnx_graphsurgeon_node_5"),
    ]
    graph = helper.make_graph(
        nodes, "seed_example", [vi("x0", list(shape)), vi("x1", list(shape))], [vi("Y", list(shape))], [a, b]
    )
    return make_model(graph)


def chain(n: int = 6, shape=(1, 4), ops=None):
    """x -> op0 -> op1 -> ... -> y. Ops cycle through Relu, Neg(Mul by -1 const), Sigmoid, Abs."""
    ops = ops or ["Relu", "Sigmoid", "Abs", "Neg", "Tanh", "Exp"]
    nodes = []
    prev = "x"
    for i in range(n):
        out = "y" if i == n - 1 else f"t{i}"
        op = ops[i % len(ops)]
        nodes.append(helper.make_node(op, [prev], [out], name=f"n{i}_{op.lower()}"))
        prev = out
    graph = helper.make_graph(nodes, "chain", [vi("x", list(shape))], [vi("y", list(shape))])
    return make_model(graph)


def branch(shape=(1, 4)):
    """x -> Relu -> {Sigmoid -> s, Mul(w) -> m} -> Add -> Abs -> y (a diamond)."""
    w = numpy_helper.from_array(np.full(shape, 3.0, dtype=np.float32), "w")
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("Sigmoid", ["r"], ["s"], name="sigmoid"),
        helper.make_node("Mul", ["r", "w"], ["m"], name="mul"),
        helper.make_node("Add", ["s", "m"], ["a"], name="add"),
        helper.make_node("Abs", ["a"], ["y"], name="abs"),
    ]
    graph = helper.make_graph(nodes, "branch", [vi("x", list(shape))], [vi("y", list(shape))], [w])
    return make_model(graph)


def with_constant(shape=(1, 4)):
    """x -> Add(Constant c) -> Mul(Constant k) -> y, constants as Constant nodes."""
    c = helper.make_node(
        "Constant", [], ["c"], name="const_c", value=numpy_helper.from_array(np.ones(shape, np.float32), "cv")
    )
    k = helper.make_node(
        "Constant", [], ["k"], name="const_k", value=numpy_helper.from_array(np.full(shape, 2.0, np.float32), "kv")
    )
    nodes = [
        c,
        helper.make_node("Add", ["x", "c"], ["t"], name="add"),
        k,
        helper.make_node("Mul", ["t", "k"], ["y"], name="mul"),
    ]
    graph = helper.make_graph(nodes, "with_constant", [vi("x", list(shape))], [vi("y", list(shape))])
    return make_model(graph)


def with_if(shape=(1, 4)):
    """x -> Relu -> r; If(cond) then: r * 2 (reads outer r), else: r + outer_b; -> y."""
    two = numpy_helper.from_array(np.full(shape, 2.0, np.float32), "two")
    outer_b = numpy_helper.from_array(np.full(shape, 5.0, np.float32), "outer_b")
    then_g = helper.make_graph(
        [helper.make_node("Mul", ["r", "two"], ["then_out"], name="then_mul")], "then_body", [], [vi("then_out", list(shape))]
    )
    else_g = helper.make_graph(
        [helper.make_node("Add", ["r", "outer_b"], ["else_out"], name="else_add")],
        "else_body",
        [],
        [vi("else_out", list(shape))],
    )
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("If", ["cond"], ["if_out"], name="if", then_branch=then_g, else_branch=else_g),
        helper.make_node("Abs", ["if_out"], ["y"], name="abs"),
    ]
    graph = helper.make_graph(
        nodes,
        "with_if",
        [vi("x", list(shape)), vi("cond", [], TensorProto.BOOL)],
        [vi("y", list(shape))],
        [two, outer_b],
    )
    return make_model(graph)


def dynamic_batch(channels: int = 4):
    """x:[batch, C] -> Relu -> Shape -> Gather(0) ... Reshape back; y:[batch, C]."""
    idx0 = numpy_helper.from_array(np.array(0, np.int64), "idx0")
    minus1 = numpy_helper.from_array(np.array([-1], np.int64), "minus1")
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("Shape", ["r"], ["shp"], name="shape"),
        helper.make_node("Gather", ["shp", "idx0"], ["b"], name="gather", axis=0),
        helper.make_node("Unsqueeze", ["b", "zero_axes"], ["b1"], name="unsqueeze"),
        helper.make_node("Concat", ["b1", "minus1"], ["newshape"], name="concat", axis=0),
        helper.make_node("Reshape", ["r", "newshape"], ["y"], name="reshape"),
    ]
    zero_axes = numpy_helper.from_array(np.array([0], np.int64), "zero_axes")
    graph = helper.make_graph(
        nodes,
        "dynamic_batch",
        [vi("x", ["batch", channels])],
        [vi("y", ["batch", channels])],
        [idx0, minus1, zero_axes],
    )
    return make_model(graph)


def save_with_external_data(model, path, location: str = "weights.bin") -> str:
    """Save with every initializer (any size) in one external file beside the model."""
    onnx.save_model(
        model, str(path), save_as_external_data=True, all_tensors_to_one_file=True, location=location, size_threshold=0
    )
    return str(path)


def data_path(tmp_path, name: str) -> str:
    return os.path.join(str(tmp_path), name)

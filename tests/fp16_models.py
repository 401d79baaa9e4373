"""Test models for mixed precision (built in code): an fp16 overflow in a LayerNorm,
shape computations, If/Loop bodies, a PP-OCR-sized detection CNN."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import modelzoo as mz

LN_DIM = 64
# The nodes of layernorm_overflow() that must stay fp32: the squares reach ~2.8e5
# (past fp16's 65504) and only their mean (~3.6e4) fits in fp16.
LN_MUST_KEEP = ["square", "variance"]


def layernorm_overflow(seed: int = 0, scale: float = 25.0):
    """x[2,64] -> MatMul (large activations, |a| ~ 500) -> decomposed LayerNorm -> MatMul -> y[2,8]."""
    rng = np.random.default_rng(seed)
    d = LN_DIM
    w1 = (rng.standard_normal((d, d)) * scale).astype(np.float32)
    w2 = (rng.standard_normal((d, 8)) * 0.1).astype(np.float32)
    inits = [
        numpy_helper.from_array(w1, "W1"),
        numpy_helper.from_array(w2, "W2"),
        numpy_helper.from_array(np.array(2, np.float32), "two"),
        numpy_helper.from_array(np.array(1e-5, np.float32), "eps"),
        numpy_helper.from_array(np.ones(d, np.float32), "gamma"),
        numpy_helper.from_array(np.zeros(d, np.float32), "beta"),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "W1"], ["a"], name="proj"),
        helper.make_node("ReduceMean", ["a"], ["mu"], name="mean", axes=[-1]),
        helper.make_node("Sub", ["a", "mu"], ["d"], name="center"),
        helper.make_node("Pow", ["d", "two"], ["sq"], name="square"),
        helper.make_node("ReduceMean", ["sq"], ["var"], name="variance", axes=[-1]),
        helper.make_node("Add", ["var", "eps"], ["ve"], name="add_eps"),
        helper.make_node("Sqrt", ["ve"], ["sd"], name="std"),
        helper.make_node("Div", ["d", "sd"], ["nrm"], name="normalize"),
        helper.make_node("Mul", ["nrm", "gamma"], ["sc"], name="scale"),
        helper.make_node("Add", ["sc", "beta"], ["sh"], name="shift"),
        helper.make_node("MatMul", ["sh", "W2"], ["y"], name="head"),
    ]
    graph = helper.make_graph(nodes, "layernorm_overflow", [mz.vi("x", [2, d])], [mz.vi("y", [2, 8])], inits)
    return mz.make_model(graph)


def ln_input(seed: int = 1):
    return {"x": np.random.default_rng(seed).standard_normal((2, LN_DIM)).astype(np.float32)}


def shape_resize(h: int = 6, w: int = 10):
    """Conv -> Shape -> Slice(H, W) -> Cast(float) -> Mul(1.5) -> Cast(int64) -> Concat -> Resize(sizes)
    -> Relu; plus a Constant with value_float and a ConstantOfShape without value."""
    rng = np.random.default_rng(3)
    wconv = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32) * 0.3, "wconv")
    inits = [
        wconv,
        numpy_helper.from_array(np.array([2], np.int64), "s_start"),
        numpy_helper.from_array(np.array([4], np.int64), "s_end"),
        numpy_helper.from_array(np.array([1, 4], np.int64), "nc"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "wconv"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Shape", ["c"], ["shp"], name="shape"),
        helper.make_node("Slice", ["shp", "s_start", "s_end"], ["hw"], name="slice_hw"),
        helper.make_node("Cast", ["hw"], ["hwf"], name="hw_to_float", to=TensorProto.FLOAT),
        helper.make_node("Constant", [], ["factor"], name="factor_const", value_float=1.5),
        helper.make_node("Mul", ["hwf", "factor"], ["hws"], name="scale_hw"),
        helper.make_node("Cast", ["hws"], ["hwi"], name="hw_to_int", to=TensorProto.INT64),
        helper.make_node("Concat", ["nc", "hwi"], ["sizes"], name="sizes", axis=0),
        helper.make_node("Resize", ["c", "", "", "sizes"], ["up"], name="resize", mode="linear"),
        helper.make_node("Relu", ["up"], ["r"], name="relu"),
        helper.make_node("Shape", ["r"], ["rshape"], name="rshape"),
        helper.make_node("ConstantOfShape", ["rshape"], ["zeros"], name="zeros"),
        helper.make_node("Add", ["r", "zeros"], ["y"], name="add_zeros"),
    ]
    graph = helper.make_graph(
        nodes, "shape_resize", [mz.vi("x", [1, 3, h, w])], [mz.vi("y", [1, 4, h * 3 // 2, w * 3 // 2])], inits
    )
    return mz.make_model(graph)


def if_loop(n: int = 4):
    """x[1,4] -> Relu -> If(cond){then: r*2 (outer r) | else: r+b} -> Loop(3){acc = acc*0.5 + r} -> y."""
    half = numpy_helper.from_array(np.full((1, n), 0.5, np.float32), "half")
    two = numpy_helper.from_array(np.full((1, n), 2.0, np.float32), "two")
    b = numpy_helper.from_array(np.full((1, n), 5.0, np.float32), "b")
    trips = numpy_helper.from_array(np.array(3, np.int64), "trips")
    then_g = helper.make_graph(
        [helper.make_node("Mul", ["r", "two"], ["then_out"], name="then_mul")], "then", [], [mz.vi("then_out", [1, n])]
    )
    else_g = helper.make_graph(
        [helper.make_node("Add", ["r", "b"], ["else_out"], name="else_add")], "else", [], [mz.vi("else_out", [1, n])]
    )
    body = helper.make_graph(
        [
            helper.make_node("Mul", ["acc_in", "half"], ["acc_half"], name="body_mul"),
            helper.make_node("Add", ["acc_half", "r"], ["acc_out"], name="body_add"),
            helper.make_node("Identity", ["cond_in"], ["cond_out"], name="body_cond"),
        ],
        "body",
        [mz.vi("i", [], TensorProto.INT64), mz.vi("cond_in", [], TensorProto.BOOL), mz.vi("acc_in", [1, n])],
        [mz.vi("cond_out", [], TensorProto.BOOL), mz.vi("acc_out", [1, n])],
    )
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("If", ["cond"], ["if_out"], name="if", then_branch=then_g, else_branch=else_g),
        helper.make_node("Loop", ["trips", "", "if_out"], ["loop_out"], name="loop", body=body),
        helper.make_node("Abs", ["loop_out"], ["y"], name="abs"),
    ]
    graph = helper.make_graph(
        nodes,
        "if_loop",
        [mz.vi("x", [1, n]), mz.vi("cond", [], TensorProto.BOOL)],
        [mz.vi("y", [1, n])],
        [half, two, b, trips],
    )
    return mz.make_model(graph)


def shared_and_kept_output():
    """A weight read by two nodes; the last node (a graph output also read inside) is Max."""
    w = numpy_helper.from_array(np.linspace(-1, 1, 8, dtype=np.float32).reshape(1, 8), "w")
    nodes = [
        helper.make_node("Mul", ["x", "w"], ["m"], name="mul"),
        helper.make_node("Add", ["m", "w"], ["a"], name="add"),
        helper.make_node("Max", ["a", "x"], ["mx"], name="max"),  # no fp16 kernel: stays fp32
        helper.make_node("Relu", ["mx"], ["y2"], name="relu"),
    ]
    graph = helper.make_graph(
        nodes, "shared", [mz.vi("x", [1, 8])], [mz.vi("mx", [1, 8]), mz.vi("y2", [1, 8])], [w]
    )
    return mz.make_model(graph)


def ocr_detector(size: int = 320, seed: int = 0):
    """A PP-OCR-sized text detector (DB-style): a MobileNet-like backbone (conv/BN/relu blocks,
    depthwise convs, stride 2 stages), an FPN (Resize x2 + Add), and a sigmoid probability map.
    About 0.9 M parameters and 103 nodes at 1x3x320x320 (PP-OCR's mobile detector is of that size)."""
    rng = np.random.default_rng(seed)
    inits = []
    nodes = []
    counter = [0]

    def name(prefix):
        counter[0] += 1
        return f"{prefix}_{counter[0]}"

    def conv_bn_relu(x, cin, cout, k=3, stride=1, group=1, relu=True):
        n = name("conv")
        w = (rng.standard_normal((cout, cin // group, k, k)) * np.sqrt(2.0 / (cin // group * k * k))).astype(np.float32)
        inits.append(numpy_helper.from_array(w, n + ".w"))
        pad = k // 2
        nodes.append(
            helper.make_node(
                "Conv", [x, n + ".w"], [n], name=n, strides=[stride, stride], pads=[pad] * 4, group=group
            )
        )
        bn = n + ".bn"
        inits.extend(
            [
                numpy_helper.from_array((1 + 0.1 * rng.standard_normal(cout)).astype(np.float32), bn + ".scale"),
                numpy_helper.from_array((0.1 * rng.standard_normal(cout)).astype(np.float32), bn + ".bias"),
                numpy_helper.from_array((0.1 * rng.standard_normal(cout)).astype(np.float32), bn + ".mean"),
                numpy_helper.from_array((1 + 0.2 * rng.random(cout)).astype(np.float32), bn + ".var"),
            ]
        )
        nodes.append(
            helper.make_node(
                "BatchNormalization",
                [n, bn + ".scale", bn + ".bias", bn + ".mean", bn + ".var"],
                [bn],
                name=bn,
            )
        )
        if not relu:
            return bn
        r = n + ".relu"
        nodes.append(helper.make_node("Relu", [bn], [r], name=r))
        return r

    x = conv_bn_relu("x", 3, 32, stride=2)
    cin = 32
    feats = []
    for cout, blocks in ((48, 2), (96, 3), (192, 4), (384, 3)):
        for b in range(blocks):
            stride = 2 if b == 0 else 1
            dw = conv_bn_relu(x, cin, cin, k=3, stride=stride, group=cin)
            x = conv_bn_relu(dw, cin, cout, k=1)
            cin = cout
        feats.append((x, cout))
    # FPN: lateral 1x1 convs to 64 channels, top-down Resize x2 + Add
    lat = [conv_bn_relu(f, c, 96, k=1, relu=False) for f, c in feats]
    scales = numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "up2")
    inits.append(scales)
    top = lat[-1]
    for lower in reversed(lat[:-1]):
        up = name("up")
        nodes.append(helper.make_node("Resize", [top, "", "up2"], [up], name=up, mode="nearest"))
        s = name("fpn_add")
        nodes.append(helper.make_node("Add", [up, lower], [s], name=s))
        top = conv_bn_relu(s, 96, 96)
    head = conv_bn_relu(top, 96, 32)
    n = name("head")
    w = (rng.standard_normal((1, 32, 1, 1)) * 0.1).astype(np.float32)
    inits.append(numpy_helper.from_array(w, n + ".w"))
    nodes.append(helper.make_node("Conv", [head, n + ".w"], ["logits"], name=n))
    nodes.append(helper.make_node("Sigmoid", ["logits"], ["prob"], name="prob"))
    out_hw = size // 4
    graph = helper.make_graph(
        nodes, "ocr_detector", [mz.vi("x", [1, 3, size, size])], [mz.vi("prob", [1, 1, out_hw, out_hw])], inits
    )
    return mz.make_model(graph)


# The nodes of offset_cancellation() that must stay fp32 for bf16: 300 + h holds h only to
# multiples of 2 in bf16 (8 significant bits), and subtracting 300 again exposes it.
BF16_MUST_KEEP = ["offset", "unoffset"]


def offset_cancellation(seed: int = 0):
    """x[2,16] -> MatMul -> Add(300) -> Sub(300) -> Mul(2) -> y[2,16]: a precision loss without
    overflow (the kind bf16 has): errors up to 2 in bf16 (0.23 in fp16) unless both stay fp32."""
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((16, 16)) * 0.25).astype(np.float32)
    inits = [
        numpy_helper.from_array(w, "W"),
        numpy_helper.from_array(np.array(300, np.float32), "k"),
        numpy_helper.from_array(np.array(2, np.float32), "two"),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["h"], name="proj"),
        helper.make_node("Add", ["h", "k"], ["h2"], name="offset"),
        helper.make_node("Sub", ["h2", "k"], ["h3"], name="unoffset"),
        helper.make_node("Mul", ["h3", "two"], ["y"], name="double"),
    ]
    graph = helper.make_graph(nodes, "offset_cancellation", [mz.vi("x", [2, 16])], [mz.vi("y", [2, 16])], inits)
    return mz.make_model(graph)


def conv_block(opset: int):
    """x[1,3,8,8] -> Conv -> Relu -> MaxPool -> y: Conv and MaxPool accept bfloat16 from opset 22."""
    rng = np.random.default_rng(5)
    inits = [
        numpy_helper.from_array((rng.standard_normal((4, 3, 3, 3)) * 0.3).astype(np.float32), "wc"),
        numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "bc"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "wc", "bc"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("MaxPool", ["r"], ["y"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
    ]
    graph = helper.make_graph(nodes, "conv_block", [mz.vi("x", [1, 3, 8, 8])], [mz.vi("y", [1, 4, 4, 4])], inits)
    return mz.make_model(graph, opset=opset)


def _untyped(name: str):
    """A graph output that leaves its type out (exporters write such If-branch outputs)."""
    v = onnx.ValueInfoProto()
    v.name = name
    return v


def shape_decided_if(nested: bool, n: int = 4):
    """y = If(Size(x) == n){Relu(x) | Neg(x)} + x, the branches' outputs untyped; with
    ``nested`` all of it sits in the then-branch of an outer If on input ``cond``."""
    size = numpy_helper.from_array(np.array(n, np.int64), "n")
    then_g = helper.make_graph([helper.make_node("Relu", ["x"], ["t_out"], name="then_relu")], "t", [], [_untyped("t_out")])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e_out"], name="else_neg")], "e", [], [_untyped("e_out")])
    inner = [
        helper.make_node("Size", ["x"], ["size"], name="size"),
        helper.make_node("Equal", ["size", "n"], ["is_n"], name="eq"),
        helper.make_node("If", ["is_n"], ["if_out"], name="inner_if", then_branch=then_g, else_branch=else_g),
        helper.make_node("Add", ["if_out", "x"], ["y"], name="add"),
    ]
    if not nested:
        graph = helper.make_graph(inner, "shape_if", [mz.vi("x", [1, n])], [mz.vi("y", [1, n])], [size])
        return mz.make_model(graph)
    outer_then = helper.make_graph(inner, "outer_then", [], [_untyped("y")])
    outer_else = helper.make_graph([helper.make_node("Identity", ["x"], ["x_id"], name="id")], "oe", [], [_untyped("x_id")])
    node = helper.make_node("If", ["cond"], ["out"], name="outer_if", then_branch=outer_then, else_branch=outer_else)
    inputs = [mz.vi("x", [1, n]), mz.vi("cond", [], TensorProto.BOOL)]
    graph = helper.make_graph([node], "nested_shape_if", inputs, [mz.vi("out", [1, n])], [size])
    return mz.make_model(graph)


def constant_weights_past_fp16(n: int = 4):
    """y = (x * 1e5) * 1e-5, both factors in Constant nodes (as PP-OCR's exports hold their
    weights): 1e5 is past fp16's 65504. Nodes ``up`` and ``down``."""
    nodes = [
        helper.make_node("Constant", [], ["big"], name="big_const", value=numpy_helper.from_array(np.full((1, n), 1e5, np.float32))),
        helper.make_node("Constant", [], ["small"], name="small_const", value=numpy_helper.from_array(np.full((1, n), 1e-5, np.float32))),
        helper.make_node("Mul", ["x", "big"], ["scaled"], name="up"),
        helper.make_node("Mul", ["scaled", "small"], ["y"], name="down"),
    ]
    graph = helper.make_graph(nodes, "constant_weights", [mz.vi("x", [1, n])], [mz.vi("y", [1, n])])
    return mz.make_model(graph)


def overflow_before_int_cast(n: int = 8):
    """yi = Cast<int32>(x * 1000) and r = Relu(x): with x in [60, 100], x * 1000 passes fp16's
    65504 (inf, whose integer is undefined) where float32 holds it; node ``up`` makes it."""
    nodes = [
        helper.make_node("Mul", ["x", "big"], ["h"], name="up"),
        helper.make_node("Cast", ["h"], ["yi"], name="to_int", to=TensorProto.INT32),
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
    ]
    graph = helper.make_graph(
        nodes, "overflow_before_int_cast", [mz.vi("x", [1, n])],
        [mz.vi("yi", [1, n], TensorProto.INT32), mz.vi("r", [1, n])],
        [numpy_helper.from_array(np.array(1000.0, np.float32), "big")],
    )
    return mz.make_model(graph)


def int_cast_of_a_kept_output(n: int = 8):
    """h = x * 1000 is a graph output and is read by Cast<int32>, ArgMax and a Mul by 1e-3; with
    ``up`` kept in fp32 the converted model feeds the Cast float32 (and the others fp16)."""
    nodes = [
        helper.make_node("Mul", ["x", "big"], ["h"], name="up"),
        helper.make_node("Cast", ["h"], ["yi"], name="to_int", to=TensorProto.INT32),
        helper.make_node("ArgMax", ["h"], ["am"], name="argmax", axis=1, keepdims=1),
        helper.make_node("Greater", ["h", "limit"], ["gt"], name="greater"),
        helper.make_node("Mul", ["h", "small"], ["z"], name="down"),
    ]
    outputs = [mz.vi("yi", [1, n], TensorProto.INT32), mz.vi("am", [1, 1], TensorProto.INT64),
               mz.vi("gt", [1, n], TensorProto.BOOL), mz.vi("z", [1, n]), mz.vi("h", [1, n])]
    inits = [numpy_helper.from_array(np.array(v, np.float32), k) for k, v in
             (("big", 1000.0), ("small", 1e-3), ("limit", 5e4))]
    graph = helper.make_graph(nodes, "int_cast_of_a_kept_output", [mz.vi("x", [1, n])], outputs, inits)
    return mz.make_model(graph)

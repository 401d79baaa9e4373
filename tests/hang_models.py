"""Small hostile models that make a naive tool run for hours or allocate gigabytes.

- :func:`fan_out`: local functions F0 -> F1 (twice) -> ... inline to 2^depth nodes (3 KB).
- :func:`fan_out_in_if`: the same fan-out, reached only through an If branch of the top graph.
- :func:`fan_out_if_in_function`: every function calls the next twice inside an If of its body.
- :func:`fan_out_in_loop`: the fan-out inside a Loop body.
- :func:`long_loop`: a Loop of ``trips`` steps (10^12 by default) in a few hundred bytes.
- :func:`long_foldable_loop`: that Loop on constants, every size stated (folding computes it).
- :func:`big_range`: ``Range(0, n)`` of constants (10^12 elements by default).
- :func:`constant_blowups`: ConstantOfShape / Tile / Expand of constants to a huge size.
- :func:`big_scan`: a Scan over a huge constant-made sequence.

Every model sets ``ir_version`` explicitly (onnxruntime rejects onnx's newest default).
"""

from __future__ import annotations

import onnx
from onnx import TensorProto, helper

IR = 10
OPS = [helper.make_opsetid("", 17), helper.make_opsetid("local", 1)]


def _vi(name, dtype=TensorProto.FLOAT, shape=(1, 4)):
    return helper.make_tensor_value_info(name, dtype, list(shape) if shape is not None else None)


def _model(nodes, name, inputs, outputs, functions=(), initializers=()):
    graph = helper.make_graph(nodes, name, inputs, outputs, initializer=list(initializers))
    model = helper.make_model(graph, opset_imports=OPS, functions=list(functions))
    model.ir_version = IR
    return model


def _chain_functions(depth: int, body):
    """F0..F<depth>: F<depth> is one Relu; F<i> is ``body(i)`` (its nodes, calling F<i+1>)."""
    funcs = []
    for i in range(depth + 1):
        nodes = [helper.make_node("Relu", ["x"], ["y"])] if i == depth else body(i)
        funcs.append(helper.make_function("local", f"F{i}", ["x"], ["y"], nodes, OPS))
    return funcs


def _calls_twice(i: int, x: str = "x", y: str = "y", tag: str = ""):
    return [helper.make_node(f"F{i + 1}", [x], [f"t{tag}"], domain="local"),
            helper.make_node(f"F{i + 1}", [f"t{tag}"], [y], domain="local")]


def fan_out(depth: int = 18):
    """F0 calls F1 twice, F1 calls F2 twice, ..., F<depth> is one Relu: 2^depth nodes inlined."""
    funcs = _chain_functions(depth, _calls_twice)
    node = helper.make_node("F0", ["x"], ["y"], domain="local")
    return _model([node], "fan", [_vi("x")], [_vi("y")], funcs)


def _branch(nodes, name: str, out: str = "b"):
    return helper.make_graph(nodes, name, [], [_vi(out, shape=None)])


def fan_out_in_if(depth: int = 18):
    """The top graph's If calls F0 (a 2^depth fan-out) in its then-branch only."""
    funcs = _chain_functions(depth, _calls_twice)
    then = _branch([helper.make_node("F0", ["x"], ["b"], domain="local")], "then")
    other = _branch([helper.make_node("Identity", ["x"], ["b"])], "else")
    node = helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)
    return _model([node], "fan_if", [_vi("x"), _vi("c", TensorProto.BOOL, ())], [_vi("y")], funcs)


def fan_out_if_in_function(depth: int = 18):
    """Every F<i> holds an If whose then-branch calls F<i+1> twice: 2^depth nodes inlined,
    none of them at the top level of any function body."""

    def body(i: int):
        then = _branch(_calls_twice(i, "x", "b", tag=f"_{i}"), f"then{i}")
        other = _branch([helper.make_node("Identity", ["x"], ["b"])], f"else{i}")
        cond = helper.make_node("Constant", [], ["c"], value=helper.make_tensor("v", TensorProto.BOOL, [], [True]))
        return [cond, helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)]

    funcs = _chain_functions(depth, body)
    node = helper.make_node("F0", ["x"], ["y"], domain="local")
    return _model([node], "fan_if_fn", [_vi("x")], [_vi("y")], funcs)


def fan_out_in_loop(depth: int = 18):
    """A Loop (one trip) whose body calls F0, a 2^depth fan-out."""
    funcs = _chain_functions(depth, _calls_twice)
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("F0", ["v_in"], ["v_out"], domain="local")],
        "body",
        [_vi("i", TensorProto.INT64, ()), _vi("cond_in", TensorProto.BOOL, ()), _vi("v_in", shape=None)],
        [_vi("cond_out", TensorProto.BOOL, ()), _vi("v_out", shape=None)],
    )
    trips = helper.make_tensor("n", TensorProto.INT64, [], [1])
    node = helper.make_node("Loop", ["n", "", "x"], ["y"], body=body)
    return _model([node], "fan_loop", [_vi("x")], [_vi("y")], funcs, [trips])


def long_loop(trips: int = 10**12):
    """``y = x + 1`` repeated ``trips`` times, in a few hundred bytes."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Add", ["v_in", "one"], ["v_out"])],
        "body",
        [_vi("i", TensorProto.INT64, ()), _vi("cond_in", TensorProto.BOOL, ()), _vi("v_in", shape=None)],
        [_vi("cond_out", TensorProto.BOOL, ()), _vi("v_out", shape=None)],
    )
    inits = [helper.make_tensor("n", TensorProto.INT64, [], [trips]),
             helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])]
    node = helper.make_node("Loop", ["n", "", "x"], ["y"], body=body)
    return _model([node], "loop", [_vi("x")], [_vi("y")], initializers=inits)


def long_constant_loop(trips: int = 10**12):
    """:func:`long_loop` on a constant start value (its condition a constant too): the whole
    Loop is foldable, and its result is added to the input."""
    model = long_loop(trips)
    g = model.graph
    g.initializer.extend([helper.make_tensor("x0", TensorProto.FLOAT, [1, 4], [0.0] * 4),
                          helper.make_tensor("go", TensorProto.BOOL, [], [True])])
    loop = g.node[0]
    loop.input[:] = ["n", "go", "x0"]
    loop.output[0] = "l"
    g.node.append(helper.make_node("Add", ["x", "l"], ["y"]))
    return model


def long_foldable_loop(trips: int = 10**12):
    """:func:`long_constant_loop` whose every shape is stated (the Loop's result, its body's
    values) and whose body reads its step number: folding knows the result's size (16 bytes) and
    computes it once ``--max-nodes`` allows ``trips`` steps -- for days."""
    model = long_constant_loop(trips)
    body = model.graph.node[0].attribute[0].g
    for vi in list(body.input)[2:] + list(body.output)[1:]:
        vi.type.CopyFrom(helper.make_tensor_type_proto(TensorProto.FLOAT, [1, 4]))
    del body.node[1:]
    body.node.extend([helper.make_node("Cast", ["i"], ["fi"], to=TensorProto.FLOAT),
                      helper.make_node("Mul", ["fi", "zero"], ["u"]),
                      helper.make_node("Add", ["v_in", "one"], ["w"]),
                      helper.make_node("Add", ["w", "u"], ["v_out"])])
    model.graph.initializer.append(helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0]))
    model.graph.value_info.append(helper.make_tensor_value_info("l", TensorProto.FLOAT, [1, 4]))
    return model


def big_range(n: int = 10**12):
    """``y = Range(0, n, 1)`` of constants, then its sum (a model of a couple hundred bytes)."""
    inits = [helper.make_tensor("start", TensorProto.INT64, [], [0]),
             helper.make_tensor("limit", TensorProto.INT64, [], [n]),
             helper.make_tensor("delta", TensorProto.INT64, [], [1])]
    nodes = [helper.make_node("Range", ["start", "limit", "delta"], ["r"]),
             helper.make_node("ReduceSum", ["r"], ["s"], keepdims=0),
             helper.make_node("Cast", ["s"], ["sf"], to=TensorProto.FLOAT),
             helper.make_node("Add", ["x", "sf"], ["y"])]
    return _model(nodes, "range", [_vi("x")], [_vi("y")], initializers=inits)


def big_constant(op: str, n: int = 10**6):
    """ConstantOfShape / Tile / Expand of constants to ``n`` x ``n`` floats, then summed into y."""
    inits = [helper.make_tensor("dims", TensorProto.INT64, [2], [n, n]),
             helper.make_tensor("small", TensorProto.FLOAT, [1, 1], [1.0])]
    if op == "ConstantOfShape":
        made = helper.make_node("ConstantOfShape", ["dims"], ["big"])
    else:
        made = helper.make_node(op, ["small", "dims"], ["big"])
    nodes = [made,
             helper.make_node("ReduceSum", ["big"], ["s"], keepdims=0),
             helper.make_node("Add", ["x", "s"], ["y"])]
    return _model(nodes, f"big_{op}", [_vi("x")], [_vi("y")], initializers=inits)


def big_scan(n: int = 10**6):
    """A Scan over the rows of ``ConstantOfShape([n, n])`` summing them: a huge constant
    computation in a few hundred bytes."""
    body = helper.make_graph(
        [helper.make_node("Add", ["acc_in", "row"], ["acc_out"])],
        "scan_body",
        [_vi("acc_in", shape=None), _vi("row", shape=None)],
        [_vi("acc_out", shape=None)],
    )
    inits = [helper.make_tensor("dims", TensorProto.INT64, [2], [n, n])]
    zero = helper.make_node("ConstantOfShape", ["dims1"], ["acc0"])
    nodes = [helper.make_node("Constant", [], ["dims1"], value=helper.make_tensor("d1", TensorProto.INT64, [1], [n])),
             zero,
             helper.make_node("ConstantOfShape", ["dims"], ["rows"]),
             helper.make_node("Scan", ["acc0", "rows"], ["acc"], body=body, num_scan_inputs=1),
             helper.make_node("ReduceSum", ["acc"], ["s"], keepdims=0),
             helper.make_node("Add", ["x", "s"], ["y"])]
    return _model(nodes, "scan", [_vi("x")], [_vi("y")], initializers=inits)


def save(model, path) -> str:
    onnx.save(model, str(path))
    return str(path)

"""toolkit.core.shapes: tensor shapes/dtypes by ONNX inference with an ONNX-Runtime fallback."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import modelzoo
from toolkit.core.errors import InputError
from toolkit.core.io.model import load_model
from toolkit.core.shapes import (
    infer_tensor_meta,
    light_copy,
    node_reads,
    override_input_shapes,
    subgraph_outer_reads,
    top_tensor_names,
)


def gelu_model(dynamic=False):
    """x -> com.microsoft.Gelu (unknown to ONNX inference) -> Relu -> y; ORT knows Gelu."""
    dims = ["batch", 4] if dynamic else [2, 4]
    nodes = [
        helper.make_node("Gelu", ["x"], ["g"], name="gelu", domain="com.microsoft"),
        helper.make_node("Relu", ["g"], ["y"], name="relu"),
    ]
    graph = helper.make_graph(nodes, "gelu", [modelzoo.vi("x", dims)], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    )
    model.ir_version = 8
    return model


def test_every_tensor_of_a_dynamic_model_is_described():
    model = modelzoo.dynamic_batch()
    metas = infer_tensor_meta(model)
    assert set(metas) == set(top_tensor_names(model))
    assert metas["r"].shape == ("batch", 4)
    assert metas["r"].dtype == "float32"
    assert metas["shp"].shape == (2,) and metas["shp"].dtype == "int64"
    assert metas["idx0"].shape == () and metas["idx0"].dtype == "int64"  # initializer
    assert metas["y"].dtype == "float32"


def test_input_shapes_fix_dynamic_dims():
    metas = infer_tensor_meta(modelzoo.dynamic_batch(), input_shapes={"x": (3, 4)})
    assert metas["x"].shape == (3, 4)
    assert metas["r"].shape == (3, 4)
    assert metas["y"].shape == (3, 4)


def test_model_is_never_modified():
    model = modelzoo.dynamic_batch()
    before = model.SerializeToString()
    infer_tensor_meta(model, input_shapes={"x": (2, 4)}, force_fallback=True)
    infer_tensor_meta(model)
    override_input_shapes(model, {"x": (5, 4)})
    assert model.SerializeToString() == before


def test_fallback_fills_what_onnx_inference_cannot():
    model = gelu_model()
    no_fb = infer_tensor_meta(model, fallback=False)
    assert no_fb["g"].shape is None  # ONNX does not know com.microsoft.Gelu
    metas = infer_tensor_meta(model)
    assert metas["g"].shape == (2, 4) and metas["g"].dtype == "float32"
    assert metas["y"].shape == (2, 4)


def test_fallback_on_dynamic_input_needs_a_shape():
    with pytest.raises(InputError) as exc:
        infer_tensor_meta(gelu_model(dynamic=True))
    assert "'x'" in str(exc.value) and "--model-input-shapes" in str(exc.value)
    metas = infer_tensor_meta(gelu_model(dynamic=True), input_shapes={"x": [3, 4]})
    assert metas["g"].shape == (3, 4)


def test_forced_fallback_runs_onnxruntime():
    model = modelzoo.dynamic_batch()
    with pytest.raises(InputError, match="--model-input-shapes x:"):
        infer_tensor_meta(model, force_fallback=True)
    metas = infer_tensor_meta(model, force_fallback=True, input_shapes={"x": (7, 4)})
    assert metas["b"].shape == () and metas["b"].dtype == "int64"
    assert metas["newshape"].shape == (2,)
    assert metas["y"].shape == (7, 4)


def test_if_bodies_and_outer_reads():
    model = modelzoo.with_if()
    metas = infer_tensor_meta(model)
    assert metas["if_out"].dtype == "float32"
    assert metas["y"].dtype == "float32"
    if_node = [n for n in model.graph.node if n.op_type == "If"][0]
    assert sorted(subgraph_outer_reads(if_node)) == ["outer_b", "r", "two"]
    assert node_reads(if_node)[0] == "cond" and sorted(node_reads(if_node)) == ["cond", "outer_b", "r", "two"]


def test_loop_body_locals_are_not_outer_reads():
    body = helper.make_graph(
        [
            helper.make_node("Add", ["acc_in", "step"], ["acc_out"], name="add"),
            helper.make_node("Identity", ["cond_in"], ["cond_out"], name="id"),
        ],
        "body",
        [modelzoo.vi("i", [], TensorProto.INT64), modelzoo.vi("cond_in", [], TensorProto.BOOL), modelzoo.vi("acc_in", [1])],
        [modelzoo.vi("cond_out", [], TensorProto.BOOL), modelzoo.vi("acc_out", [1])],
    )
    loop = helper.make_node("Loop", ["n", "", "acc0"], ["acc"], body=body, name="loop")
    assert subgraph_outer_reads(loop) == ["step"]
    assert node_reads(loop) == ["n", "acc0", "step"]


def test_external_data_without_weights_loaded(tmp_path):
    big = np.arange(64 * 1024, dtype=np.float32).reshape(1, -1)
    w = numpy_helper.from_array(big, "w")
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["y"], name="add")],
        "ext",
        [modelzoo.vi("x", [1, big.shape[1]])],
        [modelzoo.vi("y", [1, big.shape[1]])],
        [w],
    )
    path = modelzoo.save_with_external_data(modelzoo.make_model(graph), tmp_path / "m.onnx")
    structure = load_model(path, load_external_data=False)
    metas = infer_tensor_meta(structure)
    assert metas["y"].shape == (1, big.shape[1])
    with pytest.raises(InputError, match="--external-data-dir"):
        infer_tensor_meta(structure, force_fallback=True)
    metas = infer_tensor_meta(structure, force_fallback=True, external_data_dir=str(tmp_path))
    assert metas["y"].shape == (1, big.shape[1])


def test_light_copy_stubs_big_weights_only():
    big = numpy_helper.from_array(np.zeros((256, 256), np.float32), "big")
    small = numpy_helper.from_array(np.zeros((2,), np.float32), "small")
    graph = helper.make_graph([], "g", [], [], [big, small])
    model = modelzoo.make_model(graph)
    light = light_copy(model)
    by_name = {t.name: t for t in light.graph.initializer}
    assert not by_name["big"].raw_data and list(by_name["big"].dims) == [256, 256]
    assert by_name["small"].raw_data == small.raw_data
    assert len(model.graph.initializer[0].raw_data) == 256 * 256 * 4


def test_override_input_shapes_errors_and_copy():
    model = modelzoo.dynamic_batch()
    new = override_input_shapes(model, {"x": (2, 4)})
    assert new is not model
    dims = [d.dim_value for d in new.graph.input[0].type.tensor_type.shape.dim]
    assert dims == [2, 4]
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"
    with pytest.raises(InputError, match="'nope' is not an input"):
        override_input_shapes(model, {"nope": (1,)})
    with pytest.raises(InputError, match="rank 2"):
        override_input_shapes(model, {"x": (1, 2, 3)})
    onnx.checker.check_model(new)


def test_a_named_dim_set_for_one_input_applies_to_the_others(cli, tmp_path):
    # silero-vad: input [batch, sequence] and state [2, batch, 128]; --input-shapes input:[3,...]
    # alone must give state batch 3 too (not the default 1, which ONNX-Runtime refuses)
    nodes = [
        helper.make_node("ReduceSum", ["x"], ["s"], name="sum", keepdims=1, axes=[1]),
        helper.make_node("Transpose", ["state"], ["st"], name="tr", perm=[1, 0]),
        helper.make_node("Add", ["s", "st"], ["y"], name="add"),
    ]
    graph = helper.make_graph(
        nodes, "shared_batch",
        [modelzoo.vi("x", ["batch", "seq"]), modelzoo.vi("state", [2, "batch"])], [modelzoo.vi("y", ["batch", 2])],
    )
    path = modelzoo.save(modelzoo.make_model(graph, opset=12), tmp_path / "m.onnx")
    res = cli("run", path, "--onnxrt", "--input-shapes", "x:[3,5]")
    assert res.code == 0, res.err
    assert "(2, 3)" in res.err and "'batch' = 3 as in x" in res.err
    from toolkit.core.inputs import plan_generation
    from toolkit.core.meta import TensorMeta

    metas = [TensorMeta("x", ("batch", "seq"), "float32"), TensorMeta("state", (2, "batch"), "float32")]
    plan = plan_generation(metas, shapes={"x": (3, 5)})
    assert [shape for _, shape in plan.inputs] == [(3, 5), (2, 3)]
    # an explicit shape still wins, and an unnamed '?' dim is never shared
    plan = plan_generation(metas, shapes={"x": (3, 5), "state": (2, 4)})
    assert [shape for _, shape in plan.inputs] == [(3, 5), (2, 4)]
    unnamed = [TensorMeta("a", ("?", 4), "float32"), TensorMeta("b", ("?", 4), "float32")]
    assert [s for _, s in plan_generation(unnamed, shapes={"a": (7, 4)}).inputs] == [(7, 4), (1, 4)]


def test_a_dim_stated_as_minus_one_is_dynamic(tmp_path):
    # PaddlePaddle exports write dim_value -1 for a dynamic dim (ppocr cls: x [-1, 3, ?, ?]):
    # generated inputs give it 1 (or the --input-shapes value), never a negative size
    from toolkit.core.inputs import plan_generation
    from toolkit.core.meta import TensorMeta
    from toolkit.precision.search import PrecisionConfig, PrecisionSearch

    metas = [TensorMeta("x", (-1, 4), "float32")]
    assert [s for _, s in plan_generation(metas).inputs] == [(1, 4)]
    assert [s for _, s in plan_generation(metas, shapes={"x": (3, 4)}).inputs] == [(3, 4)]
    model = modelzoo.chain(3)
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_value = -1
    path = modelzoo.save(model, tmp_path / "minus_one.onnx")
    outcome = PrecisionSearch(PrecisionConfig(path)).run()  # read its inputs from the ONNX model
    assert outcome.status == "none-needed"

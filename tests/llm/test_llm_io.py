"""A decoder's I/O found by convention or by --name; a model that is not one is refused before any work."""

import numpy as np
import pytest
from llm_decoders import build_decoder
from onnx import TensorProto, helper

from toolkit.core.errors import InputError, UsageError
from toolkit.llm.io import discover, parse_names
from toolkit.llm.steps import StepResult, compare_step, step_feed
from toolkit.core.compare.tolerances import Tolerances


def test_gqa_and_fp16_cache_read_from_the_model():
    io = discover(build_decoder(layers=2, heads=4, kv_heads=1, head_size=4, cache_dtype=TensorProto.FLOAT16))
    assert io.layers == 2 and io.vocab == 48
    key = io.past[0][0]
    assert (key.name, key.dtype, key.seq_axis, key.shape[1], key.shape[3]) == (
        "past_key_values.0.key", "float16", 2, 1, 4)
    feed = step_feed(io, [3, 4, 5])
    assert feed[key.name].shape == (1, 1, 0, 4) and feed[key.name].dtype == np.float16
    assert feed["attention_mask"].shape == (1, 3) and feed["position_ids"].tolist() == [[0, 1, 2]]
    cache = [(np.zeros((1, 1, 3, 4), np.float32),) * 2] * 2
    feed = step_feed(io, [9], cache)
    assert feed["position_ids"].tolist() == [[3]] and feed["attention_mask"].shape == (1, 4)
    assert feed[key.name].dtype == np.float16  # the reference's cache fed in the test model's dtype


def _renamed(model, mapping):
    for vi in list(model.graph.input) + list(model.graph.output):
        vi.name = mapping.get(vi.name, vi.name)
    for node in model.graph.node:
        for seq in (node.input, node.output):
            for k, n in enumerate(seq):
                seq[k] = mapping.get(n, n)
    return model


def test_past_dot_names_and_mapped_names():
    m = build_decoder(layers=2)
    names = {f"past_key_values.{i}.{kv}": f"past.{i}.{kv}" for i in range(2) for kv in ("key", "value")}
    io = discover(_renamed(m, names))
    assert io.past[1][1].name == "past.1.value"
    m = _renamed(build_decoder(layers=2), {"input_ids": "ids", "logits": "out", **{
        f"past_key_values.{i}.key": f"k_cache_{i}" for i in range(2)}})
    with pytest.raises(InputError, match="no input 'input_ids'"):
        discover(m)
    io = discover(m, parse_names(["input_ids=ids", "logits=out", "past_key=k_cache_{i}",
                                  "past_value=past_key_values.{i}.value"]))
    assert io.input_ids == "ids" and io.past[1][0].name == "k_cache_1"


def test_not_a_decoder_names_what_is_missing():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3])
    model = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x],
                                                [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])]),
                              ir_version=10)
    with pytest.raises(InputError, match="not a decoder with a KV cache.*input 'input_ids'.*output 'logits'"):
        discover(model, where="m.onnx")


def test_unknown_input_and_bad_names_are_refused():
    m = build_decoder(layers=1)
    m.graph.input.append(helper.make_tensor_value_info("seqlens_k", TensorProto.INT32, [1]))
    with pytest.raises(InputError, match="'seqlens_k' play no known role"):
        discover(m)
    with pytest.raises(UsageError):
        parse_names(["past_key=cache"])  # no {i}
    with pytest.raises(UsageError):
        parse_names(["speed=fast"])


def test_a_flip_within_the_tolerance_is_a_near_tie():
    io = discover(build_decoder(layers=1))
    ref = {"logits": np.array([[[1.0, 1.000001, 0.0] + [0.0] * 45]], np.float32),
           **{n: np.zeros((1, 1, 1, 8), np.float32) for n in io.present_names()}}
    test = {k: v.copy() for k, v in ref.items()}
    test["logits"][0, 0, 0] = 1.000002
    res = compare_step(io, io, test, ref, Tolerances.parse(["1e-5"]))
    assert res.kind is None and res.flipped and (res.reference_token, res.test_token) == (1, 0)
    assert 0 < res.margin <= res.difference
    res = compare_step(io, io, test, ref, Tolerances.parse(["1e-7"], ["0"]))
    assert res.kind == "logits"
    assert isinstance(res, StepResult)


def test_use_cache_branch_is_false_on_the_empty_cache_only():
    m = build_decoder(layers=1)
    m.graph.input.append(helper.make_tensor_value_info("use_cache_branch", TensorProto.BOOL, [1]))
    io = discover(m)
    assert step_feed(io, [1, 2])["use_cache_branch"].tolist() == [False]
    cache = [(np.zeros((1, 1, 2, 8), np.float32),) * 2]
    assert step_feed(io, [3], cache)["use_cache_branch"].tolist() == [True]


def test_present_outputs_that_are_not_the_whole_cache_are_refused(tmp_path):
    # a model whose present outputs hold only the new positions cannot be fed back
    from toolkit.llm.session import LlmConfig, LlmDebugger

    m = build_decoder(layers=1)
    for node in list(m.graph.node):
        name = node.output[0]
        if name.startswith("present."):  # attention reads the whole cache; the output is the new part
            for user in m.graph.node:
                user.input[:] = [f"{name}_full" if i == name else i for i in user.input]
            node.output[0] = f"{name}_full"
            m.graph.node.append(helper.make_node("Identity", [node.input[1]], [name]))
    path = str(tmp_path / "halfcache.onnx")
    import onnx

    onnx.save(m, path)
    with pytest.raises(InputError, match="present output 'present.0.key' has shape"):
        LlmDebugger(LlmConfig(path, prompts=[[1, 2, 3]], steps=3)).run()

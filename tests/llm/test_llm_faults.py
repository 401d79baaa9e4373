"""debug llm finds each injected fault at its exact first step, with its kind and layer."""

import numpy as np
import onnxruntime as ort
import pytest
from llm_decoders import build_decoder

from toolkit.core.compare.tolerances import Tolerances
from toolkit.llm.io import discover
from toolkit.llm.session import LlmConfig, LlmDebugger
from toolkit.llm.steps import cache_of, last_logits, step_feed

PROMPT = [1, 2, 3, 4]


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("llm") / "clean.onnx")
    build_decoder(path)
    return path


def _first(model, reference, steps=12, **kw):
    cfg = LlmConfig(model, reference_model=reference, prompts=[PROMPT], steps=steps, **kw)
    out = LlmDebugger(cfg).run()
    return out, out.first_divergence


def _fault(tmp_path, fault, **kw):
    path = str(tmp_path / f"{fault}.onnx")
    build_decoder(path, fault=fault, **kw)
    return path


def test_clean_model_has_no_divergence(clean):
    out = LlmDebugger(LlmConfig(clean, prompts=[PROMPT, [7, 8]], steps=12)).run()
    assert out.first_divergence is None
    assert out.steps_checked == 24 and out.prompts_checked == 2 and out.near_ties == []


def test_fault_once_the_kv_length_reaches_a_threshold(clean, tmp_path):
    # prompt of 4 tokens: step k sees 4 + k keys; the threshold 10 is reached at step 6
    out, d = _first(_fault(tmp_path, "kv_threshold", fault_layer=1, threshold=10), clean)
    assert (d.step, d.kind, d.kv_length) == (6, "logits", 9)
    assert d.located.layer == 1 and d.located.tensor == "/model/layers.1/self_attn/scores"
    assert out.steps_checked == 7


def test_cache_write_fault_is_kind_cache(clean, tmp_path):
    _, d = _first(_fault(tmp_path, "cache_write", fault_layer=2), clean)
    assert (d.step, d.kind, d.outputs) == (0, "cache", ["present.2.key"])
    assert d.located.layer == 2 and d.located.tensor == "present.2.key" and d.located.op_type == "Concat"


def test_position_dependent_fault(clean, tmp_path):
    # positions 0-3 in the prompt, then one per step: position 6 is fed at step 3
    _, d = _first(_fault(tmp_path, "position", fault_layer=0, position=6), clean)
    assert (d.step, d.kind, d.kv_length) == (3, "logits", 6)
    assert d.located.layer == 0 and d.located.module == "model.layers.0.self_attn.fault"


def test_weight_fault(clean, tmp_path):
    _, d = _first(_fault(tmp_path, "weight", fault_layer=1), clean)
    assert (d.step, d.kind) == (0, "logits")
    loc = d.located
    assert (loc.layer, loc.op_type, loc.module, loc.node) == (1, "MatMul", "model.layers.1.mlp.up",
                                                              "/model/layers.1/mlp/up/MatMul")


def test_precision_fault(clean, tmp_path):
    _, d = _first(_fault(tmp_path, "precision", fault_layer=2), clean)
    assert (d.step, d.kind) == (0, "logits")
    assert (d.located.layer, d.located.op_type) == (2, "Cast")
    assert d.located.max_abs_diff < 1e-2  # rounding to fp16, not a gross error


def _greedy(path, prompt, steps):
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    io = discover(__import__("onnx").load(path))
    tokens, cache, out = list(prompt), None, []
    for step in range(steps):
        res = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, step_feed(io, tokens, cache))))
        tokens = [int(np.argmax(last_logits(io, res)))]
        cache = cache_of(io, res, len(prompt) + step)
        out.append(tokens[0])
    return out


def test_embedding_row_fault_shows_when_its_token_is_fed(clean, tmp_path):
    generated = _greedy(clean, PROMPT, 12)
    j = next(k for k, t in enumerate(generated) if t not in PROMPT and t not in generated[:k])
    _, d = _first(_fault(tmp_path, "embedding_row", token=generated[j]), clean)
    assert (d.step, d.kind) == (j + 1, "logits")  # the token generated at step j is fed at step j + 1
    assert d.located.layer is None and d.located.module == "model.embed_tokens"
    assert d.generated == generated[: j + 1]


def test_module_from_torch_name_scopes(clean, tmp_path):
    # node names say nothing; the exporter's metadata says the module
    import onnx

    model = build_decoder(fault="weight", fault_layer=1, scopes=True)
    for k, node in enumerate(model.graph.node):
        node.name = f"node_{k}"
    path = str(tmp_path / "scoped.onnx")
    onnx.save(model, path)
    _, d = _first(path, clean)
    assert (d.located.module, d.located.layer) == ("model.layers.1.mlp.up", 1)


def test_free_run_keeps_each_side_cache(clean, tmp_path):
    # a cache-write fault only shows in the logits once the test side reads its own cache
    path = _fault(tmp_path, "cache_write", fault_layer=2)
    _, d = _first(path, clean, free_run=True, tolerances=Tolerances.parse(["present.2.key:10"], ["present.2.key:10"]))
    assert (d.step, d.kind) == (1, "logits")
    _, d = _first(path, clean, tolerances=Tolerances.parse(["present.2.key:10"], ["present.2.key:10"]))
    assert d is None  # teacher forced, the reference's cache hides it


def test_fp16_cache_model_against_the_fp32_one(clean, tmp_path):
    # the reference's float32 cache is fed to the fp16-cache model rounded; at fp16's tolerance they agree
    from onnx import TensorProto

    path = str(tmp_path / "fp16cache.onnx")
    build_decoder(path, cache_dtype=TensorProto.FLOAT16)
    out, d = _first(path, clean, steps=8, tolerances=Tolerances.parse(["1e-2"], ["1e-2"]))
    assert d is None and out.steps_checked == 8
    _, d = _first(path, clean, steps=8)
    assert (d.step, d.kind) == (0, "logits") and d.located.tensor == "present.0.key"  # stored in fp16


def test_a_failed_layerwise_pass_keeps_the_divergence(clean, tmp_path, monkeypatch):
    from toolkit.core.errors import InferenceError
    from toolkit.llm import session

    def fails(*_a, **_k):
        raise InferenceError("marked model cannot run")

    monkeypatch.setattr(session, "every_tensor_once", fails)
    _, d = _first(_fault(tmp_path, "weight", fault_layer=1), clean)
    assert (d.step, d.kind, d.located) == (0, "logits", None) and "cannot run" in d.localize_error


def test_models_of_other_names_are_matched_by_position(tmp_path):
    # the reference names its tensors otherwise (another exporter): tensors pair by their place
    import onnx

    ref = build_decoder()
    io_names = {vi.name for vi in list(ref.graph.input) + list(ref.graph.output)}
    renamed = {o: f"t{k}" for k, node in enumerate(ref.graph.node) for o in node.output if o not in io_names}
    for node in ref.graph.node:
        node.input[:] = [renamed.get(i, i) for i in node.input]
        node.output[:] = [renamed.get(o, o) for o in node.output]
    ref_path = str(tmp_path / "ref.onnx")
    onnx.save(ref, ref_path)
    _, d = _first(_fault(tmp_path, "weight", fault_layer=1), ref_path)
    loc = d.located
    assert (d.step, loc.matched_by, loc.tensor, loc.layer) == (0, "position", "/model/layers.1/mlp/up/out", 1)


def test_models_of_other_structure_pair_module_by_module(tmp_path):
    # another exporter: other names, and a module decomposed otherwise; pairing by op order over the
    # whole graph would pair unrelated tensors, module by module pairs only like with like
    import onnx
    import onnx.numpy_helper
    from onnx import helper

    ref = build_decoder()
    io_names = {vi.name for vi in list(ref.graph.input) + list(ref.graph.output)}
    renamed = {o: f"t{k}" for k, node in enumerate(ref.graph.node) for o in node.output if o not in io_names}
    for node in ref.graph.node:
        node.input[:] = [renamed.get(i, i) for i in node.input]
        node.output[:] = [renamed.get(o, o) for o in node.output]
    first = ref.graph.node[0]  # the embedding's Gather, then an Add of zero of its own (Adds shift by one)
    first.output[0], old = "gathered", first.output[0]
    ref.graph.initializer.append(onnx.numpy_helper.from_array(np.zeros(1, np.float32), "zero"))
    ref.graph.node.insert(1, helper.make_node("Add", ["gathered", "zero"], [old], name="/model/embed_tokens/Add"))
    ref_path = str(tmp_path / "ref.onnx")
    onnx.save(ref, ref_path)
    _, d = _first(_fault(tmp_path, "weight", fault_layer=1), ref_path)
    loc = d.located
    assert (loc.matched_by, loc.tensor, loc.layer) == ("module position", "/model/layers.1/mlp/up/out", 1)


@pytest.mark.parametrize("free_run, checked", [(False, 8), (True, 3)])
def test_a_near_tie_is_counted_not_a_divergence(clean, monkeypatch, free_run, checked):
    # a flip within the tolerances at step 2: counted; teacher forced goes on, a free run parts there
    from toolkit.llm import session

    real = session.compare_step

    def flips(*args):
        res = real(*args)
        if flips.calls == 2:
            res.test_token, res.margin, res.difference = res.reference_token + 1, 1e-6, 2e-6
        flips.calls += 1
        return res

    flips.calls = 0
    monkeypatch.setattr(session, "compare_step", flips)
    out = LlmDebugger(LlmConfig(clean, prompts=[PROMPT], steps=8, free_run=free_run)).run()
    assert out.first_divergence is None and out.steps_checked == checked
    assert [(t.step, t.margin) for t in out.near_ties] == [(2, 1e-6)]

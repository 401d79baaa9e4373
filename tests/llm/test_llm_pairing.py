"""debug llm across two model files whose tensors are named differently: nodes pair by the
weights they read, then by place; the reduce command is printed only when it is sound."""

import onnx
from llm_decoders import build_decoder

from toolkit.llm.session import LlmConfig, LlmDebugger

PROMPT = [1, 2, 3, 4]


def _renamed(path, swap_layer0_kv: bool):
    """The weight fault in layer 2, every tensor and node renamed (weights and I/O kept), and
    optionally layer 0's k_proj and v_proj nodes in swapped order."""
    m = build_decoder(fault="weight", fault_layer=2)
    keep = {x.name for x in m.graph.input} | {x.name for x in m.graph.output} | {x.name for x in m.graph.initializer}
    table = {}

    def ren(s):
        return s if (s in keep or s == "") else table.setdefault(s, f"T_{len(table)}")
    for n in m.graph.node:
        n.input[:] = [ren(x) for x in n.input]
        n.output[:] = [ren(x) for x in n.output]
        n.name = "n_" + ren(n.name)
    nodes = list(m.graph.node)
    if swap_layer0_kv:
        ik = next(i for i, n in enumerate(nodes) if "l0.wk" in n.input)
        iv = next(i for i, n in enumerate(nodes) if "l0.wv" in n.input)
        nodes[ik], nodes[iv] = nodes[iv], nodes[ik]
    del m.graph.node[:]
    m.graph.node.extend(nodes)
    onnx.checker.check_model(m)
    onnx.save(m, path)
    return path


def _run(model, reference, **kw):
    cfg = LlmConfig(model, reference_model=reference, prompts=[PROMPT], steps=4, **kw)
    return LlmDebugger(cfg).run().first_divergence


def test_swapped_nodes_pair_by_their_weights_and_name_the_faulty_layer(tmp_path):
    ref = str(tmp_path / "clean.onnx")
    build_decoder(ref)
    test = _renamed(str(tmp_path / "swapped.onnx"), swap_layer0_kv=True)
    d = _run(test, ref)
    assert d is not None and d.located is not None
    assert d.located.layer == 2, d.located
    assert d.located.op_type == "MatMul"
    assert d.located.module is not None and "layers.2" in d.located.module


def test_no_reduce_command_when_the_reference_names_its_tensors_differently(tmp_path):
    ref = str(tmp_path / "clean.onnx")
    build_decoder(ref)
    test = _renamed(str(tmp_path / "renamed.onnx"), swap_layer0_kv=False)
    d = _run(test, ref, save_step_inputs=str(tmp_path / "step.json"))
    assert d is not None and d.saved_inputs
    assert d.reduce_command is None
    assert "by name" in d.reduce_note and "no --reference-model" in d.reduce_note


def test_reduce_command_when_both_models_share_the_names(tmp_path):
    ref = str(tmp_path / "clean.onnx")
    build_decoder(ref)
    test = str(tmp_path / "weight.onnx")
    build_decoder(test, fault="weight", fault_layer=2)
    d = _run(test, ref, save_step_inputs=str(tmp_path / "step.json"))
    assert d is not None and d.reduce_note is None
    assert "--reference-model" in d.reduce_command


def test_names_with_control_and_bidi_characters_are_printed_escaped(cli, tmp_path):
    ref = str(tmp_path / "clean.onnx")
    build_decoder(ref)
    m = build_decoder(fault="weight", fault_layer=2)
    for n in m.graph.node:
        if n.name.endswith("up/MatMul") and "layers.2" in n.name:
            n.name = "/model/layers.2/mlp\\nfake line\u202e/MatMul\n[Op: Evil]"
    test = str(tmp_path / "esc.onnx")
    onnx.save(m, test)
    r = cli("debug", "llm", test, "--reference-model", ref, "--prompt-ids", "1 2 3 4", "--steps", "2")
    assert r.code == 1, r.err
    line = next(x for x in r.err.splitlines() if "first diverging tensor" in x)
    assert "\\u202e" in line and "\\n[Op: Evil]" in line
    assert "\u202e" not in r.err and not any(x.startswith("[Op: Evil]") for x in r.err.splitlines())


def test_only_weights_anchor_a_pairing_not_small_constants():
    from toolkit.llm.localize import _weights

    m = build_decoder()
    kept = _weights(m)
    assert "l0.wk" in kept and "lm_head.weight" in kept
    assert all(len(t.dims) >= 2 for t in m.graph.initializer if t.name in kept)
    assert any(t.name not in kept for t in m.graph.initializer)  # shapes and scalars are left out


def test_no_reduce_command_unlocalized_when_most_names_differ(tmp_path):
    ref = str(tmp_path / "clean.onnx")
    build_decoder(ref)
    test = _renamed(str(tmp_path / "renamed.onnx"), swap_layer0_kv=False)
    d = _run(test, ref, save_step_inputs=str(tmp_path / "step.json"), localize=False)
    assert d is not None and d.reduce_command is None and "by name" in d.reduce_note

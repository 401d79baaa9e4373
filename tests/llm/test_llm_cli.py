"""toolkit debug llm on the command line: the record, exit codes, the step's inputs file, prompts."""

import json
import subprocess
import sys

import onnxruntime as ort
import pytest
from llm_decoders import build_decoder

from toolkit.core.io.datafiles import load_inputs
from toolkit.llm.session import LlmConfig, LlmDebugger, Reporter


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    folder = tmp_path_factory.mktemp("llmcli")
    clean, bad = str(folder / "clean.onnx"), str(folder / "bad.onnx")
    build_decoder(clean)
    build_decoder(bad, fault="kv_threshold", fault_layer=1, threshold=7)
    return clean, bad


def test_json_record_exit_1_and_step_inputs(cli, models, tmp_path):
    clean, bad = models
    step_file = str(tmp_path / "step.json")
    r = cli("debug", "llm", bad, "--reference-model", clean, "--prompt-ids", "1 2 3", "--prompt-ids", "5 6",
            "--steps", "8", "--save-step-inputs", step_file, "--json")
    assert r.code == 1, r.err
    rec = json.loads(r.out)
    d = rec["first_divergence"]
    assert (d["prompt"], d["step"], d["kind"], d["layer"], d["op_type"]) == (0, 4, "logits", 1, "Mul")
    assert d["tensor"] == "/model/layers.1/self_attn/scores" and d["module"] == "model.layers.1.self_attn.fault"
    assert d["max_abs_diff"] > 1e-3 and rec["steps_checked"] == 5 and rec["near_ties"] == []
    assert "toolkit debug reduce" in r.err and "--load-inputs" in d["reduce_command"]
    # the inputs file replays the step: the two models part on it, as reported
    feed = load_inputs(step_file)[0]
    outs = [dict(zip(["logits"], ort.InferenceSession(p).run(["logits"], dict(feed)))) for p in (bad, clean)]
    assert abs(outs[0]["logits"] - outs[1]["logits"]).max() == pytest.approx(d["max_abs_diff"], rel=1e-4)
    from polygraphy.json import load_json

    assert set(load_json(step_file)[0]) == set(feed)


def test_no_divergence_is_exit_0_with_prompts_file(cli, models, tmp_path):
    clean, _ = models
    prompts = tmp_path / "prompts.json"
    prompts.write_text("[[1, 2], [3]]")
    r = cli("debug", "llm", clean, "--compare", "onnxrt", "onnxrt:opt=disable", "--prompts", str(prompts),
            "--steps", "5", "--json")
    assert r.code == 0, r.err
    rec = json.loads(r.out)
    assert rec["first_divergence"] is None and rec["steps_checked"] == 10 and "No divergence" in r.err


def test_bad_input_is_one_error_line_exit_3(cli, models, tmp_path):
    clean, _ = models
    r = cli("debug", "llm", "/nonexistent.onnx")
    assert r.code == 3
    prompts = tmp_path / "p.json"
    prompts.write_text('{"a": 1}')
    r = cli("debug", "llm", clean, "--prompts", str(prompts))
    assert r.code == 3 and r.err.count("error:") == 1 and "token-id lists" in r.err
    r = cli("debug", "llm", clean, "--prompt-ids", "1 999")
    assert r.code == 3 and "outside the vocabulary" in r.err
    r = cli("debug", "llm", clean, "--prompt", "hello")
    assert r.code == 2 and "--tokenizer" in r.err


def test_not_a_decoder_exits_3_before_any_work(tmp_path):
    from onnx import TensorProto, helper, save

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    save(helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x],
                                             [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])]),
                           ir_version=10), str(tmp_path / "relu.onnx"))
    p = subprocess.run([sys.executable, "-m", "toolkit", "debug", "llm", str(tmp_path / "relu.onnx")],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 3 and p.stdout == ""
    assert p.stderr.strip().count("\n") == 0 and p.stderr.startswith("error:") and "input_ids" in p.stderr


def test_tokenizer_without_transformers_is_exit_4(cli, models, monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)
    r = cli("debug", "llm", models[0], "--tokenizer", "tok", "--prompt", "hello")
    assert r.code == 4 and "pip install transformers" in r.err


def test_interrupt_keeps_what_was_found(models):
    class Stop(Reporter):
        def step(self, prompt, step, result):
            if step == 2:
                raise KeyboardInterrupt

    out = LlmDebugger(LlmConfig(models[0], prompts=[[1, 2]], steps=10), Stop()).run()
    assert out.interrupted and out.steps_checked == 3 and out.first_divergence is None


def test_prompts_as_text_through_a_tokenizer_folder(cli, models, tmp_path):
    pytest.importorskip("transformers")
    tokenizers = pytest.importorskip("tokenizers")
    from transformers import PreTrainedTokenizerFast

    vocab = {w: i for i, w in enumerate(["[UNK]", "hello", "world", "the", "cat"])}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]").save_pretrained(str(tmp_path / "tok"))
    r = cli("debug", "llm", models[1], "--reference-model", models[0], "--tokenizer", str(tmp_path / "tok"),
            "--prompt", "hello the cat", "--steps", "6", "--json")
    d = json.loads(r.out)["first_divergence"]
    assert r.code == 1 and d["prompt_ids"] == [1, 3, 4] and d["step"] == 4  # 3 + 4 = the threshold of 7
    r = cli("debug", "llm", models[0], "--tokenizer", str(tmp_path / "none"), "--prompt", "hello")
    assert r.code == 3 and "no such folder" in r.err


def test_a_runtime_failure_names_its_prompt_and_step(cli, tmp_path):
    path = str(tmp_path / "short.onnx")
    build_decoder(path, max_pos=8)  # position 8 is out of the position table: step 5 of a 4-token prompt
    r = cli("debug", "llm", path, "--prompt-ids", "1 2 3 4", "--steps", "8", "--json")
    # the reference failing is no divergence (exit 1): bad input, nothing on stdout
    assert r.code == 3 and r.err.count("error:") == 1 and r.out.strip() == ""
    assert "prompt 0, step 5 (cache length 8)" in r.err


def test_nan_in_the_test_side_is_a_divergence_in_strict_json(cli, models, tmp_path):
    # the test model's logits are NaN from step 0: a divergence, and the record stays valid JSON
    import numpy as np
    import onnx
    from onnx import numpy_helper

    m = onnx.load(models[0])
    for t in m.graph.initializer:
        if t.name == "lm_head.weight":
            t.CopyFrom(numpy_helper.from_array(np.full(numpy_helper.to_array(t).shape, np.nan, np.float32), t.name))
    path = str(tmp_path / "nan.onnx")
    onnx.save(m, path)
    r = cli("debug", "llm", path, "--reference-model", models[0], "--prompt-ids", "1 2", "--steps", "3", "--json")
    assert r.code == 1, r.err
    d = json.loads(r.out)["first_divergence"]
    assert (d["step"], d["kind"], d["tensor"]) == (0, "logits", "logits")


def test_no_prompt_is_a_usage_error_not_a_pass(models):
    from toolkit.core.errors import UsageError

    with pytest.raises(UsageError, match="no prompts"):
        LlmDebugger(LlmConfig(models[0], samples=0)).run()


@pytest.mark.parametrize("option", [("--atol", "nosuch:1"), ("--rtol", "logitz:0.1")])
def test_a_tolerance_for_no_tensor_is_a_usage_error(cli, models, option):
    clean, bad = models
    r = cli("debug", "llm", bad, "--reference-model", clean, "--prompt-ids", "1 2", "--steps", "2", *option)
    assert r.code == 2 and f"{option[0]} names '{option[1].split(':')[0]}'" in r.err, r.err
    ok = cli("debug", "llm", bad, "--reference-model", clean, "--prompt-ids", "1 2", "--steps", "2",
             "--atol", "logits:1e-3")
    assert ok.code in (0, 1), ok.err


def test_an_omitted_optional_output_is_no_tensor_a_tolerance_can_name(cli, tmp_path):
    """A node's omitted optional output ('') is no tensor: a tolerance for '' is refused, and the
    tensors listed are names."""
    import onnx
    from onnx import helper

    model = build_decoder()
    head = next(n for n in model.graph.node if n.output[0] == "logits")
    head.output[0] = "logits_raw"
    model.graph.node.append(helper.make_node("Dropout", ["logits_raw"], ["logits", ""], name="/lm_head/Dropout"))
    path = str(tmp_path / "dropout.onnx")
    onnx.save(model, path)
    args = ("debug", "llm", path, "--prompt-ids", "1 2", "--steps", "2")
    assert cli(*args).code == 0
    r = cli(*args, "--atol", ":1e-3")
    assert r.code == 2 and "--atol names ''" in r.err, r.err
    r = cli(*args, "--atol", "nosuch:1")
    assert r.code == 2 and "are: /" in r.err and ", ," not in r.err, r.err

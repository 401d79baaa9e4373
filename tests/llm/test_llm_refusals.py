"""Decoders debug llm cannot step are refused up front (exit 3, one error line, nothing on stdout);
a runner failing at run time is never reported as a divergence (exit 1)."""

import onnx
import pytest
from llm_decoders import build_decoder
from onnx import helper

from toolkit.core.errors import InferenceError
from toolkit.llm import session


def _refused(cli, path):
    r = cli("debug", "llm", path, "--prompt-ids", "1 2 3", "--steps", "3", "--json")
    assert r.code == 3, r.err
    assert r.out.strip() == ""
    errors = [x for x in r.err.splitlines() if x.startswith("error:")]
    assert len(errors) == 1
    return errors[0]


def test_static_input_ids_of_length_one_is_refused(cli, tmp_path):
    m = build_decoder()
    ids = next(i for i in m.graph.input if i.name == "input_ids")
    ids.type.tensor_type.shape.dim[1].Clear()
    ids.type.tensor_type.shape.dim[1].dim_value = 1
    path = str(tmp_path / "onetok.onnx")
    onnx.save(m, path)
    assert "sequence length must be dynamic" in _refused(cli, path)


def test_present_outputs_of_only_the_new_keys_are_refused(cli, tmp_path):
    m = build_decoder()
    for n in m.graph.node:
        if n.op_type == "Concat" and n.output[0].startswith("present."):
            n.CopyFrom(helper.make_node("Identity", [n.input[1]], list(n.output), name=n.name))
    path = str(tmp_path / "noconcat.onnx")
    onnx.save(m, path)
    assert "growing cache" in _refused(cli, path)


def test_a_runner_failing_at_run_time_is_bad_input_not_a_divergence():
    class Failing:
        def infer(self, feed):
            raise InferenceError("reference: inference failed: boom")

    with pytest.raises(InferenceError) as caught:
        session._infer(Failing(), {}, 0, 3)
    assert caught.value.exit_code == 3 and "step 3" in caught.value.message


def test_a_model_from_stdin_is_a_usage_error(cli, tmp_path):
    path = str(tmp_path / "clean.onnx")
    build_decoder(path)
    for args in (["-"], [path, "--reference-model", "-"]):
        r = cli("debug", "llm", *args, "--prompt-ids", "1 2", "--steps", "2")
        assert r.code == 2, r.err
        assert "stdin" in r.err and "file" in r.err and r.err.count("error:") == 1

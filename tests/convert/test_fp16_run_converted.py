"""``run MODEL --fp16 --onnx-outputs mark all`` on models ``convert`` wrote: the emulated copy loads
(every marked fp16 tensor also read inside the graph), and a copy that does not load is said to be
toolkit's, never the user's file."""

from __future__ import annotations

import pytest

import fp16_models as fm
import modelzoo as mz

MODELS = {
    "layernorm_overflow": fm.layernorm_overflow,
    "shape_resize": fm.shape_resize,
    "if_loop": fm.if_loop,
    "shared_and_kept_output": fm.shared_and_kept_output,
    "offset_cancellation": fm.offset_cancellation,
    "int_cast_of_a_kept_output": fm.int_cast_of_a_kept_output,
    "seed_example": lambda: mz.seed_example((1, 3, 8, 8)),
    "with_if": mz.with_if,
}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_marked_fp16_run_of_a_converted_model(cli, tmp_path, name):
    src = mz.save(MODELS[name](), tmp_path / "m.onnx")
    out = tmp_path / "c.onnx"
    assert cli("convert", src, "--fp-to-fp16", "-o", out, "--no-validate").code == 0
    res = cli("run", out, "--onnxrt", "--fp16", "--onnx-outputs", "mark", "all", "--atol", "1e9", "--rtol", "1e9")
    assert res.code in (0, 1), res.err
    assert "cannot load" not in res.err and "Comparing onnxrt-runner vs onnxrt:fp16" in res.err


def test_a_refused_emulated_copy_is_toolkits_bug(cli, tmp_path, monkeypatch):
    """The emulation made an invalid copy of a model that loads: exit 70, naming toolkit's copy."""
    from toolkit.backends import onnxrt
    from toolkit.core.graph.layerwise import set_outputs

    def broken(self, model):  # a copy whose node reads a tensor nothing makes
        copy = type(model)()
        copy.CopyFrom(model)
        copy.graph.node[0].input[0] = "nowhere"
        set_outputs(copy, [o.name for o in copy.graph.output])
        return copy

    monkeypatch.setattr(onnxrt.OnnxrtRunner, "_emulated", broken)
    src = mz.save(fm.offset_cancellation(), tmp_path / "m.onnx")
    res = cli("run", src, "--onnxrt", "--fp16")
    assert res.code == 70, res.err
    assert "toolkit's fp16-emulated copy" in res.err and "bug in toolkit" in res.err

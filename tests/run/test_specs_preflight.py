"""Runner specs, providers, devices and files named by `debug reduce --compare` and `debug precision
--compare` are checked before the model is loaded or anything is computed."""

from __future__ import annotations

import numpy as np
import onnxruntime
import pytest

pytestmark = pytest.mark.skipif(
    "CUDAExecutionProvider" in onnxruntime.get_available_providers(), reason="this onnxruntime has the CUDA provider"
)


def _garbage(path) -> str:
    """Not a model: a command that loads it exits 3, so exit 4 proves nothing was loaded."""
    path.write_bytes(np.arange(64, dtype=np.uint8).tobytes())
    return str(path)


def _one_error_line(res, code: int, text: str) -> None:
    assert res.code == code, res.err
    lines = [line for line in res.err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and text in lines[0], res.err


@pytest.mark.parametrize("compare", [["onnxrt", "onnxrt:providers=cuda"], ["onnxrt:providers=cuda", "onnxrt"]])
def test_reduce_compare_refuses_a_missing_provider_before_loading(cli, tmp_path, compare):
    out = tmp_path / "out.onnx"
    res = cli("debug", "reduce", _garbage(tmp_path / "m.onnx"), "--compare", *compare, "-o", out)
    _one_error_line(res, 4, "execution provider 'cuda' is not available")
    assert not out.exists()


def test_reduce_compare_refuses_a_missing_reference_model_first(cli, tmp_path):
    res = cli("debug", "reduce", _garbage(tmp_path / "m.onnx"), "--compare", "onnxrt", "onnxrt",
              "--reference-model", tmp_path / "nosuch.onnx", "-o", tmp_path / "out.onnx")
    _one_error_line(res, 3, "nosuch.onnx: no such file")


def test_precision_refuses_a_reference_on_a_missing_provider(cli, tmp_path):
    """The reference's providers were ignored (it ran on the CPU): now they are checked, and used."""
    res = cli("debug", "precision", _garbage(tmp_path / "m.onnx"), "--compare", "onnxrt:providers=cuda", "onnxrt:fp16",
              "-o", tmp_path / "out.onnx")
    _one_error_line(res, 4, "execution provider 'cuda' is not available")


def test_preflight_specs_names_a_bad_option(tmp_path):
    from toolkit.core.errors import UsageError
    from toolkit.run.specs import preflight_specs

    with pytest.raises(UsageError, match="has no option 'bogus'"):
        preflight_specs(["onnxrt", "onnxrt:bogus=1"], str(tmp_path / "m.onnx"))


@pytest.mark.parametrize("command", [
    ["debug", "precision", "{model}", "--load-inputs", "{missing}", "-o", "{out}"],
    ["debug", "precision", "{model}", "--load-outputs", "{missing}", "-o", "{out}"],
    ["convert", "{model}", "--fp-to-fp16", "--load-inputs", "{missing}", "-o", "{out}"],
])
def test_a_missing_data_file_is_said_before_the_model_is_loaded(cli, tmp_path, command):
    values = {"model": _garbage(tmp_path / "m.onnx"), "missing": str(tmp_path / "nosuch.json"),
              "out": str(tmp_path / "out.onnx")}
    res = cli(*[word.format(**values) for word in command])
    _one_error_line(res, 3, "nosuch.json: no such file")
    assert not (tmp_path / "out.onnx").exists()

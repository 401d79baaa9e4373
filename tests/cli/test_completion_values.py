"""Shell completion of multi-value options: the second runner spec after `--compare onnxrt `,
`mark` then `all` after `--onnx-outputs` (Click alone completes one value per option)."""

import os
import shlex
import subprocess
import sys

import pytest

from conftest import REPO


def complete(line: str, cwd) -> list:
    """What bash completion offers for ``line`` (a trailing space: a new word)."""
    words = shlex.split(line)
    cword = len(words) if line.endswith(" ") else len(words) - 1
    env = dict(os.environ, _TOOLKIT_COMPLETE="complete_bash", COMP_WORDS=line, COMP_CWORD=str(cword),
               PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-m", "toolkit"], env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0 and not proc.stderr, proc.stderr
    return proc.stdout.split()


@pytest.mark.parametrize("line", [
    "toolkit debug precision m.onnx --compare onnxrt ",
    "toolkit debug reduce m.onnx -o r.onnx --compare onnxrt ",
    "toolkit run m.onnx --runners onnxrt ",
])
def test_every_value_of_a_runner_spec_option_completes(tmp_path, line):
    offered = complete(line, tmp_path)
    assert {"onnxrt", "onnxrt:fp16", "onnxrt:opt=disable", "trt:fp16", "openvino"} <= set(offered), offered
    assert complete(line + "trt:f", tmp_path) == ["trt:fp16"]


def test_the_first_runner_spec_still_completes(tmp_path):
    assert "onnxrt:fp16" in complete("toolkit debug precision m.onnx --compare ", tmp_path)


def test_onnx_outputs_completes_mark_then_all(tmp_path):
    assert complete("toolkit run m.onnx --onnxrt --onnx-outputs ", tmp_path) == ["mark"]
    assert complete("toolkit run m.onnx --onnxrt --onnx-outputs mark ", tmp_path) == ["all"]
    assert complete("toolkit run m.onnx --onnxrt --onnx-outputs mark a", tmp_path) == ["all"]
    assert complete("toolkit run m.onnx --onnx-outputs mark all ", tmp_path) == []
    assert "--onnxrt" in complete("toolkit run m.onnx --onnx-outputs mark all --onnx", tmp_path)


def test_an_option_without_its_value_yet_is_no_error_while_completing(tmp_path):
    assert complete("toolkit run m.onnx --load-inputs --onn", tmp_path)[:1] == ["--onnxrt"]

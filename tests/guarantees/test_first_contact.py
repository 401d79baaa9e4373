"""What a new user trips over: -qq, the seed in -v, a mistyped shape, abbreviated options, shell
completion of choice values, the exit code of an internal error, docs that read as one text."""

import os
import pathlib
import re
import subprocess
import sys

import onnx
import pytest
from onnx import TensorProto, helper

from conftest import REPO as _REPO

REPO = pathlib.Path(_REPO)


@pytest.fixture
def model(tmp_path):
    node = helper.make_node("Relu", ["x"], ["y"])
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    path = tmp_path / "m.onnx"
    onnx.save(m, str(path))
    return str(path)


def test_qq_prints_only_errors(cli, model):
    assert cli("run", model, "--onnxrt", "--input-shapes", "x:2x3", "-qq").err == ""
    assert "PASSED | Command:" in cli("run", model, "--onnxrt", "--input-shapes", "x:2x3", "-q").err


def test_verbose_names_the_seed_used(cli, model):
    err = cli("run", model, "--onnxrt", "-v").err
    assert "seed random" not in err
    assert re.search(r"generated inputs: 1 iteration\(s\), seed 1 \(the default\)", err), err
    assert "seed 7," in cli("run", model, "--onnxrt", "-v", "--seed", "7").err


def test_a_mistyped_dimension_is_named(cli, model):
    res = cli("run", model, "--onnxrt", "--input-shapes", "x:1x3x64Ox640")
    assert res.code == 2
    assert "dimension 3 of the shape, '64O', is not a number" in res.err
    assert "x:1x3x640x640" in res.err and "needs a shape" not in res.err


def test_unambiguous_prefixes_of_long_options(cli, model, tmp_path):
    res = cli("run", model, "--onnxrt", "--input-sh", "x:2x3", "--iter", "2", "-v")
    assert res.code == 0, res.err
    assert "2 iteration(s)" in res.err
    out = tmp_path / "f.onnx"
    assert cli("surgeon", "sanitize", model, "--fold-constant", "-o", out).code == 0 and out.exists()


def test_an_ambiguous_prefix_is_a_usage_error_naming_the_candidates(cli, model):
    res = cli("run", model, "--onnxrt", "--save", "x.json")
    assert res.code == 2
    assert "ambiguous option --save" in res.err and "--save-inputs" in res.err and "--save-outputs" in res.err


def test_options_after_check_are_left_to_the_check():
    from toolkit.cli.app import get_command
    from toolkit.cli.grammar import expand_prefixes

    params = get_command("debug").commands["debug"].commands["reduce"].params
    args = ["m.onnx", "-o", "r.onnx", "--check", "toolkit", "run", "--iter", "2"]
    assert expand_prefixes(args, params) == args


def _complete(words: str) -> list:
    env = dict(os.environ, _TOOLKIT_COMPLETE="complete_bash", COMP_WORDS=words,
               COMP_CWORD=str(len(words.split()) - 1), PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-m", "toolkit"], env=env, capture_output=True, text=True, timeout=60)
    return proc.stdout.split()


@pytest.mark.parametrize("words, expected", [
    ("toolkit run m.onnx --check-error-stat me", ["mean", "median"]),
    ("toolkit run m.onnx --providers cu", ["cuda"]),
    ("toolkit debug reduce m.onnx --mode l", ["linear"]),
    ("toolkit debug precision m.onnx --compare trt:", ["trt:fp16", "trt:bf16", "trt:int8", "trt:tf32"]),
    ("toolkit debug reduce m.onnx --compare onnxrt:opt", ["onnxrt:opt=disable", "onnxrt:opt=basic",
                                                         "onnxrt:opt=extended", "onnxrt:opt=all"]),
])
def test_shell_completion_completes_choice_values(words, expected):
    assert _complete(words) == expected


def test_an_internal_error_exits_70_not_3(cli, model, monkeypatch):
    def broken(*args, **kwargs):
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr("toolkit.run.execute", broken)
    res = cli("run", model, "--onnxrt")
    assert res.code == 70
    assert res.err.startswith("error: unexpected ZeroDivisionError") and "bug in toolkit" in res.err
    readme = (REPO / "README.md").read_text()
    assert re.search(r"^\| 70 \| an internal error", readme, re.M)


def test_code_fences_close_on_lines_of_their_own():
    for page in sorted((REPO / "docs").glob("*.md")) + [REPO / "README.md"]:
        lines = page.read_text().splitlines()
        opened = False
        for k, line in enumerate(lines, 1):
            if line.lstrip().startswith("```"):
                rest = line.lstrip()[3:]
                if opened:
                    assert rest.strip() == "", f"{page.name}:{k}: text after a closing fence"
                opened = not opened
        assert not opened, f"{page.name}: a code fence is never closed"


def test_run_doc_says_one_thing_about_casting_loaded_inputs():
    text = (REPO / "docs" / "run.md").read_text()
    assert "Nothing is ever cast" not in text
    assert "are cast, with one" in text

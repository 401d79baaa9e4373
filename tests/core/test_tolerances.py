"""Tolerances are parsed once, without numpy, and carried typed to every comparison."""

import subprocess
import sys

from toolkit.core.compare.tolerances import Tolerances


def test_the_command_line_builds_tolerances_without_numpy():
    code = ("import sys; from toolkit.core.compare.tolerances import Tolerances; Tolerances.parse(['1e-3', 'y:2'], ['0']); "
            "print('numpy' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_spelled_tolerances_parse_back_to_the_same_value():
    tol = Tolerances.parse(["1e-3", "y:0.5"], ["2e-2", "z:1e-7"], ["max", "y:mean"])
    words = tol.spelled()
    assert words[0] == "--atol" and "--rtol" in words and "--check-error-stat" in words
    at, rt, st = words.index("--atol"), words.index("--rtol"), words.index("--check-error-stat")
    assert Tolerances.parse(words[at + 1:rt], words[rt + 1:st], words[st + 1:]) == tol
    assert Tolerances().spelled() == []


def test_reduce_compare_hands_its_checks_the_typed_tolerances(tmp_path):
    from toolkit.reduce.accuracy import CompareOptions, Reference, describe_check, run_options

    tol = Tolerances.parse(["1e-2"], ["y:1e-3"])
    opts = CompareOptions(reference="onnxrt", test="onnxrt", tolerances=tol)
    ref = Reference(str(tmp_path), "in.npz", "out.npz", "onnxrt")
    run = run_options("m.onnx", opts, ref)
    assert run.tolerances is tol and not run.atol and not run.rtol
    assert describe_check("m.onnx", opts)[-4:] == ["--atol", "0.01", "--rtol", "y:0.001"]

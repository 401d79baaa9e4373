"""One spelling: an option that means the same in several commands is spelled the same in all of them."""

import re
import subprocess
import sys

import pytest

from conftest import REPO

# flags that name different options in different commands, on purpose
DIFFERENT_MEANINGS = {
    "--compare": "run: the comparison function (Polygraphy's spelling); debug: the runners to compare",
    "--inputs": "surgeon extract: the subgraph's inputs; run, convert, debug precision: input shapes",
    "--shape-inference": "run: accepted and ignored (with --no-onnxruntime-shape-inference); inspect model: infer",
    "--do-shape-inference": "as --shape-inference",
    "--no-onnxruntime-shape-inference": "run: accepted and ignored; surgeon sanitize: no ONNX-Runtime fallback",
}
COMMANDS = [("run",), ("convert",), ("inspect", "model"), ("inspect", "data"), ("surgeon", "extract"),
            ("surgeon", "sanitize"), ("data", "to-input"), ("debug", "reduce"), ("debug", "precision")]
OPTION_LINE = re.compile(r"^\s{2,}((?:-{1,2}[\w-]+(?:, )?)+)")


def _flag_sets(command):
    text = subprocess.run([sys.executable, "-m", "toolkit", *command, "--help"], capture_output=True, text=True,
                          cwd=REPO, env={"COLUMNS": "100", "PATH": "", "PYTHONPATH": REPO}).stdout
    sets = [tuple(re.findall(r"-{1,2}[\w-]+", m.group(1))) for m in map(OPTION_LINE.match, text.splitlines()) if m]
    return {flag: flags for flags in sets for flag in flags}


def test_every_flag_has_the_same_aliases_in_every_command():
    seen = {}
    for command in COMMANDS:
        for flag, flags in _flag_sets(command).items():
            seen.setdefault(flag, {})[" ".join(command)] = set(flags) - set(DIFFERENT_MEANINGS)
    differ = {flag: by for flag, by in seen.items()
              if flag not in DIFFERENT_MEANINGS and len({frozenset(v) for v in by.values()}) > 1}
    assert not differ, differ


@pytest.mark.parametrize("flag", ["--input-shapes", "--model-input-shapes", "--model-inputs"])
def test_debug_reduce_takes_the_input_shapes_spellings(cli, monkeypatch, flag):
    import typer

    from toolkit.cli import debug

    seen = {}

    def capture(ctx, cfg, a):
        seen["config"] = cfg
        raise typer.Exit(0)

    monkeypatch.setattr(debug, "_reduce_command", capture)
    res = cli("debug", "reduce", "m.onnx", "-o", "r.onnx", "--compare", "onnxrt", flag, "x:[1,3]", "y:1x4")
    assert res.code == 0, res.err
    assert seen["config"].input_shapes == {"x": (1, 3), "y": (1, 4)}  # (parsed once, where it is declared)


@pytest.mark.parametrize("command", [("run", "m.onnx"), ("convert", "m.onnx", "-o", "c.onnx")])
def test_run_and_convert_take_the_model_input_shapes_spelling(cli, tmp_path, command):
    res = cli(*command, "--model-input-shapes", "x:[1,bad]")
    assert res.code == 2 and "No such option" not in res.err, res.err

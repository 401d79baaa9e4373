"""The recipe `convert MODEL --fp-to-fp16 $(debug precision MODEL --emit-options)` and `convert
--keep-fp32-from FILE`: both work whether the answer is some nodes or none (the usual answer)."""

import json

import fp16_models as fm
import modelzoo as mz


def test_emit_options_prints_one_option_line_or_nothing(cli, tmp_path):
    ln = mz.save(fm.layernorm_overflow(), tmp_path / "ln.onnx")
    r = cli("debug", "precision", ln, "--emit-options")
    assert r.code == 0, r.err
    assert r.out.strip() == "--keep-fp32 " + " ".join(fm.LN_MUST_KEEP)
    mixed = tmp_path / "mixed.onnx"
    r = cli("convert", ln, "--fp-to-fp16", *r.out.split(), "-o", mixed, "--no-validate", "--json")
    assert r.code == 0, r.err
    assert set(fm.LN_MUST_KEEP) <= set(json.loads(r.out)["kept_fp32"])

    small = mz.save(fm.layernorm_overflow(scale=1.0), tmp_path / "small.onnx")
    r = cli("debug", "precision", small, "--emit-options")
    assert r.code == 0 and r.out == "", r.out
    # the shell's $(...) of nothing: the command line stays whole
    r = cli("convert", small, "--fp-to-fp16", *r.out.split(), "-o", tmp_path / "all16.onnx", "--no-validate")
    assert r.code == 0, r.err


def test_the_old_recipe_with_an_empty_answer_names_the_option_without_a_value(cli, tmp_path):
    small = mz.save(fm.layernorm_overflow(scale=1.0), tmp_path / "small.onnx")
    r = cli("convert", small, "--fp-to-fp16", "--keep-fp32", "-o", tmp_path / "m.onnx")
    assert r.code == 2
    assert r.err.strip().splitlines()[-1] == "error: --keep-fp32 needs a value (-o is an option)"


def test_keep_fp32_from_a_file_of_names_or_an_empty_file(cli, tmp_path):
    ln = mz.save(fm.layernorm_overflow(), tmp_path / "ln.onnx")
    names = tmp_path / "keep.txt"
    r = cli("debug", "precision", ln)
    names.write_text(r.out)
    r = cli("convert", ln, "--fp-to-fp16", "--keep-fp32-from", names, "-o", tmp_path / "a.onnx", "--json",
            "--no-validate")
    assert r.code == 0, r.err
    assert set(fm.LN_MUST_KEEP) <= set(json.loads(r.out)["kept_fp32"])

    empty = tmp_path / "empty.txt"
    empty.write_text("# nothing needs fp32\n\n")
    r = cli("convert", ln, "--fp-to-fp16", "--keep-fp32-from", empty, "-o", tmp_path / "b.onnx", "--no-validate",
            "--json")
    assert r.code == 0, r.err
    assert not set(fm.LN_MUST_KEEP) & set(json.loads(r.out)["kept_fp32"])

    r = cli("convert", ln, "--fp-to-fp16", "--keep-fp32-from", tmp_path / "missing.txt", "-o", tmp_path / "c.onnx")
    assert r.code == 3 and "missing.txt" in r.err and not (tmp_path / "c.onnx").exists()
    names.write_text("nosuchnode\n")
    r = cli("convert", ln, "--fp-to-fp16", "--keep-fp32-from", names, "-o", tmp_path / "d.onnx")
    assert r.code == 3 and "nosuchnode" in r.err


def test_emit_options_refuses_names_the_shell_would_split(cli, tmp_path):
    model = fm.layernorm_overflow()
    renamed = {}
    for node in model.graph.node:
        if node.name in fm.LN_MUST_KEEP:
            renamed[node.name] = node.name + " x"
            node.name = renamed[node.name]
    path = mz.save(model, tmp_path / "spaced.onnx")
    r = cli("debug", "precision", path, "--emit-options")
    assert r.code == 3 and "--keep-fp32-from" in r.err and r.out == ""
    assert cli("debug", "precision", path, "--emit-options", "--json").code == 2


def test_emit_options_refuses_names_convert_would_read_as_options(cli, tmp_path):
    model = fm.layernorm_overflow()
    for node in model.graph.node:
        if node.name in fm.LN_MUST_KEEP:
            node.name = "-" + node.name
    path = mz.save(model, tmp_path / "dashed.onnx")
    r = cli("debug", "precision", path, "--emit-options")
    assert r.code == 3 and "starts with -" in r.err and "--keep-fp32-from" in r.err and r.out == ""

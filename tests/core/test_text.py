"""Names reach the terminal and the logs escaped: no escape sequence from a model acts, and
a newline in a name never forges a line (one line per node, always)."""

from __future__ import annotations

import modelzoo as z

from toolkit.core.text import escape_controls

EVIL = "n1\x1b]0;pwned\x07\x1b[2J\nNode 99   | fake [Op: Evil]"


def test_control_characters_become_visible_escapes():
    assert escape_controls("plain name\twith tab") == "plain name\twith tab"
    assert escape_controls(EVIL) == "n1\\x1b]0;pwned\\x07\\x1b[2J\\nNode 99   | fake [Op: Evil]"
    assert escape_controls("a\nb\x9bc", keep_newlines=True) == "a\nb\\x9bc"


def test_inspect_model_prints_one_line_per_node_whatever_the_name(cli, tmp_path):
    model = z.chain(3)
    model.graph.node[1].name = EVIL
    z.save(model, tmp_path / "m.onnx")
    res = cli("inspect", "model", str(tmp_path / "m.onnx"), "--mode=basic")
    assert res.code == 0, res.err
    assert "\x1b" not in res.out and "\x07" not in res.out
    node_lines = [line for line in res.out.splitlines() if line.lstrip().startswith("Node ")]
    assert len(node_lines) == 3 and "Node 99" not in "".join(line[:12] for line in node_lines)
    assert "| n1\\x1b]0;pwned\\x07\\x1b[2J\\nNode 99   | fake [Op: Evil] [Op: Sigmoid]" in res.out


def test_log_lines_carry_no_escape_sequence(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    model = z.chain(3)
    model.graph.node[1].name = EVIL
    z.save(model, tmp_path / "m.onnx")
    res = cli("surgeon", "extract", "m.onnx", "--outputs", "nope\x1b[2J", "-o", "out.onnx")
    assert res.code == 2 and "\x1b" not in res.err and "nope\\x1b[2J" in res.err, res.err


def test_a_lone_surrogate_is_shown_as_an_escape_any_encoding_can_write():
    shown = escape_controls("a\ud800b")
    assert shown == "a\\ud800b"
    shown.encode("utf-8")  # (the unescaped text raises UnicodeEncodeError here)


def test_inspect_data_of_a_name_with_a_lone_surrogate_is_no_bug(cli, tmp_path):
    import numpy as np

    from toolkit.core.io.datafiles import save_inputs

    save_inputs(str(tmp_path / "sur.json"), [{"\ud800": np.ones(2, np.float32)}])
    res = cli("inspect", "data", str(tmp_path / "sur.json"))
    assert res.code == 0 and "\\ud800" in res.out, res.err

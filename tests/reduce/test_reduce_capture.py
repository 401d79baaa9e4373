"""A check's output is streamed: bounded head and tail kept, --fail-regex searched as it
comes (across reads), so a check that prints hundreds of MB costs the reduce a few MB."""

from __future__ import annotations

import re
import sys

import modelzoo as z
from test_large_model import measure

from toolkit.reduce import capture
from toolkit.reduce.check import SubprocessRunner
from toolkit.reduce.verdict import FailureRule

MB = 1 << 20

LOUD_CHECK = '''
import sys, onnx
mb, culprit = int(sys.argv[2]), sys.argv[3]
names = [n.name for n in onnx.load(sys.argv[1]).graph.node]
line = b"x" * 1023 + b"\\n"
out = sys.stdout.buffer
for i in range(mb):
    out.write(line * 1024)
    if i == mb // 2 and culprit in names:
        out.write(b"... FAILS" + b"-" * 40 + b"HERE ...\\n")
'''


def test_a_pattern_split_across_reads_is_found_and_only_head_and_tail_are_kept(monkeypatch):
    monkeypatch.setattr(capture, "HEAD_BYTES", 10)
    monkeypatch.setattr(capture, "TAIL_BYTES", 10)
    s = capture.Stream([re.compile("FAIL-HERE"), re.compile("never")])
    for chunk in (b"0123456789abc", b"noise FAIL", b"-HE", b"RE and more", b"z" * 50, b"end of it"):
        s.add(chunk)
    assert s.found == {"FAIL-HERE"}
    assert s.total == 13 + 10 + 3 + 11 + 50 + 9
    value = s.value()
    assert value.startswith(b"0123456789\n[... ") and value.endswith(b"zend of it")
    assert f"{s.dropped} bytes of the check's output not kept".encode() in value


def test_a_match_in_the_middle_of_a_long_output_decides(tmp_path):
    (tmp_path / "loud.py").write_text(LOUD_CHECK)
    z.save(z.chain(2), tmp_path / "m.onnx")
    rule = FailureRule(fail_regex=["FAILS-+HERE"])
    runner = SubprocessRunner([sys.executable, str(tmp_path / "loud.py"), str(tmp_path / "m.onnx"), "8", "n1_sigmoid"],
                              patterns=rule.patterns)
    res = runner.run()
    assert res.code == 0 and rule.failed(res)
    assert len(res.stdout) < 2 * capture.HEAD_BYTES + (128 << 10) and b"FAILS" not in res.stdout


def test_a_check_printing_hundreds_of_mb_keeps_the_reduce_small(tmp_path):
    (tmp_path / "loud.py").write_text(LOUD_CHECK)
    z.save(z.chain(3), tmp_path / "m.onnx")
    args = ["debug", "reduce", "m.onnx", "-o", "red.onnx", "--fail-regex", "FAILS-+HERE",
            "--check", sys.executable, "loud.py", "polygraphy_debug.onnx", "120", "n1_sigmoid"]
    code, out, peak, _ = measure(args, tmp_path)
    assert code == 0, out
    assert "Reduced 3 -> 1 node" in out
    assert peak < 160 * MB, f"peak {peak / MB:.0f} MB: the check's output was kept"

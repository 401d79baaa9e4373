"""toolkit.run.registry: a runner option's value is checked one way, whichever way it comes in."""

import pytest

from toolkit import api
from toolkit.core.errors import UsageError
from toolkit.run.registry import get_kind
from toolkit.run.specs import parse_runner_spec


def test_a_choice_is_checked_and_lower_cased_by_the_option_itself():
    precision = get_kind("openvino").option("precision")
    assert precision.check("BF16") == "bf16" and precision.check(None) is None
    with pytest.raises(ValueError, match="one of: f32, bf16, f16"):
        precision.check("f64")
    fp16 = get_kind("onnxrt").option("onnxrt_fp16")
    assert fp16.check(True) is True
    with pytest.raises(ValueError, match="a switch"):
        fp16.check("yes")


def test_spec_keyword_and_flag_say_the_same_choices(cli, tmp_path):
    with pytest.raises(UsageError, match="write precision=VALUE with VALUE one of: f32, bf16, f16"):
        parse_runner_spec("openvino:precision=f64")
    with pytest.raises(UsageError, match="write precision=VALUE with VALUE one of"):
        parse_runner_spec("openvino:precision")
    with pytest.raises(UsageError, match="openvino's precision is one of: f32, bf16, f16"):
        api.run("m.onnx", [], "openvino", precision="f64")
    from modelzoo import chain, save

    model = save(chain(2), str(tmp_path / "m.onnx"))
    res = cli("run", model, "--openvino", "--openvino-precision", "f64")
    assert res.code == 2 and "--openvino-precision f64: use one of: f32, bf16, f16" in res.err


def test_the_command_line_hands_the_library_a_checked_choice(cli, tmp_path, monkeypatch):
    import toolkit.run as runplan
    from modelzoo import chain, save

    seen = {}

    def capture(opts, reporter=None):
        seen["opts"] = opts
        raise UsageError("captured")

    monkeypatch.setattr(runplan, "execute", capture)
    res = cli("run", save(chain(2), str(tmp_path / "m.onnx")), "--openvino", "--openvino-precision", "BF16")
    assert res.code == 2 and "captured" in res.err
    assert seen["opts"].of("openvino").precision == "bf16"

import pytest

from toolkit.core.errors import UsageError
from toolkit.core.meta import (
    format_meta,
    normalize_dtype,
    parse_named_values,
    parse_shape,
    parse_shape_specs,
    parse_tensor_spec,
)


@pytest.mark.parametrize(
    "spec,name,shape,dtype",
    [
        ("x:[1,3,224,224]:float32", "x", (1, 3, 224, 224), "float32"),
        ("x:auto:auto", "x", None, None),
        ("x:float16", "x", None, "float16"),
        ("x:fp16", "x", None, "float16"),
        ("x:1x3x640x640", "x", (1, 3, 640, 640), None),
        ("x:1,3,640,640:int64", "x", (1, 3, 640, 640), "int64"),
        ("x:[batch,3,?]", "x", ("batch", 3, None), None),
        ("x:[]", "x", (), None),
        ("input:0:[1,2]:float32", "input:0", (1, 2), "float32"),
        ("plain_name", "plain_name", None, None),
    ],
)
def test_parse_tensor_spec(spec, name, shape, dtype):
    meta = parse_tensor_spec(spec)
    assert (meta.name, meta.shape, meta.dtype) == (name, shape, dtype)


def test_known_names_win_over_spec_syntax():
    meta = parse_tensor_spec("input:0", known_names={"input:0"})
    assert meta.name == "input:0" and meta.shape is None


@pytest.mark.parametrize("bad", ["x:[1,,3]", "x:[1,3", "x:[-5]", ":[1]:float32", "x:[1,@]"])
def test_bad_specs_are_usage_errors(bad):
    with pytest.raises(UsageError):
        parse_tensor_spec(bad)


def test_unknown_dtype_message_lists_choices():
    with pytest.raises(UsageError, match="float32"):
        normalize_dtype("float33")


def test_parse_shape_spellings():
    assert parse_shape("[1,3]") == parse_shape("1x3") == parse_shape("1,3") == parse_shape("(1, 3)") == (1, 3)
    assert parse_shape("auto") is None


def test_shape_specs_need_a_shape():
    assert parse_shape_specs(["a:[1,2]", "b:3x4"]) == {"a": (1, 2), "b": (3, 4)}
    with pytest.raises(UsageError, match="needs a shape"):
        parse_shape_specs(["a"])


def test_named_values():
    glob, per = parse_named_values(["1e-3", "out:0.5", "name:with:colon:2"], float, "tolerance")
    assert glob == 1e-3 and per == {"out": 0.5, "name:with:colon": 2.0}
    with pytest.raises(UsageError, match="bad tolerance"):
        parse_named_values(["out:abc"], float, "tolerance")


def test_format_meta_matches_reference_style():
    assert format_meta("x", (1, 3, 224, 224), "float32") == "{x [dtype=float32, shape=(1, 3, 224, 224)]}"
    assert format_meta("y", None, None) == "{y [dtype=?, shape=?]}"
    assert format_meta("s", (), "int64") == "{s [dtype=int64, shape=()]}"

"""Tensor metadata: names, shapes and dtypes, and the ``name:[shape]:dtype`` spelling.

Shapes are tuples whose entries are ``int`` (fixed), ``str`` (a symbolic dim such as
``"batch"``) or ``None`` (unknown, printed as ``?``). A shape of ``None`` means the
rank itself is unknown; ``()`` is a scalar.

This module imports nothing heavy at import time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Set, Tuple, TypeVar, Union

from toolkit.core.errors import UsageError

_V = TypeVar("_V")

Dim = Union[int, str, None]
Shape = Optional[Tuple[Dim, ...]]

AUTO = "auto"

# ONNX TensorProto element type -> canonical dtype name used everywhere in toolkit.
_ONNX_TO_NAME = {
    1: "float32",
    2: "uint8",
    3: "int8",
    4: "uint16",
    5: "int16",
    6: "int32",
    7: "int64",
    8: "string",
    9: "bool",
    10: "float16",
    11: "float64",
    12: "uint32",
    13: "uint64",
    14: "complex64",
    15: "complex128",
    16: "bfloat16",
    17: "float8e4m3fn",
    18: "float8e4m3fnuz",
    19: "float8e5m2",
    20: "float8e5m2fnuz",
    21: "uint4",
    22: "int4",
}
_NAME_TO_ONNX = {v: k for k, v in _ONNX_TO_NAME.items()}
_ALIASES = {
    "float": "float32",
    "fp32": "float32",
    "half": "float16",
    "fp16": "float16",
    "double": "float64",
    "fp64": "float64",
    "bf16": "bfloat16",
    "long": "int64",
    "int": "int32",
    "boolean": "bool",
}


def normalize_dtype(name: str) -> str:
    """Canonical dtype name for a user spelling (``fp16`` -> ``float16``); raises UsageError."""
    key = name.strip().lower()
    key = _ALIASES.get(key, key)
    if key not in _NAME_TO_ONNX:
        known = ", ".join(sorted(_NAME_TO_ONNX))
        raise UsageError(f"unknown dtype '{name}'; use one of: {known}")
    return key


def is_dtype_name(name: str) -> bool:
    key = name.strip().lower()
    return _ALIASES.get(key, key) in _NAME_TO_ONNX


def dtype_from_onnx(elem_type: int) -> Optional[str]:
    """Dtype name for an ONNX element type; None for UNDEFINED (0)."""
    if not elem_type:
        return None
    return _ONNX_TO_NAME.get(int(elem_type), f"onnx_type_{int(elem_type)}")


def dtype_to_onnx(name: str) -> int:
    return _NAME_TO_ONNX[normalize_dtype(name)]


def dtype_from_numpy(dtype) -> str:
    """Dtype name for a numpy dtype (bfloat16 and float8 via ml_dtypes names)."""
    import numpy as np

    dt = np.dtype(dtype)
    if dt == np.bool_:
        return "bool"
    name = dt.name
    if name in _NAME_TO_ONNX:
        return name
    if dt.kind in ("U", "S", "O"):
        return "string"
    return name


# toolkit (ONNX) dtype names -> ml_dtypes attribute names, where they differ.
_ML_DTYPES = {
    "float8e4m3fn": "float8_e4m3fn",
    "float8e4m3fnuz": "float8_e4m3fnuz",
    "float8e5m2": "float8_e5m2",
    "float8e5m2fnuz": "float8_e5m2fnuz",
    "float4e2m1": "float4_e2m1fn",
}


def dtype_to_numpy(name: str):
    """numpy dtype for a dtype name. bfloat16/float8 need ml_dtypes (shipped with onnx)."""
    import numpy as np

    key = normalize_dtype(name)
    if key == "string":
        return np.dtype(object)
    try:
        return np.dtype(key)
    except TypeError:
        try:
            import ml_dtypes  # noqa: F401  (registers the extra dtypes)

            return np.dtype(getattr(ml_dtypes, _ML_DTYPES.get(key, key)))
        except (ImportError, AttributeError):
            raise UsageError(f"dtype '{key}' has no numpy equivalent here") from None


@dataclass(frozen=True)
class TensorMeta:
    """Name, shape and dtype of a tensor; shape/dtype None mean unknown or ``auto``."""

    name: str
    shape: Shape = None
    dtype: Optional[str] = None

    def __str__(self) -> str:
        return format_meta(self.name, self.shape, self.dtype)


def is_fixed_dim(dim) -> bool:
    """Whether ``dim`` is a concrete size (exporters write -1 for a dynamic dim: PaddlePaddle does)."""
    return isinstance(dim, int) and dim >= 0


def is_symbolic_dim(dim) -> bool:
    """Whether ``dim`` is a named dynamic dim (``batch``; not ``?``, which names nothing)."""
    return isinstance(dim, str) and dim not in ("", "?")


def format_dim(dim: Dim) -> str:
    if dim is None:
        return "?"
    return str(dim)


def format_shape(shape: Shape) -> str:
    """``(1, 3, 'batch', ?)`` style, ``?`` for unknown rank."""
    if shape is None:
        return "?"
    inner = ", ".join(repr(d) if isinstance(d, str) else format_dim(d) for d in shape)
    if len(shape) == 1:
        inner += ","
    return f"({inner})"


def format_meta(name: str, shape: Shape, dtype: Optional[str]) -> str:
    """``{x [dtype=float32, shape=(1, 3, 224, 224)]}`` (the format people grep)."""
    from toolkit.core.text import shown_name

    dt = dtype if dtype else "?"
    return f"{{{shown_name(name)} [dtype={dt}, shape={format_shape(shape)}]}}"


def format_spec_shape(shape: Shape) -> str:
    """``[1,3,batch]`` — the spelling accepted by :func:`parse_shape`."""
    if shape is None:
        return AUTO
    return "[" + ",".join(format_dim(d) for d in shape) + "]"


_INT_RE = re.compile(r"^-?\d+$")
_IDENT_RE = re.compile(r"^[A-Za-z_][\w.\-]*$")


def _parse_dim(tok: str, spec: str) -> Dim:
    tok = tok.strip().strip("'\"")
    if tok in ("?", "-1", ""):
        if tok == "":
            raise UsageError(f"empty dimension in shape '{spec}'; write e.g. [1,3,224,224]")
        return None
    if _INT_RE.match(tok):
        val = int(tok)
        if val < -1:
            raise UsageError(f"negative dimension {val} in shape '{spec}'")
        return val
    if _IDENT_RE.match(tok):
        return tok
    raise UsageError(f"bad dimension '{tok}' in shape '{spec}'; dims are integers, names or '?'")


def is_bracketed(s: str) -> bool:
    """``s`` is enclosed in ``[...]`` or ``(...)``."""
    return (s.startswith("[") and s.endswith("]")) or (s.startswith("(") and s.endswith(")"))


def parse_shape(text: str) -> Shape:
    """Parse ``[1,3,224,224]``, ``(1,3)``, ``1x3x224x224``, ``1,3,224,224``, ``[]`` or ``auto``.

    Returns None for ``auto``. Spellings without brackets need no quoting in any shell.
    """
    s = text.strip()
    if s.lower() == AUTO:
        return None
    if is_bracketed(s):
        inner = s[1:-1].strip()
        return tuple(_parse_dim(t, text) for t in inner.split(",")) if inner else ()
    return _parse_bare_shape(s, text)


def _parse_bare_shape(s: str, text: str) -> Shape:
    """A shape written without brackets: ``1,3,224,224`` or ``1x3x224x224`` (``s``: ``text`` stripped)."""
    if any(c in s for c in "[]()"):
        raise UsageError(f"unbalanced brackets in shape '{text}'; write e.g. [1,3,224,224]")
    if "," in s:
        return tuple(_parse_dim(t, text) for t in s.split(","))
    if re.fullmatch(r"\d+(x\d+)*", s):
        return tuple(int(t) for t in s.split("x"))
    raise UsageError(f"cannot read shape '{text}'; write e.g. [1,3,224,224] or 1x3x224x224")


def _looks_like_shape(text: str) -> bool:
    s = text.strip()
    if s.lower() == AUTO:
        return True
    if s.startswith("[") or s.startswith("("):
        return True
    return bool(re.fullmatch(r"\d+(x\d+)*", s)) or bool(re.fullmatch(r"[\w?]+(,[\w?]+)+", s))


def _split_last_colon(text: str) -> Tuple[str, Optional[str]]:
    """Split at the last ':' that is not inside brackets."""
    depth = 0
    for i in range(len(text) - 1, -1, -1):
        c = text[i]
        if c in "])":
            depth += 1
        elif c in "[(":
            depth -= 1
        elif c == ":" and depth == 0:
            return text[:i], text[i + 1 :]
    return text, None


def parse_tensor_spec(
    spec: str,
    *,
    allow_shape: bool = True,
    allow_dtype: bool = True,
    known_names: Optional[Iterable[str]] = None,
) -> TensorMeta:
    """Parse ``name``, ``name:shape``, ``name:dtype`` or ``name:shape:dtype``.

    Parsing goes from the right, so tensor names may contain ':' (``input:0``). When
    ``known_names`` is given and the whole spec (or a prefix) is a known name, that wins.
    ``auto`` leaves the field as None.
    """
    if not spec or not spec.strip():
        raise UsageError("empty tensor spec; write e.g. x:[1,3,224,224]:float32")
    names = set(known_names or ())
    if spec in names:
        return TensorMeta(spec)
    rest, dtype = _take_dtype(spec, allow_dtype)
    rest, shape = _take_shape(spec, rest, names, allow_shape)
    if rest.count("[") != rest.count("]") and rest not in names:
        raise UsageError(f"unbalanced brackets in '{spec}'; write e.g. x:[1,3,224,224]:float32")
    if not rest:
        raise UsageError(f"'{spec}' has no tensor name; write e.g. x:[1,3,224,224]:float32")
    if names and rest not in names:
        _raise_if_malformed_suffix(spec, names, allow_shape, allow_dtype)
    return TensorMeta(rest, shape, dtype)


def _take_dtype(spec: str, allow_dtype: bool) -> Tuple[str, Optional[str]]:
    """(the rest, the dtype): a last ``:dtype`` (or ``:auto``, no dtype) taken off ``spec``."""
    head, tail = _split_last_colon(spec)
    if tail is None or not allow_dtype:
        return spec, None
    if tail.lower() == AUTO:
        return head, None
    if is_dtype_name(tail):
        return head, normalize_dtype(tail)
    return spec, None


def _take_shape(spec: str, rest: str, names: Set[str], allow_shape: bool) -> Tuple[str, Shape]:
    """(the rest, the shape): a last ``:shape`` taken off ``rest`` (unless ``rest`` is a known name)."""
    head, tail = _split_last_colon(rest)
    if tail is None:
        return rest, None
    if allow_shape and rest not in names and _looks_like_shape(tail):
        return head, parse_shape(tail)
    if not allow_shape and tail.startswith(("[", "(")):
        raise UsageError(f"'{spec}': a shape is not accepted here; write name or name:dtype")
    return rest, None


def _raise_if_malformed_suffix(spec: str, names, allow_shape: bool, allow_dtype: bool) -> None:
    """``x:[1,4]:float99`` where ``x`` is a known name: a malformed dtype/shape (usage
    error), not an unknown tensor named ``x:[1,4]:float99``."""
    known = [i for i, c in enumerate(spec) if c == ":" and spec[:i] in names]
    if not known:
        return
    name, suffix = spec[: known[-1]], spec[known[-1] + 1 :]
    _, last = _split_last_colon(suffix)
    last = suffix if last is None else last
    if allow_dtype and not _looks_like_shape(last) and not is_dtype_name(last):
        normalize_dtype(last)  # raises: unknown dtype, with the list of known ones
    form = _SPEC_FORMS[(bool(allow_shape), bool(allow_dtype))].format(name=name)
    raise UsageError(f"cannot read '{suffix}' in '{spec}' as a shape or dtype of '{name}'; write e.g. {form}")


# (shape accepted, dtype accepted) -> the spellings an error suggests
_SPEC_FORMS = {
    (True, True): "{name}:[1,3,224,224]:float32, {name}:auto:auto or {name}:float32",
    (True, False): "{name}:[1,3,224,224]",
    (False, True): "{name}:float32",
    (False, False): "{name}:float32",
}


def parse_shape_specs(specs: Sequence[str]) -> dict:
    """``["x:[1,3]", "y:2x2"]`` -> ``{"x": (1, 3), "y": (2, 2)}`` (for --input-shapes)."""
    out = {}
    for spec in specs or ():
        head, tail = _split_last_colon(spec)
        if tail is None:
            _raise_if_equals_sign(spec)
        else:
            if is_dtype_name(tail) and _split_last_colon(head)[1] is not None:
                raise UsageError(f"'{spec}': a dtype is not accepted here; write name:shape, e.g. {head}")
            _raise_if_bad_dim(spec, head, tail)
        meta = parse_tensor_spec(spec, allow_dtype=False)
        if tail is None or meta.shape is None:
            raise UsageError(f"'{spec}' needs a shape; write e.g. {meta.name}:[1,3,224,224]")
        out[meta.name] = meta.shape
    return out


def _raise_if_equals_sign(spec: str) -> None:
    """``x=[1,3]``: the separator written as '='."""
    m = re.fullmatch(r"(.+?)\s*=\s*\[?([\dx,\s?-]+)\]?", spec)
    if m and re.search(r"\d", m.group(2)):
        raise UsageError(
            f"'{spec}': the separator between name and shape is ':', not '='; write "
            f"{m.group(1)}:{m.group(2).strip()}"
        )


_LOOKALIKE = str.maketrans({"O": "0", "o": "0", "l": "1", "I": "1"})


def _raise_if_bad_dim(spec: str, name: str, text: str) -> None:
    """``x:1x3x64Ox640``: a list of dimensions, mostly numbers, one of them a number mistyped
    (digits and letters mixed; a plain name is a symbolic dimension): name it."""
    dims, bracketed = _dim_texts(text)
    if len(dims) < 2 or sum(d.isdigit() for d in dims) < len(dims) / 2:
        return  # not meant as a list of numbers (a name, a symbolic shape)
    for k, dim in enumerate(dims):
        if _mixes_digits(dim):
            raise _mistyped_dim(spec, name, dims, k, bracketed)


def _dim_texts(text: str) -> Tuple[List[str], bool]:
    """The dims of shape ``text`` as written (``[1,3]``, ``(1,3)``, ``1x3``, ``1,3``), and whether it is bracketed."""
    inner = text.strip()
    bracketed = inner[:1] in "[(" and inner[-1:] in "])"
    return [d.strip() for d in re.split(r"[x,]" if not bracketed else ",", inner[1:-1] if bracketed else inner)], bracketed


def _mixes_digits(dim: str) -> bool:
    """Whether the dim text ``dim`` holds digits but is no number (``64O``; not -1, ?, or a name)."""
    return not (dim.isdigit() or dim in ("-1", "?") or not any(c.isdigit() for c in dim))


def _mistyped_dim(spec: str, name: str, dims: List[str], k: int, bracketed: bool) -> UsageError:
    """Dimension ``k`` of ``dims`` is no number: say so, with the number it may have meant."""
    dim = dims[k]
    fixed = dim.translate(_LOOKALIKE)
    hint, example = "", "[1,3,224,224]"
    if fixed.isdigit():
        hint = f" (a letter for a digit? {fixed})"
        example = ("," if bracketed else "x").join(fixed if j == k else d for j, d in enumerate(dims))
        example = f"[{example}]" if bracketed else example
    return UsageError(
        f"'{spec}': dimension {k + 1} of the shape, '{dim}', is not a number{hint}; write e.g. {name}:{example}"
    )


def parse_named_values(
    specs: Sequence[str], convert: Callable[[str], _V], what: str
) -> Tuple[Optional[_V], Dict[str, _V]]:
    """Parse ``["1e-3", "out:1e-2"]`` into (global value, {name: value}).

    A bare value is global; ``name:value`` applies to one tensor (last ':' splits, so names
    may contain ':'). ``convert`` turns text into the value and raises ValueError if bad.
    """
    glob: Optional[_V] = None
    per: Dict[str, _V] = {}
    for spec in specs or ():
        head, tail = _split_last_colon(spec)
        try:
            if tail is None:
                glob = convert(spec)
            else:
                per[head] = convert(tail)
        except (ValueError, TypeError) as exc:
            raise UsageError(f"bad {what} '{spec}': {exc}") from None
    return glob, per


_SIZE_UNITS = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}
_SIZE_RE = re.compile(r"^\s*((?:\d+(?:\.\d*)?|\.\d+)(?:e[+-]?\d+)?)\s*([kmgt]?)(?:i?b)?\s*$", re.IGNORECASE)


def parse_size(text: str, *, minimum: int = 0) -> int:
    """``1024``, ``16K``, ``1.5M``, ``2GiB``, ``1 GB`` (powers of 1024) -> bytes.

    Raises UsageError for anything else or a size below ``minimum``.
    """
    m = _SIZE_RE.match(str(text or ""))
    if not m:
        raise UsageError(f"bad size '{text}'; write bytes, or e.g. 16K, 512M, 1G")
    value = int(float(m.group(1)) * _SIZE_UNITS[m.group(2).lower()])
    if value < minimum:
        raise UsageError(f"size '{text}' must be at least {minimum} byte(s)")
    return value

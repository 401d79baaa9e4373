"""The shapes a model will meet, from its own hints, for the inputs of a check.

A check on generated inputs whose dynamic dims are set to 1 (a 1x1 image for a detector) says
nothing about the shapes the model is used with. Some exporters write those shapes into the
model: Ultralytics' metadata holds ``imgsz`` ([height, width]) and ``batch``; any metadata entry
named like a dim (``batch: 1`` for a dim named ``batch``) with an integer value gives that dim.
An input gets a shape from the hints only when they fix every dynamic dim of it. An entry that
holds no size (text, a float, a bool: ``imgsz: True`` is no size 1) is ignored, as if absent.

No Typer or Rich here.
"""

from __future__ import annotations

import ast
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

HEIGHT_NAMES = ("height", "h", "img_h", "image_height")
WIDTH_NAMES = ("width", "w", "img_w", "image_width")


def _literal(text: str):
    """The Python literal a metadata value holds (None when it holds none)."""
    try:
        return ast.literal_eval(text.strip())
    except (ValueError, SyntaxError):
        return None


def _int(text: str) -> Optional[int]:
    value = _literal(text)
    return value if _size(value) else None


def _image_size(meta: Dict[str, str]) -> Optional[Tuple[int, int]]:
    """(height, width) from an ``imgsz`` entry ('[320, 320]' or '640')."""
    text = meta.get("imgsz")
    value: Any = None if text is None else _literal(text)
    if _size(value):
        return value, value
    if _size_pair(value):
        return int(value[0]), int(value[1])
    return None


def _size(value) -> bool:
    """Whether a metadata value is a size (a positive int; ``True`` is no size, though Python's bool is an int)."""
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _size_pair(value) -> bool:
    """Whether a metadata value is two sizes (a list or tuple)."""
    return isinstance(value, (list, tuple)) and len(value) == 2 and all(map(_size, value))


def _fixed(dim) -> bool:
    """Whether a dim of a shape is fixed (a non-negative int, not a name or unknown)."""
    return isinstance(dim, int) and dim >= 0


def _dim_value(dim, pos: int, rank: int, meta: Dict[str, str], size) -> Optional[int]:
    if _fixed(dim):
        return dim
    name = dim if isinstance(dim, str) else ""
    value = _int(meta.get(name, "")) if name else None  # (_int("") is None)
    if value is None and size is not None and _image_dim(name, pos, rank):
        return size[pos - 2]
    return value


def _image_dim(name: str, pos: int, rank: int) -> bool:
    """Whether a dynamic dim (named ``name``, '' when unnamed) is the height or width of a 4-D input."""
    return rank == 4 and pos in (2, 3) and (name.lower() in HEIGHT_NAMES + WIDTH_NAMES or name in ("", "?"))


def model_shape_hints(model, metas: Sequence) -> Tuple[List[str], List[str]]:
    """(``--input-shapes`` specs for the inputs with dynamic dims that the model's metadata fixes,
    the metadata keys used)."""
    meta = {p.key: p.value for p in model.metadata_props}
    if not meta:
        return [], []
    size = _image_size(meta)
    specs: List[str] = []
    used: Set[str] = set()
    for m in metas:
        shape: Any = getattr(m, "shape", None)
        dims = _hinted_dims(shape, meta, size)
        if dims is not None:
            used.update(_keys_used(shape, meta, size))
            specs.append(f"{m.name}:[{','.join(map(str, dims))}]")
    return specs, sorted(used)


def _keys_used(shape, meta: Dict[str, str], size) -> Set[str]:
    """The metadata keys that give an input of ``shape`` its dims (``size``: from ``imgsz``)."""
    keys = {d for d in shape if isinstance(d, str) and d in meta}
    if size is not None and len(shape) == 4:
        keys.add("imgsz")
    return keys


def _hinted_dims(shape, meta: Dict[str, str], size) -> Optional[list]:
    """An input's dims with the dynamic ones the hints fix; None when its shape is unknown or fixed
    already, or when the hints leave a dynamic dim of it unfixed."""
    if shape is None or all(map(_fixed, shape)):
        return None
    dims = [_dim_value(d, k, len(shape), meta, size) for k, d in enumerate(shape)]
    return None if None in dims else dims


def hinted_shapes(model, metas: Sequence, specs: Sequence[str], messages=None) -> dict:
    """``--input-shapes`` (``specs``) parsed, with the model's hints for the inputs they leave out;
    ``messages.info`` hears which shapes came from the model."""
    from toolkit.core.meta import parse_shape_specs

    given = parse_shape_specs(specs)
    hinted, keys = model_shape_hints(model, [m for m in metas if m.name not in given])
    if hinted:
        if messages is not None:
            messages.info(f"Input shapes from the model's metadata ({', '.join(keys)}): {' '.join(hinted)}")
        given.update(parse_shape_specs(hinted))
    return given

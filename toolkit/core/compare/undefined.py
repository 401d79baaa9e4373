"""Values the ONNX spec leaves undefined, which a comparison must not count as errors.

``Cast`` from a floating-point type to an integer type is undefined for NaN, +-inf and values
out of the integer type's range (the spec: "the result is undefined"): ONNX-Runtime gives
INT64_MIN for -inf where OpenVINO gives INT32_MIN, and neither is wrong. A comparison of such a
Cast's output skips those elements, found from the **reference's** value of the Cast's input
only, and says how many it skipped and why. The side under test never decides: its value may
be the fault (fp16 storage rounding 127.97 to 128, an overflow to inf). Where the reference
does not hold the Cast's input (a golden file of the graph outputs only, a reference model
that names it otherwise), nothing is skipped and the comparison says so. An output whose every
element is undefined in the reference is compared on nothing: it fails (see
:func:`toolkit.core.compare.arrays.compare_arrays`), never passes.

Only a failing integer output is looked at again, so a passing comparison costs nothing.

No Typer or Rich here.
"""

from __future__ import annotations

from typing import Dict, Mapping, Optional, Tuple

import numpy as np

from toolkit.core.compare.arrays import IterationComparison, compare_arrays
from toolkit.core.compare.tolerances import Tolerances

WHY = "float-to-int Cast of NaN, inf or out-of-range values, which ONNX leaves undefined"

_INT_TYPES = {2: np.uint8, 3: np.int8, 4: np.uint16, 5: np.int16, 6: np.int32, 7: np.int64, 12: np.uint32,
              13: np.uint64}


def float_to_int_casts(model) -> Dict[str, Tuple[str, type]]:
    """{output of a Cast to an integer type: (its input, the integer numpy type)} in the top graph."""
    out: Dict[str, Tuple[str, type]] = {}
    for node in model.graph.node:
        if node.op_type != "Cast" or node.domain not in ("", "ai.onnx") or not node.input or not node.output:
            continue
        to = next((a.i for a in node.attribute if a.name == "to"), None)
        if to in _INT_TYPES and node.output[0]:
            out[node.output[0]] = (node.input[0], _INT_TYPES[to])
    return out


def undefined_elements(x, to) -> np.ndarray:
    """Where casting float array ``x`` to integer type ``to`` is undefined (NaN, +-inf, out of range)."""
    x = np.asarray(x)
    info = np.iinfo(to)
    with np.errstate(invalid="ignore"):
        t = np.trunc(x.astype(np.float64))
        return ~np.isfinite(t) | (t < float(info.min)) | (t >= float(info.max) + 1)


def skip_undefined(
    it: IterationComparison, casts: Mapping[str, Tuple[str, type]], outs_a: Mapping, outs_b: Mapping, tol: Tolerances,
    *, reference: str = "b",
) -> IterationComparison:
    """``it`` with each failing integer output of a float-to-int Cast compared again without the
    elements that Cast leaves undefined, found from its input's values in the reference only
    (``outs_b`` when ``reference`` is "b", else ``outs_a``). Where the reference does not hold that
    input, nothing is skipped and the row's note says why."""
    ref = outs_b if reference == "b" else outs_a
    for k, o in enumerate(it.outputs):
        if o.passed or o.message or o.name not in casts:
            continue
        mask = _undefined_mask(o, casts[o.name], ref)
        if mask is not None:
            it.outputs[k] = compare_arrays(o.name, outs_a[o.name], outs_b[o.name], o.atol, o.rtol, o.stat,
                                           tol.quantile_for(o.name), skip=mask, skip_why=WHY)
    return it


def _undefined_mask(o, cast: Tuple[str, type], ref: Mapping) -> Optional[np.ndarray]:
    """The elements of the failing output ``o`` that its Cast (``cast``: its input, the integer type)
    leaves undefined, by the reference ``ref``'s values of that input; None when there are none
    to skip (and a note on ``o`` when the reference lacks the input)."""
    src, to = cast
    x = _values(src, ref)
    if x is None:
        o.note = f"undefined elements not looked for: the reference does not hold the Cast's input '{src}'"
        return None
    if x.dtype.kind != "f" or x.shape != o.shape_b:
        return None
    mask = undefined_elements(x, to)
    return mask if mask.any() else None


def _values(name: str, *sources: Mapping) -> Optional[np.ndarray]:
    for src in sources:
        if name in src:
            return np.asarray(src[name])
    return None


def may_skip(it: IterationComparison) -> bool:
    """Whether ``it`` has a failing integer output (the only kind :func:`skip_undefined` looks at)."""
    return any(not o.passed and not o.message and o.dtype_b.startswith(("int", "uint")) for o in it.outputs)

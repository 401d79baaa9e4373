"""Input data for a run: generated (seeded, ranged, shaped) or taken from loaded files.

Generated data
    Floats are uniform in ``[lo, hi)`` (default ``[0, 1)``). Integers are uniform over the
    integers in ``[lo, hi]`` (both ends included; the range is clipped to the dtype, and
    an empty range such as ``[0.2, 0.8]`` falls back to ``lo`` rounded down). Bools are
    random ``False``/``True``. The same seed, ranges and shapes give the same data.
    Dynamic dims (symbolic or unknown) take their value from ``--input-shapes``, else 1.

Loaded data
    A feed may hold more tensors than the model needs (a layerwise inputs file); the model
    gets exactly its own inputs. A missing input, a different dtype or a different shape
    is an :class:`InputError`: nothing is cast or reshaped behind the user's back.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Set, Tuple

import numpy as np

from toolkit.core.io.npy import tensor_header
from toolkit.core.errors import InputError, ToolkitError, UsageError
from toolkit.core.meta import (
    TensorMeta,
    dtype_from_numpy,
    dtype_to_numpy,
    format_meta,
    format_shape,
    is_bracketed,
    is_dtype_name,
    is_fixed_dim,
    is_symbolic_dim,
    parse_named_values,
)

DEFAULT_SEED = 1
DEFAULT_RANGE = (0.0, 1.0)
DEFAULT_DIM = 1
# One generated input bigger than this is refused (bytes): a dim like 2**62 in a model, or a
# typo in --input-shapes, must be a clear error, not an allocation that takes the machine down.
MAX_GENERATED_BYTES = 4 * 2**30

_NUM = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[-+]?inf"



# the note for an input whose dynamic dims were set to 1 (the data is not the shapes the model meets)
GUESSED_NOTE = "has dynamic shape"


def guessed_shapes(notes) -> list:
    """The notes that say an input's dynamic dims were guessed (set to 1)."""
    return [n for n in notes if GUESSED_NOTE in n]

def _parse_range(text: str) -> Tuple[float, float]:
    s = text.strip()
    if is_bracketed(s):
        s = s[1:-1]
    parts = [p.strip() for p in s.split(",")]
    if len(parts) != 2 or not all(re.fullmatch(_NUM, p, flags=re.IGNORECASE) for p in parts):
        raise ValueError("write a range as [lo,hi], e.g. [0,1] or x:[-1,1] (or x:-1,1 without brackets)")
    lo, hi = float(parts[0]), float(parts[1])
    if math.isnan(lo) or math.isnan(hi):
        raise ValueError("range ends must be numbers")
    if lo > hi:
        raise ValueError(f"low end {parts[0]} is above high end {parts[1]}")
    return lo, hi


@dataclass
class ValueRanges:
    """Value ranges for generated data: one default and per input name."""

    default: Tuple[float, float] = DEFAULT_RANGE
    per_input: Dict[str, Tuple[float, float]] = field(default_factory=dict)

    def for_input(self, name: str) -> Tuple[float, float]:
        return self.per_input.get(name, self.default)


def parse_val_ranges(specs: Optional[Sequence[str]]) -> ValueRanges:
    """``["[0,1]", "x:[-1,1]", "mask:0,1"]`` -> ValueRanges (UsageError if malformed)."""
    glob, per = parse_named_values(specs or [], _parse_range, "--val-range value")
    return ValueRanges(glob if glob is not None else DEFAULT_RANGE, per)


def check_names(what: str, names: Sequence[str], metas: Sequence[TensorMeta]) -> None:
    """InputError (exit 3, like every unknown tensor name) when an option names a tensor
    that is not an input of the model."""
    known = [m.name for m in metas]
    for name in names:
        if name not in known:
            raise InputError(f"{what} names '{name}', which is not an input of the model; inputs: {', '.join(known)}")


def named_dims(metas: Sequence[TensorMeta], overrides: Mapping[str, tuple]) -> Dict[str, Tuple[int, str]]:
    """Symbolic dim name -> (value, input that set it), from the inputs ``overrides`` shapes: a
    dim named ``batch`` in one input is the same ``batch`` in every other input."""
    out: Dict[str, Tuple[int, str]] = {}
    for meta in metas:
        for want, got in _dim_pairs(meta, overrides.get(meta.name)):
            if is_symbolic_dim(want) and is_fixed_dim(got):
                out.setdefault(want, (got, meta.name))
    return out


def _dim_pairs(meta: TensorMeta, shape: Optional[tuple]) -> List[Tuple[Any, Any]]:
    """(the model's dim, the dim of ``shape``) for each dim of input ``meta``; none unless both
    shapes are known and of one rank."""
    if shape is None or meta.shape is None or len(shape) != len(meta.shape):
        return []
    return list(zip(meta.shape, shape))


def resolve_shape(
    meta: TensorMeta, overrides: Mapping[str, tuple], named: Optional[Mapping[str, Tuple[int, str]]] = None
) -> Tuple[Tuple[int, ...], List[str]]:
    """The concrete shape to generate for an input, and notes about dims that were guessed
    (``named``: values of symbolic dims set through other inputs, see :func:`named_dims`)."""
    if meta.name in overrides:
        return _given_shape(meta, overrides[meta.name]), []
    if meta.shape is None:
        raise InputError(
            f"input '{meta.name}' has an unknown rank; give its shape with --input-shapes {meta.name}:[...]"
        )
    return _chosen_shape(meta, meta.shape, named or {})


def _given_shape(meta: TensorMeta, shape) -> Tuple[int, ...]:
    """The shape --input-shapes gives input ``meta``, checked against the model's."""
    if shape is None or not all(is_fixed_dim(d) for d in shape):
        raise UsageError(
            f"--input-shapes for '{meta.name}' must be concrete, e.g. {meta.name}:[1,3,224,224], "
            f"got {format_shape(shape)}"
        )
    # one rule: text that is no shape is a usage error (exit 2); a shape that does not fit
    # the model (unknown name, wrong rank, a fixed dim contradicted) is a model mismatch (exit 3)
    if meta.shape is not None:
        _check_fits(meta, shape)
    return tuple(int(d) for d in shape)


def _check_fits(meta: TensorMeta, shape: tuple) -> None:
    """InputError unless the concrete ``shape`` has the rank and the fixed dims of input ``meta``."""
    assert meta.shape is not None
    if len(meta.shape) != len(shape):
        raise InputError(
            f"--input-shapes gives '{meta.name}' rank {len(shape)} {format_shape(shape)}, "
            f"but the model's input has rank {len(meta.shape)} {format_shape(meta.shape)}"
        )
    for got, want in zip(shape, meta.shape):
        if is_fixed_dim(want) and got != want:
            raise InputError(
                f"--input-shapes gives '{meta.name}' shape {format_shape(shape)}, "
                f"but the model fixes it to {format_shape(meta.shape)}"
            )


def _chosen_shape(meta: TensorMeta, shape: tuple, named: Mapping[str, Tuple[int, str]]) -> Tuple[Tuple[int, ...], List[str]]:
    """A shape for input ``meta`` of known rank: its fixed dims, symbolic dims set through other
    inputs (``named``), and DEFAULT_DIM for the rest; with a note saying what was chosen."""
    dims = []
    guessed = False
    shared = []
    for d in shape:
        if is_fixed_dim(d):
            dims.append(d)
        elif isinstance(d, str) and d in named:
            dims.append(named[d][0])
            shared.append(f"'{d}' = {named[d][0]} as in {named[d][1]}")
        else:
            dims.append(DEFAULT_DIM)
            guessed = True
    return tuple(dims), _shape_notes(meta.name, shape, tuple(dims), guessed, shared)


def _shape_notes(name: str, shape: tuple, dims: Tuple[int, ...], guessed: bool, shared: List[str]) -> List[str]:
    """What was chosen for input ``name`` of model shape ``shape``: dims guessed, else dims set
    through other inputs, else nothing to say."""
    if guessed:
        dynamic = tuple(d if is_fixed_dim(d) else None for d in shape)  # (one spelling: ?)
        return [
            f"input '{name}' {GUESSED_NOTE} {format_shape(dynamic)}; using {format_shape(dims)} "
            f"(set it with --input-shapes {name}:[...])"
        ]
    if shared:
        return [f"input '{name}': using {format_shape(dims)} ({', '.join(shared)})"]
    return []


def _format_bytes(n: int) -> str:
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            value = n / size
            return f"{value:.1f} {unit}" if value < 1e6 else f"{value:.2e} {unit}"
    return f"{n} bytes"


def check_generated_size(name: str, shape: Tuple[int, ...], dtype_name: Optional[str], limit: int = MAX_GENERATED_BYTES) -> None:
    """InputError when generating input ``name`` of ``shape`` would take more than ``limit`` bytes."""

    try:
        itemsize = max(dtype_to_numpy(dtype_name or "float32").itemsize, 1)
    except ToolkitError:  # a type numpy cannot hold here: one byte each
        itemsize = 1
    count = 1
    for d in shape:
        count *= int(d)
    nbytes = count * itemsize
    if nbytes > limit:
        raise InputError(
            f"input '{name}' of shape {format_shape(tuple(shape))} ({dtype_name or 'float32'}) would need "
            f"{_format_bytes(nbytes)} of generated data, more than the {_format_bytes(limit)} toolkit generates "
            f"for one input; give a smaller shape with --input-shapes {name}:[...] or load data with --load-inputs"
        )


def iteration_rng(seed: Optional[int], iteration: int):
    """The generator for one iteration: numpy's legacy ``RandomState(seed + iteration)``, as
    Polygraphy's data loader draws (default seed 1), so the same seed gives the same data in
    both tools. Inputs are drawn from it one after another, in the model's input order."""

    return np.random.RandomState((DEFAULT_SEED if seed is None else seed) + iteration)


def _generate_one(rng, shape, dtype_name: Optional[str], lo: float, hi: float, name: str):
    """Values for one input, drawn from ``rng`` (a legacy ``RandomState``) as the reference does:
    integers and bools with ``randint(int(lo), int(hi) + 1)`` (bools: ``bool(lo)``..``bool(hi)``),
    floats with ``random_sample() * (hi - lo) + lo`` in float64, then cast to the input's dtype."""

    if dtype_name is None:
        dtype_name = "float32"
    if dtype_name == "string":
        raise InputError(f"input '{name}' is a string tensor; toolkit cannot generate strings, load them with --load-inputs")
    if not is_dtype_name(dtype_name):  # (an element type number no ONNX version defines: onnx_type_77)
        raise InputError(f"input '{name}' has the element type {dtype_name.removeprefix('onnx_type_')}, which ONNX does "
                         "not define: the model is damaged or from a newer ONNX; fix the input's type")
    dt = dtype_to_numpy(dtype_name)
    if dt == np.bool_ or np.issubdtype(dt, np.integer):
        ilo, ihi = _integer_bounds(dt, lo, hi)
        if ihi < ilo:
            raise UsageError(f"--val-range for input '{name}' is empty for its dtype {dtype_name}: [{lo}, {hi}]")
        # numpy takes an exclusive high bound up to the dtype's maximum + 1
        return np.asarray(rng.randint(ilo, ihi + 1, size=shape, dtype=dt))
    return _random_floats(rng, shape, dt, lo, hi, name)


def _integer_bounds(dt, lo: float, hi: float) -> Tuple[int, int]:
    """The inclusive bounds integers (or bools) of ``dt`` are drawn between for the range [lo, hi]:
    infinities at the dtype's ends, everything inside the dtype's range."""
    if dt == np.bool_:
        return int(bool(lo)), int(bool(hi))
    info = np.iinfo(dt)
    ilo = int(lo) if math.isfinite(lo) else (int(info.min) if lo < 0 else int(info.max))
    ihi = int(hi) if math.isfinite(hi) else (int(info.max) if hi > 0 else int(info.min))
    ilo = min(max(ilo, int(info.min)), int(info.max))  # the reference fails outside the dtype's range
    ihi = min(max(ihi, int(info.min)), int(info.max))
    return ilo, ihi


def _random_floats(rng, shape, dt, lo: float, hi: float, name: str):
    if math.isnan(lo) or math.isnan(hi):
        raise UsageError(f"--val-range for input '{name}' holds NaN")
    scale, shift = hi - lo, lo
    if math.isinf(lo):  # two infinities would collapse into NaN: keep the infinity
        scale, shift = lo, 0.0
    if math.isinf(hi):
        scale = hi
    return _uniform(rng, shape, dt, scale, shift)


_CHUNK = 1 << 18  # values drawn per step: float64 scratch of 2 MiB, not 8 bytes per value of the input


def _uniform(rng, shape, dt, scale: float, shift: float):
    """``(rng.random_sample(shape) * scale + shift).astype(dt)``, drawn in chunks: the same values
    (the generator's stream does not depend on how it is split) without a float64 copy of the input."""

    out = np.empty(shape, dtype=dt)
    flat = out.reshape(-1)
    with np.errstate(over="ignore", invalid="ignore"):
        for start in range(0, flat.size, _CHUNK):
            count = min(_CHUNK, flat.size - start)
            flat[start : start + count] = (rng.random_sample(count) * scale + shift).astype(dt)
    return out


@dataclass
class GenerationPlan:
    """What to generate for each input: resolved shapes and value ranges (see :func:`plan_generation`)."""

    inputs: List[Tuple[TensorMeta, Tuple[int, ...]]]
    ranges: ValueRanges
    notes: List[str] = field(default_factory=list)

    def feed(self, iteration: int, seed: Optional[int] = None) -> Dict[str, object]:
        """The feed of one iteration (each iteration has its own generator: see :func:`iteration_rng`)."""
        rng = iteration_rng(seed, iteration)
        feed = {}
        for meta, shape in self.inputs:
            lo, hi = self.ranges.for_input(meta.name)
            feed[meta.name] = _generate_one(rng, shape, meta.dtype, lo, hi, meta.name)
        return feed

    def feeds(self, iterations: int, seed: Optional[int] = None) -> Iterator[Dict[str, object]]:
        """``iterations`` feeds, generated one at a time (the same seed gives the same feeds)."""
        for k in range(iterations):
            yield self.feed(k, seed)


def plan_generation(
    metas: Sequence[TensorMeta],
    *,
    ranges: Optional[ValueRanges] = None,
    shapes: Optional[Mapping[str, tuple]] = None,
) -> GenerationPlan:
    """Check names, resolve shapes and sizes for generated inputs (errors before any data is made)."""
    ranges = ranges or ValueRanges()
    shapes = dict(shapes or {})
    check_names("--input-shapes", list(shapes), metas)
    check_names("--val-range", list(ranges.per_input), metas)
    plan = GenerationPlan([], ranges)
    named = named_dims(metas, shapes)
    for meta in metas:
        shape, n = resolve_shape(meta, shapes, named)
        check_generated_size(meta.name, shape, meta.dtype)
        plan.notes.extend(n)
        plan.inputs.append((meta, shape))
    return plan


def generate_inputs(
    metas: Sequence[TensorMeta],
    *,
    iterations: int = 1,
    seed: Optional[int] = None,
    ranges: Optional[ValueRanges] = None,
    shapes: Optional[Mapping[str, tuple]] = None,
) -> Tuple[List[Dict[str, object]], List[str]]:
    """Generate ``iterations`` feeds for ``metas``; returns (feeds, notes)."""
    plan = plan_generation(metas, ranges=ranges, shapes=shapes)
    if iterations < 1:
        raise UsageError("--iterations must be at least 1")
    return list(plan.feeds(iterations, seed)), plan.notes


def _shape_matches(actual: tuple, expected) -> bool:
    if expected is None:
        return True
    if len(actual) != len(expected):
        return False
    return all(not isinstance(e, int) or a == e for a, e in zip(actual, expected))


def select_feed(
    feed: Mapping,
    metas: Sequence[TensorMeta],
    *,
    source: str,
    iteration: int,
    notes: Optional[List[str]] = None,
) -> Dict[str, object]:
    """Exactly the model's inputs from a loaded feed, checked (InputError on any mismatch).

    Only the tensors the model needs are read (lazy ``.npz`` members stay on disk). Two
    mismatches are mended, as the reference does, each with a one-line note (appended to
    ``notes``): a tensor whose name differs from the input's only in case is used for it,
    and a dtype that differs in a value-preserving way is cast (e.g. float64 saved by numpy
    for a float32 input). A cast that would change values (integers that do not fit,
    fractions into integers, overflow to infinity) stays an InputError.
    """

    keys = _feed_keys(feed, metas, source, iteration, notes)
    return {meta.name: _checked_input(feed, keys[meta.name], meta, source, iteration, notes) for meta in metas}


def _feed_keys(feed: Mapping, metas: Sequence[TensorMeta], source: str, iteration: int,
               notes: Optional[List[str]]) -> Dict[str, str]:
    """Model input name -> the feed's key for it (the same name, or one differing only in case);
    InputError naming the inputs the feed lacks."""
    keys = {m.name: m.name for m in metas if m.name in feed}
    _add_case_keys(keys, feed, metas, source, notes)
    missing = [m.name for m in metas if m.name not in keys]
    if missing:
        raise _missing_inputs(feed, missing, source, iteration)
    return keys


def _add_case_keys(keys: Dict[str, str], feed: Mapping, metas: Sequence[TensorMeta], source: str,
                   notes: Optional[List[str]]) -> None:
    """Into ``keys``: the inputs the feed lacks that it holds under a name differing only in case."""
    names = {m.name for m in metas}
    for m in metas:
        key = None if m.name in keys else _same_but_case(feed, m.name, names)
        if key is None:
            continue
        keys[m.name] = key
        if notes is not None:
            notes.append(f"{source}: tensor '{key}' is used for model input '{m.name}' (the names differ only in case)")


def _missing_inputs(feed: Mapping, missing: List[str], source: str, iteration: int) -> InputError:
    """The error of a feed that lacks the inputs ``missing``, naming what it holds."""
    have = list(feed)
    shown = ", ".join(have[:8]) + (f", ... ({len(have)} in all)" if len(have) > 8 else "")
    return InputError(
        f"{source}: iteration {iteration} has no tensor for model input(s) {', '.join(missing)}"
        f" (it has: {shown or 'nothing'})"
    )


def _same_but_case(feed: Mapping, name: str, names: Set[str]) -> Optional[str]:
    """The one key of ``feed`` that differs from ``name`` only in case (and is no other input's name)."""
    folded = [k for k in feed if isinstance(k, str) and k.lower() == name.lower()]
    return folded[0] if len(folded) == 1 and folded[0] not in names else None


def _checked_input(feed: Mapping, key: str, meta: TensorMeta, source: str, iteration: int,
                   notes: Optional[List[str]]):
    """The feed's array ``key`` for input ``meta``: native byte order, cast where values survive it,
    of a shape the model takes (InputError otherwise)."""
    early = tensor_header(feed, key)  # (from an .npy header: before any payload is read)
    if early is not None and not _shape_matches(early, meta.shape):
        raise _shape_mismatch(source, iteration, meta, early)
    arr = feed[key]
    if not isinstance(arr, np.ndarray):
        arr = np.asarray(arr)
    if not arr.dtype.isnative:  # (runtimes read the buffer as native: big-endian data would be garbage)
        arr = arr.astype(arr.dtype.newbyteorder("="))
    got_dtype = dtype_from_numpy(arr.dtype)
    if meta.dtype is not None and got_dtype != meta.dtype:
        arr = _cast_preserving(arr, meta, got_dtype, source, iteration, notes)
    if not _shape_matches(tuple(arr.shape), meta.shape):
        raise _shape_mismatch(source, iteration, meta, tuple(arr.shape))
    return arr


def _cast_loss(arr, cast) -> str:
    """What casting ``arr`` into ``cast`` (both numeric) would do to its values ('' when it keeps them)."""
    src = arr.dtype
    if cast.dtype.kind == "f":
        finite = np.isfinite(arr) if src.kind == "f" else np.ones(arr.shape, bool)
        if np.any(finite & ~np.isfinite(cast)):
            return "overflow to infinity"
        if src.kind in "iu" and not np.array_equal(cast.astype(src), arr):
            return "round integers that do not fit"
        return ""
    # integer or bool target: every value must come back exactly
    if src.kind == "f" and not np.all(np.isfinite(arr)):
        return "turn NaN or infinity into an integer"
    if not np.array_equal(cast.astype(src), arr):
        return "change values (fractions, or integers out of its range)"
    return ""


def _shape_mismatch(source: str, iteration: int, meta: TensorMeta, shape: tuple) -> InputError:
    return InputError(
        f"{source}: iteration {iteration}: input '{meta.name}' has shape {format_shape(shape)}, "
        f"but the model expects {format_meta(meta.name, meta.shape, meta.dtype)}"
    )


def _cast_preserving(arr, meta: TensorMeta, got_dtype: str, source: str, iteration: int, notes):
    """``arr`` cast to the input's dtype when that keeps its values; InputError otherwise."""

    def refuse(why: str):
        raise InputError(
            f"{source}: iteration {iteration}: input '{meta.name}' is {got_dtype}, but the model expects "
            f"{meta.dtype}, and casting it would {why}; convert the data yourself"
        )

    try:
        target = np.dtype(dtype_to_numpy(meta.dtype or ""))
    except ToolkitError:  # a dtype numpy cannot hold
        refuse("not be possible")
    src = arr.dtype
    numeric = "biuf"
    if src.kind not in numeric or target.kind not in numeric:
        refuse("not be possible")
    with np.errstate(all="ignore"):
        cast = arr.astype(target)
        loss = _cast_loss(arr, cast)
    if loss:
        refuse(loss)
    if notes is not None:
        notes.append(f"{source}: input '{meta.name}' is {got_dtype}; cast to {meta.dtype}, as the model expects")
    return cast

"""Options of the TensorRT runner that need no TensorRT: sizes, memory pools, profiles,
output selection, and :class:`TrtConfig` (what the command line asked for; its precision flags
are :class:`toolkit.core.shared_options.TrtPrecision`, which ``toolkit run`` declares too)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from toolkit.core.errors import InputError, UsageError  # noqa: F401  (InputError: select_outputs raises it)
from toolkit.core.graph.layerwise import choose_names
from toolkit.core.meta import TensorMeta, parse_shape_specs
from toolkit.core.meta import parse_size as _parse_size
from toolkit.core.shared_options import TrtPrecision

ENGINE_SUFFIXES = (".engine", ".plan", ".trt")

# TensorRT's MemoryPoolType members, lower case (the --pool-limit spellings).
POOL_NAMES = (
    "workspace",
    "dla_managed_sram",
    "dla_local_dram",
    "dla_global_dram",
    "tactic_dram",
    "tactic_shared_memory",
)

Shape = Tuple[int, ...]
Profile = Dict[str, Tuple[Shape, Shape, Shape]]  # input name -> (min, opt, max); values for shape-tensor inputs


def is_engine_path(path: str) -> bool:
    """True for a serialized TensorRT engine (``.engine``, ``.plan``, ``.trt``): loaded, not built."""
    return path != "-" and path.lower().endswith(ENGINE_SUFFIXES)


def parse_size(text: str) -> int:
    """``1G`` / ``512M`` / ``64KiB`` / ``1048576`` / ``2.5g`` -> bytes (powers of 1024), at least 1."""
    return _parse_size(text, minimum=1)


def parse_pool_limits(specs: Optional[Sequence[str]]) -> Dict[str, int]:
    """``["workspace:1G", "tactic_dram:512M"]`` -> ``{"workspace": 1073741824, ...}``."""
    out: Dict[str, int] = {}
    for spec in specs or ():
        if ":" not in spec:
            raise UsageError(f"bad --pool-limit '{spec}'; write pool:size, e.g. workspace:1G")
        pool, size = spec.split(":", 1)
        pool = pool.strip().lower()
        if pool not in POOL_NAMES:
            raise UsageError(f"unknown memory pool '{pool}' in --pool-limit; use one of: {', '.join(POOL_NAMES)}")
        out[pool] = parse_size(size)
    return out


def concrete(shape, what: str) -> Shape:
    if shape is None or any(not isinstance(d, int) or d < 0 for d in shape):
        from toolkit.core.meta import format_shape

        raise UsageError(f"{what} must be fixed non-negative integers, got {format_shape(shape)}")
    return tuple(int(d) for d in shape)


def build_profiles(
    mins: Sequence[Mapping[str, tuple]],
    opts: Sequence[Mapping[str, tuple]],
    maxs: Sequence[Mapping[str, tuple]],
) -> List[Profile]:
    """Pair the k-th occurrence of --trt-min/opt/max-shapes into profile k.

    Each argument holds one ``{name: shape}`` per occurrence of its flag. Within a profile
    a missing opt shape is the max shape (else the min shape), and a missing min or max is
    the opt shape, so ``--trt-opt-shapes x:[1,3,224,224]`` alone is one fixed profile.
    """
    n = max(len(mins), len(opts), len(maxs), 0)
    profiles: List[Profile] = []
    for k in range(n):
        lo = mins[k] if k < len(mins) else {}
        mid = opts[k] if k < len(opts) else {}
        hi = maxs[k] if k < len(maxs) else {}
        names = list(dict.fromkeys(list(mid) + list(lo) + list(hi)))
        profiles.append({name: _shape_range(k, name, lo, mid, hi) for name in names})
    return profiles


def _shape_range(k: int, name: str, lo: Mapping[str, tuple], mid: Mapping[str, tuple],
                 hi: Mapping[str, tuple]) -> Tuple[Shape, Shape, Shape]:
    """(min, opt, max) of input ``name`` in profile ``k``, the missing ones filled in, checked."""
    o = mid[name] if name in mid else (hi[name] if name in hi else lo[name])
    a = concrete(lo.get(name, o), f"profile {k}: min shape of '{name}'")
    o = concrete(o, f"profile {k}: opt shape of '{name}'")
    b = concrete(hi.get(name, o), f"profile {k}: max shape of '{name}'")
    if not (len(a) == len(o) == len(b)):
        raise UsageError(f"profile {k}: min/opt/max shapes of '{name}' have different ranks: {a}, {o}, {b}")
    if any(x > y for x, y in zip(a, o)) or any(x > y for x, y in zip(o, b)):
        raise UsageError(f"profile {k}: shapes of '{name}' must satisfy min <= opt <= max, got {a}, {o}, {b}")
    return a, o, b


def parse_profile_groups(
    mins: Optional[Sequence[Sequence[str]]],
    opts: Optional[Sequence[Sequence[str]]],
    maxs: Optional[Sequence[Sequence[str]]],
) -> List[Profile]:
    """Profiles from the spellings of --trt-min/opt/max-shapes: one list of ``name:shape`` per occurrence."""

    def parse(groups):
        return [parse_shape_specs(list(g)) for g in groups or ()]

    return build_profiles(parse(mins), parse(opts), parse(maxs))


def select_outputs(
    config: TrtConfig, candidates: Sequence[str], current: Sequence[str], known: Optional[Sequence[str]] = None
) -> List[str]:
    """The tensors the engine should return, as ``config`` asks (``--trt-outputs`` /
    ``--trt-exclude-outputs``; see :func:`toolkit.core.graph.layerwise.choose_names`).

    ``candidates``: layer outputs that ``mark all`` and globs choose from (network order);
    ``current``: the network's own outputs; ``known``: every name that may be named
    explicitly (default: candidates + current). No patterns keeps ``current``.
    """

    allowed = list(dict.fromkeys(list(candidates) + list(current)))
    return choose_names(
        allowed,
        current,
        config.mark_outputs,
        config.exclude_outputs,
        known=known if known is not None else allowed,
        option="--trt-outputs",
        exclude_option="--trt-exclude-outputs",
        where="the TensorRT network",
        unknown_hint=" (TensorRT keeps the ONNX names of node outputs)",
    )


@dataclass
class TrtConfig(TrtPrecision):
    """Builder and runner options (the command line's --fp16, --int8, --pool-limit, profiles, ...).

    ``fallback_shapes``: shapes (from --input-shapes) for dynamic inputs that no profile
    covers; ``sample_feeds``: loaded input feeds, whose shapes make the profile when none is
    given; ``calibration_data``: a callable taking the network's input metadata and
    returning the feeds to calibrate --int8 on (the run's inputs).
    """

    pool_limits: Dict[str, int] = field(default_factory=dict)
    profiles: List[Profile] = field(default_factory=list)
    fallback_shapes: Dict[str, tuple] = field(default_factory=dict)
    sample_feeds: Optional[Sequence[Mapping]] = None
    save_engine: Optional[str] = None
    calibration_cache: Optional[str] = None
    calibration_data: Optional[Callable[[List[TensorMeta]], Sequence[Mapping]]] = None
    mark_outputs: Optional[Sequence[str]] = None  # None: the model's outputs; ["mark", "all"] / ["*"]: every layer
    exclude_outputs: Sequence[str] = ()
    external_data_dir: Optional[str] = None
    # TensorRT 11 with --fp16/--bf16: convert(src, dtype, dst) writes the model in that precision
    # (default: toolkit convert); it may return a note replacing the default one. Tests give their own.
    converter: Optional[Callable[[str, str, str], Optional[str]]] = None

    def builder_options(self) -> List[str]:
        """The options given that only matter when an engine is built (for warnings)."""
        names = [f"--{f}" for f in ("fp16", "bf16", "int8", "tf32") if getattr(self, f)]
        if self.pool_limits:
            names.append("--pool-limit")
        if self.profiles:
            names.append("--trt-*-shapes")
        if self.save_engine:
            names.append("--save-engine")
        if self.calibration_cache:
            names.append("--calibration-cache")
        return names

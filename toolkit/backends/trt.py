"""The TensorRT runner (optional: ``pip install 'toolkit[trt]'``).

``tensorrt`` and ``cuda-python`` (device memory and streams) are imported only when the
runner is activated (or :func:`check_available` is called), never at module level: a
forked warm worker (``debug reduce``) must not hold a CUDA context before the fork, and
``toolkit --help`` must stay fast.

Without TensorRT, without cuda-python or without an NVIDIA GPU, activation raises
:class:`DependencyError` (exit code 4) with one sentence saying what is missing.

Only TensorRT 10+ APIs are used (named I/O tensors, ``set_input_shape``,
``set_tensor_address``, ``execute_async_v3``). The weak-typing builder flags (``--fp16``,
``--bf16``, ``--int8`` with a calibrator) exist in TensorRT 10 only; on TensorRT 11 they
are refused with a sentence saying so.

The parts that need no TensorRT (option parsing, profile building, output selection)
are plain functions, tested on CPU.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from toolkit.backends.base import Runner
from toolkit.core.errors import DependencyError, InputError, ToolkitError, UsageError
from toolkit.core.meta import TensorMeta
from toolkit.core.meta import parse_size as _parse_size

ENGINE_SUFFIXES = (".engine", ".plan", ".trt")
INSTALL_HINT = "install it with: pip install 'toolkit[trt]'"
MIN_TRT_MAJOR = 10

POOL_NAMES = (
    "workspace",
    "dla_managed_sram",
    "dla_local_dram",
    "dla_global_dram",
    "tactic_dram",
    "tactic_shared_memory",
)

# TensorRT DataType names -> toolkit dtype names (those numpy can hold, with ml_dtypes).
_TRT_DTYPES = {
    "FLOAT": "float32",
    "HALF": "float16",
    "BF16": "bfloat16",
    "INT8": "int8",
    "INT32": "int32",
    "INT64": "int64",
    "BOOL": "bool",
    "UINT8": "uint8",
    "FP8": "float8e4m3fn",
}

Shape = Tuple[int, ...]
Profile = Dict[str, Tuple[Shape, Shape, Shape]]  # input name -> (min, opt, max)


# ---------------------------------------------------------------------------- option parsing


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


def _concrete(shape, what: str) -> Shape:
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
        prof: Profile = {}
        for name in names:
            o = mid[name] if name in mid else (hi[name] if name in hi else lo[name])
            a = lo[name] if name in lo else o
            b = hi[name] if name in hi else o
            a = _concrete(a, f"profile {k}: min shape of '{name}'")
            o = _concrete(o, f"profile {k}: opt shape of '{name}'")
            b = _concrete(b, f"profile {k}: max shape of '{name}'")
            if not (len(a) == len(o) == len(b)):
                raise UsageError(f"profile {k}: min/opt/max shapes of '{name}' have different ranks: {a}, {o}, {b}")
            if any(x > y for x, y in zip(a, o)) or any(x > y for x, y in zip(o, b)):
                raise UsageError(f"profile {k}: shapes of '{name}' must satisfy min <= opt <= max, got {a}, {o}, {b}")
            prof[name] = (a, o, b)
        profiles.append(prof)
    return profiles


def parse_profile_groups(
    mins: Optional[Sequence[Sequence[str]]],
    opts: Optional[Sequence[Sequence[str]]],
    maxs: Optional[Sequence[Sequence[str]]],
) -> List[Profile]:
    """Profiles from the spellings of --trt-min/opt/max-shapes: one list of ``name:shape`` per occurrence."""
    from toolkit.core.meta import parse_shape_specs

    def parse(groups):
        return [parse_shape_specs(list(g)) for g in groups or ()]

    return build_profiles(parse(mins), parse(opts), parse(maxs))


def select_outputs(
    candidates: Sequence[str],
    current: Sequence[str],
    patterns: Optional[Sequence[str]],
    exclude: Optional[Sequence[str]] = None,
    known: Optional[Sequence[str]] = None,
) -> List[str]:
    """The tensors the engine should return (``--trt-outputs`` / ``--trt-exclude-outputs``).

    ``candidates``: layer outputs that ``mark all`` and globs choose from (network order);
    ``current``: the network's own outputs; ``known``: every name that may be named
    explicitly (default: candidates + current). No patterns keeps ``current``. Raises
    UsageError for an unknown name, a glob that matches nothing, or an empty result.
    """
    from toolkit.core.layerwise import choose_names

    allowed = list(dict.fromkeys(list(candidates) + list(current)))
    return choose_names(
        allowed,
        current,
        patterns,
        exclude,
        known=known if known is not None else allowed,
        option="--trt-outputs",
        exclude_option="--trt-exclude-outputs",
        where="the TensorRT network",
        unknown_hint=" (TensorRT keeps the ONNX names of node outputs)",
    )


@dataclass
class TrtConfig:
    """Builder and runner options (the command line's --fp16, --int8, --pool-limit, profiles, ...).

    ``fallback_shapes``: shapes (from --input-shapes) for dynamic inputs that no profile
    covers; ``sample_feeds``: loaded input feeds, whose shapes make the profile when none is
    given; ``calibration_data``: a callable taking the network's input metadata and
    returning the feeds to calibrate --int8 on (the run's inputs).
    """

    fp16: bool = False
    bf16: bool = False
    int8: bool = False
    tf32: bool = False
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


# ---------------------------------------------------------------------------- imports


def import_tensorrt():
    """``tensorrt``, or DependencyError (missing, broken or too old)."""
    try:
        import tensorrt as trt
    except ImportError:
        raise DependencyError(f"TensorRT is not installed; {INSTALL_HINT}") from None
    except Exception as exc:  # a broken install (missing libnvinfer, ...)
        raise DependencyError(
            f"TensorRT is installed but cannot be loaded ({_one_line(exc)}); "
            "reinstall it with: pip install --force-reinstall 'toolkit[trt]'"
        ) from None
    version = str(getattr(trt, "__version__", "0"))
    try:
        major = int(version.split(".")[0])
    except ValueError:
        major = 0
    if major < MIN_TRT_MAJOR:
        raise DependencyError(
            f"TensorRT {version} is too old (toolkit needs {MIN_TRT_MAJOR} or newer); "
            "upgrade it with: pip install -U 'toolkit[trt]'"
        )
    return trt


def import_cudart():
    """cuda-python's runtime module (``cuda.bindings.runtime``, or ``cuda.cudart`` before 12.6)."""
    try:
        from cuda.bindings import runtime as cudart  # cuda-python >= 12.6
    except ImportError:
        try:
            from cuda import cudart  # older cuda-python
        except ImportError:
            raise DependencyError(
                f"cuda-python (GPU memory for the TensorRT runner) is not installed; {INSTALL_HINT}"
            ) from None
    return cudart


def _err_name(err) -> str:
    return getattr(err, "name", None) or str(err)


def require_gpu(cudart) -> None:
    """DependencyError unless CUDA reports at least one device."""
    try:
        err, count = cudart.cudaGetDeviceCount()
    except Exception as exc:  # the driver library cannot be loaded
        raise DependencyError(
            f"no NVIDIA GPU is usable here ({_one_line(exc)}); --trt needs an NVIDIA GPU with its driver"
        ) from None
    if int(err) != 0:
        name = _err_name(err)
        if "InsufficientDriver" in name:
            raise DependencyError(
                f"no NVIDIA driver was found, or it is too old for this cuda-python ({name}); "
                "--trt needs an NVIDIA GPU with a driver as new as the CUDA version of cuda-python and TensorRT"
            )
        raise DependencyError(f"no NVIDIA GPU is usable here ({name}); --trt needs an NVIDIA GPU with its driver")
    if not count:
        raise DependencyError("no NVIDIA GPU found; --trt needs an NVIDIA GPU with its driver")


def check_available():
    """Import TensorRT and cuda-python and make sure a GPU is there; returns ``(trt, cudart)``.

    Touches the CUDA driver (``cudaGetDeviceCount``), so never call it in a process that
    will fork workers afterwards.
    """
    trt = import_tensorrt()
    cudart = import_cudart()
    require_gpu(cudart)
    return trt, cudart


def check_config(trt, config: TrtConfig) -> None:
    """DependencyError for builder options this TensorRT version no longer has (TensorRT 11)."""
    flags = getattr(trt, "BuilderFlag", None)
    version = getattr(trt, "__version__", "?")
    for opt, flag in (("fp16", "FP16"), ("bf16", "BF16")):
        if getattr(config, opt) and not hasattr(flags, flag):
            raise DependencyError(
                f"--{opt} needs TensorRT 10 (TensorRT {version} builds strongly typed networks only); "
                f"install it with: pip install 'tensorrt<11', or convert the model to {opt} first"
            )
    if config.int8 and not (hasattr(flags, "INT8") and hasattr(trt, "IInt8EntropyCalibrator2")):
        raise DependencyError(
            f"--int8 needs TensorRT 10 (TensorRT {version} has no INT8 calibration); "
            "install it with: pip install 'tensorrt<11', or use a model quantized with Q/DQ nodes"
        )


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text or type(exc).__name__


def _as_toolkit_error(exc: BaseException, what: str) -> ToolkitError:
    if isinstance(exc, ToolkitError):
        return exc
    return _inference_error(f"{what}: {_one_line(exc)}")


def _inference_error(message: str) -> ToolkitError:
    from toolkit.backends.onnxrt import InferenceError  # the run failed: exit code 1, FAILED line

    return InferenceError(message)


# ---------------------------------------------------------------------------- TensorRT helpers


def _make_logger(trt, sink: Callable[[str, str], None], verbose: bool = False):
    """A TensorRT logger that keeps errors (for our messages) and passes warnings to ``sink``."""

    class Logger(trt.ILogger):
        def __init__(self):
            trt.ILogger.__init__(self)
            self.errors: List[str] = []

        def log(self, severity, msg):
            try:
                level = int(severity)
                if level <= 1:  # INTERNAL_ERROR, ERROR
                    self.errors.append(" ".join(str(msg).split()))
                    sink("ERROR", str(msg))
                elif level == 2 or (verbose and level == 3):
                    sink("WARNING" if level == 2 else "INFO", str(msg))
            except Exception:  # noqa: BLE001 - nothing may raise into TensorRT
                pass

    return Logger()


def _dtype_name(trt_dtype, tensor: str) -> str:
    name = getattr(trt_dtype, "name", str(trt_dtype)).split(".")[-1]
    dt = _TRT_DTYPES.get(name)
    if dt is None:
        raise InputError(f"tensor '{tensor}' has TensorRT type {name}, which toolkit cannot hold in a numpy array")
    return dt


def _np_dtype(trt_dtype, tensor: str):
    from toolkit.core.meta import dtype_to_numpy

    return dtype_to_numpy(_dtype_name(trt_dtype, tensor))


def _dims(shape) -> tuple:
    return tuple(int(d) for d in shape)


def _format_parser_errors(parser) -> str:
    msgs = []
    for i in range(parser.num_errors):
        e = parser.get_error(i)
        where = ""
        try:
            index = int(e.node())
        except Exception:  # noqa: BLE001 - older parsers
            index = -1
        if index >= 0:
            name = op = ""
            try:
                name, op = e.node_name(), e.node_operator()
            except Exception:  # noqa: BLE001 - node_name/node_operator are TensorRT 10+
                pass
            where = f"node {index}"
            if name:
                where += f" '{name}'"
            if op:
                where += f" ({op})"
            where += ": "
        msgs.append(where + " ".join(str(e.desc()).split()))
    return "; ".join(dict.fromkeys(msgs))


def _layer_candidates(trt, network) -> List[str]:
    """Outputs of every layer that can be a network output (for ``mark all`` and globs).

    Leaves out Constant and Shape layers, layers inside loops (TensorRT cannot return
    them), shape tensors and network inputs.
    """
    kind = trt.LayerType
    loop_start = {getattr(kind, n) for n in ("TRIP_LIMIT", "ITERATOR", "RECURRENCE") if hasattr(kind, n)}
    loop_end = {getattr(kind, n) for n in ("LOOP_OUTPUT",) if hasattr(kind, n)}
    skip = {getattr(kind, n) for n in ("CONSTANT", "SHAPE") if hasattr(kind, n)}
    inputs = {network.get_input(i).name for i in range(network.num_inputs)}
    names: List[str] = []
    in_loop = False
    for li in range(network.num_layers):
        layer = network.get_layer(li)
        if layer.type in loop_start:
            in_loop = True
        elif layer.type in loop_end:
            in_loop = False  # the loop's outputs are outside it
        if in_loop or layer.type in skip:
            continue
        for oi in range(layer.num_outputs):
            t = layer.get_output(oi)
            if t is None or t.name in inputs or getattr(t, "is_shape_tensor", False):
                continue
            names.append(t.name)
    return names


def _has_qdq(trt, network) -> bool:
    kinds = {getattr(trt.LayerType, n) for n in ("QUANTIZE", "DEQUANTIZE") if hasattr(trt.LayerType, n)}
    return any(network.get_layer(i).type in kinds for i in range(network.num_layers))


def _all_layer_outputs(network) -> Dict[str, object]:
    tensors = {}
    for li in range(network.num_layers):
        layer = network.get_layer(li)
        for oi in range(layer.num_outputs):
            t = layer.get_output(oi)
            if t is not None:
                tensors.setdefault(t.name, t)
    return tensors


# ---------------------------------------------------------------------------- runner


class TrtRunner(Runner):
    """Builds a TensorRT engine from an ONNX model (or loads a serialized engine) and runs it.

    Args:
        model_path: an ONNX model (``-`` = stdin), or a ``.engine``/``.plan``/``.trt`` file.
        config: builder and runner options.
        on_message: receives TensorRT's messages as ``(severity, text)``; default: stderr.
    """

    name = "trt-runner"

    def __init__(
        self,
        model_path: str,
        config: Optional[TrtConfig] = None,
        *,
        name: Optional[str] = None,
        on_message: Optional[Callable[[str, str], None]] = None,
    ):
        super().__init__(name)
        self.model_path = model_path
        self.config = config or TrtConfig()
        self.on_message = on_message
        self.notes: List[str] = []
        self.built = False
        self._trt = None
        self._cudart = None
        self._logger = None
        self._runtime = None
        self._engine = None
        self._context = None
        self._stream = None
        self._allocator = None
        self._calibrator = None
        self._callback_error: Optional[ToolkitError] = None
        self._inputs: List[str] = []
        self._outputs: List[str] = []
        self._buffers: Dict[str, Tuple[int, int]] = {}  # name -> (device pointer, bytes)

    # ------------------------------------------------------------------ messages
    def _sink(self, severity: str, text: str) -> None:
        if self.on_message is not None:
            self.on_message(severity, text)
        else:
            sys.stderr.write(f"[TensorRT] {severity}: {text}\n")

    def _errors(self, default: str) -> str:
        errs = list(dict.fromkeys(self._logger.errors)) if self._logger is not None else []
        return "; ".join(errs[-3:]) or default

    # ------------------------------------------------------------------ build
    def _parse(self, trt, builder):
        from toolkit.core.model import check_readable_file, read_bytes

        network = builder.create_network(0)  # explicit batch is the only mode since TensorRT 10
        parser = trt.OnnxParser(network, self._logger)
        ext_dir = self.config.external_data_dir
        if self.model_path == "-" or ext_dir:
            data = read_bytes(self.model_path)
            base = ext_dir or os.getcwd()
            if ext_dir and not os.path.isdir(ext_dir):
                raise InputError(f"{ext_dir}: external data folder does not exist")
            shown = os.path.basename(self.model_path) if self.model_path != "-" else "model.onnx"
            ok = parser.parse(data, os.path.join(os.path.abspath(base), shown))
            del data
        else:
            check_readable_file(self.model_path)
            ok = parser.parse_from_file(os.path.abspath(self.model_path))
        if not ok:
            from toolkit.core.model import describe

            detail = _format_parser_errors(parser) or self._errors("unknown parser error")
            raise InputError(f"{describe(self.model_path)}: TensorRT cannot parse the model: {detail}")
        return network, parser

    def _select_outputs(self, trt, network) -> None:
        c = self.config
        if not c.mark_outputs and not c.exclude_outputs:
            return
        current = [network.get_output(i).name for i in range(network.num_outputs)]
        tensors = _all_layer_outputs(network)
        candidates = _layer_candidates(trt, network) if c.mark_outputs else []
        chosen = select_outputs(candidates, current, c.mark_outputs, c.exclude_outputs, known=list(tensors) + current)
        keep = set(chosen)
        for i in reversed(range(network.num_outputs)):
            t = network.get_output(i)
            if t.name not in keep:
                network.unmark_output(t)
        marked = {network.get_output(i).name for i in range(network.num_outputs)}
        for name in chosen:
            if name not in marked:
                network.mark_output(tensors[name])
                marked.add(name)

    def _network_metas(self, network) -> List[TensorMeta]:
        metas = []
        for i in range(network.num_inputs):
            t = network.get_input(i)
            shape = tuple(None if d < 0 else int(d) for d in t.shape)
            metas.append(TensorMeta(t.name, shape, _dtype_name(t.dtype, t.name)))
        return metas

    def _fallback_shape(self, meta: TensorMeta) -> Shape:
        """The fixed shape of a dynamic input that no profile covers."""
        from toolkit.core.meta import format_shape

        feeds = self.config.sample_feeds
        if feeds:
            shapes = [tuple(f[meta.name].shape) for f in feeds if meta.name in f]
            if shapes and all(len(s) == len(meta.shape) for s in shapes):
                return shapes[0]
        given = self.config.fallback_shapes.get(meta.name)
        if given is not None:
            if len(given) != len(meta.shape) or any(
                g != d for g, d in zip(given, meta.shape) if isinstance(d, int)
            ):
                raise UsageError(
                    f"--input-shapes gives '{meta.name}' shape {format_shape(given)}, "
                    f"which does not fit the network's {format_shape(meta.shape)}"
                )
            return _concrete(given, f"--input-shapes for '{meta.name}'")
        shape = tuple(d if isinstance(d, int) else 1 for d in meta.shape)
        self.notes.append(
            f"input '{meta.name}' has dynamic shape {format_shape(meta.shape)} and no profile; building for "
            f"{format_shape(shape)} (set it with --trt-opt-shapes or --input-shapes)"
        )
        return shape

    def _profile_ranges(self, metas: List[TensorMeta]) -> Dict[str, Tuple[Shape, Shape, Shape]]:
        """min/opt/max for a dynamic input taken from the loaded feeds (covers every iteration)."""
        out = {}
        feeds = self.config.sample_feeds or ()
        for meta in metas:
            shapes = [tuple(f[meta.name].shape) for f in feeds if meta.name in f]
            if not shapes or any(len(s) != len(meta.shape) for s in shapes):
                continue
            lo = tuple(min(s[i] for s in shapes) for i in range(len(meta.shape)))
            hi = tuple(max(s[i] for s in shapes) for i in range(len(meta.shape)))
            out[meta.name] = (lo, shapes[0], hi)
        return out

    def _profiles(self, metas: List[TensorMeta]) -> List[Profile]:
        """The optimization profiles to build: the user's, else one from the data / --input-shapes."""
        dynamic = [m for m in metas if any(not isinstance(d, int) for d in m.shape)]
        by_name = {m.name: m for m in metas}
        profiles = [dict(p) for p in self.config.profiles]
        for k, prof in enumerate(profiles):
            for name, (lo, mid, hi) in prof.items():
                meta = by_name.get(name)
                if meta is None:
                    raise UsageError(
                        f"profile {k} names '{name}', which is not an input of the network; "
                        f"inputs: {', '.join(by_name)}"
                    )
                if len(lo) != len(meta.shape) or any(
                    isinstance(d, int) and not (a == d == b) for a, b, d in zip(lo, hi, meta.shape)
                ):
                    from toolkit.core.meta import format_shape

                    raise UsageError(
                        f"profile {k}: shapes of '{name}' ({lo} .. {hi}) do not fit the network's "
                        f"{format_shape(meta.shape)}"
                    )
        if not dynamic:
            if profiles:
                self.notes.append("--trt-*-shapes ignored: the network has no dynamic inputs")
            return []
        if not profiles:
            profiles = [{}]
        ranges = self._profile_ranges(dynamic) if self.config.sample_feeds else {}
        for prof in profiles:
            for meta in dynamic:
                if meta.name not in prof:
                    if meta.name in ranges:
                        prof[meta.name] = ranges[meta.name]
                    else:
                        shape = self._fallback_shape(meta)
                        prof[meta.name] = (shape, shape, shape)
        return profiles

    def _builder_config(self, trt, builder, network):
        c = self.config
        cfg = builder.create_builder_config()
        if c.fp16:
            cfg.set_flag(trt.BuilderFlag.FP16)
        if c.bf16:
            cfg.set_flag(trt.BuilderFlag.BF16)
        if hasattr(trt.BuilderFlag, "TF32"):
            if c.tf32:
                cfg.set_flag(trt.BuilderFlag.TF32)
            else:  # TensorRT enables TF32 by default; toolkit compares accuracy, so it is opt-in
                cfg.clear_flag(trt.BuilderFlag.TF32)
        elif c.tf32:
            self.notes.append("--tf32 ignored: this TensorRT version has no TF32 builder flag")
        for pool, size in c.pool_limits.items():
            kind = getattr(trt.MemoryPoolType, pool.upper(), None)
            if kind is None:
                raise DependencyError(f"this TensorRT version has no memory pool '{pool}'")
            cfg.set_memory_pool_limit(kind, size)
        metas = self._network_metas(network)
        self._profile_list = self._profiles(metas)
        trt_profiles = []
        for prof in self._profile_list:
            p = builder.create_optimization_profile()
            for name, (lo, mid, hi) in prof.items():
                p.set_shape(name, lo, mid, hi)
            cfg.add_optimization_profile(p)
            trt_profiles.append(p)
        if c.int8:
            cfg.set_flag(trt.BuilderFlag.INT8)
            if _has_qdq(trt, network):
                self.notes.append("the model holds Q/DQ nodes: --int8 uses their scales, nothing is calibrated")
                return cfg
            self._calibrator = _Calibrator.create(trt, self._cudart, metas, c, self.notes)
            if self._calibrator.profile_shapes and any(any(not isinstance(d, int) for d in m.shape) for m in metas):
                p = builder.create_optimization_profile()
                for name, shape in self._calibrator.profile_shapes.items():
                    p.set_shape(name, shape, shape, shape)
                cfg.set_calibration_profile(p)
            cfg.int8_calibrator = self._calibrator.impl
        return cfg

    def _build_engine(self, trt) -> bytes:
        self._logger.errors.clear()
        builder = trt.Builder(self._logger)
        if builder is None:
            raise _inference_error(f"TensorRT cannot create a builder: {self._errors('no details')}")
        network, _parser = self._parse(trt, builder)
        self._select_outputs(trt, network)
        cfg = self._builder_config(trt, builder, network)
        try:
            blob = builder.build_serialized_network(network, cfg)
        finally:
            if self._calibrator is not None:
                self._calibrator.free()
        if self._calibrator is not None and self._calibrator.error is not None:
            raise self._calibrator.error
        if blob is None:
            raise _inference_error(f"TensorRT could not build an engine: {self._errors('see the messages above')}")
        data = bytes(blob)
        del blob
        self.built = True
        if self.config.save_engine:
            from toolkit.core.model import write_bytes_atomic

            write_bytes_atomic(self.config.save_engine, data)
        return data

    # ------------------------------------------------------------------ lifecycle
    def _activate(self) -> None:
        trt, cudart = check_available()
        self._trt, self._cudart = trt, cudart
        self._logger = _make_logger(trt, self._sink, verbose=bool(os.environ.get("TOOLKIT_TRT_VERBOSE")))
        try:
            if is_engine_path(self.model_path):
                from toolkit.core.model import read_bytes

                ignored = self.config.builder_options()
                if self.config.mark_outputs or self.config.exclude_outputs:
                    raise UsageError(
                        f"{self.model_path} is a built engine, whose outputs are fixed; "
                        "--trt-outputs needs the ONNX model"
                    )
                if ignored:
                    self.notes.append(f"{', '.join(ignored)} ignored: {self.model_path} is a built engine")
                data = read_bytes(self.model_path)
                if not data:
                    raise InputError(f"{self.model_path}: empty file, expected a TensorRT engine")
            else:
                check_config(trt, self.config)
                data = self._build_engine(trt)
            self._runtime = trt.Runtime(self._logger)
            self._engine = self._runtime.deserialize_cuda_engine(data)
            del data
            if self._engine is None:
                if self.built:
                    raise _inference_error(f"TensorRT cannot load the engine it built: {self._errors('no details')}")
                raise InputError(
                    f"{self.model_path}: not a TensorRT engine for this TensorRT version and GPU "
                    f"({self._errors('deserialization failed')}); engines only load with the TensorRT "
                    "version that built them"
                )
            self._context = self._engine.create_execution_context()
            if self._context is None:
                raise _inference_error(f"TensorRT cannot create an execution context: {self._errors('out of memory?')}")
            eng = self._engine
            names = [eng.get_tensor_name(i) for i in range(eng.num_io_tensors)]
            self._inputs = [n for n in names if eng.get_tensor_mode(n) == trt.TensorIOMode.INPUT]
            self._outputs = [n for n in names if eng.get_tensor_mode(n) == trt.TensorIOMode.OUTPUT]
            self._stream = self._cuda(cudart.cudaStreamCreate(), "cudaStreamCreate")
        except BaseException:
            self._release()
            raise

    def _deactivate(self) -> None:
        self._release()

    def _release(self) -> None:
        cudart = self._cudart
        if cudart is not None and self._stream is not None:
            cudart.cudaStreamSynchronize(self._stream)
        self._context = None
        self._engine = None
        self._runtime = None
        self._allocator = None
        if cudart is not None:
            for ptr, _n in self._buffers.values():
                cudart.cudaFree(ptr)
            if self._stream is not None:
                cudart.cudaStreamDestroy(self._stream)
        if self._calibrator is not None:
            self._calibrator.free()
            self._calibrator = None
        self._buffers.clear()
        self._stream = None

    # ------------------------------------------------------------------ queries
    def input_metadata(self) -> List[TensorMeta]:
        eng = self._engine
        metas = []
        for name in self._inputs:
            shape = tuple(None if d < 0 else int(d) for d in eng.get_tensor_shape(name))
            metas.append(TensorMeta(name, shape, _dtype_name(eng.get_tensor_dtype(name), name)))
        return metas

    def preferred_shapes(self) -> Dict[str, tuple]:
        """The opt shapes of profile 0 for the dynamic inputs (what generated data should use)."""
        eng = self._engine
        out = {}
        for name in self._inputs:
            if any(d < 0 for d in eng.get_tensor_shape(name)) and not eng.is_shape_inference_io(name):
                try:
                    _lo, opt, _hi = eng.get_tensor_profile_shape(name, 0)
                except Exception:  # noqa: BLE001 - no profile
                    continue
                out[name] = _dims(opt)
        return out

    def output_names(self) -> List[str]:
        return list(self._outputs)

    def summary(self) -> str:
        flags = [f for f in ("fp16", "bf16", "int8", "tf32") if getattr(self.config, f)] if self.built else []
        how = "engine built from the ONNX model" if self.built else f"engine loaded from {self.model_path}"
        extra = f" ({', '.join(flags)})" if flags else ""
        n = getattr(self._engine, "num_optimization_profiles", 0) or 0
        prof = f", {n} profile(s)" if n > 1 else ""
        return f"TensorRT {getattr(self._trt, '__version__', '?')} {how}{extra}{prof}"

    # ------------------------------------------------------------------ inference
    def _cuda(self, result, what: str):
        """Unpack a cuda-python result ``(err, *values)``; InferenceError on failure."""
        err = result[0]
        if int(err) != 0:
            raise _inference_error(f"CUDA call {what} failed ({_err_name(err)})")
        values = result[1:]
        if not values:
            return None
        return values[0] if len(values) == 1 else values

    def _buffer(self, name: str, nbytes: int) -> int:
        ptr, size = self._buffers.get(name, (None, 0))
        if ptr is None or size < nbytes:
            if ptr is not None:
                self._cudart.cudaFree(ptr)
                del self._buffers[name]
            size = max(int(nbytes), 1)
            ptr = int(self._cuda(self._cudart.cudaMalloc(size), "cudaMalloc"))
            self._buffers[name] = (ptr, size)
        return ptr

    def _profile_text(self, name: str) -> str:
        try:
            lo, opt, hi = self._engine.get_tensor_profile_shape(name, 0)
            return f"min {_dims(lo)}, opt {_dims(opt)}, max {_dims(hi)}"
        except Exception:  # noqa: BLE001
            return "see the engine's profile"

    def _infer(self, feed: Mapping) -> Dict[str, object]:
        import numpy as np

        trt, cudart, ctx, eng = self._trt, self._cudart, self._context, self._engine
        h2d = cudart.cudaMemcpyKind.cudaMemcpyHostToDevice
        d2h = cudart.cudaMemcpyKind.cudaMemcpyDeviceToHost
        stream = self._stream
        hosts = []  # keep the host arrays alive until the copies are done
        for name in self._inputs:
            arr = np.ascontiguousarray(feed[name])
            hosts.append(arr)
            if any(d < 0 for d in eng.get_tensor_shape(name)):
                if not ctx.set_input_shape(name, tuple(arr.shape)):
                    raise InputError(
                        f"input '{name}' has shape {tuple(arr.shape)}, outside the engine's profile "
                        f"({self._profile_text(name)}); build with --trt-min-shapes/--trt-max-shapes that cover it"
                    )
            if eng.is_shape_inference_io(name):  # shape tensors are read from host memory
                ctx.set_tensor_address(name, arr.ctypes.data)
                continue
            ptr = self._buffer(name, arr.nbytes)
            if arr.nbytes:
                self._cuda(cudart.cudaMemcpyAsync(ptr, arr.ctypes.data, arr.nbytes, h2d, stream), "cudaMemcpyAsync")
            ctx.set_tensor_address(name, ptr)
        shapes: Dict[str, tuple] = {}
        for name in self._outputs:
            shape = _dims(ctx.get_tensor_shape(name))
            if any(d < 0 for d in shape):  # data-dependent: TensorRT asks for memory while it runs
                if self._allocator is None:
                    self._allocator = _make_output_allocator(trt, self)
                ctx.set_output_allocator(name, self._allocator)
            else:
                dtype = _np_dtype(eng.get_tensor_dtype(name), name)
                nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
                ctx.set_tensor_address(name, self._buffer(name, nbytes))
                shapes[name] = shape
        self._logger.errors.clear()
        self._callback_error = None
        start = time.perf_counter()
        ok = ctx.execute_async_v3(int(stream))
        if self._callback_error is not None:
            raise self._callback_error
        if not ok:
            raise _inference_error(f"{self.name}: inference failed: {self._errors('execute_async_v3 returned false')}")
        self._cuda(cudart.cudaStreamSynchronize(stream), "cudaStreamSynchronize")
        self.last_inference_time = time.perf_counter() - start
        outputs: Dict[str, object] = {}
        for name in self._outputs:
            shape = shapes.get(name)
            if shape is None:
                shape = self._allocator.shapes.get(name) if self._allocator is not None else None
                if shape is None:
                    raise _inference_error(f"{self.name}: TensorRT reported no shape for output '{name}'")
            arr = np.empty(shape, dtype=_np_dtype(eng.get_tensor_dtype(name), name))
            if arr.nbytes:
                ptr, _ = self._buffers[name]
                self._cuda(cudart.cudaMemcpyAsync(arr.ctypes.data, ptr, arr.nbytes, d2h, stream), "cudaMemcpyAsync")
            outputs[name] = arr
        self._cuda(cudart.cudaStreamSynchronize(stream), "cudaStreamSynchronize")
        del hosts
        return outputs


def _make_output_allocator(trt, runner: TrtRunner):
    """Device memory for outputs whose shape is known only while the engine runs (NonZero, ...)."""

    class OutputAllocator(trt.IOutputAllocator):
        def __init__(self):
            trt.IOutputAllocator.__init__(self)
            self.shapes: Dict[str, tuple] = {}

        def reallocate_output(self, tensor_name, memory, size, alignment):
            try:
                return runner._buffer(tensor_name, size)
            except ToolkitError as exc:  # must not cross into TensorRT; None tells it allocation failed
                runner._callback_error = runner._callback_error or exc
                return None

        def reallocate_output_async(self, tensor_name, memory, size, alignment, stream):
            return self.reallocate_output(tensor_name, memory, size, alignment)

        def notify_shape(self, tensor_name, shape):
            self.shapes[tensor_name] = _dims(shape)

    return OutputAllocator()


class _Calibrator:
    """An entropy calibrator (TensorRT 10) fed from the run's inputs, with --calibration-cache."""

    def __init__(self):
        self.impl = None
        self.error: Optional[ToolkitError] = None
        self.profile_shapes: Dict[str, Shape] = {}
        self._cudart = None
        self._ptrs: Dict[str, Tuple[int, int]] = {}

    @classmethod
    def create(cls, trt, cudart, metas: List[TensorMeta], config: TrtConfig, notes: List[str]) -> "_Calibrator":
        import numpy as np

        self = cls()
        self._cudart = cudart
        cache_path = config.calibration_cache
        have_cache = bool(cache_path and os.path.isfile(cache_path))
        feeds: List[Mapping] = []
        if config.calibration_data is not None:
            feeds = list(config.calibration_data(metas) or [])
        if not feeds and not have_cache:
            raise UsageError("--int8 needs calibration data: the run's inputs, or an existing --calibration-cache")
        if feeds:
            first = {m.name: tuple(np.shape(feeds[0][m.name])) for m in metas}
            usable = [f for f in feeds if all(tuple(np.shape(f[m.name])) == first[m.name] for m in metas)]
            if len(usable) < len(feeds):
                notes.append(
                    f"--int8 calibrates on {len(usable)} of {len(feeds)} iteration(s): those with the first one's shapes"
                )
            feeds = usable
            self.profile_shapes = first
        names = [m.name for m in metas]
        outer = self

        class Calibrator(trt.IInt8EntropyCalibrator2):
            def __init__(inner):
                trt.IInt8EntropyCalibrator2.__init__(inner)
                inner._it = iter(feeds)

            def get_batch_size(inner):
                return 1

            # Exceptions must not cross into TensorRT: keep the first one, raise it after the build.
            def get_batch(inner, batch_names, *_args):
                try:
                    feed = next(inner._it)
                except StopIteration:
                    return None
                try:
                    ptrs = []
                    for name in batch_names or names:
                        arr = np.ascontiguousarray(feed[name])
                        ptr = outer._device(name, arr.nbytes)
                        err = cudart.cudaMemcpy(
                            ptr, arr.ctypes.data, arr.nbytes, cudart.cudaMemcpyKind.cudaMemcpyHostToDevice
                        )[0]
                        if int(err) != 0:
                            raise _inference_error(f"CUDA call cudaMemcpy failed ({_err_name(err)}) during INT8 calibration")
                        ptrs.append(ptr)
                    return ptrs
                except Exception as exc:  # noqa: BLE001
                    outer.error = outer.error or _as_toolkit_error(exc, "INT8 calibration failed")
                    return None

            def read_calibration_cache(inner):
                if not have_cache:
                    return None
                try:
                    with open(cache_path, "rb") as f:
                        return f.read()
                except OSError as exc:
                    outer.error = outer.error or InputError(f"{cache_path}: cannot read: {exc.strerror or exc}")
                    return None

            def write_calibration_cache(inner, cache):
                if not cache_path:
                    return
                try:
                    from toolkit.core.model import write_bytes_atomic

                    write_bytes_atomic(cache_path, bytes(cache))
                except Exception as exc:  # noqa: BLE001
                    outer.error = outer.error or _as_toolkit_error(exc, f"{cache_path}: cannot write the calibration cache")

        self.impl = Calibrator()
        return self

    def _device(self, name: str, nbytes: int) -> int:
        ptr, size = self._ptrs.get(name, (None, 0))
        if ptr is None or size < nbytes:
            if ptr is not None:
                self._cudart.cudaFree(ptr)
            err, ptr = self._cudart.cudaMalloc(max(int(nbytes), 1))
            if int(err) != 0:
                raise _inference_error(f"CUDA call cudaMalloc failed ({_err_name(err)}) during INT8 calibration")
            ptr = int(ptr)
            self._ptrs[name] = (ptr, max(int(nbytes), 1))
        return ptr

    def free(self) -> None:
        if self._cudart is not None:
            for ptr, _n in self._ptrs.values():
                self._cudart.cudaFree(ptr)
        self._ptrs.clear()

"""The TensorRT runner (optional: ``pip install 'toolkit[trt]'``).

``tensorrt`` and ``cuda-python`` (device memory and streams) are imported only when the
runner is activated, never at module level: a forked warm worker (``debug reduce``) must
not hold a CUDA context before the fork, and ``toolkit --help`` must stay fast.

Without TensorRT, without cuda-python or without an NVIDIA GPU, activation raises
:class:`DependencyError` (exit code 4) with one sentence saying what is missing.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from toolkit.backends.base import Runner
from toolkit.core.errors import DependencyError, ExitCode, InputError, ToolkitError, UsageError
from toolkit.core.meta import TensorMeta

ENGINE_SUFFIXES = (".engine", ".plan", ".trt")
INSTALL_HINT = "install it with: pip install 'toolkit[trt]'"

_UNITS = {"": 1, "b": 1, "k": 2**10, "kb": 2**10, "m": 2**20, "mb": 2**20, "g": 2**30, "gb": 2**30}
POOL_NAMES = ("workspace", "dla_managed_sram", "dla_local_dram", "dla_global_dram", "tactic_dram", "tactic_shared_memory")


def is_engine_path(path: str) -> bool:
    return path.lower().endswith(ENGINE_SUFFIXES)


def parse_size(text: str) -> int:
    """``1G`` / ``512M`` / ``1048576`` / ``2.5g`` -> bytes."""
    s = text.strip().lower()
    num = s.rstrip("kmgb")
    unit = s[len(num) :]
    if unit not in _UNITS or not num:
        raise UsageError(f"bad size '{text}'; write e.g. 1G, 512M or 1048576")
    try:
        value = float(num) * _UNITS[unit]
    except ValueError:
        raise UsageError(f"bad size '{text}'; write e.g. 1G, 512M or 1048576") from None
    if value <= 0:
        raise UsageError(f"size '{text}' must be positive")
    return int(value)


def parse_pool_limits(specs: Sequence[str]) -> Dict[str, int]:
    """``["workspace:1G", "tactic_dram:512M"]`` -> ``{"workspace": 1073741824, ...}``."""
    out = {}
    for spec in specs or ():
        if ":" not in spec:
            raise UsageError(f"bad --pool-limit '{spec}'; write pool:size, e.g. workspace:1G")
        pool, size = spec.split(":", 1)
        pool = pool.strip().lower()
        if pool not in POOL_NAMES:
            raise UsageError(f"unknown memory pool '{pool}'; use one of: {', '.join(POOL_NAMES)}")
        out[pool] = parse_size(size)
    return out


Profile = Dict[str, Tuple[tuple, tuple, tuple]]  # name -> (min, opt, max)


def build_profiles(mins: Sequence[dict], opts: Sequence[dict], maxs: Sequence[dict]) -> List[Profile]:
    """Pair the k-th occurrence of --trt-min/opt/max-shapes into profile k.

    Each argument is a list (one entry per occurrence of the flag) of {name: shape}. A
    missing min or max defaults to opt (and the other way round), so one flag is enough
    for a fixed shape.
    """
    n = max(len(mins), len(opts), len(maxs), 0)
    profiles = []
    for k in range(n):
        lo = mins[k] if k < len(mins) else {}
        mid = opts[k] if k < len(opts) else {}
        hi = maxs[k] if k < len(maxs) else {}
        names = list(dict.fromkeys(list(lo) + list(mid) + list(hi)))
        prof = {}
        for name in names:
            o = mid.get(name) or hi.get(name) or lo.get(name)
            a = lo.get(name, o)
            b = hi.get(name, o)
            for label, shp in (("min", a), ("opt", o), ("max", b)):
                if shp is None or any(not isinstance(d, int) or d < 0 for d in shp):
                    raise UsageError(f"profile {k}: {label} shape of '{name}' must be fixed integers, got {shp}")
            if not (len(a) == len(o) == len(b)):
                raise UsageError(f"profile {k}: min/opt/max shapes of '{name}' have different ranks")
            if any(x > y for x, y in zip(a, o)) or any(x > y for x, y in zip(o, b)):
                raise UsageError(f"profile {k}: shapes of '{name}' must satisfy min <= opt <= max")
            prof[name] = (tuple(a), tuple(o), tuple(b))
        profiles.append(prof)
    return profiles


@dataclass
class TrtConfig:
    """Builder options (the command line's --fp16, --int8, --pool-limit, profiles, ...)."""

    fp16: bool = False
    bf16: bool = False
    int8: bool = False
    tf32: bool = False
    pool_limits: Dict[str, int] = field(default_factory=dict)
    profiles: List[Profile] = field(default_factory=list)
    save_engine: Optional[str] = None
    calibration_cache: Optional[str] = None
    calibration_data: Optional[Iterable[Mapping]] = None
    mark_outputs: Optional[Sequence[str]] = None  # None: model outputs; ["*"] or ["mark", "all"]: every layer
    exclude_outputs: Sequence[str] = ()


# ---------------------------------------------------------------------------- imports


def import_tensorrt():
    try:
        import tensorrt as trt
    except ImportError:
        raise DependencyError(f"TensorRT is not installed; {INSTALL_HINT}") from None
    except Exception as exc:  # a broken install (missing libnvinfer, ...)
        raise DependencyError(f"TensorRT could not be loaded ({exc}); reinstall it with: pip install 'toolkit[trt]'") from None
    return trt


def import_cudart():
    try:
        from cuda.bindings import runtime as cudart  # cuda-python >= 12.6
    except ImportError:
        try:
            from cuda import cudart  # older cuda-python
        except ImportError:
            raise DependencyError(f"cuda-python (device memory for TensorRT) is not installed; {INSTALL_HINT}") from None
    return cudart


def _check(result, what: str):
    """Unpack a cuda-python call result ``(err, *values)``; raise on error."""
    err = result[0]
    if int(err) != 0:
        raise DependencyError(f"CUDA call {what} failed ({err}); is an NVIDIA GPU with a working driver present?")
    values = result[1:]
    if not values:
        return None
    return values[0] if len(values) == 1 else values


def require_gpu(cudart) -> None:
    try:
        err, count = cudart.cudaGetDeviceCount()
    except Exception as exc:  # driver library missing
        raise DependencyError(f"no NVIDIA GPU is usable here ({exc}); --trt needs a GPU with a CUDA driver") from None
    if int(err) != 0 or count == 0:
        raise DependencyError("no NVIDIA GPU found; --trt needs a GPU with a CUDA driver")


# ---------------------------------------------------------------------------- runner


class _Logger:
    """A TensorRT logger that keeps errors for our messages and prints warnings to stderr."""

    def __init__(self, trt, verbose: bool = False):
        import sys

        class L(trt.ILogger):
            def __init__(inner):
                trt.ILogger.__init__(inner)
                inner.errors = []

            def log(inner, severity, msg):
                if severity <= trt.ILogger.Severity.ERROR:
                    inner.errors.append(msg)
                if severity <= trt.ILogger.Severity.WARNING or verbose:
                    sys.stderr.write(f"[TensorRT] {msg}\n")

        self.impl = L()


class TrtRunner(Runner):
    """Builds (or loads) a TensorRT engine and runs it."""

    name = "trt-runner"

    def __init__(self, model_path: str, config: Optional[TrtConfig] = None, *, name: Optional[str] = None):
        super().__init__(name)
        self.model_path = model_path
        self.config = config or TrtConfig()
        self._engine = None
        self._context = None
        self._stream = None
        self._buffers: Dict[str, Tuple[int, int]] = {}  # name -> (device ptr, nbytes)

    # ------------------------------------------------------------------ build
    def _parse(self, trt, builder, logger):
        flags = 0
        if hasattr(trt.NetworkDefinitionCreationFlag, "EXPLICIT_BATCH"):
            flags = 1 << int(trt.NetworkDefinitionCreationFlag.EXPLICIT_BATCH)
        network = builder.create_network(flags)
        parser = trt.OnnxParser(network, logger.impl)
        path = os.path.abspath(self.model_path)
        ok = parser.parse_from_file(path)
        if not ok:
            msgs = []
            for i in range(parser.num_errors):
                e = parser.get_error(i)
                node = ""
                try:
                    node = f"node {e.node()} ({e.node_name()}, {e.node_operator()}): "
                except Exception:
                    try:
                        node = f"node {e.node()}: "
                    except Exception:
                        pass
                msgs.append(f"{node}{e.desc()}")
            detail = "; ".join(msgs) or "; ".join(logger.impl.errors) or "unknown parser error"
            raise InputError(f"{self.model_path}: TensorRT cannot parse the model: {detail}")
        self._mark_outputs(trt, network)
        return network, parser

    def _mark_outputs(self, trt, network) -> None:
        marks = self.config.mark_outputs
        if not marks:
            return
        import fnmatch

        words = [m for m in marks]
        everything = words in (["mark", "all"], ["all"], ["*"])
        existing = {network.get_output(i).name for i in range(network.num_outputs)}
        excluded = set(self.config.exclude_outputs or ())
        for li in range(network.num_layers):
            layer = network.get_layer(li)
            if layer.type == trt.LayerType.CONSTANT:
                continue
            for oi in range(layer.num_outputs):
                t = layer.get_output(oi)
                if t is None or t.name in existing or t.name in excluded:
                    continue
                if getattr(t, "is_shape_tensor", False):
                    continue
                if everything or any(fnmatch.fnmatchcase(t.name, p) for p in words):
                    network.mark_output(t)
                    existing.add(t.name)

    def _builder_config(self, trt, builder, network):
        cfg = builder.create_builder_config()
        c = self.config
        if c.fp16:
            cfg.set_flag(trt.BuilderFlag.FP16)
        if c.bf16:
            if not hasattr(trt.BuilderFlag, "BF16"):
                raise DependencyError("this TensorRT version has no bf16 support; upgrade TensorRT")
            cfg.set_flag(trt.BuilderFlag.BF16)
        if not c.tf32 and hasattr(trt.BuilderFlag, "TF32"):
            cfg.clear_flag(trt.BuilderFlag.TF32)
        for pool, size in c.pool_limits.items():
            cfg.set_memory_pool_limit(getattr(trt.MemoryPoolType, pool.upper()), size)
        self._add_profiles(trt, builder, network, cfg)
        if c.int8:
            cfg.set_flag(trt.BuilderFlag.INT8)
            cfg.int8_calibrator = _make_calibrator(trt, import_cudart(), network, c)
        return cfg

    def _add_profiles(self, trt, builder, network, cfg) -> None:
        profiles = list(self.config.profiles)
        dynamic = []
        for i in range(network.num_inputs):
            t = network.get_input(i)
            if any(d < 0 for d in t.shape):
                dynamic.append(t)
        if not profiles and dynamic:
            names = ", ".join(f"{t.name}{tuple(t.shape)}" for t in dynamic)
            raise UsageError(
                f"dynamic inputs need a TensorRT profile: {names}; pass --trt-min-shapes/--trt-opt-shapes/"
                "--trt-max-shapes (or --input-shapes for one fixed shape)"
            )
        for k, prof in enumerate(profiles):
            p = builder.create_optimization_profile()
            for t in dynamic:
                if t.name not in prof:
                    raise UsageError(f"profile {k} gives no shape for dynamic input '{t.name}'")
            for name, (lo, mid, hi) in prof.items():
                p.set_shape(name, lo, mid, hi)
            cfg.add_optimization_profile(p)

    def _build_engine(self, trt, logger):
        builder = trt.Builder(logger.impl)
        network, _parser = self._parse(trt, builder, logger)
        cfg = self._builder_config(trt, builder, network)
        blob = builder.build_serialized_network(network, cfg)
        if blob is None:
            detail = "; ".join(logger.impl.errors[-3:]) or "see the TensorRT messages above"
            raise ToolkitError(f"TensorRT could not build an engine: {detail}", ExitCode.FAILED)
        data = bytes(blob)
        if self.config.save_engine:
            from toolkit.core.model import write_bytes_atomic

            write_bytes_atomic(self.config.save_engine, data)
        return data

    # ------------------------------------------------------------------ lifecycle
    def _activate(self) -> None:
        trt = import_tensorrt()
        cudart = import_cudart()
        require_gpu(cudart)
        self._trt, self._cudart = trt, cudart
        logger = _Logger(trt)
        if is_engine_path(self.model_path):
            from toolkit.core.model import read_bytes

            data = read_bytes(self.model_path)
        else:
            data = self._build_engine(trt, logger)
        runtime = trt.Runtime(logger.impl)
        self._runtime = runtime
        self._engine = runtime.deserialize_cuda_engine(data)
        if self._engine is None:
            raise InputError(
                f"{self.model_path}: not a TensorRT engine for this TensorRT version/GPU "
                f"({'; '.join(logger.impl.errors[-2:]) or 'deserialization failed'})"
            )
        self._context = self._engine.create_execution_context()
        self._stream = _check(cudart.cudaStreamCreate(), "cudaStreamCreate")

    def _deactivate(self) -> None:
        cudart = getattr(self, "_cudart", None)
        if cudart is not None:
            for ptr, _n in self._buffers.values():
                cudart.cudaFree(ptr)
            if self._stream is not None:
                cudart.cudaStreamDestroy(self._stream)
        self._buffers.clear()
        self._context = None
        self._engine = None
        self._stream = None

    # ------------------------------------------------------------------ queries
    def _io_names(self, mode_name: str) -> List[str]:
        trt = self._trt
        mode = getattr(trt.TensorIOMode, mode_name)
        eng = self._engine
        return [eng.get_tensor_name(i) for i in range(eng.num_io_tensors) if eng.get_tensor_mode(eng.get_tensor_name(i)) == mode]

    def input_metadata(self) -> List[TensorMeta]:
        from toolkit.core.meta import dtype_from_numpy

        metas = []
        for name in self._io_names("INPUT"):
            shape = tuple(None if d < 0 else int(d) for d in self._engine.get_tensor_shape(name))
            dtype = dtype_from_numpy(self._trt.nptype(self._engine.get_tensor_dtype(name)))
            metas.append(TensorMeta(name, shape, dtype))
        return metas

    def output_names(self) -> List[str]:
        return self._io_names("OUTPUT")

    def summary(self) -> str:
        flags = [f for f in ("fp16", "bf16", "int8", "tf32") if getattr(self.config, f)]
        return f"TensorRT {self._trt.__version__}" + (f" ({', '.join(flags)})" if flags else "")

    # ------------------------------------------------------------------ inference
    def _buffer(self, name: str, nbytes: int) -> int:
        cudart = self._cudart
        ptr, size = self._buffers.get(name, (None, 0))
        if ptr is None or size < nbytes:
            if ptr is not None:
                cudart.cudaFree(ptr)
            ptr = _check(cudart.cudaMalloc(max(nbytes, 1)), "cudaMalloc")
            self._buffers[name] = (ptr, max(nbytes, 1))
        return ptr

    def _infer(self, feed: Mapping) -> Dict[str, object]:
        import numpy as np

        trt, cudart, ctx = self._trt, self._cudart, self._context
        h2d = cudart.cudaMemcpyKind.cudaMemcpyHostToDevice
        d2h = cudart.cudaMemcpyKind.cudaMemcpyDeviceToHost
        hosts = []
        for name in self._io_names("INPUT"):
            arr = np.ascontiguousarray(feed[name])
            hosts.append(arr)
            ctx.set_input_shape(name, arr.shape)
            ptr = self._buffer(name, arr.nbytes)
            _check(cudart.cudaMemcpyAsync(ptr, arr.ctypes.data, arr.nbytes, h2d, self._stream), "cudaMemcpyAsync")
            ctx.set_tensor_address(name, ptr)
        outputs = {}
        for name in self.output_names():
            shape = tuple(ctx.get_tensor_shape(name))
            if any(d < 0 for d in shape):
                raise ToolkitError(
                    f"output '{name}' has a data-dependent shape {shape}, which this runner does not support",
                    ExitCode.FAILED,
                )
            arr = np.empty(shape, dtype=trt.nptype(self._engine.get_tensor_dtype(name)))
            outputs[name] = arr
            ctx.set_tensor_address(name, self._buffer(name, arr.nbytes))
        start = time.perf_counter()
        if not ctx.execute_async_v3(self._stream):
            raise ToolkitError("TensorRT inference failed (execute_async_v3 returned false)", ExitCode.FAILED)
        _check(cudart.cudaStreamSynchronize(self._stream), "cudaStreamSynchronize")
        self.last_inference_time = time.perf_counter() - start
        for name, arr in outputs.items():
            ptr, _ = self._buffers[name]
            _check(cudart.cudaMemcpyAsync(arr.ctypes.data, ptr, arr.nbytes, d2h, self._stream), "cudaMemcpyAsync")
        _check(cudart.cudaStreamSynchronize(self._stream), "cudaStreamSynchronize")
        del hosts
        return outputs


def _make_calibrator(trt, cudart, network, config: TrtConfig):
    """An entropy calibrator fed from the run's input data (and --calibration-cache)."""
    import numpy as np

    if not hasattr(trt, "IInt8EntropyCalibrator2"):
        raise DependencyError(
            f"TensorRT {trt.__version__} has no implicit INT8 calibration; use a quantized (Q/DQ) ONNX model instead"
        )
    data = list(config.calibration_data or [])
    cache_path = config.calibration_cache
    if not data and not (cache_path and os.path.exists(cache_path)):
        raise UsageError("--int8 needs calibration data: the run's inputs, or an existing --calibration-cache")
    names = [network.get_input(i).name for i in range(network.num_inputs)]

    class Calibrator(trt.IInt8EntropyCalibrator2):
        def __init__(self):
            trt.IInt8EntropyCalibrator2.__init__(self)
            self._it = iter(data)
            self._ptrs: Dict[str, Tuple[int, int]] = {}

        def get_batch_size(self):
            return 1

        def get_batch(self, names_, *args):
            try:
                feed = next(self._it)
            except StopIteration:
                return None
            ptrs = []
            for name in names:
                arr = np.ascontiguousarray(feed[name])
                ptr, size = self._ptrs.get(name, (None, 0))
                if ptr is None or size < arr.nbytes:
                    if ptr is not None:
                        cudart.cudaFree(ptr)
                    ptr = _check(cudart.cudaMalloc(arr.nbytes), "cudaMalloc")
                    self._ptrs[name] = (ptr, arr.nbytes)
                _check(
                    cudart.cudaMemcpy(ptr, arr.ctypes.data, arr.nbytes, cudart.cudaMemcpyKind.cudaMemcpyHostToDevice),
                    "cudaMemcpy",
                )
                ptrs.append(int(ptr))
            return ptrs

        def read_calibration_cache(self):
            if cache_path and os.path.exists(cache_path):
                with open(cache_path, "rb") as f:
                    return f.read()
            return None

        def write_calibration_cache(self, cache):
            if cache_path:
                from toolkit.core.model import write_bytes_atomic

                write_bytes_atomic(cache_path, bytes(cache))

    return Calibrator()

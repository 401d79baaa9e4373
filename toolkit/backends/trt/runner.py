"""The TensorRT runner: build (or load) an engine, then copy inputs in, run, copy outputs out."""

from __future__ import annotations

import os
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Set

import numpy as np

from toolkit.backends.base import Runner
from toolkit.core.contain import carried
from toolkit.core.errors import InputError, ToolkitError, UsageError
from toolkit.core.meta import TensorMeta
from toolkit.core.io.model import read_bytes

from .availability import check_available, check_config, inference_error, trt_call
from .builder import EngineBuilder, Interrupt, dims, dtype_name, init_plugins, make_logger, np_dtype, stderr_sink
from .device import DeviceBuffers, cuda_check
from .options import TrtConfig, is_engine_path


class TrtRunner(Runner):
    """Builds a TensorRT engine from an ONNX model (or loads a serialized engine) and runs it.

    Args:
        model_path: an ONNX model (``-`` = stdin), or a ``.engine``/``.plan``/``.trt`` file.
        config: builder and runner options.
        on_message: receives TensorRT's messages as ``(severity, text)``; default: stderr.
    """

    name = "trt-runner"
    runtime = "TensorRT"

    def __init__(
        self,
        model_path: str,
        config: Optional[TrtConfig] = None,
        *,
        name: Optional[str] = None,
        on_message: Optional[Callable[[str, str], None]] = None,
        engine_file: Optional[bool] = None,
    ):
        super().__init__(name)
        self.model_path = model_path
        self.config = config or TrtConfig()
        self.on_message = on_message
        self.engine_file = is_engine_path(model_path) if engine_file is None else engine_file
        self.notes: List[str] = []
        self.built = False
        # TensorRT and CUDA objects (from modules imported on activation): set by _activate
        self._trt: Any = None
        self._cudart: Any = None
        self._logger: Any = None
        self._runtime: Any = None
        self._engine: Any = None
        self._context: Any = None
        self._stream: Any = None
        self._allocator: Any = None
        self._profile = 0
        self._callback_error: Optional[BaseException] = None
        self._inputs: List[str] = []
        self._outputs: List[str] = []
        # what the engine says of its inputs, constant while it is loaded (asked once, by _load)
        self._shape_inputs: Set[str] = set()  # shape tensors: their values are read from host memory
        self._dynamic_inputs: Set[str] = set()  # inputs with a dynamic dimension
        self._profiled_inputs: List[str] = []  # the inputs a profile bounds: the two above, in input order
        self._buffers: Any = None  # DeviceBuffers while active

    # ------------------------------------------------------------------ messages
    def _sink(self, severity: str, text: str) -> None:
        (self.on_message or stderr_sink)(severity, text)

    def _errors(self, default: str) -> str:
        errs = list(dict.fromkeys(self._logger.errors)) if self._logger is not None else []
        return "; ".join(errs[-3:]) or default

    def _failed(self, what: str) -> Callable[[str], ToolkitError]:
        """For :func:`trt_call`: "TensorRT cannot WHAT: (TensorRT's errors, else its exception)" (exit 1)."""
        return lambda why: inference_error(f"TensorRT cannot {what}: {self._errors(why or 'no details')}")

    # ------------------------------------------------------------------ lifecycle
    def _activate(self) -> None:
        trt, cudart = check_available()
        self._trt, self._cudart = trt, cudart
        self._buffers = DeviceBuffers(cudart)
        self._logger = make_logger(trt, self._sink, bool(os.environ.get("TOOLKIT_TRT_VERBOSE")), Interrupt())
        note = init_plugins(trt, self._sink)
        if note:
            self.notes.append(note)
        try:
            if self.engine_file:
                data = self._read_engine()
            else:
                check_config(trt, self.config)
                data = EngineBuilder(trt, cudart, self._logger, self.model_path, self.config, self.notes).build()
                self.built = True
            self._load(data)
        except BaseException:
            self._release()
            raise

    def _read_engine(self) -> bytes:
        if self.config.mark_outputs or self.config.exclude_outputs:
            raise UsageError(f"{self.model_path} is a built engine, whose outputs are fixed; --trt-outputs needs the ONNX model")
        ignored = self.config.builder_options()
        if ignored:
            self.notes.append(f"{', '.join(ignored)} ignored: {self.model_path} is a built engine")
        data = read_bytes(self.model_path)
        if not data:
            raise InputError(f"{self.model_path}: empty file, expected a TensorRT engine")
        return data

    def _load(self, data: bytes) -> None:
        trt, cudart = self._trt, self._cudart
        self._runtime = trt_call(trt.Runtime, self._logger, fail=self._failed("create a runtime"))
        # Engines built elsewhere with --version-compatible carry host code (the lean runtime).
        self._runtime.engine_host_code_allowed = True

        def not_loaded(why: str) -> ToolkitError:
            if self.built:
                return inference_error(f"TensorRT cannot load the engine it built: {self._errors(why or 'no details')}")
            return InputError(
                f"{self.model_path}: not a TensorRT engine for this TensorRT version and GPU "
                f"({self._errors(why or 'deserialization failed')}); engines only load with the TensorRT "
                "version that built them"
            )

        self._engine = trt_call(self._runtime.deserialize_cuda_engine, data, fail=not_loaded)
        del data
        eng = self._engine
        names = [eng.get_tensor_name(i) for i in range(eng.num_io_tensors)]
        for name in names:
            fmt = eng.get_tensor_format(name)
            if fmt != trt.TensorFormat.LINEAR:
                raise InputError(
                    f"{self.model_path}: I/O tensor '{name}' has TensorRT format {getattr(fmt, 'name', fmt)}, "
                    "not LINEAR; toolkit copies linear buffers only: build the engine without "
                    "--input/--output formats, e.g. toolkit run MODEL.onnx --trt --save-engine FILE"
                )
        self._context = trt_call(
            eng.create_execution_context,
            fail=lambda why: inference_error(
                f"TensorRT cannot create an execution context: {self._errors(why or 'out of memory?')}"
            ),
        )
        self._inputs = [n for n in names if eng.get_tensor_mode(n) == trt.TensorIOMode.INPUT]
        self._outputs = [n for n in names if eng.get_tensor_mode(n) == trt.TensorIOMode.OUTPUT]
        self._shape_inputs = {n for n in self._inputs if eng.is_shape_inference_io(n)}
        self._dynamic_inputs = {n for n in self._inputs if any(d < 0 for d in eng.get_tensor_shape(n))}
        self._profiled_inputs = [n for n in self._inputs if n in self._dynamic_inputs or n in self._shape_inputs]
        self._stream = cuda_check(cudart.cudaStreamCreate(), "cudaStreamCreate")
        self._profile = 0

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
        if self._buffers is not None:
            self._buffers.free()
        if cudart is not None and self._stream is not None:
            cudart.cudaStreamDestroy(self._stream)
        self._stream = None

    # ------------------------------------------------------------------ queries
    def input_metadata(self) -> List[TensorMeta]:
        eng = self._engine
        metas = []
        for name in self._inputs:
            shape = tuple(None if d < 0 else int(d) for d in eng.get_tensor_shape(name))
            metas.append(TensorMeta(name, shape, dtype_name(eng.get_tensor_dtype(name), name)))
        return metas

    def preferred_shapes(self) -> Dict[str, tuple]:
        """The opt shapes of profile 0 for the dynamic inputs (what generated data should use)."""
        eng = self._engine
        out = {}
        for name in self._inputs:
            if name in self._dynamic_inputs and name not in self._shape_inputs:
                _lo, opt, _hi = eng.get_tensor_profile_shape(name, 0)
                out[name] = dims(opt)
        return out

    def preferred_values(self) -> Dict[str, object]:
        """Values for shape-tensor inputs: the opt values of profile 0 (generated data must be valid shapes)."""

        eng = self._engine
        out: Dict[str, object] = {}
        for name in self._inputs:
            if name in self._shape_inputs:
                # The binding names its parameters (name: int, profile_index: str): pass them by position.
                _lo, opt, _hi = eng.get_tensor_profile_values(0, name)
                dtype = np_dtype(eng.get_tensor_dtype(name), name)
                out[name] = np.asarray(list(opt), dtype=dtype).reshape(dims(eng.get_tensor_shape(name)))
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

    # ------------------------------------------------------------------ profiles
    def _profile_range(self, k: int, name: str):
        """(min, opt, max) of profiled input ``name`` in profile ``k``: values or dims."""
        eng = self._engine
        if name in self._shape_inputs:
            return eng.get_tensor_profile_values(k, name)
        return tuple(dims(s) for s in eng.get_tensor_profile_shape(name, k))

    def _bounded(self, name: str, feed: Mapping):
        """What a profile bounds of ``feed[name]``: its values (a shape tensor, as a list) or its shape."""
        if name in self._shape_inputs:
            return [int(v) for v in np.asarray(feed[name]).reshape(-1)]
        return tuple(np.shape(feed[name]))

    def _fits(self, k: int, feed: Mapping) -> bool:
        for name in self._profiled_inputs:
            lo, _opt, hi = self._profile_range(k, name)
            got = self._bounded(name, feed)
            if len(got) != len(lo) or any(not a <= v <= b for a, v, b in zip(lo, got, hi)):
                return False
        return True

    def _profiles_text(self) -> str:
        parts = []
        for k in range(max(int(self._engine.num_optimization_profiles), 1)):
            items = []
            for name in self._profiled_inputs:
                lo, opt, hi = self._profile_range(k, name)
                if name in self._shape_inputs:
                    items.append(f"'{name}' values min {list(lo)}, opt {list(opt)}, max {list(hi)}")
                else:
                    items.append(f"'{name}' min {lo}, opt {opt}, max {hi}")
            parts.append(f"profile {k}: " + ", ".join(items))
        return "; ".join(parts)

    def _select_profile(self, feed: Mapping) -> None:
        """Switch to the first profile that covers ``feed`` (the current one if it does)."""
        if not self._profiled_inputs or self._fits(self._profile, feed):
            return
        for k in range(int(self._engine.num_optimization_profiles)):
            if k != self._profile and self._fits(k, feed):
                # The binding raises RuntimeError when TensorRT refuses (it never returns False).
                trt_call(self._context.set_optimization_profile_async, k, int(self._stream),
                         fail=self._failed(f"switch to profile {k}"))  # fmt: skip
                cuda_check(self._cudart.cudaStreamSynchronize(self._stream), "cudaStreamSynchronize")
                self._profile = k
                return
        given = ", ".join(
            f"'{n}' {'values' if n in self._shape_inputs else 'shape'} {self._bounded(n, feed)}"
            for n in self._profiled_inputs
        )
        raise InputError(
            f"inputs {given} fit no profile of the engine ({self._profiles_text()}); "
            "build with --trt-min-shapes/--trt-max-shapes that cover them"
        )

    # ------------------------------------------------------------------ inference
    def _infer(self, feed: Mapping) -> Dict[str, object]:
        self._select_profile(feed)
        hosts = self._bind_inputs(feed)  # keep the host arrays alive until the copies are done
        shapes = self._bind_outputs()
        self._execute()
        outputs = self._fetch_outputs(shapes)
        del hosts
        return outputs

    def _bind_inputs(self, feed: Mapping) -> list:
        """Set input shapes and copy the inputs to the device; returns the host arrays."""

        cudart, ctx = self._cudart, self._context
        h2d = cudart.cudaMemcpyKind.cudaMemcpyHostToDevice
        hosts = []
        for name in self._inputs:
            arr = np.ascontiguousarray(feed[name])
            hosts.append(arr)
            if name in self._dynamic_inputs:
                trt_call(ctx.set_input_shape, name, tuple(arr.shape), fail=self._outside(name, tuple(arr.shape)))
            if name in self._shape_inputs:  # shape tensors are read from host memory
                self._set_address(name, arr.ctypes.data)
                continue
            ptr = self._buffers.get(name, arr.nbytes)
            if arr.nbytes:
                cuda_check(cudart.cudaMemcpyAsync(ptr, arr.ctypes.data, arr.nbytes, h2d, self._stream), "cudaMemcpyAsync")
            self._set_address(name, ptr)
        return hosts

    def _outside(self, name: str, shape: tuple) -> Callable[[str], ToolkitError]:
        def error(why: str) -> ToolkitError:
            return InputError(
                f"input '{name}' has shape {shape}, outside the engine's profile "
                f"({self._profiles_text()}); build with --trt-min-shapes/--trt-max-shapes that cover it"
            )

        return error

    def _set_address(self, name: str, pointer: int) -> None:
        """Tell TensorRT where tensor ``name`` is; a refusal stops the run here, naming the tensor."""
        ctx = self._context
        trt_call(ctx.set_tensor_address, name, pointer, fail=self._failed(f"set the address of tensor '{name}'"))

    def _bind_outputs(self) -> Dict[str, tuple]:
        """Device memory for every output: the shapes known now (the others come from the allocator)."""

        ctx, eng = self._context, self._engine
        shapes: Dict[str, tuple] = {}
        for name in self._outputs:
            shape = dims(ctx.get_tensor_shape(name))
            if any(d < 0 for d in shape):  # data-dependent: TensorRT asks for memory while it runs
                if self._allocator is None:
                    self._allocator = make_output_allocator(self._trt, self)
                trt_call(ctx.set_output_allocator, name, self._allocator,
                         fail=self._failed(f"set the output allocator of tensor '{name}'"))  # fmt: skip
            else:
                dtype = np_dtype(eng.get_tensor_dtype(name), name)
                nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
                self._set_address(name, self._buffers.get(name, nbytes))
                shapes[name] = shape
        return shapes

    def _execute(self) -> None:
        self._logger.errors.clear()
        self._callback_error = None
        start = time.perf_counter()

        def failed(why: str) -> BaseException:
            if self._callback_error is not None:  # the output allocator failed first
                return self._callback_error
            return inference_error(f"{self.name}: inference failed: {self._errors(why or 'execute_async_v3 returned false')}")

        trt_call(self._context.execute_async_v3, int(self._stream), fail=failed)
        if self._callback_error is not None:
            raise self._callback_error
        cuda_check(self._cudart.cudaStreamSynchronize(self._stream), "cudaStreamSynchronize")
        self.last_inference_time = time.perf_counter() - start
        if self._callback_error is not None:
            raise self._callback_error

    def _fetch_outputs(self, shapes: Dict[str, tuple]) -> Dict[str, object]:
        cudart, eng = self._cudart, self._engine
        d2h = cudart.cudaMemcpyKind.cudaMemcpyDeviceToHost
        outputs: Dict[str, object] = {}
        for name in self._outputs:
            shape = shapes.get(name)
            if shape is None:
                shape = self._allocator.shapes.get(name) if self._allocator is not None else None
                if shape is None:
                    raise inference_error(f"{self.name}: TensorRT reported no shape for output '{name}'")
            arr = np.empty(shape, dtype=np_dtype(eng.get_tensor_dtype(name), name))
            if arr.nbytes:
                ptr = self._buffers.pointer(name)
                cuda_check(cudart.cudaMemcpyAsync(arr.ctypes.data, ptr, arr.nbytes, d2h, self._stream), "cudaMemcpyAsync")
            outputs[name] = arr
        cuda_check(cudart.cudaStreamSynchronize(self._stream), "cudaStreamSynchronize")
        return outputs


def make_output_allocator(trt, runner: TrtRunner):
    """Device memory for outputs whose shape is known only while the engine runs (NonZero, ...)."""

    class OutputAllocator(trt.IOutputAllocator):
        def __init__(self):
            trt.IOutputAllocator.__init__(self)
            self.shapes: Dict[str, tuple] = {}

        def reallocate_output(self, tensor_name, memory, size, alignment):
            # (nothing may cross into TensorRT: the error is kept, raised when the run returns)
            got = carried(runner._buffers.get, tensor_name, size, catching=(Exception, KeyboardInterrupt))
            exc = got.error
            if exc is None:
                return got.value
            if runner._callback_error is None:
                keep = isinstance(exc, (ToolkitError, KeyboardInterrupt))
                runner._callback_error = exc if keep else inference_error(f"cannot allocate output '{tensor_name}': {exc}")
            return 0  # TensorRT reads an int: 0 (nullptr) tells it allocation failed

        def reallocate_output_async(self, tensor_name, memory, size, alignment, stream):
            return self.reallocate_output(tensor_name, memory, size, alignment)

        def notify_shape(self, tensor_name, shape):
            self.shapes[tensor_name] = dims(shape)

    return OutputAllocator()

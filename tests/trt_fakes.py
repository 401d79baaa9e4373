"""Fake ``tensorrt`` and cuda-python modules for CPU tests of the TensorRT backend.

They are derived from, and checked against, the real API (tests/trt_surface/, see
tests/backends/test_trt_surface.py): enums are built from the recorded members (so ``MemoryPoolType``
is complete and TensorRT 11's ``BuilderFlag`` has no FP16), every class and method the fake
defines exists in the real bindings of its version with the same parameters, and the
TensorRT 11 fake has no calibrator API.

Every call fails the way the real binding does, as the surface file's ``fail`` lines record
it: constructors raise ``TypeError`` (factory returned nullptr), ``set_optimization_profile_async``
and ``Profile.set_shape`` raise ``RuntimeError`` with the binding's message,
``add_optimization_profile`` returns -1, ``set_tensor_address`` returns False, ... A test makes
any recorded call fail with ``trt._failing[call] = "recorded"`` (the way the binding does) or
``"other"`` (the other way: raise where it returns, return where it raises). Callbacks run
behind a trampoline that swallows their exceptions, and ``execute_async_v3`` only enqueues
work: nothing is computed until the stream is synchronized. The plugin library keeps only a
weak reference to its logger, as the real one keeps a raw pointer.

Helpers the tests use start with an underscore (``trt._calls``), so that the surface check
ignores them.
"""

from __future__ import annotations

import builtins
import ctypes
import enum
import functools
import sys
import types
import weakref
from typing import Callable, Dict, List, Optional

import numpy as np

from trt_api import load_surface

NP = {"FLOAT": np.float32, "HALF": np.float16, "INT32": np.int32, "INT64": np.int64, "BOOL": np.bool_,
      "INT8": np.int8, "UINT8": np.uint8}  # fmt: skip


def _enum(surface, name):
    return enum.IntEnum(name.split(".")[-1], surface.enums[name])


def _trampoline(fn, *args):
    """How pybind11 calls a Python override from C++: an exception does not propagate, it is
    printed and C++ gets a default value. ``_Interrupts.at = n`` delivers SIGINT (Ctrl-C) while
    TensorRT is about to make its n-th callback, as a user pressing Ctrl-C during a build would:
    Python runs the signal handler when the callback's bytecode starts."""
    try:
        if _Interrupts.take():
            import signal

            signal.raise_signal(signal.SIGINT)
        return fn(*args)
    except BaseException as exc:  # noqa: BLE001 - what the C++ side does
        sys.stderr.write(f"[fake trampoline] swallowed {type(exc).__name__}\n")
        return None


class _Interrupts:
    """Ctrl-C arrives during the n-th callback TensorRT makes (None: never)."""

    at: Optional[int] = None
    count = 0

    @classmethod
    def take(cls) -> bool:
        cls.count += 1
        return cls.at is not None and cls.count == cls.at


# ----------------------------------------------------------------------------- cuda-python


class CudaError(enum.IntEnum):
    cudaSuccess = 0
    cudaErrorMemoryAllocation = 2
    cudaErrorInsufficientDriver = 35
    cudaErrorNoDevice = 100


class FakeMemory:
    """'Device' memory: real host buffers, so pointers can be copied with memmove."""

    def __init__(self):
        self.blocks = {}
        self.fail_malloc = False

    def malloc(self, size):
        buf = ctypes.create_string_buffer(size)
        ptr = ctypes.addressof(buf)
        self.blocks[ptr] = buf
        return ptr

    def free(self, ptr):
        self.blocks.pop(ptr, None)

    def array(self, ptr, shape, dtype=np.float32):
        n = int(np.prod(shape)) * np.dtype(dtype).itemsize
        raw = (ctypes.c_char * max(n, 1)).from_address(ptr)
        return np.frombuffer(raw, dtype=dtype, count=int(np.prod(shape))).reshape(shape)


def fake_cudart(devices=1, error=CudaError.cudaSuccess):
    """cuda.bindings.runtime with streams: async copies and kernels run at cudaStreamSynchronize."""
    mem = FakeMemory()
    rt = types.ModuleType("cuda.bindings.runtime")
    rt.memory = mem
    rt.queues = {}
    rt.cudaMemcpyKind = types.SimpleNamespace(cudaMemcpyHostToDevice=1, cudaMemcpyDeviceToHost=2)
    rt.cudaGetDeviceCount = lambda: (error, devices if error == 0 else None)

    def malloc(n):
        if mem.fail_malloc:
            return (CudaError.cudaErrorMemoryAllocation, None)
        return (CudaError.cudaSuccess, mem.malloc(n))

    rt.cudaMalloc = malloc
    rt.cudaFree = lambda p: (mem.free(p), (CudaError.cudaSuccess,))[1]

    def memcpy(dst, src, n, kind):
        ctypes.memmove(dst, src, n)
        return (CudaError.cudaSuccess,)

    def memcpy_async(dst, src, n, kind, stream):
        rt.queues[int(stream)].append(lambda: ctypes.memmove(dst, src, n))
        return (CudaError.cudaSuccess,)

    def stream_create():
        handle = 7 + len(rt.queues)
        rt.queues[handle] = []
        return (CudaError.cudaSuccess, handle)

    def synchronize(stream):
        queue = rt.queues[int(stream)]
        while queue:
            queue.pop(0)()
        return (CudaError.cudaSuccess,)

    rt.cudaMemcpy = memcpy
    rt.cudaMemcpyAsync = memcpy_async
    rt.cudaStreamCreate = stream_create
    rt.cudaStreamSynchronize = synchronize
    rt.cudaStreamDestroy = lambda s: (rt.queues.pop(int(s), None), (CudaError.cudaSuccess,))[1]
    return rt


# ----------------------------------------------------------------------------- models the fakes run


class FakeModel:
    """What a fake network computes, and what an engine built from it holds.

    ``inputs``: name -> (shape with -1 for dynamic dims, DataType name);
    ``layers``: [(layer name, LayerType name, [(tensor name, DataType name)], loop)] in network
    order (``loop``, optional: the name of the loop a loop boundary layer belongs to);
    ``outputs``: the network's outputs; ``compute(feed) -> {tensor: array}`` for every tensor;
    ``shape_inputs``: inputs that are shape tensors; ``data_dependent``: outputs whose shape is
    known only after running (they go through the output allocator); ``formats``: tensor ->
    TensorFormat name of an engine built elsewhere.
    """

    def __init__(self, inputs, layers, outputs, compute, shape_inputs=(), data_dependent=(), formats=None,
                 version_compatible=False, reject_profiles=False):  # fmt: skip
        self.inputs = dict(inputs)
        self.layers = list(layers)
        self.outputs = list(outputs)
        self.compute = compute
        self.shape_inputs = set(shape_inputs)
        self.data_dependent = set(data_dependent)
        self.formats = dict(formats or {})
        self.profiles: List[Dict[str, tuple]] = []
        self.version_compatible = version_compatible  # holds host code: loads only if the runtime allows it
        self.reject_profiles = reject_profiles  # add_optimization_profile finds every profile invalid

    def dtype_of(self, name):
        if name in self.inputs:
            return self.inputs[name][1]
        for _ln, _lt, outs, *_loop in self.layers:
            for t, dt in outs:
                if t == name:
                    return dt
        raise KeyError(name)


def doubling_model():
    """y = 2 * x, x: float32 [-1, 3] (an Identity layer 'x2' in between)."""
    return FakeModel(
        {"x": ((-1, 3), "FLOAT")},
        [("mul", "ELEMENTWISE", [("x2", "FLOAT")]), ("out", "IDENTITY", [("y", "FLOAT")])],
        ["y"],
        lambda f: {"x2": 2 * f["x"], "y": 2 * f["x"]},
    )


# ----------------------------------------------------------------------------- tensorrt


def fake_tensorrt(
    version="10.13.3.9",
    *,
    memory=None,
    model: Optional[FakeModel] = None,
    engines: Optional[Dict[bytes, FakeModel]] = None,
    parser_errors=(),
    builds=True,
    fail: Optional[set] = None,
):
    """A fake ``tensorrt`` module of ``version``'s major release.

    ``model``: what the ONNX parser produces (None: a parser that only reports ``parser_errors``);
    ``engines``: serialized engines the runtime can load; ``builds``: False makes the build fail
    (None returned, an error logged); ``fail``: {"Builder", "Runtime", "OnnxParser"} whose
    constructors raise as TensorRT's do when the C++ factory returns nullptr.
    """
    major = int(version.split(".")[0])
    surface = load_surface(min(max(major, 10), 11))
    fail = set(fail or ())
    engines = dict(engines or {})
    trt = types.ModuleType("tensorrt")
    trt.__version__ = version
    trt._calls = []
    trt._calibrated = []
    trt._engines = engines
    trt._plugins = []
    trt._plugin_logger = None  # a weak reference, as the plugin library keeps a raw pointer
    trt._failing = {}  # call -> "recorded" / "other": make it fail (see failure())
    trt._failed = []  # (call, how) for every call that failed
    _Interrupts.at, _Interrupts.count = None, 0
    trt._interrupts = _Interrupts

    for name in ("DataType", "TensorIOMode", "LayerType", "BuilderFlag", "MemoryPoolType", "TensorFormat",
                 "LayerInformationFormat", "NetworkDefinitionCreationFlag", "ProfilingVerbosity"):  # fmt: skip
        setattr(trt, name, _enum(surface, name))
    DT = trt.DataType

    def failure(call, how="recorded"):
        """Fail ``call`` as the surface file records it (``how="other"``: the other way)."""
        f = surface.failures[call] if how == "recorded" else surface.other_way(call)
        assert f is not None and f.style in ("returns", "raises"), (call, how, f)
        trt._failed.append((call, how))
        if f.style == "raises":
            raise getattr(builtins, f.exception)(f.message)
        return f.value

    trt._fail = failure

    def nullptr(what):
        failure(what)

    def init_libnvinfer_plugins(logger, namespace):
        trt._plugins.append(namespace)
        trt._plugin_logger = weakref.ref(logger)
        return True

    def plugin_log(severity, msg):
        """A plugin logs, any time later: through the logger the library was first given."""
        logger = trt._plugin_logger() if trt._plugin_logger is not None else None
        if logger is None:
            raise AssertionError("the plugin library calls a logger that was freed")
        log(logger, severity, msg)

    trt._plugin_log = plugin_log

    trt.init_libnvinfer_plugins = init_libnvinfer_plugins

    class ILogger:
        Severity = _enum(surface, "ILogger.Severity")

        def __init__(self):
            pass

    class IOutputAllocator:
        def __init__(self):
            pass

    class IProgressMonitor:
        def __init__(self):
            pass

    trt.ILogger, trt.IOutputAllocator, trt.IProgressMonitor = ILogger, IOutputAllocator, IProgressMonitor
    if major < 11:

        class IInt8EntropyCalibrator2:
            def __init__(self):
                pass

        trt.IInt8EntropyCalibrator2 = IInt8EntropyCalibrator2

    def log(logger, severity, msg):
        _trampoline(logger.log, ILogger.Severity[severity], msg)

    # ------------------------------------------------------------- network
    class ITensor:
        def __init__(self, name, shape, dtype, is_shape_tensor=False):
            self.name = name
            self.shape = tuple(shape)
            self.dtype = DT[dtype]
            self.is_shape_tensor = is_shape_tensor

    class ILoop:
        def __init__(self, name):
            self.name = name

    class ILayer:
        def __init__(self, name, kind, outputs, loop=None):
            self.name = name
            self.type = trt.LayerType[kind]
            self._outs = outputs
            self._loop = loop

        @property
        def num_outputs(self):
            return len(self._outs)

        def get_output(self, index):
            return self._outs[index]

    class ILoopBoundaryLayer(ILayer):
        """What a boundary layer becomes when the backend casts it (``layer.__class__ = ...``)."""

        @property
        def loop(self):
            return self._loop

    class INetworkDefinition:
        def __init__(self, flags):
            self._flags = flags
            self._model = None
            self._inputs, self._layers, self._outputs = [], [], []

        def _load(self, m: FakeModel):
            self._model = m
            self._inputs = [ITensor(n, s, d, n in m.shape_inputs) for n, (s, d) in m.inputs.items()]
            loops = {}
            self._layers = [
                ILayer(ln, lt, [ITensor(t, (-1,), dt) for t, dt in outs],
                       loops.setdefault(loop[0], ILoop(loop[0])) if loop else None)
                for ln, lt, outs, *loop in m.layers
            ]  # fmt: skip
            by_name = {t.name: t for layer in self._layers for t in layer._outs}
            self._outputs = [by_name[o] for o in m.outputs]

        @property
        def num_inputs(self):
            return len(self._inputs)

        @property
        def num_layers(self):
            return len(self._layers)

        @property
        def num_outputs(self):
            return len(self._outputs)

        def get_input(self, index):
            return self._inputs[index]

        def get_layer(self, index):
            return self._layers[index]

        def get_output(self, index):
            return self._outputs[index]

        def mark_output(self, tensor):
            trt._calls.append(("mark_output", tensor.name))
            self._outputs.append(tensor)

        def unmark_output(self, tensor):
            trt._calls.append(("unmark_output", tensor.name))
            self._outputs.remove(tensor)

    class ParserError:
        def __init__(self, node, name, op, desc):
            self._v = (node, name, op, desc)

        def node(self):
            return self._v[0]

        def node_name(self):
            return self._v[1]

        def node_operator(self):
            return self._v[2]

        def desc(self):
            return self._v[3]

    class OnnxParser:
        def __init__(self, network, logger):
            if "OnnxParser" in fail:
                log(logger, "ERROR", "fake: cannot create the ONNX parser")
                nullptr("OnnxParser")
            self._network = network
            self._errors = [ParserError(*e) for e in parser_errors if isinstance(e, tuple)]

        def _done(self):
            if not self._errors and model is not None:
                self._network._load(model)
            return not self._errors

        def parse_from_file(self, model):
            trt._calls.append(("parse_from_file", model))
            if parser_errors == "fail on Mul":  # what a real parser says for an unsupported node
                import onnx

                for i, node in enumerate(onnx.load(model).graph.node):
                    if node.op_type == "Mul":
                        self._errors = [ParserError(i, node.name, "Mul", f"In node {i}: UNSUPPORTED_NODE: Mul")]
            return self._done() or failure("OnnxParser.parse_from_file")

        def parse(self, model, path=None):
            trt._calls.append(("parse", path))
            return self._done() or failure("OnnxParser.parse")

        @property
        def num_errors(self):
            return len(self._errors)

        def get_error(self, index):
            return self._errors[index]

    # ------------------------------------------------------------- builder
    class IOptimizationProfile:
        def __init__(self):
            self._shapes = {}

        def set_shape(self, input, min, opt, max):
            trt._calls.append(("set_shape", input, tuple(min), tuple(opt), tuple(max)))
            if not (len(min) == len(opt) == len(max)) or any(
                a > b for lo, hi in ((min, opt), (opt, max)) for a, b in zip(lo, hi)
            ):
                failure("IOptimizationProfile.set_shape")
            self._shapes[input] = (tuple(min), tuple(opt), tuple(max))

        def set_shape_input(self, input, min, opt, max):
            trt._calls.append(("set_shape_input", input, tuple(min), tuple(opt), tuple(max)))
            self._shapes[input] = (tuple(min), tuple(opt), tuple(max))

    class IBuilderConfig:
        def __init__(self):
            self._profiles = []
            self._reject = False
            self.progress_monitor = None
            if major < 11:
                self.int8_calibrator = None

        def set_flag(self, flag):
            trt._calls.append(("set_flag", flag.name))

        def clear_flag(self, flag):
            trt._calls.append(("clear_flag", flag.name))

        def set_memory_pool_limit(self, pool, pool_size):
            trt._calls.append(("pool", pool.name, pool_size))

        def add_optimization_profile(self, profile):
            trt._calls.append(("add_optimization_profile",))
            if not profile._shapes or self._reject:
                return failure("IBuilderConfig.add_optimization_profile")
            self._profiles.append(profile)
            return len(self._profiles) - 1

    if major < 11:

        def set_calibration_profile(self, profile):
            trt._calls.append(("set_calibration_profile",))
            return bool(profile._shapes) or failure("IBuilderConfig.set_calibration_profile")

        IBuilderConfig.set_calibration_profile = set_calibration_profile

    class IHostMemory(bytes):
        pass

    class Builder:
        def __init__(self, logger):
            if "Builder" in fail:
                log(logger, "ERROR", "fake: CUDA initialization failure with error: 35")
                nullptr("Builder")
            self._logger = logger

        def create_network(self, flags=0):
            trt._calls.append(("create_network", flags))
            return INetworkDefinition(flags)

        def create_builder_config(self):
            cfg = IBuilderConfig()
            cfg._reject = model is not None and model.reject_profiles
            return cfg

        def create_optimization_profile(self):
            return IOptimizationProfile()

        def build_serialized_network(self, network, config):
            monitor = config.progress_monitor
            for step in range(3):  # TensorRT reports progress and logs while it builds
                log(self._logger, "INFO", f"fake: building, step {step}")
                if monitor is not None and _trampoline(monitor.step_complete, "fake phase", step) is False:
                    log(self._logger, "ERROR", "fake: build cancelled by the progress monitor")
                    return failure("Builder.build_serialized_network")
            if not builds or network._model is None:
                log(self._logger, "ERROR", "fake TensorRT builds nothing")
                return failure("Builder.build_serialized_network")
            calib = getattr(config, "int8_calibrator", None)
            if calib is not None and _trampoline(calib.read_calibration_cache) is None:
                while True:
                    ptrs = _trampoline(calib.get_batch, ["x"])
                    if not ptrs:
                        break
                    trt._calibrated.append(memory.array(ptrs[0], trt._calibration_shape).copy())
                _trampoline(calib.write_calibration_cache, memoryview(b"fake calibration table"))
            m = network._model
            built = FakeModel(m.inputs, m.layers, [t.name for t in network._outputs], m.compute, m.shape_inputs,
                              m.data_dependent)  # fmt: skip
            built.profiles = [p._shapes for p in config._profiles]
            key = b"FAKE-ENGINE built %d" % len(engines)
            engines[key] = built
            return IHostMemory(key)

    # ------------------------------------------------------------- runtime
    class IExecutionContext:
        def __init__(self, engine):
            self._engine = engine
            self._shapes = {}
            self._addresses = {}
            self._allocators = {}
            self._profile = 0

        def set_optimization_profile_async(self, profile_index, stream_handle):
            trt._calls.append(("set_optimization_profile_async", profile_index))
            if not 0 <= profile_index < self._engine.num_optimization_profiles:
                if self._engine._logger is not None:
                    log(self._engine._logger, "ERROR", f"fake: profile index {profile_index} is out of range")
                return failure("IExecutionContext.set_optimization_profile_async")
            self._profile = profile_index
            self._shapes = {}
            return True

        def set_input_shape(self, name, shape):
            m = self._engine._model
            if m.profiles:
                lo, _opt, hi = m.profiles[self._profile][name]
                if len(shape) != len(lo) or any(not a <= d <= b for a, d, b in zip(lo, shape, hi)):
                    return failure("IExecutionContext.set_input_shape")
            self._shapes[name] = tuple(shape)
            return True

        def _input(self, name):
            m = self._engine._model
            shape, dt = m.inputs[name]
            if name in m.shape_inputs:
                shape = tuple(shape)
            else:
                shape = self._shapes.get(name, shape)
            return memory.array(self._addresses[name], shape, NP[dt])

        def _feed(self):
            return {n: self._input(n).copy() for n in self._engine._model.inputs}

        def get_tensor_shape(self, name):
            m = self._engine._model
            if name in m.inputs:
                return self._shapes.get(name, m.inputs[name][0])
            if name in m.data_dependent:
                return (-1,)
            return tuple(np.shape(m.compute(self._feed())[name]))

        def set_tensor_address(self, name, memory):
            self._addresses[name] = memory
            return True

        def set_output_allocator(self, name, output_allocator):
            self._allocators[name] = output_allocator
            return True

        def execute_async_v3(self, stream_handle):
            m = self._engine._model
            for name in m.inputs:
                if name not in self._addresses:
                    return failure("IExecutionContext.execute_async_v3")
            # Data-dependent outputs: TensorRT waits for the stream, then asks the allocator for
            # memory and reports the shape, all before execute_async_v3 returns.
            if m.data_dependent:
                trt._cudart.cudaStreamSynchronize(stream_handle)
            values = m.compute(self._feed())
            for name in m.outputs:
                if name in m.data_dependent:
                    arr = np.ascontiguousarray(values[name])
                    alloc = self._allocators[name]
                    ptr = _trampoline(alloc.reallocate_output_async, name, 0, arr.nbytes, 256, stream_handle)
                    if not isinstance(ptr, int):
                        sys.stderr.write("[fake TensorRT] could not be interpreted as an int\n")
                        return failure("IExecutionContext.execute_async_v3")
                    if ptr == 0:
                        return failure("IExecutionContext.execute_async_v3")
                    self._addresses[name] = ptr
                    _trampoline(alloc.notify_shape, name, arr.shape)

            def run():  # on the stream: reads inputs and writes outputs when the stream gets there
                vals = m.compute(self._feed())
                for name in m.outputs:
                    arr = np.ascontiguousarray(vals[name], dtype=NP[m.dtype_of(name)])
                    ctypes.memmove(self._addresses[name], arr.ctypes.data, arr.nbytes)

            trt._cudart.queues[int(stream_handle)].append(run)
            return True

    class EngineInspector:
        def __init__(self, engine):
            self._engine = engine

        def get_layer_information(self, layer_index, format):
            ln, lt, outs, *_loop = self._engine._model.layers[layer_index]
            if format == trt.LayerInformationFormat.JSON:
                import json

                return json.dumps({"Name": ln, "LayerType": lt, "Outputs": [{"Name": t} for t, _ in outs]})
            return f"{ln} [{lt}]"

        def get_engine_information(self, format):
            import json

            return json.dumps({"Layers": [json.loads(self.get_layer_information(i, format))
                                          for i in range(len(self._engine._model.layers))]})  # fmt: skip

    class ICudaEngine:
        def __init__(self, model, logger=None):
            self._model = model
            self._logger = logger
            self._names = list(model.inputs) + list(model.outputs)

        @property
        def num_io_tensors(self):
            return len(self._names)

        @property
        def num_optimization_profiles(self):
            return max(len(self._model.profiles), 1)

        @property
        def num_layers(self):
            return len(self._model.layers)

        def get_tensor_name(self, index):
            return self._names[index]

        def get_tensor_mode(self, name):
            return trt.TensorIOMode.INPUT if name in self._model.inputs else trt.TensorIOMode.OUTPUT

        def get_tensor_shape(self, name):
            if name in self._model.inputs:
                return self._model.inputs[name][0]
            return (-1,)

        def get_tensor_dtype(self, name):
            return DT[self._model.dtype_of(name)]

        def get_tensor_format(self, name):
            return trt.TensorFormat[self._model.formats.get(name, "LINEAR")]

        def is_shape_inference_io(self, name):
            return name in self._model.shape_inputs

        def get_tensor_profile_shape(self, name, profile_index):
            if name in self._model.shape_inputs or not self._model.profiles:
                raise RuntimeError("fake: no profile shapes for this tensor")
            return list(self._model.profiles[profile_index][name])

        def get_tensor_profile_values(self, name, profile_index):
            # The real binding's parameter names are swapped: name is the profile index.
            profile_index, tensor = name, profile_index
            return [list(v) for v in self._model.profiles[profile_index][tensor]]

        def create_execution_context(self):
            return IExecutionContext(self)

        def create_engine_inspector(self):
            return EngineInspector(self)

    class Runtime:
        def __init__(self, logger):
            if "Runtime" in fail:
                log(logger, "ERROR", "fake: cannot create the runtime")
                nullptr("Runtime")
            self._logger = logger
            self.engine_host_code_allowed = False

        def deserialize_cuda_engine(self, serialized_engine):
            key = bytes(serialized_engine)
            m = engines.get(key)
            if m is None or memory is None:
                log(self._logger, "ERROR",
                    "IRuntime::deserializeCudaEngine: Error Code 1: Serialization (magic tag does not match)")  # fmt: skip
                return failure("Runtime.deserialize_cuda_engine")
            if m.version_compatible and not self.engine_host_code_allowed:
                log(self._logger, "ERROR", "IRuntime::deserializeCudaEngine: Error Code 1: Serialization "
                    "(the engine has host code; set engine_host_code_allowed to load it)")  # fmt: skip
                return failure("Runtime.deserialize_cuda_engine")
            return ICudaEngine(m, self._logger)

    for cls in (ITensor, ILoop, ILayer, ILoopBoundaryLayer, INetworkDefinition, ParserError, OnnxParser,
                IOptimizationProfile, IBuilderConfig, IHostMemory, Builder, IExecutionContext, EngineInspector,
                ICudaEngine, Runtime):  # fmt: skip
        setattr(trt, cls.__name__, cls)
    _fail_on_request(trt, surface)
    return trt


def _fail_on_request(trt, surface):
    """Every call that can fail (its ``fail`` line) fails when a test puts it in ``trt._failing``."""

    def wrap(call, fn):
        @functools.wraps(fn)
        def checked(*args, **kwargs):
            how = trt._failing.get(call)
            if how is not None:
                return trt._fail(call, how)
            return fn(*args, **kwargs)

        return checked

    for call, f in surface.failures.items():
        if f.style not in ("returns", "raises"):
            continue
        owner, _, name = call.partition(".")
        target = vars(trt).get(owner)
        if target is None:
            continue
        if not name:  # a module function or a constructor
            if isinstance(target, type):
                target.__init__ = wrap(call, target.__init__)
            else:
                setattr(trt, owner, wrap(call, target))
        elif name in vars(target):
            setattr(target, name, wrap(call, vars(target)[name]))


def install(monkeypatch, trt=None, cudart=None):
    """Put fakes (or None = 'not installed') in sys.modules for tensorrt and cuda-python."""
    monkeypatch.setitem(sys.modules, "tensorrt", trt)
    if trt is not None and cudart is not None:
        trt._cudart = cudart
    if cudart is None:
        for name in ("cuda", "cuda.bindings", "cuda.bindings.runtime", "cuda.cudart"):
            monkeypatch.setitem(sys.modules, name, None)
        return
    cuda = types.ModuleType("cuda")
    bindings = types.ModuleType("cuda.bindings")
    bindings.runtime = cudart
    cuda.bindings = bindings
    monkeypatch.setitem(sys.modules, "cuda", cuda)
    monkeypatch.setitem(sys.modules, "cuda.bindings", bindings)
    monkeypatch.setitem(sys.modules, "cuda.bindings.runtime", cudart)


Factory = Callable[..., types.ModuleType]

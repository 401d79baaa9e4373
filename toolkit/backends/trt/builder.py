"""Building a TensorRT engine from an ONNX model: logger, parser, outputs, profiles, flags.

TensorRT 10 builds as it always has (weak typing: ``--fp16``/``--bf16``/``--int8`` are builder
flags, INT8 calibrates on the run's inputs). TensorRT 11 builds strongly typed networks only:
``--fp16``/``--bf16`` convert the ONNX model first (``toolkit convert --fp-to-fp16``/``--fp-to-bf16``) and
``--int8`` needs Q/DQ nodes already in the model.
"""

from __future__ import annotations

import os
import signal
import sys
import tempfile
import threading
import types
import weakref
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Set, Tuple

import numpy as np

from toolkit.core.contain import carried
from toolkit.core.errors import LIBRARY_ERRORS, DependencyError, InputError, UsageError
from toolkit.core.meta import TensorMeta, dtype_to_numpy, format_shape
from toolkit.core.io.model import check_readable_file, describe, load_model, read_bytes, save_model

from .availability import has_weak_typing, inference_error, trt_call, trt_major
from .options import Profile, Shape, TrtConfig, concrete, select_outputs

# TensorRT DataType member -> toolkit dtype name (what numpy holds, with ml_dtypes for bf16/fp8).
# INT4, FP4 and E8M0 have no numpy equivalent: such tensors cannot be fed or returned.
TRT_DTYPES = {
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


def dtype_name(trt_dtype, tensor: str) -> str:
    name = getattr(trt_dtype, "name", str(trt_dtype)).split(".")[-1]
    dt = TRT_DTYPES.get(name)
    if dt is None:
        raise InputError(f"tensor '{tensor}' has TensorRT type {name}, which toolkit cannot hold in a numpy array")
    return dt


def np_dtype(trt_dtype, tensor: str):
    return dtype_to_numpy(dtype_name(trt_dtype, tensor))


def dims(shape) -> tuple:
    return tuple(int(d) for d in shape)


# ---------------------------------------------------------------------------- logger, interrupts


class Interrupt:
    """Ctrl-C that arrived while TensorRT was building.

    Python runs signal handlers only between bytecodes, which during a build means inside our
    callbacks (logger, progress monitor), and pybind11's trampolines swallow whatever a callback
    raises, KeyboardInterrupt included: the build would go on. So while TensorRT builds, SIGINT
    only sets ``pending``; the progress monitor then asks TensorRT to stop, and the builder
    raises KeyboardInterrupt once TensorRT returns.
    """

    def __init__(self):
        self.pending = False

    def __enter__(self):
        self._old = None
        if threading.current_thread() is threading.main_thread():
            self._old = signal.signal(signal.SIGINT, self._handler)
        return self

    def _handler(self, signum, frame):
        self.pending = True

    def __exit__(self, *exc):
        if self._old is not None:

            signal.signal(signal.SIGINT, self._old)


def make_logger(trt, sink: Callable[[str, str], None], verbose: bool = False, interrupt: Optional[Interrupt] = None):
    """A TensorRT logger that keeps errors (for our messages) and passes warnings to ``sink``."""
    interrupt = interrupt or Interrupt()

    class Logger(trt.ILogger):
        def __init__(self):
            trt.ILogger.__init__(self)
            self.errors: List[str] = []
            self.interrupt = interrupt

        def log(self, severity, msg):
            # nothing may raise into TensorRT: Ctrl-C is noted (raised when TensorRT returns); a log
            # line that cannot be written is lost
            if isinstance(carried(self._log, severity, msg).error, KeyboardInterrupt):
                self.interrupt.pending = True

        def _log(self, severity, msg):
            level = int(severity)
            if level <= 1:  # INTERNAL_ERROR, ERROR
                self.errors.append(" ".join(str(msg).split()))
                sink("ERROR", str(msg))
            elif level == 2 or (verbose and level == 3):
                sink("WARNING" if level == 2 else "INFO", str(msg))

    return Logger()


def make_progress_monitor(trt, interrupt: Interrupt):
    """Stops the build (``step_complete`` returns False) once Ctrl-C was pressed."""

    class Monitor(trt.IProgressMonitor):
        def __init__(self):
            trt.IProgressMonitor.__init__(self)

        def phase_start(self, phase_name, parent_phase, num_steps):
            self._poll()

        def step_complete(self, phase_name, step):
            return not self._poll()

        def phase_finish(self, phase_name):
            self._poll()

        def _poll(self) -> bool:
            try:
                return interrupt.pending
            except KeyboardInterrupt:
                interrupt.pending = True
                return True

    return Monitor()


# The plugin library keeps the logger it is first given in a process-global and calls it for as
# long as the process lives, so it gets a logger that lives as long (kept here, never freed). It
# passes messages on to the sink of the runner that asked for plugins last while that runner
# lives (a weak reference: no runner is kept alive for it), else to stderr.
_PLUGINS: Dict[str, Any] = {"trt": None, "sink": None, "loggers": []}


def _plugin_sink(severity: str, text: str) -> None:
    ref = _PLUGINS["sink"]
    sink = ref() if ref is not None else None
    (sink or stderr_sink)(severity, text)


def _weak(sink: Callable[[str, str], None]):
    if isinstance(sink, types.MethodType):
        return weakref.WeakMethod(sink)
    if type(sink).__weakrefoffset__:
        return weakref.ref(sink)
    return lambda: sink  # a builtin, or an object that cannot be weakly referenced: nothing to free


def plugin_logger(trt):
    """The process-lifetime logger handed to TensorRT's plugin library (one per ``tensorrt`` module)."""
    for trt_module, logger in _PLUGINS["loggers"]:
        if trt_module is trt:
            return logger
    logger = make_logger(trt, _plugin_sink, bool(os.environ.get("TOOLKIT_TRT_VERBOSE")))
    _PLUGINS["loggers"].append((trt, logger))
    return logger


def init_plugins(trt, sink: Optional[Callable[[str, str], None]] = None) -> Optional[str]:
    """Register TensorRT's own plugins (EfficientNMS_TRT, ROIAlign_TRT, ...) once per process.

    Their messages go to ``sink`` from now on. Returns a note for the user when the plugin
    library cannot be initialized (then it is tried again next time); models without TensorRT
    plugins build and run without it.
    """
    if sink is not None:
        _PLUGINS["sink"] = _weak(sink)
    if _PLUGINS["trt"] is trt:
        return None
    try:
        ok = trt.init_libnvinfer_plugins(plugin_logger(trt), "")
    except LIBRARY_ERRORS as exc:  # a broken plugin library (the binding raises RuntimeError): plugin-free models still work
        ok, why = False, f" ({' '.join(str(exc).split()) or type(exc).__name__})"
    else:
        why = ""
    if ok is False:
        return (
            f"TensorRT's plugin library could not be initialized{why}: models that use TensorRT plugins "
            "(EfficientNMS_TRT, ROIAlign_TRT, ...) will not parse"
        )
    _PLUGINS["trt"] = trt
    return None


# ---------------------------------------------------------------------------- network


def format_parser_errors(parser) -> str:
    msgs = []
    for i in range(parser.num_errors):
        perr = parser.get_error(i)
        where = ""
        index = perr.node() if hasattr(perr, "node") else -1  # (a TensorRT whose parser errors do not name it)
        if isinstance(index, int) and index >= 0:
            # before TensorRT 10: no names
            name = perr.node_name() if hasattr(perr, "node_name") else ""
            op = perr.node_operator() if hasattr(perr, "node_operator") else ""
            where = f"node {index}"
            if name:
                where += f" '{name}'"
            if op:
                where += f" ({op})"
            where += ": "
        msgs.append(where + " ".join(str(perr.desc()).split()))
    return "; ".join(dict.fromkeys(msgs))


class LoopNesting:
    """Which loops the layers seen so far are inside, innermost last.

    A Loop's (or Scan's) body may hold another loop, so one on/off flag is not enough: the
    parser adds a loop's boundary layers (trip limit, iterators, recurrences) before its body and
    its LOOP_OUTPUT layers after it, and every boundary layer knows its loop (``.loop``). A
    loop opens at its first boundary layer and closes at its first output; its outputs are
    outside it, but still inside any loop around it.
    """

    def __init__(self, trt):
        self.trt = trt
        kind = trt.LayerType
        self.starts = {kind.TRIP_LIMIT, kind.ITERATOR, kind.RECURRENCE}
        self.output = kind.LOOP_OUTPUT
        self.open: List[Any] = []
        self.closed: List[Any] = []

    def loop_of(self, layer):
        """The ILoop of a boundary layer (the bindings hand out plain ILayer objects: cast it, as
        Polygraphy does); None if this TensorRT does not say."""
        cast = getattr(self.trt, "ILoopBoundaryLayer", None)
        if cast is None:  # this TensorRT has no such cast: loops are taken not to nest
            return None
        boundary = layer
        boundary.__class__ = cast
        return getattr(boundary, "loop", None)

    def see(self, layer, ltype) -> None:
        if ltype != self.output and ltype not in self.starts:
            return
        loop = self.loop_of(layer)
        if ltype == self.output:
            for i, other in enumerate(self.open):
                if other is loop:
                    del self.open[i:]
                    break
            if loop is not None:
                self.closed.append(loop)
        elif not any(other is loop for other in self.open + self.closed):
            self.open.append(loop)

    @property
    def depth(self) -> int:
        return len(self.open)


def layer_candidates(trt, network) -> Tuple[List[str], Dict[str, int]]:
    """Outputs of every layer that can be a network output (for ``mark all`` and globs).

    Leaves out Constant and Shape layers, shape tensors and network inputs, and counts
    (second value) what it skips for a reason the user may not expect: tensors inside a loop
    or an If (TensorRT cannot return them), and tensors whose type numpy cannot hold
    (INT4, FP4, E8M0).
    """
    kind = trt.LayerType
    if_start = {kind.CONDITION, kind.CONDITIONAL_INPUT}
    skip = {kind.CONSTANT, kind.SHAPE}
    inputs = {network.get_input(i).name for i in range(network.num_inputs)}
    names: List[str] = []
    skipped = {_INSIDE: 0, _UNHELD: 0}
    loops = LoopNesting(trt)
    if_depth = 0  # Ifs nest: the parser adds CONDITION, its inputs, both branches, then its outputs
    previous = None
    for li in range(network.num_layers):
        layer = network.get_layer(li)
        ltype = layer.type
        loops.see(layer, ltype)
        if_depth = _if_depth(kind, ltype, previous, if_depth)
        previous = ltype
        if ltype in skip:
            continue
        inside = loops.depth > 0 or if_depth > 0 or ltype in if_start
        _take_outputs(layer, inputs, inside, names, skipped)
    return names, {k: v for k, v in skipped.items() if v}


_INSIDE = "inside a loop or an If"
_UNHELD = "of a type numpy cannot hold (INT4, FP4, E8M0)"


def _if_depth(kind, ltype, previous, depth: int) -> int:
    """How many Ifs the layer of type ``ltype`` (after one of type ``previous``) is inside."""
    if ltype == kind.CONDITION:
        return depth + 1
    if ltype == kind.CONDITIONAL_OUTPUT and previous != kind.CONDITIONAL_OUTPUT:
        return max(depth - 1, 0)  # an If's outputs (consecutive layers) are outside it
    return depth


def _take_outputs(layer, inputs: Set[str], inside: bool, names: List[str], skipped: Dict[str, int]) -> None:
    """The layer's outputs that can be network outputs into ``names``; those left out for a reason
    the user may not expect counted in ``skipped``."""
    for oi in range(layer.num_outputs):
        tensor = layer.get_output(oi)
        if tensor is None or tensor.name in inputs or tensor.is_shape_tensor:
            continue
        if inside:
            skipped[_INSIDE] += 1
        elif getattr(tensor.dtype, "name", "") not in TRT_DTYPES:
            skipped[_UNHELD] += 1
        else:
            names.append(tensor.name)


def _mark_only(network, chosen: Sequence[str], tensors: Mapping[str, object]) -> None:
    """The network's outputs become ``chosen`` (``tensors``: every layer output by name)."""
    keep = set(chosen)
    for i in reversed(range(network.num_outputs)):
        tensor = network.get_output(i)
        if tensor.name not in keep:
            network.unmark_output(tensor)
    marked = {network.get_output(i).name for i in range(network.num_outputs)}
    for name in chosen:
        if name not in marked:
            network.mark_output(tensors[name])
            marked.add(name)


def has_qdq(trt, network) -> bool:
    kinds = {trt.LayerType.QUANTIZE, trt.LayerType.DEQUANTIZE}
    return any(network.get_layer(i).type in kinds for i in range(network.num_layers))


def _known(meta: TensorMeta) -> tuple:
    """A network input's dims (TensorRT always knows the rank; -1/names for dynamic dims)."""
    return tuple(meta.shape or ())


def _is_dynamic(meta: TensorMeta) -> bool:
    """A network input with a dim not fixed (-1 or a name)."""
    return any(not isinstance(d, int) for d in _known(meta))


def _given_shape(meta: TensorMeta, given) -> Shape:
    """The shape --input-shapes gives a dynamic input, checked against the network's dims."""
    known = _known(meta)
    if len(given) != len(known) or any(g != d for g, d in zip(given, known) if isinstance(d, int)):
        raise UsageError(
            f"--input-shapes gives '{meta.name}' shape {format_shape(given)}, "
            f"which does not fit the network's {format_shape(known)}"
        )
    return concrete(given, f"--input-shapes for '{meta.name}'")


def _as_values(array) -> tuple:
    """A shape tensor's values as a tuple of ints."""
    return tuple(int(v) for v in np.asarray(array).reshape(-1))


def _profiled_inputs(metas: List[TensorMeta], shape_inputs: Sequence[str]) -> Tuple[List[TensorMeta], List[TensorMeta]]:
    """The inputs a profile covers: the dynamic ones (by shape), and the shape-tensor ones (by value)."""
    dynamic = [m for m in metas if _is_dynamic(m) and m.name not in shape_inputs]
    return dynamic, [m for m in metas if m.name in shape_inputs]


def _seen_in_feeds(meta: TensorMeta, feeds, values: bool) -> List[tuple]:
    """The shapes (``values``: the values) of input ``meta`` in the feeds that hold it."""
    got = [f[meta.name] for f in feeds if meta.name in f]
    return [_as_values(a) for a in got] if values else [tuple(np.shape(a)) for a in got]


def _one_rank(seen: List[tuple], meta: TensorMeta, values: bool) -> bool:
    """Whether ``seen`` (see :func:`_seen_in_feeds`) is not empty and of one length: the input's rank for shapes."""
    return bool(seen) and len({len(s) for s in seen}) == 1 and (values or len(seen[0]) == len(_known(meta)))


def _fill_values(k: int, prof: Profile, shape_metas: Sequence[TensorMeta], value_ranges: Mapping) -> None:
    """Each shape-tensor input profile ``k`` leaves out: its values in the loaded data (else UsageError)."""
    for meta in shape_metas:
        if meta.name in prof:
            continue
        if meta.name not in value_ranges:
            raise UsageError(
                f"input '{meta.name}' is a shape tensor: give its values for profile {k}, e.g. "
                f"--trt-opt-shapes {meta.name}:[1,224] (or load inputs that hold it with --load-inputs)"
            )
        prof[meta.name] = value_ranges[meta.name]


def all_layer_outputs(network) -> Dict[str, object]:
    tensors: Dict[str, object] = {}
    for li in range(network.num_layers):
        layer = network.get_layer(li)
        for oi in range(layer.num_outputs):
            tensor = layer.get_output(oi)
            if tensor is not None:
                tensors.setdefault(tensor.name, tensor)
    return tensors


def converter_for_strong_typing(external_data_dir: Optional[str] = None) -> Callable[[str, str, str], Optional[str]]:
    """``convert(src, dtype, dst)``: the ONNX model ``src`` in mixed ``dtype`` precision at ``dst``.

    This is ``toolkit convert --fp-to-fp16`` / ``--fp-to-bf16`` (:func:`toolkit.convert.fp16.convert`,
    ``dtype`` ``float16`` or ``bfloat16``): inputs and outputs keep their types, ops without
    fp16/bf16 support and shape computations stay float32. A model that already holds float16
    or bfloat16 is written unchanged (its types decide); convert then returns a note saying so.
    """

    def convert(src: str, dtype: str, dst: str) -> Optional[str]:
        from toolkit.convert import fp16  # TensorRT 11 with --fp16/--bf16 only: a large module

        model = load_model(src, external_data_dir=external_data_dir)
        result = fp16.convert(model, keep_io_types=True, inplace=True, dtype=dtype)
        del model
        save_model(result.model, dst)
        if result.already_mixed:
            held = " and ".join(sorted(fp16.reduced_types(result.model)))
            return f"the model holds {held} already: it is built strongly typed as it is, its types decide"
        return None

    return convert


# ---------------------------------------------------------------------------- engine builder


class EngineBuilder:
    """Parses the ONNX model, chooses outputs and profiles, sets flags and builds the engine.

    ``notes`` collects one-line remarks for the user; ``calibrator`` is set for ``--int8`` on
    TensorRT 10 (the caller frees it).
    """

    def __init__(self, trt, cudart, logger, model_path: str, config: TrtConfig, notes: List[str]):
        self.trt = trt
        self.cudart = cudart
        self.logger = logger
        self.model_path = model_path
        self.config = config
        self.notes = notes
        self.calibrator: Any = None
        self.profile_list: List[Profile] = []
        self._tmp: Optional[tempfile.TemporaryDirectory] = None

    def errors(self, default: str) -> str:
        errs = list(dict.fromkeys(self.logger.errors))
        return "; ".join(errs[-3:]) or default

    def failed(self, what: str) -> Callable[[str], BaseException]:
        """For :func:`trt_call`: "TensorRT cannot WHAT: (TensorRT's errors, else its exception)" (exit 1)."""
        return lambda why: inference_error(f"TensorRT cannot {what}: {self.errors(why or 'no details')}")

    # -------------------------------------------------------------- steps
    def strongly_typed_precision(self) -> Optional[str]:
        """TensorRT 11 with --fp16/--bf16: the dtype the model is converted to first."""
        c = self.config
        if has_weak_typing(self.trt) or not (c.fp16 or c.bf16):
            return None
        if c.fp16 and c.bf16:
            raise UsageError("--fp16 and --bf16 together need TensorRT 10; TensorRT 11 converts the model to one of them")
        return "float16" if c.fp16 else "bfloat16"

    def model_for_parser(self) -> Tuple[str, Optional[str]]:
        """The model file TensorRT parses, and the folder of its external weights."""
        dtype = self.strongly_typed_precision()
        if dtype is None:
            return self.model_path, self.config.external_data_dir
        convert = self.config.converter or converter_for_strong_typing(self.config.external_data_dir)
        src = self.model_path
        self._tmp = tempfile.TemporaryDirectory(prefix="toolkit-trt-")
        if src == "-":
            from toolkit.core.io.model import read_bytes

            src = os.path.join(self._tmp.name, "stdin.onnx")
            with open(src, "wb") as f:
                f.write(read_bytes("-"))
        dst = os.path.join(self._tmp.name, "converted.onnx")
        said = convert(src, dtype, dst)
        flag = "--fp-to-bf16" if dtype == "bfloat16" else "--fp-to-fp16"
        self.notes.append(
            f"TensorRT {self.trt.__version__} builds strongly typed: "
            + (
                said
                if isinstance(said, str)
                else f"the model was converted to {dtype} first (toolkit convert {flag}), inputs and outputs keep "
                "their types"
            )
        )
        return dst, None  # the converted model sits beside its own weights

    def parse(self, builder):
        trt = self.trt
        # TensorRT 11: every network is strongly typed; 10: explicit batch is the only mode
        flags = 1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED) if trt_major(trt) >= 11 else 0
        network = trt_call(builder.create_network, flags, fail=self.failed("create a network"))
        parser = trt_call(trt.OnnxParser, network, self.logger, fail=self.failed("create an ONNX parser"))
        path, ext_dir = self.model_for_parser()

        def parse_failed(why: str) -> InputError:
            detail = format_parser_errors(parser) or self.errors(why or "unknown parser error")
            return InputError(f"{describe(self.model_path)}: TensorRT cannot parse the model: {detail}")

        if path == "-" or ext_dir:
            data = read_bytes(path)
            base = ext_dir or os.getcwd()
            if ext_dir and not os.path.isdir(ext_dir):
                raise InputError(f"{ext_dir}: external data folder does not exist")
            shown = os.path.basename(path) if path != "-" else "model.onnx"
            trt_call(parser.parse, data, os.path.join(os.path.abspath(base), shown), fail=parse_failed)
            del data
        else:
            check_readable_file(path)
            trt_call(parser.parse_from_file, os.path.abspath(path), fail=parse_failed)
        return network, parser

    def select_network_outputs(self, network) -> None:
        c = self.config
        if not c.mark_outputs and not c.exclude_outputs:
            return
        current = [network.get_output(i).name for i in range(network.num_outputs)]
        tensors = all_layer_outputs(network)
        candidates, skipped = layer_candidates(self.trt, network) if c.mark_outputs else ([], {})
        if skipped:
            self.notes.append(
                "--trt-outputs: "
                + ", ".join(f"{n} tensor(s) {why}" for why, n in skipped.items())
                + " not marked (TensorRT cannot return them)"
            )
        chosen = select_outputs(c, candidates, current, known=list(tensors) + current)
        _mark_only(network, chosen, tensors)

    def network_metas(self, network) -> Tuple[List[TensorMeta], List[str]]:
        """Input metadata, and the names of shape-tensor inputs (their values shape the network)."""
        metas, shape_inputs = [], []
        for i in range(network.num_inputs):
            tensor = network.get_input(i)
            shape = tuple(None if d < 0 else int(d) for d in tensor.shape)
            metas.append(TensorMeta(tensor.name, shape, dtype_name(tensor.dtype, tensor.name)))
            if tensor.is_shape_tensor:
                shape_inputs.append(tensor.name)
        return metas, shape_inputs

    def fallback_shape(self, meta: TensorMeta) -> Shape:
        """The fixed shape of a dynamic input that no profile covers."""

        feeds = self.config.sample_feeds
        if feeds:
            shapes = [tuple(f[meta.name].shape) for f in feeds if meta.name in f]
            if shapes and all(len(s) == len(_known(meta)) for s in shapes):
                return shapes[0]
        given = self.config.fallback_shapes.get(meta.name)
        if given is not None:
            return _given_shape(meta, given)
        shape = tuple(d if isinstance(d, int) else 1 for d in _known(meta))
        self.notes.append(
            f"input '{meta.name}' has dynamic shape {format_shape(_known(meta))} and no profile; building for "
            f"{format_shape(shape)} (set it with --trt-opt-shapes or --input-shapes)"
        )
        return shape

    def feed_ranges(self, metas: List[TensorMeta], values: bool = False) -> Dict[str, Tuple[Shape, Shape, Shape]]:
        """min/opt/max over the loaded feeds: of each input's shape, or (``values``) of its values."""

        out = {}
        feeds = self.config.sample_feeds or ()
        for meta in metas:
            seen = _seen_in_feeds(meta, feeds, values)
            if _one_rank(seen, meta, values):
                out[meta.name] = (tuple(map(min, zip(*seen))), seen[0], tuple(map(max, zip(*seen))))
        return out

    def _check_user_profiles(self, profiles: List[Profile], metas: List[TensorMeta], shape_inputs: Sequence[str]) -> None:
        """UsageError for a --trt-*-shapes profile naming no input, or shapes that do not fit it."""

        by_name = {m.name: m for m in metas}
        for k, prof in enumerate(profiles):
            for name, (lo, _mid, hi) in prof.items():
                meta = by_name.get(name)
                if meta is None:
                    raise UsageError(
                        f"profile {k} names '{name}', which is not an input of the network; inputs: {', '.join(by_name)}"
                    )
                if name in shape_inputs:
                    continue  # values, checked by TensorRT
                if len(lo) != len(_known(meta)) or any(
                    isinstance(d, int) and not (a == d == b) for a, b, d in zip(lo, hi, _known(meta))
                ):
                    raise UsageError(
                        f"profile {k}: shapes of '{name}' ({lo} .. {hi}) do not fit the network's "
                        f"{format_shape(_known(meta))}"
                    )

    def profiles(self, metas: List[TensorMeta], shape_inputs: Sequence[str]) -> List[Profile]:
        """The optimization profiles to build: the user's, else one from the data / --input-shapes.

        For a shape-tensor input, a profile holds its values (min/opt/max), not its shape.
        A profile is needed whenever an input is dynamic or is a shape tensor.
        """
        dynamic, shape_metas = _profiled_inputs(metas, shape_inputs)
        profiles = [dict(p) for p in self.config.profiles]
        self._check_user_profiles(profiles, metas, shape_inputs)
        if not dynamic and not shape_metas:
            if profiles:
                self.notes.append("--trt-*-shapes ignored: the network has no dynamic inputs")
            return []
        profiles = profiles or [{}]
        ranges, value_ranges = self._sample_ranges(dynamic, shape_metas)
        for k, prof in enumerate(profiles):
            self._fill_shapes(prof, dynamic, ranges)
            _fill_values(k, prof, shape_metas, value_ranges)
        return profiles

    def _sample_ranges(self, dynamic: List[TensorMeta], shape_metas: List[TensorMeta]) -> Tuple[Dict, Dict]:
        """The ranges the loaded feeds give: of the dynamic inputs' shapes, of the shape inputs' values."""
        if not self.config.sample_feeds:
            return {}, {}
        return self.feed_ranges(dynamic), self.feed_ranges(shape_metas, values=True)

    def _fill_shapes(self, prof: Profile, dynamic: Sequence[TensorMeta], ranges: Mapping) -> None:
        """Each dynamic input ``prof`` leaves out: its shapes in the loaded data, else one fixed shape."""
        for meta in dynamic:
            if meta.name in prof:
                continue
            if meta.name in ranges:
                prof[meta.name] = ranges[meta.name]
            else:
                shape = self.fallback_shape(meta)
                prof[meta.name] = (shape, shape, shape)

    def invalid_profile(self, k: int) -> Callable[[str], UsageError]:
        return lambda why: UsageError(f"profile {k} is invalid for this network: {self.errors(why or 'TensorRT gives no reason')}")

    def add_profiles(self, builder, cfg, metas, shape_inputs) -> None:
        self.profile_list = self.profiles(metas, shape_inputs)
        for k, prof in enumerate(self.profile_list):
            profile = trt_call(builder.create_optimization_profile, fail=self.failed("create a profile"))
            for name, (lo, mid, hi) in prof.items():
                what = "values" if name in shape_inputs else "shapes"

                def refused(why: str) -> UsageError:  # called at once: the loop's values are current
                    return UsageError(
                        f"profile {k}: TensorRT refuses the {what} of '{name}' (min {lo}, opt {mid}, max {hi}): "
                        f"{why or self.errors('no details')}"
                    )

                if name in shape_inputs:
                    trt_call(profile.set_shape_input, name, list(lo), list(mid), list(hi), fail=refused, void=True)
                else:
                    trt_call(profile.set_shape, name, lo, mid, hi, fail=refused, void=True)
            trt_call(cfg.add_optimization_profile, profile, fail=self.invalid_profile(k))

    def builder_config(self, builder, network):
        trt, c = self.trt, self.config
        weak = has_weak_typing(trt)
        cfg = trt_call(builder.create_builder_config, fail=self.failed("create a builder config"))
        if weak:
            if c.fp16:
                cfg.set_flag(trt.BuilderFlag.FP16)
            if c.bf16:
                cfg.set_flag(trt.BuilderFlag.BF16)
        if c.tf32:
            cfg.set_flag(trt.BuilderFlag.TF32)
        else:  # TensorRT enables TF32 by default; toolkit compares accuracy, so it is opt-in
            cfg.clear_flag(trt.BuilderFlag.TF32)
        for pool, size in c.pool_limits.items():
            cfg.set_memory_pool_limit(getattr(trt.MemoryPoolType, pool.upper()), size)
        cfg.progress_monitor = make_progress_monitor(trt, self.logger.interrupt)
        metas, shape_inputs = self.network_metas(network)
        self.add_profiles(builder, cfg, metas, shape_inputs)
        if c.int8:
            qdq = has_qdq(trt, network)
            if not weak:
                if not qdq:
                    raise DependencyError(
                        f"--int8 on TensorRT {trt.__version__} needs explicit quantization (QuantizeLinear/"
                        "DequantizeLinear nodes in the model); quantize the model first, or install TensorRT 10 "
                        "for calibration: pip install 'tensorrt<11'"
                    )
                self.notes.append("the model holds Q/DQ nodes: they set the INT8 precision (strongly typed)")
                return cfg
            cfg.set_flag(trt.BuilderFlag.INT8)
            if qdq:
                self.notes.append("the model holds Q/DQ nodes: --int8 uses their scales, nothing is calibrated")
                return cfg
            self.add_calibrator(builder, cfg, metas)
        return cfg

    def add_calibrator(self, builder, cfg, metas: List[TensorMeta]) -> None:
        """TensorRT 10 ``--int8`` without Q/DQ: calibrate on the run's inputs (one shape for all)."""
        from .calibrator import Calibrator

        self.calibrator = Calibrator.create(self.trt, self.cudart, metas, self.config, self.notes)
        shapes = self.calibrator.profile_shapes
        if shapes and any(_is_dynamic(m) for m in metas):

            def refused(why: str) -> UsageError:
                return UsageError(
                    f"TensorRT refuses the INT8 calibration profile {shapes}: {self.errors(why or 'give inputs of one shape')}"
                )

            profile = trt_call(builder.create_optimization_profile, fail=self.failed("create a profile"))
            for name, shape in shapes.items():
                trt_call(profile.set_shape, name, shape, shape, shape, fail=refused, void=True)
            trt_call(cfg.set_calibration_profile, profile, fail=refused)
        cfg.int8_calibrator = self.calibrator.impl

    def build(self) -> bytes:
        """The serialized engine; KeyboardInterrupt if Ctrl-C came while TensorRT was building."""
        trt = self.trt
        self.logger.errors.clear()
        builder = trt_call(trt.Builder, self.logger, fail=self.failed("create a builder"))

        def build_failed(why: str) -> BaseException:
            if self.logger.interrupt.pending:
                return KeyboardInterrupt()
            if self.calibrator is not None and self.calibrator.error is not None:
                return self.calibrator.error
            return inference_error(f"TensorRT could not build an engine: {self.errors(why or 'see the messages above')}")

        try:
            network, _parser = self.parse(builder)
            self.select_network_outputs(network)
            cfg = self.builder_config(builder, network)
            try:
                with self.logger.interrupt:
                    blob = trt_call(builder.build_serialized_network, network, cfg, fail=build_failed)
            finally:
                if self.calibrator is not None:
                    self.calibrator.free()
        finally:
            if self._tmp is not None:
                self._tmp.cleanup()
                self._tmp = None
        if self.logger.interrupt.pending:
            raise KeyboardInterrupt
        if self.calibrator is not None and self.calibrator.error is not None:
            raise self.calibrator.error
        data = bytes(blob)
        del blob
        if self.config.save_engine:
            from toolkit.core.io.model import write_bytes_atomic

            write_bytes_atomic(self.config.save_engine, data)
        return data


def stderr_sink(severity: str, text: str) -> None:
    sys.stderr.write(f"[TensorRT] {severity}: {text}\n")

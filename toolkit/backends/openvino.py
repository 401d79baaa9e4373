"""The OpenVINO runner (the ``[openvino]`` extra): ``toolkit run MODEL --openvino``, runner spec
``openvino[:device=cpu|gpu|npu|auto,precision=f32|bf16|f16]``.

OpenVINO reads the ONNX model from its path (external data beside it), compiles it for the
device and runs it. Which precision it computes in is the device's choice unless
``precision=`` says: on CPUs with bfloat16 support the CPU plugin infers in **bf16 by default**.
The runner reads the effective ``INFERENCE_PRECISION_HINT`` back from the compiled model and
names it in its log line, and it records it (:attr:`OpenvinoRunner.precision`) so that a
diagnosis judges its rounding as that precision's.

``--openvino-outputs mark all`` returns every tensor of the top graph (names chosen as for
``--onnx-outputs``), added to the model with ``Model.add_outputs`` before compiling; like any
marking, it can change what the device fuses.

This module imports ``openvino`` only inside functions; a missing package is a
:class:`~toolkit.core.errors.DependencyError` (exit 4) naming ``pip install "toolkit[openvino]"``.
Its options (:class:`OpenvinoOptions`) and registry glue (``preflight``, ``factory``,
``in_process``) live here, so that :mod:`toolkit.run.registry` declares the kind in one
``register(...)`` call.
"""

from __future__ import annotations

import importlib
import io
import os
import re
import time
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence

from toolkit.backends.base import Runner
from toolkit.core.declare import option
from toolkit.core.errors import LIBRARY_ERRORS, DependencyError, InferenceError, InputError, UsageError
from toolkit.core.install import import_extra
from toolkit.core.graph.layerwise import select_outputs
from toolkit.core.meta import TensorMeta
from toolkit.core.io.model import check_readable_file, load_model, read_bytes

#: ``precision=`` values -> OpenVINO's INFERENCE_PRECISION_HINT values
PRECISIONS = {"f32": "f32", "bf16": "bf16", "f16": "f16"}
#: ``device=`` values (OpenVINO device names, lower case here)
DEVICES = ("cpu", "gpu", "npu", "auto")

# OpenVINO element type names -> toolkit dtype names
_TYPES = {
    "f32": "float32", "f64": "float64", "f16": "float16", "bf16": "bfloat16",
    "i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64",
    "u8": "uint8", "u16": "uint16", "u32": "uint32", "u64": "uint64",
    "boolean": "bool", "string": "string",
}
# INFERENCE_PRECISION_HINT read back -> the short name shown and the storage it rounds to
_SHORT = {"f32": "f32", "bf16": "bf16", "f16": "f16"}
_REDUCED = {"bf16": "bf16", "f16": "fp16"}


def import_openvino():
    """The ``openvino`` module; DependencyError (exit 4) naming the extra when it is missing."""
    return import_extra("openvino", "openvino", "OpenVINO is not installed")


def _device_name(device: Optional[str]) -> str:
    return (device or "cpu").upper()


def check_device(device: Optional[str]) -> None:
    """DependencyError unless OpenVINO offers ``device`` (AUTO always exists)."""
    ov = import_openvino()
    name = _device_name(device)
    if name in ("AUTO", "CPU"):  # (the CPU plugin ships with every OpenVINO package)
        return
    available = list(ov.Core().available_devices)
    if not any(d == name or d.startswith(name + ".") for d in available):
        raise DependencyError(
            f"OpenVINO device '{name}' is not available on this machine; available: {', '.join(available) or 'none'}"
        )


def openvino_errors() -> tuple:
    """What OpenVINO raises for a model, device or value it cannot take: its own failures
    (``GeneralFailure``, ``OpConversionFailure``... and ``openvino.exceptions``) and
    :data:`~toolkit.core.errors.LIBRARY_ERRORS`. Called in an ``except`` clause, after OpenVINO
    was imported."""
    own: List[type] = []
    for where in ("openvino._pyopenvino", "openvino.exceptions"):
        try:
            module = importlib.import_module(where)
        except ImportError:  # an OpenVINO without that module
            continue
        own += [v for v in vars(module).values() if isinstance(v, type) and issubclass(v, Exception)]
    return tuple(own) + LIBRARY_ERRORS


# ---------------------------------------------------------------------- registry glue


@dataclass
class OpenvinoOptions:
    """The options of the ``openvino`` runner kind, declared here once: ``run``'s flags (the
    OpenVINO help panel), the ``openvino:device=...,precision=...`` spec options and
    ``RunOptions.of("openvino")``."""

    device: Optional[str] = option(
        "--openvino-device", metavar="DEVICE", spec="device", choices=DEVICES, complete=DEVICES,
        help="OpenVINO device: cpu (default), gpu, npu or auto.",
    )
    precision: Optional[str] = option(
        "--openvino-precision", metavar="PRECISION", spec="precision", choices=tuple(PRECISIONS),
        complete=tuple(PRECISIONS),
        help="OpenVINO inference precision: f32, bf16 or f16 (default: the device's choice, bf16 on CPUs with "
        "bfloat16 support).",
    )
    outputs: List[str] = option(
        "--openvino-outputs", metavar="NAMES...", factory=list,
        help="Tensors OpenVINO returns instead of the model's outputs: 'mark all' or '*' (every output of every "
        "node of the top graph), names, or glob patterns.",
    )
    exclude_outputs: List[str] = option(
        "--openvino-exclude-outputs", metavar="NAMES...", factory=list, help="Names or glob patterns to leave out of the OpenVINO outputs."
    )


def preflight(opts: Any, reporter: Any = None) -> None:
    """Before any data is read: usage errors (exit 2), then a missing OpenVINO or device (exit 4)."""
    own: OpenvinoOptions = opts.of("openvino")  # (--openvino-device and --openvino-precision: checked by the
    check_device(own.device)  # registry against their declared choices before this runs)


def factory(opts: Any, config: Any, reporter: Any, name: Optional[str]) -> "OpenvinoRunner":
    """An inactive :class:`OpenvinoRunner` for the run options ``opts`` (``opts.of("openvino")``)."""
    own: OpenvinoOptions = opts.of("openvino")
    return OpenvinoRunner(
        opts.model, device=own.device, precision=own.precision, outputs=own.outputs,
        exclude_outputs=own.exclude_outputs, external_data_dir=opts.external_data_dir, name=name,
    )


def in_process(options: Mapping[str, Any]) -> bool:
    """Whether a runner spec's options keep OpenVINO on the CPU (no device context to keep out
    of forked workers)."""
    return str(options.get("device") or "cpu").lower() == "cpu"


def reduced(options: Mapping[str, Any]) -> List[str]:
    """The reduced precision a spec asks for: ``precision=bf16`` -> ``["bf16"]``, ``f16`` -> ``["fp16"]``."""
    low = _REDUCED.get(str(options.get("precision") or ""))
    return [low] if low else []


def runs_reduced(options: Mapping[str, Any]) -> Optional[str]:
    """The reduced precision a spec's runner computes in: the one it asks for, else the device's
    default (bf16 on CPUs with bfloat16 support); None for f32, or when OpenVINO cannot say."""
    low = reduced(options)
    if low or options.get("precision"):
        return low[0] if low else None
    try:
        hint = import_openvino().Core().get_property(_device_name(options.get("device")), "INFERENCE_PRECISION_HINT")
    except (DependencyError, *openvino_errors()):  # a device that does not report it (AUTO, NPU), or none at all
        return None
    return _REDUCED.get(_type_name(hint))


def full_precision(options: Mapping[str, Any]) -> Dict[str, Any]:
    """The spec's options with float32 inference (``debug precision`` runs its mixed models so)."""
    return {**options, "precision": "f32"}


# ---------------------------------------------------------------------- the runner


class OpenvinoRunner(Runner):
    """Runs an ONNX model with OpenVINO.

    Args:
        model_path: path of the ONNX model (its external data beside it), or ``-`` for stdin.
        device: OpenVINO device (``cpu`` by default, ``gpu``, ``npu``, ``auto``).
        precision: inference precision hint (``f32``, ``bf16``, ``f16``); None: the device's default.
        outputs: ``--openvino-outputs`` words (``["mark", "all"]``, names, globs); None keeps the
            model's outputs.
        exclude_outputs: names or globs removed from the outputs.
        external_data_dir: where the external weights are; OpenVINO reads them beside the model only.
    """

    name = "openvino-runner"
    runtime = "OpenVINO"

    def __init__(self, model_path: str, *, device: Optional[str] = None, precision: Optional[str] = None,
                 outputs: Optional[Sequence[str]] = None, exclude_outputs: Optional[Sequence[str]] = None,
                 external_data_dir: Optional[str] = None, name: Optional[str] = None) -> None:
        super().__init__(name)
        self.model_path = model_path
        self.device = _device_name(device)
        self.precision_requested = (precision or "").lower() or None
        self.outputs = list(outputs or [])
        self.exclude_outputs = list(exclude_outputs or [])
        self.external_data_dir = external_data_dir
        #: the effective inference precision (``f32``, ``bf16``, ``f16``), known once active
        self.inference_precision = ""
        #: the reduced precision it computes in (``bf16``/``fp16``), None for f32
        self.precision: Optional[str] = None
        self.version = ""
        self._core: Any = None  # openvino.Core once active
        self._raw: Optional[bytes] = None  # the model's bytes when read from stdin
        self._model: Any = None  # openvino.Model: read, outputs marked
        self._compiled_for: Dict[Any, Any] = {}  # feed shapes (None: any) -> infer request
        self._inputs: List[TensorMeta] = []
        self._output_names: List[str] = []
        self._ports: List[int] = []

    # ------------------------------------------------------------------ set-up
    def _read(self, ov):
        """The ov.Model of the file (or stdin), as OpenVINO's ONNX front end builds it (asked for
        ONNX only: a file that is no ONNX model is not offered to its other front ends)."""

        path = self.model_path
        self._check_external_data_dir()
        self._check_source()
        try:
            front = ov.frontend.FrontEndManager().load_by_framework("onnx")
            return front.convert(front.load(io.BytesIO(self._raw) if path == "-" else path))
        except openvino_errors() as exc:
            where = "<stdin>" if path == "-" else path
            raise InputError(f"{where}: OpenVINO cannot read the model: {last_line(exc)}") from None

    def _check_external_data_dir(self) -> None:
        """UsageError for an --external-data-dir other than the model's folder (OpenVINO reads no other)."""
        if not self.external_data_dir or self.model_path == "-":
            return
        here = os.path.dirname(os.path.abspath(self.model_path))
        if os.path.abspath(self.external_data_dir) != here:
            raise UsageError(
                "--external-data-dir: OpenVINO reads external data from the model's own folder only; "
                "run the model where its weights are"
            )

    def _check_source(self) -> None:
        """The model's bytes read from stdin (kept), or its file checked: readable, not empty."""
        path = self.model_path
        if path == "-":
            self._raw = read_bytes(path)
            return
        check_readable_file(path)
        if not os.path.getsize(path):
            raise InputError(f"{path}: empty file, expected an ONNX model")

    def _selected(self) -> Optional[List[str]]:
        """The tensor names --openvino-outputs chooses (None: the model's outputs)."""
        if not (self.outputs or self.exclude_outputs):
            return None

        if self._raw is not None:  # (stdin, read once)
            import onnx

            onnx_model = onnx.ModelProto.FromString(self._raw)
        else:
            onnx_model = load_model(self.model_path, load_external_data=False)
        return select_outputs(onnx_model, self.outputs, self.exclude_outputs, option="--openvino-outputs")

    def _mark(self, model, names: Sequence[str]) -> List[str]:
        """Add ``names`` as outputs of ``model``; returns those OpenVINO does not offer."""
        have = {n for out in model.outputs for n in out.get_names()}
        todo = [n for n in names if n not in have]
        try:
            model.add_outputs(todo)
            return []
        except openvino_errors():  # some name is not a tensor of OpenVINO's graph: add them one by one
            missing = []
            for name in todo:
                try:
                    model.add_outputs([name])
                except openvino_errors():  # folded away by OpenVINO's ONNX reader
                    missing.append(name)
            return missing

    def _config(self) -> Dict[str, str]:
        if self.precision_requested:
            return {"INFERENCE_PRECISION_HINT": PRECISIONS[self.precision_requested]}
        return {}

    def _activate(self) -> None:
        ov = import_openvino()
        self.version = ov.get_version().split("-")[0]
        self._core = ov.Core()
        model = self._read(ov)
        wanted = self._selected()
        if wanted is not None:
            wanted = self._marked(model, wanted)
        self._model = model
        self._inputs = [TensorMeta(p.get_any_name(), _shape(p.get_partial_shape()), _dtype(p)) for p in model.inputs]
        self._bind_outputs(model, wanted)
        if model.is_dynamic():
            # compiled for each feed's shapes when they come (static shapes run faster)
            self._expect_precision(ov)
        else:
            self._compiled_for[None] = self._request_for(self._compile(model))

    def _marked(self, model, wanted: List[str]) -> List[str]:
        """Mark ``wanted`` as outputs of ``model``; the names OpenVINO offers."""
        missing = self._mark(model, wanted)
        if not missing:
            return wanted
        explicit = [n for n in missing if n in self.outputs]
        if explicit:
            raise InputError(f"OpenVINO does not offer '{explicit[0]}' as a tensor of the model")
        self.notes.append(
            f"not returning {len(missing)} tensor(s) that OpenVINO's ONNX reader folds away: "
            + ", ".join(missing[:5]) + (" ..." if len(missing) > 5 else "")
        )
        return [n for n in wanted if n not in set(missing)]

    def _compile(self, model):
        try:
            return self._core.compile_model(model, self.device, self._config())
        except openvino_errors() as exc:  # what it cannot compile
            raise InputError(
                f"{self.model_path}: OpenVINO cannot compile the model for {self.device}: {last_line(exc)}"
            ) from None

    def _request_for(self, compiled):
        self._read_precision(compiled)
        return compiled.create_infer_request()

    def _request_for_feed(self, feed: Mapping):
        """The infer request of a model compiled for the feed's shapes (dynamic models: one per
        set of shapes, up to four; the dynamic model itself when it cannot be made static or when
        a fifth set of shapes comes)."""
        if None in self._compiled_for:
            return self._compiled_for[None]
        key = tuple(tuple(getattr(feed.get(m.name), "shape", ())) for m in self._inputs)
        request = self._compiled_for.get(key)
        if request is None and len(self._compiled_for) >= 4:
            # the shapes keep changing (a generation loop: a longer cache each step): compile the
            # dynamic model once and run every later feed on it, instead of a compile per feed
            self._compiled_for.clear()
            self._compiled_for[None] = self._request_for(self._compile(self._model))
            return self._compiled_for[None]
        if request is None:
            model = self._model.clone()
            try:
                model.reshape({m.name: list(dims) for m, dims in zip(self._inputs, key)})
            except openvino_errors():  # shapes OpenVINO cannot propagate statically: run it dynamic
                self._compiled_for[None] = self._request_for(self._compile(self._model))
                return self._compiled_for[None]
            request = self._request_for(self._compile(model))
            self._compiled_for[key] = request
        return request

    def _expect_precision(self, ov) -> None:
        """The precision the device will pick, before any compile: its default or f32 when asked
        (read from the device), else read from a one-node probe compiled with the same settings
        (the device may fall back: f16 is bf16 on CPUs with bfloat16 support)."""
        if self.precision_requested in (None, "f32"):
            try:
                hint = self._core.get_property(self.device, "INFERENCE_PRECISION_HINT")
                self._set_precision("f32" if self.precision_requested else _type_name(hint))
                return
            except openvino_errors():  # a device (AUTO) may not report it: ask a compiled probe
                pass
        self._read_precision(self._compile(_probe(ov)))

    def _set_precision(self, name: str) -> None:
        self.inference_precision = _SHORT.get(name, name)
        self.precision = _REDUCED.get(name)

    def _read_precision(self, compiled) -> None:
        try:
            name = _type_name(compiled.get_property("INFERENCE_PRECISION_HINT"))
        except openvino_errors():  # a device (AUTO, NPU) may not report it
            name = ""
        self._set_precision(name)

    def _bind_outputs(self, model, wanted: Optional[List[str]]) -> None:
        ports = list(model.outputs)
        if wanted is None:
            self._output_names = [_port_name(p) for p in ports]
            self._ports = list(range(len(ports)))
            return
        index: Dict[str, int] = {}
        for k, port in enumerate(ports):
            for n in port.get_names():
                index.setdefault(n, k)
        self._output_names = [n for n in wanted if n in index]
        self._ports = [index[n] for n in self._output_names]

    def _deactivate(self) -> None:
        self._compiled_for = {}
        self._model = None
        self._core = None

    # ------------------------------------------------------------------ queries
    def input_metadata(self) -> List[TensorMeta]:
        return list(self._inputs)

    def output_names(self) -> List[str]:
        return list(self._output_names)

    def summary(self) -> str:
        if not self.precision_requested:
            chosen = "the device's default"
        elif self.inference_precision and self.inference_precision != self.precision_requested:
            chosen = f"{self.precision_requested} asked; the device runs {self.inference_precision}"
        else:
            chosen = "as asked"
        text = f"OpenVINO {self.version} on {self.device} | inference precision {self.inference_precision or 'unknown'}"
        text += f" ({chosen})"
        if self.precision and not self.precision_requested:
            text += "; openvino:precision=f32 (--openvino-precision f32) computes in float32"
        return text

    # ------------------------------------------------------------------ inference
    def _infer(self, feed: Mapping) -> Dict[str, object]:
        request = self._request_for_feed(feed)
        start = time.perf_counter()
        try:
            request.infer(_plain_types(feed))
            values = [request.get_output_tensor(k).data.copy() for k in self._ports]
        except tuple(e for e in openvino_errors() if e is not MemoryError) as exc:
            raise InferenceError(f"{self.name}: inference failed: {last_line(exc)}") from None
        self.last_inference_time = time.perf_counter() - start
        return dict(zip(self._output_names, values))


def _plain_types(feed: Mapping) -> Dict[str, object]:
    """``feed`` with each 64-bit integer array typed as numpy's plain ``int64``/``uint64``.

    ONNX-Runtime returns int64 tensors typed ``longlong`` (dtype char ``q``), the same bits; fed
    back as a 0-d array (a shape value, ``Gather``'s scalar: what ``debug reduce --compare``
    feeds a subgraph from the reference's tensors), OpenVINO's Python binding refuses it
    ("Unsupported data type: int64")."""
    out: Dict[str, object] = {}
    for name, value in feed.items():
        dtype = getattr(value, "dtype", None)
        if dtype is not None and dtype.char in "qQ":
            import numpy as np

            value = np.asarray(value).view(np.dtype(dtype.str))
        out[name] = value
    return out


_FAILED_PASS = re.compile(r"\[(\w+)\] END: node: \S+ (\S+) ")
# the ONNX front end's report of an operator it could not convert: "-- If-13 with a message:",
# the reason's lines, then "Summary:" (or the next operator's "-- ...")
_FAILED_OP = re.compile(r"^-- (\S+) with a message:\n(.*?)(?=^-- |^Summary:|\Z)", re.M | re.S)
_ONNX_NODE = re.compile(r"While validating ONNX node '<Node\((\w+)\): ([^>]*)>'")


def last_line(exc: BaseException) -> str:
    """OpenVINO's message without its source locations: the last line of the text it raised, and
    the graph pass and node it names when one of its passes failed (``[AddTransformation] END:
    node: opset1::Add Add@1 ...``: the last line alone, ``index '0' out of range``, says nothing).
    When its ONNX front end could not convert an operator, the operator, the ONNX node (by its
    first output) and OpenVINO's reason (its last line ``Conversion is failed for: If-13`` alone
    does not say why)."""
    text = str(exc)
    lines = _text_lines(text)
    last = lines[-1] if lines else type(exc).__name__
    failed = _FAILED_PASS.search(text)
    if failed:
        last += f" (in OpenVINO's {failed.group(1)} pass, at node {failed.group(2)})"
    op = _FAILED_OP.search(text)
    if op:
        last = _unconverted(op)
    return last


def _text_lines(text: str) -> List[str]:
    """The lines of ``text`` that hold text, stripped."""
    return [line.strip() for line in text.splitlines() if line.strip()]


def _unconverted(op) -> str:
    """The ONNX front end's report (a match of _FAILED_OP) of an operator it could not convert:
    the operator, the ONNX node (by its first output) and the reason's last line."""
    reason = _text_lines(op.group(2))
    node = _ONNX_NODE.search(op.group(2))
    at = f" (the {node.group(1)} node writing '{node.group(2)}')" if node else ""
    why = f": {reason[-1]}" if reason else ""
    return f"its ONNX reader cannot convert {op.group(1)}{at}{why}"


def _type_name(hint) -> str:
    """An OpenVINO element type (or its text) -> its short name (``bf16``)."""
    return hint.get_type_name() if hasattr(hint, "get_type_name") else str(hint)


def _probe(ov):
    """A one-node model: compiled with the runner's settings, it tells the precision the device picks."""
    try:
        from openvino import opset13
    except ImportError:  # OpenVINO before 2025 keeps the opsets under openvino.runtime
        from openvino.runtime import opset13  # type: ignore[no-redef]

    param = opset13.parameter([1], ov.Type.f32, name="probe")
    return ov.Model([opset13.relu(param)], [param], "probe")


def _port_name(port) -> str:
    names = sorted(port.get_names())
    try:
        return port.get_any_name()
    except openvino_errors():  # an output with no name: OpenVINO raises
        return names[0] if names else "output"


def _shape(partial) -> Optional[tuple]:
    if partial.rank.is_dynamic:
        return None
    return tuple(d.get_length() if d.is_static else None for d in partial)


def _dtype(port) -> Optional[str]:
    name = port.get_element_type().get_type_name()
    return _TYPES.get(name, name)

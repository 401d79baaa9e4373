"""The ONNX-Runtime runner.

When the model's outputs are kept as they are, the session is created straight from
the model's path (no protobuf parse in Python, ONNX-Runtime reads external data beside
the model). When outputs are marked (``--onnx-outputs``), the model is parsed without its
external weights, its outputs are replaced, and the session is created from the bytes,
with ONNX-Runtime pointed at the folder holding the external data.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
import time
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

from toolkit.backends.base import Runner
from toolkit.core.errors import (  # noqa: F401  (InferenceError: re-exported)
    LIBRARY_ERRORS,
    DependencyError,
    ExitCode,
    InferenceError,
    InputError,
    UsageError,
    ToolkitError,
    one_line,
    ort_errors,
)
from toolkit.core.io.functions import check_inlined_size, check_model_file, interruptible
from toolkit.core.process.interrupt import interruptible_run
from toolkit.core.graph.graphs import external_data_folder, has_external_data
from toolkit.core.graph.layerwise import outputs_patch, select_outputs, set_outputs
from toolkit.core.meta import TensorMeta
from toolkit.core.io.model import check_readable_file, describe, load_external_data_into, parse_model, read_bytes

STDIO = "-"

# Short spellings accepted by --providers (case-insensitive) -> ONNX-Runtime names.
PROVIDER_ALIASES = {
    "cpu": "CPUExecutionProvider",
    "cuda": "CUDAExecutionProvider",
    "trt": "TensorrtExecutionProvider",
    "tensorrt": "TensorrtExecutionProvider",
    "rocm": "ROCMExecutionProvider",
    "migraphx": "MIGraphXExecutionProvider",
    "dml": "DmlExecutionProvider",
    "directml": "DmlExecutionProvider",
    "openvino": "OpenVINOExecutionProvider",
    "coreml": "CoreMLExecutionProvider",
    "azure": "AzureExecutionProvider",
    "qnn": "QNNExecutionProvider",
    "xnnpack": "XnnpackExecutionProvider",
}

# --ort-optimization level names -> ONNX-Runtime GraphOptimizationLevel member names.
OPTIMIZATION_LEVELS = {
    "disable": "ORT_DISABLE_ALL",
    "basic": "ORT_ENABLE_BASIC",
    "extended": "ORT_ENABLE_EXTENDED",
    "all": "ORT_ENABLE_ALL",
}


def check_optimization_level(level: Optional[str]) -> None:
    """UsageError for an unknown ``--ort-optimization`` level (checked before any work)."""
    if level and level.lower() not in OPTIMIZATION_LEVELS:
        raise UsageError(
            f"unknown --ort-optimization level '{level}'; use one of: {', '.join(OPTIMIZATION_LEVELS)}"
        )


# ONNX-Runtime type strings -> toolkit dtype names.
_ORT_TYPES = {
    "float": "float32",
    "double": "float64",
    "float16": "float16",
    "bfloat16": "bfloat16",
    "int8": "int8",
    "int16": "int16",
    "int32": "int32",
    "int64": "int64",
    "uint8": "uint8",
    "uint16": "uint16",
    "uint32": "uint32",
    "uint64": "uint64",
    "bool": "bool",
    "string": "string",
    "float8e4m3fn": "float8e4m3fn",
    "float8e4m3fnuz": "float8e4m3fnuz",
    "float8e5m2": "float8e5m2",
    "float8e5m2fnuz": "float8e5m2fnuz",
    "int4": "int4",
    "uint4": "uint4",
}

EXTERNAL_DIR_KEY = "session.model_external_initializers_file_folder_path"


# ONNX-Runtime's own log severity (0 verbose, 1 info, 2 warning, 3 error, 4 fatal). By default
# it prints nothing: its errors reach the user once, as the exception toolkit reports in its
# own `error:` line (ORT's logger would repeat them, in colour, even into pipes). The CLI
# raises it with -v/-vv/-vvv (see set_log_severity).
_LOG_SEVERITY = 4
# Where ONNX-Runtime's log lines go when they must not reach stderr as ORT writes them (ORT's
# console sink colours warnings and errors unconditionally): None lets them through untouched.
_LOG_SINK: Optional[Callable[[str], None]] = None
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def set_log_severity(severity: int, sink: Optional[Callable[[str], None]] = None) -> None:
    """Let ONNX-Runtime print its own log lines from ``severity`` up (0 = everything, 4 = fatal only).

    With ``sink``, those lines are caught around session creation and inference and handed to
    ``sink`` one by one, without ANSI colour codes, instead of reaching stderr directly.
    """
    global _LOG_SEVERITY, _LOG_SINK
    _LOG_SEVERITY = max(0, min(4, int(severity)))
    _LOG_SINK = sink
    ort = sys.modules.get("onnxruntime")
    if ort is not None:
        ort.set_default_logger_severity(_LOG_SEVERITY)


@contextlib.contextmanager
def routed_logs() -> Iterator[None]:
    """While ONNX-Runtime may log, catch what it writes to the process's stderr (file
    descriptor 2: its C++ logger bypasses Python) and pass each line, uncoloured, to the sink."""
    sink = _LOG_SINK
    if sink is None or _LOG_SEVERITY >= 4:
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as caught:
        os.dup2(caught.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            caught.seek(0)
            text = caught.read().decode("utf-8", errors="replace")
            for line in _ANSI.sub("", text).splitlines():
                if line.strip():
                    sink(line.rstrip())


def _import_ort():
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        raise DependencyError("onnxruntime is not installed; install it with: pip install onnxruntime") from None
    onnxruntime.set_default_logger_severity(_LOG_SEVERITY)
    return onnxruntime


def provider_list(text: str) -> List[str]:
    """A runner spec's ``providers=cuda+cpu`` value -> ``["cuda", "cpu"]`` (priority order, as
    ``--providers`` takes them)."""
    return [p for p in text.replace("+", ",").split(",") if p.strip()]


def resolve_providers(names: Optional[Sequence[str]]) -> List[str]:
    """``["cpu", "cuda"]`` -> ONNX-Runtime provider names; DependencyError if one is not available."""
    ort = _import_ort()
    available = list(ort.get_available_providers())
    if not names:
        return ["CPUExecutionProvider"]
    out: List[str] = []
    for raw in names:
        for name in provider_list(raw):
            full = _provider_name(name.strip(), available)
            if full not in out:
                out.append(full)
    return out


def _provider_name(name: str, available: Sequence[str]) -> str:
    """ONNX-Runtime's name of provider ``name`` (an alias, any case, with or without
    ``ExecutionProvider``); DependencyError when this installation lacks it."""
    key = name.lower()
    by_lower = {p.lower(): p for p in available}
    full = PROVIDER_ALIASES.get(key) or by_lower.get(key) or by_lower.get(key + "executionprovider") or name
    if full not in available:
        raise DependencyError(
            f"ONNX-Runtime execution provider '{name}' is not available in this installation; "
            f"available: {', '.join(available)}"
        )
    return full


def ort_type_to_dtype(type_str: str) -> Optional[str]:
    """``tensor(float)`` -> ``float32``; None for non-tensor types (sequences, maps)."""
    if not type_str.startswith("tensor(") or not type_str.endswith(")"):
        return None
    inner = type_str[len("tensor(") : -1]
    return _ORT_TYPES.get(inner, inner)


class OnnxrtRunner(Runner):
    """Runs an ONNX model with ONNX-Runtime.

    Args:
        model_path: path of the model, or ``-`` for stdin.
        providers: execution providers (short names accepted); CPU by default.
        outputs: ``--onnx-outputs`` words (``["mark", "all"]``, ``["*"]``, names, globs);
            None keeps the model's outputs.
        exclude_outputs: names or globs removed from the outputs.
        external_data_dir: where the model's external weights are (default: its folder).
        model: an already loaded ``onnx.ModelProto`` to use instead of reading ``model_path``
            (it is modified in place when outputs are marked).
        graph_optimization: ONNX-Runtime graph optimization level name
            (``disable``, ``basic``, ``extended``, ``all``); default ``all`` (``disable``
            with ``fp16``).
        fp16: emulate fp16 storage (:func:`toolkit.convert.emulate.emulate_any`): every tensor
            an fp16 model stores is rounded to fp16 while computing in fp32.
        bf16: the same for bfloat16 (every tensor a bf16 model stores rounded to bfloat16).
        fp32_nodes: with ``fp16``/``bf16``, exactly these nodes stay fp32 (no automatic choice):
            a subgraph cut from a model keeps the choice made for the whole model.
    """

    name = "onnxrt-runner"
    runtime = "ONNX-Runtime"

    def __init__(
        self,
        model_path: str,
        *,
        providers: Optional[Sequence[str]] = None,
        outputs: Optional[Sequence[str]] = None,
        exclude_outputs: Optional[Sequence[str]] = None,
        external_data_dir: Optional[str] = None,
        model=None,
        graph_optimization: Optional[str] = None,
        name: Optional[str] = None,
        fp16: bool = False,
        bf16: bool = False,
        fp32_nodes: Optional[Sequence[str]] = None,
    ):
        super().__init__(name)
        self.fp32_nodes = list(fp32_nodes) if fp32_nodes is not None else None
        if fp16 and bf16:
            raise UsageError("emulate fp16 or bf16, not both")
        self.fp16 = fp16 or bf16  # reduced precision storage emulated
        self.emulated_dtype = "bfloat16" if bf16 else "float16"
        self.fp16_rounded = 0
        self.model_path = model_path
        self.providers_requested = list(providers or [])
        self.outputs_requested = list(outputs or [])
        self.exclude_outputs = list(exclude_outputs or [])
        self.external_data_dir = external_data_dir
        self.model = model
        self.graph_optimization = graph_optimization
        self.providers: List[str] = []
        self.notes: List[str] = []  # warnings worth showing the user
        self._session: Any = None  # onnxruntime.InferenceSession once active
        self._inputs: List[TensorMeta] = []
        self._output_names: List[str] = []

    # ------------------------------------------------------------------ set-up
    def _needs_onnx(self) -> bool:
        return bool(
            self.model is not None
            or self.fp16
            or self.outputs_requested
            or self.exclude_outputs
            or self.model_path == STDIO
        )

    @property
    def runtime_title(self) -> str:
        return f"{self.runtime} {_import_ort().__version__}"

    def _session_options(self, ort):
        so = ort.SessionOptions()
        so.log_severity_level = _LOG_SEVERITY  # see set_log_severity
        if self.providers == ["CPUExecutionProvider"]:
            # The memory pattern (one block planned from the first run, allocated from the second
            # on) adds ~15% to the peak of a many-iteration run with no measurable speed-up on CPU.
            so.enable_mem_pattern = False
        chosen = self.graph_optimization
        if self.fp16 and not chosen:
            # ONNX-Runtime's fusions (LayerNorm, even at the basic level) see through the
            # emulation's Casts and would compute whole blocks without its rounding
            chosen = "disable"
        if chosen:
            check_optimization_level(chosen)
            level = OPTIMIZATION_LEVELS[chosen.lower()]
            so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
        return so

    def _emulated(self, model):
        """The fp16-storage emulation of ``model`` (a copy), with the selected outputs."""
        import onnx

        if model is self.model:
            copy = onnx.ModelProto()
            copy.CopyFrom(model)
            model = copy
        if has_external_data(model):
            load_external_data_into(model, external_data_folder(self.model_path, self.external_data_dir), self.model_path)
        if self._selected is not None:
            set_outputs(model, self._selected)
        emu = self._emulate(model)
        self.fp16_rounded = emu.rounded
        return emu.model

    def _emulate(self, model):
        """The emulation of ``model`` (changed in place): keeping the nodes ``fp32_nodes`` names (those
        in the model) when given and the model computes in float32 only, else the nodes it chooses."""
        from toolkit.convert.emulate import emulate_any  # (loaded when emulating)

        if self.fp32_nodes is not None:
            from toolkit.convert.common import reduced_types

            if not reduced_types(model):
                present = {n.name for n in model.graph.node}
                keep = [n for n in self.fp32_nodes if n in present]
                return emulate_any(model, keep, inplace=True, dtype=self.emulated_dtype, auto_keep=False)
        return emulate_any(model, inplace=True, dtype=self.emulated_dtype)

    def _blame_emulation(self, ort, so, exc: BaseException) -> None:
        """ONNX-Runtime refused the fp16/bf16-emulated copy that toolkit made of the model: when the
        model itself loads (or fails only for want of reduced-precision kernels, which the copy exists
        to avoid), the copy is at fault, not the user's file: a bug in toolkit (exit 70)."""
        source: Any = self.model_path
        if self.model is not None:
            from google.protobuf.message import EncodeError

            try:
                source = self.model.SerializeToString()
            except LIBRARY_ERRORS + (EncodeError,):  # (past protobuf's 2 GB: said as before)
                return
        try:
            with routed_logs():
                ort.InferenceSession(source, sess_options=so, providers=self.providers)
        except ort_errors() as original:
            if "NOT_IMPLEMENTED" not in str(original):
                return  # the model itself does not load: the user's file is at fault
        short = "bf16" if self.emulated_dtype == "bfloat16" else "fp16"
        raise ToolkitError(
            f"toolkit's {short}-emulated copy of {describe(self.model_path)} does not load in ONNX-Runtime, where the "
            f"model itself does: {one_line(exc)}; this is a bug in toolkit, not in the model (run it without "
            f"--{short} meanwhile)",
            exit_code=ExitCode.INTERNAL,
        ) from None

    def _model_source(self, so):
        """Path or bytes for InferenceSession; adds the requested outputs.

        Outputs are added without re-serializing the model: the serialized model is
        followed by a tiny ModelProto holding only the extra graph outputs, which protobuf
        parsing merges into the graph (repeated fields append). The model's own outputs
        stay; ``run`` asks only for the selected names.
        """
        self._selected = None
        self._model_outputs: set = set()  # the model's own outputs (known where the model is parsed)
        self._low_precision: Optional[bool] = None  # the model computes in fp16/bf16 (None: not looked at)
        path = self._path_as_is()
        if path is not None:
            return path
        model, raw = self._given_model()
        check_inlined_size(model, describe(self.model_path))
        self._low_precision = computes_in_low_precision(model)
        patch = self._outputs_patch(model) if self.outputs_requested or self.exclude_outputs else b""
        if self.fp16:
            model = self._emulated(model)
            raw, patch = None, b""
        if has_external_data(model):
            so.add_session_config_entry(EXTERNAL_DIR_KEY, self._external_folder())
        if raw is None:
            raw = self._serialized(model)
        return raw + patch if patch else raw

    def _given_model(self) -> Tuple[Any, Optional[bytes]]:
        """The model given (its bytes None), or the model file parsed (and its bytes)."""
        if self.model is not None:
            return self.model, None
        raw = read_bytes(self.model_path)
        return parse_model(raw, self.model_path), raw

    def _external_folder(self) -> str:
        """The folder of the model's external data (InputError when there is none)."""
        base = external_data_folder(self.model_path, self.external_data_dir)
        if not os.path.isdir(base):
            raise InputError(f"{base}: external data folder does not exist")
        return base

    def _outputs_patch(self, model) -> bytes:
        """The outputs selected (remembered, with the model's own), as a patch to the model's bytes."""
        names = select_outputs(model, self.outputs_requested, self.exclude_outputs)
        self._model_outputs = {o.name for o in model.graph.output}
        patch = outputs_patch(model, names)
        self._selected = names
        return patch

    def _outputs_named(self) -> set:
        """The outputs requested by name (not ``mark all``, not a pattern)."""
        return {w for w in self.outputs_requested if w not in ("mark", "all") and not any(c in w for c in "*?[")}

    def _path_as_is(self) -> Optional[str]:
        """The model's path, when ONNX-Runtime loads the file itself (no model to change, weights beside it)."""
        if self._needs_onnx():
            return None
        if not (os.path.isfile(self.model_path) and os.access(self.model_path, os.R_OK)):
            check_readable_file(self.model_path)
        if self.external_data_dir is not None:
            return None
        check_model_file(self.model_path)  # (local functions that inline to too many nodes)
        return self.model_path

    def _serialized(self, model) -> bytes:
        from google.protobuf.message import EncodeError

        try:
            return model.SerializeToString()
        except LIBRARY_ERRORS + (EncodeError,) as exc:  # over protobuf's 2 GB limit
            raise InputError(
                f"{describe(self.model_path)}: cannot serialize the model ({exc}); "
                "save it with external data first"
            ) from None

    def _activate(self) -> None:
        ort = _import_ort()
        self.providers = resolve_providers(self.providers_requested)
        so = self._session_options(ort)
        sess = self._open_session(ort, so, self._model_source(so))
        self._session = sess
        self._note_cpu_low_precision()
        self._inputs = [
            TensorMeta(arg.name, _shape_of(arg.shape), ort_type_to_dtype(arg.type)) for arg in sess.get_inputs()
        ]
        self._output_names = self._returned_outputs(sess)

    def _open_session(self, ort, so, source):
        """The InferenceSession of ``source`` (InputError when ONNX-Runtime cannot load it)."""
        try:
            with routed_logs():  # (in a helper thread: a signal still ends a session creation that takes long)
                return interruptible(ort.InferenceSession, source, sess_options=so, providers=self.providers)
        except ort_errors() as exc:
            if self.fp16:
                self._blame_emulation(ort, so, exc)
            hint = _load_hint(str(exc), self.fp16)
            raise InputError(
                f"{describe(self.model_path)}: ONNX-Runtime cannot load the model: {one_line(exc)}{hint}"
            ) from None
        finally:
            del source

    def _returned_outputs(self, sess) -> List[str]:
        """The outputs ``run`` returns: those selected (else all) that are tensors. A non-tensor output
        named, or one of the model's own, is refused (as a plain run refuses it); others are skipped."""
        types = {arg.name: arg.type for arg in sess.get_outputs()}
        wanted = self._selected if self._selected is not None else list(types)
        explicit = self._outputs_named()
        names: List[str] = []
        skipped: List[str] = []
        for name in wanted:
            if self._is_tensor_output(name, types.get(name), explicit):
                names.append(name)
            else:
                skipped.append(name)
        if skipped:
            self.notes.append(f"not returning {len(skipped)} non-tensor output(s): {', '.join(skipped)}")
        return names

    def _is_tensor_output(self, name: str, typ: Optional[str], explicit: set) -> bool:
        """Whether output ``name`` of type ``typ`` is a tensor (False: one to skip). InputError for an
        output the session lacks, or a non-tensor one named (``explicit``) or of the model's own."""
        if typ is None:
            self._session = None
            raise InputError(f"ONNX-Runtime does not offer '{name}' as an output of the model")
        if ort_type_to_dtype(typ) is not None:
            return True
        if name in explicit or not self.outputs_requested or name in self._model_outputs:
            self._session = None
            raise InputError(
                f"output '{name}' has type {typ}, which is not a tensor; "
                "toolkit can only return and compare tensors (use --onnx-exclude-outputs)"
            )
        return False

    def _note_cpu_low_precision(self) -> None:
        """A model computing in float16/bfloat16 on the CPU provider: ONNX-Runtime runs the nodes it
        has no such kernel for in float32, so the overflow and rounding a device shows may not show."""
        if self.fp16 or self.providers != ["CPUExecutionProvider"]:
            return
        low = self._low_precision
        if low is None:  # (not parsed, for speed: its inputs and outputs, and its bytes when small)
            io = [*self._session.get_inputs(), *self._session.get_outputs()]
            low = any(a.type in ("tensor(float16)", "tensor(bfloat16)") for a in io) or _casts_to_low(self.model_path)
        if low:
            self.notes.append(
                "the model computes in float16/bfloat16, and ONNX-Runtime's CPU provider runs the nodes it has no "
                "such kernel for in float32: overflow and rounding that a GPU storing fp16 between nodes shows may "
                "not show here. For that, run the float32 model with --onnxrt --fp16 (fp16 storage emulated), or "
                "use toolkit debug precision"
            )

    def _deactivate(self) -> None:
        self._session = None

    # ------------------------------------------------------------------ queries
    def input_metadata(self) -> List[TensorMeta]:
        return list(self._inputs)

    def summary(self) -> str:
        text = f"ONNX-Runtime session with providers: {', '.join(self.providers)}"
        if self.fp16:
            short = "bf16" if self.emulated_dtype == "bfloat16" else "fp16"
            text += f" | {short} storage emulated ({self.fp16_rounded} tensors rounded to {short})"
        return text

    def output_names(self) -> List[str]:
        return list(self._output_names)

    # ------------------------------------------------------------------ inference
    def _infer(self, feed: Mapping) -> Dict[str, object]:
        sess = self._session
        start = time.perf_counter()
        try:
            with routed_logs():
                values = interruptible_run(sess, self._output_names, feed if isinstance(feed, dict) else dict(feed))
        except tuple(e for e in ort_errors() if e is not MemoryError) as exc:
            raise InferenceError(f"{self.name}: inference failed: {one_line(exc)}") from None
        self.last_inference_time = time.perf_counter() - start
        return dict(zip(self._output_names, values))


LOOK_AT_MAX = 32 << 20  # model files up to this size are scanned for a Cast to fp16/bf16 (about 1 ms per MiB)

_LOW = (10, 16)  # TensorProto.FLOAT16, BFLOAT16


def computes_in_low_precision(model) -> bool:
    """Whether ``model`` computes in float16 or bfloat16: a weight, a Cast to it, or a typed
    value of it in its main graph."""
    g = model.graph
    if any(t.data_type in _LOW for t in g.initializer):
        return True
    if any(_casts_to_low_node(n) for n in g.node):
        return True
    return any(v.type.tensor_type.elem_type in _LOW for v in (*g.input, *g.output, *g.value_info))


def _casts_to_low_node(node) -> bool:
    """Whether ``node`` is a Cast to float16 or bfloat16."""
    return node.op_type == "Cast" and any(a.name == "to" and a.i in _LOW for a in node.attribute)


# A serialized Cast node's attribute to=FLOAT16 / to=BFLOAT16 (name "to", i 10 / 16), as protobuf
# writes it (fields in number order): what a mixed-precision model holds at its boundaries.
_CAST_TO_LOW = re.compile(rb"\x0a\x02to\x18[\x0a\x10]")


def _casts_to_low(path: str) -> bool:
    """Whether the model file at ``path`` (up to LOOK_AT_MAX bytes) holds a Cast to fp16/bf16."""
    import mmap

    try:
        if not os.path.isfile(path) or not 0 < os.path.getsize(path) <= LOOK_AT_MAX:
            return False
        with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as data:
            return _CAST_TO_LOW.search(data) is not None
    except (OSError, ValueError):
        return False


def _shape_of(shape) -> Optional[tuple]:
    if shape is None:
        return None
    out: List[object] = []
    for d in shape:
        if isinstance(d, int):
            out.append(d if d >= 0 else None)
        elif isinstance(d, str) and d:
            out.append(d)
        else:
            out.append(None)
    return tuple(out)


def _load_hint(text: str, emulating) -> str:
    """What to do about an error of ONNX-Runtime loading a model ('' when nothing useful)."""
    if "INVALID_PROTOBUF" in text:
        return "; the file is not an ONNX model (truncated, or another kind of file such as a data file)"
    reduced = "NOT_IMPLEMENTED" in text or ("Type Error" in text and ("bfloat16" in text or "float16" in text))
    if reduced and not emulating:
        return (
            "; if it is a bf16 or fp16 model, ONNX-Runtime's CPU provider lacks such kernels: emulate that "
            "storage on the CPU instead (runner onnxrt:bf16 or onnxrt:fp16, or run its float32 original "
            "with --onnxrt --bf16 / --fp16)"
        )
    return ""

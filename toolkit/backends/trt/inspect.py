"""``toolkit inspect model ENGINE``: a TensorRT engine's I/O tensors, profiles and layers.

Layers come from TensorRT's engine inspector; how much it tells depends on the profiling
verbosity the engine was built with (names only, or types and tensors with ``DETAILED``).
"""

from __future__ import annotations

import json
from typing import Any, Dict, List

from toolkit.core.errors import DependencyError, InputError
from toolkit.core.meta import format_meta
from toolkit.core.io.model import read_bytes

from .availability import check_available, inference_error, trt_call


def describe_engine(path: str, layers: bool = True) -> Dict[str, Any]:
    """A JSON-able description of the engine file ``path`` (DependencyError without TensorRT/GPU)."""
    trt, engine = _load_engine(path)
    io = _io_tensors(trt, engine)
    desc: Dict[str, Any] = {
        "engine": path,
        "tensorrt": str(trt.__version__),
        "inputs": [t for t in io if t["mode"] == "input"],
        "outputs": [t for t in io if t["mode"] == "output"],
        "profiles": _profiles(engine, io),
        "num_layers": int(engine.num_layers),
    }
    if layers:
        desc["layers"] = _layers(trt, engine)
    return desc


def _load_engine(path: str):
    """(tensorrt, the deserialized engine of ``path``)."""

    from .builder import Interrupt, init_plugins, make_logger

    try:
        trt, _cudart = check_available()
    except DependencyError as exc:
        raise DependencyError(f"{path} is a TensorRT engine; inspecting it needs TensorRT on a GPU: {exc}") from None
    messages: List[str] = []
    logger = make_logger(trt, lambda sev, text: messages.append(f"{sev}: {text}"), interrupt=Interrupt())
    init_plugins(trt)
    data = read_bytes(path)
    if not data:
        raise InputError(f"{path}: empty file, expected a TensorRT engine")
    runtime = trt_call(
        trt.Runtime, logger,
        fail=lambda why: inference_error(f"TensorRT cannot create a runtime: {'; '.join(logger.errors) or why or 'no details'}"),
    )  # fmt: skip
    runtime.engine_host_code_allowed = True
    return trt, trt_call(
        runtime.deserialize_cuda_engine, data,
        fail=lambda why: InputError(
            f"{path}: not a TensorRT engine for this TensorRT version and GPU "
            f"({'; '.join(logger.errors[-3:]) or why or 'deserialization failed'}); engines only load with the "
            "TensorRT version that built them"
        ),
    )  # fmt: skip


def _io_tensors(trt, engine) -> List[Dict[str, Any]]:
    from .builder import TRT_DTYPES

    io = []
    for name in (engine.get_tensor_name(i) for i in range(engine.num_io_tensors)):
        mode = "input" if engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT else "output"
        shape = [None if d < 0 else int(d) for d in engine.get_tensor_shape(name)]
        fmt = getattr(engine.get_tensor_format(name), "name", "?")
        dt = getattr(engine.get_tensor_dtype(name), "name", "?")
        io.append({"name": name, "mode": mode, "dtype": TRT_DTYPES.get(dt, dt.lower()), "shape": shape, "format": fmt})
    return io


def _profiles(engine, io: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    from .builder import dims

    profiles = []
    for k in range(int(engine.num_optimization_profiles)):
        tensors: List[Dict[str, Any]] = []
        for t in io:
            name = t["name"]
            if t["mode"] != "input":
                continue
            if engine.is_shape_inference_io(name):
                lo, opt, hi = engine.get_tensor_profile_values(k, name)  # positional: see runner.preferred_values
                tensors.append({"name": name, "values": {"min": list(lo), "opt": list(opt), "max": list(hi)}})
            elif any(d is None for d in t["shape"]):
                lo, opt, hi = (list(dims(s)) for s in engine.get_tensor_profile_shape(name, k))
                tensors.append({"name": name, "min": lo, "opt": opt, "max": hi})
        profiles.append({"index": k, "tensors": tensors})
    return profiles


def _layers(trt, engine) -> List[Dict[str, Any]]:
    inspector = trt_call(
        engine.create_engine_inspector,
        fail=lambda why: inference_error(f"TensorRT cannot create an engine inspector: {why or 'no details'}"),
    )
    fmt = trt.LayerInformationFormat.JSON
    out = []
    for i in range(int(engine.num_layers)):
        text = inspector.get_layer_information(i, fmt)
        try:
            info = json.loads(text)
        except ValueError:
            info = text
        if not isinstance(info, dict):  # built with LAYER_NAMES_ONLY: just the name
            info = {"Name": str(info)}
        out.append(
            {
                "index": i,
                "name": info.get("Name", ""),
                "type": info.get("LayerType", ""),
                "inputs": [_tensor_name(t) for t in info.get("Inputs", [])],
                "outputs": [_tensor_name(t) for t in info.get("Outputs", [])],
            }
        )
    return out


def _tensor_name(t) -> str:
    return t.get("Name", "?") if isinstance(t, dict) else str(t)


def engine_text(desc: Dict[str, Any]) -> List[str]:
    """Plain text, in the layout of ``inspect model`` for ONNX models."""
    lines = [f"[I] ==== TensorRT Engine ==== ({desc['engine']}, TensorRT {desc['tensorrt']})"]
    for key, title in (("inputs", "Input"), ("outputs", "Output")):
        items = desc[key]
        lines += ["", f"    ---- {len(items)} Engine {title}(s) ----"]
        for t in items:
            fmt = "" if t["format"] == "LINEAR" else f" format={t['format']}"
            lines.append(f"    {format_meta(t['name'], tuple(t['shape']), t['dtype'])}{fmt}")
    profiles = desc["profiles"]
    lines += ["", f"    ---- {len(profiles)} Profile(s) ----"]
    for p in profiles:
        lines.append(f"    - Profile: {p['index']}")
        if not p["tensors"]:
            lines.append("        (no dynamic inputs)")
        lines += [_profile_line(t) for t in p["tensors"]]
    layers = desc.get("layers")
    lines += ["", f"    ---- {desc['num_layers']} Layer(s) ----"]
    if layers is None:
        lines.append("    (show them with --show layers)")
    for layer in layers or ():
        lines += _layer_lines(layer)
    return lines


def _profile_line(t: Dict[str, Any]) -> str:
    """One input of a profile: its values (a shape tensor) or its shapes, min/opt/max."""
    if "values" in t:
        v = t["values"]
        return f"        Tensor: {t['name']} (shape tensor) | Values: min={v['min']}, opt={v['opt']}, max={v['max']}"
    lo, opt, hi = (tuple(t[k]) for k in ("min", "opt", "max"))
    return f"        Tensor: {t['name']} | Shapes: min={lo}, opt={opt}, max={hi}"


def _layer_lines(layer: Dict[str, Any]) -> List[str]:
    """A layer as ``inspect model`` shows a node: name and op, then its inputs and outputs."""
    op = f" [Op: {layer['type']}]" if layer["type"] else ""
    lines = [f"    - Layer {layer['index']:<4} | {layer['name']}{op}"]
    if layer["inputs"] or layer["outputs"]:
        lines.append(f"        {{{', '.join(layer['inputs'])}}}")
        lines.append(f"         -> {{{', '.join(layer['outputs'])}}}")
    return lines

"""Running one candidate of ``debug precision``: in memory where the runner emulates reduced-precision
storage (ONNX-Runtime), else from a file the runner loads; here, or as a Ray task of ``--cluster``."""

from __future__ import annotations

import os
import tempfile
from typing import Dict, List, Mapping, Optional, Sequence

import onnx

from toolkit.core.io.model import save_model
from toolkit.run.registry import get_kind
from toolkit.run.specs import make_runner


def emulates(kind: str) -> bool:
    """Whether runner kind ``kind`` emulates fp16/bf16 storage on a model held in memory (the
    search then emulates each candidate and follows the first overflow); else each candidate
    is converted and run from a file."""
    return get_kind(kind).emulates_storage


def run_spec(model, kind: str, spec_opts: Mapping, feeds: Sequence[Mapping], model_path: str,
             external_data_dir: Optional[str]) -> List[Dict]:
    """Run ``model`` (a ModelProto) on ``feeds`` with the runner ``kind`` and its options: in memory
    for the kind that emulates reduced-precision storage (ONNX-Runtime), else from a file."""
    if emulates(kind):
        return _run_in_memory(model, spec_opts, feeds, model_path, external_data_dir)
    spec = _spec_text(kind, get_kind(kind).full_precision(spec_opts))
    with tempfile.TemporaryDirectory(prefix="toolkit-precision-") as d:
        path = os.path.join(d, "candidate.onnx")
        save_model(model, path)
        file_runner = make_runner(spec, path)
        with file_runner:
            return [file_runner.infer(dict(f)) for f in feeds]


def _spec_text(kind: str, opts: Mapping) -> str:
    """The runner spec ``kind:opt,key=value`` of ``kind`` and its options (a True option by its name)."""
    if not opts:
        return kind
    return kind + ":" + ",".join(k if v is True else f"{k}={v}" for k, v in opts.items())


def _run_in_memory(model, spec_opts: Mapping, feeds: Sequence[Mapping], model_path: str,
                   external_data_dir: Optional[str]) -> List[Dict]:
    """``model`` on ONNX-Runtime from memory, with the spec's level, precision and providers."""
    from toolkit.backends.onnxrt import OnnxrtRunner, provider_list

    providers = provider_list(str(spec_opts["providers"])) if spec_opts.get("providers") else None
    runner = OnnxrtRunner(model_path, model=model, external_data_dir=external_data_dir,
                          graph_optimization=_optimization_level(spec_opts), providers=providers)
    with runner:
        return [runner.infer(dict(f)) for f in feeds]


def _optimization_level(spec_opts: Mapping) -> Optional[str]:
    """The spec's ``opt`` level; none given, "disable" where reduced-precision storage is emulated."""
    level = spec_opts.get("opt") if isinstance(spec_opts.get("opt"), str) else None
    if (spec_opts.get("fp16") or spec_opts.get("bf16")) and level is None:
        # ONNX-Runtime fusions (LayerNorm, even at the basic level in 1.32) see through Casts and
        # would compute whole blocks without the rounding being emulated
        level = "disable"
    return level


def run_spec_bytes(model: bytes, kind: str, spec_opts: Mapping, feeds: Sequence[Mapping], model_path: str,
                   external_data_dir: Optional[str]) -> List[Dict]:
    """:func:`run_spec` of a serialized model (a Ray task of ``--cluster``, on a node)."""

    proto = onnx.ModelProto()
    proto.ParseFromString(model)
    return run_spec(proto, kind, spec_opts, feeds, model_path, external_data_dir)

"""From ``toolkit run``'s options to a TensorRT runner: the config, the checks done before any
data is loaded, the runner itself, and the run's inputs handed to the builder.

The runner registry (:mod:`toolkit.run.registry`) calls these; ``opts`` is read by attribute
(a :class:`toolkit.run.options.RunOptions`), so this module imports nothing from ``toolkit.run``.
"""

from __future__ import annotations

import os
from typing import Callable, Mapping, Optional

from toolkit.core.errors import UsageError
from toolkit.core.meta import parse_shape_specs
from toolkit.core.io.model import check_output_path

from .availability import check_available, check_config
from .options import TrtConfig, is_engine_path, parse_pool_limits, parse_profile_groups


def config_from(opts) -> TrtConfig:
    """The :class:`TrtConfig` for ``opts`` (UsageError for malformed values)."""

    return TrtConfig(
        fp16=opts.fp16,
        bf16=opts.bf16,
        int8=opts.int8,
        tf32=opts.tf32,
        pool_limits=parse_pool_limits(opts.pool_limit),
        profiles=parse_profile_groups(opts.trt_min_shapes, opts.trt_opt_shapes, opts.trt_max_shapes),
        fallback_shapes=parse_shape_specs(opts.input_shapes),
        save_engine=opts.save_engine,
        calibration_cache=opts.calibration_cache,
        mark_outputs=list(opts.trt_outputs) or None,
        exclude_outputs=list(opts.trt_exclude_outputs),
        external_data_dir=opts.external_data_dir,
    )


def model_is_engine(opts) -> bool:
    """MODEL is a TensorRT engine: by --model-type, else by its suffix (.engine/.plan/.trt)."""
    kind = (getattr(opts, "model_type", None) or "").lower()
    return kind == "engine" if kind in ("engine", "onnx") else is_engine_path(opts.model)


def _check_files(opts) -> None:
    if opts.save_engine:
        if opts.save_engine == "-":
            raise UsageError("--save-engine needs a file name, not stdout ('-')")
        if opts.save_engine in (opts.save_inputs, opts.save_outputs):
            raise UsageError("--save-engine names the same file as --save-inputs/--save-outputs")
        if os.path.abspath(opts.save_engine) == os.path.abspath(opts.model):
            raise UsageError("--save-engine would overwrite MODEL")
        check_output_path(opts.save_engine)
    if opts.calibration_cache:
        if not opts.int8:
            raise UsageError("--calibration-cache is only used with --int8")
        if not os.path.isfile(opts.calibration_cache):
            check_output_path(opts.calibration_cache)


def check(opts) -> TrtConfig:
    """Fail early (before any data is loaded) when the TensorRT run cannot happen.

    Usage errors first (exit 2), then a missing TensorRT / cuda-python / GPU, or an option this
    TensorRT version cannot honour (exit 4). Returns the parsed TrtConfig.
    """
    engine = model_is_engine(opts)
    if engine and any(r.split(":")[0] == "onnxrt" for r in opts.runners):
        raise UsageError(
            f"{opts.model} is a TensorRT engine, which ONNX-Runtime cannot run; "
            "give the ONNX model to compare --onnxrt with --trt"
        )
    if opts.model == "-" and len(opts.runners) > 1:
        raise UsageError("a model read from stdin ('-') can feed only one runner; save it to a file to compare runners")
    config = config_from(opts)
    _check_files(opts)
    trt, _cudart = check_available()
    if not engine:
        check_config(trt, config)
    return config


def make_runner(opts, config: Optional[TrtConfig], on_message: Callable[[str, str], None], name: Optional[str] = None):
    """An inactive :class:`TrtRunner`; TensorRT's messages go to ``on_message`` on one line each."""
    from .runner import TrtRunner

    return TrtRunner(
        opts.model,
        config if config is not None else config_from(opts),
        on_message=lambda severity, text: on_message(severity, " ".join(text.split())),
        name=name,
        engine_file=model_is_engine(opts),
    )


def connect(config: TrtConfig, loaded, all_for) -> Mapping[str, tuple]:
    """Hand the run's inputs to the builder: ``loaded`` feeds shape the profile, ``all_for(metas)``
    gives the feeds ``--int8`` calibrates on. Returns the shapes generated inputs should use for
    dynamic dims: the first profile's opt shapes (shape-tensor inputs get values from the runner's
    ``preferred_values`` instead)."""
    config.sample_feeds = loaded
    config.calibration_data = all_for
    if not config.profiles:
        return {}
    return {name: mid for name, (_lo, mid, _hi) in config.profiles[0].items()}

"""The TensorRT runner (optional: ``pip install 'toolkit[trt]'``), TensorRT 10 and 11.

``tensorrt`` and ``cuda-python`` (device memory and streams) are imported only when the
runner is activated (or :func:`check_available` is called), never at module level: a
forked warm worker (``debug reduce``) must not hold a CUDA context before the fork, and
``toolkit --help`` must stay fast.

Without TensorRT, without cuda-python or without an NVIDIA GPU, activation raises
:class:`DependencyError` (exit code 4) with one sentence saying what is missing.

Modules: :mod:`.options` (sizes, pools, profiles, output selection, :class:`TrtConfig`; no
TensorRT needed), :mod:`.availability` (imports, GPU, version differences), :mod:`.builder`
(ONNX -> engine), :mod:`.runner` (:class:`TrtRunner`), :mod:`.calibrator` (INT8 on
TensorRT 10), :mod:`.device` (device buffers), :mod:`.inspect` (engines in ``inspect model``).
Every TensorRT name they use is checked against the real API of TensorRT 10 and 11
(``tests/trt_surface/``, ``scripts/trt_surface.py``).
"""

from .availability import (
    INSTALL_HINT,
    MIN_TRT_MAJOR,
    check_available,
    check_config,
    import_cudart,
    import_tensorrt,
    require_gpu,
)
from .options import (
    ENGINE_SUFFIXES,
    POOL_NAMES,
    TrtConfig,
    build_profiles,
    is_engine_path,
    parse_pool_limits,
    parse_profile_groups,
    parse_size,
    select_outputs,
)
from .runner import TrtRunner

__all__ = [
    "ENGINE_SUFFIXES",
    "INSTALL_HINT",
    "MIN_TRT_MAJOR",
    "POOL_NAMES",
    "TrtConfig",
    "TrtRunner",
    "build_profiles",
    "check_available",
    "check_config",
    "import_cudart",
    "import_tensorrt",
    "is_engine_path",
    "parse_pool_limits",
    "parse_profile_groups",
    "parse_size",
    "require_gpu",
    "select_outputs",
]

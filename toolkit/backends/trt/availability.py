"""Is TensorRT usable here, and which version: imports, GPU check, version-specific options.

Nothing here imports ``tensorrt`` or cuda-python at module level; the functions do.
"""

from __future__ import annotations

import re
from typing import Callable, Iterable, Optional, Tuple

from toolkit.core.errors import DependencyError, InferenceError, ToolkitError, one_line
from toolkit.core.install import extra_install_command


def _install_hint(flags: str = "") -> str:
    cmd = extra_install_command("trt")
    return cmd.replace("pip install ", f"pip install {flags} ", 1) if flags and cmd.startswith("pip install ") else cmd


INSTALL_HINT = "install it with: " + _install_hint()
MIN_TRT_MAJOR = 10

# TensorRT names the backend uses that exist in TensorRT 10 only (11 removed weak typing and
# INT8 calibration). Every use is behind a version check; tests/backends/test_trt_surface.py keeps this
# set equal to the backend's names that TensorRT 11's surface lacks.
TRT10_ONLY = frozenset(
    {
        "BuilderFlag.FP16",
        "BuilderFlag.BF16",
        "BuilderFlag.INT8",
        "IInt8EntropyCalibrator2",
        "IBuilderConfig.int8_calibrator",
        "IBuilderConfig.set_calibration_profile",
    }
)


def inference_error(message: str) -> ToolkitError:
    """The run failed (exit code 1, FAILED line)."""
    return InferenceError(message)


def as_toolkit_error(exc: BaseException, what: str) -> ToolkitError:
    if isinstance(exc, ToolkitError):
        return exc
    return inference_error(f"{what}: {one_line(exc)}")


def trt_call(fn, *args, fail: Callable[[str], BaseException], void: bool = False):
    """``fn(*args)`` for a TensorRT binding; ``fail(reason)`` is raised when the call fails.

    The bindings say "failed" in two ways, and each call has its own (recorded for every call
    toolkit makes in tests/trt_surface/, from the bindings' source): some raise (RuntimeError,
    ValueError, or TypeError from a constructor whose factory returned nullptr; ``reason`` is the
    exception's text), others return False, None or a negative index (``reason`` is ""; a
    ``void`` call returns None on success, so only False counts). Both ways are handled for
    every call, so a binding that changes its way between versions still ends in a clean error.
    """
    try:
        result = fn(*args)
    except (RuntimeError, ValueError, TypeError) as exc:
        raise fail(one_line(exc)) from None
    if result is False or (not void and (result is None or (type(result) is int and result < 0))):
        raise fail("")
    return result


def err_name(err) -> str:
    """The name of a cuda-python error code (``cudaErrorNoDevice``)."""
    return getattr(err, "name", None) or str(err)


def trt_major(trt) -> int:
    try:
        return int(str(getattr(trt, "__version__", "0")).split(".")[0])
    except ValueError:
        return 0


def import_tensorrt():
    """``tensorrt``, or DependencyError (missing, broken or too old)."""
    try:
        import tensorrt as trt
    except ImportError:
        raise DependencyError(f"TensorRT is not installed; {INSTALL_HINT}") from None
    except Exception as exc:  # a broken install (missing libnvinfer, ...)
        raise DependencyError(
            f"TensorRT is installed but cannot be loaded ({one_line(exc)}); "
            f"reinstall it with: {_install_hint('--force-reinstall')}"
        ) from None
    if trt_major(trt) < MIN_TRT_MAJOR:
        raise DependencyError(
            f"TensorRT {getattr(trt, '__version__', '?')} is too old (toolkit needs {MIN_TRT_MAJOR} or newer); "
            f"upgrade it with: {_install_hint('-U')}"
        )
    return trt


def import_cudart():
    """cuda-python's runtime module (``cuda.bindings.runtime``, or ``cuda.cudart`` before 12.6)."""
    try:
        from cuda.bindings import runtime as cudart  # cuda-python >= 12.6
    except ImportError:
        try:
            from cuda import cudart  # older cuda-python
        except ImportError:
            raise DependencyError(
                f"cuda-python (GPU memory for the TensorRT runner) is not installed; {INSTALL_HINT}"
            ) from None
    return cudart


def require_gpu(cudart) -> None:
    """DependencyError unless CUDA reports at least one device."""
    try:
        err, count = cudart.cudaGetDeviceCount()
    except Exception as exc:  # the driver library cannot be loaded
        raise DependencyError(
            f"no NVIDIA GPU is usable here ({one_line(exc)}); --trt needs an NVIDIA GPU with its driver"
        ) from None
    if int(err) != 0:
        name = err_name(err)
        if "InsufficientDriver" in name:
            raise DependencyError(
                f"no NVIDIA driver was found, or it is too old for this cuda-python ({name}); "
                "--trt needs an NVIDIA GPU with a driver as new as the CUDA version of cuda-python and TensorRT"
            )
        raise DependencyError(f"no NVIDIA GPU is usable here ({name}); --trt needs an NVIDIA GPU with its driver")
    if not count:
        raise DependencyError("no NVIDIA GPU found; --trt needs an NVIDIA GPU with its driver")


def _cuda_versions(dists: Iterable) -> Tuple[Optional[Tuple[int, str]], Optional[Tuple[int, str]]]:
    """((CUDA major, version) of the installed TensorRT, (CUDA major, version) of cuda-python), from
    the packages' metadata: TensorRT's wheels name their CUDA (``tensorrt-cu12``, ``tensorrt-cu13-bindings``),
    cuda-python's major version is its CUDA's (``cuda-bindings`` is the module toolkit imports)."""
    trt = cuda = None
    cuda_rank = -1
    for dist in dists:
        name = re.sub(r"[-_.]+", "-", str(dist.metadata["Name"] or "")).lower()
        version = str(dist.version)
        m = re.match(r"tensorrt-cu(\d+)(-bindings|-libs)?$", name)
        if m and trt is None:
            trt = (int(m.group(1)), version)
        rank = {"cuda-python": 0, "cuda-bindings": 1}.get(name, -1)
        if rank > cuda_rank and version.split(".")[0].isdigit():
            cuda, cuda_rank = (int(version.split(".")[0]), version), rank
    return trt, cuda


def cuda_pairing_problem(dists: Optional[Iterable] = None) -> Optional[str]:
    """One sentence when TensorRT and cuda-python are built for different CUDA major versions
    (pip pairs ``tensorrt-cu12`` with cuda-python 13 unless told not to), else None."""
    if dists is None:
        from importlib.metadata import distributions

        dists = distributions()
    trt, cuda = _cuda_versions(dists)
    if trt is None or cuda is None or trt[0] == cuda[0]:
        return None
    major = trt[0]
    spec = f"cuda-python>={'12.6' if major == 12 else major},<{major + 1}"
    return (
        f"TensorRT {trt[1]} is built for CUDA {major} but cuda-python {cuda[1]} is for CUDA {cuda[0]}; "
        f"install the cuda-python of TensorRT's CUDA: pip install '{spec}'"
    )


def check_available():
    """Import TensorRT and cuda-python and make sure a GPU is there; returns ``(trt, cudart)``.

    When the GPU check fails and TensorRT and cuda-python are built for different CUDA major
    versions, the error says which cuda-python to install instead (a newer cuda-python needs a
    newer driver than the TensorRT it is paired with).

    Touches the CUDA driver (``cudaGetDeviceCount``), so never call it in a process that
    will fork workers afterwards.
    """
    trt = import_tensorrt()
    cudart = import_cudart()
    try:
        require_gpu(cudart)
    except DependencyError:
        problem = cuda_pairing_problem()
        if problem:
            raise DependencyError(problem) from None
        raise
    return trt, cudart


def has_weak_typing(trt) -> bool:
    """TensorRT 10 (weak typing: FP16/BF16/INT8 builder flags, INT8 calibration); not 11."""
    return trt_major(trt) < 11 and hasattr(trt.BuilderFlag, "FP16")


def check_config(trt, config) -> None:
    """Refuse, before any work, what this TensorRT version cannot do with ``config``.

    TensorRT 10 keeps its weak-typing flags. TensorRT 11 builds strongly typed networks:
    ``--fp16``/``--bf16`` convert the ONNX model first (see :mod:`.builder`), and ``--int8``
    needs Q/DQ nodes in the model (checked after parsing), so a calibration cache has no use.
    """
    if has_weak_typing(trt):
        return
    if config.calibration_cache:
        raise DependencyError(
            f"--calibration-cache needs TensorRT 10 (TensorRT {getattr(trt, '__version__', '?')} has no INT8 "
            "calibration); quantize the model with Q/DQ nodes instead, or install: pip install 'tensorrt<11'"
        )

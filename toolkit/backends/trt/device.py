"""Device memory through cuda-python: one cache of named buffers, grown on demand."""

from __future__ import annotations

from typing import Dict, Tuple

from toolkit.core.errors import InferenceError

from .availability import err_name, inference_error


def cuda_check(result, what: str):
    """Unpack a cuda-python result ``(err, *values)``; InferenceError (exit 1) on failure."""
    err = result[0]
    if int(err) != 0:
        raise inference_error(f"CUDA call {what} failed ({err_name(err)})")
    values = result[1:]
    if not values:
        return None
    return values[0] if len(values) == 1 else values


class DeviceBuffers:
    """Named device allocations that grow when a larger size is asked for.

    ``where`` is added to error messages (e.g. "during INT8 calibration").
    """

    def __init__(self, cudart, where: str = ""):
        self.cudart = cudart
        self.where = where
        self._buffers: Dict[str, Tuple[int, int]] = {}  # name -> (pointer, bytes)

    def _check(self, result, what: str):
        try:
            return cuda_check(result, what)
        except InferenceError as exc:  # cuda_check's one error: say which tensor
            if self.where:
                raise inference_error(f"{exc} {self.where}") from None
            raise

    def get(self, name: str, nbytes: int) -> int:
        """A pointer to at least ``nbytes`` (at least 1) bytes for ``name``."""
        ptr, size = self._buffers.get(name, (None, 0))
        if ptr is None or size < nbytes:
            if ptr is not None:
                self.cudart.cudaFree(ptr)
                del self._buffers[name]
            size = max(int(nbytes), 1)
            ptr = int(self._check(self.cudart.cudaMalloc(size), "cudaMalloc"))
            self._buffers[name] = (ptr, size)
        return ptr

    def pointer(self, name: str) -> int:
        return self._buffers[name][0]

    def __contains__(self, name: str) -> bool:
        return name in self._buffers

    def free(self) -> None:
        for ptr, _n in self._buffers.values():
            self.cudart.cudaFree(ptr)
        self._buffers.clear()

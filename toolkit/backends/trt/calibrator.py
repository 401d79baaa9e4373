"""INT8 entropy calibration for TensorRT 10, fed from the run's inputs (``--int8``).

TensorRT 11 has no calibration API; the builder never gets here on 11.
"""

from __future__ import annotations

import os
from typing import Dict, List, Mapping, Optional, Tuple

import numpy as np

from toolkit.core.contain import carried
from toolkit.core.errors import InputError, ToolkitError, UsageError
from toolkit.core.meta import TensorMeta

from .availability import as_toolkit_error
from .device import DeviceBuffers
from .options import Shape, TrtConfig


class Calibrator:
    """Holds the TensorRT calibrator object (``impl``) and its device memory.

    Exceptions must not cross into TensorRT: the first one is kept in ``error`` and raised
    by the builder after the build.
    """

    def __init__(self, cudart):
        self.impl = None
        self.error: Optional[ToolkitError] = None
        self.profile_shapes: Dict[str, Shape] = {}
        self.buffers = DeviceBuffers(cudart, "during INT8 calibration")

    @classmethod
    def create(cls, trt, cudart, metas: List[TensorMeta], config: TrtConfig, notes: List[str]) -> "Calibrator":
        self = cls(cudart)
        cache_path = config.calibration_cache
        have_cache = bool(cache_path and os.path.isfile(cache_path))
        feeds: List[Mapping] = []
        if config.calibration_data is not None:
            feeds = list(config.calibration_data(metas) or [])
        if not feeds and not have_cache:
            raise UsageError("--int8 needs calibration data: the run's inputs, or an existing --calibration-cache")
        if feeds:
            feeds, self.profile_shapes = _same_shaped(feeds, metas, notes)
        read_from = cache_path if have_cache else None
        self.impl = self._entropy_calibrator(trt, cudart, feeds, [m.name for m in metas], read_from, cache_path)
        return self

    def _entropy_calibrator(
        self, trt, cudart, feeds: List[Mapping], input_names: List[str], read_from: Optional[str], write_to: Optional[str]
    ):
        """TensorRT's calibrator over ``feeds``; its errors are kept in ``self.error`` (TensorRT swallows them)."""

        outer = self
        h2d = cudart.cudaMemcpyKind.cudaMemcpyHostToDevice

        def to_device(feed: Mapping, names) -> list:
            ptrs = []
            for name in names:
                arr = np.ascontiguousarray(feed[name])
                ptr = outer.buffers.get(name, arr.nbytes)
                outer.buffers._check(cudart.cudaMemcpy(ptr, arr.ctypes.data, arr.nbytes, h2d), "cudaMemcpy")
                ptrs.append(ptr)
            return ptrs

        def write_cache(path: str, cache) -> None:
            from toolkit.core.io.model import write_bytes_atomic

            write_bytes_atomic(path, bytes(cache))

        class EntropyCalibrator(trt.IInt8EntropyCalibrator2):
            def __init__(inner):
                trt.IInt8EntropyCalibrator2.__init__(inner)
                inner._it = iter(feeds)

            def get_batch_size(inner):
                return 1

            def get_batch(inner, names):
                try:
                    feed = next(inner._it)
                except StopIteration:
                    return None
                # (a TensorRT callback: nothing may raise into it; its error is kept, raised after the build)
                got = carried(to_device, feed, names or input_names, catching=Exception)
                if got.error is not None:
                    outer.error = outer.error or as_toolkit_error(got.error, "INT8 calibration failed")
                return got.value

            def read_calibration_cache(inner):
                if not read_from:
                    return None
                try:
                    with open(read_from, "rb") as f:
                        return f.read()
                except OSError as exc:
                    outer.error = outer.error or InputError(f"{read_from}: cannot read: {exc.strerror or exc}")
                    return None

            def write_calibration_cache(inner, cache):
                if not write_to:
                    return
                got = carried(write_cache, write_to, cache, catching=Exception)  # (a TensorRT callback: see get_batch)
                if got.error is not None:
                    outer.error = outer.error or as_toolkit_error(got.error, f"{write_to}: cannot write the calibration cache")

        return EntropyCalibrator()

    def free(self) -> None:
        self.buffers.free()


def _same_shaped(feeds: List[Mapping], metas: List[TensorMeta], notes: List[str]) -> Tuple[List[Mapping], Dict[str, Shape]]:
    """The feeds whose shapes equal the first one's (one profile calibrates), and those shapes."""

    first = {m.name: tuple(np.shape(feeds[0][m.name])) for m in metas}
    usable = [f for f in feeds if all(tuple(np.shape(f[m.name])) == first[m.name] for m in metas)]
    if len(usable) < len(feeds):
        notes.append(f"--int8 calibrates on {len(usable)} of {len(feeds)} iteration(s): those with the first one's shapes")
    return usable, first

"""Arrays in ``.npy`` form read by their header first: the shape, dtype and size an array
declares are known (and bounded by ``--max-tensor-size``) before any of its payload is
inflated or allocated. A 2 MB ``.npz`` can declare gigabytes of deflated zeros."""

from __future__ import annotations

import zipfile
from typing import Optional, Tuple

import numpy as np

from toolkit.core import limits
from toolkit.core.errors import InputError


def npy_header(archive: zipfile.ZipFile, member: str) -> Tuple[tuple, "np.dtype"]:
    """(shape, dtype) of ``member`` of an ``.npz`` archive, read from its ``.npy`` header (the
    first bytes of the member: a compressed payload is not inflated)."""
    name = member + ".npy" if member + ".npy" in archive.NameToInfo else member
    with archive.open(name) as f:
        return read_npy_header(f)


def read_npy_header(f) -> Tuple[tuple, "np.dtype"]:
    version = np.lib.format.read_magic(f)
    if version == (1, 0):
        shape, _fortran, dtype = np.lib.format.read_array_header_1_0(f)
    else:  # (2, 0); (3, 0) differs only in the header's text encoding
        shape, _fortran, dtype = np.lib.format.read_array_header_2_0(f)
    if dtype.hasobject:  # (what np.load(allow_pickle=False) refuses, said before the shape)
        raise ValueError("Object arrays cannot be loaded when allow_pickle=False (they are pickled)")
    return tuple(int(d) for d in shape), dtype


def tensor_header(feed, name) -> Optional[tuple]:
    """The shape of tensor ``name`` of ``feed`` without reading its values where the file says
    it in a header (an ``.npz`` member); None when only the value can tell."""
    header = getattr(feed, "header", None)
    found = header(name) if header is not None else None
    return found[0] if found is not None else None


def check_tensor_size(what: str, shape: tuple, dtype) -> None:
    """InputError when an array of ``shape`` and ``dtype`` is over --max-tensor-size (read before
    any of it is inflated or allocated)."""
    count = 1
    for d in shape:
        count *= max(int(d), 0)
    nbytes = count * max(int(getattr(dtype, "itemsize", 1) or 1), 1)
    if nbytes > limits.max_tensor_bytes:
        raise InputError(
            f"{what} would take {limits.size_text(nbytes)} in memory (shape {list(shape)}, {dtype}), over the "
            f"{limits.size_text(limits.max_tensor_bytes)} limit for one array; nothing was inflated. If the file is "
            "right, raise the limit with --max-tensor-size"
        )

"""Loading for ``debug reduce``: the model (indexed from its serialized pieces, big external
weights left on disk), and what the data files tell about its inputs and tensors."""

from __future__ import annotations

import mmap
import os
import shutil
import tempfile
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from toolkit.core.io.datafiles import load_inputs
from toolkit.core.errors import InputError
from toolkit.core.graph.graphs import has_external_data, node_outputs
from toolkit.core.meta import TensorMeta, dtype_from_numpy, format_shape
from toolkit.core.io.model import (
    check_readable_file,
    graph_io_meta,
    load_external_data_into,
    load_lazily,
    parse_model,
)
from toolkit.core.shapes import run_on_ort
from toolkit.reduce.graph import RawPieces

# External weights up to this size are read when the model is loaded; bigger ones stay on
# disk and are copied into each file written (see GraphIndex.write).
EAGER_WEIGHT_BYTES = 1 << 20

# A model file up to this size is read into memory; a bigger one is copied once into an
# unnamed temporary file that is then memory-mapped. Either way the reduce works on a
# snapshot: a rewrite of the model during the reduce (an in-place re-export, a check that
# truncates it) cannot change or truncate what the reduce reads.
SNAPSHOT_IN_MEMORY = 256 << 20

_STAMPS: Dict[str, Tuple[int, int, int, int]] = {}  # model path -> its identity when it was read


def load_model_and_pieces(path: str, external_data_dir: Optional[str] = None):
    """(model, pieces): :func:`load_for_index` with every external weight loaded into the model."""

    model, pieces, base = load_for_index(path, external_data_dir)
    if base is not None:
        load_external_data_into(model, base, path)
    return model, pieces


def load_for_index(path: str, external_data_dir: Optional[str] = None, files: Optional[list] = None):
    """(model, pieces, base): the model to index, the file cut into pieces to build
    candidates, and the folder of its external data (``files``, if given, receives the
    absolute paths of its external data files).

    For a model whose weights are inside its file, the file is memory-mapped, cut into
    its fields, and the model returned is a *light* one: big initializers are stubs
    (names, dims, types), so this process stays small (cheap forks for the warm worker)
    and candidates are written from slices of the file. A model with external data is
    loaded with its big weights left on disk as references (``base`` is their folder;
    :class:`GraphIndex` copies what each candidate needs when writing it). Otherwise
    (stdin, anything unusual) the model is loaded and ``pieces`` is None. Errors are those
    of :func:`toolkit.core.io.model.load_model`.
    """

    def full():
        model, base = load_lazily(path, external_data_dir, eager_bytes=EAGER_WEIGHT_BYTES, files=files)
        return model, None, base

    if path == "-":
        return full()
    light = _light_model(path)
    if light is None:
        return full()
    return light[0], light[1], None


def _light_model(path: str):
    """(the light model, the file cut into pieces) of a model whose weights are inside its file;
    None for any other (external data, a file that cannot be cut, a model the normal loader must
    word the error of)."""
    check_readable_file(path)
    data = snapshot(path)
    if data is None:
        return None
    pieces = RawPieces.scan(data)
    light = pieces.light_bytes() if pieces is not None else None
    if pieces is None or light is None or pieces.external:
        return None
    try:
        model = parse_model(light, path)
    except InputError:
        return None  # let the normal loader word the error
    if has_external_data(model):
        return None
    return model, pieces


def data_input_shapes(model, paths: Sequence[str], warn=None) -> Dict[str, tuple]:
    """Shapes for the model's dynamic inputs, from the first feed of ``--load-inputs`` files.

    A layerwise file (the inputs of every tensor of a model) is welcome: arrays that are
    not inputs of the model are left out here (:func:`data_tensor_metas` describes them
    for subgraphs that read them). An array of another dtype than its input is used for
    its shape, with a warning (the check decides what it does with it). An array that
    disagrees with an input's fixed dims is an InputError naming the file and the tensor
    (the check would otherwise fail on every subgraph for a reason that has nothing to do
    with the model). Later files win for names given twice.
    """
    if not paths:
        return {}

    ins, _ = graph_io_meta(model)
    metas = {m.name: m for m in ins}
    shapes: Dict[str, tuple] = {}
    for path in paths:
        feeds = load_inputs(path)
        if not feeds:
            continue
        _check_names_known(model, metas, feeds[0], path)
        shapes.update(_dynamic_shapes(path, metas, feeds[0], warn))
    return shapes


def _dynamic_shapes(path: str, metas: Dict[str, TensorMeta], feed, warn) -> Dict[str, tuple]:
    """The shapes ``feed`` (of file ``path``) gives the model's dynamic inputs, each checked."""
    shapes: Dict[str, tuple] = {}
    for name in feed:
        meta = metas.get(name)
        if meta is None:
            continue  # a layerwise file: not an input of the whole model
        shape = _checked_input_shape(path, name, meta, feed, warn)
        if not _static(meta.shape):
            shapes[name] = shape
    return shapes


def _check_names_known(model, metas: Dict[str, TensorMeta], feed, path: str) -> None:
    """An InputError unless some array of ``feed`` is an input of the model or, for a layerwise
    file, one of its tensors (inputs and node outputs)."""
    if any(name in metas for name in feed):
        return
    made = set(node_outputs(model.graph))  # (a layerwise file: walked only when no input matched)
    if any(name in made for name in feed):
        return
    known = ", ".join(f"'{n}'" for n in metas) or "(none)"
    first = next(iter(feed), "")
    raise InputError(f"{path}: no array in it is a tensor of the model ('{first}' is not); its inputs are {known}")


def _checked_input_shape(path: str, name: str, meta: TensorMeta, feed, warn) -> tuple:
    """The shape of input ``name`` in ``feed``: a warning for another dtype than the model's, an
    InputError for dims that disagree with the input's fixed ones."""
    shape, dtype = _shape_and_dtype(feed, name)
    if warn is not None:
        _warn_other_dtype(path, name, meta, dtype, warn)
    if meta.shape is not None and not _fits(meta.shape, shape):
        raise InputError(
            f"{path}: input '{name}' has shape {format_shape(shape)} but the model's input is "
            f"{format_shape(meta.shape)}"
        )
    return shape


def _warn_other_dtype(path: str, name: str, meta: TensorMeta, dtype, warn) -> None:
    """A warning when input ``name`` of file ``path`` has another ``dtype`` than the model's."""
    if meta.dtype and dtype is not None and dtype_from_numpy(dtype) != meta.dtype:
        warn(
            f"{path}: input '{name}' is {dtype_from_numpy(dtype)} but the model wants {meta.dtype}; "
            f"debug reduce casts it to {meta.dtype} where it runs the model"
        )


def _fits(dims, shape: tuple) -> bool:
    """Whether ``shape`` agrees with every fixed dim of ``dims`` (same rank)."""
    return len(dims) == len(shape) and all(not isinstance(d, int) or d < 0 or d == v for d, v in zip(dims, shape))


def _static(dims) -> bool:
    """Whether ``dims`` is known and every dim of it fixed."""
    return dims is not None and all(isinstance(d, int) and d >= 0 for d in dims)


def _shape_and_dtype(feed, name: str):
    """(shape, dtype) of ``feed[name]``: from the file's header where it has one (nothing inflated)."""
    header = getattr(feed, "header", None)
    found = header(name) if header is not None else None
    if found is None:
        value = feed[name]
        found = (getattr(value, "shape", ()), getattr(value, "dtype", None))
    return tuple(int(d) for d in found[0]), found[1]


def data_tensor_metas(paths: Sequence[str]) -> Dict[str, "object"]:
    """Shape and dtype of every array of the first feed of ``paths`` (later files win):
    what a layerwise inputs file says about the tensors a subgraph may read."""

    found: Dict[str, object] = {}
    for path in paths:
        feeds = load_inputs(path)
        if not feeds:
            continue
        for name in feeds[0]:
            shape, dtype = _shape_and_dtype(feeds[0], name)
            if dtype is not None:  # (a data file's arrays: numpy dtypes, each has a name)
                found[name] = TensorMeta(name, shape, dtype_from_numpy(dtype))
    return found


def run_for_values(model, names: Sequence[str], feed: Mapping[str, object], shapes,
                   external_data_dir=None) -> Dict[str, object]:
    """The values of tensors ``names`` of ``model`` run once on ONNX-Runtime (CPU, no graph
    optimization) on ``feed`` (every input of the model: see :func:`toolkit.reduce.feeds.fold_values_maker`)."""

    purpose = "fold the tensors of removed side branches (--no-reduce-outputs)"
    return run_on_ort(model, names, purpose=purpose, feed=feed, input_shapes=shapes, external_data_dir=external_data_dir)[1]


def _stamp(st: os.stat_result) -> Tuple[int, int, int, int]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def model_changed(path: str) -> bool:
    """Whether the model file at ``path`` was replaced or rewritten since :func:`snapshot` read it."""
    then = _STAMPS.get(path)
    if then is None:
        return False
    try:
        return _stamp(os.stat(path)) != then
    except OSError:
        return True


def identity_files(model: str, given: Sequence[str], external: Sequence[str]) -> List[str]:
    """The files whose size and modification time stand for a model's weights in a replay file
    (see toolkit.reduce.replay), by their real paths (the same file named through a link
    matches): ``given``, the files of a model given whose rewrite is reduced (the model first),
    or else ``model`` and its ``external`` data files. A given model rewritten since it was read
    is an InputError: the rewrite is of the model as it was, the file is another."""
    if given:
        if model_changed(given[0]):
            raise InputError(f"{given[0]}: the file changed while debug reduce was reading it; run again once "
                             "it is written")
        return [os.path.realpath(p) for p in given]
    return ([os.path.realpath(model)] if model != "-" else []) + list(external)


def snapshot(path: str):
    """The bytes of the file at ``path`` as they are now (bytes, or a map of a private copy),
    untouched by any later rewrite of the file; None for an empty or unreadable file."""

    try:
        with open(path, "rb") as fh:
            st = os.fstat(fh.fileno())
            _STAMPS[path] = _stamp(st)
            if st.st_size == 0:
                return None
            if st.st_size <= SNAPSHOT_IN_MEMORY:
                return fh.read()
            return _private_copy(fh, os.path.dirname(os.path.abspath(path)))
    except (OSError, ValueError):
        return None


def _private_copy(fh, folder: str):
    """A memory map of a copy of the open file ``fh`` in an unnamed temporary file (beside
    it when that folder is writable: a copy-on-write filesystem then shares the blocks)."""
    try:
        copy = tempfile.TemporaryFile(dir=folder)
    except OSError:
        copy = tempfile.TemporaryFile()
    with copy:
        shutil.copyfileobj(fh, copy, 16 << 20)
        copy.flush()
        return mmap.mmap(copy.fileno(), 0, access=mmap.ACCESS_READ)



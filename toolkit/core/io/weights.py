"""External weights that stay on disk until they are written out.

A model loaded with ``load_external_data=False`` keeps its big initializers as references
(``data_location = EXTERNAL`` with a location, offset and length) into files in a base
folder. Surgery works on the structure alone; when the result is saved, the weights it
still references are copied from their source files in chunks — straight into the new
data file, or spliced into a single-file model — so memory never holds them all, and
never twice.

Splicing uses protobuf's merge rule: serialized messages concatenate, and a repeated
field's elements add up. The model is serialized without the referenced initializers,
then each one is appended as a tiny ``ModelProto{graph{initializer: [tensor]}}`` whose
``raw_data`` bytes are copied from the source file.
"""

from __future__ import annotations

import os
import shutil
import warnings
from typing import Dict, Iterator, List, Tuple

import onnx
from onnx.external_data_helper import ExternalDataInfo, load_external_data_for_tensor

from toolkit.core.files import create
from toolkit.core.files.clone import clone_file
from toolkit.core.errors import LIBRARY_ERRORS, PYTHON_ERRORS, InputError, reraise_bug
from toolkit.core.graph.graphs import stored_nbytes, walk_graphs
from toolkit.core.files.paths import describe
from toolkit.core.io.protowire import field_header

_CHUNK = 16 << 20


def is_ref(tensor) -> bool:
    """A tensor whose data is in an external file (any ``raw_data`` it also holds is
    ignored, as onnx's loader does)."""

    return tensor.data_location == onnx.TensorProto.EXTERNAL


def nested_tensors(model) -> Iterator[object]:
    """Every tensor except the top graph's initializers: subgraph initializers and
    tensors in node attributes (Constant values), at any depth."""
    for graph in walk_graphs(model.graph):
        if graph is not model.graph:
            yield from graph.initializer
        for node in graph.node:
            for attr in node.attribute:
                if attr.HasField("t"):
                    yield attr.t
                yield from attr.tensors


def ref_nbytes(tensor) -> int:
    """Size of a referenced tensor's data: its ``length`` entry, else its dims."""
    for entry in tensor.external_data:
        if entry.key == "length":
            try:
                return max(int(entry.value), 0)
            except ValueError:
                break
    n = 1
    for d in tensor.dims:
        n *= max(int(d), 0)
    return n * 4


def read_length(tensor) -> None:
    """Give a referenced tensor with no ``length`` entry the length its dims and type need, as
    ONNX-Runtime reads it: onnx's reader takes the whole rest of the file instead, so a data file
    holding more after the tensor read as a damaged tensor (sanitize refused, or wrote a model
    with the extra bytes). Strings and unknown types are left alone."""
    if any(e.key == "length" for e in tensor.external_data):
        return
    n = stored_nbytes(tensor)
    if n is not None:
        entry = tensor.external_data.add()
        entry.key, entry.value = "length", str(n)


def load_tensor(tensor, base_dir: str, path: str = "") -> None:
    """Read one referenced tensor's data into it (it becomes an in-memory tensor)."""

    read_length(tensor)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            load_external_data_for_tensor(tensor, base_dir)
    except LIBRARY_ERRORS + PYTHON_ERRORS + (onnx.checker.ValidationError,) as exc:  # (onnx's reader on a malformed entry)
        reraise_bug(exc)
        raise InputError(f"{describe(path)}: cannot load external data of '{tensor.name}': {exc}") from None


def ref_source(tensor, base_dir: str) -> Tuple[str, int, int]:
    """(file, offset, length) of a referenced tensor's bytes, checked: the file is inside
    ``base_dir`` and holds the whole range."""

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # unknown keys: ignored, as onnx itself does
            info = ExternalDataInfo(tensor)
    except ValueError as exc:
        raise InputError(f"tensor '{tensor.name}': bad external data entry: {exc}") from None
    loc = info.location or ""
    base = os.path.realpath(base_dir)
    full = os.path.realpath(os.path.join(base, loc))
    if not loc or os.path.isabs(loc) or os.path.commonpath([full, base]) != base:
        raise InputError(
            f"tensor '{tensor.name}': external data location '{loc}' is not a file inside {base_dir} "
            "(absolute, outside the folder, or a symbolic link out of it; onnx and ONNX-Runtime refuse those too)"
        )
    if not os.path.isfile(full):
        raise InputError(f"tensor '{tensor.name}': external data file {loc} not found in {base_dir}")
    size = os.path.getsize(full)
    offset = info.offset or 0
    length = info.length if info.length is not None else size - offset
    if offset + length > size:
        raise InputError(
            f"tensor '{tensor.name}': external data {loc} ends at byte {size}, before the tensor's "
            f"{length} bytes at offset {offset}; the file is truncated"
        )
    return full, offset, length


def copy_range(src: str, offset: int, length: int, out) -> None:
    """Copy ``length`` bytes at ``offset`` of ``src`` to the open binary file ``out``."""
    with open(src, "rb") as f:
        f.seek(offset)
        left = length
        while left:
            buf = f.read(min(_CHUNK, left))
            if not buf:
                raise InputError(f"{src}: ended early while copying external data")
            out.write(buf)
            left -= len(buf)


def top_ref_indices(model) -> List[int]:
    return [i for i, t in enumerate(model.graph.initializer) if is_ref(t)]


def append_refs_to_data_file(model, base_dir: str, folder: str, location: str, size_threshold: int) -> None:
    """Copy every referenced top-level initializer into ``folder/location`` (appending),
    in chunks, and point the tensor there. Small ones are loaded into the model instead;
    nested references (attribute tensors, subgraph initializers) are loaded."""

    for t in nested_tensors(model):
        if is_ref(t):
            load_tensor(t, base_dir)
    refs = [model.graph.initializer[i] for i in top_ref_indices(model)]
    if not refs:
        return
    with create.open_new(os.path.join(folder, location), "wb") as out:  # (a new temp file of its own)
        for t in refs:
            src, offset, length = ref_source(t, base_dir)
            if length < size_threshold:
                load_tensor(t, base_dir)
                continue
            start = out.tell()
            copy_range(src, offset, length, out)
            del t.external_data[:]
            t.data_location = onnx.TensorProto.EXTERNAL
            for key, value in (("location", location), ("offset", str(start)), ("length", str(length))):
                entry = t.external_data.add()
                entry.key, entry.value = key, value


def _number(message_cls, field: str) -> int:
    return message_cls.DESCRIPTOR.fields_by_name[field].number


def write_single_file(model, out, base_dir: str) -> None:
    """Write ``model`` as one protobuf file to the open binary file ``out``, its referenced
    top-level initializers spliced in from their files in chunks (they end up last).

    Nested references are loaded first. ``model`` loses those initializers from its list
    while writing and gets them back at the end (as in-file references, unchanged).
    """

    for t in nested_tensors(model):
        if is_ref(t):
            load_tensor(t, base_dir)
    indices = top_ref_indices(model)
    inits = model.graph.initializer
    pieces = []
    for i in indices:
        t = inits[i]
        meta = onnx.TensorProto()
        meta.CopyFrom(t)  # no data: the tensor is a reference
        pieces.append((t, meta, ref_source(t, base_dir)))
    kept = [inits[i] for i in indices]
    saved = []
    for t in kept:
        ref = onnx.TensorProto()
        ref.CopyFrom(t)
        saved.append(ref)
    for i in reversed(indices):
        del inits[i]
    try:
        out.write(model.SerializeToString())
        n_raw = _number(onnx.TensorProto, "raw_data")
        n_init = _number(onnx.GraphProto, "initializer")
        n_graph = _number(onnx.ModelProto, "graph")
        for _t, meta, (src, offset, length) in pieces:
            meta.ClearField("external_data")
            meta.ClearField("data_location")
            meta.ClearField("raw_data")
            head = meta.SerializeToString() + field_header(n_raw, length)
            tensor_len = len(head) + length
            graph_head = field_header(n_init, tensor_len)
            out.write(field_header(n_graph, len(graph_head) + tensor_len) + graph_head + head)
            copy_range(src, offset, length, out)
    finally:
        inits.extend(saved)


# ---------------------------------------------------------------------- zero-copy references


def _inside(path: str, folder: str) -> bool:
    return os.path.commonpath([path, folder]) == folder


def link_data_files(
    sources, folder: str, stem: str, *, copy_ok: bool = True, note=None, hard_links: bool = False
) -> Tuple[Dict[str, str], List[str]]:
    """Make each external data file in ``sources`` (real paths) reachable from ``folder``,
    so a model written there can keep the same offsets into it.

    Returns ``({source: location relative to folder}, [paths created])``. Per source:

    - a file already inside ``folder`` is used as it is (its path relative to the folder): no copy;
    - else ``<stem>.weights`` (``<stem>.weights.<k>`` for the k-th of several files) is made in
      ``folder``: a copy-on-write clone where the filesystem has them (no data copied), else a
      copy made once (``copy_ok``; ``note(message)`` says so), else OSError.
      With ``hard_links``, a hard link is tried first.

    onnx 1.23 refuses to read external data through a symbolic link, a path leading out of the
    model's folder, an absolute location, or a file with several hard links (its "hardlink
    attack" check, which then refuses the original file too while the link exists); ONNX-Runtime
    refuses the first three. A clone or a copy is a file of its own that every reader accepts.

    Nothing that is one of ``sources`` is ever replaced.
    """

    real_folder = os.path.realpath(folder)
    real_sources = [os.path.realpath(s) for s in sources]
    mapping: Dict[str, str] = {}
    created: List[str] = []
    outside = [s for s in real_sources if not _inside(s, real_folder)]
    for src in real_sources:
        if _inside(src, real_folder):
            mapping[src] = os.path.relpath(src, real_folder)
    for k, src in enumerate(outside):
        name = f"{stem}.weights" if len(outside) == 1 else f"{stem}.weights.{k}"
        target = os.path.join(real_folder, name)
        if os.path.lexists(target):
            if os.path.realpath(target) in real_sources:
                raise InputError(f"{target} is an external data file of the model; choose another file name")
            os.unlink(target)
        _reach(src, target, copy_ok, note, hard_links)
        mapping[src] = name
        created.append(target)
    return mapping, created


def _reach(src: str, target: str, copy_ok: bool, note, hard_links: bool) -> None:
    """``target``: a hard link to ``src`` (``hard_links``), a clone of it, or a copy."""
    why = "the filesystem cannot clone files"
    if hard_links:
        try:
            os.link(src, target)  # (a new name: fails, never follows, when anything is there)
            create.trace(target)
            return
        except OSError as exc:
            why = f"a hard link was not possible ({exc.strerror or exc})"
    if clone_file(src, target):
        return
    if not copy_ok:
        raise OSError(f"cannot reach {src} from {os.path.dirname(target)} without a copy: {why}")
    with open(src, "rb") as fin, create.open_new(target, "wb") as fout:
        shutil.copyfileobj(fin, fout, 16 << 20)
    if note is not None:
        note(
            f"copied {os.path.basename(src)} ({os.path.getsize(src) / 2**30:.1f} GiB) once to {target}: {why} "
            "(onnx refuses external data reached through links); put the iteration artifact in the data file's "
            "folder to avoid the copy"
        )


def relinked(tensor, location: str):
    """A copy of the reference ``tensor`` (no data) pointing at ``location``, same offset and length."""

    out = onnx.TensorProto()
    out.CopyFrom(tensor)
    for entry in out.external_data:
        if entry.key == "location":
            entry.value = location
    return out

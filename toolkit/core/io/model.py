"""Loading and saving ONNX models: paths or ``-``, external data, atomic writes.

Every failure a user can cause (missing file, a directory, bytes that are not a
model, a truncated model, missing external data) is raised as :class:`InputError`
naming the file and the problem.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from typing import Iterator, Optional, Set

from toolkit.core.errors import LIBRARY_ERRORS, PYTHON_ERRORS, InputError, UsageError, reraise_bug
from toolkit.core.files import create
from toolkit.core.files import inplace
from toolkit.core.io.functions import check_inlined_size
from toolkit.core.process.interrupt import call_in_child
from toolkit.core.graph.graphs import (  # noqa: F401  (re-exported)
    all_tensors,
    copy_field,
    external_data_folder,
    external_data_locations,
    fed_inputs,
    has_external_data,
    tensor_nbytes,
    undecodable_text,
)
from toolkit.core.meta import TensorMeta, dtype_from_onnx
from toolkit.core.text import shown_name
from toolkit.core.files.paths import STDIO, describe, forget_written, note_written  # noqa: F401  (STDIO, describe: re-exported)

# Protobuf refuses to serialize messages of 2 GiB or more.
PROTOBUF_LIMIT = 2**31 - 1
# Bigger than this and we save weights as external data even if not asked.
AUTO_EXTERNAL_THRESHOLD = int(1.8 * 2**30)


def _refuse_first(path: str, problems) -> None:
    """InputError ``path: <message>`` for the first ``(condition, message)`` that holds."""
    for failed, message in problems:
        if failed:
            raise InputError(f"{path}: {message}")


def check_readable_file(path: str) -> None:
    """Raise InputError unless ``path`` is an existing, readable, regular file."""
    if path == STDIO:
        return
    _refuse_first(path, [
        (not os.path.exists(path), "no such file"),
        (os.path.isdir(path), "is a directory, expected a file"),
        (not os.access(path, os.R_OK), "permission denied"),
    ])


def check_readable_data(path: str) -> None:
    """Raise InputError unless ``path`` is a data file as every command reads one: a readable
    regular file, or a readable folder of per-iteration files (Polygraphy 0.53's extensionless
    ``--save-inputs``/``--save-outputs``; what the folder holds is checked when it is read)."""
    if path == STDIO or not os.path.isdir(path):
        check_readable_file(path)
    elif not os.access(path, os.R_OK | os.X_OK):
        raise InputError(f"{path}: permission denied")


_SPECIAL = (
    ("S_ISFIFO", "a FIFO (named pipe)"),
    ("S_ISCHR", "a character device"),
    ("S_ISBLK", "a block device"),
    ("S_ISSOCK", "a socket"),
)


def check_data_file(path: str) -> None:
    """InputError (exit 3) when ``path`` is a FIFO, a device or a socket: a data file is read
    whole, more than once and by size, which such a file cannot give (a FIFO would block, a
    device never end). Checked without opening it; stdin (``-``) is its own case."""
    import stat

    if path == STDIO:
        return
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return  # (the reader says what is wrong)
    for test, what in _SPECIAL:
        if getattr(stat, test)(mode):
            raise InputError(
                f"{path}: is {what}, not a data file; save the data to a regular file (or pipe it to stdin as -)"
            )


def read_bytes(path: str) -> bytes:
    """Read a whole file (or stdin for ``-``) with friendly errors."""
    check_readable_file(path)
    try:
        if path == STDIO:
            return sys.stdin.buffer.read()
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        raise InputError(f"{describe(path)}: cannot read: {exc.strerror or exc}") from None


def spool_stdin(data_file: bool = False) -> str:
    """The model (``data_file``: the inputs file, JSON or .npz) on stdin, saved to a temp file that
    lives as long as the command (for commands that read it more than once: a quantization check,
    then the search; every check of a reduction)."""
    from toolkit.core.files.scratch import temp_folder

    data = read_bytes(STDIO)
    if not data:
        raise InputError(f"<stdin>: empty file, expected {'an inputs file (JSON or .npz)' if data_file else 'an ONNX model'}")
    name = ("stdin.npz" if data[:2] == b"PK" else "stdin.json") if data_file else "stdin.onnx"
    path = os.path.join(temp_folder("toolkit-stdin-"), name)
    create.write_new(path, data)
    return path


def parse_model(data: bytes, path: str):
    import onnx
    from google.protobuf.message import DecodeError

    if not data:
        raise InputError(f"{describe(path)}: empty file, expected an ONNX model")
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as exc:
        raise InputError(
            f"{describe(path)}: not a valid ONNX model (protobuf parse failed: {exc}); "
            "the file may be truncated or not an .onnx file"
        ) from None
    if not model.HasField("graph") or (
        model.ir_version == 0 and not model.opset_import and not model.graph.node
    ):
        raise InputError(f"{describe(path)}: not an ONNX model (no graph found)")
    if path != STDIO and path not in _PARSED:
        _PARSED.append(path)
        del _PARSED[:-8]
    return model


_PARSED: list = []  # the model files this command parsed (the last 8), for corrupt_text_in_models


def forget_parsed_models() -> None:
    """Start a new command: the models parsed so far are no longer its own."""
    _PARSED.clear()


def corrupt_text_in_models() -> Optional[str]:
    """An error sentence when a model file this process parsed holds text that is not valid
    UTF-8 (protobuf hands such a name back as ``bytes``, which later code trips on), else None.
    Costs a re-read, so it is asked only after an unexpected failure."""
    for path in list(_PARSED):
        try:
            with open(path, "rb") as f:
                model = parse_model(f.read(), path)
        except (OSError, InputError):  # gone, unreadable or not a model now: nothing to say about it
            continue
        where = undecodable_text(model)
        if where:
            return f"{describe(path)}: {where} is not valid UTF-8 text; the file is corrupt (re-export the model)"
    return None



def load_model(
    path: str,
    *,
    external_data_dir: Optional[str] = None,
    load_external_data: bool = True,
    bounded: bool = True,
):
    """Load an ONNX model from ``path`` (``-`` = stdin).

    External data is read from ``external_data_dir`` if given, else from the model's
    folder (the current folder for stdin). With ``load_external_data=False`` weights
    stored outside the model stay as references (structure only). A model whose local
    functions inline to more than ``--max-nodes`` nodes is an InputError unless not
    ``bounded`` (a command that only reads its structure).
    """
    data = read_bytes(path)
    model = parse_model(data, path)
    del data
    if bounded:
        check_inlined_size(model, describe(path))
    if load_external_data and has_external_data(model):
        load_external_data_into(model, external_data_folder(path, external_data_dir), path)
    return model


def check_external_files(model, base_dir: str, path: str = "") -> None:
    """InputError unless every external file the model names exists in ``base_dir``."""
    if not os.path.isdir(base_dir):
        raise InputError(f"{base_dir}: external data folder does not exist")
    for loc in external_data_locations(model):
        if not isinstance(loc, str):  # protobuf hands back bytes for text that is not UTF-8
            raise InputError(f"{describe(path)}: an external data location is not valid text; the file is corrupt")
        if not os.path.isfile(os.path.join(base_dir, loc)):
            raise InputError(
                f"{describe(path)}: external data file {loc} not found in {base_dir}; "
                "put it beside the model or pass --external-data-dir"
            )


def check_external_lengths(model, path: str = "") -> None:
    """InputError naming the first external tensor whose ``length`` entry does not fit its dims
    and type (read from the model alone, before any data is)."""
    from toolkit.core.graph.graphs import is_external, stored_nbytes

    for t in all_tensors(model):
        if not is_external(t):
            continue
        length = next((e.value for e in t.external_data if e.key == "length"), None)
        need = stored_nbytes(t)
        if length is None or need is None:
            continue
        if not length.isdigit() or int(length) != need:
            raise InputError(
                f"{describe(path)}: the external data of tensor '{shown_name(t.name)}' is {length} bytes long "
                f"('length' in the model) but its dims {list(t.dims)} need {need} bytes; the model's external "
                "data entries are damaged: re-export or re-save the model"
            )


def load_external_data_into(model, base_dir: str, path: str = "") -> None:
    from onnx.checker import ValidationError
    from onnx.external_data_helper import load_external_data_for_model

    check_external_files(model, base_dir, path)
    check_external_lengths(model, path)
    try:
        load_external_data_for_model(model, base_dir)
    except LIBRARY_ERRORS + PYTHON_ERRORS + (ValidationError,) as exc:  # (onnx's reader on a malformed entry)
        reraise_bug(exc)
        raise InputError(f"{describe(path)}: cannot load external data: {exc}") from None


def refuse_binary_to_terminal(path: str) -> None:
    """A binary file (a model) written to stdout when stdout is a terminal garbles it, as gzip
    knows: refuse (UsageError, exit 2) and say how to redirect."""
    if path != STDIO:
        return
    isatty = getattr(sys.stdout, "isatty", None)  # None: a stream object without it
    try:
        tty = bool(isatty()) if isatty is not None else False
    except ValueError:  # a closed stdout
        tty = False
    if tty:
        raise UsageError(
            "refusing to write a binary model to the terminal; redirect stdout (... -o - > out.onnx, or | toolkit "
            "inspect model -) or give a file name with -o"
        )


def check_output_path(path: str, binary: bool = False) -> None:
    """Fail early (before any work) if ``path`` cannot be written (``binary``: a model, which
    is never written to a terminal)."""
    if not path:
        raise UsageError("an output file name is empty: give a file name (or '-' for stdout)")
    if path == STDIO:
        if binary:
            refuse_binary_to_terminal(path)
        return
    folder = os.path.dirname(os.path.abspath(path))
    _refuse_first(path, [
        (not os.path.isdir(folder), f"output folder {folder} does not exist"),
        (os.path.isdir(path), "is a directory, expected a file name"),
        (not os.access(folder, os.W_OK), f"output folder {folder} is not writable"),
    ])


@contextlib.contextmanager
def atomic_output(path: str, mode: str = "wb") -> Iterator:
    """Open a temp file beside ``path``; on success rename it over ``path``.

    On any exception the temp file is removed and ``path`` is untouched. ``-`` writes
    to stdout (binary for "wb"). An OSError while writing (disk full, no permission)
    becomes an :class:`InputError` naming ``path``.
    """
    try:
        if path == STDIO:
            if "b" in mode:
                refuse_binary_to_terminal(path)
            stream = sys.stdout.buffer if "b" in mode else sys.stdout
            yield stream
            stream.flush()
            return
        check_output_path(path)
        tmp = None
        try:
            with _signals_held():  # a Ctrl-C between creating the temp file and naming it would leave it
                fd, tmp = create.temp_beside(path)  # (O_EXCL|O_NOFOLLOW: .NAME.<random>.tmp)
            with os.fdopen(fd, mode) as f:
                yield f
            with contextlib.suppress(OSError):
                # mkstemp creates files 0600; give the result normal permissions.
                umask = os.umask(0)
                os.umask(umask)
                os.chmod(tmp, 0o666 & ~umask)
            inplace.verify(path)  # (an in-place rewrite of a model another program changed meanwhile: no)
            os.replace(tmp, path)
            note_written(path)
        except BaseException:
            if tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
            raise
    except OSError as exc:
        where = "<stdout>" if path == STDIO else path
        raise InputError(f"{where}: cannot write: {exc.strerror or exc}") from None


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """Hold SIGINT, SIGTERM and SIGHUP for a few statements (the main thread only): their Python
    handlers run right after, once what the statements created has a name to clean up."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def write_bytes_atomic(path: str, data: bytes) -> None:
    with atomic_output(path, "wb") as f:
        f.write(data)


_SPLIT_BYTES = 1 << 20


def write_model(model, out) -> None:
    """Serialize ``model`` into the open binary file ``out``.

    Its big top-level initializers (raw data of 1 MiB or more) are written one at a time
    after the rest, each as a further piece of the graph field, which protobuf parsers
    merge (so they end up last in the initializer list). Their bytes are copied once, not
    serialized into one more whole-model copy in memory."""
    inits = model.graph.initializer
    big = {i for i, t in enumerate(inits) if tensor_nbytes(t) >= _SPLIT_BYTES and t.HasField("raw_data")}
    if not big:
        out.write(model.SerializeToString())
        return
    out.write(_shell(model, big).SerializeToString())
    for i in sorted(big):
        _write_initializer_piece(inits[i], out)


def _shell(model, big: Set[int]):
    """A model with every field of ``model`` but its initializers at positions ``big``."""
    import onnx

    shell = onnx.ModelProto()
    for f, value in model.ListFields():
        if f.name != "graph":
            copy_field(shell, f.name, value)
    for f, value in model.graph.ListFields():
        if f.name != "initializer":
            copy_field(shell.graph, f.name, value)
    shell.graph.initializer.extend(t for i, t in enumerate(model.graph.initializer) if i not in big)
    return shell


def _write_initializer_piece(t, out) -> None:
    """Initializer ``t`` as a further piece of the graph field (its raw bytes copied once)."""
    import onnx

    from toolkit.core.io.protowire import field_header

    n_graph = onnx.ModelProto.DESCRIPTOR.fields_by_name["graph"].number
    n_init = onnx.GraphProto.DESCRIPTOR.fields_by_name["initializer"].number
    n_raw = onnx.TensorProto.DESCRIPTOR.fields_by_name["raw_data"].number
    meta = onnx.TensorProto()
    for f, value in t.ListFields():
        if f.name != "raw_data":
            copy_field(meta, f.name, value)
    raw = t.raw_data  # the one copy
    head = meta.SerializeToString() + field_header(n_raw, len(raw))
    tensor_len = len(head) + len(raw)
    graph_head = field_header(n_init, tensor_len)
    out.write(field_header(n_graph, len(graph_head) + tensor_len) + graph_head + head)
    out.write(raw)
    del raw


def model_size_estimate(model) -> int:
    """The serialized size, within some bytes per tensor. Tensors stored as raw bytes are
    sized from their dims and type: ByteSize() walks every byte of them, which costs as
    much as serializing."""

    def size(value) -> int:
        if isinstance(value, (str, bytes)):
            return len(value) + 6
        if hasattr(value, "ByteSize"):
            return value.ByteSize() + 6
        if hasattr(value, "__len__"):  # repeated field
            return sum(size(v) for v in value)
        return 11

    total = sum(size(v) for f, v in model.ListFields() if f.name != "graph") + 6
    for f, value in model.graph.ListFields():
        if f.name != "initializer":
            total += size(value)
            continue
        for t in value:
            if t.HasField("raw_data"):
                total += tensor_nbytes(t) + len(t.name) + 11 * len(t.dims) + 32
            else:
                total += t.ByteSize() + 6
    return total


def save_model(
    model,
    path: str,
    *,
    external_data: Optional[bool] = None,
    external_data_path: Optional[str] = None,
    size_threshold: int = 1024,
    external_base_dir: Optional[str] = None,
) -> Optional[str]:
    """Save ``model`` to ``path`` (``-`` = stdout) atomically; the external-data file written, if any.

    ``external_data=None`` picks external data automatically for models that protobuf
    cannot serialize in one piece (>~2 GB). External data goes to ``external_data_path``
    (relative to the model's folder), default ``<model file name>.data``.

    Tensors whose data was never loaded (still references into external files in
    ``external_base_dir``) are read then: one at a time, straight into the new data file,
    when saving with external data; all of them when saving one file.
    """
    size = model_size_estimate(model)
    refs = []
    if external_base_dir is not None:
        from toolkit.core.io import weights

        refs = weights.top_ref_indices(model)
        size += sum(weights.ref_nbytes(model.graph.initializer[i]) for i in refs)
    if external_data is None:
        external_data = size > AUTO_EXTERNAL_THRESHOLD
    if not external_data:
        if size > PROTOBUF_LIMIT:
            raise InputError(f"{describe(path)}: model is {size / 2**30:.1f} GiB; save it with external data")
        if external_base_dir is not None:
            with atomic_output(path, "wb") as f:
                weights.write_single_file(model, f, external_base_dir)
            return None
        with atomic_output(path, "wb") as f:
            write_model(model, f)
        return None
    if path == STDIO:
        raise UsageError("a model with external data cannot be written to stdout; give a file name with -o")
    return _save_with_external_data(model, path, external_data_path, size_threshold, external_base_dir)


def _externalize(model, tmp_loc: str, tmp_data: str, data_file: str, size_threshold: int) -> None:
    """Point every tensor of ``size_threshold`` bytes or more at the temp data file ``tmp_loc``
    (created new at the first). What convert_model_to_external_data does, without its check for
    an existing file relative to the current folder, which appending the source's weights may
    have created; and with its convert_attribute: Constant values and subgraphs' weights too,
    where exporters such as paddle2onnx keep every weight."""
    from onnx.external_data_helper import set_external_data

    for t in all_tensors(model):
        if t.HasField("raw_data") and sys.getsizeof(t.raw_data) >= size_threshold:
            set_external_data(t, tmp_loc)
            if not os.path.exists(tmp_data):  # (made here, new: onnx then appends to a file of ours)
                os.close(create.create_new(tmp_data, final=data_file))


def _save_with_external_data(
    model, path: str, location: Optional[str], size_threshold: int, base_dir: Optional[str] = None
) -> str:
    """Write the model and its data file to hidden temp names, then rename the data file
    first and the model last: until the model's rename the old model (and its data) is
    untouched, after it the new pair is complete. When the model now at ``path`` reads the
    data file's very name (an in-place rewrite), it is first pointed at a hidden link to its
    old data (:class:`_Swing`), so that no moment pairs the old model with new data."""
    from onnx.external_data_helper import write_external_data_tensors

    check_output_path(path)
    folder = os.path.dirname(os.path.abspath(path))
    location = _data_location(path, folder, location)
    data_file = os.path.join(folder, location)
    # the temp data file's name, as the model refers to it while it is written
    tmp_loc = os.path.join(os.path.dirname(location), temp_name(os.path.basename(location)))
    tmp_data = os.path.join(folder, tmp_loc)
    tmp_model = ""
    swing = _Swing(path, folder, location)
    try:
        if base_dir is not None:
            # weights still in the source's files: copied in chunks, never all in memory
            from toolkit.core.io.weights import append_refs_to_data_file

            append_refs_to_data_file(model, base_dir, folder, tmp_loc, size_threshold)
        _externalize(model, tmp_loc, tmp_data, data_file, size_threshold)
        write_external_data_tensors(model, folder)
        _relocate(model, tmp_loc, location)  # point the model at the final name before serializing it
        tmp_model = os.path.join(folder, temp_name(os.path.basename(path)))
        with create.open_new(tmp_model, "wb", final=path) as f:
            f.write(model.SerializeToString())
        _normal_permissions(tmp_data)
        _normal_permissions(tmp_model)
        inplace.verify(path)
        swing.start()
        if os.path.exists(tmp_data):
            os.replace(tmp_data, data_file)  # data first: the old model does not read this name
        os.replace(tmp_model, path)  # the commit
        note_written(path)
    except BaseException as exc:  # incl. Ctrl-C, SIGTERM: no temp file is left behind
        swing.undo()
        for left in (tmp_data, tmp_model):
            if left:
                with contextlib.suppress(OSError):
                    os.unlink(left)
        if isinstance(exc, OSError):
            raise InputError(f"{path}: cannot write: {exc.strerror or exc}; {path} was not changed") from None
        raise
    swing.done()
    return data_file


def _relocate(model, old: str, new: str) -> None:
    for tensor in all_tensors(model):
        for entry in tensor.external_data:
            if entry.key == "location" and entry.value == old:
                entry.value = new


class _Swing:
    """An in-place rewrite whose data file has the name the old model reads: before the
    renames, the old data file gets a hidden second name (a hard link) and the old model is
    rewritten (atomically) to read that name. The old pair stays whole until the new model
    is in place; then the link goes. On failure both are put back."""

    def __init__(self, path: str, folder: str, location: str):
        self.path, self.location = path, location
        self.data_file = os.path.join(folder, location)
        self.original: Optional[bytes] = None
        self.backup = ""
        self.old = None
        if os.path.isfile(path) and os.path.isfile(self.data_file):
            try:
                raw = read_bytes(path)
                old = parse_model(raw, path)
            except InputError:
                return
            if location in external_data_locations(old):
                self.original, self.old = raw, old

    def start(self) -> None:
        if self.old is None:
            return
        backup_loc = os.path.join(os.path.dirname(self.location), temp_name(os.path.basename(self.location)))
        self.backup = os.path.join(os.path.dirname(self.data_file), os.path.basename(backup_loc))
        os.link(self.data_file, self.backup)
        _relocate(self.old, self.location, backup_loc)
        write_bytes_atomic(self.path, self.old.SerializeToString())

    def undo(self) -> None:
        """Put the old model and its data file back (after a failure or an interruption)."""
        if not self.backup or not os.path.exists(self.backup):
            return
        with contextlib.suppress(OSError):
            if not os.path.samefile(self.backup, self.data_file):  # the new data is in place already
                again = os.path.join(os.path.dirname(self.data_file), temp_name(os.path.basename(self.data_file)))
                os.link(self.backup, again)  # (the model on disk reads the backup until it is put back)
                os.replace(again, self.data_file)
        if self.original is not None:
            with contextlib.suppress(InputError, OSError):
                write_bytes_atomic(self.path, self.original)
        with contextlib.suppress(OSError):
            os.unlink(self.backup)  # (still there when the data was not replaced: another name of it)
        forget_written(self.path)

    def done(self) -> None:
        if self.backup:
            with contextlib.suppress(OSError):
                os.unlink(self.backup)


temp_name = create.temp_name


def _normal_permissions(path: str) -> None:
    """mkstemp and onnx create files 0600; give a written file the usual permissions."""
    with contextlib.suppress(OSError):
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(path, 0o666 & ~umask)


def data_file_path(path: str, location: Optional[str]) -> str:
    """The external-data file that saving a model to ``path`` with ``location`` writes,
    checked before any work (UsageError / InputError)."""
    folder = os.path.dirname(os.path.abspath(path))
    return os.path.join(folder, _data_location(path, folder, location))


def _data_location(path: str, folder: str, location: Optional[str]) -> str:
    """The data file's location relative to the model's folder, checked (UsageError / InputError)."""
    location = location or (os.path.basename(path) + ".data")
    if os.path.isabs(location):
        raise UsageError(f"external data path '{location}' must be relative to the model's folder")
    norm = os.path.normpath(location)
    if norm == os.pardir or norm.startswith(os.pardir + os.sep):
        raise UsageError(
            f"external data path '{location}' leaves the model's folder; ONNX-Runtime refuses to load such a "
            "model: give a name inside the folder of -o"
        )
    data_file = os.path.join(folder, location)
    _refuse_first(data_file, [
        (os.path.isdir(data_file), "is a directory; give --external-data-path a file name"),
        (not os.path.isdir(os.path.dirname(data_file)), "its folder does not exist"),
    ])
    return location


def graph_io_meta(model):
    """(inputs, outputs) of the top graph as lists of TensorMeta; initializers excluded."""

    ins = [value_info_meta(vi) for vi in fed_inputs(model.graph)]
    outs = [value_info_meta(vi) for vi in model.graph.output]
    return ins, outs


def value_info_meta(vi):
    """TensorMeta for an onnx ValueInfoProto (symbolic dims by name, unknown as None)."""

    t = vi.type
    if not t.HasField("tensor_type"):
        kind = t.WhichOneof("value")
        return TensorMeta(vi.name, None, kind or None)
    tt = t.tensor_type
    shape = None
    if tt.HasField("shape"):
        dims = []
        for d in tt.shape.dim:
            if d.HasField("dim_value"):
                dims.append(int(d.dim_value))
            elif d.HasField("dim_param") and d.dim_param:
                dims.append(d.dim_param)
            else:
                dims.append(None)
        shape = tuple(dims)
    return TensorMeta(vi.name, shape, dtype_from_onnx(tt.elem_type))


def infer_shapes(model, *, strict: bool = False, data_prop: bool = True):
    """ONNX shape inference that never raises for a bad node unless ``strict``.

    Falls back to the path-based API for models over the protobuf limit.
    """
    import onnx

    check_inlined_size(model, "the model")
    try:
        # (in a forked child: onnx holds the GIL for the whole inference, so no signal would end it here)
        if model.ByteSize() > PROTOBUF_LIMIT:
            with tempfile.TemporaryDirectory() as d:
                src = os.path.join(d, "in.onnx")
                dst = os.path.join(d, "out.onnx")
                onnx.save_model(model, src, save_as_external_data=True, location="w.data")
                call_in_child(_infer_path, src, dst, strict, data_prop, what="ONNX shape inference")
                return onnx.load(dst)
        return call_in_child(_infer, model, strict, data_prop, what="ONNX shape inference")
    except LIBRARY_ERRORS + (onnx.shape_inference.InferenceError, onnx.checker.ValidationError) as exc:
        if strict:
            raise InputError(f"ONNX shape inference failed: {exc}") from None
        return model


def _infer(model, strict: bool, data_prop: bool):
    import onnx

    return onnx.shape_inference.infer_shapes(model, strict_mode=strict, data_prop=data_prop)


def _infer_path(src: str, dst: str, strict: bool, data_prop: bool) -> None:
    import onnx

    onnx.shape_inference.infer_shapes_path(src, dst, strict_mode=strict, data_prop=data_prop)


def load_lazily(
    path: str, external_data_dir: Optional[str], needed=None, eager_bytes: int = 1 << 20, files: Optional[list] = None,
    bounded: bool = True,
):
    """Load a model keeping big top-level external initializers as references.

    Returns ``(model, base_dir)`` (base_dir None when nothing is external). Loaded at once:
    nested tensors, those up to ``eager_bytes``, and the initializers named by
    ``needed(graph)`` (a function of the loaded graph, e.g. what constant folding reads).
    ``files``, if given, receives the absolute paths of the model's external data files.
    """
    from toolkit.core.io.weights import is_ref, load_tensor, nested_tensors  # (imports onnx)

    model = load_model(path, external_data_dir=external_data_dir, load_external_data=False, bounded=bounded)
    if not has_external_data(model):
        return model, None
    base = external_data_folder(path, external_data_dir)
    check_external_files(model, base, path)
    if files is not None:
        files.extend(os.path.abspath(os.path.join(base, loc)) for loc in external_data_locations(model))
    for t in nested_tensors(model):
        if is_ref(t):
            load_tensor(t, base, path)
    _load_top_initializers(model, base, path, set(needed(model.graph)) if needed is not None else set(), eager_bytes)
    return model, base


def _load_top_initializers(model, base: str, path: str, needed: set, eager_bytes: int) -> None:
    """Load the top graph's external initializers that are ``needed`` or small; check where the others are."""
    from toolkit.core.io.weights import is_ref, load_tensor, ref_nbytes, ref_source  # (imports onnx)

    for t in model.graph.initializer:
        if not is_ref(t):
            continue
        if t.name in needed or ref_nbytes(t) <= eager_bytes:
            load_tensor(t, base, path)
        else:
            ref_source(t, base)  # a bad location or a short file fails now, before any work

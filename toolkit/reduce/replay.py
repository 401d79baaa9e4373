"""Debug replay files: verdicts already answered, so a later run need not re-check them.

JSON, written atomically::

    {"tool": "toolkit debug reduce", "version": 1, "model": "<structure digest>",
     "nodes": 312, "check": ["toolkit", "run", ...],
     "entries": [{"iteration": 1, "nodes": "<hex bit mask>", "count": 312, "failed": true,
                  "verdict": "fail", "code": 1, "seconds": 0.41, "signature": {...}}, ...]}

A replay is bound to what produced it: ``model`` is a digest of the graph's structure and of its
weights (their bytes, or the size and modification time of the model's file and of its external
data files, each by its real path; for a model whose If branches were inlined into a temporary
rewrite, the files of the model given, never the rewrite's), ``check`` the
check command and ``options`` what else decides a verdict (``--fail-regex``, ``--fail-code``,
``--ignore-fail-code``, ``--any-failure``, ``--check-timeout``, ``--model-input-shapes``, the
cut options, and with ``--compare`` the reference runner and model (as given), the inputs and seed; a file
option as its resolved path and a digest of its bytes, :func:`file_ref`). A file whose model,
check or options differ from the run's is refused (exit 3) with one sentence that names the
difference: its verdicts answer another question, so they are never reused.

``seconds`` (how long the check took) lets a resumed run make the same cost-based choices.
``verdict`` is the verdict class (pass, fail, broken, timeout) and ``code`` the check's exit
code (null when killed, timed out or answered by the user); ``failed`` is what the search
used (a broken check counts as a pass, a timeout as a failure). The full model's failing entry
keeps its ``signature`` (how it failed, :class:`toolkit.reduce.signature.Signature`): a resumed
run judges its new checks against it (without one, the full model is checked again).

Polygraphy's replay files (keys ``_N0_...``, one per iteration of its own search) are
recognised and refused with a clear message: their entries are numbered steps of another
search, not node sets, so they cannot answer this one's questions.

An entry's key is its node set (bit positions in the model's topological order); the
``model`` digest says which model those positions belong to.
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any, Dict, List, Mapping, Optional, Sequence

from toolkit.core.errors import InputError
from toolkit.core.io.model import check_data_file, read_bytes, write_bytes_atomic

TOOL = "toolkit debug reduce"
VERSION = 1


class Replay:
    tool = TOOL  # what wrote the file (another debug command may reuse the format)
    # compare the options before the model: where options decide which nodes are searched (so the
    # model's digest differs too), the option is named rather than "a different model"
    options_first = False
    other_model = "a different model (or a changed one)"  # (what a different model digest says)

    def __init__(
        self, model_id: str, num_nodes: int, check: Optional[Sequence[str]] = None,
        options: Optional[Mapping[str, Any]] = None,
    ):
        self.model_id = model_id
        self.num_nodes = num_nodes
        self.check = list(check) if check else None
        self.options = dict(options) if options is not None else None
        self.entries: List[dict] = []
        self.verdicts: Dict[int, bool] = {}
        self.seconds: Dict[int, float] = {}
        self._by_mask: Dict[int, dict] = {}

    def add(
        self,
        iteration: int,
        mask: int,
        count: int,
        failed: bool,
        seconds: Optional[float] = None,
        *,
        verdict: Optional[str] = None,
        code: Optional[int] = None,
        signature: Optional[dict] = None,
    ) -> None:
        if mask in self.verdicts:  # (a full model checked again for its signature: keep what it found)
            if signature is not None and mask in self._by_mask:
                self._by_mask[mask].setdefault("signature", signature)
            return
        self.verdicts[mask] = failed
        entry: Dict[str, Any] = {"iteration": iteration, "nodes": format(mask, "x"), "count": count, "failed": failed}
        if verdict:
            entry["verdict"] = verdict
            entry["code"] = code
        if signature is not None:
            entry["signature"] = signature
        if seconds is not None:
            entry["seconds"] = round(float(seconds), 6)
            self.seconds[mask] = entry["seconds"]
        self.entries.append(entry)
        self._by_mask[mask] = entry

    def get(self, mask: int) -> Optional[bool]:
        return self.verdicts.get(mask)

    def entry(self, mask: int) -> Optional[dict]:
        return self._by_mask.get(mask)

    def to_json(self) -> str:
        doc = {
            "tool": self.tool,
            "version": VERSION,
            "model": self.model_id,
            "nodes": self.num_nodes,
            "check": self.check,
            **({"options": self.options} if self.options is not None else {}),
            "entries": self.entries,
        }
        return json.dumps(doc, indent=1)

    def save(self, path: str) -> bool:
        """Write the replay file (atomically); an existing one is never replaced by one without
        entries (a run that ended before its first verdict). Whether it was written."""
        if not self.entries and os.path.exists(path):
            return False
        write_bytes_atomic(path, (self.to_json() + "\n").encode())
        return True

    @classmethod
    def load(
        cls, path: str, model_id: str, num_nodes: int, check: Any = False, options: Optional[Mapping[str, Any]] = None,
    ) -> "Replay":
        """Read a replay file made for this model (and, when given, this ``check`` and these
        ``options``); anything else is an InputError."""

        doc = _read_json(path)
        cls._check_format(path, doc)
        cls._check_bound(path, doc, model_id, num_nodes, check, options)
        rep = cls(model_id, num_nodes, doc.get("check"), doc.get("options"))
        for k, entry in enumerate(doc["entries"]):
            iteration, mask, failed = _entry_key(path, k, entry)
            seconds, verdict, code = _entry_details(path, k, entry, mask, failed, num_nodes)
            signature = entry.get("signature") if isinstance(entry.get("signature"), dict) else None
            rep.add(iteration, mask, bin(mask).count("1"), failed, seconds, verdict=verdict, code=code,
                    signature=signature)
        return rep

    @classmethod
    def _check_format(cls, path: str, doc: Any) -> None:
        """InputError unless ``doc`` is a replay written by ``cls.tool`` in this format's version
        (a Polygraphy replay is named as such)."""
        if _is_polygraphy_replay(doc):
            raise InputError(
                f"{path}: this is a Polygraphy debug replay; its entries are numbered iterations of Polygraphy's "
                "own search, not subgraphs, so toolkit cannot reuse them. Run without --load-debug-replay once; "
                "toolkit saves its own replay (polygraphy_debug_replay.json by default) that later runs can load"
            )
        if not isinstance(doc, dict) or doc.get("tool") != cls.tool or not isinstance(doc.get("entries"), list):
            raise InputError(f"{path}: not a debug replay file written by `{cls.tool}`")
        if doc.get("version") != VERSION:
            raise InputError(f"{path}: replay format version {doc.get('version')} is not supported (expected {VERSION})")

    @classmethod
    def _check_bound(cls, path: str, doc: dict, model_id: str, num_nodes: int, check: Any,
                     options: Optional[Mapping[str, Any]]) -> None:
        """InputError unless the replay ``doc`` was recorded for this model, check and options."""
        if cls.options_first and options is not None and isinstance(doc.get("options"), dict):
            _same_options(path, doc, options)
        cls._check_model(path, doc, model_id, num_nodes)
        if check is not False:
            _same_check(path, doc, check)
        if options is not None:
            _same_options(path, doc, options)

    @classmethod
    def _check_model(cls, path: str, doc: dict, model_id: str, num_nodes: int) -> None:
        """InputError unless the replay ``doc`` was recorded for this model (its digest and size)."""
        if doc.get("model") != model_id or doc.get("nodes") != num_nodes:
            raise InputError(
                f"{path}: this replay was recorded for {cls.other_model}; "
                "run without --load-debug-replay"
            )


def _is_polygraphy_replay(doc: Any) -> bool:
    """Does ``doc`` look like a Polygraphy debug replay (keys ``_N0_...``)?"""
    return isinstance(doc, dict) and bool(doc) and all(isinstance(k, str) and k.startswith("_N") for k in doc)


def _read_json(path: str) -> Any:
    """The JSON document in the file at ``path``; InputError if it is none."""
    raw = read_bytes(path)
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"{path}: not a debug replay file (invalid JSON: {exc})") from None
    except RecursionError:
        raise InputError(f"{path}: not a debug replay file (its JSON is nested too deeply to read)") from None


def _entry_key(path: str, k: int, entry: Any):
    """(iteration, mask, failed) of the ``k``-th entry of a replay; InputError if it lacks them."""
    try:
        if not isinstance(entry, dict) or not isinstance(entry.get("nodes"), str) or len(entry["nodes"]) > 1 << 20:
            raise TypeError
        return int(entry.get("iteration", k + 1)), int(entry["nodes"], 16), entry["failed"]
    except (KeyError, TypeError, ValueError):
        raise InputError(f"{path}: entry {k + 1} is malformed (needs 'nodes' and 'failed')") from None


def _entry_details(path: str, k: int, entry: dict, mask: int, failed: Any, num_nodes: int):
    """(seconds, verdict, code) of the ``k``-th entry of a replay, once its key is checked to fit
    the model; InputError for a value out of place."""
    if not isinstance(failed, bool) or mask <= 0 or mask >> num_nodes:
        raise InputError(f"{path}: entry {k + 1} is malformed")
    seconds = entry.get("seconds")
    if seconds is not None and not isinstance(seconds, (int, float)):
        raise InputError(f"{path}: entry {k + 1} has a bad 'seconds' value")
    verdict = entry.get("verdict")
    if verdict is not None and verdict not in ("pass", "fail", "broken", "timeout"):
        raise InputError(f"{path}: entry {k + 1} has an unknown verdict {verdict!r}")
    return seconds, verdict, entry.get("code")


class InlinedReplay(Replay):
    """The replay of a model whose If branches were inlined: the data among the options decides
    the branches, so the model reduced; a difference in the options is named before the model's."""

    options_first = True
    other_model = "a different model (or a changed one), or for inputs that take other If branches"


_AGAIN = "run without --load-debug-replay (or with what it was recorded with)"


def _words(argv) -> str:
    return "interactive answers" if not argv else f"`{' '.join(str(w) for w in argv)}`"


def _same_check(path: str, doc: dict, check: Optional[Sequence[str]]) -> None:
    """InputError unless the replay ``doc`` was recorded with the check command ``check``."""
    old = doc.get("check") or None
    new = list(check) if check else None
    if old != new:
        raise InputError(
            f"{path}: this replay was recorded with the check {_words(old)}, not {_words(new)}, so its verdicts "
            f"answer another question; {_AGAIN}"
        )


def _same_options(path: str, doc: dict, options: Mapping[str, Any]) -> None:
    """InputError unless the replay ``doc`` was recorded with ``options``."""
    old = doc.get("options")
    if not isinstance(old, dict):
        raise InputError(
            f"{path}: this replay does not record the options it was made with (an older toolkit wrote it), so "
            f"its verdicts cannot be trusted for this run; {_AGAIN}"
        )
    new = json.loads(json.dumps(options))  # (as a file would hold them: tuples as lists)
    _refuse_stdin(path, new)
    differ = [key for key in sorted(set(old) | set(new)) if old.get(key) != new.get(key)]
    if differ:
        said = "; ".join(_difference(key, old.get(key), new.get(key)) for key in differ)
        raise InputError(f"{path}: {said}, so its verdicts answer another question; {_AGAIN}")


def _refuse_stdin(path: str, options: Mapping[str, Any]) -> None:
    """InputError for an option whose data was read from stdin (nothing to check it against)."""
    for key, value in sorted(options.items()):
        if any(r["path"] == "-" for r in _refs(value) or []):
            raise InputError(f"{path}: {key} -: data read from stdin cannot be checked against what this replay "
                             "was recorded with; save it to a file and give that, or run without --load-debug-replay")


def _difference(key: str, old: Any, new: Any) -> str:
    """How option ``key`` differs, in words: a file (see :func:`file_ref`) whose content changed
    under the same name is said so; else the recorded and this run's values."""
    olds, news = _refs(old), _refs(new)
    if olds and news and [r["path"] for r in olds] == [r["path"] for r in news]:
        changed = [n["path"] for o, n in zip(olds, news) if o.get("digest") != n.get("digest")]
        return f"{key} {', '.join(changed)}: the file's content changed since this replay was recorded"
    return (f"this replay was recorded with {key} {_shown(old)}, where this run has "
            f"{_shown(new)}")


def _refs(value: Any) -> Optional[List[dict]]:
    """``value`` as a list of file references, or None when it is not one or a list of them."""
    items = value if isinstance(value, list) else [value]
    if items and all(isinstance(v, dict) and set(v) == {"path", "digest"} for v in items):
        return items
    return None


def _shown(value: Any) -> str:
    refs = _refs(value)
    if refs is not None:
        return ", ".join(r["path"] for r in refs)
    return "(none)" if value is None else json.dumps(value)


def file_digest(path: str) -> str:
    """A digest of the bytes of the file at ``path``, read in 1 MiB pieces (no copy held); of a
    folder (per-iteration data files), of each file's name and digest."""
    h = hashlib.blake2b(digest_size=16)
    if os.path.isdir(path):
        for name in sorted(os.listdir(path)):
            if os.path.isfile(os.path.join(path, name)):
                h.update(f"{name}:{file_digest(os.path.join(path, name))}\n".encode())
        return h.hexdigest()
    with open(path, "rb") as f:
        for piece in iter(lambda: f.read(1 << 20), b""):
            h.update(piece)
    return h.hexdigest()


def file_ref(path: Optional[str]) -> Optional[Dict[str, str]]:
    """What a replay records of a file it was made with: its resolved path and a digest of its
    content, so the same file named another way matches and a changed file does not."""
    if not path:
        return None
    if path == "-":
        return {"path": "-", "digest": ""}  # (unknown content: a replay loaded with it is refused)
    check_data_file(path)  # (a FIFO or a device: refused, never read to the end here)
    try:
        digest = file_digest(path)
    except OSError as exc:
        raise InputError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    return {"path": os.path.realpath(path), "digest": digest}


def model_ref(path: Optional[str]) -> Optional[Dict[str, str]]:
    """:func:`file_ref` of a model file, with its external data files standing in by their size,
    times and inode (a reference model's weights may be in them)."""
    ref = file_ref(path)
    if ref is None or not path or path == "-":
        return ref
    from toolkit.core.graph.graphs import external_data_folder, external_data_locations
    from toolkit.core.io.model import load_model  # (onnx: only for a replay with a reference model)

    model = load_model(path, load_external_data=False)
    folder = external_data_folder(path)
    files = [os.path.realpath(os.path.join(folder, loc)) for loc in external_data_locations(model)]
    if files:
        ref["data"] = weights_digest([], files)
    return ref


def weights_digest(initializers: Sequence, files: Sequence[str]) -> str:
    """A digest of the weights: each initializer as held in memory (bytes, or the reference of
    external data), and the size and modification time of ``files`` (the model's file and its
    external data files, whose bytes may not be in memory), so no weight is read again."""
    h = hashlib.blake2b(digest_size=16)
    for t in initializers:
        if not hasattr(t, "raw_data"):  # (a sparse initializer)
            h.update(t.SerializeToString())
            continue
        h.update(t.name.encode() + b"\0" + bytes(str((t.data_type, list(t.dims))), "ascii"))
        h.update(t.raw_data if t.raw_data else t.SerializeToString())
    _stamp_files(h, files)
    return h.hexdigest()


def _stamp_files(h, files: Sequence[str]) -> None:
    """Add the size, times and inode of each of ``files`` to the digest ``h`` (or that it is missing)."""
    for path in files:
        try:  # (the inode and its change time too: a rewrite that keeps size and mtime changes them)
            st = os.stat(path)
            h.update(f"{path}:{st.st_size}:{st.st_mtime_ns}:{st.st_ino}:{st.st_ctime_ns}".encode())
        except OSError:
            h.update(f"{path}:missing".encode())


def replay_options(cfg, compare: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
    """What decides a verdict besides the model and the check command (a ReduceConfig ``cfg``;
    ``compare``: the built-in comparison's runners and reference model, when it runs)."""
    rule = cfg.rule
    opts: Dict[str, Any] = {
        "--fail-regex": [p.pattern for p in rule.patterns],
        "--fail-code": sorted(rule.fail_codes) if rule.fail_codes is not None else None,
        "--ignore-fail-code": sorted(rule.ignore_codes),
        "--any-failure": bool(cfg.any_failure),
        "--check-timeout": cfg.check_timeout,
        "--model-input-shapes": {k: list(v) for k, v in sorted(dict(cfg.input_shapes).items())},
        "--no-reduce-inputs": not cfg.reduce_inputs,
        "--no-reduce-outputs": not cfg.reduce_outputs,
    }
    if compare:
        opts.update(_compare_options(cfg, compare))
    return opts


def _compare_options(cfg, compare: Mapping[str, Any]) -> Dict[str, Any]:
    """What decides the built-in comparison's verdicts: its runners, reference model, inputs and seed."""
    return {
        "--compare": [compare.get("reference"), compare.get("test")],
        "--reference-model": model_ref(cfg.given_reference_model or compare.get("reference_model")),
        "--load-inputs": [file_ref(p) for p in cfg.load_inputs],
        "--seed": cfg.seed,
        "--val-range": list(cfg.val_range),
    }

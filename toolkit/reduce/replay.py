"""Debug replay files: verdicts already answered, so a later run need not re-check them.

JSON, written atomically::

    {"tool": "toolkit debug reduce", "version": 1, "model": "<structure digest>",
     "nodes": 312, "check": ["toolkit", "run", ...],
     "entries": [{"iteration": 1, "nodes": "<hex bit mask>", "count": 312, "failed": true,
                  "verdict": "fail", "code": 1, "seconds": 0.41}, ...]}

``seconds`` (how long the check took) lets a resumed run make the same cost-based choices.
``verdict`` is the verdict class (pass, fail, broken, timeout) and ``code`` the check's exit
code (null when killed, timed out or answered by the user); ``failed`` is what the search
used (a broken check counts as a pass, a timeout as a failure).

Polygraphy's replay files (keys ``_N0_...``, one per iteration of its own search) are
recognised and refused with a clear message: their entries are numbered steps of another
search, not node sets, so they cannot answer this one's questions.

An entry's key is its node set (bit positions in the model's topological order); the
``model`` digest says which model those positions belong to.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Optional, Sequence

from toolkit.core.errors import InputError
from toolkit.core.model import read_bytes, write_bytes_atomic

TOOL = "toolkit debug reduce"
VERSION = 1


class Replay:
    tool = TOOL  # what wrote the file (another debug command may reuse the format)

    def __init__(self, model_id: str, num_nodes: int, check: Optional[Sequence[str]] = None):
        self.model_id = model_id
        self.num_nodes = num_nodes
        self.check = list(check) if check else None
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
    ) -> None:
        if mask in self.verdicts:
            return
        self.verdicts[mask] = failed
        entry: Dict[str, Any] = {"iteration": iteration, "nodes": format(mask, "x"), "count": count, "failed": failed}
        if verdict:
            entry["verdict"] = verdict
            entry["code"] = code
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
    def load(cls, path: str, model_id: str, num_nodes: int) -> "Replay":
        """Read a replay file made for this model; anything else is an InputError."""

        raw = read_bytes(path)
        try:
            doc = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise InputError(f"{path}: not a debug replay file (invalid JSON: {exc})") from None
        if isinstance(doc, dict) and doc and all(isinstance(k, str) and k.startswith("_N") for k in doc):
            raise InputError(
                f"{path}: this is a Polygraphy debug replay; its entries are numbered iterations of Polygraphy's "
                "own search, not subgraphs, so toolkit cannot reuse them. Run without --load-debug-replay once; "
                "toolkit saves its own replay (polygraphy_debug_replay.json by default) that later runs can load"
            )
        if not isinstance(doc, dict) or doc.get("tool") != cls.tool or not isinstance(doc.get("entries"), list):
            raise InputError(f"{path}: not a debug replay file written by `{cls.tool}`")
        if doc.get("version") != VERSION:
            raise InputError(f"{path}: replay format version {doc.get('version')} is not supported (expected {VERSION})")
        if doc.get("model") != model_id or doc.get("nodes") != num_nodes:
            raise InputError(
                f"{path}: this replay was recorded for a different model (or a changed one); "
                "run without --load-debug-replay"
            )
        rep = cls(model_id, num_nodes, doc.get("check"))
        for k, entry in enumerate(doc["entries"]):
            try:
                mask = int(entry["nodes"], 16)
                failed = entry["failed"]
                iteration = int(entry.get("iteration", k + 1))
            except (KeyError, TypeError, ValueError):
                raise InputError(f"{path}: entry {k + 1} is malformed (needs 'nodes' and 'failed')") from None
            seconds = entry.get("seconds")
            if not isinstance(failed, bool) or mask <= 0 or mask >> num_nodes:
                raise InputError(f"{path}: entry {k + 1} is malformed")
            if seconds is not None and not isinstance(seconds, (int, float)):
                raise InputError(f"{path}: entry {k + 1} has a bad 'seconds' value")
            verdict = entry.get("verdict")
            code = entry.get("code")
            if verdict is not None and verdict not in ("pass", "fail", "broken", "timeout"):
                raise InputError(f"{path}: entry {k + 1} has an unknown verdict {verdict!r}")
            rep.add(iteration, mask, bin(mask).count("1"), failed, seconds, verdict=verdict, code=code)
        return rep

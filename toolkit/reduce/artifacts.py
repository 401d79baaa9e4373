"""The files around ``debug reduce``'s checks: the iteration artifact and the weights it
refers to, ``--iter-info``, ``--artifacts`` sorting, outputs written with links to the model's
data files, and the clean-up at the end. A part of :class:`~toolkit.reduce.session.Reducer`."""

from __future__ import annotations

import json
import os
import shutil
import time
from typing import Any, Dict, List, Optional

from toolkit.core.errors import InputError
from toolkit.core.model import (
    write_bytes_atomic,
)
from toolkit.core.progress import Messages
from toolkit.core.weights import link_data_files
from toolkit.reduce.config import Iteration, ReduceConfig
from toolkit.reduce.graph import (
    Candidate,
    GraphIndex,
)

# A model whose weights are inside its file has those of them (1 MiB or more each) written
# once to a data file beside the iteration artifact when they add up to this much; every
# candidate then refers to them there instead of carrying a copy.
SPILL_BYTES = 64 << 20
SPILL_MIN_TENSOR = 1 << 20




class Artifacts:
    """The artifact handling of :class:`~toolkit.reduce.session.Reducer` (its base class)."""

    cfg: ReduceConfig
    index: GraphIndex
    reporter: Messages  # the session's Reporter
    iteration: int
    checks: int
    runner: Any
    workers: list
    _links: Optional[Dict[str, str]]
    _made_links: List[str]
    _spill_done: bool
    _missing_artifacts: set
    _external_artifact: bool

    def _artifact_links(self, cand: Candidate, worker=None) -> Optional[Dict[str, str]]:
        """Where an iteration artifact finds the model's external data files (made once per
        artifact folder): candidates refer to the weights there instead of copying them."""
        self._maybe_spill()
        if not self.index.on_disk(cand):
            return None
        links = worker.links if worker is not None else self._links
        if links is None:
            path = worker.artifact if worker is not None else self.cfg.iter_artifact
            links, made = self._link_beside(path, self.index.data_files())
            self._made_links.extend(made)
            if worker is not None:
                worker.links = links
            else:
                self._links = links
        return links

    def _maybe_spill(self) -> None:
        """Once: the big inline weights to ``<iteration artifact>.weights``, if they are worth it."""
        if self._spill_done:
            return
        self._spill_done = True
        if self.index.spillable_bytes(SPILL_MIN_TENSOR) < SPILL_BYTES:
            return
        path = self.cfg.iter_artifact + ".weights"
        if self.cfg.model != "-" and os.path.realpath(path) == os.path.realpath(self.cfg.model):
            return
        start = time.monotonic()
        try:
            written = self.index.spill(path, SPILL_MIN_TENSOR)
        except OSError as exc:
            raise InputError(f"{path}: cannot write the model's weights there: {exc.strerror or exc}") from None
        self._made_links.append(path)
        self.reporter.info(
            f"Wrote the model's weights once to {path} ({written / 2**20:.0f} MiB, "
            f"{time.monotonic() - start:.1f} s); every subgraph refers to them there"
        )

    def _write_model(self, cand: Candidate, path: str) -> None:
        """Write an output (-o, --min-good, a sorted artifact): with copies of the weights it
        uses, or, with ``link_external_data``, referring to the model's data files by links
        in its folder (kept: the output needs them)."""
        links = None
        if cand.refs and self.cfg.link_external_data:
            links, _ = self._link_beside(path, self.index.external_files(), hard_links=True)
        self.index.write(cand, path, links=links)

    def _link_beside(self, path: str, files: List[str], hard_links: bool = False):
        """:func:`toolkit.core.weights.link_data_files` for ``files`` in ``path``'s folder."""

        try:
            return link_data_files(
                files, os.path.dirname(os.path.abspath(path)), os.path.basename(path), note=self.reporter.info,
                hard_links=hard_links,
            )
        except OSError as exc:
            raise InputError(f"{path}: cannot make the model's weights reachable there: {exc}") from None

    def _write_iter_info(self, cand: Candidate, it: Optional[Iteration] = None) -> None:
        """Before the check: what is checked. After it (``it``): the same plus its verdict
        class and exit code (the file stays until the next iteration or the end)."""

        info = {
            "iteration": self.iteration,
            "artifact": self.cfg.iter_artifact,
            "num_nodes": cand.num_nodes,
            "nodes": [self.index.names[i] for i in cand.nodes],
            "inputs": cand.inputs,
            "outputs": cand.outputs,
        }
        if it is not None:
            info["verdict"] = it.verdict
            info["exit_code"] = it.result.code if it.result is not None else None
            info["seconds"] = round(it.seconds, 6)
        if self.cfg.iter_info:
            write_bytes_atomic(self.cfg.iter_info, (json.dumps(info, indent=1) + "\n").encode())

    def _sort_artifacts(self, failed: bool, cand: Optional[Candidate] = None, worker=None, number=None) -> None:
        folder = os.path.join(self.cfg.art_dir, "bad" if failed else "good")
        number = self.iteration if number is None else number
        for path in self.cfg.artifacts:
            linked = self._links is not None
            if worker is not None and self._is_iter_artifact(path):
                path, linked = worker.artifact, worker.links is not None
            if not os.path.exists(path):
                if path not in self._missing_artifacts:
                    self._missing_artifacts.add(path)
                    self.reporter.warn(f"artifact {path} does not exist after iteration {number}; not sorted")
                continue
            os.makedirs(folder, exist_ok=True)
            dest = os.path.join(folder, f"{number:03d}_{os.path.basename(path.rstrip(os.sep))}")
            if cand is not None and linked and self.index.on_disk(cand) and (
                self._is_iter_artifact(path) or (worker is not None and path == worker.artifact)
            ):
                # its weights are reached through links beside it: moved, it would lose them
                self._write_model(cand, dest)
                os.unlink(path)
                continue
            try:
                shutil.move(path, dest)
            except OSError as exc:
                self.reporter.warn(f"cannot move artifact {path} to {dest}: {exc.strerror or exc}")

    def _is_iter_artifact(self, path: str) -> bool:
        return os.path.abspath(path) == os.path.abspath(self.cfg.iter_artifact)

    def _cleanup_files(self) -> None:
        if self.runner is not None:
            self.runner.close()
        for w in self.workers[1:]:
            w.runner.close()
        if self.checks:
            from toolkit.reduce.check import stop_strays

            strays = stop_strays()
            if strays:
                self.reporter.warn(
                    f"the checks left {strays} process(es) running in the background (detached from their process "
                    "group); they were stopped"
                )
        if self.cfg.remove_intermediate:
            artifacts = [self.cfg.iter_artifact] + [w.artifact for w in self.workers[1:]]
            data = [a + ".data" for a in artifacts] if self._external_artifact else []
            for path in (*artifacts, self.cfg.iter_info, *data, *self._made_links):
                if path and os.path.isfile(path):
                    try:
                        os.unlink(path)
                    except OSError:
                        pass
            for w in self.workers[1:]:
                try:
                    os.rmdir(w.folder)  # only when empty: whatever else the check left there stays
                except OSError:
                    pass

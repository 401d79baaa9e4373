"""The files around ``debug reduce``'s checks: the iteration artifact and the weights it
refers to, ``--iter-info``, ``--artifacts`` sorting, outputs written with links to the model's
data files, and the clean-up at the end. A part of :class:`~toolkit.reduce.session.Reducer`."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import time
from typing import Any, Dict, List, Optional, Tuple

from toolkit.core.files import paths
from toolkit.core.files.create import make_folder
from toolkit.core.errors import InputError
from toolkit.core.io.model import (
    write_bytes_atomic,
)
from toolkit.core.progress import Messages
from toolkit.core.io.weights import link_data_files
from toolkit.reduce.check import data_files_in, toolkit_args
from toolkit.reduce.config import Iteration, ReduceConfig
from toolkit.reduce.graph import Candidate, GraphIndex
from toolkit.reduce.loading import model_changed
from toolkit.reduce.parallel import worker_artifact

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
    _check_files: List[str]
    _art_offset: Optional[int] = None  # --art-dir numbers taken by an earlier run (numbered past them)
    _kept: Tuple[paths.Named, ...] = ()  # the files --art-dir must never replace (reads and outputs)

    def _validate_distinct_outputs(self) -> None:
        """The one rule (toolkit.core.files.paths) for every file the reduce writes, moves or may
        delete: -o, --min-good, the iteration artifact (and each parallel check's, with its
        weights files), --iter-info, the replay, and the --artifacts it moves. None is a file
        the reduce or its check reads, nor another of them. The replay may be loaded from
        and saved to one file (it is read whole first)."""

        cfg = self.cfg
        reads = self._files_read()
        outputs = [("-o", cfg.output), ("--min-good", cfg.min_good or "")]
        writes = outputs + self._files_written()
        paths.check_with_model(cfg.model, reads, writes, cfg.external_data_dir)
        if cfg.artifacts:
            refuse_linked_art_dir(cfg.art_dir)
        self._kept = tuple([("MODEL", cfg.model)] + reads + outputs)

    def _files_read(self) -> List[paths.Named]:
        """The files the reduce and its check read (each with what names it), the model aside."""
        cfg = self.cfg
        reads = [("--load-inputs", p) for p in cfg.load_inputs] + self._check_reads()
        if cfg.load_replay and not (cfg.save_replay and paths.same_file(cfg.load_replay, cfg.save_replay)):
            reads.append(("--load-debug-replay", cfg.load_replay))
        return reads

    def _check_reads(self) -> List[paths.Named]:
        """The files the check reads: the data files a toolkit check is given, and the files its
        command names."""
        check_args = toolkit_args(self.cfg.check or []) or []
        self._check_files = [p for p in data_files_in(check_args) if p != "-"]
        reads = [("the check's data file", p) for p in self._check_files]
        return reads + [("a file the check's command names", p) for p in self._named_by_check()]

    def _files_written(self) -> List[paths.Named]:
        """The files the reduce writes, moves or may delete, -o and --min-good aside."""
        cfg = self.cfg
        writes = [
            ("--iter-artifact", cfg.iter_artifact), ("--iter-info", cfg.iter_info or ""),
            ("--save-debug-replay", cfg.save_replay or ""),
        ]
        for k in range(max(cfg.jobs, 1)):
            writes += _worker_files(cfg.iter_artifact, k)
        return writes + [("--artifacts", p) for p in dict.fromkeys(cfg.artifacts) if not self._is_iter_artifact(p)]

    def _named_by_check(self) -> List[str]:
        """The files that exist now and that a word of the check's command names (its script, a
        file it reads), but for the files the reduce itself gives the check (the iteration
        artifact, --artifacts): nothing the reduce writes may replace them."""
        cfg = self.cfg
        given = {os.path.abspath(p) for p in [cfg.iter_artifact, *cfg.artifacts, *self._check_files] if p}
        out = []
        for word in (cfg.check or [])[1:]:
            for path in {word, word.partition("=")[2]} - {""}:
                if os.path.isfile(path) and os.path.abspath(path) not in given:
                    out.append(path)
        return list(dict.fromkeys(out))

    def _say_replaced(self) -> None:
        """A warning naming the replay file and iteration artifact an earlier run left, which this one replaces."""
        cfg = self.cfg
        old = self._left_over()
        if not old:
            return
        resume = (
            f" (to reuse its verdicts instead, run with --load-debug-replay {cfg.save_replay})"
            if cfg.save_replay in old else ""
        )
        self.reporter.warn(f"{' and '.join(old)} {'is' if len(old) == 1 else 'are'} left from an earlier run; "
                           f"this run replaces {'it' if len(old) == 1 else 'them'}{resume}")

    def _left_over(self) -> List[str]:
        """The replay file and iteration artifact that exist now (the replay this run loads aside)."""
        cfg = self.cfg
        old = [p for p in (cfg.save_replay, cfg.iter_artifact) if p and os.path.isfile(p)]
        if cfg.load_replay:
            old = [p for p in old if not paths.same_file(p, cfg.load_replay)]
        return old

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
        self._spill_to(path)

    def _spill_to(self, path: str) -> None:
        """The big inline weights written to ``path``, said with their size and time."""
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
        """:func:`toolkit.core.io.weights.link_data_files` for ``files`` in ``path``'s folder."""

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
            path, linked = self._artifact_file(path, worker)
            if not os.path.exists(path):
                self._say_missing(path, number)
                continue
            self._make_art_folder(folder)
            dest = self._art_dest(folder, number, path)
            if dest is not None:
                self._move_artifact(path, dest, cand if linked else None, worker)

    def _artifact_file(self, path: str, worker) -> Tuple[str, bool]:
        """The file --artifacts ``path`` stands for in a check by ``worker`` (a parallel check's
        own iteration artifact for the iteration artifact), and whether its weights are reached
        through links."""
        if worker is not None and self._is_iter_artifact(path):
            return worker.artifact, worker.links is not None
        return path, self._links is not None

    def _make_art_folder(self, folder: str) -> None:
        """--art-dir and its ``folder`` (good/ or bad/), made as real folders."""
        art_dir = os.path.normpath(self.cfg.art_dir)  # (art/ would follow a link at art)
        os.makedirs(os.path.dirname(os.path.abspath(art_dir)), exist_ok=True)  # (named by the user)
        make_folder(art_dir)  # (a link planted there since the start is replaced by a folder)
        make_folder(folder)  # (never through a link left at art/good)

    def _say_missing(self, path: str, number: int) -> None:
        """A warning (once per artifact) that ``path`` is not there to sort."""
        if path not in self._missing_artifacts:
            self._missing_artifacts.add(path)
            self.reporter.warn(f"artifact {path} does not exist after iteration {number}; not sorted")

    def _move_artifact(self, path: str, dest: str, cand: Optional[Candidate], worker) -> None:
        """Move artifact ``path`` to ``dest``; an iteration artifact of candidate ``cand`` (given
        when its weights are reached through links) is written anew there instead."""
        if cand is not None and self._links_to_weights(path, cand, worker):
            # its weights are reached through links beside it: moved, it would lose them
            self._write_model(cand, dest)
            os.unlink(path)
            return
        try:
            shutil.move(path, dest)
        except OSError as exc:
            self.reporter.warn(f"cannot move artifact {path} to {dest}: {exc.strerror or exc}")

    def _links_to_weights(self, path: str, cand: Candidate, worker) -> bool:
        """Is ``path`` an iteration artifact (the session's or ``worker``'s) of ``cand`` that
        reaches the model's weights through links beside it?"""
        is_artifact = self._is_iter_artifact(path) or (worker is not None and path == worker.artifact)
        return is_artifact and self.index.on_disk(cand)

    def _art_dest(self, folder: str, number: int, path: str) -> Optional[str]:
        """Where artifact ``path`` of iteration ``number`` goes: ``NNN_<name>`` in ``folder``,
        numbered past the files an earlier run left in --art-dir (said once), never over an
        existing file or one the reduce reads or writes (None: not sorted, with a warning)."""
        dest = os.path.join(folder, f"{number + self._numbers_taken():03d}_{os.path.basename(path.rstrip(os.sep))}")
        taken = self._kept_as(dest) or ("an existing file" if os.path.lexists(dest) else None)
        if taken:
            self.reporter.warn(f"artifact {path} not sorted: {dest} is {taken}")
            return None
        return dest

    def _kept_as(self, dest: str) -> Optional[str]:
        """What names ``dest`` among the files --art-dir must never replace (None: none of them)."""
        return next((w for w, p in self._kept if p and p != "-" and paths.same_file(dest, p)), None)

    def _numbers_taken(self) -> int:
        """The highest number of the artifacts an earlier run left in --art-dir (found and said once)."""
        if self._art_offset is None:
            self._art_offset = _last_number(self.cfg.art_dir)
            if self._art_offset:
                self.reporter.warn(
                    f"{self.cfg.art_dir} holds the artifacts of an earlier run (numbered up to "
                    f"{self._art_offset:03d}); this run's are numbered from {self._art_offset + 1:03d}"
                )
        return self._art_offset

    def _is_iter_artifact(self, path: str) -> bool:
        return os.path.abspath(path) == os.path.abspath(self.cfg.iter_artifact)

    def _cleanup_files(self) -> None:
        self._close_runners()
        if self.checks:
            self._stop_strays()
        if self.cfg.model != "-" and model_changed(self.cfg.model):
            self.reporter.warn(
                f"{self.cfg.model} was changed on disk during the reduce; every subgraph and result comes from the "
                "model as it was when the reduce started"
            )
        if self.cfg.remove_intermediate:
            self._remove_intermediate()

    def _close_runners(self) -> None:
        """Close the check runners (the session's and each parallel check's)."""
        if self.runner is not None:
            self.runner.close()
        for w in self.workers[1:]:
            w.runner.close()

    def _stop_strays(self) -> None:
        """Stop what the checks left running in the background, with a warning."""
        from toolkit.reduce.check import stop_strays

        strays = stop_strays()
        if strays:
            self.reporter.warn(
                f"the checks left {strays} process(es) running in the background (detached from their process "
                "group); those were stopped (a process that also cleared its environment, as `env -i` does, "
                "cannot be recognised and may still run)"
            )

    def _intermediate_files(self) -> List[str]:
        """The iteration artifacts (each parallel check's too), --iter-info, the artifacts' data
        files and the links made beside them."""
        artifacts = [self.cfg.iter_artifact] + [w.artifact for w in self.workers[1:]]
        data = [a + ".data" for a in artifacts] if self._external_artifact else []
        return [*artifacts, self.cfg.iter_info, *data, *self._made_links]

    def _remove_intermediate(self) -> None:
        """Remove the iteration artifacts (with their data files and links), --iter-info, and the
        parallel checks' folders where they are empty."""
        for path in self._intermediate_files():
            if path and os.path.isfile(path):
                with contextlib.suppress(OSError):
                    os.unlink(path)
        for w in self.workers[1:]:
            with contextlib.suppress(OSError):
                os.rmdir(w.folder)  # only when empty: whatever else the check left there stays


def _worker_files(iter_artifact: str, k: int) -> List[paths.Named]:
    """The files of parallel check ``k`` (0: the iteration artifact itself, given apart): its
    iteration artifact and that one's weights files."""
    artifact = worker_artifact(iter_artifact, k)
    what = "--iter-artifact" if k == 0 else f"the iteration artifact of parallel check {k}"
    files = [(what, artifact)] if k else []
    return files + [(f"{what} (its weights file)", artifact + ext) for ext in (".weights", ".data")]


_NUMBERED = re.compile(r"^(\d{3,})_")


def refuse_linked_art_dir(art_dir: str) -> None:
    """InputError when ``--art-dir`` is a symbolic link: artifacts are moved only into a real
    folder, never through a link someone (or a check run in this folder) left at that name."""
    path = os.path.normpath(art_dir)
    if os.path.islink(path):
        raise InputError(
            f"--art-dir {art_dir} is a symbolic link (to {os.readlink(path)}); artifacts are moved only into a real "
            "folder: give the folder itself as --art-dir, or remove the link"
        )


def _last_number(art_dir: str) -> int:
    """The highest ``NNN_`` prefix in ``art_dir``'s good/ and bad/ folders (0 if none)."""
    found = 0
    for sub in ("good", "bad"):
        try:
            names = os.listdir(os.path.join(art_dir, sub))
        except OSError:
            continue
        for name in names:
            m = _NUMBERED.match(name)
            if m:
                found = max(found, int(m.group(1)))
    return found

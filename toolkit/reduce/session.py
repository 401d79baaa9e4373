"""One ``debug reduce`` run: load and index the model, drive a strategy, check candidates.

:class:`Reducer` owns everything around the search: the iteration artifact, the check
(command or interactive), verdicts remembered in memory and in the replay file,
``--artifacts`` sorting, ``--iter-info``, and writing ``-o`` / ``--min-good``. Progress goes
to a :class:`Reporter` that the CLI implements (this module knows nothing of Typer or Rich).

Guarantees: with a check command, the full model is checked first and nothing is written
if it passes, or if the check is *broken* on it (it fails on its own: usage error, bad
input, missing program; :meth:`FailureRule.classify`), which stops the run with one
``the check command itself fails: ...`` error. A broken verdict later on one subgraph is
not taken as a failure: it is reported and counts as a pass (that subgraph is not shown
to fail). Asking the user, the full model is known to fail and not asked about. ``-o``
is always a node set the check failed on, ``--min-good`` one it passed on; on Ctrl-C (or
end of input when asking) the smallest failing model so far goes to ``-o`` and the
verdicts to the replay file.
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from toolkit.core.files.create import make_folder
from toolkit.core.errors import InputError, UsageError
from toolkit.core.io.model import (
    check_output_path,
    load_model,
)
from toolkit.core.progress import Messages
from toolkit.reduce.artifacts import Artifacts
from toolkit.reduce.frozen import FrozenShapes
from toolkit.reduce.judging import Judging, passed_masks
from toolkit.reduce.check import make_runner, toolkit_args
from toolkit.reduce.config import (  # noqa: F401  (re-exported: the session's public names)
    DEFAULT_ART_DIR,
    DEFAULT_ITER_ARTIFACT,
    DEFAULT_REPLAY,
    UNJUDGED_MIN,
    UNJUDGED_SHARE,
    CannotJudge,
    Iteration,
    Outcome,
    ReduceConfig,
)
from toolkit.reduce.evidence import Evidence, noise_warning
from toolkit.reduce.graph import BIG_MODEL_BYTES, Candidate, GraphIndex, MetaProvider, body_node_count, write_chunks
from toolkit.search.masks import mask_indices, popcount, span_words
from toolkit.reduce.feeds import feed_maker, fold_values_maker
from toolkit.reduce.loading import data_input_shapes, data_tensor_metas, identity_files, load_for_index
from toolkit.reduce.owner import Ownership
from toolkit.reduce.parallel import Worker, worker_argv, worker_artifact, worker_env
from toolkit.reduce.replay import InlinedReplay, Replay, replay_options, weights_digest
from toolkit.reduce import sanity
from toolkit.reduce.signature import Signature
from toolkit.search.strategy import STRATEGIES, Plan
from toolkit.reduce.verdict import (
    BROKEN,
    FAIL,
    PASS,
    AnswersExhausted,
    ask_user,
)


class Reporter(Messages):
    """Receives progress (and ``info``/``warn``); the CLI renders it. Every method may be left as is."""

    def start(self, reducer: "Reducer") -> None:
        pass

    def iteration_start(self, number: int, cand: Candidate) -> None:
        pass

    def iteration_end(self, it: Iteration) -> None:
        pass

    def check_output(self, it: Iteration) -> None:
        pass

    def tick(self) -> None:
        pass

    def loading(self, path: str, nbytes: int) -> None:
        """A data file the check names is being loaded once, before the first check."""

    def pause(self) -> None:
        """Before asking the user something on the terminal."""

    def resume(self) -> None:
        pass


class Reducer(Artifacts, Judging, FrozenShapes):
    reporter: Reporter
    own_check = True  # the check is the user's (the built-in comparison's is not: see sanity.probe)

    def __init__(
        self,
        config: ReduceConfig,
        reporter: Optional[Reporter] = None,
        *,
        stdin=None,
        runner=None,
        runner_factory=None,
        prompt_stream=None,
    ):
        """``runner``: anything with ``run(tick) -> CheckResult`` (default: made from ``config.check``).
        ``runner_factory(number, artifact, env)``: the runner of each worker with ``jobs > 1``
        (default: made from ``config.check`` with that worker's artifact and environment).
        ``prompt_stream``: where the interactive question is written (default stderr)."""
        self.cfg = config
        self.prompt_stream = prompt_stream
        self.evidence: Dict[int, Evidence] = {}  # failing (and full-model) checks' comparison evidence
        self.phase_checks: Dict[str, int] = {}
        self.broken = 0
        self.broken_masks: set = set()  # node sets whose check was broken (counted as passes)
        self.other_failures = 0  # of those, checks that failed otherwise than the full model (_other_failure)
        self.signature: Optional[Signature] = None  # the full model's failure (set by its check)
        self.frozen = False  # input shapes are fixed (--model-input-shapes, --load-inputs shapes)
        self.as_given = False  # the model is reduced with its own input shapes (freezing hid the failure)
        self._feeds: Optional[Callable[[str], Optional[bool]]] = None
        self.timeouts = 0
        self.failures_seen = 0
        self.toolkit_check = bool(config.check) and toolkit_args(config.check or []) is not None
        self._given_runner = runner
        self._runner_factory = runner_factory
        self.reporter = reporter or Reporter()
        self.stdin = stdin
        self.memo: Dict[int, bool] = {}
        self.iteration = 0
        self.checks = 0
        self.remembered = 0
        self.best: Optional[int] = None  # smallest failing node set checked so far
        self.best_chunks: Optional[list] = None
        # set by _load (every search runs after it)
        self.plan: Plan = None  # type: ignore[assignment]
        self.index: GraphIndex = None  # type: ignore[assignment]
        self.replay: Replay = None  # type: ignore[assignment]  # set by _load
        self.loaded: Optional[Replay] = None
        self.runner = None
        self.check_seconds = 0.0
        self._missing_artifacts: set = set()
        self._final_mask: Optional[int] = None
        self._external_artifact = False
        self._links: Optional[Dict[str, str]] = None  # source data file -> location by the iteration artifact
        self.workers: list = []  # with --jobs: one per parallel check (toolkit.reduce.parallel.Worker)
        self._full_first = False  # check the full model along with the search's first round
        self._spill_done = False
        self._made_links: List[str] = []  # links made for the iteration artifact (removed at the end)
        self._owner: Optional[Any] = None  # the locks on the iteration artifact and replay file (toolkit.reduce.owner)
        self._check_files: List[str] = []  # the data files the check reads (--load-inputs ... after --check)

    # ------------------------------------------------------------------ set-up

    def _validate(self) -> None:

        cfg = self.cfg
        self._validate_options()
        self._validate_output_names()
        self._validate_distinct_outputs()
        # only files there at the start can disappear (a built-in comparison's check names its
        # reference values ``<reference>``, held in memory: no file)
        self._check_files = [p for p in self._check_files if os.path.exists(p)]
        for path in (cfg.iter_info, cfg.save_replay):
            if path:
                check_output_path(path)

    def _validate_options(self) -> None:
        """UsageError for an unknown --mode, a bad --jobs, or both ends kept."""
        cfg = self.cfg
        if cfg.mode not in STRATEGIES:
            raise UsageError(f"unknown --mode '{cfg.mode}'; use bisect or linear (or leave it out for the default)")
        if not isinstance(cfg.jobs, int) or cfg.jobs < 1:
            raise UsageError(f"--jobs must be a positive number, got {cfg.jobs}")
        if cfg.jobs > 1:
            self._validate_jobs()
        if not cfg.reduce_inputs and not cfg.reduce_outputs:
            raise UsageError("--no-reduce-inputs and --no-reduce-outputs together leave nothing to reduce; give one")

    def _validate_output_names(self) -> None:
        """-o, --min-good and --iter-artifact name files that can be written (never '-')."""
        cfg = self.cfg
        for path, what in ((cfg.output, "-o"), (cfg.min_good, "--min-good"), (cfg.iter_artifact, "--iter-artifact")):
            if path is None:
                continue
            if path == "-":
                raise UsageError(f"{what} needs a file name ('-' is not supported here)")
            check_output_path(path)

    def _validate_jobs(self) -> None:
        cfg = self.cfg
        if cfg.check is None:
            raise UsageError("--jobs needs --check (questions are asked one at a time)")
        if self._given_runner is not None and self._runner_factory is None:
            raise UsageError("jobs > 1 needs a runner for each worker (runner_factory)")
        if cfg.iter_info:
            raise UsageError("--iter-info describes one iteration artifact; it needs --jobs 1")
        others = [p for p in cfg.artifacts if os.path.abspath(p) != os.path.abspath(cfg.iter_artifact)]
        if others:
            raise UsageError(
                f"--artifacts {others[0]}: checks running at once would all write it; with --jobs, only the "
                "iteration artifact can be sorted"
            )

    def _load(self) -> None:

        cfg = self.cfg
        model, raw, base = load_for_index(cfg.model, cfg.external_data_dir)
        shapes = self._frozen_shapes(model)
        self.frozen = bool(shapes)
        self.metas = self._meta_provider(model, raw, base, shapes)
        self.index = GraphIndex(model, self.metas, fixed_input_shapes=list(shapes), raw=raw, external_base_dir=base)
        if not cfg.reduce_outputs:
            self.index.fold_values = fold_values_maker(cfg, model, shapes, self.reporter.warn)
        self._check_index()
        if (shapes or cfg.force_fallback) and cfg.shape_inference:
            self.metas.ensure()  # bad --model-input-shapes are reported before any check
        self.plan = Plan(self.index, reduce_inputs=cfg.reduce_inputs, reduce_outputs=cfg.reduce_outputs)
        self._load_replay()

    def _frozen_shapes(self, model) -> Dict[str, tuple]:
        """The input shapes frozen: --model-input-shapes, then those of the --load-inputs files
        (none for the model as given; the files are checked either way)."""
        from_data = data_input_shapes(model, self.cfg.load_inputs, warn=self.reporter.warn)
        if self.as_given:
            return {}
        shapes = dict(self.cfg.input_shapes)
        for name, shape in from_data.items():
            shapes.setdefault(name, shape)
        return shapes

    def _meta_provider(self, model, raw, base: Optional[str], shapes: Dict[str, tuple]) -> MetaProvider:
        """What tells the shapes and dtypes of the tensors candidates cut."""
        cfg = self.cfg
        folder = base or cfg.external_data_dir or (os.path.dirname(os.path.abspath(cfg.model)) if cfg.model != "-" else None)
        return MetaProvider(
            model,
            input_shapes=shapes,
            force_fallback=cfg.force_fallback,
            external_data_dir=folder,
            warn=self.reporter.warn,
            full_model=(lambda: load_model(cfg.model, external_data_dir=cfg.external_data_dir)) if raw else None,
            feed=feed_maker(cfg, model, shapes),
            known=data_tensor_metas(cfg.load_inputs) if cfg.load_inputs else None,
            inference=cfg.shape_inference,
        )

    def _check_index(self) -> None:
        """UsageError for an output named as one of the model's external data files; InputError
        for a model with no node to reduce."""
        cfg = self.cfg
        sources = self.index.external_files()
        for path, what in ((cfg.output, "-o"), (cfg.min_good, "--min-good"), (cfg.iter_artifact, "--iter-artifact")):
            if path and os.path.realpath(path) in sources:
                raise UsageError(f"{what} {path} is an external data file of the model; choose another file name")
        if self.index.size == 0:
            raise InputError(f"{cfg.model}: the graph has no nodes (other than Constants) to reduce")

    def _load_replay(self) -> None:
        """The replay this run records, holding what --load-debug-replay answers."""
        cfg = self.cfg
        ident = self._replay_identity()
        options = replay_options(cfg, getattr(self._given_runner, "info", None))
        self.replay = Replay(ident, self.index.size, cfg.check, options)
        if cfg.load_replay:
            replay_cls = InlinedReplay if cfg.given_files else Replay
            self.loaded = replay_cls.load(cfg.load_replay, ident, self.index.size, cfg.check, options)
            for entry in self.loaded.entries:
                self.replay.add(
                    entry["iteration"], int(entry["nodes"], 16), entry["count"], entry["failed"], entry.get("seconds"),
                    verdict=entry.get("verdict"), code=entry.get("code"), signature=entry.get("signature"),
                )

    def _replay_identity(self) -> str:
        """The model's digest in the replay: its structure and its weights (see toolkit.reduce.replay),
        their files those given where the model indexed is a rewrite of them (``cfg.given_files``)."""
        files = identity_files(self.cfg.model, self.cfg.given_files, self.index.external_files())
        inits = [*self.index.initializers.values(), *self.index.sparse_initializers.values()]
        return f"{self.index.identity()}-{weights_digest(inits, files)}"

    # ------------------------------------------------------------------ one verdict

    def candidate(self, mask: int) -> Candidate:
        keep_inputs = (not self.cfg.reduce_inputs) or mask == self.index.full_mask
        keep_outputs = not self.cfg.reduce_outputs
        return self.index.candidate(mask, keep_inputs=keep_inputs, keep_outputs=keep_outputs)

    def verdict(self, mask: int) -> bool:
        """True if the check fails on the node set ``mask`` (from memory when known)."""
        return self.verdicts([mask])[0]

    def verdicts(self, masks: Sequence[int]) -> List[bool]:
        """Verdicts for several node sets; those not known are checked, up to one per
        worker at once (``--jobs``), numbered in the order given."""
        answers, todo = self._sort_known(masks)
        width = len(self.workers) or 1
        for start in range(0, len(todo), width):
            batch = todo[start : start + width]
            answers.update(zip(batch, self._check_batch(batch)))
        return [answers[m] for m in masks]

    def _sort_known(self, masks: Sequence[int]) -> Tuple[Dict[int, bool], List[int]]:
        """(the verdicts known, from memory or the loaded replay; the node sets still to check) of
        ``masks`` (a node set given twice counts as remembered)."""
        answers: Dict[int, bool] = {}
        todo: List[int] = []
        for mask in masks:
            if mask in answers or mask in todo:
                self.remembered += 1
                continue
            known = self._known(mask)
            if known is None:
                todo.append(mask)
            else:
                answers[mask] = known
        return answers, todo

    def _known(self, mask: int) -> Optional[bool]:
        known = self.memo.get(mask)
        if known is not None:
            self.remembered += 1
            return known
        if self.loaded is None or self._never_replayed(mask):
            return None
        answer = self.loaded.get(mask)
        if answer is not None:
            self._replayed(mask, answer)
        return answer

    def _never_replayed(self, mask: int) -> bool:
        """The full model is checked, not answered by the replay, with frozen input shapes (it is also
        checked as given, reduce.frozen, and a replay's one verdict per node set does not say which
        shapes it was for) and where its failure has no signature recorded to judge the checks by."""
        if mask != self.index.full_mask:
            return False
        entry = self.loaded.entry(mask) if self.loaded is not None else None
        unsigned = entry is not None and entry["failed"] and Signature.from_json(entry.get("signature")) is None
        return self.frozen or self.as_given or (unsigned and (self.runner is not None or bool(self.workers)))

    def _replayed(self, mask: int, answer: bool) -> None:
        """Take the loaded replay's verdict on ``mask`` as an iteration of this run (remembered,
        recorded, shown; its check time observed, for the same decisions as the recorded run)."""
        assert self.loaded is not None
        count = popcount(mask)
        seconds = self.loaded.seconds.get(mask)
        if seconds is not None:
            self.plan.observe(count, seconds)  # same decisions as the recorded run
        self.iteration += 1
        self.remembered += 1
        self.memo[mask] = answer
        entry = self.loaded.entry(mask) or {}
        it = Iteration(
            self.iteration, count, answer, 0.0, "replay", "from the replay file",
            verdict=entry.get("verdict") or (FAIL if answer else PASS), phase=self._phase(mask),
            span=self._span(mask), remaining=self.remaining_estimate(),
        )
        self.replay.add(
            self.iteration, mask, count, answer, seconds, verdict=entry.get("verdict"), code=entry.get("code")
        )
        if mask == self.index.full_mask and answer:  # (the failure its new checks are judged by)
            self.signature = Signature.from_json(entry.get("signature"))
            if self.signature is not None:
                self.reporter.info(self.signature.announce())
        self._note_failing(mask, answer, None)
        self.reporter.iteration_end(it)

    def _check_batch(self, masks: Sequence[int]) -> List[bool]:
        """Write each node set to its worker's artifact, run the checks (at once when
        several), and record the verdicts in order."""
        started = self._start_checks(masks)
        phases = [self._phase(m) for m in masks]
        its = self._ask(started[0]) if self.runner is None else self._run_checks(started, masks)
        out = []
        for it, phase, (number, mask, cand, worker) in zip(its, phases, started):
            if it is None:  # cancelled: the round's answer was known without it (nothing remembered)
                self.reporter.info(f"iteration {number}: check cancelled, the full model's answer ends the reduce")
                out.append(False)  # never read: the full model's answer decides
                continue
            it.phase = phase
            it.span = self._span(mask)
            self._record(it, mask, cand, worker)
            out.append(it.failed)
        return out

    def _start_checks(self, masks: Sequence[int]) -> list:
        """Write each node set to its worker's artifact (numbered iterations): (number, mask,
        candidate, worker) of each."""
        workers = self.workers[: len(masks)] if self.workers else [None]
        started = []
        for mask, worker in zip(masks, workers):
            self.iteration += 1
            cand = self.candidate(mask)
            self.reporter.iteration_start(self.iteration, cand)
            self._write_artifact(cand, worker)
            self._flush_warnings()
            if self.cfg.iter_info:
                self._write_iter_info(cand)
            started.append((self.iteration, mask, cand, worker))
        return started

    def _write_artifact(self, cand: Candidate, worker: Optional[Worker]) -> None:
        """Write ``cand`` to the iteration artifact ``worker`` checks, and tell its runner whether it
        is the full model."""
        artifact = worker.artifact if worker is not None else self.cfg.iter_artifact
        self.index.write(cand, artifact, links=self._artifact_links(cand, worker))
        target = self._runner_of(worker)
        if hasattr(target, "full_model"):  # (the built-in comparison judges the full model as deployed)
            target.full_model = cand.mask == self.index.full_mask
        if cand.size_hint > BIG_MODEL_BYTES:
            self._external_artifact = True  # its weights went to <artifact>.data

    def _runner_of(self, worker: Optional[Worker]) -> Any:
        """The runner that checks what ``worker`` writes (without workers: the session's)."""
        return worker.runner if worker is not None else self.runner

    def _ask(self, started: tuple) -> List[Optional[Iteration]]:
        """The user's verdict on the one node set written."""
        start = time.monotonic()
        self.reporter.pause()
        try:
            failed = ask_user(self.cfg.iter_artifact, stdin=self.stdin, stream=self.prompt_stream)
        finally:
            self.reporter.resume()
        number, mask, _cand, _worker = started
        seconds = time.monotonic() - start
        return [Iteration(number, popcount(mask), failed, seconds, "user", "your answer", verdict=FAIL if failed else PASS)]

    def _run_checks(self, started: list, masks: Sequence[int]) -> List[Optional[Iteration]]:
        """The checks of the node sets written, run (at once when several) and judged; None for
        one cancelled."""
        if len(started) == 1:
            results = [self._runner_of(started[0][3]).run(tick=self.reporter.tick)]
        else:
            from toolkit.reduce.parallel import run_all

            results = run_all([w for *_, w in started], tick=self.reporter.tick, decisive=self._decisive(masks))
        return [self._judge(n, m, res) if res is not None else None for (n, m, _c, _w), res in zip(started, results)]

    def _record(self, it: Iteration, mask: int, cand: Candidate, worker) -> None:
        failed = it.failed
        self._tally(it)
        self.memo[mask] = failed
        sig = self.signature if mask == self.index.full_mask and failed else None  # (kept for a resumed run)
        self.replay.add(
            it.number, mask, it.nodes, failed, it.seconds if it.source == "check" else None,
            verdict=it.verdict, code=it.result.code if it.result is not None else None,
            signature=sig.to_json() if sig is not None else None,
        )
        self._note_failing(mask, failed, cand)
        self._keep_files(it, cand, worker)
        if failed:
            it.first_failure = not self.failures_seen
            self.failures_seen += 1
        it.remaining = self.remaining_estimate()
        if it.result is not None:
            self.reporter.check_output(it)
        self.reporter.iteration_end(it)
        if it.verdict == BROKEN and mask != self.index.full_mask:
            self._stop_if_unjudgeable(it.reason)

    def _tally(self, it: Iteration) -> None:
        """Count the check, by phase, and its time (observed by the plan when a check ran)."""
        self.checks += 1
        self.phase_checks[it.phase] = self.phase_checks.get(it.phase, 0) + 1
        self.check_seconds += it.seconds
        if it.source == "check":
            self.plan.observe(it.nodes, it.seconds)

    def _keep_files(self, it: Iteration, cand: Candidate, worker) -> None:
        """After a verdict: --artifacts sorted, the replay saved, --iter-info completed."""
        if self.cfg.artifacts:
            self._sort_artifacts(it.failed, cand, worker, it.number)
        if self.cfg.save_replay and self.memo.get(self.index.full_mask) is not False:
            # (when the full model passes there is nothing to reduce, and nothing is written)
            self.replay.save(self.cfg.save_replay)
        if self.cfg.iter_info:
            self._write_iter_info(cand, it)

    def _stopped(self, exc: InputError) -> InputError:
        """The error that ends a run stopped half-way: a check that could not judge the model
        (the replay is kept), or a file that could not be written (the smallest failing model
        found so far is still written to -o if it can be)."""
        if isinstance(exc, CannotJudge):
            path = self.cfg.save_replay or DEFAULT_REPLAY
            self.replay.save(path)
            return InputError(f"{exc.message}; the verdicts so far are in {path} (resume with --load-debug-replay {path})")
        if self.best is None or self.checks < 2:
            return exc
        try:
            self._write_output(self.best)
        except InputError:
            return exc
        return InputError(
            f"{exc.message}; the smallest failing model found so far ({popcount(self.best)} node(s)) was written to "
            f"{self.cfg.output}"
        )

    def _phase(self, mask: int) -> str:
        if mask == self.index.full_mask:
            return "full model"
        return (self.plan.phase if self.plan else "") or "search"

    def _span(self, mask: int) -> str:
        return span_words(mask, self.index.full_mask)

    def _note_failing(self, mask: int, failed: bool, cand: Optional[Candidate]) -> None:
        if not failed:
            return
        if self.best is None or popcount(mask) <= popcount(self.best):
            self.best = mask
            self.best_chunks = None
            if cand is not None and cand.size_hint <= BIG_MODEL_BYTES and not cand.refs:
                self.best_chunks = cand.chunks()  # slices of the index: no copy

    def _flush_warnings(self) -> None:
        while self.index.warnings:
            self.reporter.warn(self.index.warnings.pop(0))

    # ------------------------------------------------------------------ the run

    def run(self) -> Outcome:
        t0 = time.monotonic()
        try:
            outcome = self._start()
        except BaseException:
            self._release()
            raise
        try:
            try:
                mask = self._search_from_full(outcome)
                if outcome.status == "passed":
                    return self._finish(outcome, t0)
                sanity.probe(self, mask)
            except (KeyboardInterrupt, AnswersExhausted) as exc:
                mask = self._interrupted(outcome, exc)
            except InputError as exc:
                raise self._stopped(exc) from None
            self._write_results(outcome, mask)
            return self._finish(outcome, t0)
        finally:
            self._cleanup()

    def _interrupted(self, outcome: Outcome, exc: BaseException) -> Optional[int]:
        """An interrupted search (Ctrl-C, or the end of the user's answers) said in ``outcome``, its
        verdicts saved to the replay file; the smallest failing node set found (to write)."""
        outcome.status = "interrupted"
        outcome.stopped_by = "eof" if isinstance(exc, AnswersExhausted) else "interrupt"
        path = self.cfg.save_replay or DEFAULT_REPLAY
        outcome.replay_path = path if self.replay.save(path) else None  # (an older replay is kept)
        return self.best

    def _start(self) -> Outcome:
        """Check the options, make the check runner(s), load and index the model."""

        cfg = self.cfg
        self._validate()
        self._owner = Ownership([cfg.iter_artifact, cfg.save_replay or ""])
        self._owner.acquire()  # before anything is written: another run may be using these files
        self._say_replaced()
        self.runner = self._first_runner()
        self._load()
        if cfg.jobs > 1:
            self._make_workers()
        outcome = Outcome(
            "reduced", nodes_before=self.index.size, runner=getattr(self.runner, "kind", "interactive"), output=cfg.output,
            min_good=cfg.min_good, iter_artifact=cfg.iter_artifact,
        )
        self.reporter.start(self)
        prepare = getattr(self.runner, "prepare", None)  # (every check runner's takes ``loading``)
        if prepare is not None:
            prepare(loading=self.reporter.loading)
        return outcome

    def _first_runner(self) -> Any:
        """The runner given, or the one made for --check (None: the user is asked)."""
        cfg = self.cfg
        if self._given_runner is not None:
            return self._given_runner
        if cfg.check is None:
            return None
        env = worker_env(0, cfg.devices) if (cfg.jobs > 1 or cfg.devices) else None
        return make_runner(cfg.check, cfg.check_timeout, warm=cfg.warm, entry=cfg.worker, env=env,
                           patterns=cfg.rule.patterns)

    def _search_from_full(self, outcome: Outcome) -> Optional[int]:
        """The smallest failing mask; ``outcome.status`` becomes "passed" when the full model passes."""
        if self.runner is None and not self.workers:
            # Asking: the user already knows that the full model fails.
            self.memo[self.index.full_mask] = True
            return self._search()
        if self.workers and not (self.frozen and self.runner is not None):
            return self._search_in_parallel(outcome)
        failed = self.verdict(self.index.full_mask)  # (frozen shapes: before any parallel round, with the model as given)
        if self.frozen and self.runner is not None:
            failed = self._as_given(failed)
        if not failed:
            outcome.status = "passed"
            return None
        return self._search()

    def _search_in_parallel(self, outcome: Outcome) -> Optional[int]:
        """The search with parallel checks: the full model is checked along with its first round."""
        self._full_first = True
        mask = self._search()
        if self.memo.get(self.index.full_mask) is False:
            outcome.status = "passed"
        return mask

    def _write_results(self, outcome: Outcome, mask: Optional[int]) -> None:
        """-o, --min-good and the replay file."""
        cfg = self.cfg
        if mask is not None:
            self._write_reduced(outcome, mask)
        if cfg.min_good:
            self._write_min_good(outcome, mask, cfg.min_good)
        if cfg.save_replay and self.replay.save(cfg.save_replay):  # (an earlier run's replay is never emptied)
            outcome.replay_path = outcome.replay_path or cfg.save_replay

    def _write_min_good(self, outcome: Outcome, mask: Optional[int], path: str) -> None:
        """--min-good ``path`` (when a passing subgraph was checked), and what the outcome says of it."""
        good = self._pick_min_good(mask)
        if good is not None:
            self._write_model(self.candidate(good), path)
            outcome.min_good_written = True
            outcome.min_good_nodes = popcount(good)

    def _write_reduced(self, outcome: Outcome, mask: int) -> None:
        """-o, and what the outcome says of it."""
        self._write_output(mask)
        outcome.output_written = True
        outcome.nodes_after = popcount(mask)
        outcome.final_nodes = [self.index.describe(i) for i in mask_indices(mask)]
        outcome.body_nodes = body_node_count(self.index.nodes, mask)
        outcome.one_minimal = outcome.status == "reduced" and self._is_one_minimal(mask)
        if outcome.status == "reduced":  # (not after Ctrl-C: it may check windows)
            outcome.first_alone = sanity.first_alone(self, mask)

    def _make_workers(self) -> None:

        cfg = self.cfg
        for k in range(cfg.jobs):
            artifact = worker_artifact(cfg.iter_artifact, k)
            worker = Worker(k, artifact, env=worker_env(k, cfg.devices))
            if k == 0:
                worker.runner = self.runner
            else:
                worker.folder = os.path.dirname(artifact)
                make_folder(worker.folder)  # (a link left there would lead its files elsewhere)
                if self._runner_factory is not None:
                    worker.runner = self._runner_factory(k, artifact, worker.env)
                else:
                    argv = worker_argv(cfg.check or [], cfg.iter_artifact, artifact)
                    worker.runner = make_runner(
                        argv, cfg.check_timeout, warm=cfg.warm, entry=cfg.worker, env=worker.env,
                        patterns=cfg.rule.patterns,
                    )
            self.workers.append(worker)

    def _search(self, gen=None) -> Optional[int]:
        """Drive ``gen`` (default: the configured strategy) to its smallest failing node set.

        With parallel checks, the first call checks the full model along with the
        strategy's first checks, and returns None if it passed (as does any call once the
        full model is known to pass)."""
        plan = self.plan
        if self.memo.get(self.index.full_mask) is False:
            return None
        full_first, self._full_first = self._full_first, False
        jobs = max(len(self.workers), 1)
        plan.width = max(jobs - 1, 1) if full_first else jobs
        gen = gen if gen is not None else STRATEGIES[self.cfg.mode](plan)
        result = self._drive(gen, full_first, jobs)
        return None if result is None else self._failed_on(result)

    def _drive(self, gen, full_first: bool, jobs: int) -> Optional[int]:
        """Answer the queries of the search ``gen`` to its end: its result, or None when the full
        model passed (``full_first``: checked along with the first query, or alone when it asks none)."""
        try:
            query = next(gen)
            while True:
                answer = self._answer(query, full_first, jobs)
                if answer is None:
                    gen.close()
                    return None
                full_first = False
                query = gen.send(answer)
        except StopIteration as stop:
            if full_first and not self.verdict(self.index.full_mask):
                return None
            return stop.value

    def _answer(self, query, full_first: bool, jobs: int):
        """The answer to one query of a search (a node set, or a list of them: a list of verdicts);
        None when the full model, checked along with it (``full_first``), passed."""
        batch = query if isinstance(query, list) else [query]
        answers = self._after_full_model(batch, jobs) if full_first else self.verdicts(batch)
        if answers is None:
            return None
        return answers if isinstance(query, list) else answers[0]

    def _failed_on(self, result: int) -> Optional[int]:
        """``result`` when the check fails on it (checked now where not known), else the smallest
        failing set checked so far: only ever hand back what the check failed on."""
        if self.memo.get(result) or self.verdict(result):
            return result
        return self.best

    def _after_full_model(self, batch: List[int], jobs: int) -> Optional[List[bool]]:
        """The verdicts on ``batch``, checked along with the full model; None when the full model passed."""
        answers = self.verdicts([self.index.full_mask] + batch)
        self.plan.width = jobs
        return answers[1:] if answers[0] else None

    def _is_one_minimal(self, mask: int) -> bool:
        """Every allowed end-node drop of ``mask`` is known (checked) to pass."""
        if popcount(mask) == 1:
            return True
        idx = self.index
        ends = set()
        if self.cfg.reduce_outputs:
            ends.update(idx.sinks(mask))
        if self.cfg.reduce_inputs:
            ends.update(idx.sources(mask))
        return all(
            self.memo.get(mask & ~(1 << i)) is False and (mask & ~(1 << i)) not in self.broken_masks for i in ends
        )

    def _pick_min_good(self, result: Optional[int]) -> Optional[int]:
        """The passing node set checked that is closest to ``result`` (fewest differing nodes)."""
        passing = passed_masks(self.memo, self.broken_masks)
        if not passing:
            self.reporter.warn("no passing subgraph was checked, so --min-good was not written")
            return None
        if result is None:
            return min(passing, key=popcount)
        return min(passing, key=lambda m: (popcount(m ^ result), -popcount(m & result), popcount(m)))

    def _write_output(self, mask: int) -> None:
        self._final_mask = mask
        if mask == self.best and self.best_chunks is not None:
            write_chunks(self.cfg.output, self.best_chunks)  # the very bytes the check failed on
        else:
            self._write_model(self.candidate(mask), self.cfg.output)

    def _finish(self, outcome: Outcome, t0: float) -> Outcome:
        outcome.checks = self.checks
        outcome.remembered = self.remembered
        outcome.seconds = time.monotonic() - t0
        outcome.broken = self.broken
        outcome.other_failures = self.other_failures
        outcome.signature = self.signature.to_json() if self.signature is not None else None
        outcome.passing = len(passed_masks(self.memo, self.broken_masks))
        outcome.timeouts = self.timeouts
        outcome.phases = dict(self.phase_checks)
        outcome.full_evidence = self.evidence.get(self.index.full_mask) if self.index else None
        if outcome.output_written and self.best is not None and outcome.nodes_after is not None:
            self._describe_reduced(outcome)
        return outcome

    def _describe_reduced(self, outcome: Outcome) -> None:
        """The evidence of the model written to -o: its comparison, the noise warning, the scale of its worst tensor."""
        final = self._final_mask
        outcome.reduced_evidence = self.evidence.get(final) if final is not None else None
        outcome.noise = noise_warning(outcome.full_evidence, outcome.reduced_evidence, self.cfg.check)
        worst = outcome.reduced_evidence.worst if outcome.reduced_evidence is not None else None
        scale_of = getattr(self.runner, "reference_scale", None)  # (--compare: the reference is still held)
        if worst is not None and scale_of is not None:
            outcome.reduced_scale = scale_of(worst.name)

    def _release(self) -> None:
        if self._owner is not None:
            self._owner.release()
            self._owner = None

    def _cleanup(self) -> None:
        self._cleanup_files()
        self._release()

    # ------------------------------------------------------------------ progress

    def remaining_estimate(self) -> int:
        return self.plan.remaining if self.plan else 0

    def average_check_seconds(self) -> float:
        return self.check_seconds / self.checks if self.checks else 0.0

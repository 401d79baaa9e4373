"""``debug llm`` as a library: two runtimes' generations compared step by step.

Teacher forced (the default): at every step both sides are fed the reference's tokens and the
reference's cache, so each step is judged on its own. ``free_run``: each side keeps its own cache
(the tokens stay the same until they flip; a flip ends the prompt). Each step compares the logits
and every present output at the tolerances given; the first step that fails is the divergence
(kind ``logits`` or ``cache``), localized to a tensor, node and module. Each runner session is
created once for the whole loop; the localization runs at one step only.
"""

from __future__ import annotations

import os
import shlex
import time
from dataclasses import dataclass, field
from typing import Any, List, Optional, Set, Tuple

from toolkit.core.io.datafiles import save_inputs
from toolkit.core.errors import ExitCode, InputError, ToolkitError, UsageError
from toolkit.core.graph.graphs import external_data_folder, has_external_data, node_outputs
from toolkit.core.io.model import check_external_files, check_readable_file, load_model
from toolkit.core.progress import Messages
from toolkit.llm import prompts as P
from toolkit.llm.config import LlmConfig
from toolkit.llm.io import DecoderIO, check_compatible, discover
from toolkit.llm.localize import Located, every_tensor_once, first_diverging, pairing
from toolkit.llm.steps import Feed, NearTie, StepResult, cache_of, compare_step, step_feed
from toolkit.run.options import RunOptions
from toolkit.run.plan import require_known_names
from toolkit.run.specs import make_runner, parse_runner_spec, preflight_specs


@dataclass
class Divergence:
    """The first step where the two sides part."""

    prompt: int
    prompt_ids: List[int]
    step: int
    kind: str  # "logits" or "cache"
    outputs: List[str]
    max_abs_diff: float
    kv_length: int  # cache length the step was fed
    generated: List[int]  # the reference's tokens before this step
    nan_outputs: List[str] = field(default_factory=list)  # failed outputs with NaN on the test side only
    located: Optional[Located] = None
    saved_inputs: Optional[str] = None
    reduce_command: Optional[str] = None
    reduce_note: Optional[str] = None  # why no reduce command is given
    localize_error: Optional[str] = None  # why no tensor is named

    def to_json(self) -> dict:
        return {
            "prompt": self.prompt, "prompt_ids": self.prompt_ids, "step": self.step, "kind": self.kind,
            "outputs": self.outputs, "max_abs_diff": self.max_abs_diff, "kv_length": self.kv_length,
            "generated": self.generated, "nan_outputs": self.nan_outputs,
            **_located_json(self.located),
            "saved_inputs": self.saved_inputs, "reduce_command": self.reduce_command,
            "reduce_note": self.reduce_note,
            "localize_error": self.localize_error,
        }


# the record's keys for the located tensor -> the attribute of Located each reads
_LOCATED_KEYS = {"tensor": "tensor", "node": "node", "op_type": "op_type", "module": "module", "layer": "layer",
                 "tensor_max_abs_diff": "max_abs_diff", "matched_by": "matched_by"}


def _located_json(loc: Optional[Located]) -> dict:
    """The located tensor's part of the record (every key None when no tensor was located)."""
    if not loc:
        return dict.fromkeys(_LOCATED_KEYS)
    return {key: getattr(loc, attr) for key, attr in _LOCATED_KEYS.items()}


@dataclass
class LlmOutcome:
    """What the comparison found (also when interrupted: what was found so far)."""

    first_divergence: Optional[Divergence] = None
    steps_checked: int = 0
    prompts_checked: int = 0
    near_ties: List[NearTie] = field(default_factory=list)
    interrupted: bool = False
    mode: str = "teacher-forced"
    both_nan_steps: int = 0  # steps whose logits are NaN on both sides (a pass that says nothing)
    first_both_nan: Optional[Tuple[int, int]] = None  # (prompt, step) of the first
    seconds: float = 0.0
    description: str = ""

    def to_json(self) -> dict:
        return {
            "first_divergence": self.first_divergence.to_json() if self.first_divergence else None,
            "steps_checked": self.steps_checked, "prompts_checked": self.prompts_checked,
            "near_ties": [t.to_json() for t in self.near_ties], "mode": self.mode,
            "interrupted": self.interrupted, "both_nan_steps": self.both_nan_steps, "seconds": round(self.seconds, 3),
        }


class Reporter(Messages):
    """Progress of ``debug llm`` (every method a no-op by default)."""

    def started(self, prompts: int, steps: int) -> None:
        """The loop starts: ``prompts`` prompts of up to ``steps`` steps each."""

    def step(self, prompt: int, step: int, result: StepResult) -> None:
        """One step compared."""

    def prompt_done(self, prompt: int, steps: int, note: str) -> None:
        """A prompt ends after ``steps`` steps (``note``: why, when not all ran)."""


class LlmDebugger:
    """Discover both sides' I/O, run the loop, localize the first divergence."""

    def __init__(self, cfg: LlmConfig, reporter: Optional[Reporter] = None):
        self.cfg = cfg
        self.rep = reporter or Reporter()
        self.tol = cfg.tolerances
        self.ref_path = cfg.reference_model or cfg.model
        self.test_model = self.ref_model = None
        self.test_io: Optional[DecoderIO] = None
        self.ref_io: Optional[DecoderIO] = None
        self.prompts: List[List[int]] = []

    # ---------------------------------------------------------------- before any work
    def prepare(self) -> None:
        """Usage and input errors before any runner starts: specs, files, the decoder's I/O, prompts."""
        cfg = self.cfg
        if cfg.steps < 1:
            raise UsageError(f"--steps must be at least 1, got {cfg.steps}")
        parse_runner_spec(cfg.reference)
        parse_runner_spec(cfg.test)
        for path in {cfg.model, self.ref_path}:
            check_readable_file(path)
        test_model, ref_io = self._load_models()
        graph = test_model.graph  # (the test model's: localization marks its tensors)
        tensors = {o.name for o in graph.output} | set(node_outputs(graph))
        require_known_names(self.tol, tensors, tensors=True)  # (a name no tensor has: never compared)
        self.prompts = self._prompts(ref_io.vocab)
        preflight_specs([cfg.reference], self.ref_path, self._base(self.ref_path))
        preflight_specs([cfg.test], cfg.model, self._base(cfg.model))

    def _prompts(self, vocab: Optional[int]) -> List[List[int]]:
        """The prompts given, else random ones over ``vocab`` (UsageError: none; InputError: an id outside it)."""
        cfg = self.cfg
        prompts = [list(p) for p in cfg.prompts] or P.random_prompts(cfg.samples, cfg.seed, vocab)
        if not prompts:  # (a comparison of nothing would pass)
            raise UsageError("no prompts to run: give --prompt-ids, --prompts or --samples N (N >= 1)")
        P.check_ids(prompts, vocab)
        return prompts

    def _load_models(self) -> Tuple[Any, DecoderIO]:
        """Both models' structure and decoder I/O (one model when no --reference-model): the test
        model and the reference's I/O."""
        cfg = self.cfg
        self.test_model = test_model = self._structure(cfg.model)
        self.test_io = test_io = discover(test_model, cfg.names, cfg.model)
        if self.ref_path == cfg.model:
            self.ref_model, self.ref_io = test_model, test_io
            return test_model, test_io
        self.ref_model = self._structure(self.ref_path)
        self.ref_io = ref_io = discover(self.ref_model, cfg.names, self.ref_path)
        check_compatible(test_io, ref_io, cfg.model)
        return test_model, ref_io

    def _structure(self, path: str):
        """The model without its weights; its external data files checked (present, long enough)."""
        model = load_model(path, load_external_data=False)
        if has_external_data(model):
            check_external_files(model, external_data_folder(path, self.cfg.external_data_dir), path)
        return model

    def _base(self, model: str) -> RunOptions:
        return RunOptions(model, external_data_dir=self.cfg.external_data_dir)

    # ---------------------------------------------------------------- the loop
    def run(self) -> LlmOutcome:
        self.prepare()
        assert self.test_io is not None
        out = LlmOutcome(mode="free-run" if self.cfg.free_run else "teacher-forced", description=self.test_io.describe())
        start = time.perf_counter()
        try:
            found = self._compare_prompts(out)
            if found:
                self._finish(found)
        except KeyboardInterrupt:
            out.interrupted = True
        out.seconds = time.perf_counter() - start
        return out

    def _compare_prompts(self, out: LlmOutcome) -> Optional[Tuple[Divergence, Feed, Feed]]:
        """Both runners started and probed, then the prompts in turn, up to the first divergence
        (``out.first_divergence``): it and its step's feeds (test, reference), else None."""
        assert self.test_io is not None and self.ref_io is not None
        ref = make_runner(self.cfg.reference, self.ref_path, base=self._base(self.ref_path), name="reference")
        test = make_runner(self.cfg.test, self.cfg.model, base=self._base(self.cfg.model), name="test")
        with ref, test:
            self._said(ref, "the reference")
            self._said(test, "the runner under test")
            probe_step(ref, self.ref_io, self.ref_path, "the reference")
            probe_step(test, self.test_io, self.cfg.model, "the runner under test")
            self.rep.started(len(self.prompts), self.cfg.steps)
            for k, prompt in enumerate(self.prompts):
                found = self._prompt(k, prompt, ref, test, out)
                out.prompts_checked += 1
                if found:
                    out.first_divergence = found[0]
                    return found
        return None

    def _prompt(self, k: int, prompt: List[int], ref, test, out: LlmOutcome):
        """One prompt's steps: (divergence, test feed, reference feed) at the first failing step, else None."""
        assert self.test_io is not None and self.ref_io is not None
        tokens, ref_cache, test_cache = list(prompt), None, None
        generated: List[int] = []
        for step in range(self.cfg.steps):
            ref_feed = step_feed(self.ref_io, tokens, ref_cache)
            test_feed = step_feed(self.test_io, tokens, test_cache if self.cfg.free_run else ref_cache)
            ref_out, test_out = _infer(ref, ref_feed, k, step), _infer(test, test_feed, k, step)
            res = self._compare_step(k, step, test_out, ref_out, out)
            if res.kind is not None:
                div = _divergence(k, prompt, step, res, generated, cached=ref_cache is not None)
                self.rep.prompt_done(k, step + 1, f"diverges at step {step} ({res.kind})")
                return div, test_feed, ref_feed
            if res.flipped and self._parts_on_tie(k, step, res, out):
                return None
            ref_cache, test_cache = self._caches(ref_out, test_out, len(prompt) + step)
            tokens = [res.reference_token]
            generated.append(res.reference_token)
        self.rep.prompt_done(k, self.cfg.steps, "")
        return None

    def _compare_step(self, k: int, step: int, test_out, ref_out, out: LlmOutcome) -> StepResult:
        """Step ``step`` of prompt ``k`` compared, reported and counted (NaN logits on both sides too)."""
        assert self.test_io is not None and self.ref_io is not None
        res = compare_step(self.test_io, self.ref_io, test_out, ref_out, self.tol)
        out.steps_checked += 1
        self.rep.step(k, step, res)
        if self.test_io.logits in res.both_nan:
            _both_nan(out, k, step, self.rep)
        return res

    def _caches(self, ref_out, test_out, total: int):
        """The next step's caches, of ``total`` positions: the reference's, and the test side's own in a free run."""
        assert self.test_io is not None and self.ref_io is not None
        ref_cache = cache_of(self.ref_io, ref_out, total, self.ref_path)
        test_cache = cache_of(self.test_io, test_out, total, self.cfg.model) if self.cfg.free_run else None
        return ref_cache, test_cache

    def _parts_on_tie(self, k: int, step: int, res, out: LlmOutcome) -> bool:
        """A near tie noted; whether the generations part there (free run: each side goes on with its token)."""
        out.near_ties.append(NearTie(k, step, res.reference_token, res.test_token, res.margin, res.difference))
        if not self.cfg.free_run:
            return False
        self.rep.prompt_done(k, step + 1, f"the generations part at step {step} on a near tie")
        return True

    def _said(self, runner, side: str) -> None:
        """What a runner chose itself (OpenVINO's bf16 on CPUs with bfloat16), and its notes."""
        if getattr(runner, "precision", None):
            self.rep.info(f"{side} ({runner.name}) computes in {runner.precision}, its device's default "
                          "(openvino:precision=f32 for float32)")
        for note in getattr(runner, "notes", []):
            self.rep.warn(f"{side}: {note}")

    # ---------------------------------------------------------------- at the divergence
    def _finish(self, found: Tuple[Divergence, Feed, Feed]) -> None:
        div, test_feed, ref_feed = found
        if self.cfg.save_step_inputs:
            save_inputs(self.cfg.save_step_inputs, [test_feed])
            div.saved_inputs = self.cfg.save_step_inputs
        if self.cfg.localize:
            self._localize(div, test_feed, ref_feed)
        div.reduce_note = self.reduce_unsound(div, test_feed)
        if div.saved_inputs and div.reduce_note is None:
            div.reduce_command = self.reduce_command(div.saved_inputs)

    def _localize(self, div: Divergence, test_feed: Feed, ref_feed: Feed) -> None:
        self.rep.info(f"Localizing step {div.step} of prompt {div.prompt}: every tensor of both sides on its feeds")
        try:
            test_vals = every_tensor_once(self.cfg.test, self.cfg.model, test_feed, self.cfg.external_data_dir)
            ref_vals = every_tensor_once(self.cfg.reference, self.ref_path, ref_feed, self.cfg.external_data_dir)
        except ToolkitError as exc:  # the divergence stands; only its localization is lost
            div.localize_error = exc.message
            self.rep.warn(f"the layerwise pass at step {div.step} failed: {exc.message}")
            return
        div.located = first_diverging(self.test_model, self.ref_model, test_vals, ref_vals, self.tol)
        if div.located is None and not pairing(self.test_model, self.ref_model, test_vals, ref_vals):
            div.localize_error = ("the two models name and structure their tensors differently: no tensor of one "
                                  "pairs with a tensor of the other")
        elif div.located is None:
            div.localize_error = ("no tensor differs beyond the tolerances with every tensor marked (marking changes "
                                  "what a runtime fuses); the step's outputs differ as deployed")

    def reduce_unsound(self, div: Divergence, test_feed: Feed) -> Optional[str]:
        """Why ``debug reduce --compare --reference-model`` cannot shrink this step soundly (None when
        it can): it feeds both models the same named inputs and compares tensors by name, so both
        models must have the step's inputs and the diverging tensor under the same names."""
        if self._one_model():
            return None
        assert self.ref_model is not None
        graph = self.ref_model.graph
        ref_names = {vi.name for vi in graph.input} | set(node_outputs(graph))
        lacking = self._lacking(div, test_feed, ref_names)
        if not lacking:
            return None
        return (f"the reference model lacks tensor(s) {_first_few(lacking, 3)} under the test model's names, and debug reduce "
                "--reference-model feeds and compares tensors by name (a reduce would compare nothing and end on the "
                "wrong node); to shrink the step, compare one model file on both runners (no --reference-model) or "
                "export both models with the same tensor names")

    def _one_model(self) -> bool:
        """The reference runs the model under test (no --reference-model, or the same file)."""
        return self.ref_path == self.cfg.model or os.path.realpath(self.ref_path) == os.path.realpath(self.cfg.model)

    def _lacking(self, div: Divergence, test_feed: Feed, ref_names: Set[str]) -> List[str]:
        """The tensors a reduce by name needs that the reference model (``ref_names``) does not have."""
        loc = div.located
        if loc is None:  # not localized: the names of the test model's tensors, most of which the reference must have
            return _not_in([*test_feed, *div.outputs], ref_names) + self._mostly_lacking(ref_names)
        if loc.matched_by != "name":
            return [loc.tensor]
        return _not_in([*test_feed, loc.tensor], ref_names)

    def _mostly_lacking(self, ref_names: Set[str]) -> List[str]:
        """The test model's tensors the reference lacks, when it lacks most of them (else none)."""
        assert self.test_model is not None
        tensors = node_outputs(self.test_model.graph)
        lacking = _not_in(tensors, ref_names)
        return lacking if len(lacking) > len(tensors) / 2 else []

    def reduce_command(self, inputs: str) -> str:
        """The ``debug reduce --compare`` command that shrinks the step's graph to the fault."""
        cfg = self.cfg
        words = ["toolkit", "debug", "reduce", cfg.model, "-o", "reduced.onnx", "--compare", cfg.reference, cfg.test,
                 "--load-inputs", inputs]
        if cfg.reference_model:
            words += ["--reference-model", cfg.reference_model]
        words += self.tol.spelled()
        if cfg.external_data_dir:
            words += ["--external-data-dir", cfg.external_data_dir]
        return " ".join(shlex.quote(w) for w in words)


def _not_in(names: List[str], known: Set[str]) -> List[str]:
    """The ``names`` that are not ``known``, in order."""
    return [n for n in names if n not in known]


def _first_few(names: List[str], count: int) -> str:
    """The first ``count`` names quoted, and how many more there are."""
    more = f" and {len(names) - count} more" if len(names) > count else ""
    return ", ".join(repr(n) for n in names[:count]) + more


def _divergence(k: int, prompt: List[int], step: int, res, generated: List[int], cached: bool) -> Divergence:
    """Prompt ``k`` diverges at ``step`` (``cached``: on a cache of the prompt and the tokens generated so far)."""
    kv = len(generated) + len(prompt) - 1 if cached else 0
    return Divergence(k, list(prompt), step, res.kind, [c.name for c in res.failed], res.max_abs_diff(),
                      kv, list(generated), list(res.nan_in_test))


def _both_nan(out: LlmOutcome, prompt: int, step: int, rep: Reporter) -> None:
    """Count a step whose logits are NaN on both sides; warn at the first."""
    out.both_nan_steps += 1
    if out.first_both_nan is None:
        out.first_both_nan = (prompt, step)
        rep.warn(f"prompt {prompt}, step {step}: the logits are NaN on both sides; NaN matches NaN, so such "
                 "steps compare nothing")


def _infer(runner, feed: Feed, prompt: int, step: int):
    """One inference; a failure names the prompt and step it happened at. A runner failing to run a
    step is never a divergence (exit 1, which comes with a record): its exit code is that of bad input."""
    try:
        return runner.infer(feed)
    except ToolkitError as exc:
        code = ExitCode.BAD_INPUT if exc.exit_code == ExitCode.FAILED else exc.exit_code
        raise type(exc)(f"prompt {prompt}, step {step} (cache length {_cache_length(feed)}): {exc.message}",
                        code) from None


def probe_step(runner, io: DecoderIO, where: str, side: str) -> None:
    """One token on a cache of one position, before any prompt: a model that cannot take it (its
    present outputs hold only the new positions, or its attention cannot grow) is refused as bad
    input, before the loop would fail or diverge on it."""
    cache = [tuple(c.filled(1) for c in pair) for pair in io.past]
    try:
        out = runner.infer(step_feed(io, [0], cache))
    except ToolkitError as exc:
        raise InputError(f"{where}: one token on a cache of one position fails on {side} ({exc.message}): "
                         "debug llm needs a decoder that takes a growing cache (map other names with --name)",
                         ExitCode.BAD_INPUT if exc.exit_code == ExitCode.FAILED else exc.exit_code) from None
    cache_of(io, out, 2, where)


def _cache_length(feed: Feed) -> int:
    lengths = [a.shape[2] for name, a in feed.items() if getattr(a, "ndim", 0) == 4]
    return int(lengths[0]) if lengths else 0

"""``debug precision`` on a quantized (QDQ) model: the fewest Q/DQ pairs to take back to float.

The search is :class:`toolkit.precision.search.PrecisionSearch` over a different set: the
model's Q/DQ pairs *bypassed* (their tensor skips Q and DQ, :func:`toolkit.quant.qdq.bypass`)
instead of nodes kept in fp32. Bypassing more pairs brings the model closer to float, so the
same delta-debugging engine (bisect, QuickXplain, 1-minimality) applies unchanged.

The reference is the float model (``--reference-model``, run once), or the quantized model with
every pair bypassed. After the search, one run of the quantized model with every pair's
tensors marked gives each pair's statistics (:func:`toolkit.quant.qdq.pair_stats`): why it
is kept, and for pairs kept for clipping or a coarse scale, the scale the observed range gives
and whether requantizing with it passes (one check each).

No Typer or Rich here.
"""

from __future__ import annotations

import dataclasses
import os
import time

import numpy as np
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence

from toolkit.core.compare.arrays import compare_iteration
from toolkit.core.errors import ExitCode, InputError, ToolkitError, UsageError
from toolkit.core.graph.constants import constant_values
from toolkit.core.io.model import load_model, save_model
from toolkit.core.shared_options import ATOL_FLAG, TOLERANCE_OPTIONS
from toolkit.quant import qdq
from toolkit.quant import stats as qdq_stats
from toolkit.quant import metrics as qdq_metrics
from toolkit.precision import held_sets
from toolkit.precision.replay import list_words, qdq_options, value_words
from toolkit.quant.validate import GENERATED, HeldOut, split, split_count
from toolkit.search import strategy
from toolkit.search.masks import mask_indices
from toolkit.precision.config import PrecisionConfig, QdqConfig
from toolkit.precision.search import PrecisionOutcome, Check, PrecisionSearch, SetIndex
from toolkit.precision.verdicts import describe
from toolkit.run.registry import get_kind
from toolkit.run.qdq_table import marked_outputs
from toolkit.quant.table import Rows, marked_names


@dataclass
class Suggestion:
    pair: str
    scale: Any  # a float, or for a per-channel pair a list (one per channel)
    zero_point: Any  # an int, or a list
    passes: bool
    detail: str
    margin: str = ""  # how much of the tolerance the result uses
    robust: Optional[bool] = None  # passes at the scale -2% and +2% too (None: not checked)
    fails_at: List[str] = field(default_factory=list)  # of "-2%", "+2%": where it does not


NUDGE = 0.02  # a passing suggestion is checked again with its scale this much smaller and larger


@dataclass
class QdqOutcome(PrecisionOutcome):
    stats: Dict[str, qdq_stats.PairStats] = field(default_factory=dict)  # pair name -> its statistics
    pairs: List[qdq.Pair] = field(default_factory=list)
    suggestions: List[Suggestion] = field(default_factory=list)
    integer_ops: List[str] = field(default_factory=list)
    reference: str = ""
    table: List[qdq_stats.PairStats] = field(default_factory=list)  # with QdqConfig.table: every pair, ranked
    quantized_weights: int = 0  # weights read through a DequantizeLinear (not searched without --qdq-weights)
    inputs: List[str] = field(default_factory=list)  # the model's graph inputs
    minimum: bool = False  # proved: no smaller set of pairs passes (else the result is 1-minimal)
    held_out: Optional[HeldOut] = None  # the result checked on inputs the search did not use
    held_out_note: str = ""  # why there is no held-out check
    pass_rule: Optional[Dict[str, Any]] = None  # with a metric: its name and tolerance
    scaled: Optional[Dict[str, Any]] = None  # --apply-scales: the model with every suggested scale
    fixed: List[str] = field(default_factory=list)  # pairs in float in every check (--float-op-types)
    after_interrupted: bool = False  # Ctrl-C after the search: held-out check, reasons or table left out
    # a passing set of pairs inside a failing one, both checked: {"passing": n pairs, "failing": m pairs}
    not_monotone: Optional[Dict[str, int]] = None


def quantized_file(path: str) -> bool:
    """Whether the model at ``path`` holds Q/DQ or integer ops (its weights not read)."""
    return quantization_of(path) is not None


def quantization_of(path: str) -> Optional[str]:
    """How the model at ``path`` is quantized: "qdq" (QuantizeLinear/DequantizeLinear nodes),
    "integer" (only integer ops: ConvInteger, MatMulInteger, QLinear*, ...), or None."""
    try:
        model = load_model(path, load_external_data=False)
    except ToolkitError:  # an unreadable model (InputError) is reported by the search itself
        return None
    if any(n.op_type in ("QuantizeLinear", "DequantizeLinear") for n in model.graph.node):
        return "qdq"
    return "integer" if qdq.is_quantized(model) else None


class QdqSearch(PrecisionSearch):
    config: QdqConfig

    def _candidate_dtype(self, c: PrecisionConfig) -> str:
        for text, spec in ((c.reference, self.ref_spec), (c.candidate, self.cand_spec)):
            if get_kind(spec[0]).reduced(spec[1]):
                raise UsageError(
                    f"--compare {c.reference} {c.candidate}: on a quantized model both runners run it as it is "
                    f"({text} asks for reduced precision); use e.g. --compare onnxrt onnxrt or onnxrt openvino"
                )
        return "float32"

    def _validate(self) -> None:
        super()._validate()
        self._check_metric_options()
        self._check_reference_model()
        if self.config.order not in ("graph", "error"):
            raise UsageError(f"--order {self.config.order}: use graph or error")
        if self.config.held_out is not None and self.config.held_out < 0:
            raise UsageError("--held-out must be 0 or more")
        self._check_reference_not_written()

    def _check_metric_options(self) -> None:
        """--metric and its options: each needs --metric, which replaces the tolerances."""
        c = self.config
        self.metric = qdq_metrics.parse(c.metric, c.metric_tolerance, c.metric_outputs)
        if c.metric_outputs and self.metric is None:
            raise UsageError("--metric-outputs needs --metric")
        if self.metric is not None and c.tolerances is not None:
            raise UsageError(f"--metric is the pass rule in place of {TOLERANCE_OPTIONS}; give one or the "
                             "other (the metric's tolerance is --metric-tolerance)")
        if self.metric is None and c.metric_tolerance is not None:
            raise UsageError("--metric-tolerance needs --metric")

    def _check_reference_model(self) -> None:
        ref = self.config.reference_model
        if ref is not None and not os.path.isfile(ref):
            raise InputError(f"--reference-model {ref}: no such file")
        if self.config.load_outputs and ref:
            raise UsageError("--reference-model and --load-outputs both give the reference; give one")

    def _check_reference_not_written(self) -> None:
        ref = self.config.reference_model
        if not ref:
            return
        from toolkit.core.files import paths

        for flag, path in (("-o", self.config.output), ("--save-debug-replay", self.config.save_replay)):
            if path and paths.same_file(path, ref):
                raise UsageError(f"{flag} {path} would overwrite --reference-model {ref}, which this command reads; "
                                 "nothing was read or written: choose another file name")

    def replay_check(self) -> List[str]:
        """The engine's words plus what else decides a verdict here: the reference model, the
        metric, the pairs always in float, the held-out split (which sets the search runs on)."""
        c = self.config
        words = super().replay_check()
        words += value_words((("--reference-model", c.reference_model), ("--metric-tolerance", c.metric_tolerance),
                              ("--held-out", c.held_out)))
        if c.metric is not None:
            words += ["--metric", c.metric if isinstance(c.metric, str) else getattr(c.metric, "__name__", "callable")]
        words += list_words((("--metric-outputs", c.metric_outputs), ("--float-op-types", c.float_op_types),
                             ("--validate-inputs", c.validate_inputs)))
        if c.weights:
            words.append("--qdq-weights")
        return words

    def replay_options(self) -> Dict[str, Any]:
        return qdq_options(self)

    def _load(self) -> None:
        c = self.config
        self.model = load_model(c.model, external_data_dir=c.external_data_dir)
        self.float_model = load_model(c.reference_model) if c.reference_model else None
        self.pairs = qdq.find_pairs(self.model, weights=c.weights, float_model=self.float_model)
        self.integer_ops = qdq.integer_ops(self.model)
        if not self.pairs:
            raise InputError(self._no_pairs())
        self.by_name = {p.name: p for p in self.pairs}
        self.fixed_order = qdq.pairs_at_op_types(self.model, self.pairs, c.float_op_types)
        self.fixed = set(self.fixed_order)
        self.members = self._units()
        self.trimmed: set = set()  # tied pairs the result does without (:meth:`_trim`)
        self.universe = self._searched_units()
        self.position = {name: k for k, name in enumerate(self.universe)}
        self.user_kept, self.auto_kept = [], {}
        self.guide = False
        self.graph_outputs = [o.name for o in self.model.graph.output]
        self._check_metric_outputs()
        self.index = SetIndex(len(self.universe))
        self._model_id = self._structure_id()
        self.depth = 1

    def _check_metric_outputs(self) -> None:
        """--metric-outputs names outputs of the model (UsageError naming them otherwise)."""
        unknown = [n for n in self.config.metric_outputs if n not in self.graph_outputs]
        if unknown:
            raise UsageError(f"--metric-outputs {unknown[0]}: the model has no such output; its outputs are "
                             f"{', '.join(self.graph_outputs)}")

    def _searched_units(self) -> List[str]:
        """The pairs the search decides on: neither fixed in float nor tied to another (UsageError when none is left)."""
        tied = {n for names in self.members.values() for n in names[1:]}
        universe = [p.name for p in self.pairs if p.name not in self.fixed and p.name not in tied]
        if not universe:
            raise UsageError(f"--float-op-types {','.join(self.config.float_op_types)} takes every pair to float: "
                             "nothing is left to search")
        return universe

    def _units(self) -> Dict[str, List[str]]:
        """The search's units: a pair with the pairs that only re-quantize its values on its grid
        (:func:`toolkit.quant.qdq.tied_pairs`): first pair -> every pair of the unit (tied pairs only)."""
        members: Dict[str, List[str]] = {}
        for name, root in qdq.tied_pairs(self.model, self.pairs).items():
            if name not in self.fixed and root not in self.fixed:
                members.setdefault(root, [root]).append(name)
        return members

    def expand(self, names: Sequence[str]) -> List[str]:
        """``names`` (units) with their tied pairs, in node order."""
        wanted = {m for n in names for m in self.members.get(n, [n]) if m == n or m not in self.trimmed}
        return [p.name for p in self.pairs if p.name in wanted]

    def _no_pairs(self) -> str:
        c = self.config
        if self.integer_ops:
            return (f"{c.model}: its quantization is in integer ops ({', '.join(self.integer_ops)}), which cannot be "
                    "taken back to float pair by pair; quantize it in QDQ format (QuantFormat.QDQ) to search it")
        hint = "" if c.weights else " (weight pairs are searched with --qdq-weights)"
        return f"{c.model}: no activation QuantizeLinear/DequantizeLinear pair to search{hint}"

    # ------------------------------------------------------------------ inputs
    def _feeds(self):
        """The search's input sets; the held-out ones go to ``self.held_out_feeds``."""
        c = self.config
        self.held_out_feeds: List = []
        self.held_source, self.held_note = "", ""
        if c.load_outputs:
            self.held_note = "--load-outputs gives the reference for the search's inputs only"
            return super()._feeds()
        feeds = self._search_and_held()
        self._drop_search_sets(feeds)
        return feeds

    def _search_and_held(self) -> List:
        """The search's input sets; the held-out ones (before :meth:`_drop_search_sets`) go to ``self.held_out_feeds``."""
        c = self.config
        if c.validate_inputs:
            feeds = super()._feeds()
            self.held_source, self.held_out_feeds = "file", self._feeds_with(load_inputs=list(c.validate_inputs))
            return list(feeds)
        if c.load_inputs or self.given_feeds is not None:  # (the caller's sets are split as loaded ones)
            return self._split_loaded()
        extra = c.held_out if c.held_out is not None else max(GENERATED, c.iterations)
        every = self._feeds_with(iterations=c.iterations + extra)  # (further seeds)
        self.held_source, self.held_out_feeds = "generated", every[c.iterations:]
        return every[: c.iterations]

    def _drop_search_sets(self, feeds: Sequence) -> None:
        """Held-out sets equal to a search set in ``feeds`` are not held out (a warning naming how many;
        with none left, the note says why there is no held-out check)."""
        total = len(self.held_out_feeds)
        self.held_out_feeds, in_search, repeats = held_sets.drop_seen(self.held_out_feeds, feeds)
        if not in_search and not repeats:
            return
        source = {"file": "--validate-inputs", "split": "--load-inputs"}.get(self.held_source, self.held_source)
        self.reporter.warn(held_sets.dropped_words(in_search, repeats, total, source))
        if not self.held_out_feeds:
            self.held_note = held_sets.none_left_words(total, source)

    def _split_loaded(self) -> List:
        """The loaded input sets less those held out (--held-out, or a quarter of four or more)."""
        every = super()._feeds()
        feeds, self.held_out_feeds = split(every, split_count(len(every), self.config.held_out))
        self.held_source = "split"
        if self.config.held_out == 0:
            self.held_note = "--held-out 0"
        elif not self.held_out_feeds:
            self.held_note = (f"{len(every)} input set(s): too few to hold any out (give four or more, or "
                              "--validate-inputs FILE)")
        return feeds

    def _feeds_with(self, **changes) -> List:
        """The input sets the config with ``changes`` gives (never the caller's sets: those are the search's)."""
        c, given = self.config, self.given_feeds
        self.config, self.given_feeds = dataclasses.replace(c, **changes), None
        try:
            return list(super()._feeds())
        finally:
            self.config, self.given_feeds = c, given

    def held_out_check(self, kept: Sequence[str], model=None) -> Optional[HeldOut]:
        """The model with ``kept`` in float (or ``model``, the one written in its place), and the
        quantized model as it is, on the held-out sets."""
        if not self.held_out_feeds:
            return None
        held = HeldOut(self.held_source, len(self.held_out_feeds), checked=True, scaled=model is not None)
        try:
            ref = self._reference(self.held_out_feeds)
            self._judge_held_out(held, ref, kept, model)
        except ToolkitError as exc:  # the held-out inputs do not run: the result is not shown to hold
            held.passed, held.detail = 0, f"could not run: {exc.message}"
            return held
        if held.passed < held.count:  # (a result with every pair in float: that is the check)
            every = model is None and set(kept) >= {p.name for p in self.pairs}
            held.all_float_passed = held.passed if every else self._all_float_held(ref)
        return held

    def _judge_held_out(self, held: HeldOut, ref, kept: Sequence[str], model) -> None:
        """On the held-out sets (reference outputs ``ref``): the result (``model``, else the model with
        ``kept`` in float) and the quantized model as it is (the result too, when nothing is kept)."""
        if kept:
            checked = model if model is not None else self.candidate_model(list(kept))
            held.passed, held.detail = self._on_held_out(ref, checked)
        held.before_passed, before_detail = self._on_held_out(ref, self.candidate_model([]))
        if not kept:
            held.passed, held.detail = held.before_passed, before_detail

    def _on_held_out(self, ref, model):
        """``model`` on the held-out sets: on how many it passes, and its worst comparison in words."""
        kind, opts = self.cand_spec
        comps = self._compare_with(ref, self._run_here(model, kind, opts, self.held_out_feeds))
        return sum(1 for it in comps if it.passed and not it.only_a), self._describe(comps)

    def _all_float_held(self, ref) -> Optional[int]:
        """On how many held-out sets the model passes with every pair the search could take to float
        in float: below all of them, what stays quantized (or the tolerance) fails there, not the pairs.
        None when that model does not run (then nothing is said of it)."""
        kind, opts = self.cand_spec
        try:
            outs = self._run_here(qdq.bypass(self.model, self.pairs), kind, opts, self.held_out_feeds)
        except ToolkitError:
            return None
        return sum(1 for it in self._compare_with(ref, outs) if it.passed and not it.only_a)

    # ------------------------------------------------------------------ runs
    def _reference(self, feeds) -> List[Dict]:
        refs = self._reference_outputs(feeds)
        if refs:
            qdq_metrics.check_classes(self.metric, refs[0])  # (a metric that compares nothing: exit 2)
        return refs

    def reference_label(self) -> str:
        """What the search compares with, in words: the loaded outputs, the float model, or the model
        with every pair in float."""
        c = self.config
        if c.load_outputs:
            return f"the outputs loaded from {c.load_outputs} (--load-outputs)"
        return c.reference_model or "the model with every pair in float"

    def _reference_outputs(self, feeds) -> List[Dict]:
        if self.config.load_outputs:
            return self._loaded_reference(self.config.load_outputs, feeds)
        kind, opts = self.ref_spec
        model = self.float_model if self.float_model is not None else qdq.bypass(self.model, self.pairs)
        outs = self._run_here(model, kind, opts, feeds)
        self._check_reference_has_outputs(outs[0])
        return [{n: o[n] for n in self.graph_outputs} for o in outs]

    def _check_reference_has_outputs(self, outs: Mapping) -> None:
        """The reference's outputs ``outs`` hold every output of the quantized model (InputError otherwise)."""
        missing = [n for n in self.graph_outputs if n not in outs]
        if missing:
            raise InputError(f"--reference-model {self.config.reference_model}: has no output {', '.join(missing)} "
                             "(the quantized model's outputs must keep the float model's names)")

    def _compare(self, outs: List[Dict]):
        return self._compare_with(self.ref_outs, outs)

    def _compare_with(self, refs: Sequence[Mapping], outs: Sequence[Mapping]) -> List:
        """Each input set's comparison: the tolerances, or the metric."""
        if self.metric is not None:
            return [self.metric.iteration(r, o) for r, o in zip(refs, outs)]
        return [compare_iteration(k, r, o, self.tolerances) for k, (r, o) in enumerate(zip(refs, outs))]

    def _describe(self, comps) -> str:
        return qdq_metrics.describe(comps) if self.metric is not None else describe(comps)

    def candidate_model(self, keep: Sequence[str]):
        """The model with the units ``keep`` (their tied pairs with them) in float."""
        return self.exact_model(self.expand(keep))

    def exact_model(self, names: Sequence[str]):
        """The model with exactly the pairs ``names`` in float (and --float-op-types' pairs): a pair left
        out stays quantized even where its unit's first pair is in float."""
        return qdq.bypass(self.model, [self.by_name[n] for n in self.fixed_order + list(names)])

    def _own_copy_failed(self, exc: ToolkitError) -> None:
        """The first check's model does not load or run. With no pair in float yet it is the user's
        model as it is (``exc`` names it, exit 3); with --float-op-types it is a copy: the user's
        model is tried as it is, and when it loads, the copy is toolkit's fault (exit 70)."""
        if not self.fixed_order:
            return
        kind, opts = self.cand_spec
        try:
            self._run_here(self.model, kind, opts, self.feeds[:1])
        except ToolkitError as own:
            raise InputError(own.message) from None
        raise ToolkitError(
            f"toolkit's copy of {self.config.model} with the pairs of --float-op-types in float does not load in "
            f"{self.config.candidate}, where the model itself does: {exc.message}; this is a bug in toolkit",
            exit_code=ExitCode.INTERNAL,
        ) from None

    def _rounding_only(self, mask: int, comps) -> bool:
        return False  # the tolerance decides; rounding is the table's business (toolkit.quant.table)

    def _all_fp32_passes(self) -> bool:
        return self.passes(self.index.full_mask)

    def _search(self) -> Optional[int]:
        """The engine's search over the units (bisect, QuickXplain, 1-minimality) in the order of
        the error each adds (``--order error``, the default: the table's ranking, one marked run)
        or in node order (``--order graph``), then a unit that passes alone (:meth:`_single`): it
        replaces a larger result. With ``--singles``, each unit alone first (:meth:`_each_alone`).
        Sets are kept by node position whatever the order (replay files)."""
        self.guide = False
        order = self.ranked_positions() if self.config.order == "error" else list(range(self.index.size))

        def to_full(m: int) -> int:
            return sum(1 << order[i] for i in mask_indices(m))
        if self.config.singles:
            single = self._each_alone(order)
            if single is not None:
                return single
        plan = strategy.Plan(SetIndex(len(order)))
        # (the bisect assumes every unit in float passes, checked only when its answer fails)
        result = self._drive(strategy.STRATEGIES[self.config.mode](plan), to_full)
        if not self.passes(result):
            return None if not self._all_fp32_passes() else self.index.full_mask
        return self._trim(self._single_instead(result, order))

    def _single_instead(self, result: int, order: List[int]) -> int:
        """A unit that passes alone (:meth:`_single`, tried in ``order``) in place of a larger passing
        ``result``; else ``result``."""
        if bin(result).count("1") <= 1:
            return result
        failed = self._failed_units()
        single = self._single([i for i in order if not (failed >> i) & 1])
        return result if single is None else 1 << single

    def _each_alone(self, order: List[int]) -> Optional[int]:
        """``--singles``: each unit alone in float, in ``order``, until one passes (its mask), or None
        (then every unit was checked alone and failed)."""
        return next((1 << i for i in order if self.passes(1 << i)), None)

    def _witness(self) -> Optional[Dict[str, int]]:
        """A passing set inside a failing one, both checked, by their numbers of pairs (None: none seen).
        Where quantization errors cancel, more pairs in float can fail where fewer passed; a failing set
        then says nothing of its subsets, and neither the bisect's nor the single-pair pass's inferences hold."""
        passing = sorted((m for m, v in self.verdicts.items() if v), key=lambda m: bin(m).count("1"))
        failing = sorted((m for m, v in self.verdicts.items() if not v), key=lambda m: bin(m).count("1"))
        found = next(((p, f) for p in passing for f in failing if p != f and not p & ~f), None)
        if found is None:
            return None
        return {what: len(self.expand([self.universe[i] for i in mask_indices(m)]))
                for what, m in zip(("passing", "failing"), found)}

    def _failed_units(self) -> int:
        """Every unit of a failing set (each fails alone too where the model is monotone: what
        :meth:`_single` assumes to skip them)."""
        failed = 0
        for mask, passed in self.verdicts.items():
            if not passed:
                failed |= mask
        return failed

    def _trim(self, result: int) -> int:
        """The result without each tied pair of its units in turn, where the model still passes (one
        check per tied pair): the first pair of a unit can matter without some of the pairs that
        re-quantize its values (a slice of a gate's output, say)."""
        units = [self.universe[k] for k in mask_indices(result)]
        for name in self._tied_in(units):
            passed, detail = self._counted_check(self._expanded_without(units, name), len(units),
                                                 f"without the tied pair {self.by_name[name].shown}")
            if passed:
                self.trimmed.add(name)
                self.details[result] = detail
        return result

    def _tied_in(self, units: Sequence[str]) -> List[str]:
        """The tied pairs of ``units`` (each unit's pairs after its first)."""
        return [m for u in units for m in self.members.get(u, [])[1:]]

    def _expanded_without(self, units: Sequence[str], name: str) -> List[str]:
        """``units`` with their tied pairs (:meth:`expand`), less the pair ``name``."""
        return [n for n in self.expand(units) if n != name]

    def _counted_check(self, names: Sequence[str], units: int, what: str):
        """A check of the model with the pairs ``names`` (of ``units`` units, ``what`` they are) in
        float, counted as every check is: (passed, detail)."""
        t0 = time.perf_counter()
        passed, detail, _ = self._check_model(self.exact_model(names))
        check = Check(len(self.checks) + 1, units, passed, time.perf_counter() - t0, f"{what}: {detail}")
        self.checks.append(check)
        self.reporter.check(check)
        return passed, detail

    def ranked_positions(self) -> List[int]:
        """The units' positions, most error added first (the table's ranking; a unit by its first
        pair; pairs with no row, such as those on graph inputs, last)."""
        ranked = [self.position[st.pair.name] for st in self.table() if st.pair.name in self.position]
        seen = set(ranked)
        return ranked + [k for k in range(self.index.size) if k not in seen]

    def _single(self, indices: List[int]) -> Optional[int]:
        """The first pair (by position) of ``indices`` that passes alone, or None when none is found:
        only the halves of passing sets are split (a few checks where each alone would take one per
        pair), as if a set that fails held no pair that passes alone. That holds where the model is
        monotone, so a pair found here is an answer, and None proves nothing (:meth:`minimum`)."""
        if not indices or not self.passes(sum(1 << i for i in indices)):
            return None
        if len(indices) == 1:
            return indices[0]
        mid = len(indices) // 2
        first = self._single(indices[:mid])
        return first if first is not None else self._single(indices[mid:])

    def minimum(self, kept: Sequence[str]) -> bool:
        """Proved by checks alone that no smaller set of pairs passes: one pair (nothing in float
        fails), or two where every unit was checked alone and failed (``--singles``). A failing set
        does not prove its pairs fail alone: where quantization errors cancel, more pairs in float
        can fail where fewer pass (:meth:`_witness`)."""
        if any(n in self.members for n in kept):  # (a unit of tied pairs: only its first pair was not tried alone)
            return False
        if len(kept) <= 1:
            return True
        return len(kept) == 2 and all(self.verdicts.get(1 << i) is False for i in range(self.index.size))

    def _write_scaled(self, out: PrecisionOutcome, result: "QdqOutcome") -> None:
        """--apply-scales: -o gets the model with the suggested scales when it passes the search's
        input sets; the held-out check is then that model's (the one written)."""
        model, passed, detail = self.apply_scales(out.kept, result.suggestions)
        result.scaled = {"passes": passed, "detail": detail, "written": False}
        if passed:
            result.held_out = self.held_out_check(out.kept, model)
        if passed and self.config.output:
            save_model(model, self.config.output)
            result.scaled["written"] = True

    def _write_output(self, out: PrecisionOutcome) -> None:
        save_model(self.candidate_model(out.kept), self.config.output or "")

    # ------------------------------------------------------------------ the answer
    def _run(self) -> PrecisionOutcome:
        out = super()._run()
        units = list(out.kept)
        out.kept = self.expand(units)  # (the pairs tied to a unit's first pair with it)
        out.candidates = sum(len(self.members.get(u, [u])) for u in self.universe)
        result = self._outcome(out)
        result.not_monotone = self._witness()
        if out.status == "found" and units:
            result.minimum = self.minimum(units)
            # (1-minimal was verified unit by unit, before tied pairs were trimmed)
            result.one_minimal = result.one_minimal and not self.trimmed
        try:
            self._after_search(out, result)
        except KeyboardInterrupt:  # the result stands; what was not gathered yet is left out
            result.after_interrupted = True
        result.checks = len(self.checks)
        return result

    def _outcome(self, out: PrecisionOutcome) -> "QdqOutcome":
        """The engine's outcome ``out`` with what is said of the pairs and the model."""
        result = QdqOutcome(**{k: getattr(out, k) for k in PrecisionOutcome.__dataclass_fields__})
        result.precision = "int8"
        result.pairs = self.pairs
        result.integer_ops = self.integer_ops
        result.inputs = [i.name for i in self.model.graph.input]
        result.fixed = list(self.fixed_order)
        result.pass_rule = qdq_metrics.as_dict(self.metric) if self.metric is not None else None
        result.quantized_weights = _quantized_weights(self.model)
        result.reference = self.reference_label()
        result.held_out_note = getattr(self, "held_note", "")
        return result

    def _after_search(self, out: PrecisionOutcome, result: "QdqOutcome") -> None:
        """The held-out check, reasons, scale suggestions and table of a finished search (after
        Ctrl-C, nothing more is run)."""
        if out.status in ("found", "none-needed"):
            result.held_out = self.held_out_check(out.kept)
        if out.status == "found" and out.kept:
            self._explain(out, result)
        if self.config.table and out.status != "interrupted":
            result.table = self.table()

    def _explain(self, out: PrecisionOutcome, result: "QdqOutcome") -> None:
        """The pairs found: their statistics (why each is kept), the scales suggested, and with
        --apply-scales the model with the passing ones."""
        result.stats = self.stats(out.kept)
        if self.config.suggest_scales:
            result.suggestions = self._suggest(out.kept, result.stats)
        if self.config.apply_scales and any(sg.passes for sg in result.suggestions):
            self._write_scaled(out, result)

    def table(self) -> List[qdq_stats.PairStats]:
        """Every activation pair's statistics against the reference's tensors (the float model's,
        or the model's own with every pair in float), ranked by the error each adds."""
        pairs = [p for p in self.pairs if not p.weight]
        reference = self.float_model
        if reference is None:  # the model with every pair in float: its DQ outputs hold the float tensors
            reference = qdq.bypass(self.model, self.pairs)
            pairs = [dataclasses.replace(p, float_name=p.outputs[0], user_name=p.shown) for p in pairs]
        stats = gather_stats(pairs, self.model, reference, self.feeds, self.config.model,
                             self.config.external_data_dir)
        return qdq_stats.ranked(list(stats.values()))

    def stats(self, names: Sequence[str]) -> Dict[str, qdq_stats.PairStats]:
        """The statistics of the kept pairs ``names`` where each matters: with the other kept pairs in
        float. One run of the model with all of them in float gives every kept pair's input as it is
        then (a pair's own quantization changes only what follows it); the pair's quantization is
        applied to it in numpy (:func:`toolkit.quant.qdq.fake_quantize`). Weight pairs: their weights."""
        pairs = [self.by_name[n] for n in names if not self.by_name[n].weight]
        out = gather_stats(pairs, self.candidate_model([p.name for p in pairs]), self.float_model, self.feeds, self.config.model,
                           self.config.external_data_dir, emulate=True) if pairs else {}
        out.update(self._weight_stats([self.by_name[n] for n in names if self.by_name[n].weight]))
        return out

    def _weight_stats(self, pairs: Sequence[qdq.Pair]) -> Dict[str, qdq_stats.PairStats]:
        """The statistics of weight ``pairs`` whose float weights are known (stored, or the float model's)."""
        values = constant_values(self.model.graph)
        out = {}
        for pair in pairs:
            weight = pair.float_value if pair.float_value is not None else values.get(pair.tensor)
            if weight is not None:
                out[pair.name] = qdq_stats.weight_stats(pair, weight)
        return out

    def _suggest(self, kept: Sequence[str], stats: Mapping[str, qdq_stats.PairStats]) -> List[Suggestion]:
        """For each pair kept for clipping or a coarse scale: the scale its observed range gives,
        and whether requantizing it (the other pairs found still in float) passes."""
        out = []
        for name in kept:
            st = stats.get(name)
            if st is not None and qdq_stats.needs_scale(st):
                out.append(self._suggestion(self.by_name[name], st, [n for n in kept if n != name]))
        return out

    def _suggestion(self, pair: qdq.Pair, st: qdq_stats.PairStats, others: List[str]) -> Suggestion:
        """The scale ``pair``'s observed range gives, checked with the pairs ``others`` in float (and
        when it passes, checked again at the scale -2% and +2%: a verdict that flips with so small a
        change is no fix to rely on)."""
        scale, zp = qdq_stats.suggested(pair, st)
        base = self.exact_model(others)  # (requantize copies it; a tied pair of ``pair``'s unit stays quantized)
        passed, detail, margin = self._check_model(qdq.requantize(base, pair, scale, zp))
        plain_scale, plain_zp = _plain(scale, zp)
        sug = Suggestion(pair.name, plain_scale, plain_zp, passed, detail, margin)
        if passed:  # (both nudges checked: the log names each one that fails)
            sug.fails_at = [f"{100 * k:+g}%" for k in (-NUDGE, NUDGE)
                            if not self._check_model(qdq.requantize(base, pair, scale * (1 + k), zp))[0]]
            sug.robust = not sug.fails_at
        return sug

    def apply_scales(self, kept: Sequence[str], suggestions: Sequence[Suggestion]):
        """The model with every passing suggested scale applied (the other kept pairs in float), and
        whether it passes: (model, passed, detail)."""
        good = {s.pair: s for s in suggestions if s.passes}
        model = self.exact_model([n for n in kept if n not in good])
        for name, sug in good.items():
            pair = self.by_name[name]
            model = qdq.requantize(model, pair, np.asarray(sug.scale, np.float32),
                                   np.broadcast_to(np.asarray(sug.zero_point), pair.zero_point.shape))
        passed, detail, _ = self._check_model(model)
        return model, passed, detail

    def _check_model(self, model):
        kind, opts = self.cand_spec
        comps = self._compare(self._run_candidate(model, kind, opts))
        return all(c.passed and not c.only_a for c in comps), self._describe(comps), self._margin(comps)

    def _margin(self, comps) -> str:
        """The share of a single absolute tolerance the worst output uses ("" for a metric or per-output tolerances)."""
        atol = self._single_atol()
        if atol is None or not atol > 0:
            return ""
        worst = max((o.required_atol for it in comps for o in it.outputs), key=qdq_metrics.badness, default=0.0)
        if qdq_metrics.badness(worst)[0]:  # (NaN, or no value: no share to state, whatever the outputs' order)
            return ""
        return f"{100 * worst / atol:.0f}% of {ATOL_FLAG} {atol:g} used"

    def _single_atol(self) -> Optional[float]:
        """The one absolute tolerance for every output (None: a metric, per-output tolerances, or none given)."""
        t = self.config.tolerances
        if self.metric is not None or t is None or t.per_atol:
            return None
        return t.atol


def _plain(scale: np.ndarray, zero_point: np.ndarray):
    """A suggestion's (scale, zero point) as plain numbers: floats and ints, or lists per channel."""
    if scale.size > 1:
        return [float(v) for v in scale.ravel()], [int(v) for v in zero_point.ravel()]
    return float(scale.ravel()[0]), int(zero_point.ravel()[0])


def marked_run(model, names: Sequence[str], feeds, path: str, external_data_dir: Optional[str]) -> List[Dict]:
    """``model`` run on ``feeds`` with ``names`` as its outputs (ONNX-Runtime, optimizations off)."""
    return list(marked_outputs(model, names, feeds, path, external_data_dir))


def gather_stats(pairs: Sequence[qdq.Pair], model, float_model, feeds, path: str,
                 external_data_dir: Optional[str], emulate: bool = False) -> Dict[str, qdq_stats.PairStats]:
    """Statistics of ``pairs``, one input set at a time (no iteration's tensors kept), by the Q/DQ
    table's code (:class:`toolkit.quant.table.Rows`, as ``run``'s table). With ``emulate``, ``model``
    has the pairs in float and their quantization is applied in numpy."""
    names = marked_names(pairs, model, emulate)
    runs = marked_outputs(model, names, feeds, path, external_data_dir) if names else iter([{}] * len(feeds))
    floats = _float_runs(pairs, float_model, feeds, path)
    rows = Rows(pairs, emulate=emulate)
    for feed, got, ref in zip(feeds, runs, floats):
        rows.add(feed, got, ref)
    return rows.finish()


def _quantized_weights(model) -> int:
    """How many DequantizeLinear nodes read a constant (a weight stored quantized)."""
    values = constant_values(model.graph)
    return sum(1 for n in model.graph.node if n.op_type == "DequantizeLinear" and n.input[0] in values)


def _float_runs(pairs: Sequence[qdq.Pair], float_model, feeds, path: str):
    """The float model's tensors that the pairs correspond to, per input set (empty without it)."""
    if float_model is not None:
        names = sorted({p.float_name for p in pairs if p.float_name and p.float_name not in _inputs(float_model)})
        if names:
            return marked_outputs(float_model, names, feeds, path, None)
    return iter([{}] * len(feeds))


def _inputs(model) -> set:
    return {i.name for i in model.graph.input}

"""``debug precision``: the fewest nodes to keep in fp32 so the fp16 (or bf16) model passes a comparison.

The reduced precision is the candidate runner's: ``onnxrt:fp16``/``trt:fp16`` search a mixed
fp16 model, ``onnxrt:bf16``/``trt:bf16`` a mixed bf16 one (same search, same conversion).

The search is debug reduce's delta-debugging engine (:mod:`toolkit.search.strategy`) over
a different set: the nodes *kept in fp32* instead of the nodes kept in a subgraph. Keeping
more nodes in fp32 only brings the model closer to fp32, so "the mixed model passes" is
monotone in that set, and the strategies' reasoning (prefixes in topological order contain
a needed node exactly when they reach past it, QuickXplain for the inner ones, a final
1-minimality check) carries over unchanged: the strategy's "check failed" is our
"comparison passed".

One check = build the candidate (fp16/bf16 storage emulated on the CPU for ``onnxrt:fp16``
and ``onnxrt:bf16``, the converted model otherwise), run it on the same inputs, compare with the reference outputs computed
once. Verdicts are remembered (and written to the replay file), so no set is checked twice.

No Typer or Rich here.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Set, Tuple

import numpy as np
import onnx

from toolkit.convert import fp16
from toolkit.core.graph.graphs import refuse_damaged
from toolkit.core.compare.arrays import compare_iteration
from toolkit.core.compare.tolerances import Tolerances
from toolkit.core.io.datafiles import load_outputs
from toolkit.core.errors import DependencyError, ExitCode, InferenceError, InputError, ToolkitError, UsageError
from toolkit.convert.shapes import hinted_shapes
from toolkit.core.inputs import generate_inputs, guessed_shapes, parse_val_ranges, select_feed
from toolkit.core.graph.constants import is_constant_node
from toolkit.core.graph.layerwise import set_outputs
from toolkit.core.io.model import check_output_path, check_readable_data, check_readable_file, graph_io_meta, load_model, save_model
from toolkit.core.compare.noise import STORAGE_FLOOR, noise_bound, passing_tolerance
from toolkit.core.files import paths
from toolkit.core.progress import Messages
from toolkit.core.shared_options import PER_NAME_FLAGS
from toolkit.search import strategy
from toolkit.search.outcome import SearchTally
from toolkit.search.masks import mask_indices, popcount
from toolkit.reduce.replay import Replay
from toolkit.precision.config import DEFAULT_TOLERANCE, PrecisionConfig
from toolkit.precision.replay import check_options, check_words, content_id
from toolkit.run.feeds import explain_generated
from toolkit.run.registry import get_kind
from toolkit.precision.running import emulates, run_spec, run_spec_bytes
from toolkit.precision.verdicts import describe, not_finite, overflows, same_shape, within_rounding
from toolkit.run.specs import parse_runner_spec, preflight_specs

TOOL = "toolkit debug precision"

STATUS_FOUND = "found"  # a minimal set of nodes to keep in fp32 was found
STATUS_NONE_NEEDED = "none-needed"  # the fp16 model passes as it is
# no node to search: the model computes nothing in float32 (double or integers only), or only in nodes
# that stay fp32 anyway (the quantization ops of a QOperator model, --keep-fp32)
STATUS_NOTHING = "nothing-to-search"
STATUS_FAILS_FP32 = "fails-in-fp32"  # even keeping every node in fp32 the comparison fails
STATUS_INTERRUPTED = "interrupted"
# the comparison fails at the tolerances given, by the rounding of reduced-precision storage alone
# (toolkit.core.compare.noise): the search keeps no node in fp32 for that; it says which tolerance would
# pass, and the verdict is a failure
STATUS_ROUNDING = "rounding"

@dataclass
class Check:
    number: int
    kept: int  # searched nodes kept in fp32
    passed: bool
    seconds: float
    worst: str = ""  # "max error 0.96 at y"
    remembered: bool = False
    # failed at the tolerances by reduced-precision rounding alone: the search keeps no node for it
    rounding: bool = False


@dataclass
class PrecisionOutcome(SearchTally):
    """What the search found (inherited: ``status``, one of the STATUS_ names; ``broken``: checks whose
    mixed model did not build, load or run, counted as failing; the checks, the time, the files written)."""

    precision: str = "fp16"  # what the rest of the model is in: fp16 or bf16
    kept: List[str] = field(default_factory=list)  # the nodes found (searched ones only)
    user_kept: List[str] = field(default_factory=list)
    auto_kept: Dict[str, str] = field(default_factory=dict)
    candidates: int = 0
    error_fp16: str = ""  # the comparison of the all-fp16 model
    error_result: str = ""
    passing_atol: Optional[float] = None  # STATUS_ROUNDING: an absolute tolerance at which the result passes
    noise_bound: Optional[float] = None  # the rounding bound (relative to each output's largest value)
    depth: int = 0  # the graph's depth (nodes on its longest path), for the noise bound
    shapes_guessed: List[str] = field(default_factory=list)  # inputs whose dynamic dims were set to 1

    @property
    def bisect_checks(self) -> int:
        """Checks a plain bisect over the searched nodes takes (for the documented bound)."""
        return int(math.ceil(math.log2(self.candidates))) if self.candidates > 1 else 1

    @property
    def cost_bound(self) -> int:
        """The documented bound on checks: a bisect plus twice the result."""
        return self.bisect_checks + 2 * len(self.kept)


class Reporter(Messages):
    """Receives progress (and ``info``/``warn``); the CLI renders it. Every method may be left as is."""

    def start(self, search: "PrecisionSearch") -> None:
        pass

    def check(self, check: Check) -> None:
        pass


class SetIndex:
    """What the strategies need of an index, for a plain set of nodes (no graph structure):
    every member may be dropped."""

    def __init__(self, size: int):
        self.size = size
        self.full_mask = (1 << size) - 1

    def sinks(self, mask: int) -> List[int]:
        return mask_indices(mask)

    def sources(self, mask: int) -> List[int]:
        return []


class PrecisionSearch:
    def __init__(self, config: PrecisionConfig, reporter: Optional[Reporter] = None,
                 feeds: Optional[Sequence[Mapping]] = None):
        """``feeds``: the input sets to compare on, when the caller has them (``convert --repair``
        searches on its check's sets); else from the config (loaded or generated)."""
        self.config = config
        self.reporter = reporter or Reporter()
        self.given_feeds = list(feeds) if feeds is not None else None
        self.fixed: Set[str] = set()
        self.checks: List[Check] = []
        self.verdicts: Dict[int, bool] = {}  # mask -> passed
        self.details: Dict[int, str] = {}
        self.replay: Optional[Replay] = None
        self.feeds: Sequence[Mapping] = []
        self.checks_remembered = 0
        self.broken = 0
        self._best: Optional[int] = None  # the smallest passing set so far (what Ctrl-C leaves)
        self.rounding: Dict[int, float] = {}  # sets that fail by rounding alone -> the atol they need
        self.depth = 1
        self._cluster: Any = None  # with --cluster: the Ray cluster the checks run on
        self._feeds_ref: Any = None

    # ------------------------------------------------------------------ set-up
    def _validate(self) -> None:
        c = self.config
        if c.mode not in (None, "default", "bisect", "linear"):
            raise UsageError(f"--mode {c.mode}: use bisect or linear (or leave it out)")
        self.tolerances = c.tolerances or Tolerances.of(atol=DEFAULT_TOLERANCE, rtol=DEFAULT_TOLERANCE)
        self.ref_spec = self._spec(c.reference)
        self.cand_spec = self._spec(c.candidate)
        self.dtype = self._candidate_dtype(c)
        if c.iterations < 1:
            raise UsageError("--iterations must be at least 1")
        self._check_paths(c)

    def _candidate_dtype(self, c: PrecisionConfig) -> str:
        """The reduced precision the candidate runner runs ("float16" or "bfloat16")."""
        low = get_kind(self.cand_spec[0]).reduced(self.cand_spec[1])
        if not low:
            raise UsageError(
                f"--compare {c.reference} {c.candidate}: the second runner must run reduced precision "
                "(onnxrt:fp16 or onnxrt:bf16 to emulate it on the CPU, or trt:fp16, trt:bf16)"
            )
        if len(low) > 1:
            raise UsageError(f"--compare {c.reference} {c.candidate}: search one precision at a time (fp16 or bf16)")
        return "bfloat16" if low == ["bf16"] else "float16"

    def _check_tolerance_names(self) -> None:
        """A per-output tolerance (``y:1e-3``) must name one of the model's outputs (exit 2)."""
        from toolkit.run.plan import require_known_names

        require_known_names(self.tolerances, self.graph_outputs, PER_NAME_FLAGS)

    @staticmethod
    def _check_paths(c: PrecisionConfig) -> None:
        _check_written(c)
        PrecisionSearch._check_overlaps(c)
        if c.model:
            check_readable_file(c.model)  # a missing file is said before the model is loaded
        for path in list(c.load_inputs) + [c.load_outputs or ""] + list(getattr(c, "validate_inputs", ())):
            if path and path != "-":
                check_readable_data(path)  # (a per-iteration folder too, as `run` reads it)
        # a missing backend, provider or device: exit 4 now, not after the reference ran (the
        # candidate runs on the cluster's nodes with --cluster, so only they can say)
        preflight_specs([c.reference] + ([] if c.cluster else [c.candidate]), c.model)

    @staticmethod
    def _check_overlaps(c: PrecisionConfig) -> None:
        """No file written is one read (nor the model's own)."""
        reads = [("--load-inputs", p) for p in c.load_inputs] + [("--load-outputs", c.load_outputs or "")]
        reads += [("--validate-inputs", p) for p in getattr(c, "validate_inputs", ())]  # (the Q/DQ search's)
        reads += _replay_read(c)
        writes = [("-o", c.output or ""), ("--save-debug-replay", c.save_replay or "")]
        paths.check_with_model(c.model, reads, writes, c.external_data_dir)

    @staticmethod
    def _spec(text: str):
        """(kind, options) of a runner spec (UsageError naming the valid ones)."""

        spec = parse_runner_spec(text)
        return spec.kind, dict(spec.options)

    def _load(self) -> None:
        c = self.config
        self.model = load_model(c.model, external_data_dir=c.external_data_dir)
        refuse_damaged(self.model, "converted")  # (once: every check's conversion skips it)
        self.types = fp16.tensor_types(fp16.infer_types(self.model))
        decision = fp16.decide(self.model, c.keep_fp32, types=self.types, dtype=self.dtype)  # names the nodes
        self.user_kept = fp16.resolve_keep(self.model, c.keep_fp32)
        self.auto_kept = {n: r for n, r in decision.kept.items() if n not in set(self.user_kept)}
        self.fixed = set(decision.kept)  # the nodes every check keeps in fp32 (the user's and the automatic ones)
        universe = self._searched_nodes()
        self.universe = universe
        self.position = {name: k for k, name in enumerate(universe)}
        # tensors watched for the first overflow (guided search): float outputs of top-level nodes
        self.graph_outputs = [o.name for o in self.model.graph.output]
        self._index_tensors()
        self.guide = emulates(self.cand_spec[0]) and self.config.mode in (None, "default")
        self.overflow: Dict[int, Optional[str]] = {}
        self.nothing_to_search = not universe  # (no float32 compute: double or integer only)
        self.index = SetIndex(len(universe))
        self._model_id = self._structure_id()

        from toolkit.run.diagnosis import topology_of  # the report code: not loaded by every command

        self.depth = max((n.depth for n in topology_of(self.model).nodes), default=1)

    def _index_tensors(self) -> None:
        """The producer of each float tensor of the top-level graph, the searched nodes that read each
        tensor, and the float tensors watched for the first overflow (not the graph's outputs)."""

        self.producer: Dict[str, str] = {}
        self.readers: Dict[str, List[str]] = {}  # top-level tensor -> the searched nodes that read it
        self.watch: List[str] = []
        for node in self.model.graph.node:
            if node.name in self.position:
                for i in set(filter(None, node.input)):
                    self.readers.setdefault(i, []).append(node.name)
            if node.op_type != "Constant":
                self._add_producer(node)

    def _add_producer(self, node) -> None:
        """``node`` produces its float outputs; those not graph outputs are watched."""
        for o in filter(self._is_float, node.output):
            self.producer[o] = node.name
            if o not in self.graph_outputs:
                self.watch.append(o)

    def _is_float(self, name: str) -> bool:
        """``name`` is a float32 tensor (not an omitted optional one)."""
        return bool(name) and self.types.get(name) == fp16.FLOAT

    def _searched_nodes(self) -> List[str]:
        """The nodes searched, in graph order: those not kept in fp32 anyway whose precision matters."""
        return [n.name for n in fp16.iter_nodes(self.model) if n.name not in self.fixed and self._searchable(n)]

    def _searchable(self, node) -> bool:
        """Whether keeping ``node`` in fp32 can change what the model computes: it makes a float32
        tensor, or reads one to make something else (a comparison, an ArgMax: its result depends on
        the values' precision; not Shape or Size, which read only shapes)."""
        if is_constant_node(node):
            return False
        if any(map(self._is_float, node.output)):
            return True
        return node.op_type not in ("Shape", "Size") and any(map(self._is_float, node.input))

    def _structure_id(self) -> str:  # (the searched names; a replay adds the content: content_id)
        names = b"".join(name.encode() + b"\0" for name in self.universe)
        return hashlib.sha256(names + f"{self.config.reference}\0{self.config.candidate}".encode()).hexdigest()[:16]

    def _feeds(self) -> Sequence[Mapping]:
        c = self.config
        metas, _ = graph_io_meta(self.model)
        self.guessed: List[str] = []  # notes: inputs whose dynamic dims were set to 1
        if self.given_feeds is not None:
            return self.given_feeds
        if c.load_inputs:
            return _loaded_feeds(c.load_inputs, metas)
        return self._generated_feeds(metas)

    def _generated_feeds(self, metas) -> Sequence[Mapping]:
        """Generated input sets (--seed, --val-range, --input-shapes); the shapes guessed are noted."""
        c = self.config
        generated, notes = generate_inputs(
            metas,
            iterations=c.iterations,
            seed=c.seed,
            ranges=parse_val_ranges(c.val_range),
            shapes=hinted_shapes(self.model, metas, c.input_shapes, self.reporter),
        )
        self.guessed = guessed_shapes(notes)
        for n in notes:
            (self.reporter.warn if n in self.guessed else self.reporter.info)(n)
        return generated

    # ------------------------------------------------------------------ running models
    def _run_here(self, model, kind: str, spec_opts: Mapping, feeds: Sequence[Mapping]) -> List[Dict]:
        """Run ``model`` (a ModelProto) here with the runner ``kind`` (:func:`run_spec`)."""
        return run_spec(model, kind, spec_opts, feeds, self.config.model, self.config.external_data_dir)

    def _run_candidate(self, model, kind: str, spec_opts: Mapping) -> List[Dict]:
        """One check's run: here, or as a task on the Ray cluster (``--cluster``)."""
        if not self.config.cluster:
            return self._run_here(model, kind, spec_opts, self.feeds)
        if self._cluster is None:
            from toolkit.reduce.cluster import open_for_calls

            self._cluster = open_for_calls(
                self.config.cluster, gpus=self.config.gpus_per_check, cpus=self.config.cpus_per_check,
                gpu_check=get_kind(kind).uses_gpu(spec_opts), log=self.reporter.info,
            )
            self._feeds_ref = self._cluster.put(list(self.feeds))
        args = (model.SerializeToString(), kind, dict(spec_opts), self._feeds_ref, self.config.model,
                self.config.external_data_dir)
        return self._cluster.call(run_spec_bytes, *args)

    def _reference(self, feeds) -> List[Dict]:
        if self.config.load_outputs:
            self.guide = False  # no reference tensors to find the first overflow with
            return self._loaded_reference(self.config.load_outputs, feeds)
        kind, opts = self.ref_spec
        if get_kind(kind).reduced(opts):
            raise UsageError(f"--compare {self.config.reference}: the reference runner must run fp32")
        try:
            if emulates(kind):
                outs = self._run_here(self._marked(self.model), kind, opts, feeds)
                return self._split(outs)
            self.guide = False
            return self._run_here(self.model, kind, opts, feeds)
        except InferenceError as exc:  # the fp32 model does not run on these inputs
            if self.config.load_inputs:
                raise
            raise explain_generated(exc, real_data="--load-inputs") from None

    def _marked(self, model, copy: bool = True):
        """``model`` (a copy) returning the watched tensors too, when the search is guided."""

        if not self.guide:
            return model
        if copy:
            m = onnx.ModelProto()
            m.CopyFrom(model)
            model = m
        set_outputs(model, self.graph_outputs + self.watch)
        return model

    def _split(self, outs: List[Dict]) -> List[Dict]:
        """Keep the graph outputs; remember where the reference's watched tensors are finite."""

        if self.guide:
            self.ref_finite = [{n: np.isfinite(o[n]) for n in self.watch if n in o} for o in outs]
        return self._graph_outputs_of(outs)

    def _graph_outputs_of(self, outs: List[Dict]) -> List[Dict]:
        """Each iteration's graph outputs (the watched tensors left out)."""
        return [{n: o[n] for n in self.graph_outputs if n in o} for o in outs]

    def _first_overflow(self, outs: List[Dict], mask: int = 0) -> Optional[str]:
        """The node to keep in fp32 for the first watched tensor (in node order) that converted nodes
        read as inf/nan where the reference is finite: its producer; or, when ``mask`` keeps that
        producer in fp32 already (its own output is finite, but the reduced copy its converted
        readers get is not), the first of those readers not kept yet."""

        kept = self.fixed | {self.universe[i] for i in mask_indices(mask)}
        for name in self.watch:
            culprit, overflowed = self._suspect(name, kept)
            if culprit and self._shows(name, outs, overflowed):
                return culprit
        return None

    def _suspect(self, name: str, kept: Set[str]):
        """The node to keep in fp32 when watched tensor ``name`` overflows (None: none left), and where
        its values count as overflowed: the producer's output non-finite, or (the producer kept
        already) the values past what reduced precision stores, for the first reader not kept."""

        producer = self.producer.get(name)
        if producer not in kept:
            return producer, not_finite
        readers = [r for r in self.readers.get(name, ()) if r not in kept]
        return (readers[0] if readers else None), lambda got: overflows(got, self.dtype)

    def _shows(self, name: str, outs: List[Dict], overflowed) -> bool:
        """Whether some iteration's ``name`` is ``overflowed`` where the reference's is finite."""

        for k, o in enumerate(outs):
            got = o.get(name)
            fin = self.ref_finite[k].get(name) if k < len(self.ref_finite) else None
            if same_shape(got, fin) and (fin & overflowed(got)).any():
                return True
        return False

    def _loaded_reference(self, path: str, feeds) -> List[Dict]:
        results = load_outputs(path)
        if not len(results):
            raise InputError(f"{path}: holds no runner's outputs")
        name, iters = results.runs[0]
        if len(iters) != len(feeds):  # (either way the outputs cannot be told to belong to these inputs)
            raise InputError(
                f"--load-outputs {path}: {name} has {len(iters)} iteration(s) but {len(feeds)} input set(s) are "
                "compared; give the inputs that produced it (--load-inputs, or the --iterations and --seed it was "
                "made with)"
            )
        _, outs = graph_io_meta(self.model)
        wanted = [o.name for o in outs]
        return [_loaded_outputs(iters[k].outputs, wanted, f"{path}: iteration {k} of {name}") for k in range(len(feeds))]

    def candidate_model(self, keep: Sequence[str]):
        """The model a check runs for ``keep`` (node names kept in fp32 beside the fixed ones)."""

        kind, _opts = self.cand_spec
        names = list(self.user_kept) + list(keep)
        if emulates(kind):
            cache = self._rounded  # each weight rounded once for the whole search
            if self.guide:
                marked = self._marked(self.model)
                return fp16.emulate(marked, names, inplace=True, types=self.types, cache=cache, dtype=self.dtype).model
            return fp16.emulate(self.model, names, types=self.types, cache=cache, dtype=self.dtype).model
        return fp16.convert(self.model, names, dtype=self.dtype, check_data=False).model  # (checked by _load)

    def _compare(self, outs: List[Dict]):
        return [compare_iteration(k, ref, got, self.tolerances) for k, (ref, got) in enumerate(zip(self.ref_outs, outs))]

    def _describe(self, comps) -> str:
        """A check's comparison in words (the worst output)."""
        return describe(comps)

    def passes(self, mask: int) -> bool:
        """Does the model with ``mask``'s nodes kept in fp32 pass the comparison? (remembered)"""

        if mask in self.verdicts:
            self.checks_remembered += 1
            return self.verdicts[mask]

        t0 = time.perf_counter()
        outs = self._run_mixed(mask)
        strict = outs is not None and self._judge(mask, outs)
        seconds = time.perf_counter() - t0
        passed = strict or mask in self.rounding
        self.verdicts[mask] = passed
        if passed:
            self._note_passing(mask)
        self._record(mask, strict, passed, seconds)
        return passed

    def _note_passing(self, mask: int) -> None:
        """Remember passing ``mask`` when it is the smallest passing set so far (what Ctrl-C leaves)."""
        if self._best is None or popcount(mask) < popcount(self._best):
            self._best = mask

    def _run_mixed(self, mask: int) -> Optional[List[Dict]]:
        """The candidate's outputs with ``mask``'s nodes kept in fp32; None when the mixed model does
        not build, load or run (counted as broken; on the first check, the error is raised)."""

        keep = [self.universe[i] for i in mask_indices(mask)]
        built = False
        try:
            model = self.candidate_model(keep)
            built = True
            kind, opts = self.cand_spec
            return self._run_candidate(model, kind, opts)
        except DependencyError:
            raise
        except ToolkitError as exc:
            if not self.checks:  # on the first check: nothing can be searched
                if built and exc.exit_code == ExitCode.BAD_INPUT:
                    self._own_copy_failed(exc)
                raise
            self.broken += 1
            self.details[mask] = f"broken: {exc.message}"
            return None

    def _judge(self, mask: int, outs: List[Dict]) -> bool:
        """Whether the candidate's outputs pass (strictly, at the tolerances given); notes the first
        overflow (guided search) and the comparison in words."""

        if self.guide:
            self.overflow[mask] = self._first_overflow(outs, mask)
            outs = self._graph_outputs_of(outs)
        comps = self._compare(outs)
        passed = all(c.passed and not c.only_a for c in comps)
        self.details[mask] = self._describe(comps)
        if not passed and self._rounding_only(mask, comps):
            # a failure at the tolerances given, by storage rounding alone: the search keeps no node
            # in fp32 for it (it goes on as if the set passed), and the result is no pass either
            # (STATUS_ROUNDING, exit 1)
            self.details[mask] += f" ({self._precision} rounding)"
        return passed

    def _record(self, mask: int, strict: bool, passed: bool, seconds: float) -> None:
        """One check done: into the list of checks, the replay file and the report."""

        detail = self.details[mask]
        if self.guide and not passed and self.overflow.get(mask):
            detail += f" | first overflow: output of {self.overflow[mask]}"
        check = Check(len(self.checks) + 1, popcount(mask), strict, seconds, detail, rounding=mask in self.rounding)
        self.checks.append(check)
        if self.replay is not None:
            self._add_to_replay(self.replay, check, mask, passed)
        self.reporter.check(check)

    def _add_to_replay(self, replay: Replay, check: Check, mask: int, passed: bool) -> None:
        # the replay stores "failed" as debug reduce does: here, the mixed model failed
        replay.add(check.number, (mask << 1) | 1, check.kept, not passed, check.seconds)
        if self.guide and replay.entries:
            # where the first overflow was: lets a replayed run take the same guided path
            replay.entries[-1]["overflow"] = self.overflow.get(mask)
        if self.config.save_replay:
            replay.save(self.config.save_replay)

    def _own_copy_failed(self, exc: ToolkitError) -> None:
        """The first check's emulated copy, built, does not load where the model itself ran (the
        reference): the copy is toolkit's, so that is a bug in toolkit (exit 70), not bad input."""
        if not emulates(self.cand_spec[0]) or self.config.load_outputs:
            return  # (a converted model on another runtime: that runtime's limit; no reference run here)
        raise ToolkitError(
            f"toolkit's {self._precision}-emulated copy of {self.config.model} does not load in ONNX-Runtime, "
            f"where the model itself ran: {exc.message}; this is a bug in toolkit, not in the model",
            exit_code=ExitCode.INTERNAL,
        ) from None

    @property
    def _precision(self) -> str:
        return "bf16" if self.dtype == "bfloat16" else "fp16"

    def _rounding_only(self, mask: int, comps) -> bool:
        """Whether every failing output is off by no more than the rounding of reduced-precision
        storage through the graph's depth (toolkit.core.compare.noise.noise_bound, relative to the output's
        largest reference value); remembers the atol that would pass."""

        bound = noise_bound(STORAGE_FLOOR[self._precision], self.depth)
        if any(it.only_a or it.only_b for it in comps):
            return False
        failing = self._failing(comps)
        if not all(within_rounding(ref, o, bound) for ref, o in failing):
            return False
        self.rounding[mask] = max((o.max_abs for _, o in failing), default=0.0)
        return True

    def _failing(self, comps) -> List[tuple]:
        """(the reference's value, the output) of each failing output of the comparisons ``comps``."""
        return [(self.ref_outs[k].get(o.name), o) for k, it in enumerate(comps) for o in it.outputs if not o.passed]

    # ------------------------------------------------------------------ the search
    def run(self) -> PrecisionOutcome:
        try:
            return self._run()
        finally:
            if self._cluster is not None:
                self._cluster.close()
                self._cluster = None

    def _run(self) -> PrecisionOutcome:
        t0 = time.perf_counter()
        self._best = None
        self.broken = 0
        self._rounded: Dict[str, bytes] = {}
        self._validate()
        self._load()
        self._check_tolerance_names()
        if getattr(self, "nothing_to_search", False):
            return PrecisionOutcome(STATUS_NOTHING, precision=self._precision,
                                    user_kept=list(self.user_kept), auto_kept=dict(self.auto_kept),
                                    seconds=time.perf_counter() - t0)
        self.checks_remembered = 0
        self.feeds = self._feeds()
        self._open_replay()
        self.reporter.start(self)
        self.ref_outs = self._reference(self.feeds)
        out = PrecisionOutcome(
            STATUS_FOUND,
            precision=self._precision,
            user_kept=list(self.user_kept),
            auto_kept=dict(self.auto_kept),
            candidates=len(self.universe),
            replay_path=self.config.save_replay,
            shapes_guessed=list(self.guessed),
        )
        best = self._find(out)
        if best is not None:
            self._keep(out, best)
        self._note_rounding(out, best)
        out.broken = self.broken
        out.checks = len(self.checks)
        out.remembered = self.checks_remembered
        out.seconds = time.perf_counter() - t0
        return out

    def _find(self, out: PrecisionOutcome) -> Optional[int]:
        """The set to keep in fp32 (None: none passes); sets ``out``'s status and errors. On Ctrl-C,
        the smallest passing set so far."""

        try:
            if self.passes(0):
                out.status = STATUS_NONE_NEEDED
                out.error_fp16 = out.error_result = self.details[0]
                return 0
            out.error_fp16 = self.details[0]
            result = self._search()
            if result is None or not self.passes(result):  # the full set fails: not fp16's doing
                out.status = STATUS_FAILS_FP32
                out.error_result = self.details.get(result if result is not None else self.index.full_mask, "")
                return None
            out.error_result = self.details[result]
            out.one_minimal = self._one_minimal(result)
            return result
        except KeyboardInterrupt:
            out.status = STATUS_INTERRUPTED
            return self._best

    def _keep(self, out: PrecisionOutcome, best: int) -> None:
        """The result ``best`` into ``out`` (and -o)."""

        out.kept = [self.universe[i] for i in mask_indices(best)]
        if out.status == STATUS_INTERRUPTED:
            out.error_result = self.details.get(best, "")
        if self.config.output:
            self._write_output(out)
            out.output_written = True

    def _write_output(self, out: PrecisionOutcome) -> None:
        """-o: the mixed-precision model with ``out.kept`` in fp32."""
        mixed = fp16.convert(self.model, list(self.user_kept) + out.kept, dtype=self.dtype, check_data=False).model
        save_model(mixed, self.config.output or "")

    def _note_rounding(self, out: PrecisionOutcome, best: Optional[int]) -> None:
        """A result that fails at the tolerances given by rounding alone (see :meth:`_rounding_only`):
        status (a failure), the atol at which it passes."""

        out.depth = self.depth
        if best is not None and best in self.rounding and out.status in (STATUS_FOUND, STATUS_NONE_NEEDED):
            out.status = STATUS_ROUNDING
            out.passing_atol = passing_tolerance(self.rounding[best])
            out.noise_bound = noise_bound(STORAGE_FLOOR[self._precision], self.depth)

    # the search proper
    def _drive(self, gen, to_full=None) -> int:
        """Answer a strategy's questions; ``to_full`` maps its masks onto ours."""
        to_full = to_full or (lambda m: m)
        try:
            mask = next(gen)
            while True:
                mask = gen.send(self.passes(to_full(mask)))
        except StopIteration as stop:
            return to_full(stop.value)

    def _search(self) -> Optional[int]:
        """The set of nodes to keep in fp32.

        Default (guided) mode: while the check shows an overflow (a tensor infinite or NaN where
        the reference is finite), keep the node producing the first such tensor in fp32 and check
        again -- one check per node needed; then the reduce engine's 1-minimality loop
        (:func:`toolkit.search.strategy.drop_loop`) removes what was not needed. When no
        overflow explains the failure (precision lost without overflow), the engine's default
        search (bisect, QuickXplain) runs over the other nodes, then the same 1-minimality loop.
        ``--mode bisect|linear``: the engine's strategy alone, over all nodes.
        """

        # before a search of many checks, every node in fp32: when even that fails, none can succeed
        if not self.guide:
            if not self._all_fp32_passes():
                return None
            plan = strategy.Plan(self.index)
            return self._drive(strategy.STRATEGIES[self.config.mode](plan))
        kept = self._follow_overflows()
        if not self.passes(kept):
            return self._search_rest(kept)
        return self._minimize(kept)

    def _follow_overflows(self) -> int:
        """Keep the node of the first overflow in fp32 while checks show one (guided search)."""

        kept = 0
        while not self.passes(kept):
            node = self.overflow.get(kept)
            pos = self.position.get(node) if node else None
            if pos is None or (kept >> pos) & 1:
                break
            kept |= 1 << pos
        return kept

    def _search_rest(self, kept: int) -> Optional[int]:
        """The failure ``kept`` does not explain by overflow: the engine's default search over the
        other nodes (beside ``kept``), then the 1-minimality loop."""

        rest = [i for i in range(self.index.size) if not (kept >> i) & 1]
        if not rest:
            return kept
        if not self._all_fp32_passes():
            return None

        def to_full(m: int, rest=rest, kept=kept) -> int:
            return kept | sum(1 << rest[i] for i in mask_indices(m))

        plan = strategy.Plan(SetIndex(len(rest)))
        kept = self._drive(strategy.default(plan), to_full)
        return self._minimize(kept) if self.passes(kept) else kept

    def _minimize(self, kept: int) -> int:
        """The 1-minimality loop: drop from a passing ``kept`` what is not needed."""

        if popcount(kept) > 1:
            plan = strategy.Plan(self.index)
            kept = self._drive(strategy.drop_loop(plan, kept, interior=False))
        return kept

    def _all_fp32_passes(self) -> bool:
        """Every node kept in fp32 passes (checked only for the emulation: a TensorRT candidate
        with no reduced-precision tensor left may still build in reduced precision)."""
        return not emulates(self.cand_spec[0]) or self.passes(self.index.full_mask)

    def _one_minimal(self, mask: int) -> bool:
        """Known (from verdicts already in hand) that dropping any one node makes it fail."""

        return all(self.verdicts.get(mask & ~(1 << i)) is False for i in mask_indices(mask))

    def replay_check(self) -> List[str]:  # (what a replay's verdicts answer: as words, and normalized)
        return check_words(self.config)

    def replay_options(self) -> Dict[str, Any]:
        return check_options(self)

    def _open_replay(self) -> None:
        """Replay entries key a set as (mask << 1) | 1, so "nothing kept" is a valid entry."""
        c, n = self.config, len(self.universe) + 1
        ident = f"{self._model_id}-{content_id(self)}" if c.load_replay or c.save_replay else ""
        if c.load_replay:
            self.replay = self._load_replay(c.load_replay, ident, n)
        elif c.save_replay:
            self.replay = PrecisionReplay(ident, n, self.replay_check(), self.replay_options())

    def _load_replay(self, path: str, ident: str, n: int) -> Replay:
        """The replay file's verdicts, and where each check's first overflow was."""
        replay = PrecisionReplay.load(path, ident, n, options=self.replay_options())
        for m, failed in replay.verdicts.items():
            self.verdicts[m >> 1] = not failed
            self.details.setdefault(m >> 1, "(from the replay file)")
        with open(path, encoding="utf-8") as f:
            raw = json.load(f)["entries"]
        for entry, kept in zip(raw, replay.entries):
            if "overflow" in entry:
                kept["overflow"] = name = entry["overflow"]
                self.overflow[int(entry["nodes"], 16) >> 1] = name if name in self.position else None
        return replay


def _check_written(c: PrecisionConfig) -> None:
    """-o and --save-debug-replay name files that can be written (not stdout)."""
    for path in filter(None, (c.output, c.save_replay)):
        if path == "-":
            raise UsageError("debug precision writes files; give a file name, not '-'")
        check_output_path(path)


def _replay_read(c: PrecisionConfig) -> List[Tuple[str, str]]:
    """--load-debug-replay as a file read, unless it is the one --save-debug-replay writes (a run resumed in place)."""
    if not c.load_replay or (c.save_replay and paths.same_file(c.load_replay, c.save_replay)):
        return []
    return [("--load-debug-replay", c.load_replay)]


def _loaded_feeds(files: Sequence[str], metas) -> List[Mapping]:
    """The input sets of --load-inputs files, in order (InputError: none)."""
    from toolkit.core.io.datafiles import load_inputs

    feeds: List[Mapping] = [select_feed(feed, metas, source=path, iteration=k) for path in files
                            for k, feed in enumerate(load_inputs(path))]
    if not feeds:
        raise InputError(f"{', '.join(files)}: no iterations")
    return feeds


def _loaded_outputs(got: Mapping, wanted: List[str], where: str) -> Dict:
    """The ``wanted`` outputs of one loaded iteration ``got`` (InputError naming ``where`` when some are missing)."""
    missing = [n for n in wanted if n not in got]
    if missing:
        raise InputError(f"{where} has no output {', '.join(missing)}")
    return {n: got[n] for n in wanted}


class PrecisionReplay(Replay):
    tool, options_first = TOOL, True

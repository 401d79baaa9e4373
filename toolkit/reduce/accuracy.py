"""``debug reduce --compare REF TEST``: the built-in accuracy check.

No ``--check``, no golden file to prepare:

1. the reference model (``--reference-model``, default the model itself) runs once on the
   reference runner (a runner spec, default ``onnxrt``) with every tensor marked as an
   output; its values stay in this process's memory, registered with
   :func:`toolkit.core.io.datafiles.hold_in_memory` (temp ``.npz`` files beyond
   :data:`MEMORY_LIMIT`, or when a device runner computes them in a child process);
2. each candidate subgraph runs in the warm worker (a fork of this process, which holds
   the values already) on the runner under test, fed with the reference's values
   for its inputs; only the candidate's outputs are compared, at the tolerances given
   (:class:`toolkit.core.compare.tolerances.Tolerances`), exactly as ``toolkit run --load-outputs`` compares them (same
   output, same exit codes, so the same verdict classes and evidence as any toolkit check).

With a separate reference model, tensor names shared by both are compared. A tensor the
reference lacks that a candidate needs as an input gets the value the model itself
computes on the reference runner (its dtype follows the model's), so every candidate can
run; outputs the reference lacks are not compared.

No Typer or Rich here.
"""

from __future__ import annotations

import functools
import math
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from toolkit.core.compare.arrays import compare_iteration
from toolkit.core.compare.tolerances import Tolerances
from toolkit.core.io.datafiles import (
    IterationResult,
    RunResults,
    hold_in_memory,
    load_data,
    load_inputs,
    load_outputs,
    release,
    save_inputs,
    save_outputs,
)
from toolkit.core.errors import InputError, ToolkitError, UsageError
from toolkit.core.inputs import parse_val_ranges
from toolkit.core.process.supervise import run_in_child
from toolkit.core.shared_options import InputData
from toolkit.core.compare.noise import ULPS, amplification, is_rounding, noise_bound, precision_of, storage_floor
from toolkit.reduce.check import WarmRunner, WorkerEntry, run_in_process
from toolkit.reduce.evidence import Findings
from toolkit.reduce.deployed import DeployedRun, deployed_options, marking_changes, per_subgraph_options
from toolkit.search.masks import popcount
from toolkit.reduce.guide import rank
from toolkit.reduce.reference_graph import needs_own_run
from toolkit.reduce.verdict import CheckResult
from toolkit.run.feeds import FeedSource, infer_explained, load_feeds
from toolkit.run.options import RunOptions
from toolkit.run.registry import get_kind, mark_all_outputs
from toolkit.run.specs import make_runner, parse_runner_spec

DEFAULT_REFERENCE = "onnxrt"
FORK_ENV = "TOOLKIT_FORK_CHECKS"
# --compare-tensors: "outputs" compares a candidate's outputs; "all" every tensor of it the reference
# has, so a fault is found even where the model's outputs hide it (a saturating Sigmoid)
COMPARE_TENSORS = ("outputs", "all")  # set to 1: every --compare check runs in a forked worker


@dataclass
class CompareOptions(InputData):
    """What ``--compare`` and its companions ask for (the tolerances parsed where the command line reads them)."""

    reference: str = DEFAULT_REFERENCE  # runner spec
    test: str = DEFAULT_REFERENCE
    reference_model: Optional[str] = None
    tolerances: Tolerances = field(default_factory=Tolerances)
    input_shapes: Mapping[str, tuple] = field(default_factory=dict)  # (the inputs: inherited)
    external_data_dir: Optional[str] = None
    tensors: str = "outputs"  # --compare-tensors: a candidate's outputs only, or all its tensors

    @classmethod
    def from_words(cls, words: Sequence[str], **kw) -> "CompareOptions":
        """``--compare TEST`` (reference ``onnxrt``) or ``--compare REF TEST``."""
        words = [w for w in words if w.strip()]
        if len(words) == 1:
            return cls(reference=DEFAULT_REFERENCE, test=words[0], **kw)
        if len(words) == 2:
            return cls(reference=words[0], test=words[1], **kw)
        raise UsageError(
            "--compare takes the runner under test, or the reference runner and then the runner under test, "
            "e.g. --compare onnxrt onnxrt:fp16"
        )

    def validate(self) -> None:
        """Usage errors before any work: runner specs, value ranges."""

        if self.tensors not in COMPARE_TENSORS:
            raise UsageError(f"--compare-tensors takes {' or '.join(COMPARE_TENSORS)}, got '{self.tensors}'")
        parse_runner_spec(self.reference)
        parse_runner_spec(self.test)
        parse_val_ranges(self.val_range)


@dataclass
class Reference:
    """The reference values, on disk in ``folder`` (removed by :meth:`close`)."""

    folder: str
    inputs_path: str  # what candidates are fed: every tensor, in the model's dtypes
    outputs_path: str  # what candidate outputs are compared against
    label: str
    iterations: int = 0
    tensors: int = 0
    missing: List[str] = field(default_factory=list)  # model tensors the reference model lacks
    seconds: float = 0.0
    held: List[str] = field(default_factory=list)  # names of values held in memory
    nbytes: int = 0
    in_memory: bool = True  # hold values in memory (else temp .npz files)
    # the reference model's outputs as the reference runner runs it deployed (nothing marked), and
    # how marking every tensor changes them ('' when it does not)
    deployed_path: str = ""
    marking: str = ""
    marking_matters: bool = False  # the change is beyond the comparison's tolerances

    def close(self) -> None:
        for path in self.held:
            release(path)
        self.held = []
        shutil.rmtree(self.folder, ignore_errors=True)


# ---------------------------------------------------------------------- the reference


def feed_source(opts: CompareOptions, notes: Callable[[str], None], loaded=None):
    where: list = []
    if loaded is None and opts.load_inputs:
        loaded, where = load_feeds(opts.load_inputs)
    elif loaded is not None:
        where = [("the values of the reference model", k) for k in range(len(loaded))]
    return FeedSource(
        loaded,
        where,
        seed=opts.seed if opts.seed is not None else 1,
        ranges=parse_val_ranges(opts.val_range),
        shapes=dict(opts.input_shapes),
        # generation notes name run's option; debug reduce spells it --model-input-shapes
        notes=lambda note: notes(note.replace("--input-shapes ", "--model-input-shapes ")),
    )


def every_tensor(spec: str, model: str, feeds, opts: CompareOptions, name: Optional[str] = None):
    """Yield ``(feed, outputs)`` per iteration: ``model`` on runner ``spec``, every tensor marked."""

    base = mark_all_outputs(RunOptions(model, external_data_dir=opts.external_data_dir))
    runner = make_runner(spec, model, base=base, name=name)
    with runner:
        metas = runner.input_metadata()
        for feed in feeds.feeds(metas, runner.preferred_shapes()):
            yield feed, infer_explained(runner, feed, feeds, "--model-input-shapes")


def _cast_like(value, like):
    if like is None or getattr(value, "dtype", None) == like.dtype:
        return value
    if value.dtype.kind in "fc" and like.dtype.kind in "fc":
        return np.asarray(value).astype(like.dtype)
    return value


MEMORY_LIMIT = 2 << 30  # reference values up to this size stay in memory; more go to a temp .npz


def isolated_reference(spec: str) -> bool:
    """Whether the reference must run in a child process: a runner that may open a device
    context (TensorRT, a GPU provider or device), which forked checks must never inherit."""

    return not parse_runner_spec(spec).in_process()


def compute_reference(
    model: str, opts: CompareOptions, notes: Callable[[str], None] = lambda _m: None, *, isolate=None
) -> Reference:
    """Run the reference once and keep its values where every check can read them: in this
    process's memory, or (``isolate``, default for device runners) computed in a child process
    and read lazily from temp ``.npz`` files, so this process never opens a device context."""
    isolate = isolated_reference(opts.reference) if isolate is None else isolate
    if isolate:
        return _reference_in_child(model, opts, notes)
    return _compute(model, opts, notes)


_REFERENCE_FIELDS = ("inputs_path", "outputs_path", "label", "iterations", "tensors", "missing", "seconds", "nbytes",
                     "deployed_path", "marking", "marking_matters")


def _reference_in_child(model: str, opts: CompareOptions, notes) -> Reference:
    """The reference computed in a child (a device's context never opens in this process): its
    :class:`Reference` comes back typed through the child's pipe, an error it raises is raised here."""
    folder = tempfile.mkdtemp(prefix="toolkit-compare-")
    try:
        outcome = run_in_child(_reference_work, model, opts, notes, os.path.join(folder, "data"))
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    if outcome.crashed:
        shutil.rmtree(folder, ignore_errors=True)
        raise ToolkitError(f"the reference run died ({outcome.signal_name})", 1)
    return Reference(folder, **{k: getattr(outcome.value, k) for k in _REFERENCE_FIELDS})


def _reference_work(_phase, model: str, opts: CompareOptions, notes, data: str) -> Reference:  # pragma: no cover - child
    os.makedirs(data)
    return _compute(model, opts, notes, folder=data, in_memory=False)


def _compute(
    model: str, opts: CompareOptions, notes, *, folder: Optional[str] = None, in_memory: bool = True
) -> Reference:
    t0 = time.monotonic()
    ref_model = opts.reference_model or model
    label = f"reference {opts.reference}"
    ref = Reference(folder or tempfile.mkdtemp(prefix="toolkit-compare-"), "", "", label)
    ref.in_memory = in_memory
    deployed_run = None
    try:
        own_run = ref_model != model and needs_own_run(model, ref_model)  # (and the inputs match)
        deployed_run = DeployedRun(opts.reference, ref_model, opts,
                                   lambda loaded: feed_source(opts, lambda _m: None, loaded=loaded))
        ref_runs = every_tensor(opts.reference, ref_model, feed_source(opts, notes), opts, name=label)
        golden = [{**feed, **outs} for feed, outs in ref_runs]
        _hold_values(ref, golden, _own_values(model, opts, golden, ref, notes) if own_run else None)
        _hold_deployed(ref, golden, deployed_run.result(golden), opts)
    except BaseException:
        if deployed_run is not None:
            deployed_run.close()
        ref.close()
        raise
    ref.seconds = time.monotonic() - t0
    return ref


def _hold_values(ref: Reference, golden: List[Dict], inputs: Optional[List[Dict]]) -> None:
    """Hold the reference's values ``golden`` and, when the model's own run gave them, the
    values candidates are fed (``inputs``; else the reference's values are)."""
    ref.iterations = len(golden)
    ref.tensors = len(inputs[0] if inputs else golden[0]) if golden else 0
    outputs = _as_results(ref.label, golden)
    ref.nbytes = _nbytes(outputs) + (_nbytes(inputs) if inputs is not None else 0)
    ref.outputs_path = _hold(ref, "reference", outputs)
    ref.inputs_path = _hold(ref, "reference_inputs", inputs) if inputs is not None else ref.outputs_path


def _hold_deployed(ref: Reference, golden: List[Dict], deployed: List[Dict], opts: CompareOptions) -> None:
    """Hold the reference model's outputs as deployed (nothing marked), and what marking changed."""
    ref.marking = marking_changes(golden, deployed)
    ref.marking_matters = bool(ref.marking) and _beyond_tolerance(golden, deployed, opts)
    ref.deployed_path = _hold(ref, "deployed", _as_results(ref.label, deployed))


def _as_results(label: str, values: Sequence[Mapping]) -> RunResults:
    return RunResults([(label, [IterationResult(v, 0.0, label) for v in values])])


def _beyond_tolerance(marked: Sequence[Mapping], deployed: Sequence[Mapping], opts: CompareOptions) -> bool:
    """Whether the deployed outputs differ from the marked ones beyond the comparison's tolerances."""
    tol = opts.tolerances
    for k, (ref, dep) in enumerate(zip(marked, deployed)):
        if not compare_iteration(k, dep, {n: ref[n] for n in dep if n in ref}, tol).passed:
            return True
    return False


def _nbytes(data) -> int:
    feeds = [it.outputs for _n, its in data.runs for it in its] if isinstance(data, RunResults) else data
    return sum(getattr(v, "nbytes", 0) for feed in feeds for v in feed.values())


def _hold(ref: Reference, name: str, data) -> str:
    """Keep ``data`` in memory under a name ``load_data`` knows, or in a temp .npz when it is huge."""

    if ref.in_memory and _nbytes(data) <= MEMORY_LIMIT:
        path = f"<memory>/{name}"
        hold_in_memory(path, data)
        ref.held.append(path)
        return path
    path = os.path.join(ref.folder, name + ".npz")
    (save_outputs if isinstance(data, RunResults) else save_inputs)(path, data)
    return path


def _own_values(model: str, opts: CompareOptions, golden: Sequence[Mapping], ref: Reference, notes) -> List[Dict]:
    """What candidates are fed: the reference's values (in the model's dtypes) where it has
    them, else the model's own values on the reference runner."""
    feeds = [dict(values) for values in golden]
    own = every_tensor(opts.reference, model, feed_source(opts, notes, loaded=feeds), opts, name="model")
    inputs: List[Dict] = []
    missing: Dict[str, None] = {}
    shared = 0
    for ref_values, (own_feed, own_outs) in zip(golden, own):
        values = dict(own_feed)
        for name, value in own_outs.items():
            if name in ref_values:
                values[name] = _cast_like(ref_values[name], value)
                shared += 1
            else:
                values[name] = value
                missing.setdefault(name, None)
        inputs.append(values)
    if not shared:
        raise InputError(
            f"{opts.reference_model}: shares no tensor name with the model beyond its inputs, so nothing "
            "can be compared; --reference-model needs a model whose tensors keep their names"
        )
    ref.missing = list(missing)
    return inputs


# ---------------------------------------------------------------------- the check


def run_options(model: str, opts: CompareOptions, ref: Reference, mark: bool = False, **extra):
    """The ``toolkit run`` of ``model`` on the runner under test, fed and judged by the reference;
    every tensor marked with ``mark`` or ``--compare-tensors all``."""

    run = RunOptions(
        model,
        runners=[opts.test],
        load_inputs=[ref.inputs_path],
        load_outputs=[ref.outputs_path],
        tolerances=opts.tolerances,
        diagnose=False,
        **extra,
    )
    return mark_all_outputs(run) if mark or opts.tensors == "all" else run


def full_model_fp32_nodes(model: str, opts: CompareOptions) -> Optional[List[str]]:
    """The nodes that emulated fp16/bf16 storage (``onnxrt:fp16``, ``onnxrt:bf16``) keeps in fp32 in
    the whole model: every subgraph keeps that choice (cut alone, a Cast of an int32 accumulator
    would become an fp16 output, where the model keeps it fp32). None for other runners."""
    spec = parse_runner_spec(opts.test)
    low = [k for k in ("fp16", "bf16") if spec.options.get(k)]
    if spec.kind != "onnxrt" or not low:
        return None
    from toolkit.convert.common import reduced_types
    from toolkit.convert.placement import decide
    from toolkit.core.io.model import load_model

    full = load_model(model, external_data_dir=opts.external_data_dir)  # (with its weights: their ranges count)
    if reduced_types(full):
        return None  # (a mixed model: its float32 nodes are in the model itself)
    return list(decide(full, dtype="bfloat16" if low[0] == "bf16" else "float16").kept)


def spec_flags(spec_text: str) -> List[str]:
    """``onnxrt:opt=disable`` -> ``["--onnxrt", "--ort-optimization", "disable"]`` (its ``toolkit run`` flags)."""

    spec = parse_runner_spec(spec_text)
    kind = get_kind(spec.kind)
    flags = [kind.flag]
    known = kind.spec_options()
    for key, value in spec.options.items():
        flag = known[key].flag
        if flag is None:
            return [f"<runner {spec.text}>"]  # an option only specs can set
        flags += [flag] if value is True else [flag, str(value)]
    return flags


def describe_check(artifact: str, opts: CompareOptions) -> List[str]:
    """The check as the ``toolkit run`` it amounts to (for logs, replay files and --json)."""
    argv = ["toolkit", "run", artifact, *spec_flags(opts.test), "--load-inputs", "<reference>"]
    argv += ["--load-outputs", "<reference>"]
    if opts.tensors == "all":
        argv += ["--onnx-outputs", "mark", "all"]
    return argv + opts.tolerances.spelled()


def in_process_possible(spec_text: str) -> bool:
    """Whether checks on runner ``spec_text`` may run in this process: a runner kind that declares
    it for that spec (ONNX-Runtime's CPU provider, OpenVINO's CPU device: no device context that
    a later fork could inherit, nothing a timeout must kill)."""

    return parse_runner_spec(spec_text).in_process()


class CompareRunner(WarmRunner):
    """The check runner for ``--compare``: each check runs ``entry(RunOptions)``.

    On a CPU runner (ONNX-Runtime or OpenVINO on the CPU), with no ``--check-timeout`` and one
    check at a time, a check runs in this very process (:func:`~toolkit.reduce.check.run_in_process`: same
    output and exit code, no fork, no worker set-up; ``TOOLKIT_FORK_CHECKS=1`` turns that
    off). Otherwise it runs in the warm worker, a fork of this process.

    The reference is computed on the first check (after the model is indexed and every
    option checked), in this process, before any fork. ``entry`` is the CLI's own ``run``
    (it prints the comparison and returns the exit code) and ``worker`` the CLI's
    :class:`~toolkit.reduce.check.WorkerEntry` (for its warm-up), both injected so that this
    package never imports the CLI.
    """

    kind = "warm"

    def __init__(
        self,
        model: str,
        artifact: str,
        opts: CompareOptions,
        entry: Callable,
        worker,
        *,
        notes=None,
        timeout=None,
        env=None,
        primary: Optional["CompareRunner"] = None,
    ):
        # (no command tree to build: the child calls ``entry`` directly, not the CLI's parser); its
        # comparisons come back typed (Findings), never read back from what it prints
        self.findings = Findings()
        super().__init__(["run", artifact], timeout, entry=WorkerEntry(self._child_main, result=lambda: self.findings),
                         env=env)
        self.worker = worker
        self.primary = primary  # a sibling for --jobs shares the primary's reference
        self.model = model
        self.artifact = artifact
        self.opts = opts
        self.run_entry = entry
        self.notes = notes or (lambda _m: None)
        self.ref: Optional[Reference] = None
        self.fp32_nodes: Optional[List[str]] = None  # the full model's fp32 nodes, for emulated fp16/bf16
        self.options = None  # RunOptions to run instead of the candidate's check (see run_with)
        self.full_model = False  # the next check is of the full model (set by the reduce: see _child_main)
        # each subgraph's reference is that subgraph on the reference runner (marking changes the reference)
        self.per_subgraph = False
        self.info: Dict[str, Any] = {
            "reference": opts.reference, "test": opts.test, "reference_model": opts.reference_model
        }
        self.in_process = (
            primary is None
            and timeout is None
            and not env
            and os.environ.get(FORK_ENV, "") in ("", "0")
            and in_process_possible(opts.test)
        )
        self.kind = "in-process" if self.in_process else "warm"

    @property
    def check_argv(self) -> List[str]:
        return describe_check(self.artifact, self.opts)

    def sibling(self, artifact: str, env=None) -> "CompareRunner":
        """The runner of another parallel worker (``--jobs``): its own artifact, this reference."""
        self.in_process = False  # checks run at once, from threads: each in its own fork
        self.kind = "warm"
        return CompareRunner(
            self.model, artifact, self.opts, self.run_entry, self.worker, notes=self.notes, timeout=self.timeout,
            env=env, primary=self,
        )

    def prepare(self, loading=None) -> None:
        if self._prepared:
            return
        if self.primary is not None:
            self._share_primary()
            return

        ref_model = self.opts.reference_model or self.model
        self.notes(f"Computing every tensor of {ref_model} on the reference runner {self.opts.reference} ...")
        self.ref = compute_reference(self.model, self.opts, self.notes)
        self._say_reference()
        if self.in_process:
            self._prepared = True  # no fork to warm up for: what a check needs is imported by the first one
        else:
            super().prepare()
        for path in {self.ref.inputs_path, self.ref.outputs_path, self.ref.deployed_path} - {""}:
            load_data(path)
        self.fp32_nodes = full_model_fp32_nodes(self.model, self.opts)

    def _share_primary(self) -> None:
        """A sibling (``--jobs``) takes the primary's reference, prepared once."""
        assert self.primary is not None
        self.primary.prepare()
        self.ref = self.primary.ref
        self.fp32_nodes = self.primary.fp32_nodes
        self.per_subgraph = self.primary.per_subgraph
        self._prepared = True  # imports and warm-up were done once, by the primary, in this process

    def _say_reference(self) -> None:
        """What the reference computed holds (said, and kept in :attr:`info`), and where marking changes it."""
        ref = self.prepared_ref
        where = "in memory" if ref.held else "in a temp .npz"
        self.notes(
            f"Reference: {ref.tensors} tensors x {ref.iterations} iteration(s), "
            f"{ref.nbytes / 2**20:.1f} MB {where}, {ref.seconds:.2f} s; checking each subgraph on "
            f"{self.opts.test}"
        )
        self.info.update(
            tensors=ref.tensors, iterations=ref.iterations, reference_seconds=round(ref.seconds, 3),
            in_memory=bool(ref.held), missing_in_reference=len(ref.missing),
        )
        self._say_marking()
        if ref.missing:
            self.notes(
                f"{len(ref.missing)} tensor(s) of the model are not in the reference model; subgraph outputs "
                "among them are not compared"
            )

    def _say_marking(self) -> None:
        """Where marking every tensor changes the reference's outputs, say so; with the model as its
        own reference, each subgraph's reference is then that subgraph on the reference runner."""
        ref = self.prepared_ref
        self.info["marking_changes_reference"] = bool(ref.marking)
        if not ref.marking:
            return
        if not ref.marking_matters:
            self.notes(
                f"Marking every tensor as an output changes the reference's outputs ({ref.marking}), within the "
                "tolerances: the full model is judged as deployed (nothing marked, its outputs only); subgraphs are "
                "compared with the marked reference"
            )
            return
        self.per_subgraph = not self.opts.reference_model
        then = (
            "each subgraph is compared with that subgraph on the reference runner, nothing marked (both runners "
            "run it)" if self.per_subgraph else
            "subgraphs are compared with the marked values of the reference model (another model: it cannot be cut "
            "like the model), so the search may not see what the full model shows"
        )
        self.notes(
            f"Marking every tensor as an output changes the reference's outputs ({ref.marking}): {self.opts.reference} "
            "fuses across tensors it must then return. The full model is judged as deployed (nothing marked, its "
            f"outputs only); {then}"
        )

    @property
    def prepared_ref(self) -> Reference:
        """The reference values (:meth:`prepare` computes them before the first check)."""
        if self.ref is None:
            raise RuntimeError("the reference is computed by prepare(), before any check")
        return self.ref

    def run(self, tick=None) -> CheckResult:
        if not self.in_process:
            return super().run(tick)
        self.prepare()
        return run_in_process(self.entry, self.argv0, self.args)

    def _child_main(self, args) -> int:  # pragma: no cover - runs in the forked child
        self.findings.clear()
        run = functools.partial(self.run_entry, on_report=self.findings.add)
        if self.options is not None:
            return run(self.options)
        ref, fp32 = self.prepared_ref, self.fp32_nodes
        if self.full_model:  # the verdict: as deployed, only the model's outputs, nothing marked
            code = run(deployed_options(self.artifact, self.opts, ref, fp32_nodes=fp32))
            if code != 0 or self.opts.tensors != "all":
                return code
            # --compare-tensors all: the outputs pass as deployed; the tensors inside may still differ
        elif self.per_subgraph:
            return run(per_subgraph_options(self.artifact, self.opts, ref, fp32_nodes=fp32))
        return run(run_options(self.artifact, self.opts, ref, fp32_nodes=fp32))

    def run_with(self, options, tick=None):
        """One run of ``options`` (a :class:`~toolkit.run.options.RunOptions`) in the warm worker."""
        self.options = options
        try:
            return self.run(tick)
        finally:
            self.options = None

    def reference_scale(self, name: str) -> Optional[float]:
        """The largest finite magnitude of tensor ``name`` in the reference (over its iterations),
        or None when the reference does not hold it (or holds no finite value of it)."""
        if self.ref is None:
            return None
        try:
            data = load_data(self.ref.outputs_path)
        except ToolkitError:  # (an unreadable file: InputError) only a measure for a warning
            return None
        values = [it.outputs.get(name) for _label, its in getattr(data, "runs", []) for it in its
                  if hasattr(it.outputs, "get")]
        scales = [scale for scale in map(_largest_finite, values) if scale is not None]
        return max(scales) if scales else None

    def close(self) -> None:
        if self.ref is not None and self.primary is None:
            self.ref.close()
        self.ref = None

    def hint_errors(self) -> Optional[Dict[str, float]]:
        """Every tensor's error on the runner under test: the model run once with every tensor
        marked, fed the reference's inputs; ``{tensor: rel_l2}`` against the reference (the
        largest over iterations), computed in this process. Only on a CPU runner; None
        elsewhere, or when that run fails (the search then goes on without a hint)."""
        if not self._runs_here():
            return None

        try:
            errors: Dict[str, float] = {}
            for outs, ref_values in self._every_tensor_runs():
                for name, value in outs.items():
                    err = rel_l2(value, ref_values.get(name))
                    if err is not None:
                        errors[name] = max(errors.get(name, 0.0), err)
            return errors
        except ToolkitError as exc:  # (a run that fails: InferenceError, InputError) only a hint: the search goes on
            self.notes(f"No hint for the search ({exc.message}); searching without one")
            return None

    def _runs_here(self) -> bool:
        """Whether the model under test can run in this process: a reference is held, the model is a
        file, and its runner is no device runner (those checks are forked: this process opens no device)."""
        return self.ref is not None and os.path.isfile(self.model) and in_process_possible(self.opts.test)

    def _every_tensor_runs(self):
        """``(outputs, reference values)`` per iteration: the model under test with every tensor
        marked, fed the reference's inputs, in this process."""

        ref = self.prepared_ref
        feeds = load_inputs(ref.inputs_path)
        golden = [it.outputs for it in load_outputs(ref.outputs_path).runs[0][1]]
        source = feed_source(self.opts, lambda _m: None, loaded=feeds)
        for (_feed, outs), ref_values in zip(every_tensor(self.opts.test, self.model, source, self.opts), golden):
            yield outs, ref_values

    def differing_tensors(self) -> Optional[Tuple[int, List[str]]]:
        """(tensors compared, names of those out of tolerance): every tensor of the model under test
        that the reference has, judged with the check's tolerances. None where the runner under test
        cannot run in this process (a device runner) or that run fails."""
        if not self._runs_here():
            return None

        tol = self.opts.tolerances
        compared: Dict[str, None] = {}
        bad: Dict[str, None] = {}
        try:
            for k, (outs, ref_values) in enumerate(self._every_tensor_runs()):
                it = compare_iteration(k, outs, {n: v for n, v in ref_values.items() if n in outs}, tol)
                for c in it.outputs:
                    compared.setdefault(c.name, None)
                    if not c.passed:
                        bad.setdefault(c.name, None)
        except ToolkitError as exc:
            self.notes(f"Could not compare every tensor ({exc.message})")
            return None
        return len(compared), list(bad)


def rel_l2(a, b) -> Optional[float]:
    """``||a - b|| / max(||a||, ||b||)`` of two float arrays (inf when either is not finite);
    None when they cannot be compared (missing, other shapes, not floating point)."""

    if b is None or getattr(a, "shape", None) != getattr(b, "shape", None):
        return None
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype.kind != "f" or b.dtype.kind != "f":
        return None
    if a.size == 0:
        return 0.0
    return _ratio(*_norms_of_floats(a, b))


def _ratio(num: float, den: float) -> float:
    """``num / den`` of two norms: inf when either is not finite (or only ``den`` is 0), 0 when ``num`` is."""
    if not np.isfinite(num) or not np.isfinite(den):
        return float("inf")
    if num == 0:
        return 0.0
    return num / den if den > 0 else float("inf")


# ---------------------------------------------------------------------- evidence for --all-faults


def _report_of(runner: CompareRunner, options) -> Optional[list]:
    """The tensors (``TensorError``) of the first diagnosis of a run of ``options`` (its
    ``save_report`` has it gather every tensor's error), typed from the check; None without one."""
    found = runner.run_with(options).findings
    return found.tensors if found is not None else None


def describe_faults(runner: CompareRunner, reducer, faults) -> None:
    """Fill each fault's evidence: its own error (fed exact inputs) and its error amplification.

    Amplification is measured in the model as the search saw it when the fault was found
    (earlier faults' outputs replaced by reference values), every tensor compared: the
    relative L2 error of the fault's outputs over that of its inputs.
    """

    floor = storage_floor(runner.opts.test)  # (an fp16 runner rounds even exact inputs)
    folder = runner.prepared_ref.folder
    for f in faults:
        cand = reducer.candidate(f.mask)
        art = os.path.join(folder, f"fault_{f.number}.onnx")
        reducer.index.write(cand, art)
        f.evidence.update(_own_error(runner, art))
        ctx_art = os.path.join(folder, f"context_{f.number}.onnx")
        reducer.index.write(reducer.candidate(f.context), ctx_art)
        f.evidence.update(_amplification_in(runner, ctx_art, cand, floor))
        _judge_noise(f, floor, precision_of(runner.opts.test))


def _own_error(runner: CompareRunner, art: str) -> dict:
    """The error of the fault written to ``art``, fed exact inputs: its worst tensor, and its largest
    relative L2 error (``own_error``); nothing without a report."""
    own = _report_of(runner, run_options(art, runner.opts, runner.prepared_ref, save_report=art + ".json"))
    if not own:
        return {}
    worst = max(own, key=lambda t: t.tol_ratio)
    return {"max_abs": worst.max_abs, "tol_ratio": worst.tol_ratio, "tensor": worst.name,
            "own_error": max(t.rel_l2 for t in own)}


def _amplification_in(runner: CompareRunner, ctx_art: str, cand, floor: float) -> dict:
    """The errors of the fault ``cand``'s outputs and inputs in the model as the search saw it (written
    to ``ctx_art``), every tensor compared, and its amplification; nothing without a report."""
    ctx = _report_of(runner, run_options(ctx_art, runner.opts, runner.prepared_ref, mark=True,
                                         save_report=ctx_art + ".json"))
    if ctx is None:
        return {}
    errs = {t.name: t.rel_l2 for t in ctx}
    out_err = max((errs.get(t, 0.0) for t in cand.outputs), default=0.0)
    in_err = max((errs.get(t, 0.0) for t in cand.inputs), default=0.0)
    return {"output_error": out_err, "input_error": in_err, "amplification": amplification(out_err, in_err, floor)}


def rest_is_noise(runner: CompareRunner, reducer, allowed: int) -> Optional[dict]:
    """Whether what remains of the model (the nodes of ``allowed``, earlier faults' outputs fed the
    reference's values) fails by rounding only: run once with every tensor compared, every node's
    amplification near 1 and the largest error within the noise bound for its size (toolkit.core.compare.noise).
    The evidence when it does, else None."""

    floor = storage_floor(runner.opts.test)
    art = os.path.join(runner.prepared_ref.folder, "rest.onnx")
    reducer.index.write(reducer.candidate(allowed), art)
    rep = _report_of(runner, run_options(art, runner.opts, runner.prepared_ref, mark=True, save_report=art + ".json"))
    if not rep:
        return None
    errors = {t.name: t.rel_l2 for t in rep}
    amp = max((a for i, a, _e in rank(reducer.index, errors, floor) if (allowed >> i) & 1), default=1.0)
    err = max(errors.values())
    depth = popcount(allowed)
    if amp > ULPS or not is_rounding(err, amp, depth, floor):
        return None
    return {"own_error": err, "amplification": amp, "noise_bound": noise_bound(floor, depth), "noise": True,
            "storage": precision_of(runner.opts.test)}


def _judge_noise(f, floor: float, storage: str = "fp32") -> None:
    """``f.evidence["noise"]``: whether the fault is rounding by the noise model (toolkit.core.compare.noise):
    its own error, fed exact inputs, within the bound for its size, and its amplification near 1."""

    ev = f.evidence
    if "own_error" not in ev or "amplification" not in ev:
        return
    depth = len(f.nodes)
    ev["noise_bound"] = noise_bound(floor, depth)
    ev["noise"] = is_rounding(ev["own_error"], ev["amplification"], depth, floor)
    ev["storage"] = storage


def _largest_finite(value) -> Optional[float]:
    """The largest finite magnitude of ``value``; None unless it is a float array with a finite value."""
    arr = np.asarray(value) if value is not None else None
    if arr is None or arr.dtype.kind != "f" or not arr.size:
        return None
    finite = np.abs(arr[np.isfinite(arr)])
    return float(finite.max()) if finite.size else None


def _norms_of_floats(a, b):
    """:func:`_norms` of two float arrays: in float32 when both are (float64 where the squares pass
    float32's range), else in float64."""
    both32 = a.dtype == b.dtype == np.float32
    with np.errstate(all="ignore"):
        num, den = _norms(a, b, np.float32 if both32 else np.float64)
        if both32 and not (np.isfinite(num) and np.isfinite(den)):
            num, den = _norms(a, b, np.float64)  # (squares past float32's range)
    return num, den


def _norms(a, b, dtype):
    """(||a - b||, max(||a||, ||b||)) computed in ``dtype`` (dot products: fast)."""

    a = np.ascontiguousarray(a, dtype=dtype).ravel()
    b = np.ascontiguousarray(b, dtype=dtype).ravel()
    d = a - b
    return math.sqrt(float(np.dot(d, d))), math.sqrt(max(float(np.dot(a, a)), float(np.dot(b, b))))

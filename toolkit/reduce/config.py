"""What a ``debug reduce`` run is asked and what it answers: :class:`ReduceConfig`, the
:class:`Iteration` records and the :class:`Outcome`, and the defaults of the artifact and replay paths."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Mapping, Optional, Sequence

from toolkit.core.errors import InputError
from toolkit.reduce.check import WorkerEntry
from toolkit.reduce.evidence import Evidence
from toolkit.reduce.verdict import CheckResult, FailureRule

DEFAULT_ITER_ARTIFACT = "polygraphy_debug.onnx"
DEFAULT_ART_DIR = "polygraphy_artifacts"
DEFAULT_REPLAY = "polygraphy_debug_replay.json"
# A run stops (exit 3) once at least this many checks after the full model were broken and
# they are more than this share of those checks: it cannot judge the model.
UNJUDGED_MIN = 6
UNJUDGED_SHARE = 2 / 3


class CannotJudge(InputError):
    """The checks can no longer judge the model (see Session._stop_if_unjudgeable)."""

@dataclass
class ReduceConfig:
    model: str
    output: str
    check: Optional[List[str]] = None  # None: ask the user
    min_good: Optional[str] = None
    mode: Optional[str] = None  # None (default strategy), "bisect", "linear"
    rule: FailureRule = field(default_factory=FailureRule)
    check_timeout: Optional[float] = None
    iter_artifact: str = DEFAULT_ITER_ARTIFACT
    remove_intermediate: bool = True
    artifacts: Sequence[str] = ()
    art_dir: str = DEFAULT_ART_DIR
    iter_info: Optional[str] = None
    save_replay: Optional[str] = None
    load_replay: Optional[str] = None
    input_shapes: Mapping[str, tuple] = field(default_factory=dict)
    load_inputs: Sequence[str] = ()  # data files: their shapes fix dynamic inputs
    seed: Optional[int] = None  # for inputs generated to run the model (shape fallback)
    val_range: Sequence[str] = ()
    force_fallback: bool = False
    reduce_inputs: bool = True
    reduce_outputs: bool = True
    external_data_dir: Optional[str] = None
    warm: Optional[bool] = None  # None: automatic
    # how a forked warm worker runs a toolkit check (the CLI gives it); None: checks run as subprocesses
    worker: Optional[WorkerEntry] = None
    # -o, --min-good and --artifacts refer to the model's external data through hard links
    # (or its own folder) instead of carrying a copy of the weights they use.
    link_external_data: bool = False
    jobs: int = 1  # checks run at once (each worker has its own artifact and environment)
    devices: Sequence[str] = ()  # CUDA_VISIBLE_DEVICES of worker k: devices[k % len(devices)]
    shape_inference: bool = True  # False: only the types the model records (--no-shape-inference)
    any_failure: bool = False  # reduce on any failure, not only the full model's kind (see signature.py)
    label: Optional[str] = None  # how logs name the model (when ``model`` is a rewrite of the one given)
    # when ``model`` (and --compare's reference model) are rewrites of the ones given (If branches
    # inlined, into temporary files new on every run): the given model's files (the model, then its
    # external data files) and reference model, which a replay file is bound to instead
    given_files: Sequence[str] = ()
    given_reference_model: Optional[str] = None


@dataclass
class Iteration:
    number: int
    nodes: int
    failed: bool
    seconds: float
    source: str  # "check", "user" or "replay"
    reason: str = ""
    result: Optional[CheckResult] = None
    verdict: str = ""  # pass, fail, broken, timeout
    phase: str = ""  # full model, bisect (last node), bisect (first node), QuickXplain, drop loop, linear
    span: str = ""  # the nodes tried, e.g. "nodes 4..9" or "full model"
    remaining: int = 0  # checks still to come (estimate)
    evidence: Optional[Evidence] = None
    first_failure: bool = False  # the first failing check of the run


@dataclass
class Outcome:
    status: str  # "reduced", "passed" (full model passed: nothing to reduce), "interrupted"
    nodes_before: int
    nodes_after: Optional[int] = None
    final_nodes: List[str] = field(default_factory=list)
    checks: int = 0
    remembered: int = 0
    seconds: float = 0.0
    output_written: bool = False
    min_good_written: bool = False
    min_good_nodes: Optional[int] = None
    replay_path: Optional[str] = None
    one_minimal: bool = False
    runner: str = ""
    stopped_by: Optional[str] = None  # "interrupt" (Ctrl-C) or "eof" (no more answers)
    broken: int = 0  # mid-run checks that were broken (counted as passes)
    other_failures: int = 0  # of those, checks that failed otherwise than the full model (e.g. could not run)
    first_alone: Optional[str] = None  # a one-node result: is it the first node that fails alone?
    passing: int = 0  # subgraphs the check passed (broken ones aside)
    signature: Optional[dict] = None  # the full model's failure, as reduced (Signature.to_json)
    body_nodes: int = 0  # the result is one If/Loop/Scan node: the nodes of its bodies
    timeouts: int = 0  # checks killed by --check-timeout (counted as failures)
    phases: Dict[str, int] = field(default_factory=dict)  # checks run per search phase
    full_evidence: Optional[Evidence] = None  # how badly the full model failed (comparison checks)
    reduced_evidence: Optional[Evidence] = None  # how badly the result fails
    reduced_scale: Optional[float] = None  # the reference's largest magnitude of its worst tensor (--compare)
    noise: Optional[str] = None  # warning: the result may be rounding noise
    output: Optional[str] = None
    min_good: Optional[str] = None
    iter_artifact: Optional[str] = None

"""What a ``debug reduce`` run is asked and what it answers: :class:`ReduceConfig`, the
:class:`Iteration` records and the :class:`Outcome`, and the defaults of the artifact and replay paths."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Mapping, Optional, Sequence

from toolkit.core import shared_options as S
from toolkit.core.declare import declared, option, required, shown_as, switch, unless
from toolkit.core.errors import InputError, UsageError
from toolkit.core.meta import parse_shape_specs
from toolkit.core.shared_options import InputData, ModelFiles, ReplayFiles
from toolkit.reduce.check import WorkerEntry
from toolkit.reduce.evidence import Evidence
from toolkit.reduce.parallel import parse_devices
from toolkit.reduce.verdict import CheckResult, FailureRule
from toolkit.search.outcome import SearchTally

DEFAULT_ITER_ARTIFACT = "polygraphy_debug.onnx"
DEFAULT_ART_DIR = "polygraphy_artifacts"
DEFAULT_REPLAY = "polygraphy_debug_replay.json"
# A run stops (exit 3) once at least this many checks after the full model were broken and
# they are more than this share of those checks: it cannot judge the model.
UNJUDGED_MIN = 6
UNJUDGED_SHARE = 2 / 3


class CannotJudge(InputError):
    """The checks can no longer judge the model (see Reducer._stop_if_unjudgeable, toolkit.reduce.judging)."""

@shown_as(
    load_inputs=dict(
        metavar="PATH", after="input_shapes",
        help="Input data files: their shapes fix the model's dynamic inputs for shape inference, and the model "
        "runs on them if ONNX-Runtime must be used to find tensor shapes.",
    ),
    seed=dict(after="data_loader_func_name"),
    save_replay=dict(
        after="iter_info",
        help="Keep every verdict in this JSON file (updated after each check; not written when the check is broken"
        " on the full model). Default: polygraphy_debug_replay.json beside the iteration artifact.",
    ),
    load_replay=dict(after="save_replay", help="Answer subgraphs already judged in an earlier run without checking them."),
    val_range=dict(
        metavar="RANGE", after="seed",
        help="Value range of generated inputs ([lo,hi], or name:[lo,hi]) when the model runs on ONNX-Runtime to "
        "find tensor shapes.",
    ),
)
@dataclass
class ReduceConfig(ReplayFiles, InputData, ModelFiles):
    """What ``debug reduce`` is asked; each option the command line sets is declared on its field
    (the command binds this class). Inherited: ``model``, ``external_data_dir`` and the inputs
    (``load_inputs``: data files whose shapes fix dynamic inputs; ``seed``, ``val_range``: for
    inputs generated to run the model when shapes fall back to ONNX-Runtime)."""

    output: str = required("-o", "--output", default="", metavar="PATH",
                           help="Where to write the smallest subgraph the check fails on.")
    check: Optional[List[str]] = option(  # None: ask the user
        "--check", metavar="COMMAND ARGS...",
        help="The check command; everything after --check belongs to it (its own -o, --mode, --help too). Without "
        "it you are asked about each subgraph.",
    )
    mode: Optional[str] = option(  # None (default strategy), "bisect", "linear"
        "--mode", metavar="bisect|linear", complete=("bisect", "linear"),
        help="bisect (binary search only) or linear (one node at a time). Default: bisect, then verify "
        "1-minimality, in one run with fewer checks than bisect followed by linear.",
    )
    min_good: Optional[str] = option("--min-good", "--minimal-good", metavar="PATH",
                                     help="Also write the checked passing subgraph closest to the result.")
    rule: FailureRule = field(default_factory=FailureRule)
    # reduce on any failure, not only the full model's kind (see signature.py)
    any_failure: bool = switch(
        "--any-failure",
        help="Reduce on any failure of the check. By default a subgraph must fail the way the full model fails "
        "(the same crash signal, exit code and error class, or a numeric mismatch that feeds the same outputs); "
        "one that fails otherwise is counted as an other failure.",
    )
    check_timeout: Optional[float] = option(
        "--check-timeout", metavar="SECONDS",
        help="Seconds a check may run; then it is killed (with its children) and counts as a failure.",
    )
    iter_artifact: str = option(
        "--iter-artifact", "--intermediate-artifact", metavar="PATH", default=DEFAULT_ITER_ARTIFACT,
        help="Where each iteration's subgraph is written for the check.",
    )
    remove_intermediate: bool = unless("--no-remove-intermediate",
                                       help="Keep the iteration artifact and --iter-info file at the end.")
    artifacts: List[str] = option(
        "--artifacts", metavar="PATH", factory=list,
        help="Files the check writes (or the iteration artifact) to move into ART_DIR/good or ART_DIR/bad after "
        "each check, named <iteration>_<file name>.",
    )
    art_dir: str = option("--art-dir", "--artifacts-dir", metavar="PATH", default=DEFAULT_ART_DIR,
                          help="Folder for --artifacts.")
    iter_info: Optional[str] = option(
        "--iter-info", "--iteration-info", metavar="PATH",
        help="Write a JSON file before each check: iteration number, nodes, inputs and outputs.",
    )
    reduce_inputs: bool = unless("--no-reduce-inputs", help="Keep the model's inputs: only remove nodes from the end.")
    reduce_outputs: bool = unless("--no-reduce-outputs",
                                  help="Keep the model's outputs: only remove nodes from the start.")
    jobs: int = 1  # checks run at once (each worker has its own artifact and environment)
    # CUDA_VISIBLE_DEVICES of worker k: devices[k % len(devices)]
    devices: List[str] = option(
        "--devices", metavar="LIST", factory=list, takes=Optional[str], parse=parse_devices,
        help="GPUs for the workers, e.g. 0,1,2,3: worker k gets CUDA_VISIBLE_DEVICES=<k-th device> (round robin "
        "when fewer than --jobs).",
    )
    input_shapes: Mapping[str, tuple] = declared(
        S.MODEL_INPUT_SHAPES.replace(takes=List[str], parse=lambda specs: parse_shape_specs(specs or ())),
        factory=dict,
    )
    force_fallback: bool = declared(S.FORCE_FALLBACK, default=False)
    shape_inference: bool = unless(  # False: only the types the model records
        "--no-shape-inference",
        help="Do not infer shapes: new subgraph inputs and outputs get only the types the model records (or "
        "--load-inputs data gives); no ONNX shape inference, no ONNX-Runtime run.",
    )
    # -o, --min-good and --artifacts refer to the model's external data through hard links
    # (or its own folder) instead of carrying a copy of the weights they use.
    link_external_data: bool = switch(
        "--link-external-data",
        help="Let -o, --min-good and --artifacts refer to the model's external data files through hard links in "
        "their folder (no copy of the weights; they then run only where those links are). Default: they carry"
        " the weights they use, so they can be moved.",
    )
    warm: Optional[bool] = None  # None: automatic
    # how a forked warm worker runs a toolkit check (the CLI gives it); None: checks run as subprocesses
    worker: Optional[WorkerEntry] = None
    label: Optional[str] = None  # how logs name the model (when ``model`` is a rewrite of the one given)
    # when ``model`` (and --compare's reference model) are rewrites of the ones given (If branches
    # inlined, into temporary files new on every run): the given model's files (the model, then its
    # external data files) and reference model, which a replay file is bound to instead
    given_files: Sequence[str] = ()
    given_reference_model: Optional[str] = None

    def __post_init__(self) -> None:
        if not self.output:  # (a default only because the inherited fields before it have defaults)
            raise UsageError("debug reduce needs an output path (-o): where the smallest failing subgraph is written")


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
class Outcome(SearchTally):
    """How the reduce ended (inherited: ``status``: "reduced", "passed" (the full model passed:
    nothing to reduce) or "interrupted"; ``broken``: mid-run checks that were broken, counted as
    passes; the checks, the time, the files written) and what it found."""

    nodes_before: int = 0
    nodes_after: Optional[int] = None
    final_nodes: List[str] = field(default_factory=list)
    min_good_written: bool = False
    min_good_nodes: Optional[int] = None
    runner: str = ""
    stopped_by: Optional[str] = None  # "interrupt" (Ctrl-C) or "eof" (no more answers)
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

"""Layerwise diagnosis: where in the graph a comparison goes wrong.

Given the errors of many tensors of one model (``--onnx-outputs mark all`` against golden
values, or two runners that both return every tensor), this finds

- the **first tensor out of tolerance** in topological order, and the node that produced it;
- each node's **error amplification**: the error of its outputs divided by the error of its
  inputs. A faulty node has exact inputs and a wrong output (a large ratio); a node that
  only passes on error from upstream has a ratio near 1;
- the **error against depth** (depth: the longest path, in nodes, from the graph inputs).

Errors
- ``rel_l2 = ||a - b|| / max(||a||, ||b||)`` (0 when equal, at most 2, defined when one
  side is all zeros), the scale-free error used for amplification. Tensors not compared
  get the largest error of their producer's inputs (error flows through them unseen);
  graph inputs, initializers and constants have none.
- ``amplification = max(out, FLOOR) / max(in, FLOOR)`` with ``FLOOR`` the float32 epsilon,
  so exact-in, exact-out is 1 and rounding noise on exact inputs stays small. When one side
  stores tensors in fp16 or bf16 (the emulation rounds even the graph inputs, which are
  compared exact), the floor is that precision's rounding step (:func:`storage_floor`); the
  noise model is :mod:`toolkit.core.compare.noise`.
- ``tol_ratio``: the error relative to the tolerance that judged the tensor (1 is the
  tolerance; above 1 is out of tolerance). For the ``elemwise`` check it is the largest,
  over elements, of ``min(abs / atol, rel / rtol)``; for ``max``/``mean``/``median`` it
  is ``min(stat(abs) / atol, stat(rel) / rtol)``.

Pure numpy and ONNX graph topology; nothing here prints.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from toolkit.core.compare.arrays import error_arrays
from toolkit.core.compare.judged import JudgedTensor

# the one noise model (docs/noise.md); re-exported here for the diagnosis' callers
from toolkit.core.compare.noise import (  # noqa: E402,F401
    FAULT,
    FLOOR,
    OVERFLOW,
    STORAGE_FLOOR,
    amplification,
    classify,
    times,
    kind_words,
    storage_floor,
)
from toolkit.core.graph.constants import is_constant_node
from toolkit.core.shapes import node_reads
from toolkit.core.text import shown_name

TOP_NODES = 5  # ranked nodes shown in a terminal diagnosis


# ---------------------------------------------------------------------- topology


@dataclass
class NodeInfo:
    name: str
    op: str
    inputs: List[str]  # tensors it reads (subgraph bodies' outer reads included)
    outputs: List[str]
    depth: int = 0
    position: int = 0  # in topological order


@dataclass
class Topology:
    """The top graph's nodes in topological order (by depth, then file order)."""

    nodes: List[NodeInfo]
    producer: Dict[str, int]  # tensor -> index into nodes
    sources: set  # graph inputs, initializers, constant outputs

    def tensor_order(self) -> List[str]:
        return [t for n in self.nodes for t in n.outputs]


def topology_of(model) -> Topology:
    """The :class:`Topology` of ``model``'s top graph (weights are never read)."""

    g = model.graph
    sources = {vi.name for vi in g.input} | {t.name for t in g.initializer}
    sources |= {t.values.name for t in g.sparse_initializer}
    infos = _node_infos(g.node, sources)
    _set_depths(infos, {t: k for k, info in enumerate(infos) for t in info.outputs})
    nodes = sorted(infos, key=lambda info: info.depth)  # (stable: file order within a depth)
    for pos, info in enumerate(nodes):
        info.position = pos
    return Topology(nodes, {t: k for k, info in enumerate(nodes) for t in info.outputs}, sources)


def _node_infos(nodes, sources: set) -> List[NodeInfo]:
    """The nodes that compute (standard Constant nodes: their outputs go to ``sources``)."""
    infos: List[NodeInfo] = []
    for i, n in enumerate(nodes):
        outs = [o for o in n.output if o]
        if is_constant_node(n):
            sources.update(outs)
            continue
        infos.append(NodeInfo(n.name or f"{n.op_type}_{i}", n.op_type, node_reads(n), outs))
    return infos


def _set_depths(infos: List[NodeInfo], producer: Dict[str, int]) -> None:
    """Depth of every node: 1 + the deepest node it reads from (iterative, any file order)."""
    depth: List[Optional[int]] = [None] * len(infos)
    preds = [[producer[t] for t in info.inputs if t in producer and producer[t] != k] for k, info in enumerate(infos)]
    for root in range(len(infos)):
        _settle(root, preds, depth)
    for k, info in enumerate(infos):
        info.depth = depth[k] or 1


def _settle(root: int, preds: List[List[int]], depth: List[Optional[int]]) -> None:
    """The depth of ``root`` and of the nodes it reads from that have none yet (depth first, no recursion)."""
    stack = [root]
    on_stack = {root}
    while stack:
        k = stack[-1]
        if depth[k] is None:
            todo = [p for p in preds[k] if depth[p] is None and p not in on_stack]
            if todo:
                stack.extend(todo)
                on_stack.update(todo)
                continue
            # (a cycle leaves a predecessor without depth: it counts as a source)
            depth[k] = 1 + max((depth[p] or 0 for p in preds[k]), default=0)
        stack.pop()
        on_stack.discard(k)


# ---------------------------------------------------------------------- errors per tensor


@dataclass
class TensorError(JudgedTensor):
    """The worst error of one tensor over the iterations compared."""

    rel_l2: float
    tol_ratio: float
    message: str = ""
    position: Optional[int] = None  # index in topological tensor order
    depth: Optional[int] = None
    node: Optional[str] = None
    op: Optional[str] = None
    ref_max: float = 0.0  # the largest finite magnitude on either side (an overflow: past the storage's range)


def _div(x: float, tol: float) -> float:
    if x == 0:
        return 0.0
    return x / tol if tol > 0 else math.inf


def tensor_error(name: str, a, b, comparison) -> TensorError:
    """Error measures of ``a`` against the reference ``b``, judged as ``comparison`` was."""

    c = comparison
    err = TensorError(name=name, passed=c.passed, max_abs=c.max_abs, max_rel=c.max_rel, atol=c.atol, rtol=c.rtol,
                      stat=c.stat, rel_l2=0.0, tol_ratio=0.0, message=c.message)
    a = np.asarray(a)
    b = np.asarray(b)
    if c.message or _holds_text(a) or _holds_text(b):
        return _unmeasured(err)
    if a.size:
        _measure(err, a, b, c)
    return err


def _holds_text(x) -> bool:
    """Whether array ``x`` holds strings or objects (no numeric error to measure)."""
    return x.dtype.kind in "OUS"


def _unmeasured(err: TensorError) -> TensorError:
    """``err`` of a tensor whose error cannot be measured: infinite when it failed, else none."""
    bad = not err.passed
    err.rel_l2 = err.tol_ratio = math.inf if bad else 0.0
    err.max_abs = err.max_rel = math.inf if bad else 0.0
    return err


def _measure(err: TensorError, a, b, c) -> None:
    """Set the error measures of ``err`` from the numeric arrays ``a`` and ``b`` (not empty)."""
    err.ref_max = max(_largest_finite(a), _largest_finite(b))  # (either side: the other may hold the overflow's inf)
    absd, rel = error_arrays(a, b)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        num = float(np.sqrt(np.sum(np.square(absd, dtype=np.float64))))
        den = max(_norm(a), _norm(b))
        ratio = _tol_ratio(absd, rel, c)
    err.rel_l2 = _relative(num, den)
    err.tol_ratio = math.inf if math.isnan(ratio) else ratio


def _largest_finite(x) -> float:
    """The largest finite magnitude of float array ``x`` (0 for other dtypes)."""
    if x.dtype.kind != "f":
        return 0.0
    finite = np.abs(x[np.isfinite(x)])
    return float(finite.max()) if finite.size else 0.0


def _tol_ratio(absd, rel, c) -> float:
    """How many times its tolerance the error uses (per element, or of the statistic compared)."""
    if c.stat != "elemwise":
        return min(_div(c.required_atol, c.atol), _div(c.required_rtol, c.rtol))
    ra = absd / c.atol if c.atol > 0 else np.where(absd > 0, np.inf, 0.0)
    rr = rel / c.rtol if c.rtol > 0 else np.where(rel > 0, np.inf, 0.0)
    return float(np.max(np.minimum(ra, rr)))


def _relative(num: float, den: float) -> float:
    """``num / den``: infinite for NaN or a zero ``den``, 0 for a zero ``num``."""
    if math.isnan(num) or math.isnan(den):
        return math.inf
    if num == 0:
        return 0.0
    return num / den if den > 0 else math.inf


def _norm(x) -> float:
    x = x.astype(np.float64, copy=False)
    return float(np.sqrt(np.sum(np.square(x[np.isfinite(x)]))))


def _worse(old: TensorError, new: TensorError) -> TensorError:
    old.passed = old.passed and new.passed
    for f in ("max_abs", "max_rel", "rel_l2", "tol_ratio"):
        setattr(old, f, max(getattr(old, f), getattr(new, f)))
    old.message = old.message or new.message
    old.ref_max = max(old.ref_max, new.ref_max)
    return old


def add_iteration(errors: Dict[str, TensorError], it, outs_a: Mapping, outs_b: Mapping) -> None:
    """Fold one :class:`IterationComparison` (and its arrays) into ``errors`` (worst so far)."""
    for c in it.outputs:
        e = tensor_error(c.name, outs_a[c.name], outs_b[c.name], c)
        errors[c.name] = _worse(errors[c.name], e) if c.name in errors else e


def pair_errors(pair, iters_a: Sequence[Mapping], iters_b: Sequence[Mapping]) -> Dict[str, TensorError]:
    """The worst :class:`TensorError` of every tensor a :class:`PairComparison` compared."""
    errors: Dict[str, TensorError] = {}
    for it, outs_a, outs_b in zip(pair.iterations, iters_a, iters_b):
        add_iteration(errors, it, outs_a, outs_b)
    return errors


# ---------------------------------------------------------------------- the diagnosis


@dataclass
class NodeScore:
    node: str
    op: str
    position: int
    depth: int
    outputs: List[str]
    input_error: float  # rel_l2, largest over its inputs (estimated where not compared)
    output_error: float  # rel_l2, largest over its compared outputs
    amplification: float
    passed: bool  # every compared output within tolerance
    worst_output: str = ""
    # the longest chain of uncompared nodes between this node and the nearest compared tensors
    # (or graph inputs): 0 when its inputs were compared; else the error may start up there
    unseen: int = 0
    kind: str = ""  # ok, overflow, rounding or fault (toolkit.core.compare.noise.classify)


@dataclass
class DepthRow:
    depth: int
    tensors: int
    failed: int
    max_tol_ratio: float
    max_rel_l2: float
    last_depth: Optional[int] = None  # set when depths are merged into one row


@dataclass
class Diagnosis:
    label_a: str
    label_b: str
    tensors: List[TensorError]  # topological order (when the topology is known)
    first_failure: Optional[TensorError]
    ranked: List[NodeScore]  # by amplification, largest first
    depth: List[DepthRow]
    topology_known: bool = True
    notes: List[str] = field(default_factory=list)
    storage: str = "fp32"  # the coarsest storage of the runners compared (fp16, bf16: their rounding)

    @property
    def passed(self) -> bool:
        return all(t.passed for t in self.tensors)

    @property
    def culprit(self) -> Optional[NodeScore]:
        # the failing node (a fault or an overflow, never rounding) with the largest amplification
        # among nodes whose inputs were compared; unless a failing node whose inputs were not
        # compared shows a larger one (the error may then start before it)
        top = next(self._faults(), None)
        if top is None or top.unseen or top.amplification <= 1:
            return None
        return None if self._hidden_above(top.amplification) else top

    def _faults(self) -> Iterator[NodeScore]:
        """The ranked nodes that fail by more than rounding (a fault or an overflow), in rank order."""
        return (s for s in self.ranked if s.kind in (FAULT, OVERFLOW))

    def _hidden_above(self, amp: float) -> bool:
        """Whether a failing node whose inputs were not compared shows an amplification above ``amp``."""
        return any(s.amplification > amp for s in self.ranked if s.unseen and not s.passed)

    @property
    def first_fault(self) -> Optional[NodeScore]:
        """The first node in topological order that fails by more than rounding (a fault or an overflow)."""
        return min(self._faults(), key=lambda s: s.position, default=None)

    def to_dict(self) -> dict:
        first = self.first_fault
        return jsonable(
            {
                "reference": self.label_b,
                "compared": self.label_a,
                "passed": self.passed,
                "storage": self.storage,
                "first_fault": asdict(first) if first is not None else None,
                "topology_known": self.topology_known,
                "tensors_compared": len(self.tensors),
                "first_failure": asdict(self.first_failure) if self.first_failure else None,
                "ranked_nodes": [asdict(n) for n in self.ranked],
                "depth": [asdict(r) for r in self.depth],
                "tensors": [asdict(t) for t in self.tensors],
                "notes": list(self.notes),
            }
        )


def jsonable(obj):
    """Non-finite floats as the strings "inf", "-inf", "nan" (JSON has no such numbers)."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return "nan" if math.isnan(obj) else ("inf" if obj > 0 else "-inf")
    if isinstance(obj, dict):
        return {k: jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    return obj


def diagnose(
    errors: Mapping[str, TensorError],
    topology: Optional[Topology],
    label_a: str = "A",
    label_b: str = "B",
    floor: Optional[float] = None,
) -> Diagnosis:
    """Place ``errors`` in the graph: first failure, ranked nodes, error against depth (the
    amplification ``floor`` follows the labels unless given, see :func:`storage_floor`)."""
    if topology is None:
        return _in_compared_order(errors, label_a, label_b)
    tensors = _placed(errors, topology)
    extra = _unplaced(errors, tensors)  # graph inputs and the like
    first = next((t for t in tensors + extra if not t.passed), None)
    floor = floor if floor is not None else storage_floor(label_a, label_b)
    ranked = _rank(errors, topology, floor)
    storage = next((k for k, v in STORAGE_FLOOR.items() if v == floor), "fp32")
    _classify(ranked, errors, storage)
    return Diagnosis(label_a, label_b, tensors + extra, first, ranked, _depth_rows(tensors),
                     notes=_diagnosis_notes(ranked, extra), storage=storage)


def _unplaced(errors: Mapping[str, TensorError], placed: List[TensorError]) -> List[TensorError]:
    """The errors of tensors no node of the top graph produces."""
    known = {t.name for t in placed}
    return [e for n, e in errors.items() if n not in known]


def _classify(ranked: List[NodeScore], errors: Mapping[str, TensorError], storage: str) -> None:
    """Set each ranked node's kind (ok, overflow, rounding or fault) for runners storing ``storage``."""
    for s in ranked:
        worst = errors.get(s.worst_output)
        s.kind = classify(s.passed, s.output_error, s.amplification, s.depth, storage, worst.ref_max if worst else 0.0)


def _in_compared_order(errors: Mapping[str, TensorError], label_a: str, label_b: str) -> Diagnosis:
    """The diagnosis without a graph topology: the tensors in the order compared."""
    compared = list(errors.values())
    for k, t in enumerate(compared):
        t.position = k
    first = next((t for t in compared if not t.passed), None)
    note = "no graph topology (the model is not ONNX): tensors are in the order compared"
    return Diagnosis(label_a, label_b, compared, first, [], [], topology_known=False, notes=[note])


def _placed(errors: Mapping[str, TensorError], topology: Topology) -> List[TensorError]:
    """The errors of tensors some node produces, in topological order, with their place set."""
    tensors: List[TensorError] = []
    for k, name in enumerate(topology.tensor_order()):
        e = errors.get(name)
        if e is None:
            continue
        node = topology.nodes[topology.producer[name]]
        e.position, e.depth, e.node, e.op = k, node.depth, node.name, node.op
        tensors.append(e)
    return tensors


def _diagnosis_notes(ranked: Sequence[NodeScore], extra: Sequence[TensorError]) -> List[str]:
    notes = []
    if any(s.unseen and not s.passed for s in ranked):
        notes.append(
            "some failing tensors are computed from tensors that were not compared, so the error may start "
            "before the nodes named here; compare every tensor (--onnx-outputs mark all, for the golden "
            "values too) to see where it starts"
        )
    if extra:
        notes.append(f"{len(extra)} compared tensor(s) are produced by no node of the top graph")
    return notes


def _rank(errors: Mapping[str, TensorError], topology: Topology, floor: float = FLOOR) -> List[NodeScore]:
    flow = _ErrorFlow(errors, topology.sources)
    scores: List[NodeScore] = []
    for node in topology.nodes:
        in_err, in_gap = flow.entering(node)
        compared = [errors[t] for t in node.outputs if t in errors]
        if not compared:
            flow.pass_through(node, in_err, in_gap)
            continue
        worst = max(compared, key=lambda e: e.rel_l2)
        flow.measured(node, worst)
        scores.append(_score(node, compared, worst, in_err, in_gap, floor))
    # a node whose inputs were not compared ranks after those whose were: its ratio is an estimate
    scores.sort(key=lambda s: (s.unseen > 0, -s.amplification, s.passed, s.position))
    return scores


class _ErrorFlow:
    """The error estimate of every tensor seen so far (walking the nodes in topological order), and
    the uncompared nodes (longest chain) behind each tensor."""

    def __init__(self, errors: Mapping[str, TensorError], sources) -> None:
        self.errors = errors
        self.est: Dict[str, float] = {name: errors[name].rel_l2 if name in errors else 0.0 for name in sources}
        self.gap: Dict[str, int] = {}

    def entering(self, node: NodeInfo) -> Tuple[float, int]:
        """The largest error estimate among ``node``'s inputs, and the longest uncompared chain behind them."""
        return (max((self.est.get(t, 0.0) for t in node.inputs), default=0.0),
                max((self.gap.get(t, 0) for t in node.inputs), default=0))

    def pass_through(self, node: NodeInfo, in_err: float, in_gap: int) -> None:
        """``node``'s outputs were not compared: they carry its inputs' error, one more node unseen."""
        for t in node.outputs:
            self.est[t] = in_err
            self.gap[t] = in_gap + 1

    def measured(self, node: NodeInfo, worst: TensorError) -> None:
        """``node``'s outputs were compared: each has its error (the worst one where not compared)."""
        for t in node.outputs:
            self.est[t] = self.errors[t].rel_l2 if t in self.errors else worst.rel_l2


def _score(node: NodeInfo, compared: List[TensorError], worst: TensorError, in_err: float, in_gap: int,
           floor: float) -> NodeScore:
    """A node with compared outputs: how much it amplifies the error of its inputs."""
    return NodeScore(
        node.name,
        node.op,
        node.position,
        node.depth,
        list(node.outputs),
        in_err,
        worst.rel_l2,
        amplification(worst.rel_l2, in_err, floor),
        all(e.passed for e in compared),
        worst.name,
        in_gap,
    )


def _depth_rows(tensors: Sequence[TensorError]) -> List[DepthRow]:
    rows: Dict[int, DepthRow] = {}
    for t in tensors:
        if t.depth is None:  # not placed in the graph
            continue
        r = rows.setdefault(t.depth, DepthRow(t.depth, 0, 0, 0.0, 0.0))
        r.tensors += 1
        r.failed += 0 if t.passed else 1
        r.max_tol_ratio = max(r.max_tol_ratio, t.tol_ratio)
        r.max_rel_l2 = max(r.max_rel_l2, t.rel_l2)
    return [rows[d] for d in sorted(rows)]


# ---------------------------------------------------------------------- text


SPARK = "▁▂▃▄▅▆▇█"


def g(x: Optional[float]) -> str:
    """A number in 3 significant digits ("inf", "-" for None)."""
    if x is None:
        return "-"
    if isinstance(x, float) and math.isinf(x):
        return "inf"
    return f"{x:.3g}"


def gx(x: Optional[float]) -> str:
    """A ratio: "12.5x", or "inf" (never "infx")."""
    if isinstance(x, float) and not math.isfinite(x):
        return "inf"
    return f"{g(x)}x"


def sparkline(values: Sequence[float], *, ascii_only: bool = False) -> str:
    """One character per value, on a log scale between the smallest and largest positive value."""
    chars = "_.-=+*#@" if ascii_only else SPARK
    finite = [v for v in values if v > 0 and math.isfinite(v)]
    if not finite:
        return "".join(chars[-1] if math.isinf(v) else chars[0] for v in values)
    lo, hi = math.log10(min(finite)), math.log10(max(finite))
    if hi == lo:  # one positive level: it is the largest, drawn full height (zeros stay lowest)
        lo -= 1.0
    return "".join(_spark(v, chars, lo, hi - lo) for v in values)


def _spark(v: float, chars: str, lo: float, span: float) -> str:
    """The character of ``v`` on the log scale from ``lo`` over ``span`` decades."""
    if math.isinf(v):
        return chars[-1]
    if v <= 0:
        return chars[0]
    level = int(round((math.log10(v) - lo) / span * (len(chars) - 1)))
    return chars[max(0, min(len(chars) - 1, level))]


def describe_tensor(t: TensorError) -> str:
    where = f"'{shown_name(t.name)}'"
    if t.node is not None:
        where += f" (tensor {(t.position or 0) + 1}, depth {t.depth}), produced by node {shown_name(t.node)} [Op: {t.op}]"
    if t.message:
        return f"{where}: {t.message}"
    return (
        f"{where}: max abs {g(t.max_abs)}, max rel {g(t.max_rel)}, {gx(t.tol_ratio)} the tolerance "
        f"(atol {g(t.atol)}, rtol {g(t.rtol)}, {t.stat})"
    )


def describe_node(rank: int, s: NodeScore, storage: str = "fp32") -> str:
    verdict = "ok" if s.passed else f"FAILED ({kind_words(s.kind, storage)})" if s.kind else "FAILED"
    over = " (over the rounding step: its inputs are exact)" if s.input_error == 0 and math.isfinite(s.amplification) else ""
    unseen = f" (inputs not compared: the error may start up to {s.unseen} node(s) earlier)" if s.unseen else ""
    return (
        f"{rank}. {shown_name(s.node)} [Op: {s.op}]{unseen} | amplification {times(s.amplification)}{over} | input error {g(s.input_error)} -> "
        f"output error {g(s.output_error)} (relative L2) | {verdict}"
    )


def fault_line(diag: Diagnosis) -> str:
    """Where the error starts, in the one classification: the first node that fails by more than
    rounding (an overflow or a fault), or that every failing node is rounding."""
    f = diag.first_fault
    rounding = kind_words("rounding", diag.storage)
    if f is None:
        return f"Every failing node is within {rounding}: no fault, no overflow"
    rest = sum(1 for s in diag.ranked if s.kind == "rounding")
    carried = sum(1 for s in diag.ranked if s.kind == "carried")
    tail = f"; {rest} other failing node(s) are {rounding}" if rest else ""
    tail += f"; {carried} carry the error of their inputs" if carried else ""
    return f"Error starts at: {shown_name(f.node)} [Op: {f.op}] ({kind_words(f.kind, diag.storage)}){tail}"


def depth_line(diag: Diagnosis, *, ascii_only: bool = False) -> Optional[str]:
    """``error/tolerance by depth 1..N: ▁▁▂█▇ (max 3.1e+02x)`` or None without depths."""
    if not diag.depth:
        return None
    vals = [r.max_tol_ratio for r in diag.depth]
    crossed = next((r.depth for r in diag.depth if r.failed), None)
    tail = f"; out of tolerance from depth {crossed}" if crossed is not None else "; within tolerance"
    return (
        f"error/tolerance by depth {diag.depth[0].depth}..{diag.depth[-1].depth}: "
        f"{sparkline(vals, ascii_only=ascii_only)} (largest {gx(max(vals))}){tail}"
    )


def text_lines(diag: Diagnosis, *, top: int = TOP_NODES, ascii_only: bool = False) -> List[str]:
    """The diagnosis as plain lines (no colour, no markup)."""
    lines = [f"Diagnosis | {diag.label_a} vs {diag.label_b} | {len(diag.tensors)} tensors compared"]
    if diag.first_failure is not None:
        lines.append("  First out of tolerance: " + describe_tensor(diag.first_failure))
        lines.append("  " + fault_line(diag))
    else:
        lines.append("  Every tensor is within tolerance.")
    if diag.ranked:
        lines.append("  Nodes by error amplification (output error / input error):")
        lines += ["    " + describe_node(k, s, diag.storage) for k, s in enumerate(diag.ranked[:top], 1)]
    line = depth_line(diag, ascii_only=ascii_only)
    if line:
        lines.append("  " + line)
    lines += [f"  note: {n}" for n in diag.notes]
    return lines


def depth_table(diag: Diagnosis, max_rows: int = 12) -> List[DepthRow]:
    """At most ``max_rows`` rows: depths merged into equal buckets (worst of each)."""
    rows = diag.depth
    if len(rows) <= max_rows:
        return list(rows)
    size = math.ceil(len(rows) / max_rows)
    out = []
    for k in range(0, len(rows), size):
        chunk = rows[k : k + size]
        merged = DepthRow(
            chunk[0].depth,
            sum(r.tensors for r in chunk),
            sum(r.failed for r in chunk),
            max(r.max_tol_ratio for r in chunk),
            max(r.max_rel_l2 for r in chunk),
            chunk[-1].depth,
        )
        out.append(merged)
    return out

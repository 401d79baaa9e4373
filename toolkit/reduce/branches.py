"""Inline the branch an If takes for the data a reduce runs with.

``debug reduce`` cuts the top graph only: an If node is kept or dropped whole. When the
data is concrete (``--compare``, or ``--load-inputs``), the value of each top-level If's
condition is known, so the If can be replaced by the branch it takes and the reduce works
on that branch's nodes. Branch tensors keep their names (renamed only on a clash), so a
reference model inlined the same way has the same tensor names. Nested Ifs that become
top-level are decided in further rounds (at most :data:`MAX_ROUNDS`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Set, Tuple

import numpy as np
from onnx import numpy_helper

from toolkit.core.errors import LIBRARY_ERRORS, ToolkitError
from toolkit.core.graph.constants import constant_tensor
from toolkit.core.graph.graphs import (
    external_data_folder,
    fresh_name,
    is_external,
    node_outputs,
    node_subgraphs,
    walk_graphs,
)
from toolkit.core.io.model import save_model
from toolkit.core.io.weights import load_tensor
from toolkit.reduce.accuracy import feed_source
from toolkit.reduce.loading import load_for_index
from toolkit.run.options import RunOptions
from toolkit.run.specs import make_runner
from toolkit.surgeon.fold import inline_branch
from toolkit.surgeon.load import load_for_surgery
from toolkit.surgeon.plumbing import copied, count_nodes, export_graph, import_gs, model_shell, quiet_gs

MAX_ROUNDS = 8  # rounds of inlining (each one level of nested Ifs)


@dataclass
class Decision:
    """One If replaced by its taken branch."""

    node: str  # the If node's name (or "If at position k")
    condition: bool
    nodes: int  # nodes of the taken branch (nested bodies included)
    model: str = "model"  # "model" or "reference model"
    constant: bool = False  # the condition is a constant of the model (the same for every input)

    @property
    def branch(self) -> str:
        return "then" if self.condition else "else"

    def describe(self) -> str:
        what = "" if self.model == "model" else f" ({self.model})"
        when = "(a constant of the model)" if self.constant else "for the given inputs"
        return (
            f"{self.node}{what}: condition {'true' if self.condition else 'false'} {when}; "
            f"reducing its {self.branch}-branch ({self.nodes} node{'s' if self.nodes != 1 else ''})"
        )

    def to_json(self) -> dict:
        return {"node": self.node, "model": self.model, "condition": self.condition, "branch": self.branch,
                "nodes": self.nodes, "constant": self.constant}


@dataclass
class Inlined:
    """The models the reduce runs on instead of the given ones."""

    model: str
    reference_model: Optional[str]
    decisions: List[Decision] = field(default_factory=list)
    # what was given: the model's files (the model, then its external data files) and the
    # reference model; a replay file is bound to them, not to the rewrites (new files each run)
    given_files: List[str] = field(default_factory=list)
    given_reference_model: Optional[str] = None

    @property
    def input_dependent(self) -> bool:
        """Whether some inlined branch was chosen by the data (not by a constant condition)."""
        return any(not d.constant for d in self.decisions)


def _if_label(node, k: int) -> str:
    return node.name or f"If at position {k}"


def _names_outside(model, inlined: set) -> set:
    """Tensor names of the top graph, and of the bodies of its nodes other than those at the
    positions ``inlined`` (names the inlined branches must not reuse)."""

    def names(g) -> set:
        found = {v.name for v in g.input} | {t.name for t in g.initializer}
        return found | set(node_outputs(g))

    taken = names(model.graph)
    for k, node in enumerate(model.graph.node):
        if k not in inlined:
            for sub in node_subgraphs(node):
                for g in walk_graphs(sub):
                    taken |= names(g)
    return taken


def _structure(path: str, external_data_dir=None, files: Optional[list] = None):
    """``path``'s model without reading its big weights (the reduce's own light loader: a
    memory-mapped file cut into fields, big initializers as stubs; external weights left on
    disk), so looking for Ifs costs the graph, not the weights (``files``, if given, receives
    the paths of its external data files)."""

    return load_for_index(path, external_data_dir, files)[0]


def top_level_ifs(model) -> List[Tuple[str, str]]:
    """(label, condition tensor) of every If of the top graph."""
    return [(_if_label(n, k), n.input[0]) for k, n in enumerate(model.graph.node) if n.op_type == "If" and n.input]


def constant_conditions(model, conditions: Sequence[str], base_dir: Optional[str] = None) -> Dict[str, str]:
    """The value (``"true"``/``"false"``) of each condition tensor that is a constant of the top
    graph: an initializer that is not also a graph input, or the output of a Constant node (an
    initializer in an external file is read from ``base_dir``)."""

    found: Dict[str, str] = {}
    for name, tensor in _constant_tensors(model, set(conditions)).items():
        word = _one_bool(tensor, base_dir)
        if word is not None:
            found[name] = word
    return found


def _constant_tensors(model, wanted: set) -> Dict[str, object]:
    """The tensors of the names ``wanted`` that are constants of the top graph: initializers that
    are not also graph inputs, and the values of Constant nodes."""
    tensors = _constant_initializers(model, wanted)
    for node in model.graph.node:
        value = constant_tensor(node) if node.output and node.output[0] in wanted else None
        if value is not None:
            tensors[node.output[0]] = value
    return tensors


def _constant_initializers(model, wanted: set) -> Dict[str, object]:
    """The initializers of the names ``wanted`` that are not also graph inputs (those are constants)."""
    inputs = {v.name for v in model.graph.input}
    return {t.name: t for t in model.graph.initializer if t.name in wanted and t.name not in inputs}


def _one_bool(tensor, base_dir: Optional[str]) -> Optional[str]:
    """``"true"``/``"false"``: the value of a tensor of one value (an external one read from
    ``base_dir``); None for a tensor of another size, or one that cannot be read (damaged or
    external data: left to ONNX-Runtime's verdict)."""
    try:
        if is_external(tensor) and base_dir is not None:
            tensor = copied(tensor)
            load_tensor(tensor, base_dir)
        value = np.asarray(numpy_helper.to_array(tensor))
    except (ToolkitError,) + LIBRARY_ERRORS:
        return None
    return _bool_word(value)


def _bool_word(value) -> Optional[str]:
    """``"true"``/``"false"``: the value of an array of one value; None for another size."""
    return str(bool(value.reshape(-1)[0])).lower() if value.size == 1 else None


def condition_values(path: str, conditions: Sequence[str], feeds, external_data_dir=None) -> Dict[str, str]:
    """The value of each condition tensor on ONNX-Runtime for every feed of ``feeds`` (a
    :class:`toolkit.run.feeds.FeedSource`): ``"true"``/``"false"``, or why it is unknown."""

    names = list(dict.fromkeys(conditions))
    base = RunOptions(path, onnx_outputs=names, external_data_dir=external_data_dir)
    seen: Dict[str, set] = {n: set() for n in names}
    with make_runner("onnxrt", path, base=base, name="conditions") as runner:
        for feed in feeds.feeds(runner.input_metadata(), runner.preferred_shapes()):
            _note_values(seen, feed, dict(runner.infer(feed)))
    return {n: v.pop() if len(v) == 1 else "differs between the given inputs" for n, v in seen.items()}


def _note_values(seen: Dict[str, set], feed: dict, outs: dict) -> None:
    """Add the value each condition of ``seen`` has in one run (fed ``feed``, computing ``outs``)."""
    for name, values in seen.items():
        value = np.asarray(feed[name] if name in feed else outs.get(name))
        values.add(_bool_word(value) or "not one value")


def inline_ifs(path: str, decide: Dict[str, bool], out_path: str, external_data_dir=None) -> List[Decision]:
    """Write ``path`` to ``out_path`` with each top-level If whose label ``decide`` holds
    replaced by the branch it takes (the nodes that only computed conditions removed)."""

    gs = import_gs()
    model, base = load_for_surgery(path, external_data_dir)
    labels = [_if_label(n, k) if n.op_type == "If" else None for k, n in enumerate(model.graph.node)]
    shell = model_shell(model)
    with quiet_gs():
        graph = gs.import_onnx(model)
    used = _names_outside(model, {k for k, label in enumerate(labels) if label in decide})
    decisions, graph.nodes = _take_branches(gs, graph, labels, decide, used)
    with quiet_gs():
        graph.cleanup(remove_unused_graph_inputs=False)
        graph.toposort()
    save_model(export_graph(gs, graph, shell), out_path, external_base_dir=base)
    return decisions


def _take_branches(gs, graph, labels: List[Optional[str]], decide: Dict[str, bool], used: set) -> Tuple[List[Decision], list]:
    """(the decisions, the nodes of ``graph`` with each If ``decide`` holds replaced by the branch it
    takes); ``labels``: each node's If label (None for other nodes), ``used``: the tensor names taken."""

    def unique(name: str) -> str:
        return fresh_name(name, used)

    # names of the nodes that stay (kept Ifs included): inlined nodes are renamed away from them
    node_names = {n.name for n, label in zip(graph.nodes, labels) if n.name and label not in decide}
    decisions: List[Decision] = []
    new_nodes: list = []
    for label, node in zip(labels, list(graph.nodes)):
        if label not in decide:  # (a node that is no If: label None)
            new_nodes.append(node)
            continue
        branch = node.attrs["then_branch" if decide[label] else "else_branch"]
        decisions.append(Decision(label, decide[label], count_nodes(branch)))
        new_nodes.extend(_inlined_body(gs, graph, node, branch, unique, node_names))
    return decisions, new_nodes


def _inlined_body(gs, graph, node, branch, unique: Callable[[str], str], node_names: set) -> list:
    """The nodes of ``branch`` inlined in place of the If ``node``, named apart from ``node_names``."""
    body = inline_branch(gs, graph, node, branch, unique)
    for n in body:
        n.name = fresh_name(n.name or n.op, node_names)
    return body


def _round(path: str, feeds, out_path: str, external_data_dir, skip: set) -> Tuple[List[Decision], Dict]:
    """One round: decide the top-level Ifs of ``path`` not in ``skip``, inline them into
    ``out_path``. Constant conditions are read from the model; the others are computed on
    ``feeds`` (left undecided when ``feeds`` is None)."""
    model = _structure(path, external_data_dir)
    ifs = [(label, cond) for label, cond in top_level_ifs(model) if label not in skip]
    if not ifs:
        return [], {}

    values, constant = _condition_values(model, path, [c for _, c in ifs], feeds, external_data_dir)
    decide, unknown = _decided(ifs, values)
    if not decide:
        return [], unknown
    decisions = inline_ifs(path, decide, out_path, external_data_dir)
    by_label = dict(ifs)
    for d in decisions:
        d.constant = by_label[d.node] in constant
    return decisions, unknown


def _condition_values(model, path: str, conds: List[str], feeds, external_data_dir) -> Tuple[Dict[str, str], Set[str]]:
    """({condition: value} of the conditions ``conds`` known, the constant ones among them): the
    constant ones read from ``model`` (loaded from ``path``), the others computed on ``feeds``
    (none when ``feeds`` is None)."""
    values = constant_conditions(model, conds, external_data_folder(path, external_data_dir))
    constant = set(values)
    rest = [c for c in conds if c not in values]
    if rest and feeds is not None:
        values.update(condition_values(path, rest, feeds, external_data_dir))
    return values, constant


def _decided(ifs: List[Tuple[str, str]], values: Dict[str, str]) -> Tuple[Dict[str, bool], Dict[str, str]]:
    """({label: branch taken (True: then)} of the Ifs ``ifs`` whose condition has a value in
    ``values``, {label: why not} of the others)."""
    decide = {label: values[cond] == "true" for label, cond in ifs if values.get(cond) in ("true", "false")}
    unknown = {label: values.get(cond, "depends on the inputs") for label, cond in ifs if label not in decide}
    return decide, unknown


def inline_taken_branches(path: str, feeds, folder: str, *, external_data_dir=None,
                          label: str = "model") -> Tuple[str, List[Decision], Dict[str, str]]:
    """Inline the taken branch of every top-level If of ``path`` (rounds for nested ones), the
    conditions computed on ``feeds`` (a :class:`toolkit.run.feeds.FeedSource`). Returns the model to use (``path`` itself when nothing was inlined), the decisions and the
    Ifs left whole with why."""
    current = path
    decisions: List[Decision] = []
    unknown: Dict[str, str] = {}
    stem = "reference" if label != "model" else "model"
    for k in range(MAX_ROUNDS):
        out = os.path.join(folder, f"{stem}_inlined_{k + 1}.onnx")
        done, why = _round(current, feeds, out, external_data_dir if k == 0 else None, set(unknown))
        unknown.update(why)
        if not done:
            break
        for d in done:
            d.model = label
        decisions.extend(done)
        current = out
    return current, decisions, unknown


def inline_for_reduce(model: str, opts, folder: str, log: Callable[[str], None], *,
                      with_data: bool = True) -> Optional[Inlined]:
    """Inline the taken branches of ``model`` (and of ``opts.reference_model``): Ifs whose
    condition is a constant of the model always, the others for the inputs ``opts`` (a
    :class:`toolkit.reduce.accuracy.CompareOptions`) describes when ``with_data``. None when the
    model has no top-level If or none could be decided."""

    external: List[str] = []
    if not top_level_ifs(_structure(model, opts.external_data_dir, external)):
        return None

    # the data files are read now: their errors are the user's
    source = feed_source(opts, lambda _msg: None) if with_data else None

    try:
        path, ref, decisions, unknown = _inline_both(model, opts, folder, source)
    except ToolkitError as exc:
        # e.g. a model ONNX-Runtime cannot run (a custom op for the runner under test): the reduce goes on as before
        log(f"note: the If conditions could not be computed on the given inputs ({exc}); each If is kept whole")
        return None
    for decision in decisions:
        log(decision.describe())
    _say_kept_whole(unknown, with_data, log)
    if not decisions:
        return None
    return Inlined(path, ref, decisions, [model, *external], opts.reference_model)


def _inline_both(model: str, opts, folder: str, source):
    """:func:`inline_taken_branches` of ``model``, then (when some If was inlined) of the reference
    model; returns (model path, reference model path, decisions, Ifs kept whole of the model)."""
    kw = {"external_data_dir": opts.external_data_dir}
    path, decisions, unknown = inline_taken_branches(model, source, folder, **kw)
    ref = opts.reference_model
    if ref and decisions:
        ref, ref_decisions, _ = inline_taken_branches(ref, source, folder, label="reference model", **kw)
        decisions += ref_decisions
    return path, ref, decisions, unknown


def _say_kept_whole(unknown: Dict[str, str], with_data: bool, log: Callable[[str], None]) -> None:
    """Log the Ifs kept whole (``unknown``: label -> why): each with its reason when the inputs
    were given, else in one note."""
    if with_data:
        for name, why in unknown.items():
            log(f"{name}: condition {why}; kept whole")
    elif unknown:
        names = ", ".join(list(unknown)[:4]) + (f" and {len(unknown) - 4} more" if len(unknown) > 4 else "")
        log(f"note: {names}: condition depends on the inputs, so each such If is kept whole "
            "(--load-inputs or --compare lets the reduce go inside the branch the inputs take)")

"""Choosing which tensors a run returns (``--onnx-outputs`` / ``--onnx-exclude-outputs``).

``mark all`` (or ``*``) means every output of every non-``Constant`` node of the top
graph plus the graph's own outputs, in node order. Other words are exact tensor names
or glob patterns (``*``, ``?``, ``[...]``) matched against that same set. The chosen
tensors replace the model's outputs. Exclusions (names or globs) are removed last.

Tensors are added as graph outputs without shape information: only the element type
is copied when the model already records it (ONNX-Runtime infers the rest itself,
which is cheaper than running ONNX shape inference over a large model).
"""

from __future__ import annotations

import fnmatch
from typing import Any, Dict, Iterable, List, Optional, Sequence, Set

from toolkit.core.errors import InputError, UsageError
from toolkit.core.graph.constants import is_constant_node

_GLOB_CHARS = set("*?[")


def _is_glob(word: str) -> bool:
    return any(c in _GLOB_CHARS for c in word)


def candidate_outputs(graph) -> List[str]:
    """Outputs of the non-Constant nodes of ``graph`` plus its outputs, unique, in order."""
    seen = set()
    names: List[str] = []
    for node in graph.node:
        if is_constant_node(node):
            continue
        for out in node.output:
            if out and out not in seen:
                seen.add(out)
                names.append(out)
    for vi in graph.output:
        if vi.name not in seen:
            seen.add(vi.name)
            names.append(vi.name)
    return names


def _normalize_words(words: Sequence[str]) -> List[str]:
    """Drop the ``mark`` prefix of ``mark all`` wherever it appears with other words."""
    out: List[str] = []
    i = 0
    words = list(words)
    while i < len(words):
        w = words[i]
        if w == "mark" and i + 1 < len(words) and words[i + 1] == "all":
            out.append("*")
            i += 2
            continue
        out.append(w)
        i += 1
    return out


def _matches(word: str, candidates: Sequence[str], known: Set[str], option: str, where: str, hint: str) -> List[str]:
    """The tensors one ``--onnx-outputs`` word names: ``*`` (all candidates), a glob, or a name."""
    if word == "*":
        return list(candidates)
    if _is_glob(word):
        hits = [n for n in candidates if fnmatch.fnmatchcase(n, word)]
        if not hits:
            raise InputError(f"{option} pattern '{word}' matches no tensor of {where}")
        return hits
    if word not in known:
        if word.lower() in ("mark", "all"):
            raise UsageError(f"{option} {word}: to return every tensor write '{option} mark all' (or '*')")
        raise InputError(f"{option} names '{word}', which is no tensor of {where}{hint}")
    return [word]


def _excludes(word: str, name: str) -> bool:
    """Whether exclusion ``word`` (a glob or a name) removes ``name``."""
    return fnmatch.fnmatchcase(name, word) if _is_glob(word) else name == word


def choose_names(
    candidates: Sequence[str],
    default: Sequence[str],
    patterns: Optional[Sequence[str]],
    exclude: Optional[Sequence[str]] = None,
    *,
    known: Optional[Iterable[str]] = None,
    option: str = "--onnx-outputs",
    exclude_option: str = "--onnx-exclude-outputs",
    where: str = "the model",
    unknown_hint: str = "",
) -> List[str]:
    """Resolve output patterns (``mark all``/``*``, globs, names) against tensor names.

    ``candidates`` are what ``*`` and globs choose from (in order); ``default`` is kept when
    there are no patterns; ``known`` are the names that may be given exactly (default:
    candidates + default). Exclusions (names or globs) are removed last. Raises UsageError
    for an empty result and InputError (exit 3, like every unknown tensor name) for an
    unknown name or a glob that matches nothing.
    """
    known_set = set(known) if known is not None else set(candidates) | set(default)
    chosen: List[str] = []
    for word in _normalize_words(patterns) if patterns else []:
        chosen += _matches(word, candidates, known_set, option, where, unknown_hint)
    chosen = list(dict.fromkeys(chosen if patterns else default))  # first occurrence of each name
    chosen = [n for n in chosen if not any(_excludes(word, n) for word in exclude or ())]
    if not chosen:
        raise UsageError(f"no outputs left to return; check {option} and {exclude_option}")
    return chosen


def select_outputs(
    model, patterns: Sequence[str], exclude: Optional[Sequence[str]] = None, *, option: str = "--onnx-outputs"
) -> List[str]:
    """The tensor names the run should return, given ``--onnx-outputs`` and exclusions.

    ``patterns`` empty/None keeps the model's outputs. Raises UsageError for a name that is
    no tensor of the top graph, or a glob that matches nothing. ``option``: the flag named in
    those errors (``--openvino-outputs``; its exclusions flag is ``option`` with ``-exclude``).
    """
    graph = model.graph
    candidates = candidate_outputs(graph)
    known = set(candidates)
    known.update(vi.name for vi in graph.input)
    for node in graph.node:
        known.update(o for o in node.output if o)
    return choose_names(
        candidates,
        [vi.name for vi in graph.output],
        patterns,
        exclude,
        known=known,
        option=option,
        exclude_option=option.replace("-outputs", "-exclude-outputs"),
        where="the model's top graph",
        unknown_hint="; `toolkit inspect model` lists the tensor names",
    )


def set_outputs(model, names: Sequence[str]) -> None:
    """Make ``names`` the outputs of ``model`` (in place), keeping known element types."""
    graph = model.graph
    known: Dict[str, Any] = {}
    for coll in (graph.output, graph.value_info, graph.input):
        for vi in coll:
            known.setdefault(vi.name, vi)
    original = {o.name for o in graph.output}
    new = [_output_info(name, known.get(name), name in original) for name in names]
    copies = [_copy_vi(vi) for vi in new]
    del graph.output[:]
    graph.output.extend(copies)


def _output_info(name: str, old, is_output: bool):
    """The ValueInfo of new output ``name``: an original output's own (``old``); else the name with
    the element type ``old`` (a value_info or an input) knows."""
    import onnx

    if old is not None and is_output:
        return old  # an original output keeps its full info
    vi = onnx.ValueInfoProto(name=name)
    if old is not None and old.type.HasField("tensor_type") and old.type.tensor_type.elem_type:
        vi.type.tensor_type.elem_type = old.type.tensor_type.elem_type
    return vi


def outputs_patch(model, names: Sequence[str]) -> bytes:
    """Serialized ModelProto that, appended to ``model``'s bytes, adds ``names`` as outputs.

    Protobuf merges a message that appears twice, and appends repeated fields, so
    ``model_bytes + outputs_patch(model, names)`` parses as the model with the extra
    outputs (those not already outputs), without re-serializing its weights.
    """
    import onnx

    graph = model.graph
    existing = {o.name for o in graph.output}
    known: Dict[str, Any] = {}
    for coll in (graph.value_info, graph.input):
        for vi in coll:
            known.setdefault(vi.name, vi)
    patch = onnx.ModelProto()
    for name in names:
        if name in existing:
            continue
        existing.add(name)
        vi = patch.graph.output.add()
        vi.name = name
        old = known.get(name)
        if old is not None and old.type.HasField("tensor_type") and old.type.tensor_type.elem_type:
            vi.type.tensor_type.elem_type = old.type.tensor_type.elem_type
    if not len(patch.graph.output):
        return b""
    return patch.SerializeToString()


def _copy_vi(vi):
    import onnx

    c = onnx.ValueInfoProto()
    c.CopyFrom(vi)
    return c

"""How big a model becomes once its local functions are inlined, known before onnx's shape
inference or a runtime inlines them.

A model's local functions may call each other: F0 calling F1 twice, F1 calling F2 twice, ...
makes 3 KB of model inline to 2^N nodes, and onnx's shape inference or a runtime's session
creation then runs for minutes inside C++ where no signal reaches Python. The count below
walks the call tree once per function (memoised), and :func:`check_inlined_size` refuses a
model over ``--max-nodes`` (:mod:`toolkit.core.limits`) with exit 3 before any of that runs.

No numpy or Typer here (onnx only where a file has to be parsed).
"""

from __future__ import annotations

import mmap
import os
from typing import Dict, Iterator, Tuple

from toolkit.core import limits
from toolkit.core.contain import carried
from toolkit.core.errors import InputError
from toolkit.core.graph.graphs import node_subgraphs
from toolkit.core.io.protowire import scan_fields

FUNCTIONS_FIELD = 25  # ModelProto.functions


def inlined_node_count(model, cap: int) -> int:
    """Nodes of the model once every call of a local function is inlined: the top graph, every
    If/Loop/Scan body at any depth, and each function body once per call (counting stops just
    past ``cap``). A Loop body counts once, however many times it runs."""
    funcs = {_key(f.domain, f.name, f.overload): f for f in model.functions}
    sizes = _function_sizes(funcs, cap)
    return _count(model.graph.node, sizes, cap)


def _key(domain: str, name: str, overload: str = "") -> Tuple[str, str, str]:
    return (domain or "", name, overload or "")


def _node_key(node) -> Tuple[str, str, str]:
    return _key(node.domain, node.op_type, getattr(node, "overload", ""))


def _calls(nodes, funcs) -> Iterator[Tuple[str, str, str]]:
    """The functions ``nodes`` call, in their bodies (If/Loop/Scan) too."""
    for node in nodes:
        key = _node_key(node)
        if key in funcs:
            yield key
        for sub in node_subgraphs(node):
            yield from _calls(sub.node, funcs)


def _function_sizes(funcs: dict, cap: int) -> Dict[Tuple[str, str, str], int]:
    """Inlined size of every function (capped at ``cap + 1``), callees first, without Python
    recursion along the call chain (a chain of thousands of functions is a valid file); a call
    cycle (which onnx refuses anyway) counts as too big."""
    sizes: Dict[Tuple[str, str, str], int] = {}
    visiting: set = set()
    for root in funcs:
        stack = [(root, list(dict.fromkeys(_calls(funcs[root].node, funcs))))]
        visiting.add(root)
        while stack:
            key, pending = stack[-1]
            while pending and pending[-1] in sizes:
                pending.pop()
            if pending:
                callee = pending.pop()
                if callee in visiting:  # a cycle
                    sizes[callee] = cap + 1
                    continue
                visiting.add(callee)
                stack.append((callee, list(dict.fromkeys(_calls(funcs[callee].node, funcs)))))
                continue
            stack.pop()
            visiting.discard(key)
            sizes.setdefault(key, min(_count(funcs[key].node, sizes, cap), cap + 1))
    return sizes


def _count(nodes, sizes: dict, cap: int) -> int:
    total = 0
    for node in nodes:
        total += sizes.get(_node_key(node), 1)
        for sub in node_subgraphs(node):
            total += _count(sub.node, sizes, cap)
        if total > cap:
            return cap + 1
    return total


def check_inlined_size(model, path: str) -> None:
    """InputError when ``model``'s local functions inline to more than --max-nodes nodes."""
    if not len(model.functions):
        return
    cap = limits.max_nodes
    count = inlined_node_count(model, cap)
    if count > cap:
        raise InputError(
            f"{path}: its {len(model.functions)} local functions inline to more than {cap} nodes (functions that "
            "call each other several times multiply, If/Loop/Scan bodies included), so shape inference or a runtime "
            "would not finish; nothing was run. If the model is right, raise the limit with --max-nodes"
        )


def file_has_functions(path: str) -> bool:
    """Whether the model file at ``path`` has local functions (its top-level fields only are read)."""
    try:
        with open(path, "rb") as fh:
            if os.fstat(fh.fileno()).st_size == 0:
                return False
            with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as data:
                return any(num == FUNCTIONS_FIELD for num, *_ in scan_fields(data))
    except (OSError, ValueError):  # unreadable, or not a protobuf message
        return False


def check_model_file(path: str) -> None:
    """:func:`check_inlined_size` for a model file a runtime is about to load by path (the model
    is parsed, without its weights, only when it has local functions)."""
    if not file_has_functions(path):
        return
    import onnx
    from google.protobuf.message import Error as ProtobufError

    try:
        model = onnx.load_model(path, load_external_data=False)
    except (OSError, ValueError, ProtobufError):  # the runtime words a model it cannot read
        return
    check_inlined_size(model, path)


def interruptible(fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` run in a helper thread while the main thread waits for it.

    Work inside a C++ library (a runtime's session creation, onnx's shape inference) holds the
    main thread where Python cannot run a signal handler, so Ctrl-C or SIGTERM would wait for
    it to return, possibly for hours. Waiting in short joins instead, the main thread runs the
    handler at once: the command ends with exit 130 and the helper thread, a daemon, ends with
    the process. Its result or exception is handed back as if ``fn`` had run here."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        return fn(*args, **kwargs)
    box: list = []
    helper = threading.Thread(target=lambda: box.append(carried(fn, *args, **kwargs)), name="toolkit-library-call",
                              daemon=True)
    helper.start()
    while helper.is_alive():
        helper.join(0.05)
    return box[0].get()

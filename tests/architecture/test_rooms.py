"""The house's structural rules, measured: one fork supervisor, where ``--atol`` is spelled, field
lists written twice across layers, broad and bug-shaped catches, average complexity.

Each rule is a plain test of its bar; average complexity also keeps a ratchet at today's measure
(it may shrink, never grow).
"""

from __future__ import annotations

import ast
import sys
import itertools
import pathlib
from typing import Any, Dict, List, Set, Tuple

import pytest

PKG = pathlib.Path(__file__).resolve().parents[2] / "toolkit"


def _modules():
    for path in sorted(PKG.rglob("*.py")):
        yield path, ast.parse(path.read_text(), filename=str(path))


def _rel(path: pathlib.Path) -> str:
    return str(path.relative_to(PKG.parent))


# ---------------------------------------------------------------------- one fork supervisor


def test_only_the_supervisor_calls_os_fork():
    """Every fork goes through ``core.process.supervise.fork``: the child gets the parent-death
    signal, so it never outlives its command."""
    calls = []
    for path, tree in _modules():
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "fork"
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "os"):
                calls.append(f"{_rel(path)}:{node.lineno}")
    assert [c.split(":")[0] for c in calls] == ["toolkit/core/process/supervise.py"], calls


# ---------------------------------------------------------------------- --atol


ATOL_BAR = 3
# the declaration (core/compare/tolerances.py); every help text, advice, refusal and log line that
# names the flag reads it from there (ATOL_FLAG, TOLERANCE_OPTIONS), so renaming the option renames them all


def _atol_files() -> List[str]:
    return sorted(_rel(p) for p in PKG.rglob("*.py") if "--atol" in p.read_text())


def test_atol_is_spelled_in_at_most_three_files():
    files = _atol_files()
    assert len(files) <= ATOL_BAR, "\n".join(files)


_MARK = "0.000731"  # an --atol value nothing else in a run holds
_TOKENIZER = "toolkit/cli/grammar.py"  # (looks at each token of the command line: is it a value?)


def _holds_the_text(value: Any, depth: int = 0) -> bool:
    """Whether ``value`` is the --atol option's value as text: the text, the option's list of values,
    or (one level down) a dict or options object holding them."""
    if isinstance(value, str):
        return value == _MARK
    if isinstance(value, (list, tuple)):
        return len(value) == 1 and _holds_the_text(value[0], depth)
    if depth == 0 and isinstance(value, dict):
        return any(_holds_the_text(v, 1) for v in list(value.values()))
    if depth == 0 and hasattr(type(value), "__dataclass_fields__"):
        return any(_holds_the_text(getattr(value, f, None), 1) for f in type(value).__dataclass_fields__)
    return False


def test_run_atol_is_text_in_at_most_three_files(cli, tmp_path, monkeypatch):
    """``toolkit run --atol``: the files whose functions hold the option's value as text, from the
    command line to the first array comparison (traced): the option is typed where it is declared,
    then travels typed, not as text handed on and parsed again."""
    import modelzoo

    modelzoo.save(modelzoo.chain(1, shape=(2,)), tmp_path / "m.onnx")  # (x -> Relu -> y)
    monkeypatch.setenv("TOOLKIT_NO_SUPERVISOR", "1")  # (the comparison in this process, where it is traced)
    seen: Dict[str, None] = {}
    compared = []

    def trace(frame, event, arg):
        path = frame.f_code.co_filename
        if compared or event != "call" or not path.startswith(str(PKG)):
            return
        if any(_holds_the_text(v) for v in list(frame.f_locals.values())):
            seen[_rel(pathlib.Path(path))] = None
        if frame.f_code.co_name == "compare_arrays":
            compared.append(frame.f_locals.get("atol"))

    sys.setprofile(trace)
    try:
        r = cli("run", tmp_path / "m.onnx", "--onnxrt", "--onnxrt", "--atol", _MARK)
    finally:
        sys.setprofile(None)
    assert r.code == 0 and compared == [float(_MARK)], r.err
    files = [f for f in seen if f != _TOKENIZER]
    assert len(files) <= ATOL_BAR, files


# ---------------------------------------------------------------------- field lists written twice


def _field_lists() -> List[Tuple[str, str, Set[str]]]:
    """(layer, module:Class, annotated field names) of every class with 5 fields or more."""
    out = []
    for path, tree in _modules():
        layer = path.relative_to(PKG).parts[0].removesuffix(".py")
        module = ".".join(path.relative_to(PKG).with_suffix("").parts)
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                names = {s.target.id for s in node.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)}
                if len(names) >= 5:
                    out.append((layer, f"{module}:{node.name}", names))
    return out


def _shared_across_layers() -> Dict[Tuple[str, str], int]:
    pairs = {}
    for (la, a, fa), (lb, b, fb) in itertools.combinations(_field_lists(), 2):
        if la != lb and len(fa & fb) >= 5:
            pairs[tuple(sorted((a, b)))] = len(fa & fb)
    return pairs


def test_no_two_classes_share_five_field_names_across_layers():
    """Commands bind their library configs (each option declared on the config's field), the options
    several configs take are dataclasses they inherit (core.shared_options), the fields every search
    answers too (search.outcome), and the comparison's result types share one base
    (core.compare.judged): a field list written twice across layers fails here: make one the other,
    or share a dataclass."""
    pairs = _shared_across_layers()
    assert not pairs, "\n".join(f"{a} / {b}: {n} field names" for (a, b), n in sorted(pairs.items()))


# ---------------------------------------------------------------------- catches


BOUNDARY = {"toolkit/cli/errors.py", "toolkit/cli/app.py"}  # the one error boundary (docs/architecture.md)
# The one mechanism for what must catch everything, each use named for why: a value or exception carried
# to whoever waits on it (threads, children, callbacks foreign code calls), an optional refinement.
CONTAINED = {"toolkit/core/contain.py"}
BUGS = {"AttributeError", "KeyError", "TypeError", "IndexError"}


def _named(expr) -> Set[str]:
    """The names an expression mentions (``a.B`` as ``B``; calls by their function's name)."""
    return {n.id if isinstance(n, ast.Name) else n.attr for n in ast.walk(expr) if isinstance(n, (ast.Name, ast.Attribute))}


def _aliases() -> Dict[str, Set[str]]:
    """Names that stand for exception types: module-level tuples (``PYTHON_ERRORS = (...)``) and
    functions returning them (``graphsurgeon_errors()``), each with the names it mentions."""
    found: Dict[str, Set[str]] = {}
    for _path, tree in _modules():
        for node in tree.body:
            if isinstance(node, ast.Assign) and isinstance(node.value, (ast.Tuple, ast.BinOp)):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        found.setdefault(target.id, set()).update(_named(node.value))
            elif isinstance(node, ast.FunctionDef) and node.name.endswith("_errors"):
                for ret in ast.walk(node):
                    if isinstance(ret, ast.Return) and ret.value is not None:
                        found.setdefault(node.name, set()).update(_named(ret.value))
    return found


def _caught(expr, aliases: Dict[str, Set[str]]) -> Set[str]:
    """What an ``except`` clause's type expression catches, its aliases followed."""
    names, todo = set(), list(_named(expr))
    while todo:
        name = todo.pop()
        if name not in names:
            names.add(name)
            todo.extend(aliases.get(name, ()))
    return names


def _handlers():
    """(file, line, names caught, whether the handler re-raises) of every except clause."""
    aliases = _aliases()
    for path, tree in _modules():
        for node in ast.walk(tree):
            if isinstance(node, ast.ExceptHandler):
                names = _caught(node.type, aliases) if node.type is not None else set()
                body = ast.Module(body=node.body, type_ignores=[])
                reraises = any(isinstance(n, ast.Raise) for n in ast.walk(body)) or "reraise_bug" in ast.unparse(body)
                yield _rel(path), node.lineno, names or {"<bare>"}, reraises


def _broad_swallowed() -> List[str]:
    return [f"{f}:{line}" for f, line, names, reraises in _handlers()
            if names & {"Exception", "BaseException", "<bare>"} and not reraises and f not in BOUNDARY | CONTAINED]


def _bugs_swallowed() -> List[str]:
    return [f"{f}:{line} {sorted(names & BUGS)}" for f, line, names, reraises in _handlers()
            if names & BUGS and not reraises]


def test_no_broad_catch_outside_the_boundary():
    """``except Exception`` (or broader) without a re-raise lives in the error boundary and in
    ``core.contain`` alone: elsewhere a catch names what the call raises, or goes through
    ``contain.carried`` (handed to whoever waits) or ``contain.optional`` (a refinement)."""
    assert not _broad_swallowed(), "\n".join(_broad_swallowed())


def test_no_bug_shaped_exception_is_swallowed():
    """A handler of AttributeError, KeyError, TypeError or IndexError hides toolkit's own bugs: catch
    what the library call raises for the bad value instead (numpy's C functions raise TypeError from
    toolkit's own frame, so ``reraise_bug`` cannot tell them apart: test the value first), or call
    ``reraise_bug`` where a Python library raises them on a value it cannot take."""
    found = _bugs_swallowed()
    assert not found, "\n".join(found)


# ---------------------------------------------------------------------- complexity


RADON_BAR = 4.0
RADON_NOW = 3.78  # radon cc -a toolkit (5.15 before the simplification passes)


def _average_complexity() -> float:
    cc = pytest.importorskip("radon.complexity")
    total = count = 0
    for path in sorted(PKG.rglob("*.py")):
        for block in cc.cc_visit(path.read_text()):  # (the blocks `radon cc -a` averages)
            total, count = total + block.complexity, count + 1
    return total / count


def test_average_complexity_does_not_grow():
    assert _average_complexity() <= RADON_NOW + 0.005


def test_average_complexity_is_at_most_four():
    assert _average_complexity() <= RADON_BAR


def test_the_catch_scan_sees_a_swallowed_bug(tmp_path, monkeypatch):
    """The scan itself: a handler of AttributeError that does not re-raise is found."""
    fake = tmp_path / "toolkit"
    fake.mkdir()
    (fake / "m.py").write_text("try:\n    pass\nexcept (AttributeError, ValueError):\n    pass\n")
    monkeypatch.setitem(globals(), "PKG", fake)
    assert _bugs_swallowed() == ["toolkit/m.py:3 ['AttributeError']"]
    (fake / "m.py").write_text("try:\n    pass\nexcept (AttributeError, ValueError) as exc:\n    reraise_bug(exc)\n")
    assert _bugs_swallowed() == []
    # behind a name: a module's tuple, or a function returning one
    (fake / "m.py").write_text("BAD = (OSError, KeyError)\ndef lib_errors():\n    return BAD + (ValueError,)\n"
                               "try:\n    pass\nexcept lib_errors():\n    pass\n")
    assert _bugs_swallowed() == ["toolkit/m.py:6 ['KeyError']"]

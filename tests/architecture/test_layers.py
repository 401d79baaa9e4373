"""Module-shape rules no configured tool holds: every toolkit import names something that exists, no private
name imported across modules, no module outside cli/ over 800 lines, imports at module level, broad excepts
say why. The layers and the absence of import cycles are import-linter contracts (pyproject.toml, run by
tests/architecture/test_lint.py and .ci/run).

Every import in every module counts, also those inside functions (where the heavy ones live).
"""

from __future__ import annotations

import ast
import pathlib

PKG = pathlib.Path(__file__).resolve().parents[2] / "toolkit"


def test_every_toolkit_import_names_something_that_exists():
    """Imports inside functions run late (and some sit behind a broad ``except``): a name that
    was moved or renamed must fail here, not in a user's run."""
    import importlib

    missing = []
    for path in sorted(PKG.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom) or node.level or not (node.module or "").startswith("toolkit"):
                continue
            try:
                module = importlib.import_module(node.module)
            except ImportError as exc:
                missing.append(f"{path.relative_to(PKG.parent)}:{node.lineno} {node.module}: {exc}")
                continue
            for alias in node.names:
                if alias.name != "*" and not hasattr(module, alias.name):
                    try:
                        importlib.import_module(f"{node.module}.{alias.name}")
                    except ImportError:
                        missing.append(f"{path.relative_to(PKG.parent)}:{node.lineno} {node.module}.{alias.name}")
    assert not missing, "\n".join(missing)


# ---------------------------------------------------------------------- code shape


def module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_statements(path: pathlib.Path):
    """``(node, target module, inside a function)`` for every import statement of a module.

    ``target`` is the absolute module a ``from`` import reads from (relative ones resolved)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []

    def visit(node, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ImportFrom):
                if child.level:
                    base = package.split(".")[: len(package.split(".")) - child.level + 1]
                    target = ".".join(base + ([child.module] if child.module else []))
                else:
                    target = child.module or ""
                found.append((child, target, in_function))
            elif isinstance(child, ast.Import):
                found.append((child, "", in_function))
            visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    visit(tree, False)
    return found


ALL_MODULES = {module_name(p): p for p in sorted(PKG.rglob("*.py"))}


def private_imports(modules: dict) -> list:
    """``from toolkit.X import _name`` in any module but X itself."""
    bad = []
    for name, path in modules.items():
        for node, target, _ in import_statements(path):
            if isinstance(node, ast.ImportFrom) and target.startswith("toolkit") and target != name:
                bad += [f"{name}:{node.lineno} {target}.{alias.name}"
                        for alias in node.names if alias.name.startswith("_") and not alias.name.startswith("__")]
    return bad


def test_no_private_name_is_imported_from_another_module():
    """What modules share has a public name in the module that owns it."""
    bad = private_imports(ALL_MODULES)
    assert not bad, "\n".join(bad)


def test_the_private_import_check_sees_a_lazy_one(tmp_path, monkeypatch):
    fake = tmp_path / "toolkit" / "core" / "fake.py"
    fake.parent.mkdir(parents=True)
    fake.write_text("from toolkit.core.errors import one_line\n\n\ndef f():\n    from .errors import _secret\n")
    monkeypatch.setattr(__import__(__name__), "PKG", tmp_path / "toolkit")
    assert private_imports({"toolkit.core.fake": fake}) == ["toolkit.core.fake:5 toolkit.core.errors._secret"]


MAX_MODULE_LINES = 800


def test_no_module_outside_cli_is_over_800_lines():
    big = [f"{name}: {len(path.read_text().splitlines())} lines" for name, path in ALL_MODULES.items()
           if not name.startswith("toolkit.cli") and len(path.read_text().splitlines()) > MAX_MODULE_LINES]
    assert not big, "split by concern:\n" + "\n".join(big)


def test_imports_sit_at_module_level():
    """Fewer than 20% of import statements inside functions: a module's dependencies read from its top.
    What stays inside a function: optional extras (tensorrt, openvino, ray, ...), slow libraries few
    commands need (sympy, onnxconverter_common), heavy libraries in the modules ``--help`` loads,
    and the command bodies of ``cli/`` (docs/architecture.md, "Start-up")."""
    statements = [s for path in ALL_MODULES.values() for s in import_statements(path)]
    inside = sum(1 for _, _, in_function in statements if in_function)
    assert inside / len(statements) < 0.20, f"{inside} of {len(statements)} imports inside functions"


def test_every_broad_except_says_why():
    """A library's failure is caught by what that library raises (``core.errors.LIBRARY_ERRORS``,
    ``ort_errors()``, ...); an ``except Exception`` left says in a comment why it must catch everything."""
    import re

    bare = []
    for name, path in ALL_MODULES.items():
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"except Exception\b", line):
                why = line.split("#", 1)[1] if "#" in line else ""
                if not re.sub(r"noqa: \w+\s*-?", "", why).strip():
                    bare.append(f"{name}:{number}: {line.strip()}")
    assert not bare, "\n".join(bare)

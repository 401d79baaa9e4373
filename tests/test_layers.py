"""The layers point one way: cli -> {reduce, precision} -> run -> backends -> {surgeon, convert, inspect} -> core.

Every import in every module counts, also those inside functions (where the heavy ones live).
"""

from __future__ import annotations

import ast
import pathlib

import pytest

PKG = pathlib.Path(__file__).resolve().parent.parent / "toolkit"

# layer -> the toolkit packages it must never import
_COMMANDS = {"surgeon", "convert", "inspect"}
FORBIDDEN = {
    "core": {"backends", "reduce", "run", "cli", "precision"} | _COMMANDS,
    "surgeon": {"backends", "reduce", "run", "cli", "precision", "convert", "inspect"},
    "convert": {"backends", "reduce", "run", "cli", "precision", "inspect"},
    "inspect": {"backends", "reduce", "run", "cli", "precision", "convert"},
    "backends": {"reduce", "run", "cli", "precision"},
    "run": {"reduce", "cli"},
    "reduce": {"cli"},
    "precision": {"cli"},
}


def imported_toolkit_packages(path: pathlib.Path) -> dict:
    """``{"backends": [line, ...], ...}``: the toolkit subpackages a module imports, with line numbers."""
    tree = ast.parse(path.read_text(), filename=str(path))
    parts = path.relative_to(PKG.parent).with_suffix("").parts
    package = parts[:-1]
    found: dict = {}
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against this module's package
                base = list(package[: len(package) - node.level + 1])
                names = [".".join(base + ([node.module] if node.module else []))]
            else:
                names = [node.module or ""]
        for name in names:
            bits = name.split(".")
            if bits[0] == "toolkit" and len(bits) > 1:
                found.setdefault(bits[1], []).append(node.lineno)
    return found


def modules(layer: str):
    return sorted((PKG / layer).rglob("*.py"))


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_layer_imports_point_one_way(layer):
    assert modules(layer), f"toolkit/{layer} has no modules"
    bad = []
    for path in modules(layer):
        for pkg, lines in imported_toolkit_packages(path).items():
            if pkg in FORBIDDEN[layer]:
                bad.append(f"{path.relative_to(PKG.parent)}:{lines[0]} imports toolkit.{pkg}")
    assert not bad, "\n".join(bad)


def test_the_checker_sees_imports_inside_functions(tmp_path):
    """The rule would be empty if the walk missed lazy imports: check it finds one."""
    found = imported_toolkit_packages(PKG / "run" / "registry.py")
    assert "backends" in found and "core" in found


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

"""Code-shape bars on toolkit/: ruff (pyflakes, complexity <= 15), mypy and import-linter clean,
functions short.

ruff, mypy and import-linter come with the test extra; without them those checks skip.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
PKG = REPO / "toolkit"
MAX_LINES = 60


def _tool(name: str):
    if importlib.util.find_spec(name) is None:
        pytest.skip(f"{name} is not installed (pip install -e '.[test]')")
    return [sys.executable, "-m", name]

def test_ruff_is_clean():
    proc = subprocess.run(_tool("ruff") + ["check", "toolkit"], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr

def test_mypy_is_clean():
    env = dict(os.environ, MYPY_CACHE_DIR=str(REPO / ".mypy_cache"))
    proc = subprocess.run(_tool("mypy"), cwd=REPO, capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr

def test_import_contracts_are_kept():
    """The layers and the absence of import cycles (pyproject.toml's [tool.importlinter])."""
    if importlib.util.find_spec("importlinter") is None:
        pytest.skip("import-linter is not installed (pip install -e '.[test]')")
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-c", "import sys; from importlinter.cli import lint_imports_command; "
                           "sys.argv = ['lint-imports', '--no-cache']; lint_imports_command()"],
                          cwd=REPO, capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr

def body_lines(func) -> int:
    """Lines of a function's body, without its docstring and without the signatures of the
    functions nested in it (a Typer command's option list is a signature, not logic)."""
    body = func.body
    if len(body) > 1 and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant):
        body = body[1:]
    n = func.end_lineno - body[0].lineno + 1
    for sub in ast.walk(func):
        if sub is not func and isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef)) and sub.lineno >= body[0].lineno:
            n -= sub.body[0].lineno - sub.lineno
    return n

def functions(tree, prefix: str = ""):
    """(qualified name, node) of every function, nested ones as ``outer.inner``."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            name = prefix + node.name
            if not isinstance(node, ast.ClassDef):
                yield name, node
            yield from functions(node, name + ".")
        else:
            yield from functions(node, prefix)

def test_functions_are_short():
    over = []
    for path in sorted(PKG.rglob("*.py")):
        rel = str(path.relative_to(REPO))
        for name, node in functions(ast.parse(path.read_text(), filename=rel)):
            n = body_lines(node)
            if n > MAX_LINES:
                over.append(f"{rel}:{node.lineno} {name}: {n} lines (bar {MAX_LINES})")
    assert not over, "\n".join(over)

"""The real TensorRT Python API, as recorded in tests/trt_surface/tensorrt-{10,11}.txt
(written by scripts/trt_surface.py from the bindings wheels), and two checkers:

- :func:`check_fake` — every public name a fake TensorRT module (tests/trt_fakes.py) defines
  must exist in the real API of its version, with a matching signature;
- :func:`check_backend_source` — every TensorRT name the backend (toolkit/backends/trt/)
  touches must exist in TensorRT 10 or 11, with a call that fits one of its signatures; names
  that only one version has are reported so that the backend can declare them.
"""

from __future__ import annotations

import ast
import inspect
import os
import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Dict, List, Optional, Set, Tuple

SURFACE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "trt_surface")
VERSIONS = (10, 11)

Params = List[Tuple[str, bool]]  # (name, has a default)


def split_params(text: str) -> Params:
    """``"a: int, b: Dims = <X: 0>"`` -> ``[("a", False), ("b", True)]``."""
    if text.strip() in ("", "..."):
        return []
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch in "[(<{":
            depth += 1
        elif ch in "])>}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    out = []
    for p in parts:
        p = p.strip()
        name = re.split(r"[:=]", p, 1)[0].strip()
        out.append((name, "=" in p))
    return out


@dataclass
class ClassInfo:
    name: str
    bases: List[str] = field(default_factory=list)
    methods: Dict[str, List[Optional[Params]]] = field(default_factory=dict)  # None: unknown signature
    props: Dict[str, bool] = field(default_factory=dict)  # name -> writable
    callbacks: Dict[str, Params] = field(default_factory=dict)
    attrs: Set[str] = field(default_factory=set)
    returns: Dict[str, List[str]] = field(default_factory=dict)  # method -> return type of each overload


@dataclass(frozen=True)
class Failure:
    """How one TensorRT call signals failure (a ``fail`` line of the surface file).

    ``style``: "returns" (the call returns ``value``), "raises" (``exception`` with ``message``),
    "none" (no failure signal) or "predicate" (its bool is an answer); ``guarded``: only for
    arguments toolkit never passes."""

    call: str
    style: str
    value: object = None
    exception: str = ""
    message: str = ""
    guarded: bool = False

    @property
    def can_fail(self) -> bool:
        return self.style in ("returns", "raises") and not self.guarded


def parse_failure(call: str, text: str) -> Failure:
    guarded = text.startswith("guarded ")
    text = text[len("guarded ") :] if guarded else text
    if text.startswith("returns "):
        value = {"False": False, "None": None, "-1": -1}[text.split()[1]]
        return Failure(call, "returns", value=value, guarded=guarded)
    if text.startswith("raises "):
        exc, _, message = text[len("raises ") :].partition(": ")
        return Failure(call, "raises", exception=exc, message=message, guarded=guarded)
    assert text in ("none", "predicate"), text
    return Failure(call, text, guarded=guarded)


@dataclass
class Surface:
    version: str
    functions: Dict[str, List[Optional[Params]]] = field(default_factory=dict)
    consts: Set[str] = field(default_factory=set)
    enums: Dict[str, Dict[str, int]] = field(default_factory=dict)
    classes: Dict[str, ClassInfo] = field(default_factory=dict)
    failures: Dict[str, Failure] = field(default_factory=dict)  # call -> how it signals failure
    function_returns: Dict[str, List[str]] = field(default_factory=dict)

    def returns(self, call: str) -> List[str]:
        """The return types of ``call`` (``Class.method`` or a module function) over its overloads."""
        if "." not in call:
            return self.function_returns.get(call, [])
        cls, name = call.rsplit(".", 1)
        for c in self.mro(cls):
            if name in c.returns:
                return c.returns[name]
        return []

    def other_way(self, call: str) -> Optional[Failure]:
        """The failure style ``call`` does not use, where it could: a call recorded as returning
        its failure value raises RuntimeError instead; one recorded as raising returns False, -1
        or None, if its return type has such a value (None for a void call or a constructor)."""
        f = self.failures[call]
        if f.style == "returns":
            return Failure(call, "raises", exception="RuntimeError", message=f"fake: {call} failed the other way")
        types = self.returns(call)
        if f.style != "raises" or not types or "None" in types:
            return None
        value = False if "bool" in types else -1 if "int" in types else None
        return Failure(call, "returns", value=value)

    @property
    def major(self) -> int:
        return int(self.version.split(".")[0])

    def module_names(self) -> Set[str]:
        top = {e for e in self.enums if "." not in e}
        return set(self.functions) | self.consts | top | {c for c in self.classes if "." not in c}

    def mro(self, cls: str) -> List[ClassInfo]:
        out, todo = [], [cls]
        while todo:
            c = self.classes.get(todo.pop(0))
            if c is not None and c not in out:
                out.append(c)
                todo.extend(c.bases)
        return out

    def member(self, cls: str, name: str):
        """("method", [params...]) / ("prop", writable) / ("callback", params) / ("attr", None) /
        ("enum", members) or None."""
        if cls in self.enums:
            return ("attr", None) if name in self.enums[cls] or name in ("name", "value") else None
        if f"{cls}.{name}" in self.enums:
            return ("enum", self.enums[f"{cls}.{name}"])
        for c in self.mro(cls):
            if name in c.methods:
                return ("method", c.methods[name])
            if name in c.props:
                return ("prop", c.props[name])
            if name in c.callbacks:
                return ("callback", c.callbacks[name])
            if name in c.attrs:
                return ("attr", None)
        return None


@lru_cache(maxsize=None)
def load_surface(major: int) -> Surface:
    path = os.path.join(SURFACE_DIR, f"tensorrt-{major}.txt")
    with open(path) as f:
        lines = f.read().splitlines()
    version = re.match(r"# TensorRT (\S+)", lines[0]).group(1)
    s = Surface(version)
    cur: Optional[ClassInfo] = None
    sig = re.compile(r"def (\w+)\((.*)\) -> (.*)$")
    for line in lines[1:]:
        if line.startswith("def "):
            m = sig.match(line)
            s.functions.setdefault(m.group(1), []).append(split_params(m.group(2)))
            s.function_returns.setdefault(m.group(1), []).append(m.group(3))
        elif line.startswith("const "):
            s.consts.add(line.split()[1])
        elif line.startswith("fail "):
            _, call, text = line.split(" ", 2)
            s.failures[call] = parse_failure(call, text)
        elif line.startswith("enum "):
            name, members = line[5:].split(":", 1)
            s.enums[name] = {k: int(v) for k, v in (m.split("=") for m in members.split())}
        elif line.startswith("class "):
            m = re.match(r"class ([\w.]+)(?:\((.*)\))?$", line)
            cur = ClassInfo(m.group(1), [b.strip() for b in (m.group(2) or "").split(",") if b.strip()])
            s.classes[cur.name] = cur
        elif line.startswith("  ") and cur is not None:
            body = line.strip()
            if body.startswith("static "):
                body = body[len("static ") :]
            kind = body.split()[0]
            if kind == "def":
                if body.endswith("(...)"):
                    cur.methods.setdefault(body[4:-5], []).append(None)
                else:
                    m = sig.match(body)
                    cur.methods.setdefault(m.group(1), []).append(split_params(m.group(2)))
                    cur.returns.setdefault(m.group(1), []).append(m.group(3))
            elif kind == "prop":
                _, name, rw = body.split()
                cur.props[name] = rw == "rw"
            elif kind == "callback":
                m = re.match(r"callback (\w+)\((.*)\)$", body)
                cur.callbacks[m.group(1)] = split_params(m.group(2))
            elif kind == "attr":
                cur.attrs.add(body.split()[1])
    return s


def fits(real: Optional[Params], names: List[str], n_required: int, positional: Optional[int] = None) -> bool:
    """Does a Python definition (parameter ``names``, the first ``n_required`` without default)
    or a call (``positional`` arguments plus keyword ``names``) fit the signature ``real``?"""
    if real is None:
        return True
    real_names = [n for n, _ in real]
    required = sum(1 for _, d in real if not d)
    if positional is not None:  # a call
        if positional > len(real):
            return False
        if any(n not in real_names[positional:] for n in names):
            return False
        return positional + len(names) >= required
    # a definition: same names in order; it may leave out trailing parameters that have defaults
    if names != real_names[: len(names)]:
        return False
    return len(names) >= required and n_required <= required


def _def_params(fn) -> Tuple[List[str], int]:
    sig = inspect.signature(fn)
    params = [p for p in sig.parameters.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    params = params[1:]  # self
    return [p.name for p in params], sum(1 for p in params if p.default is p.empty)


def check_class(surface: Surface, real: str, cls: type, instances=()) -> List[str]:
    problems = []
    where = f"TensorRT {surface.version}"
    if real not in surface.classes:
        return [f"{real}: no such class in {where}"]
    names = {n: v for n, v in vars(cls).items() if not n.startswith("_") or n == "__init__"}
    for inst in instances:
        for n in vars(inst):
            if not n.startswith("_"):
                names.setdefault(n, "instance attribute")
    for name, value in names.items():
        got = surface.member(real, name)
        label = f"{real}.{name}"
        if got is None:
            problems.append(f"{label}: not in {where}")
            continue
        kind, info = got
        if inspect.isfunction(value):
            if kind != "method":
                problems.append(f"{label}: a method in the fake, a {kind} in {where}")
                continue
            pnames, nreq = _def_params(value)
            if name == "__init__" and all(o is None for o in info):
                continue
            if not any(fits(o, pnames, nreq) for o in info):
                problems.append(f"{label}({', '.join(pnames)}): no such signature in {where}")
        elif isinstance(value, property):
            if kind != "prop":
                problems.append(f"{label}: a property in the fake, a {kind} in {where}")
            elif value.fset is not None and not info:
                problems.append(f"{label}: writable in the fake, read-only in {where}")
        elif kind == "method":
            problems.append(f"{label}: a method in {where}, a plain value in the fake")
    return problems


def check_fake(trt, surface: Surface, instances=()) -> List[str]:
    """Problems with a fake ``tensorrt`` module: names, signatures, enum members."""
    problems = []
    module_names = surface.module_names()
    by_class: Dict[type, list] = {}
    for inst in instances:
        by_class.setdefault(type(inst), []).append(inst)
    for name, value in vars(trt).items():
        if name.startswith("_"):
            continue
        if name not in module_names:
            problems.append(f"tensorrt.{name}: not in TensorRT {surface.version}")
            continue
        if isinstance(value, type) and name in surface.enums:
            extra = set(value.__members__) - set(surface.enums[name])
            problems += [f"{name}.{m}: not in TensorRT {surface.version}" for m in sorted(extra)]
        elif isinstance(value, type):
            problems += check_class(surface, name, value, by_class.get(value, ()))
            for sub, subval in vars(value).items():
                if isinstance(subval, type) and f"{name}.{sub}" in surface.enums:
                    extra = set(subval.__members__) - set(surface.enums[f"{name}.{sub}"])
                    problems += [f"{name}.{sub}.{m}: not in TensorRT {surface.version}" for m in sorted(extra)]
        elif callable(value):
            params = list(inspect.signature(value).parameters.values())
            pnames, nreq = [p.name for p in params], sum(1 for p in params if p.default is p.empty)
            if not any(fits(o, pnames, nreq) for o in surface.functions[name]):
                problems.append(f"tensorrt.{name}{tuple(pnames)}: no such signature in TensorRT {surface.version}")
    return problems


# ---------------------------------------------------------------------------- backend source

#: How the backend names TensorRT objects; an attribute of one of these is checked against its class.
VARIABLE_TYPES = {
    "builder": "Builder",
    "network": "INetworkDefinition",
    "parser": "OnnxParser",
    "perr": "ParserError",
    "cfg": "IBuilderConfig",
    "profile": "IOptimizationProfile",
    "runtime": "Runtime",
    "self._runtime": "Runtime",
    "eng": "ICudaEngine",
    "engine": "ICudaEngine",
    "self._engine": "ICudaEngine",
    "ctx": "IExecutionContext",
    "self._context": "IExecutionContext",
    "layer": "ILayer",
    "tensor": "ITensor",
    "inspector": "EngineInspector",
    "boundary": "ILoopBoundaryLayer",
}


def _dotted(node) -> Optional[str]:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else None
    return None


@dataclass
class Use:
    where: str  # file:line
    name: str  # e.g. "BuilderFlag.FP16", "INetworkDefinition.get_output", "Builder"
    call: Optional[Tuple[int, List[str]]] = None  # positional count, keyword names
    defines: Optional[Tuple[List[str], int]] = None  # a subclass method: parameter names, required count


def backend_uses(source: str, filename: str = "<source>") -> List[Use]:
    """Every TensorRT name ``source`` uses: ``trt.X``, ``trt.X.Y``, ``var.method(...)`` for the
    variables in VARIABLE_TYPES, and methods of classes derived from ``trt.X``."""
    tree = ast.parse(source)
    uses: List[Use] = []
    calls = {id(n.func): n for n in ast.walk(tree) if isinstance(n, ast.Call)}
    # trt_call(fn, *args, fail=..., void=...) calls fn(*args): check those arguments against fn
    wrapped = {
        id(n.args[0]): ast.Call(n.args[0], n.args[1:], [k for k in n.keywords if k.arg not in ("fail", "void")])
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and _dotted(n.func) == "trt_call" and n.args
    }
    calls.update(wrapped)
    for node in ast.walk(tree):
        where = f"{filename}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.ClassDef):
            for base in node.bases:
                b = _dotted(base)
                if b and b.startswith("trt."):
                    for item in node.body:
                        if isinstance(item, ast.FunctionDef) and not item.name.startswith("_"):
                            args = [a.arg for a in item.args.args[1:]]
                            nreq = len(args) - len(item.args.defaults)
                            uses.append(Use(f"{filename}:{item.lineno}", f"{b[4:]}.{item.name}", defines=(args, nreq)))
        if not isinstance(node, ast.Attribute):
            continue
        dotted = _dotted(node)
        if dotted is None:
            continue
        call = calls.get(id(node))
        call_info = None
        if call is not None:
            call_info = (len(call.args), [k.arg for k in call.keywords if k.arg])
        parts = dotted.split(".")
        if parts[0] == "trt" and len(parts) >= 2 and parts[1] == "__version__":
            continue  # set by the package's __init__.py, not by the bindings
        if parts[0] == "trt" and len(parts) >= 2:
            # report the longest chain once: trt.X.Y covers trt.X
            parent = getattr(node, "_parent_attr", False)
            if call_info is not None and len(parts) == 3 and parts[1][:1].isupper():
                call_info = (call_info[0] - 1, call_info[1])  # trt.Class.method(self, ...): self is explicit
            if not parent:
                uses.append(Use(where, ".".join(parts[1:3]), call_info))
            if isinstance(node.value, ast.Attribute):
                node.value._parent_attr = True  # type: ignore[attr-defined]
            continue
        base = ".".join(parts[:-1])
        if base in VARIABLE_TYPES and parts[-1] != "__class__":  # a cast, as Polygraphy does
            uses.append(Use(where, f"{VARIABLE_TYPES[base]}.{parts[-1]}", call_info))
    return uses


def check_use(use: Use, surface: Surface) -> Optional[str]:
    """None if ``use`` fits ``surface``, else why not."""
    parts = use.name.split(".")
    if len(parts) == 1:
        if parts[0] not in surface.module_names():
            return f"{use.name} does not exist"
        if use.call and parts[0] in surface.functions:
            pos, kw = use.call
            if not any(fits(o, kw, 0, positional=pos) for o in surface.functions[parts[0]]):
                return f"{use.name}: no signature takes {pos} positional argument(s) and {kw}"
        return None
    cls, name = parts[0], parts[1]
    if cls not in surface.enums and cls not in surface.classes:
        return f"{cls} does not exist"
    got = surface.member(cls, name)
    if got is None:
        return f"{use.name} does not exist"
    kind, info = got
    if use.defines is not None:
        params, nreq = use.defines
        if kind == "callback":
            return None if [n for n, _ in info] == params or len(info) == len(params) else f"{use.name}{tuple(params)}: TensorRT calls it with {[n for n, _ in info]}"
        if kind == "method":
            return None if any(o is None or len(o) == len(params) for o in info) else f"{use.name}{tuple(params)}: wrong number of parameters"
        return f"{use.name}: a {kind}, not a method to override"
    if use.call is not None and kind == "method":
        pos, kw = use.call
        if not any(fits(o, kw, 0, positional=pos) for o in info):
            return f"{use.name}: no signature takes {pos} positional argument(s) and {kw}"
    return None


def backend_calls(sources: Dict[str, str], surface: Surface) -> Dict[str, str]:
    """{TensorRT call: where} for every method, module function and constructor of ``surface``
    that the backend calls (directly or through ``trt_call``)."""
    out: Dict[str, str] = {}
    for filename, text in sources.items():
        for use in backend_uses(text, filename):
            if use.defines is not None:
                continue
            parts = use.name.split(".")
            if len(parts) == 1:
                callable_ = parts[0] in surface.functions or (parts[0] in surface.classes and use.call is not None)
            else:
                got = surface.member(parts[0], parts[1])
                callable_ = got is not None and got[0] == "method"
            if callable_:
                out.setdefault(use.name, use.where)
    return out


def check_backend_source(sources: Dict[str, str]) -> Tuple[List[str], Dict[int, Set[str]]]:
    """(problems, {major: names missing from that version}) for the backend's source files."""
    problems: List[str] = []
    missing: Dict[int, Set[str]] = {v: set() for v in VERSIONS}
    for filename, text in sources.items():
        for use in backend_uses(text, filename):
            verdicts = {v: check_use(use, load_surface(v)) for v in VERSIONS}
            if all(verdicts.values()):
                problems.append(f"{use.where}: {verdicts[VERSIONS[0]]} in TensorRT 10 or 11")
            for v, why in verdicts.items():
                if why:
                    missing[v].add(use.name)
    for v, names in missing.items():  # a class that is missing hides its members
        missing[v] = {n for n in names if "." not in n or n.split(".")[0] not in names}
    return problems, missing

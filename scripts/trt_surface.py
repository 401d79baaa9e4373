"""Write the Python API surface of TensorRT 10 and 11 to text files (tests/trt_surface/).

The surface is what toolkit's TensorRT backend and its test fakes are checked against
(tests/backends/test_trt_surface.py): classes, methods with their signatures, properties, enums with
their members, and module functions, read from the real bindings of each version.

No GPU and no TensorRT libraries are needed. The bindings wheel (``tensorrt-cu12-bindings``,
about 1 MB) is fetched with ``pip download --no-deps``; its ``tensorrt.so`` links against
libnvinfer, libnvonnxparser and libnvinfer_plugin, so the script compiles tiny stand-ins
for those (nine entry points that return 0, built with the system C compiler) and imports
the module against them in a child process. Nothing is called; only names, pybind11
signatures (from docstrings) and enum members are read.

The files end with one ``fail`` line per TensorRT call toolkit's backend makes: how the binding
tells the caller that the call failed (the table FAILURES below, from an audit of the bindings'
source). Each line is checked against the binding it describes before it is written: a call
that raises must have its message compiled into that version's ``tensorrt.so``; a call that
returns False, -1 or None must have a bool, int or object return type in its signature; and a
call recorded as having no failure signal must not return a bool. tests/trt_fakes.py fails each
call the way its line says.

    python scripts/trt_surface.py                      # both versions, default pins
    python scripts/trt_surface.py --version 10.13.3.9 --version 11.4.0.106
    python scripts/trt_surface.py --wheel-dir /tmp/wheels --out tests/trt_surface

Needs: pip, a C compiler (cc/gcc), Linux x86_64, the running CPython (wheels are per
CPython version).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import subprocess
import sys
import tempfile
import zipfile

DEFAULT_VERSIONS = ("10.13.3.9", "11.4.0.106")
HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.join(HERE, os.pardir, "tests", "trt_surface")

# The C entry points tensorrt.so needs from the TensorRT libraries (nm -D --undefined-only).
STUB_C = r"""
void* createInferBuilder_INTERNAL(void* a, int b) { return 0; }
void* createInferRefitter_INTERNAL(void* a, void* b, int c) { return 0; }
void* createInferRuntime_INTERNAL(void* a, int b) { return 0; }
void* createNvOnnxParserRefitter_INTERNAL(void* a, void* b, int c) { return 0; }
void* createNvOnnxParser_INTERNAL(void* a, void* b, int c) { return 0; }
void* getBuilderPluginRegistry(int a) { return 0; }
int getNvOnnxParserVersion(void) { return 0; }
void* getPluginRegistry(void) { return 0; }
int initLibNvInferPlugins(void* a, const char* b) { return 0; }
"""
STUB_LIBS = ("libnvinfer", "libnvonnxparser", "libnvinfer_plugin")

# How each TensorRT call the backend makes signals failure (read from the bindings' source,
# python/src/infer/pyCore.cpp, pyPlugin.cpp and pyGraph.cpp, and the parser's pyOnnx.cpp):
#   "returns VALUE"            the call returns VALUE (False, -1 or None) when it fails;
#   "raises TYPE: MESSAGE"     it raises TYPE with MESSAGE (a PY_ASSERT_*_ERROR or pybind11's own);
#   "none"                     it has no failure value (void, or a getter): errors reach the logger only;
#   "predicate"                its bool is an answer (yes/no), not success/failure;
#   "guarded STYLE"            STYLE, but only for arguments toolkit never passes (an index past the
#                              end, a tensor that is not a shape input): toolkit checks them first.
# A bare class name is its constructor.
NULLPTR = "raises TypeError: pybind11::init(): factory function returned nullptr"
FAILURES = {
    "init_libnvinfer_plugins": "returns False",
    "Builder": NULLPTR,
    "Runtime": NULLPTR,
    "OnnxParser": NULLPTR,
    "ILogger.__init__": "none",
    "IOutputAllocator.__init__": "none",
    "IProgressMonitor.__init__": "none",
    "IInt8EntropyCalibrator2.__init__": "none",
    "Builder.build_serialized_network": "returns None",
    "Builder.create_builder_config": "returns None",
    "Builder.create_network": "returns None",
    "Builder.create_optimization_profile": "returns None",
    "IBuilderConfig.add_optimization_profile": "returns -1",
    "IBuilderConfig.clear_flag": "none",
    "IBuilderConfig.set_flag": "none",
    "IBuilderConfig.set_memory_pool_limit": "none",
    "IBuilderConfig.set_calibration_profile": "returns False",
    "IOptimizationProfile.set_shape": "raises RuntimeError: Shape provided for min is inconsistent with other shapes.",
    "IOptimizationProfile.set_shape_input":
        "raises RuntimeError: min input provided for shape tensor is inconsistent with other inputs.",
    "OnnxParser.parse": "returns False",
    "OnnxParser.parse_from_file": "returns False",
    "OnnxParser.get_error": "guarded returns None",
    "ParserError.desc": "none",
    "ParserError.node": "none",
    "ParserError.node_name": "none",
    "ParserError.node_operator": "none",
    "INetworkDefinition.get_input": "guarded returns None",
    "INetworkDefinition.get_layer": "guarded returns None",
    "INetworkDefinition.get_output": "guarded returns None",
    "INetworkDefinition.mark_output": "none",
    "INetworkDefinition.unmark_output": "none",
    "ILayer.get_output": "guarded returns None",
    "Runtime.deserialize_cuda_engine": "returns None",
    "ICudaEngine.create_execution_context": "returns None",
    "ICudaEngine.create_engine_inspector": "returns None",
    "ICudaEngine.get_tensor_name": "none",
    "ICudaEngine.get_tensor_dtype": "none",
    "ICudaEngine.get_tensor_format": "none",
    "ICudaEngine.get_tensor_mode": "none",
    "ICudaEngine.get_tensor_shape": "none",
    "ICudaEngine.is_shape_inference_io": "predicate",
    "ICudaEngine.get_tensor_profile_shape": "none",
    "ICudaEngine.get_tensor_profile_values":
        "guarded raises RuntimeError: Binding index does not correspond to an input shape tensor.",
    "EngineInspector.get_layer_information": "none",
    "IExecutionContext.set_optimization_profile_async": "raises RuntimeError: Error in set optimization profile async.",
    "IExecutionContext.set_input_shape": "returns False",
    "IExecutionContext.set_tensor_address": "returns False",
    "IExecutionContext.set_output_allocator": "returns False",
    "IExecutionContext.get_tensor_shape": "none",
    "IExecutionContext.execute_async_v3": "returns False",
}
# A raised message is looked for by its start: the compiler may split a long literal.
MESSAGE_PREFIX = 32

# Runs in the child process (LD_LIBRARY_PATH points at the stand-ins): argv = [so_path, version].
DUMP = r'''
import importlib.util, json, re, sys

so, version, failures = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
spec = importlib.util.spec_from_file_location("tensorrt", so)
trt = importlib.util.module_from_spec(spec)
spec.loader.exec_module(trt)

def clean(text):
    text = re.sub(r"\btensorrt\.tensorrt\.", "", text)
    text = re.sub(r"\btensorrt\.", "", text)
    # pybind11 versions spell builtin types differently (int vs typing.SupportsInt)
    text = re.sub(r"\btyping\.Supports(Int|Float)\b", lambda m: m.group(1).lower(), text)
    text = re.sub(r"\bcollections\.abc\.|\btyping\.", "", text)
    text = re.sub(r"\bnvinfer1::", "", text)
    return text

def signatures(name, obj):
    """The pybind11 signature lines of ``name`` (one per overload), without 'self'."""
    doc = getattr(obj, "__doc__", None) or ""
    sigs = []
    for line in doc.splitlines():
        line = line.strip()
        m = re.match(r"^(?:\d+\. )?" + re.escape(name) + r"\((.*)\)(?: -> (.*))?$", line)
        if not m or m.group(1) == "*args, **kwargs":
            continue
        params = clean(m.group(1))
        params = re.sub(r"^self(: [^,]*)?(, )?", "", params)
        ret = clean(m.group(2) or "None")
        sigs.append(f"({params}) -> {ret}")
    return sigs or ["(...)"]

def is_enum(obj):
    return isinstance(obj, type) and hasattr(obj, "__members__") and isinstance(getattr(obj, "__members__"), dict)

def enum_line(qual, obj):
    members = " ".join(f"{k}={int(v)}" for k, v in obj.__members__.items())
    return f"enum {qual}: {members}"

out = [f"# TensorRT {version} Python API surface, read from its bindings by scripts/trt_surface.py; do not edit"]
enums, classes, funcs, consts = [], [], [], []

def walk_class(qual, cls):
    bases = [b.__name__ for b in cls.__bases__ if b.__name__ not in ("object", "pybind11_object")]
    lines = [f"class {qual}" + (f"({', '.join(bases)})" if bases else "")]
    for name in sorted(cls.__dict__):
        if name.startswith("_") and name != "__init__":
            continue
        obj = cls.__dict__[name]
        if is_enum(obj):
            enums.append(enum_line(f"{qual}.{name}", obj))
            continue
        if isinstance(obj, type):
            walk_class(f"{qual}.{name}", obj)
            continue
        if isinstance(obj, property):
            kind = "rw" if obj.fset is not None else "ro"
            lines.append(f"  prop {name} {kind}")
        elif callable(obj) or type(obj).__name__ in ("instancemethod", "staticmethod", "builtin_function_or_method"):
            target = obj.__func__ if isinstance(obj, (staticmethod, classmethod)) else obj
            static = "static " if isinstance(obj, staticmethod) else ""
            for sig in signatures(name, target):
                lines.append(f"  {static}def {name}{sig}")
        else:
            lines.append(f"  attr {name}")
    # Methods a Python subclass implements (logger, allocator, calibrator): from the class's example
    defined = {ln.split()[1].split("(")[0] for ln in lines[1:] if ln.split()[0] in ("def", "static")}
    for m in re.finditer(r"^\s*def (\w+)\(self(?:, )?([^)]*)\):", cls.__doc__ or "", re.M):
        if m.group(1) != "__init__" and m.group(1) not in defined:
            lines.append(f"  callback {m.group(1)}({m.group(2)})")
    classes.append("\n".join(lines))

for name in sorted(dir(trt)):
    if name.startswith("_"):
        continue
    obj = getattr(trt, name)
    if is_enum(obj):
        enums.append(enum_line(name, obj))
    elif isinstance(obj, type):
        walk_class(name, obj)
    elif callable(obj):
        for sig in signatures(name, obj):
            funcs.append(f"def {name}{sig}")
    else:
        consts.append(f"const {name} = {type(obj).__name__}.{getattr(obj, 'name', obj)}")

def returns(call):
    """The return types of ``call``'s overloads (a class: its constructor, None)."""
    obj = trt
    for part in call.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    if isinstance(obj, type):
        return ["(constructor)"]
    name = call.split(".")[-1]
    return [sig.rsplit(" -> ", 1)[1] for sig in signatures(name, obj) if " -> " in sig]

SCALARS = {"bool", "int", "float", "str", "None", "(constructor)"}

def check_failure(call, style, types):
    style = style.replace("guarded ", "", 1)
    if style.startswith("raises "):
        return None  # the message is looked for in tensorrt.so by the parent
    if style == "returns False":
        ok = types and all(t == "bool" for t in types)
    elif style == "returns -1":
        ok = types and all(t == "int" for t in types)
    elif style == "returns None":
        ok = types and all(t not in SCALARS and not t.startswith(("List", "list", "tuple")) for t in types)
    elif style == "none":
        ok = "bool" not in types
    elif style == "predicate":
        ok = types == ["bool"]
    else:
        return f"{call}: unknown failure style {style!r}"
    return None if ok else f"{call}: recorded as {style!r}, but the binding returns {types}"

fails, bad = [], []
for call, style in sorted(failures.items()):
    types = returns(call)
    if types is None:
        continue  # not in this version (TensorRT 11 has no calibrator)
    why = check_failure(call, style, types)
    if why:
        bad.append(why)
    fails.append(f"fail {call} {style}")
if bad:
    sys.exit("\n".join(bad))
out += funcs + consts + sorted(enums) + classes + fails
sys.stdout.write("\n".join(out) + "\n")
'''


def build_stubs(workdir: str, major: str) -> str:
    d = os.path.join(workdir, "stubs", major)
    os.makedirs(d, exist_ok=True)
    src = os.path.join(workdir, "stub.c")
    with open(src, "w") as f:
        f.write(STUB_C)
    cc = os.environ.get("CC", "cc")
    for lib in STUB_LIBS:
        soname = f"{lib}.so.{major}"
        subprocess.run([cc, "-shared", "-fPIC", "-o", os.path.join(d, soname), src, f"-Wl,-soname,{soname}"], check=True)
    return d


def fetch_wheel(version: str, wheel_dir: str) -> str:
    pattern = os.path.join(wheel_dir, f"tensorrt_cu12_bindings-{version}-*.whl")
    found = glob.glob(pattern)
    if not found:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q",
             f"tensorrt-cu12-bindings=={version}", "-d", wheel_dir],
            check=True,
        )  # fmt: skip
        found = glob.glob(pattern)
    if not found:
        sys.exit(f"error: no wheel tensorrt-cu12-bindings {version} for this Python in {wheel_dir}")
    return found[0]


def dump(version: str, wheel: str, workdir: str) -> str:
    major = version.split(".")[0]
    target = os.path.join(workdir, version)
    with zipfile.ZipFile(wheel) as z:
        member = next(n for n in z.namelist() if re.search(r"(^|/)tensorrt\.so$", n))
        z.extract(member, target)
    so = os.path.join(target, member)
    env = dict(os.environ, LD_LIBRARY_PATH=build_stubs(workdir, major))
    res = subprocess.run([sys.executable, "-c", DUMP, so, version, json.dumps(FAILURES)], env=env,
                         capture_output=True, text=True)  # fmt: skip
    if res.returncode != 0:
        sys.exit(f"error: cannot read the bindings of TensorRT {version}: {res.stderr.strip()[-2000:]}")
    check_messages(version, so, res.stdout)
    return res.stdout


def check_messages(version: str, so: str, text: str) -> None:
    """Every message a ``fail ... raises`` line quotes is compiled into this ``tensorrt.so``."""
    with open(so, "rb") as f:
        binary = f.read()
    for line in text.splitlines():
        m = re.match(r"fail (\S+) (?:guarded )?raises \w+: (.*)$", line)
        if m and m.group(2)[:MESSAGE_PREFIX].encode() not in binary:
            sys.exit(f"error: TensorRT {version}: {m.group(1)} is recorded as raising {m.group(2)!r}, "
                     "which its tensorrt.so does not hold")  # fmt: skip


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--version", action="append", help=f"TensorRT version(s) (default: {' '.join(DEFAULT_VERSIONS)})")
    ap.add_argument("--wheel-dir", help="where wheels are (or are downloaded to); default: a temporary folder")
    ap.add_argument("--out", default=DEFAULT_OUT, help="output folder (default: tests/trt_surface)")
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        wheel_dir = args.wheel_dir or tmp
        for version in args.version or DEFAULT_VERSIONS:
            text = dump(version, fetch_wheel(version, wheel_dir), tmp)
            path = os.path.join(args.out, f"tensorrt-{version.split('.')[0]}.txt")
            with open(path + ".tmp", "w") as f:
                f.write(text)
            os.replace(path + ".tmp", path)
            print(f"{path}: {len(text.splitlines())} lines (TensorRT {version})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Options several commands share, each declared once (see :mod:`toolkit.core.declare`).

A command's options dataclass takes one with ``declared(SEED)`` (or ``SEED.replace(panel=...)``
where its help shows it in another section); the command line reads the same declaration.
"""

from __future__ import annotations

from toolkit.core.declare import Declared

CHECK_ERROR_STATS = ("elemwise", "max", "mean", "median", "quantile")

MODEL = Declared(help="Path to the ONNX model, or '-' to read it from stdin.", metavar="MODEL", argument=True)

EXTERNAL_DATA_DIR = Declared(
    ("--external-data-dir", "--load-external-data"),
    "Folder holding the model's external data (default: the model's folder).", metavar="PATH",
)
IGNORE_EXTERNAL_DATA = Declared(("--ignore-external-data",), "Do not load external weights; work on the structure only.")
ATOL = Declared(("--atol", "--abs-tol"), "Absolute tolerance: a value for every output and/or name:value.", metavar="[NAME:]VALUE...")
RTOL = Declared(("--rtol", "--rel-tol"), "Relative tolerance: a value for every output and/or name:value.", metavar="[NAME:]VALUE...")
CHECK_ERROR_STAT = Declared(
    ("--check-error-stat",),
    "What to check against the tolerances: elemwise (default), max, mean, median or quantile; also per output "
    "as name:stat.", metavar="[NAME:]STAT...",
    complete=CHECK_ERROR_STATS,
)
# The tolerance options as every text (help, advice, refusals, logs) names them, read from their
# declarations: renaming an option renames it there too.
ATOL_FLAG, RTOL_FLAG, STAT_FLAG = (d.flags[0] for d in (ATOL, RTOL, CHECK_ERROR_STAT))
TOLERANCE_OPTIONS = f"{ATOL_FLAG}/{RTOL_FLAG}/{STAT_FLAG}"
# the per-output field of a Tolerances each option sets, and its flag
PER_NAME_FLAGS = (("per_atol", ATOL_FLAG), ("per_rtol", RTOL_FLAG), ("per_stat", STAT_FLAG))
SEED = Declared(("--seed",), "Seed for generated input data (reproducible).", metavar="N")
INPUT_SHAPES = Declared(
    ("--input-shapes", "--inputs", "--model-input-shapes", "--model-inputs"),
    "Shapes for dynamic inputs: name:[1,3,640,640] (or name:1x3x640x640, no quoting needed). Several after one flag.",
    metavar="NAME:SHAPE...",
)
DATA_LOADER_SCRIPT = Declared(
    ("--data-loader-script",),
    "Input data from a Python function that returns or yields {name: array} per iteration (FUNC defaults to "
    "load_data), instead of generated data.",
    metavar="SCRIPT[:FUNC]",
)
DATA_LOADER_FUNC = Declared(
    ("--data-loader-func-name",),
    "The function of --data-loader-script to call (the older spelling of SCRIPT:FUNC).",
    metavar="FUNC",
)
MODEL_INPUT_SHAPES = Declared(
    ("--model-input-shapes", "--model-inputs", "--input-shapes"),  # (not --inputs: surgeon extract's cut)
    "Fix the shapes of the model's dynamic inputs for shape inference: name:[1,3,224,224] ...", metavar="NAME:SHAPE...",
)
FORCE_FALLBACK = Declared(
    ("--force-fallback-shape-inference",),
    "Infer tensor shapes and dtypes by running ONNX-Runtime instead of ONNX shape inference.",
)
CLUSTER = Declared(
    ("--cluster",),
    "Run each check as a task on a Ray cluster (the ray extra): ray finds a running cluster (or starts a local "
    "one), ray:ADDRESS connects to that one. See docs/scale.md.",
    metavar="ray[:ADDRESS]",
)
GPUS_PER_CHECK = Declared(
    ("--gpus-per-check",),
    "With --cluster: GPUs each check asks Ray for (default 1 for a TensorRT or CUDA check, else 0).",
    metavar="N",
)
CPUS_PER_CHECK = Declared(("--cpus-per-check",), "With --cluster: CPUs each check asks Ray for (default 1).", metavar="N")

# surgeon extract and surgeon sanitize
SURGEON_OUTPUT = Declared(("-o", "--output"), "Where to write the new model ('-' for stdout). May be the input file.", metavar="PATH")

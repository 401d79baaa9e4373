"""Options several commands share, each declared once (see :mod:`toolkit.core.declare`).

A command's options dataclass takes one with ``declared(SEED)`` (or ``SEED.replace(panel=...)``
where its help shows it in another section); the command line reads the same declaration.
Groups of options several configs take are dataclasses they inherit (:class:`ModelFiles`,
:class:`InputData`, :class:`ToleranceOptions`, :class:`ClusterOptions`, :class:`ReplayFiles`,
:class:`DataLoaderOptions`):
each field is named once, whichever library config or command takes it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

# (the tolerance options, declared where they are parsed, are shared from here too)
from toolkit.core.compare.tolerances import ATOL_FLAG as ATOL_FLAG
from toolkit.core.compare.tolerances import RTOL_FLAG as RTOL_FLAG
from toolkit.core.compare.tolerances import STAT_FLAG as STAT_FLAG
from toolkit.core.compare.tolerances import ToleranceOptions as ToleranceOptions
from toolkit.core.declare import Declared, declared, switch

MODEL = Declared(help="Path to the ONNX model, or '-' to read it from stdin.", metavar="MODEL", argument=True)

EXTERNAL_DATA_DIR = Declared(
    ("--external-data-dir", "--load-external-data"),
    "Folder holding the model's external data (default: the model's folder).", metavar="PATH",
)
IGNORE_EXTERNAL_DATA = Declared(("--ignore-external-data",), "Do not load external weights; work on the structure only.")
# The tolerance options are declared with their parsers beside the value they make
# (:mod:`toolkit.core.compare.tolerances`); every text (help, advice, refusals, logs) names them so.
TOLERANCE_OPTIONS = f"{ATOL_FLAG}/{RTOL_FLAG}/{STAT_FLAG}"
# the per-output field of a Tolerances each option sets, and its flag
PER_NAME_FLAGS = (("per_atol", ATOL_FLAG), ("per_rtol", RTOL_FLAG), ("per_stat", STAT_FLAG))
LOAD_INPUTS = Declared(("--load-inputs", "--load-input-data"), "Inputs files (JSON or .npz) to run on; default: generated.",
                       metavar="PATH...")
VAL_RANGE = Declared(("--val-range",), "Value range of generated inputs: [name:][lo,hi].", metavar="[NAME:]RANGE...")
def seed_value(value: Optional[int]) -> Optional[int]:
    """A seed numpy's generators take (0 to 2**32 - 1), or a usage error naming the range."""
    if value is not None and not 0 <= value < 2**32:
        from toolkit.core.errors import UsageError

        raise UsageError(f"--seed must be between 0 and {2**32 - 1}, got {value}")
    return value


SEED = Declared(("--seed",), "Seed for generated input data (reproducible).", metavar="N", parse=seed_value)
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

SAVE_REPLAY = Declared(("--save-debug-replay",), "Keep every verdict in this JSON file.", metavar="PATH")
LOAD_REPLAY = Declared(("--load-debug-replay",), "Reuse the verdicts of an earlier run (same model and runners).",
                       metavar="PATH")

# surgeon extract and surgeon sanitize
SURGEON_OUTPUT = Declared(("-o", "--output"), "Where to write the new model ('-' for stdout). May be the input file.", metavar="PATH")


# ------------------------------------------------------------------ groups several configs take


@dataclass
class ModelFiles:
    """The model a command reads, and the folder of its external data."""

    model: str = declared(MODEL)
    external_data_dir: Optional[str] = declared(EXTERNAL_DATA_DIR)


@dataclass
class InputData:
    """What a model runs on: data files, else generated inputs (a seed, value ranges)."""

    load_inputs: List[str] = declared(LOAD_INPUTS, factory=list)
    seed: Optional[int] = declared(SEED)
    val_range: List[str] = declared(VAL_RANGE, factory=list)


@dataclass
class ClusterOptions:
    """Checks as tasks on a Ray cluster (docs/scale.md)."""

    cluster: Optional[str] = declared(CLUSTER)  # "ray[:ADDRESS]"
    gpus_per_check: Optional[float] = declared(GPUS_PER_CHECK)  # None: 1 for a TensorRT or CUDA check, else 0
    cpus_per_check: Optional[float] = declared(CPUS_PER_CHECK)


@dataclass
class ReplayFiles:
    """A search's verdicts kept in a file, and answered from one instead of checked again."""

    save_replay: Optional[str] = declared(SAVE_REPLAY)
    load_replay: Optional[str] = declared(LOAD_REPLAY)


@dataclass
class DataLoaderOptions:
    """Input data from the user's Python function."""

    data_loader_script: Optional[str] = declared(DATA_LOADER_SCRIPT)
    data_loader_func_name: Optional[str] = declared(DATA_LOADER_FUNC)


@dataclass
class TrtPrecision:
    """The precisions TensorRT may build kernels in (``toolkit run``'s flags, TensorRT's builder config)."""

    fp16: bool = switch(
        "--fp16", panel="TensorRT", runner="trt", spec="fp16",
        help="Let TensorRT use float16 kernels (TensorRT 10). With --onnxrt and no --trt: run fp32 and fp16 storage "
        "emulated on the CPU (runner onnxrt:fp16), and compare.",
    )
    bf16: bool = switch(
        "--bf16", panel="TensorRT", runner="trt", spec="bf16",
        help="Let TensorRT use bfloat16 kernels (TensorRT 10; TensorRT 11: the model is converted to mixed bf16 "
        "first). With --onnxrt and no --trt: run fp32 and bf16 storage emulated on the CPU (runner onnxrt:bf16), and "
        "compare.",
    )
    int8: bool = switch("--int8", panel="TensorRT", runner="trt", spec="int8",
                        help="Let TensorRT use int8 kernels, calibrated on this run's inputs (TensorRT 10).")
    tf32: bool = switch(
        "--tf32", panel="TensorRT", runner="trt", spec="tf32",
        help="Let TensorRT use TF32 for float32 math (off by default).",
    )

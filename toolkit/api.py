"""toolkit's stable Python API: one import surface for scripts and notebooks.

Everything here keeps its name and signature across releases; the modules behind it
(``toolkit.core``, ``toolkit.surgeon``, ``toolkit.run``, ...) are free to move. Functions take
and return ``onnx.ModelProto`` objects (or a model path where noted), ``{name: numpy array}``
feeds and outputs, and raise :class:`ToolkitError` subclasses with one-sentence messages::

    from toolkit import api

    model = api.load_model("model.onnx")
    feeds = api.generate_inputs(model, seed=1)
    ref = api.run(model, feeds, "onnxrt")
    got = api.run(model, feeds, "onnxrt:fp16")
    print(api.compare(ref, got, atol=1e-2).passed)

    with api.open_runner("onnxrt", model) as runner:   # one session, many inferences
        outs = [runner.infer(feed) for feed in feeds]

See docs/api.md. Importing this module imports numpy and onnx; onnxruntime, onnx-graphsurgeon,
OpenVINO and TensorRT are imported when a function needs them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import tempfile
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Union

from toolkit.core.errors import DependencyError, ExitCode, InferenceError, InputError, ToolkitError, UsageError
from toolkit.core.meta import TensorMeta

if TYPE_CHECKING:  # pragma: no cover
    import onnx

    from toolkit.backends.base import Runner
    from toolkit.core.compare.arrays import IterationComparison

from toolkit.convert.fp16 import convert as _convert
from toolkit.core.compare.arrays import compare_iteration
from toolkit.core.compare.tolerances import TolValue, Tolerances
from toolkit.core.inputs import generate_inputs as _generate
from toolkit.core.inputs import parse_val_ranges
from toolkit.core.meta import parse_shape_specs, parse_tensor_spec
from toolkit.core.io.model import graph_io_meta
from toolkit.core.io.model import load_model as _load
from toolkit.core.io.model import save_model as _save
from toolkit.llm.io import parse_names
from toolkit.llm.session import LlmConfig, LlmDebugger
from toolkit.core.shapes import top_tensor_names
from toolkit.reduce.session import ReduceConfig, Reducer
from toolkit.reduce.verdict import CheckResult
from toolkit.run.options import RunOptions
from toolkit.run.plan import require_known_names
from toolkit.run import registry
from toolkit.run.registry import RunnerOption, get_kind, with_values
from toolkit.run.specs import make_runner, parse_runner_spec
from toolkit.surgeon.extract import extract as _extract
from toolkit.surgeon.sanitize import sanitize as _sanitize
from toolkit.surgeon.validate import check_model

Feed = Mapping[str, object]
ModelLike = Union[str, "onnx.ModelProto"]

__all__ = [
    "ToolkitError", "InputError", "UsageError", "DependencyError", "InferenceError", "ExitCode", "TensorMeta",
    "load_model", "save_model", "load_inputs", "save_inputs", "generate_inputs", "open_runner", "run", "compare", "Comparison",
    "extract", "sanitize", "convert", "reduce", "debug_llm",
]


# ------------------------------------------------------------------ models and data


def load_model(path: str, *, external_data_dir: Optional[str] = None, load_external_data: bool = True):
    """The model at ``path`` (``"-"``: stdin), its external weights read from ``external_data_dir``
    or the model's folder."""

    return _load(path, external_data_dir=external_data_dir, load_external_data=load_external_data)


def save_model(model, path: str, *, external_data: Optional[bool] = None) -> None:
    """Write ``model`` atomically; external data automatically near protobuf's 2 GB limit."""

    _save(model, path, external_data=external_data)


def load_inputs(path: str) -> List[Dict[str, object]]:
    """The feeds of an inputs file (Polygraphy's JSON or .npz), one per iteration."""
    from toolkit.core.io.datafiles import load_inputs as _load

    return [dict(feed) for feed in _load(path)]


def save_inputs(path: str, feeds: Sequence[Feed]) -> None:
    """Write feeds as an inputs file (.json in Polygraphy's format, or .npz)."""
    from toolkit.core.io.datafiles import save_inputs as _save

    _save(path, list(feeds))


def generate_inputs(
    model: ModelLike,
    *,
    iterations: int = 1,
    seed: Optional[int] = None,
    val_range: Sequence[str] = (),
    input_shapes: Sequence[str] = (),
) -> List[Dict[str, object]]:
    """Generated feeds for ``model``'s inputs, as ``toolkit run`` makes them (the same seed, 1
    by default, gives the same data); ``val_range``/``input_shapes`` take the command's spellings."""

    metas, _ = graph_io_meta(_model(model))
    feeds, _notes = _generate(
        metas, iterations=iterations, seed=seed, ranges=parse_val_ranges(list(val_range)),
        shapes=parse_shape_specs(list(input_shapes)),
    )
    return feeds


# ------------------------------------------------------------------ running and comparing


@contextlib.contextmanager
def open_runner(runner: str, model: ModelLike, **options) -> Iterator["Runner"]:
    """``with open_runner("onnxrt", model) as r: r.infer(feed)``: a runner for the spec
    ``runner`` on ``model`` (a path or a ModelProto), activated once (one ONNX-Runtime session,
    one TensorRT engine build, one OpenVINO compilation) for as many ``infer(feed)`` calls as
    the block makes, and released when it ends. ``options`` as for :func:`run`."""

    spec = parse_runner_spec(runner)
    base = _runner_options(spec.kind, options)  # (checked before a ModelProto is written to a file)
    with _model_file(model) as path, make_runner(spec, path, base=base) as active:
        yield active


def run(model: ModelLike, feeds: Sequence[Feed], runner: str = "onnxrt", **options) -> List[Dict[str, object]]:
    """Run ``model`` (a path or a ModelProto) on each feed with the runner spec ``runner``
    (``onnxrt``, ``onnxrt:fp16``, ``trt:fp16``, ``openvino:precision=f32``, ...); one
    ``{name: array}`` per feed. Each call builds and releases its runner: hold one with
    :func:`open_runner` to infer many times.

    ``options``: the runner's own options by their spec names (``fp16=True``,
    ``opt="disable"``, OpenVINO's ``device="cpu"``, ``precision="f32"``) or field names
    (``onnx_outputs=["mark", "all"]``, ``providers=["cuda"]``, OpenVINO's ``outputs=[...]``),
    and the :class:`toolkit.run.options.RunOptions` fields every runner shares
    (``external_data_dir=...``); the spec's own options win. UsageError for an option the
    runner does not take (naming those it takes) or a value outside an option's choices."""

    with open_runner(runner, model, **options) as active:
        return [active.infer(dict(feed)) for feed in feeds]


def _runner_options(kind_name: str, options: Mapping[str, Any]) -> RunOptions:
    """RunOptions for a runner of ``kind_name`` with the keyword ``options`` of :func:`run` set
    (the model is :func:`make_runner`'s to set)."""
    kind = get_kind(kind_name)
    mine = _keywords(kind)
    others = {key: k.name for k in registry.KINDS.values() if k.name != kind.name for key in _keywords(k)}
    shared = {f.name for f in dataclasses.fields(RunOptions)} - set(others) - {"model", "runners", "kind_options"}
    changes: Dict[RunnerOption, Any] = {}
    top: Dict[str, Any] = {}
    for key, value in options.items():
        if key in mine:
            changes[mine[key]] = _option_value(kind.name, key, mine[key], value)
        elif key in shared:
            top[key] = value
        else:
            raise _not_an_option(key, kind, others)
    return with_values(dataclasses.replace(RunOptions(""), **top), changes)


def _not_an_option(key: str, kind, others: Mapping[str, str]) -> UsageError:
    """``key`` is no option of runner ``kind`` (perhaps of another's: ``others``, keyword -> kind)."""
    owner = f"an option of {others[key]} runners, not of {kind.name}" if key in others else "not an option"
    names = ", ".join(o.spec or o.field for o in kind.options) or "no options of its own"
    return UsageError(
        f"run: '{key}' is {owner}; {kind.name} takes {names} (and the RunOptions fields every runner "
        "shares, such as external_data_dir)"
    )


def _keywords(kind) -> Dict[str, RunnerOption]:
    """A kind's options by keyword: field names, then spec names (onnxrt's ``fp16`` is its
    ``onnxrt_fp16`` field, as in the spec ``onnxrt:fp16``)."""
    out = {o.field: o for o in kind.options}
    out.update({o.spec: o for o in kind.options if o.spec})
    return out


def _option_value(kind: str, key: str, opt: RunnerOption, value):
    """``value`` checked as a spec's is (:meth:`RunnerOption.check`)."""
    try:
        return opt.check(value)
    except ValueError as exc:
        raise UsageError(f"run: {kind}'s {key} is {exc} (got {value!r})") from None


@dataclass
class Comparison:
    """The comparison of two runs, iteration by iteration (see toolkit.core.compare.arrays)."""

    iterations: List["IterationComparison"]

    @property
    def passed(self) -> bool:
        return all(it.passed for it in self.iterations)

    def mismatched(self) -> List[str]:
        """The outputs out of tolerance in any iteration."""
        seen: List[str] = []
        for it in self.iterations:
            seen += [o.name for o in it.outputs if not o.passed and o.name not in seen]
        return seen


def compare(
    reference: Sequence[Feed],
    outputs: Sequence[Feed],
    *,
    atol: TolValue = None,
    rtol: TolValue = None,
    check_error_stat: Union[None, str, Mapping[str, str]] = None,
) -> Comparison:
    """Compare two runs' outputs (matched by name, iteration by iteration) with ``toolkit
    run``'s tolerances: a number for every output (``atol=1e-3``) or one per output name
    (``atol={"out": 1e-2}``; the others keep the default); ``check_error_stat`` likewise
    (``"elemwise"``, ``"max"``, ``"mean"``, ``"median"``, ``"quantile"``). UsageError for a
    negative or non-numeric tolerance, an unknown statistic, or an output name that neither run has."""

    tol = Tolerances.of(atol=atol, rtol=rtol, check_error_stat=check_error_stat)
    known = {name for feeds in (reference, outputs) for feed in feeds for name in feed}
    require_known_names(tol, known, (("per_atol", "atol"), ("per_rtol", "rtol"), ("per_stat", "check_error_stat")))
    return Comparison([compare_iteration(k, a, b, tol) for k, (a, b) in enumerate(zip(reference, outputs))])


# ------------------------------------------------------------------ graph surgery and conversion


def extract(
    model: ModelLike,
    *,
    inputs: Optional[Sequence[str]] = None,
    outputs: Optional[Sequence[str]] = None,
    input_shapes: Sequence[str] = (),
    force_fallback: bool = False,
    external_data_dir: Optional[str] = None,
):
    """``surgeon extract``: the subgraph from ``inputs`` to ``outputs`` (tensor specs as the
    command takes them: ``"x"``, ``"x:auto:auto"``, ``"x:[1,3]:float32"``; None keeps the
    model's own), checked as the command checks it: InputError for a name the model does not
    have, or for a subgraph onnx.checker refuses where the model passes."""

    m = _copy(model)
    names = top_tensor_names(m)
    specs = [parse_tensor_spec(s, known_names=names) for s in inputs] if inputs is not None else None
    outs = [parse_tensor_spec(s, allow_shape=False, known_names=names) for s in outputs] if outputs is not None else None
    result = _extract(m, inputs=specs, outputs=outs, input_shapes=parse_shape_specs(list(input_shapes)) or None,
                      force_fallback=force_fallback, external_data_dir=external_data_dir)
    check_model(result, m)
    return result


def sanitize(model: ModelLike, *, fold_constants: bool = False, cleanup: bool = True, toposort: bool = False,
             input_shapes: Sequence[str] = ()):
    """``surgeon sanitize``: the model with constants folded (``fold_constants``), unused nodes
    removed (``cleanup``), nodes sorted (``toposort``), input shapes fixed (``input_shapes``)."""

    shapes = parse_shape_specs(list(input_shapes)) or None
    out, _report = _sanitize(_copy(model), fold_constants=fold_constants, cleanup=cleanup, toposort=toposort,
                             input_shapes=shapes)
    return out


def convert(model: ModelLike, *, keep_fp32: Sequence[str] = (), dtype: str = "float16"):
    """``convert --fp-to-fp16``: mixed fp16 (or ``dtype="bfloat16"``), the ``keep_fp32`` nodes
    (names, globs, op types) and those that need it kept in fp32; graph I/O keep their types."""

    return _convert(_copy(model), list(keep_fp32), dtype=dtype).model


# ------------------------------------------------------------------ reducing


def reduce(model: ModelLike, fails: Callable[["onnx.ModelProto"], bool], *, mode: Optional[str] = None):
    """``debug reduce`` with a Python check: the smallest subgraph of ``model`` for which
    ``fails(subgraph)`` is True (``fails(model)`` must be). ``mode``: None (bisect, then
    1-minimal), ``"bisect"`` or ``"linear"``. Raises InputError when the full model does not fail."""

    with tempfile.TemporaryDirectory(prefix="toolkit-reduce-") as folder, _model_file(model) as path:
        artifact = os.path.join(folder, "candidate.onnx")
        output = os.path.join(folder, "reduced.onnx")
        cfg = ReduceConfig(model=path, output=output, check=["python-check"], mode=mode, iter_artifact=artifact,
                           save_replay=os.path.join(folder, "replay.json"))
        outcome = Reducer(cfg, runner=_PythonCheck(artifact, fails)).run()
        if outcome.status != "reduced" or not outcome.output_written:
            raise InputError("the check passes on the full model: nothing to reduce")
        return load_model(output)


class _PythonCheck:
    """A reduce check runner that calls ``fails(model)`` on each candidate."""

    kind = "python"

    def __init__(self, artifact: str, fails: Callable):
        self.artifact = artifact
        self.fails = fails

    def run(self, tick=None):
        start = time.monotonic()
        failed = bool(self.fails(load_model(self.artifact)))
        return CheckResult(1 if failed else 0, seconds=time.monotonic() - start)

    def close(self) -> None:
        pass


# ------------------------------------------------------------------ generations


def debug_llm(
    model: str, reference: str = "onnxrt", test: str = "onnxrt", *, reference_model: Optional[str] = None,
    prompts: Sequence[Sequence[int]] = (), samples: int = 4, seed: int = 0, steps: int = 16, free_run: bool = False,
    atol: TolValue = None, rtol: TolValue = None, check_error_stat: Union[None, str, Mapping[str, str]] = None,
    names: Optional[Mapping[str, str]] = None, localize: bool = True, save_step_inputs: Optional[str] = None,
    external_data_dir: Optional[str] = None,
) -> Dict[str, Any]:
    """``debug llm``: where the generations of decoder ``model`` (a path) on runner specs
    ``reference`` and ``test`` part. Returns the record ``--json`` prints: ``first_divergence``
    (None when none; else prompt, step, kind, outputs, tensor, node, op_type, module, layer,
    max_abs_diff...), ``steps_checked``, ``near_ties``. ``names``: ``{role: name}`` for other I/O
    names (``{"past_key": "cache.{i}.k"}``). InputError for a model that is no such decoder."""
    cfg = LlmConfig(
        model, reference=reference, test=test, reference_model=reference_model, prompts=[list(p) for p in prompts],
        samples=samples, seed=seed, steps=steps, free_run=free_run, names=parse_names([f"{k}={v}" for k, v in
                                                                                      (names or {}).items()]),
        localize=localize, save_step_inputs=save_step_inputs, external_data_dir=external_data_dir,
        tolerances=Tolerances.of(atol=atol, rtol=rtol, check_error_stat=check_error_stat),
    )
    return LlmDebugger(cfg).run().to_json()


# ------------------------------------------------------------------ helpers


def _model(model: ModelLike):
    return load_model(model) if isinstance(model, str) else model


def _copy(model: ModelLike):
    """A ModelProto the callee may change (the caller's stays as it was)."""
    if isinstance(model, str):
        return load_model(model)
    import onnx

    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    return copy


class _model_file:
    """``with _model_file(model) as path``: a path for a ModelProto (a temporary file)."""

    def __init__(self, model: ModelLike):
        self.model = model
        self.folder: Optional[tempfile.TemporaryDirectory] = None

    def __enter__(self) -> str:
        if isinstance(self.model, str):
            return self.model
        self.folder = tempfile.TemporaryDirectory(prefix="toolkit-api-")
        path = os.path.join(self.folder.name, "model.onnx")
        save_model(self.model, path)
        return path

    def __exit__(self, *exc) -> None:
        if self.folder is not None:
            self.folder.cleanup()

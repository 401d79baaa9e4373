"""The runner registry: every backend kind, its options, its preflight and its factory.

A :class:`RunnerKind` is all ``toolkit run`` (and anything that takes a runner spec) knows
about a backend. The command line flags that select runners (``--onnxrt``, ``--trt``), the
order of the runners, the "TensorRT-only option given without --trt" warnings and the
options a runner spec accepts (``trt:fp16``, ``onnxrt:opt=basic``) all come from here.

Adding a backend: write its :class:`toolkit.backends.base.Runner` in ``toolkit/backends/``,
then :func:`register` one :class:`RunnerKind` (see ``docs/architecture.md``).

This module imports no backend and nothing heavy; factories import theirs when called.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from toolkit.backends import openvino
from toolkit.backends.onnxrt import OPTIMIZATION_LEVELS, OnnxrtRunner, check_optimization_level, resolve_providers
from toolkit.core.errors import UsageError

if TYPE_CHECKING:  # pragma: no cover
    from toolkit.backends.base import Runner
    from toolkit.run.feeds import FeedSource
    from toolkit.run.options import Reporter, RunOptions


@dataclass(frozen=True)
class RunnerOption:
    """One option of a runner kind.

    ``field``: the :class:`~toolkit.run.options.RunOptions` attribute it sets; ``flag``: its
    command-line flag (None when it exists only in specs); ``spec``: its name in a runner spec
    (``trt:fp16`` -> ``fp16``, ``onnxrt:opt=basic`` -> ``opt``), None when specs cannot set it;
    ``choices``: the values of a ``KEY=VALUE`` spec option (empty for a switch such as ``fp16``);
    ``value``: for a ``KEY=VALUE`` option that takes any value (``onnxrt:providers=cuda``), the
    function turning the spec's text into the field's value.
    """

    field: str
    flag: Optional[str] = None
    spec: Optional[str] = None
    choices: Tuple[str, ...] = ()
    value: Optional[Callable[[str], Any]] = None


Preflight = Callable[["RunOptions", "Reporter"], Any]
Factory = Callable[["RunOptions", Any, "Reporter", Optional[str]], "Runner"]
Connect = Callable[[Any, "FeedSource"], Mapping[str, tuple]]


def _no_preflight(opts: "RunOptions", reporter: "Reporter") -> None:
    return None


def _on_device(options: Mapping[str, Any]) -> bool:
    return False


def _low_switches(options: Mapping[str, Any]) -> List[str]:
    return [k for k in ("fp16", "bf16") if options.get(k)]


def _without_low_switches(options: Mapping[str, Any]) -> Dict[str, Any]:
    return {k: v for k, v in options.items() if k not in ("fp16", "bf16")}


@dataclass(frozen=True)
class RunnerKind:
    """A backend as ``toolkit run`` sees it.

    ``preflight(opts, reporter)`` runs before any data is loaded: usage errors (exit 2), then a
    missing dependency or device (exit 4); what it returns is handed to ``factory``.
    ``factory(opts, config, reporter, name)`` returns an inactive runner. ``connect(config,
    feeds)``, when given, lets the backend take the run's inputs early (TensorRT calibrates
    ``--int8`` on them) and returns shapes that generated inputs should use for dynamic dims.
    ``warn_unused``: warn when the kind's flags are given but none of its runners runs.
    ``outputs_field``: the option that chooses the tensors it returns (``mark all`` for a
    layerwise comparison). ``host_only(spec_options)``: whether a runner of that spec computes
    on the CPU only, opening no device context, so that it may run in a process that forks
    later (``debug reduce --compare`` then checks in process, and computes its reference there).
    ``reduced(spec_options)``: the reduced precisions a spec asks for (``["fp16"]``, ``["bf16"]``);
    ``full_precision(spec_options)``: the options of the same runner computing in float32, which
    ``debug precision`` runs its mixed-precision candidates with.
    """

    name: str
    flag: str
    help: str
    factory: Factory
    options: Tuple[RunnerOption, ...] = ()
    preflight: Preflight = _no_preflight
    connect: Optional[Connect] = None
    warn_unused: bool = False
    outputs_field: Optional[str] = None
    host_only: Callable[[Mapping[str, Any]], bool] = _on_device
    reduced: Callable[[Mapping[str, Any]], List[str]] = _low_switches
    full_precision: Callable[[Mapping[str, Any]], Dict[str, Any]] = _without_low_switches

    def spec_options(self) -> Dict[str, RunnerOption]:
        return {o.spec: o for o in self.options if o.spec}


KINDS: Dict[str, RunnerKind] = {}


def register(kind: RunnerKind) -> RunnerKind:
    """Add (or replace) a runner kind; returns it."""
    KINDS[kind.name] = kind
    return kind


def get_kind(name: str) -> RunnerKind:
    """The kind called ``name``; UsageError (exit 2) naming the valid ones otherwise."""
    kind = KINDS.get(name)
    if kind is None:
        raise UsageError(f"unknown runner '{name}'; use one of: {', '.join(KINDS)}")
    return kind


def mark_all_outputs() -> Dict[str, Any]:
    """Run options that make every kind return every tensor (``--onnx-outputs mark all`` and
    the like), for layerwise comparisons."""
    return {k.outputs_field: ["mark", "all"] for k in KINDS.values() if k.outputs_field}


def options_given(opts: "RunOptions", kind_name: str) -> List[str]:
    """The flags of ``kind_name``'s options that are set in ``opts``."""
    return [o.flag for o in get_kind(kind_name).options if o.flag and getattr(opts, o.field)]


def unused_options(opts: "RunOptions", kinds_running: Sequence[str]) -> List[str]:
    """Warnings for kinds whose flags are given while none of their runners runs."""
    notes = []
    for kind in KINDS.values():
        if kind.warn_unused and kind.name not in kinds_running:
            given = options_given(opts, kind.name)
            if given:
                notes.append(f"{', '.join(given)} ignored without {kind.flag}")
    return notes


def runner_order(argv: Sequence[str], selected: Mapping[str, bool]) -> List[str]:
    """The selected kinds in the order their flags (``--onnxrt``, ``--trt``) appear in ``argv``
    (once per occurrence: ``--onnxrt --onnxrt`` runs ONNX-Runtime twice, as Polygraphy does)."""
    by_flag = {KINDS[name].flag: name for name in selected if name in KINDS}
    order: List[str] = []
    for tok in argv:
        if tok == "--":
            break
        name = by_flag.get(tok)
        if name and selected[name]:
            order.append(name)  # a flag given twice runs that runner twice (compared with itself)
    order += [name for name, on in selected.items() if on and name not in order]
    return order


# ---------------------------------------------------------------------------- ONNX-Runtime


def _onnxrt_preflight(opts: "RunOptions", reporter: "Reporter") -> None:
    if opts.onnxrt_fp16 and opts.onnxrt_bf16:
        raise UsageError("onnxrt:fp16,bf16: emulate one precision per runner (onnxrt:fp16 or onnxrt:bf16)")
    if opts.ort_optimization:
        check_optimization_level(opts.ort_optimization)
    if opts.providers:
        resolve_providers(opts.providers)  # a provider this installation lacks: exit 4 before any work


def _providers_value(text: str) -> List[str]:
    """``onnxrt:providers=cuda+cpu`` -> ``["cuda", "cpu"]`` (priority order, as --providers takes them)."""
    return [p for p in text.replace("+", ",").split(",") if p.strip()]


def _onnxrt_host_only(options: Mapping[str, Any]) -> bool:
    providers = options.get("providers")
    return not providers or all(p.strip().lower() in ("cpu", "cpuexecutionprovider") for p in _providers_value(str(providers)))


def _onnxrt_factory(opts: "RunOptions", config: Any, reporter: "Reporter", name: Optional[str]) -> "Runner":
    return OnnxrtRunner(
        opts.model,
        providers=opts.providers,
        outputs=opts.onnx_outputs,
        exclude_outputs=opts.onnx_exclude_outputs,
        external_data_dir=opts.external_data_dir,
        graph_optimization=opts.ort_optimization,
        name=name,
        fp16=opts.onnxrt_fp16,
        bf16=opts.onnxrt_bf16,
    )


register(
    RunnerKind(
        name="onnxrt",
        flag="--onnxrt",
        help="ONNX-Runtime (CPU by default; --providers picks execution providers)",
        factory=_onnxrt_factory,
        preflight=_onnxrt_preflight,
        outputs_field="onnx_outputs",
        host_only=_onnxrt_host_only,
        options=(
            RunnerOption("providers", "--providers", spec="providers", value=_providers_value),
            RunnerOption("onnx_outputs", "--onnx-outputs"),
            RunnerOption("onnx_exclude_outputs", "--onnx-exclude-outputs"),
            RunnerOption("ort_optimization", "--ort-optimization", spec="opt", choices=tuple(OPTIMIZATION_LEVELS)),
            # fp16 / bf16 storage emulated on the CPU (`run --onnxrt --fp16` or `--bf16` without --trt)
            RunnerOption("onnxrt_fp16", None, spec="fp16"),
            RunnerOption("onnxrt_bf16", None, spec="bf16"),
        ),
    )
)


# ---------------------------------------------------------------------------- TensorRT


# The TensorRT-specific steps live in the backend (toolkit/backends/trt/preflight.py); they read
# RunOptions by attribute and import nothing heavy.


def trt_config(opts: "RunOptions"):
    """The :class:`toolkit.backends.trt.TrtConfig` for ``opts`` (UsageError for malformed values)."""
    from toolkit.backends.trt.preflight import config_from

    return config_from(opts)


def check_trt(opts: "RunOptions", reporter: Optional["Reporter"] = None):
    from toolkit.backends.trt.preflight import check

    return check(opts)


def _trt_factory(opts: "RunOptions", config: Any, reporter: "Reporter", name: Optional[str]) -> "Runner":
    from toolkit.backends.trt.preflight import make_runner

    return make_runner(opts, config, lambda severity, text: reporter.info(f"[TensorRT] {severity}: {text}"), name)


def _trt_connect(config: Any, feeds: "FeedSource") -> Mapping[str, tuple]:
    from toolkit.backends.trt.preflight import connect

    return connect(config, feeds.loaded, feeds.all_for)


register(
    RunnerKind(
        name="trt",
        flag="--trt",
        help="TensorRT (needs an NVIDIA GPU and the trt extra)",
        factory=_trt_factory,
        preflight=check_trt,
        connect=_trt_connect,
        warn_unused=True,
        outputs_field="trt_outputs",
        options=(
            RunnerOption("trt_outputs", "--trt-outputs"),
            RunnerOption("trt_exclude_outputs", "--trt-exclude-outputs"),
            RunnerOption("fp16", "--fp16", spec="fp16"),
            RunnerOption("bf16", "--bf16", spec="bf16"),
            RunnerOption("int8", "--int8", spec="int8"),
            RunnerOption("tf32", "--tf32", spec="tf32"),
            RunnerOption("pool_limit", "--pool-limit"),
            RunnerOption("trt_min_shapes", "--trt-min-shapes"),
            RunnerOption("trt_opt_shapes", "--trt-opt-shapes"),
            RunnerOption("trt_max_shapes", "--trt-max-shapes"),
            RunnerOption("save_engine", "--save-engine"),
            RunnerOption("calibration_cache", "--calibration-cache"),
        ),
    )
)


# ---------------------------------------------------------------------------- OpenVINO (toolkit/backends/openvino.py)

register(
    RunnerKind(
        name="openvino",
        flag="--openvino",
        help="OpenVINO (the openvino extra; CPU by default, in the device's default precision)",
        factory=openvino.factory,
        preflight=openvino.preflight,
        warn_unused=True,
        outputs_field="openvino_outputs",
        host_only=openvino.host_only,
        reduced=openvino.reduced,
        full_precision=openvino.full_precision,
        options=(
            RunnerOption("openvino_outputs", "--openvino-outputs"),
            RunnerOption("openvino_exclude_outputs", "--openvino-exclude-outputs"),
            RunnerOption("openvino_device", "--openvino-device", spec="device", choices=openvino.DEVICES),
            RunnerOption("openvino_precision", "--openvino-precision", spec="precision", choices=tuple(openvino.PRECISIONS)),
        ),
    )
)

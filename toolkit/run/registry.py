"""The runner registry: every backend kind, its options, its preflight and its factory.

A :class:`RunnerKind` is all ``toolkit run`` (and anything that takes a runner spec) knows
about a backend. The command line flags that select runners (``--onnxrt``, ``--trt``), the
order of the runners, the "TensorRT-only option given without --trt" warnings and the
options a runner spec accepts (``trt:fp16``, ``onnxrt:opt=basic``) all come from here; a
kind's options are the :class:`~toolkit.run.options.RunOptions` fields declared with its
name (``runner="trt"``) and the fields of the dataclass the kind declares itself
(``RunnerKind(declares=...)``: a backend's options live in its own module).

Adding a backend: write its :class:`toolkit.backends.base.Runner` in ``toolkit/backends/``,
then :func:`register` one :class:`RunnerKind` (see ``docs/architecture.md``).

This module imports no backend library and nothing heavy; factories import theirs when called.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from toolkit.backends import openvino
from toolkit.backends.onnxrt import OnnxrtRunner, check_optimization_level, provider_list, resolve_providers
from toolkit.core.declare import declarations
from toolkit.core.errors import UsageError
from toolkit.run.options import KIND_DECLARATIONS, Reporter, RunOptions

if TYPE_CHECKING:  # pragma: no cover
    from toolkit.backends.base import Runner
    from toolkit.run.feeds import FeedSource


@dataclass(frozen=True)
class RunnerOption:
    """One option of a runner kind.

    ``field``: the attribute it sets, on :class:`~toolkit.run.options.RunOptions`, or, with
    ``kind`` set, on that kind's own options object (``opts.of(kind)``); ``flag``: its
    command-line flag (None when it exists only in specs); ``spec``: its name in a runner spec
    (``trt:fp16`` -> ``fp16``, ``onnxrt:opt=basic`` -> ``opt``), None when specs cannot set it;
    ``choices``: the values of a ``KEY=VALUE`` spec option (empty for a switch such as ``fp16``);
    ``convert``: for a ``KEY=VALUE`` option that takes any value (``onnxrt:providers=cuda``), the
    function turning the spec's text into the field's value.
    """

    field: str
    flag: Optional[str] = None
    spec: Optional[str] = None
    choices: Tuple[str, ...] = ()
    convert: Optional[Callable[[str], Any]] = None
    kind: Optional[str] = None

    def get(self, opts: RunOptions) -> Any:
        return getattr(opts.of(self.kind) if self.kind else opts, self.field)

    def check(self, value: Any) -> Any:
        """``value`` as the option holds it, checked the one way every entry checks it (a runner
        spec's text, a keyword of ``toolkit.api``, a flag): one of the choices (lower-cased), a
        bool for a switch, a string converted by ``convert``. ValueError saying what it must be
        (``one of: f32, bf16, f16``); the caller names where the value came from."""
        if value is None:
            return None
        if self.choices:
            if not isinstance(value, str) or value.lower() not in self.choices:
                raise ValueError(f"one of: {', '.join(self.choices)}")
            return value.lower()
        if self.convert is not None:
            return self.convert(value) if isinstance(value, str) else value
        if self.spec and not isinstance(value, bool):
            raise ValueError("a switch: True or False")
        return value


def check_choices(kind: "RunnerKind", opts: RunOptions) -> RunOptions:
    """``opts`` with the values of the choice options ``kind`` declares itself checked and lower-cased;
    UsageError for one that is not one of its choices (``--openvino-precision x``), as its flag names it."""
    changes = {}
    for o in kind.options:
        if o.choices and o.flag and o.kind:
            value = o.get(opts)
            try:
                changes[o] = o.check(value)
            except ValueError as exc:
                raise UsageError(f"{o.flag} {value}: use {exc}") from None
    return with_values(opts, changes) if any(changes[o] != o.get(opts) for o in changes) else opts


def with_values(opts: RunOptions, changes: Mapping[RunnerOption, Any]) -> RunOptions:
    """``opts`` with each option of ``changes`` set to its value (a kind's own options included)."""
    top = {o.field: v for o, v in changes.items() if not o.kind}
    own = dict(opts.kind_options)
    for o, v in changes.items():
        if o.kind:
            own[o.kind] = dataclasses.replace(own.get(o.kind) or opts.of(o.kind), **{o.field: v})
    return dataclasses.replace(opts, **top, kind_options=own)


Preflight = Callable[["RunOptions", "Reporter"], Any]
Factory = Callable[["RunOptions", Any, "Reporter", Optional[str]], "Runner"]
Connect = Callable[[Any, "FeedSource"], Mapping[str, tuple]]


def _no_preflight(opts: "RunOptions", reporter: "Reporter") -> None:
    return None


SpecTest = Callable[[Mapping[str, Any]], bool]


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
    ``declares``: a dataclass of the options the kind declares itself, each field declared with
    :func:`toolkit.core.declare.option` (its help panel defaults to ``title``); ``run`` takes
    them as flags, runner specs as spec options, ``opts.of(name)`` holds their values.
    ``warn_unused``: warn when the kind's flags are given but none of its runners runs.
    ``outputs_field``: the option that chooses the tensors it returns (``mark all`` for a
    layerwise comparison, :func:`mark_all_outputs`).
    ``in_process``: its runners may run in this very process (no device context a later fork
    could inherit, nothing a timeout must kill): debug reduce then checks without a worker and
    computes its reference there. True, False, or a test of a spec's options
    (``onnxrt:providers=cuda`` may not); ask :meth:`runs_in_process`.
    ``emulates_storage``: it runs a model held in memory whose fp16/bf16 storage is emulated
    (``onnxrt:fp16``); debug precision then emulates each candidate and follows the first
    overflow, instead of converting the model and searching blind.
    ``reduced(spec options)``: the reduced precisions a spec asks for (``["fp16"]``);
    ``full_precision(spec options)``: the options of the same runner computing in float32,
    which ``debug precision`` runs its mixed-precision candidates with.
    ``gpu``: its runners need an NVIDIA GPU (True, False, or a test of a spec's options, as for
    ``in_process``): a check on a Ray cluster then asks Ray for one; ask :meth:`uses_gpu`.
    """

    name: str
    flag: str
    help: str  # the help of its flag in ``toolkit run --help``
    factory: Factory
    preflight: Preflight = _no_preflight
    connect: Optional[Connect] = None
    declares: Optional[type] = None
    title: Optional[str] = None  # its name in help panels (default: ``name``)
    warn_unused: bool = False
    outputs_field: Optional[str] = None
    in_process: Union[bool, SpecTest] = False
    emulates_storage: bool = False
    reduced: Callable[[Mapping[str, Any]], List[str]] = _low_switches
    full_precision: Callable[[Mapping[str, Any]], Dict[str, Any]] = _without_low_switches
    gpu: Union[bool, SpecTest] = False

    @property
    def options(self) -> Tuple[RunnerOption, ...]:
        """The kind's options: the RunOptions fields declared with ``runner=<its name>``, then
        the fields of ``declares``."""
        shared = tuple(
            RunnerOption(f.name, d.flag, d.spec, d.choices, d.convert)
            for f, d in declarations(RunOptions) if d.runner == self.name
        )
        own = tuple(
            RunnerOption(f.name, d.flag, d.spec, d.choices, d.convert, kind=self.name)
            for f, d in (declarations(self.declares) if self.declares else ())
        )
        return shared + own

    def prepare(self, opts: RunOptions, reporter: "Reporter") -> Any:
        """Its ``preflight``, with its choice options checked first (:func:`check_choices`: for
        options set in code; the command line checks them where it reads them)."""
        return self.preflight(check_choices(self, opts), reporter)

    def spec_options(self) -> Dict[str, RunnerOption]:
        return {o.spec: o for o in self.options if o.spec}

    def option(self, field: str) -> RunnerOption:
        """The option that sets ``field`` (RunOptions' or the kind's own)."""
        return next(o for o in self.options if o.field == field)

    def uses_gpu(self, spec_options: Mapping[str, Any]) -> bool:
        """Whether a runner of this kind with ``spec_options`` needs an NVIDIA GPU (a Ray check
        then asks for one)."""
        return self.gpu(spec_options) if callable(self.gpu) else self.gpu

    def runs_in_process(self, spec_options: Mapping[str, Any]) -> bool:
        """Whether a runner of this kind with ``spec_options`` may run in this process."""
        return self.in_process(spec_options) if callable(self.in_process) else self.in_process

    @property
    def panel(self) -> str:
        """The help panel of the options it declares itself."""
        return self.title or self.name


KINDS: Dict[str, RunnerKind] = {}


def register(kind: RunnerKind) -> RunnerKind:
    """Add (or replace) a runner kind; returns it."""
    KINDS[kind.name] = kind
    KIND_DECLARATIONS.pop(kind.name, None)
    if kind.declares is not None:
        KIND_DECLARATIONS[kind.name] = kind.declares
    return kind


def get_kind(name: str) -> RunnerKind:
    """The kind called ``name``; UsageError (exit 2) naming the valid ones otherwise."""
    kind = KINDS.get(name)
    if kind is None:
        raise UsageError(f"unknown runner '{name}'; use one of: {', '.join(KINDS)}")
    return kind


def mark_all_outputs(opts: RunOptions) -> RunOptions:
    """``opts`` with every kind returning every tensor (``--onnx-outputs mark all`` and the
    like: each kind's ``outputs_field``), for layerwise comparisons."""
    return with_values(opts, {k.option(k.outputs_field): ["mark", "all"] for k in KINDS.values() if k.outputs_field})


def options_given(opts: RunOptions, kind_name: str) -> List[str]:
    """The flags of ``kind_name``'s options that are set in ``opts``."""
    return [o.flag for o in get_kind(kind_name).options if o.flag and o.get(opts)]


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
    """The selected kinds (``{kind name: flag given}``, one entry per registered kind) in the
    order their flags (``--onnxrt``, ``--trt``) appear in ``argv`` (once per occurrence:
    ``--onnxrt --onnxrt`` runs ONNX-Runtime twice, as Polygraphy does)."""
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


def _onnxrt_in_process(options: Mapping[str, Any]) -> bool:
    """ONNX-Runtime on the CPU provider only (the default) opens no device context."""
    providers = provider_list(str(options.get("providers") or "cpu"))
    return all(p.strip().lower() in ("cpu", "cpuexecutionprovider") for p in providers)


def _onnxrt_gpu(options: Mapping[str, Any]) -> bool:
    """ONNX-Runtime on the CUDA or TensorRT provider needs an NVIDIA GPU."""
    providers = provider_list(str(options.get("providers") or "cpu"))
    return any(("cuda" in p.lower() or "tensorrt" in p.lower()) for p in providers)


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
        fp32_nodes=opts.fp32_nodes,
    )


register(RunnerKind("onnxrt", "--onnxrt", "Run the model with ONNX-Runtime.", _onnxrt_factory,
                    preflight=_onnxrt_preflight, title="ONNX-Runtime", outputs_field="onnx_outputs",
                    in_process=_onnxrt_in_process, emulates_storage=True, gpu=_onnxrt_gpu))


# ---------------------------------------------------------------------------- TensorRT


# The TensorRT-specific steps live in the backend (toolkit/backends/trt/preflight.py); they read
# RunOptions by attribute and import nothing heavy.


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
        help="Run the model with TensorRT (needs TensorRT and cuda-python: the [trt] extra).",
        factory=_trt_factory,
        preflight=check_trt,
        connect=_trt_connect,
        title="TensorRT",
        warn_unused=True,
        outputs_field="trt_outputs",
        gpu=True,
    )
)


# ---------------------------------------------------------------------------- OpenVINO (toolkit/backends/openvino.py)

register(
    RunnerKind(
        name="openvino",
        flag="--openvino",
        help="Run the model with OpenVINO (the [openvino] extra); its log line names the precision it infers in.",
        factory=openvino.factory,
        preflight=openvino.preflight,
        declares=openvino.OpenvinoOptions,
        title="OpenVINO",
        warn_unused=True,
        outputs_field="outputs",
        in_process=openvino.in_process,
        reduced=openvino.reduced,
        full_precision=openvino.full_precision,
    )
)

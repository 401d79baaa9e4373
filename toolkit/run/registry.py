"""The runner registry: every backend kind, its options, its preflight and its factory.

A :class:`RunnerKind` is all ``toolkit run`` (and anything that takes a runner spec) knows
about a backend. The command line flags that select runners (``--onnxrt``, ``--trt``), the
order of the runners, the "TensorRT-only option given without --trt" warnings and the
options a runner spec accepts (``trt:fp16``, ``onnxrt:opt=basic``) all come from here; a
kind's options are the :class:`~toolkit.run.options.RunOptions` fields declared with its
name (``runner="trt"``).

Adding a backend: write its :class:`toolkit.backends.base.Runner` in ``toolkit/backends/``,
then :func:`register` one :class:`RunnerKind` (see ``docs/architecture.md``).

This module imports no backend library and nothing heavy; factories import theirs when called.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from toolkit.backends.onnxrt import OnnxrtRunner, check_optimization_level
from toolkit.core.declare import declarations
from toolkit.core.errors import UsageError
from toolkit.run.options import Reporter, RunOptions

if TYPE_CHECKING:  # pragma: no cover
    from toolkit.backends.base import Runner
    from toolkit.run.feeds import FeedSource


@dataclass(frozen=True)
class RunnerOption:
    """One option of a runner kind.

    ``field``: the :class:`~toolkit.run.options.RunOptions` attribute it sets; ``flag``: its
    command-line flag (None when it exists only in specs); ``spec``: its name in a runner spec
    (``trt:fp16`` -> ``fp16``, ``onnxrt:opt=basic`` -> ``opt``), None when specs cannot set it;
    ``choices``: the values of a ``KEY=VALUE`` spec option (empty for a switch such as ``fp16``).
    """

    field: str
    flag: Optional[str] = None
    spec: Optional[str] = None
    choices: Tuple[str, ...] = ()


Preflight = Callable[["RunOptions", "Reporter"], Any]
Factory = Callable[["RunOptions", Any, "Reporter", Optional[str]], "Runner"]
Connect = Callable[[Any, "FeedSource"], Mapping[str, tuple]]


def _no_preflight(opts: "RunOptions", reporter: "Reporter") -> None:
    return None


@dataclass(frozen=True)
class RunnerKind:
    """A backend as ``toolkit run`` sees it.

    ``preflight(opts, reporter)`` runs before any data is loaded: usage errors (exit 2), then a
    missing dependency or device (exit 4); what it returns is handed to ``factory``.
    ``factory(opts, config, reporter, name)`` returns an inactive runner. ``connect(config,
    feeds)``, when given, lets the backend take the run's inputs early (TensorRT calibrates
    ``--int8`` on them) and returns shapes that generated inputs should use for dynamic dims.
    ``warn_unused``: warn when the kind's flags are given but none of its runners runs.
    ``in_process``: its runners may run in this very process (no device context a later fork
    could inherit, nothing a timeout must kill): debug reduce then checks without a worker.
    ``emulates_storage``: it runs a model held in memory whose fp16/bf16 storage is emulated
    (``onnxrt:fp16``); debug precision then emulates each candidate and follows the first
    overflow, instead of converting the model and searching blind.
    """

    name: str
    flag: str
    help: str  # the help of its flag in ``toolkit run --help``
    factory: Factory
    preflight: Preflight = _no_preflight
    connect: Optional[Connect] = None
    warn_unused: bool = False
    in_process: bool = False
    emulates_storage: bool = False

    @property
    def options(self) -> Tuple[RunnerOption, ...]:
        """The kind's options: the RunOptions fields declared with ``runner=<its name>``."""
        return tuple(
            RunnerOption(f.name, d.flag, d.spec, d.choices) for f, d in declarations(RunOptions) if d.runner == self.name
        )

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


def options_given(opts: RunOptions, kind_name: str) -> List[str]:
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


register(RunnerKind("onnxrt", "--onnxrt", "Run the model with ONNX-Runtime.", _onnxrt_factory,
                    preflight=_onnxrt_preflight, in_process=True, emulates_storage=True))


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
        help="Run the model with TensorRT (needs TensorRT and cuda-python: the [trt] extra).",
        factory=_trt_factory,
        preflight=check_trt,
        connect=_trt_connect,
        warn_unused=True,
    )
)

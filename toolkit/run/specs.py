"""Runner specs: ``KIND[:OPT[,OPT...]]``, one syntax wherever a runner is named.

``onnxrt``, ``trt``, ``trt:fp16``, ``onnxrt:opt=disable``, ``trt:fp16,int8``. The kinds and
the options each accepts come from :mod:`toolkit.run.registry`; an unknown kind or option is
a usage error (exit 2) that names the valid ones::

    from toolkit.run.specs import parse_runner_spec, make_runner

    spec = parse_runner_spec("onnxrt:opt=disable")   # RunnerSpec(kind="onnxrt", options={"opt": "disable"})
    runner = make_runner(spec, "model.onnx")         # inactive; use it as `with runner: ...`
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, Optional, Sequence, Union

from toolkit.core.errors import UsageError
from toolkit.run.options import Reporter, RunOptions
from toolkit.run.registry import RunnerKind, RunnerOption, get_kind, with_values

if TYPE_CHECKING:  # pragma: no cover
    from toolkit.backends.base import Runner


@dataclass(frozen=True)
class RunnerSpec:
    """A parsed runner spec: the kind and its options (``{"fp16": True}``, ``{"opt": "disable"}``)."""

    kind: str
    options: Dict[str, Union[bool, str]] = field(default_factory=dict)

    @property
    def text(self) -> str:
        """The spec written back (``trt:fp16``); also the name of its runner when it has options."""
        if not self.options:
            return self.kind
        opts = [k if v is True else f"{k}={v}" for k, v in self.options.items()]
        return f"{self.kind}:{','.join(opts)}"

    def apply(self, opts: RunOptions) -> RunOptions:
        """``opts`` with this spec's options set (the spec wins over the command-line flags)."""
        if not self.options:
            return opts
        known = get_kind(self.kind).spec_options()
        changes: Dict[RunnerOption, Any] = {}
        for key, value in self.options.items():
            opt = known[key]
            changes[opt] = opt.convert(str(value)) if opt.convert is not None else value
        return with_values(opts, changes)

    def in_process(self) -> bool:
        """Whether this runner may run in this very process (no device context; see
        ``RunnerKind.in_process``)."""
        return get_kind(self.kind).runs_in_process(self.options)


def _describe(key: str, opt) -> str:
    if opt.choices:
        return f"{key}={'|'.join(opt.choices)}"
    return f"{key}=VALUE" if opt.convert is not None else key


def _parse_option(kind: RunnerKind, text: str, spec: str) -> tuple:
    known = kind.spec_options()
    key, eq, value = text.partition("=")
    key = key.strip().lower()
    value = value.strip()
    opt = known.get(key)
    if opt is None:
        valid = ", ".join(_describe(k, o) for k, o in known.items())
        raise UsageError(
            f"runner spec '{spec}': {kind.name} has no option '{key}'; "
            + (f"its options: {valid}" if valid else f"{kind.name} takes no options")
        )
    return key, _option_value(opt, key, bool(eq), value, spec)


def _option_value(opt, key: str, eq: bool, value: str, spec: str):
    """The value of spec option ``key`` (``eq``: written with '='): text to convert, a choice, or a switch."""
    if opt.convert is not None:
        if not eq or not value:
            raise UsageError(f"runner spec '{spec}': write {key}=VALUE")
        return value  # (converted where the spec is applied)
    if opt.choices:
        try:
            return opt.check(value if eq else "")  # ("" is no choice: KEY without =VALUE)
        except ValueError as exc:
            raise UsageError(f"runner spec '{spec}': write {key}=VALUE with VALUE {exc}") from None
    if eq:
        raise UsageError(f"runner spec '{spec}': option '{key}' is a switch; write it without '={value}'")
    return True


def parse_runner_spec(text: str) -> RunnerSpec:
    """``"trt:fp16,int8"`` -> ``RunnerSpec("trt", {"fp16": True, "int8": True})`` (UsageError if unknown)."""
    raw = text.strip()
    name, _, rest = raw.partition(":")
    kind = get_kind(name.strip().lower())
    options: Dict[str, Union[bool, str]] = {}
    for part in (p for p in rest.split(",") if p.strip()):
        key, value = _parse_option(kind, part, raw)
        options[key] = value
    return RunnerSpec(kind.name, options)


def make_runner(
    spec: Union[RunnerSpec, str],
    model: str,
    *,
    base: Optional[RunOptions] = None,
    reporter: Optional[Reporter] = None,
    name: Optional[str] = None,
) -> "Runner":
    """An inactive runner for ``spec`` on ``model``.

    ``base`` supplies every other option (providers, outputs to mark, external data folder...);
    the spec's own options win. The kind's preflight runs first, so a missing backend or
    device is a :class:`~toolkit.core.errors.DependencyError` here, before any work. The runner
    is named ``name``, else the spec's text when it has options, else the backend's default.
    """
    if isinstance(spec, str):
        spec = parse_runner_spec(spec)
    kind = get_kind(spec.kind)
    opts = dataclasses.replace(base or RunOptions(model), model=model, runners=[spec.text])
    opts = spec.apply(opts)
    rep = reporter or Reporter()
    config = kind.prepare(opts, rep)
    return kind.factory(opts, config, rep, name or (spec.text if spec.options else None))


def preflight_specs(specs: Sequence[str], model: str, base: Optional[RunOptions] = None) -> None:
    """Each runner spec parsed and its kind's preflight run on ``model``, before any work: a
    malformed spec is a UsageError (exit 2); a missing backend, execution provider or device a
    DependencyError (exit 4). Nothing is loaded or computed."""
    for text in specs:
        spec = parse_runner_spec(text)
        opts = spec.apply(dataclasses.replace(base or RunOptions(model), model=model, runners=[spec.text]))
        get_kind(spec.kind).preflight(opts, Reporter())

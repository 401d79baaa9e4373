"""The layerwise diagnosis of a run's comparisons, and ``--save-report``.

Tensor errors are gathered while the run streams (each iteration's arrays live only for
that iteration), but only for an iteration whose comparison covers many tensors and fails,
or when a report is asked for; :mod:`toolkit.run.diagnosis` is imported only then, so a
plain run never pays for it.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Dict, List, Mapping, Optional

if TYPE_CHECKING:  # pragma: no cover
    from toolkit.run.diagnosis import Diagnosis
from toolkit.core.errors import ToolkitError, UsageError
from toolkit.core.io.model import load_model

MIN_TENSORS = 3  # a comparison of fewer tensors gets no diagnosis on the terminal


def wanted(opts, it) -> bool:
    """Gather this iteration's tensor errors?"""
    if opts.save_report:
        return True
    return opts.diagnose and not it.passed and len(it.outputs) >= MIN_TENSORS


def collect(errors: Dict[int, dict], pair_index: int, it, outs_a: Mapping, outs_b: Mapping) -> None:
    """Add the tensor errors of iteration ``it`` (A's outputs against B's) to pair ``pair_index``."""
    from toolkit.run.diagnosis import add_iteration  # the report code loads only when asked for

    add_iteration(errors.setdefault(pair_index, {}), it, outs_a, outs_b)


def check_report_option(opts) -> None:
    """Usage errors for ``--save-report`` before any work."""
    if not opts.save_report:
        return
    from toolkit.run.report import check_report_path

    check_report_path(opts.save_report)
    _refuse_overwrite(opts)
    if len(opts.runners) + len(opts.load_outputs) < 2:
        raise UsageError(
            "--save-report needs a comparison: two runners, or a runner and --load-outputs golden values"
        )


def _refuse_overwrite(opts) -> None:
    """UsageError when --save-report names the model or another data file of the run."""
    others = [("MODEL", opts.model), ("--save-inputs", opts.save_inputs), ("--save-outputs", opts.save_outputs)]
    others += [("--load-inputs", p) for p in opts.load_inputs] + [("--load-outputs", p) for p in opts.load_outputs]
    for what, path in others:
        if path and path != "-" and os.path.abspath(path) == os.path.abspath(opts.save_report):
            raise UsageError(
                f"--save-report {opts.save_report} would overwrite {what} {path}; choose another file name"
            )


def _topology(model: str):
    """The ONNX model's topology (weights not read), or None for an engine or a model from stdin."""
    if not model or model == "-" or not os.path.isfile(model):
        return None
    from toolkit.run.diagnosis import topology_of

    try:
        return topology_of(load_model(model, load_external_data=False))
    except ToolkitError:  # a TensorRT engine or anything not ONNX: no topology
        return None


def pair_floor(opts, pair, precisions: Optional[Mapping[str, str]] = None) -> float:
    """The amplification floor of a comparison: the storage rounding step of an fp16/bf16 runner
    in it (``onnxrt:fp16`` by its name; TensorRT's ``trt-runner`` by ``--fp16``/``--bf16``; a
    runner that chose its precision itself, such as OpenVINO's default, by ``precisions``)."""
    from toolkit.run.diagnosis import storage_floor

    precisions = precisions or {}
    labels = [pair.label_a, pair.label_b]
    labels += [f"runner:{precisions[label]}" for label in list(labels) if label in precisions]
    if _has_plain_trt(labels):
        labels += [spec for spec, on in (("trt:fp16", opts.fp16), ("trt:bf16", opts.bf16)) if on]
    return storage_floor(*labels)


def _has_plain_trt(labels: List[str]) -> bool:
    """Whether one of ``labels`` is a TensorRT runner without a spec (whose precision the flags set)."""
    return any(label.startswith("trt") and ":" not in label for label in labels)


def diagnoses(
    opts, comparisons: List, errors: Dict[int, dict], precisions: Optional[Mapping[str, str]] = None
) -> List[Optional["Diagnosis"]]:
    """One :class:`~toolkit.run.diagnosis.Diagnosis` per comparison (None where no errors were gathered);
    writes ``--save-report``. ``precisions``: result set label -> the reduced precision its runner chose."""
    if not errors:
        return [None] * len(comparisons)
    from toolkit.run.diagnosis import diagnose

    topology = _topology(opts.model)
    out: List[Optional["Diagnosis"]] = []
    for i, pair in enumerate(comparisons):
        errs = errors.get(i)
        out.append(diagnose(errs, topology, pair.label_a, pair.label_b, pair_floor(opts, pair, precisions)) if errs else None)
    if opts.save_report:
        from toolkit.run.report import save_report

        save_report(opts.save_report, [d for d in out if d is not None], model=opts.model, command=opts.command)
    return out

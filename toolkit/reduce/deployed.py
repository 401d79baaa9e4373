"""The built-in comparison's verdict as deployed (``debug reduce --compare``).

Marking every tensor as an output stops a runtime's fusions across those tensors
(ONNX-Runtime's Q/DQ fusions: ``DequantizeLinear -> Softmax -> QuantizeLinear`` runs as
``QLinearSoftmax`` only unmarked), so the marked reference is not the model as the user runs
it. Here: the model's outputs as deployed (:func:`model_outputs`), how marking changes them
(:func:`marking_changes`), the full model's check as deployed (:func:`deployed_options`) and a
subgraph's check against that subgraph on the reference runner (:func:`per_subgraph_options`).

No Typer or Rich here.
"""

from __future__ import annotations

from typing import Dict, Mapping, Optional, Sequence

import numpy as np

from toolkit.core.errors import ToolkitError
from toolkit.run.feeds import infer_explained
from toolkit.run.options import RunOptions
from toolkit.run.registry import mark_all_outputs
from toolkit.run.specs import make_runner


def model_outputs(spec: str, model: str, feeds, opts):
    """Yield the outputs of ``model`` on runner ``spec`` as deployed (nothing marked), per iteration."""

    runner = make_runner(spec, model, base=RunOptions(model, external_data_dir=opts.external_data_dir), name="deployed")
    with runner:
        metas = runner.input_metadata()
        for feed in feeds.feeds(metas, runner.preferred_shapes()):
            yield dict(infer_explained(runner, feed, feeds, "--model-input-shapes"))


def marking_changes(marked: Sequence[Mapping], deployed: Sequence[Mapping]) -> str:
    """How the model's outputs differ when every tensor is marked as an output (a runtime's fusions
    stop at marked tensors: ONNX-Runtime's Q/DQ fusions, for one) from the outputs as deployed;
    '' when they are identical."""
    worst: Dict[str, float] = {}
    for ref, dep in zip(marked, deployed):
        for name, value in dep.items():
            diff = _difference(value, ref.get(name))
            if diff is not None:
                worst[name] = max(worst.get(name, 0.0), diff)
    return ", ".join(f"'{n}' by up to {v:.4g}" for n, v in list(worst.items())[:3]) + (" ..." if len(worst) > 3 else "")


def _difference(value, other) -> Optional[float]:
    """The largest absolute difference of two numeric arrays of one shape; None when they are
    equal (NaNs alike) or cannot be compared."""
    a, b = np.asarray(value), other
    if b is None or a.shape != np.shape(b) or a.dtype.kind not in "fiub":
        return None
    if np.array_equal(a, np.asarray(b), equal_nan=a.dtype.kind == "f"):
        return None
    with np.errstate(all="ignore"):
        diff = np.abs(a.astype(np.float64) - np.asarray(b).astype(np.float64))
    return float(np.nanmax(diff)) if diff.size else 0.0


def deployed_options(model: str, opts, ref, **extra):
    """The full model's verdict as deployed: the runner under test, nothing marked, its outputs
    against the reference model's outputs on the reference runner, nothing marked."""
    return RunOptions(
        model, runners=[opts.test], load_inputs=[ref.inputs_path], load_outputs=[ref.deployed_path or ref.outputs_path],
        tolerances=opts.tolerances, diagnose=False, **extra,
    )


def per_subgraph_options(model: str, opts, ref, **extra):
    """A subgraph run on both runners, the reference first (the reference of the comparison), fed
    the reference's values: where marking every tensor changes the reference's computation, the
    reference of a subgraph is that subgraph as the reference runner runs it."""
    run = RunOptions(
        model, runners=[opts.reference, opts.test], load_inputs=[ref.inputs_path],
        tolerances=opts.tolerances, diagnose=False, **extra,
    )
    return mark_all_outputs(run) if opts.tensors == "all" else run


class DeployedRun:
    """The reference model's outputs as deployed, computed in a forked child
    (:class:`toolkit.core.process.supervise.Child`) while this process computes the marked reference (the
    two sessions then cost one's wall time where a core is free).

    :meth:`result` waits for it and checks that the child fed the same inputs as the marked run
    (the values the reference computed); otherwise, or when the child failed, the outputs are
    computed here. ``feeds(loaded)``: the FeedSource of the reference (``loaded``: given values)."""

    def __init__(self, spec: str, model: str, opts, feeds):
        from toolkit.core.process.supervise import can_fork, start_child

        self.spec, self.model, self.opts, self.feeds = spec, model, opts, feeds
        self.child = start_child(_deployed_in_child, spec, model, opts, feeds) if can_fork() else None

    def result(self, golden: Sequence[Mapping]) -> list:
        """The outputs as deployed, per iteration of ``golden`` (the marked reference's values)."""
        got = self._from_child(golden) if self.child is not None else None
        if got is not None:
            return got
        return list(model_outputs(self.spec, self.model, self.feeds(golden), self.opts))

    def close(self) -> None:
        """Stop the child (the reference failed before its result was needed)."""
        if self.child is not None:
            self.child.kill()
            self.child = None

    def _from_child(self, golden: Sequence[Mapping]):
        child, self.child = self.child, None
        try:
            its = child.wait().value if child is not None else None
        except ToolkitError:  # (the run failed in the child: InferenceError...) computed here instead
            return None
        if not isinstance(its, list) or not _fed_as_golden(its, golden):
            return None  # (other inputs than the marked run's: not comparable)
        return [values for _fed, values in its]


def _fed_as_golden(its: list, golden: Sequence[Mapping]) -> bool:
    """Whether the child's iterations ``its`` ([(feed, outputs)]) were fed as the marked run's
    ``golden`` ones: as many, with the same inputs."""
    if len(its) != len(golden):
        return False
    return all(_fed_as(fed, ref) for (fed, _values), ref in zip(its, golden))


def _fed_as(fed: Mapping, ref: Mapping) -> bool:
    """Whether every input ``fed`` to the deployed run has the value ``ref`` (the marked run's) holds."""
    return all(k in ref and np.array_equal(np.asarray(v), np.asarray(ref[k])) for k, v in fed.items())


def _deployed_in_child(_phase, spec: str, model: str, opts, feeds) -> list:  # pragma: no cover - in the child
    """[(feed, outputs)] of ``model`` on ``spec`` as deployed, per iteration."""
    src = feeds(None)
    runner = make_runner(spec, model, base=RunOptions(model, external_data_dir=opts.external_data_dir), name="deployed")
    its = []
    with runner:
        for feed in src.feeds(runner.input_metadata(), runner.preferred_shapes()):
            its.append((dict(feed), dict(infer_explained(runner, feed, src, "--model-input-shapes"))))
    return its

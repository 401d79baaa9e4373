"""One tensor's error judged against its tolerances: the fields every comparison result shares.

numpy-free: the searches' results (``toolkit.reduce.evidence``) import it without numpy.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class JudgedTensor:
    """One tensor's error judged against its tolerances: what every layer reports of a comparison.

    The comparison of one output (``toolkit.core.compare.arrays.OutputComparison``), a tensor of ``run``'s layerwise
    diagnosis (``toolkit.run.diagnosis.TensorError``) and a reduce result's evidence
    (``toolkit.reduce.evidence.TensorEvidence``) are each this, with what they add."""

    name: str
    passed: bool
    max_abs: float  # the largest absolute error (NaN: not computed; inf: an overflow on one side)
    max_rel: float  # the largest relative error
    atol: float  # the tolerances it was judged by ...
    rtol: float
    stat: str  # ... with this statistic (elemwise, max, mean, median, quantile, indices)

"""``toolkit run`` as a library: options -> a typed plan -> feeds -> execute -> results.

- :mod:`toolkit.run.options`: :class:`RunOptions` (what the user asked) and :class:`Reporter`;
- :mod:`toolkit.run.registry`: the runner kinds (ONNX-Runtime, TensorRT), their options,
  preflight and factory;
- :mod:`toolkit.run.specs`: runner specs ``KIND[:OPT,...]`` and :func:`make_runner`;
- :mod:`toolkit.run.plan`: options parsed and runners preflighted before any work;
- :mod:`toolkit.run.feeds`: the inputs, one feed at a time;
- :mod:`toolkit.run.pipeline`: the pipeline; :mod:`toolkit.run.results`: what it returns.
"""

from toolkit.run.pipeline import execute
from toolkit.run.options import Reporter, RunOptions
from toolkit.run.results import ResultSet, RunReport

__all__ = ["execute", "Reporter", "RunOptions", "ResultSet", "RunReport"]

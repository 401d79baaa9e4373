"""``toolkit run`` as a library: options -> a typed plan -> feeds -> execute -> results.

- :mod:`toolkit.run.options`: :class:`RunOptions` (what the user asked) and :class:`Reporter`;
- :mod:`toolkit.run.registry`: the runner kinds (ONNX-Runtime, TensorRT, OpenVINO), their options,
  preflight and factory (OpenVINO's options and glue live in :mod:`toolkit.backends.openvino`);
- :mod:`toolkit.run.specs`: runner specs ``KIND[:OPT,...]`` and :func:`make_runner`;
- :mod:`toolkit.run.plan`: options parsed and runners preflighted before any work;
- :mod:`toolkit.run.feeds`: the inputs, one feed at a time;
- :mod:`toolkit.run.pipeline`: the pipeline; :mod:`toolkit.run.results`: what it returns;
- :mod:`toolkit.run.diagnosis`, :mod:`toolkit.run.diagnose`, :mod:`toolkit.run.report`: the layerwise
  diagnosis of a failing comparison and its JSON/HTML report;
- :mod:`toolkit.run.node_data`: per-node error data for Model Explorer (``--save-report``).
"""

from typing import Any

from toolkit.run.options import Reporter, RunOptions

__all__ = ["execute", "Reporter", "RunOptions", "ResultSet", "RunReport"]

# The pipeline and its results load on first use: the command line builds `run`'s options
# (and its --help) from RunOptions alone.
_LAZY = {"execute": "toolkit.run.pipeline", "ResultSet": "toolkit.run.results", "RunReport": "toolkit.run.results"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(name)

"""``debug reduce``: shrink a failing model to a minimal failing subgraph.

- :mod:`toolkit.reduce.graph`: the graph index and candidate subgraphs built from
  slices of the model file.
- :mod:`toolkit.reduce.strategy`: the searches (bisect, linear, the default).
- :mod:`toolkit.reduce.check`: running the check (subprocess or warm forked worker),
  pass/fail rules, the interactive prompt.
- :mod:`toolkit.reduce.replay`: replay files.
- :mod:`toolkit.reduce.session`: one run, tying them together.

Library use::

    from toolkit.reduce import FailureRule, ReduceConfig, Reducer

    outcome = Reducer(ReduceConfig(model="model.onnx", output="reduced.onnx",
                                   check=["toolkit", "inspect", "model", "polygraphy_debug.onnx"],
                                   rule=FailureRule(fail_regex=["Op: Mul"]))).run()

Nothing heavy is imported until a run starts.
"""

from __future__ import annotations

__all__ = ["FailureRule", "Outcome", "ReduceConfig", "Reducer", "Reporter"]


def __getattr__(name: str):
    if name == "FailureRule":
        from toolkit.reduce.verdict import FailureRule

        return FailureRule
    if name in ("Outcome", "ReduceConfig", "Reducer", "Reporter"):
        from toolkit.reduce import session

        return getattr(session, name)
    raise AttributeError(name)

"""``debug reduce``: shrink a failing model to a minimal failing subgraph.

- :mod:`toolkit.reduce.graph`: the graph index and candidate subgraphs built from the
  model file cut into serialized pieces (:mod:`~toolkit.reduce.pieces`); the shapes and dtypes of
  their new inputs and outputs (:mod:`~toolkit.reduce.metas`).
- :mod:`toolkit.search.strategy`: the searches (bisect, linear, the default);
  :mod:`~toolkit.reduce.guide`: the guided search of ``--compare``.
- :mod:`toolkit.reduce.check`: running the check (subprocess or warm forked worker);
  :mod:`toolkit.reduce.verdict`: what a check's result means (pass, fail, broken, timeout, the
  failure rules, the interactive prompt); :mod:`~toolkit.reduce.parallel`, :mod:`~toolkit.reduce.cluster`
  and :mod:`~toolkit.reduce.ray_task`: checks in parallel and on Ray.
- :mod:`toolkit.reduce.accuracy`: the built-in check of ``--compare``; :mod:`~toolkit.reduce.evidence`,
  :mod:`~toolkit.reduce.faults`, :mod:`~toolkit.reduce.branches`: its evidence, ``--all-faults``,
  If branches inlined.
- :mod:`toolkit.reduce.replay`: replay files; :mod:`~toolkit.reduce.owner`: one run per artifact.
- :mod:`toolkit.reduce.session`: one run, tying them together (what it is asked and answers:
  :mod:`~toolkit.reduce.config`; loading: :mod:`~toolkit.reduce.loading`; the files around the checks:
  :mod:`~toolkit.reduce.artifacts`).

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

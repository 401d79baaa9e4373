"""What a ``debug precision`` replay file's verdicts answer: the check, as the command's words.

A replay is bound to the model's content (its file's bytes and its weights, :func:`model_digest`)
and to what else decides a verdict, recorded normalized (:func:`check_options`: tolerances as
numbers, defaults filled in, files as resolved paths with a digest of their bytes), so the same
check spelled another way matches and a changed file does not. A replay recorded with another
check is refused with one sentence naming what differs (exit 3), as ``debug reduce`` refuses one
(:func:`toolkit.reduce.replay.Replay.load`).

No Typer or Rich here.
"""

from __future__ import annotations

from typing import Any, Dict, List

from toolkit.core.shared_options import ATOL_FLAG, RTOL_FLAG, STAT_FLAG
from toolkit.reduce.replay import file_digest, file_ref, model_ref, weights_digest


def check_words(c: Any) -> List[str]:
    """The runners, the pass rule and the inputs of a PrecisionConfig ``c``, as the command's words."""
    words = ["--compare", c.reference, c.candidate, *(c.tolerances.spelled() if c.tolerances is not None else [])]
    words += list_words((("--load-inputs", c.load_inputs), ("--val-range", c.val_range),
                         ("--input-shapes", c.input_shapes), ("--keep-fp32", c.keep_fp32)))
    words += value_words((("--load-outputs", c.load_outputs), ("--seed", c.seed)))
    if not c.load_inputs and c.iterations != 1:
        words += ["--iterations", str(c.iterations)]
    return words


def list_words(options) -> List[str]:
    """``FLAG VALUE...`` for each (flag, values) of ``options`` whose values are given (not empty)."""
    words: List[str] = []
    for flag, values in options:
        if values:
            words += [flag, *(str(v) for v in values)]
    return words


def value_words(options) -> List[str]:
    """``FLAG VALUE`` for each (flag, value) of ``options`` whose value is given (not None)."""
    words: List[str] = []
    for flag, value in options:
        if value is not None:
            words += [flag, str(value)]
    return words


def model_digest(model: Any, path: str) -> str:
    """A digest of the model file's bytes and of its weights as loaded (external data included)."""
    head = file_digest(path) if path and path != "-" else ""
    return head + weights_digest(list(model.graph.initializer), [])


def content_id(search: Any) -> str:
    """The digest a replay binds ``search`` (a PrecisionSearch) to: its model's (:func:`model_digest`)
    and, for a QDQ search, the reference model's weights as loaded (external data included; the
    reference's file is one of the options)."""
    ident = model_digest(search.model, search.config.model)
    ref = getattr(search, "float_model", None)
    return ident + (weights_digest(list(ref.graph.initializer), []) if ref is not None else "")


def _spec(spec: Any) -> str:
    kind, opts = spec
    words = sorted(str(k) if v is True else f"{k}={v}" for k, v in dict(opts).items())
    return kind + (":" + ",".join(words) if words else "")


def _named(value: Any, per: Dict[str, Any]) -> Any:
    """A tolerance as recorded: the value, or with per-output values a mapping (``*``: the others)."""
    return {"*": value, **per} if per else value


def check_options(search: Any) -> Dict[str, Any]:
    """What decides a verdict of ``search`` (a PrecisionSearch), normalized."""
    c, t = search.config, search.tolerances
    opts: Dict[str, Any] = {
        "--compare": [_spec(search.ref_spec), _spec(search.cand_spec)],
        ATOL_FLAG: _named(t.atol, t.per_atol), RTOL_FLAG: _named(t.rtol, t.per_rtol),
        STAT_FLAG: _named(t.check_error_stat, t.per_stat),
        "--keep-fp32": sorted(getattr(search, "user_kept", None) or c.keep_fp32),
        "--load-outputs": file_ref(c.load_outputs), "--input-shapes": sorted(c.input_shapes),
    }
    if c.load_inputs:
        opts["--load-inputs"] = [file_ref(p) for p in c.load_inputs]
    else:
        opts.update({"--iterations": c.iterations, "--seed": c.seed, "--val-range": sorted(c.val_range)})
    return opts


def qdq_options(search: Any) -> Dict[str, Any]:
    """:func:`check_options` of a QdqSearch, with the reference model, the pass rule, the pairs
    always in float and the held-out sets (how many: they decide which sets the search runs on)."""
    from toolkit.quant import metrics as qdq_metrics

    c = search.config
    opts = check_options(search)
    if search.metric is not None:  # (the metric is the pass rule: the tolerances are not used)
        for flag in (ATOL_FLAG, RTOL_FLAG, STAT_FLAG):
            del opts[flag]
    opts.update({
        "--reference-model": model_ref(c.reference_model),
        "--metric": qdq_metrics.as_dict(search.metric) if search.metric is not None else None,
        "--metric-outputs": sorted(c.metric_outputs), "--float-op-types": sorted(set(c.float_op_types)),
        "--qdq-weights": bool(c.weights), "--validate-inputs": [file_ref(p) for p in c.validate_inputs],
        "--held-out": len(getattr(search, "held_out_feeds", [])),
    })
    return opts

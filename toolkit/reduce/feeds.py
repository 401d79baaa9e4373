"""What ``debug reduce`` feeds the full model when it must run it itself: for shapes
(:func:`feed_maker`) and for the values of tensors folded into constants (:func:`fold_values_maker`).

No Typer or Rich here.
"""

from __future__ import annotations

from typing import Callable, Dict, Optional

from toolkit.core.io.datafiles import load_inputs
from toolkit.core.errors import ToolkitError
from toolkit.core.inputs import generate_inputs, parse_val_ranges
from toolkit.core.meta import dtype_to_numpy
from toolkit.core.io.model import graph_io_meta, load_model
from toolkit.reduce.loading import run_for_values


def fold_values_maker(cfg, model, shapes, warn: Callable[[str], None]):
    """names -> {name: array}: the full model's values of those tensors, computed once on
    ONNX-Runtime with the --load-inputs data (or generated inputs, with a warning: those a
    ``toolkit run`` check generates, dynamic dimensions 1 unless --model-input-shapes says otherwise)."""
    cache: Dict[str, object] = {}
    feed_of = _whole_feed(cfg, model, shapes)

    def values(names):
        missing = [n for n in names if n not in cache]
        if missing:
            if not cfg.load_inputs:
                warn(
                    "tensors of removed side branches are folded into constants computed on generated inputs "
                    f"({', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''}); a check that runs on "
                    "other data will see different values. Please ensure that you have provided a data loader "
                    "argument directly to debug reduce: give it the check's data with --load-inputs"
                )
            full = load_model(cfg.model, external_data_dir=cfg.external_data_dir)
            cache.update(run_for_values(full, missing, feed_of(), shapes, cfg.external_data_dir))
        return {n: cache[n] for n in names}

    return values


def feed_maker(cfg, model, shapes) -> Optional[Callable[[], dict]]:
    """What to feed the model when it must be run for shapes: --load-inputs data, or
    inputs generated with --seed / --val-range; None leaves it to the default."""
    if not (cfg.load_inputs or cfg.seed is not None or cfg.val_range):
        return None
    return _whole_feed(cfg, model, shapes)


def _whole_feed(cfg, model, shapes) -> Callable[[], dict]:
    """A feed of every input of ``model``, made on each call: the first input set of each
    --load-inputs file, the inputs they lack generated as ``toolkit run`` does (--seed,
    --val-range; dynamic dimensions of ``shapes``, else 1)."""
    ranges = parse_val_ranges(list(cfg.val_range)) if cfg.val_range else None  # bad specs: now

    def make() -> dict:
        ins, _ = graph_io_meta(model)
        feed: Dict[str, object] = {}
        for path in cfg.load_inputs:
            feeds = load_inputs(path)
            if feeds:
                feed.update(feeds[0])
        missing = [m for m in ins if m.name not in feed]
        if missing:
            made, _ = generate_inputs(missing, seed=cfg.seed, ranges=ranges, shapes=shapes)
            feed.update(made[0])
        return _as_declared({m.name: feed[m.name] for m in ins}, ins)

    return make


def _as_declared(out: dict, ins) -> dict:
    """Data of another dtype than the input declares, cast (data_input_shapes warned)."""
    for m in ins:
        if m.dtype:
            try:
                want = dtype_to_numpy(m.dtype)
            except ToolkitError:  # not a plain tensor type
                continue
            if getattr(out[m.name], "dtype", want) != want:
                out[m.name] = out[m.name].astype(want)
    return out

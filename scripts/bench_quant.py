"""The Q/DQ pair search beside onnxruntime's qdq_loss_debug and a greedy bypass-and-prune baseline,
on QDQ models made from real float models.

    python scripts/bench_quant.py [--cases romanizer|cnn|all] [--models DIR...] [--work DIR] [--only NAME...]
                                  [--search-sets N] [--seed S] [--refine | --variants]

For each case: the float model (found in the first of the DIRs that has it: the romanizer's GRU
encoder and decoder, or with ``--cases cnn`` PP-OCR's direction classifier ``ppocr_cls.onnx`` from
scripts/fetch_real_models.sh; its dynamic dims fixed) is quantized by
onnxruntime.quantization.quantize_static (QDQ, int8 activations and weights, MinMax) on calibration
inputs either like the test inputs ("realistic") or unlike them ("mismatched": a narrower range
than the inputs the model is then run on; for the classifier, text lines 10 times fainter than
the test lines, without noise). Then, on N search input sets (default 3) and 8 held-out
sets of the test distribution, with --reference-model and --atol between the quantized model's
error and the error with every activation pair in float (the weights' alone), their geometric mean
(--rtol 0); the classifier's top-1 case instead with ``--metric top1`` (8 text lines per set) and
``--metric-tolerance`` the largest share of lines per search set whose top class the weights alone
change (greedy below judges by the same rule: it calls the search's own check):

- ours: ``debug precision QDQ --reference-model FLOAT`` (toolkit.precision.qdq_search), most error
  first (the default) and in node order (``--order graph``): its pairs, checks, whether it is proved
  minimum, whether it holds on the held-out sets;
- qdq_loss_debug: onnxruntime's per-tensor ``qdq_err`` ranking on the search sets, where our pairs
  rank in it, and whether its top pairs (as many as ours) in float pass;
- greedy: pair by pair, the pairs ranked by the error each adds itself (``qdq_err``; toolkit's
  table equals it, docs/quantization.md), bypassed one by one in that order until the model passes,
  then each bypassed pair re-quantized in turn where the model still passes (prune). Its checks,
  pairs, and held-out verdict;
- every activation pair in float on the held-out sets: what any set of pairs can reach there.

With --refine, instead: the held-out sets used during the search (4 to validate, 4 to test; see
:func:`refine`). With --variants, instead: ours with and without ``--singles`` beside greedy most
error first and greedy in node order (see :func:`variants`). Prints one Markdown row per case. Nothing is committed (models under --work).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from typing import Callable, Dict, List

import numpy as np
import onnx
import onnx.version_converter

from toolkit.quant import qdq
from toolkit.core.io.datafiles import save_inputs
from toolkit.core.compare.tolerances import Tolerances
from toolkit.precision.qdq_search import QdqConfig, QdqSearch
from toolkit.precision.search import SetIndex


def _tokens(high: int, shape) -> Callable:
    def make(rng):
        return rng.integers(0, high, shape).astype(np.int64)
    return make


def _feeds(**makers) -> Callable:
    """A feed maker: each input from its maker (a constant array for fixed inputs)."""
    def make(rng):
        return {k: (m(rng) if callable(m) else m) for k, m in makers.items()}
    return make


MASK = np.ones((1, 12), bool)


def _normal(scale: float, shape) -> Callable:
    def make(rng):
        return np.tanh(rng.normal(0, scale, shape)).astype(np.float32)
    return make


def _decoder(scale: float) -> Callable:
    return _feeds(prefix=_tokens(160, (1, 8)), memory=_normal(scale, (1, 12, 256)), src_mask=MASK,
                  hidden=_normal(scale, (1, 2, 256)))


DECODER = {"prefix": (1, 8), "memory": (1, 12, 256), "src_mask": (1, 12), "hidden": (1, 2, 256)}
ENCODER = {"src": (1, 12), "src_mask": (1, 12)}


def _encoder(vocabulary: int) -> Callable:
    return _feeds(src=_tokens(vocabulary, (1, 12)), src_mask=MASK)


# name -> (float file, fixed shapes of the inputs, calibration feed maker, test feed maker, per-channel weights)
CASES: Dict[str, tuple] = {
    "romanizer_decoder, realistic": ("romanizer_decoder.onnx", DECODER, _decoder(1.0), _decoder(1.0), False),
    "romanizer_decoder, realistic, per-channel": ("romanizer_decoder.onnx", DECODER, _decoder(1.0), _decoder(1.0),
                                                  True),
    "romanizer_decoder, calibrated small": ("romanizer_decoder.onnx", DECODER, _decoder(0.1), _decoder(1.0), False),
    "romanizer_encoder, realistic": ("romanizer_encoder.onnx", ENCODER, _encoder(160), _encoder(160), False),
    "romanizer_encoder, calibrated on 10 tokens": ("romanizer_encoder.onnx", ENCODER, _encoder(10), _encoder(160),
                                                   False),
}


def _text_lines(batch: int, ink: float = 1.0, noise: float = 6.0) -> Callable:
    """Images like what PP-OCR's direction classifier sees: ``batch`` text lines [batch, 3, 48, 192]
    (dark strokes and bars of random widths in a band on a light, slightly tinted background with
    noise), normalized as PP-OCR does, (x/255 - 0.5)/0.5. ``ink`` scales how much darker the
    strokes are than the background (0.1: faint lines), ``noise`` the noise's standard deviation."""
    def line(rng):
        img = rng.uniform(185, 245) + rng.uniform(-8, 8, (3, 1, 1)) + rng.normal(0, noise, (3, 48, 192))
        top = int(rng.integers(6, 16))
        bottom = top + int(rng.integers(18, 30))
        x, end = int(rng.integers(2, 16)), int(rng.integers(120, 190))
        while x < end:  # one glyph: vertical strokes, and bars across it at random heights
            width = int(rng.integers(6, 16))
            dark = ink * rng.uniform(110, 190)
            for _ in range(int(rng.integers(1, 3))):
                at, w = x + int(rng.integers(0, width)), int(rng.integers(1, 4))
                img[:, top + int(rng.integers(0, 4)):bottom - int(rng.integers(0, 4)), at:at + w] -= dark
            for _ in range(int(rng.integers(0, 3))):
                y = int(rng.integers(top, bottom - 2))
                img[:, y:y + int(rng.integers(1, 3)), x:x + width] -= dark
            x += width + int(rng.integers(2, 9))
        return (np.clip(img, 0, 255) / 255 - 0.5) / 0.5

    def make(rng):
        return {"x": np.stack([line(rng) for _ in range(batch)]).astype(np.float32)}
    return make


# the CNN cases (--cases cnn): PP-OCR's direction classifier (scripts/fetch_real_models.sh), one text line
# per input set; its top-1 case judged by --metric top1 on 8 lines per set
CLS, CLS8 = {"x": (1, 3, 48, 192)}, {"x": (8, 3, 48, 192)}
CNN_CASES: Dict[str, tuple] = {
    "ppocr_cls, realistic": ("ppocr_cls.onnx", CLS, _text_lines(1), _text_lines(1), False),
    "ppocr_cls, realistic, per-channel": ("ppocr_cls.onnx", CLS, _text_lines(1), _text_lines(1), True),
    "ppocr_cls, calibrated on faint lines": ("ppocr_cls.onnx", CLS, _text_lines(1, 0.1, 1.0), _text_lines(1), False),
    "ppocr_cls, calibrated on faint lines, top1": ("ppocr_cls.onnx", CLS8, _text_lines(8, 0.1, 1.0), _text_lines(8),
                                                   False),
}
# float models given to onnxruntime's quant_pre_process before quantization, as its warning asks: the classifier's
# weights are Constant nodes, which quantize_static takes for activations (calibrated per tensor, per-channel a
# no-op); its optimization folds them into initializers and the BatchNormalizations into the Convs. Then opset 13
# (opset 11's DequantizeLinear has no axis: per-channel weights need 13)
PREPROCESSED = {"ppocr_cls.onnx"}
METRICS = {"ppocr_cls, calibrated on faint lines, top1": "top1"}  # case -> its pass rule in place of --atol
GROUPS = {"romanizer": CASES, "cnn": CNN_CASES, "all": {**CASES, **CNN_CASES}}


class _Reader:
    def __init__(self, feeds):
        self.data = iter(feeds)

    def get_next(self):
        return next(self.data, None)

    def __iter__(self):
        return self.data


def _fixed(src: str, dst: str, shapes) -> str:
    model = onnx.load(src)
    for inp in model.graph.input:
        for d, v in zip(inp.type.tensor_type.shape.dim, shapes.get(inp.name, ())):
            d.Clear()
            d.dim_value = v
    onnx.save(model, dst)
    return dst


def _find(file: str, models) -> str:
    """``file`` in the first of the ``models`` folders (one folder or several) that has it."""
    folders = [models] if isinstance(models, str) else list(models)
    for folder in folders:
        if os.path.exists(os.path.join(folder, file)):
            return os.path.join(folder, file)
    raise SystemExit(f"error: {file} is in none of {', '.join(folders)}; scripts/fetch_real_models.sh fetches it "
                     "(give its folder with --models)")


def prepare(case: str, models, work: str, search_sets: int = 3, seed: int = 0):
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static

    file, shapes, calib, test, per_channel = GROUPS["all"][case]
    tag = case.replace(", ", "_").replace(" ", "_")
    rng = np.random.default_rng(seed)
    float_path = _fixed(_find(file, models), os.path.join(work, f"{tag}_float.onnx"), shapes)
    if file in PREPROCESSED:
        from onnxruntime.quantization.shape_inference import quant_pre_process

        quant_pre_process(float_path, float_path, skip_symbolic_shape=True)  # (its symbolic inference fails here)
        onnx.save(onnx.version_converter.convert_version(onnx.load(float_path), 13), float_path)
    qdq_path = os.path.join(work, f"{tag}_qdq.onnx")
    quantize_static(float_path, qdq_path, _Reader([calib(rng) for _ in range(16)]),
                    quant_format=QuantFormat.QDQ, activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
                    per_channel=per_channel)
    search, held = os.path.join(work, f"{tag}_search.json"), os.path.join(work, f"{tag}_held.json")
    save_inputs(search, [test(rng) for _ in range(search_sets)])
    save_inputs(held, [test(rng) for _ in range(8)])
    return float_path, qdq_path, search, held


def _outputs(cfg: QdqConfig):
    """(the float model's outputs, the quantized model's, those with every activation pair in float:
    the weights' alone), on each search set."""
    s = QdqSearch(cfg)
    s._validate()
    s._load()
    s.feeds = s._feeds()
    s.ref_outs = s._reference(s.feeds)
    return (s.ref_outs, s._run_candidate(s.candidate_model([]), *s.cand_spec),
            s._run_candidate(s.candidate_model(s.universe), *s.cand_spec))


def errors(cfg: QdqConfig):
    """(the quantized model's error, the error with every activation pair in float: the weights'),
    largest absolute difference from the float model on the search sets."""
    refs, quantized, weights = _outputs(cfg)

    def error(outs):
        return max(float(np.abs(np.asarray(r[n], np.float64) - np.asarray(o[n], np.float64)).max())
                   for r, o in zip(refs, outs) for n in r)
    return error(quantized), error(weights)


def top1_disagreement(cfg: QdqConfig):
    """(the quantized model's, the weights' alone): the largest share of samples (first axis) whose top
    class (last axis) differs from the float model's, over the search sets and outputs."""
    refs, quantized, weights = _outputs(cfg)

    def share(outs):
        return max(float(np.mean(np.asarray(r[n]).argmax(-1) != np.asarray(o[n]).argmax(-1)))
                   for r, o in zip(refs, outs) for n in r)
    return share(quantized), share(weights)


def greedy(cfg: QdqConfig, order: str = "error") -> dict:
    """Bypass pairs in the order of the error each adds (most first; ``order="graph"``: in node
    order, as without a ranking) until the model passes, then re-quantize each bypassed pair (last
    bypassed first) where the model still passes."""
    t0 = time.perf_counter()
    s = QdqSearch(cfg)
    s._validate()
    s._load()
    # pair by pair (no units of tied pairs: the baseline as one would write it)
    s.members = {}
    s.universe = [p.name for p in s.pairs if p.name not in s.fixed]
    s.position = {n: k for k, n in enumerate(s.universe)}
    s.index = SetIndex(len(s.universe))
    s.feeds = s._feeds()
    s.ref_outs = s._reference(s.feeds)
    ranking = [st.pair.name for st in s.table() if st.pair.name in s.position] if order == "error" else []
    ranking += [n for n in s.universe if n not in set(ranking)]  # (pairs on graph inputs: no row, last)
    mask, order = 0, []
    for name in ranking:
        if s.passes(mask):
            break
        mask |= 1 << s.position[name]
        order.append(name)
    if not s.passes(mask):
        return {"kept": None, "checks": len(s.checks), "seconds": time.perf_counter() - t0}
    for name in reversed(order):
        trial = mask & ~(1 << s.position[name])
        if s.passes(trial):
            mask = trial
    kept = [n for n in s.universe if (mask >> s.position[n]) & 1]
    held = s.held_out_check(kept)
    return {"kept": kept, "checks": len(s.checks), "seconds": time.perf_counter() - t0,
            "holds": held.holds if held else None, "held": f"{held.passed}/{held.count}" if held else "-"}


def loss_debug(cfg: QdqConfig, float_path: str, qdq_path: str, work: str, ours: List[str]) -> dict:
    """onnxruntime's ``qdq_loss_debug`` on the search sets: every activation's ``qdq_err`` (local SQNR)
    and ``xmodel_err``, ranked by ``qdq_err`` (lowest first); where our kept pairs rank in it, and
    whether its top pairs (as many as ours) in float pass (one check, counted in no column)."""
    from onnxruntime.quantization.qdq_loss_debug import (collect_activations, compute_activation_error,
                                                         create_activation_matching,
                                                         modify_model_output_intermediate_tensors)

    t0 = time.perf_counter()
    s = QdqSearch(cfg)
    s._validate()
    s._load()
    s.feeds = s._feeds()
    acts = {}
    for tag, path in (("float", float_path), ("qdq", qdq_path)):
        marked = os.path.join(work, f"{os.path.basename(path)}.aug.onnx")
        modify_model_output_intermediate_tensors(path, marked)
        acts[tag] = collect_activations(marked, _Reader([dict(f) for f in s.feeds]))
    errors = compute_activation_error(create_activation_matching(acts["qdq"], acts["float"]))
    seconds = time.perf_counter() - t0
    ranking = sorted((k for k in errors if "qdq_err" in errors[k]), key=lambda k: errors[k]["qdq_err"])
    by_tensor = {(p.float_name or p.shown): p.name for p in s.pairs if not p.weight}
    pairs = [by_tensor[t] for t in ranking if t in by_tensor]
    rank = {name: k + 1 for k, name in enumerate(pairs)}
    s.ref_outs = s._reference(s.feeds)
    top = pairs[: len(ours)]
    passed = s._check_model(qdq.bypass(s.model, [s.by_name[n] for n in top]))[0] if top else None
    return {"ranks": sorted(rank.get(n, 0) for n in ours), "top_passes": passed, "seconds": seconds,
            "ranked": len(pairs)}


def bench_config(case: str, models: str, work: str, search_sets: int, seed: int):
    """(float model, QDQ model, search inputs, held-out inputs, the search's config, its atol, the
    quantized model's error, the weights' error) of ``case``: the atol is between what the weights
    alone cost and what the quantized model costs (their geometric mean)."""
    float_path, qdq_path, search, held = prepare(case, models, work, search_sets, seed)
    base = QdqConfig(qdq_path, reference_model=float_path, load_inputs=[search], validate_inputs=[held],
                     tolerances=Tolerances(atol=1e-2, rtol=0.0), suggest_scales=False)
    error, weights = errors(base)
    atol = f"{(max(error, 1e-12) * max(weights, 1e-12)) ** 0.5:.4g}"
    base.tolerances = Tolerances(atol=float(atol), rtol=0.0)
    if case in METRICS:  # the metric is the pass rule, its tolerance the share the weights alone cost
        quantized, alone = top1_disagreement(base)
        base = dataclasses.replace(base, tolerances=None, metric=METRICS[case], metric_tolerance=alone)
        atol = f"`--metric {METRICS[case]} --metric-tolerance {alone:g}` (quantized: {quantized:g})"
    return float_path, qdq_path, search, held, base, atol, error, weights


def bench(case: str, models: str, work: str, search_sets: int = 3, seed: int = 0) -> dict:
    float_path, qdq_path, search, held, base, atol, error, weights = bench_config(case, models, work, search_sets, seed)
    t0 = time.perf_counter()
    search_obj = QdqSearch(base)
    ours = search_obj.run()
    seconds = time.perf_counter() - t0
    row = {"case": case, "pairs": ours.candidates, "error": error, "weights_error": weights, "atol": atol, "status": ours.status,
           "ours_kept": len(ours.kept), "ours_checks": ours.checks, "ours_seconds": seconds,
           "optimality": "minimum" if ours.minimum else ("1-minimal" if ours.one_minimal else "-"),
           "ours_held": (f"{ours.held_out.passed}/{ours.held_out.count}" if ours.held_out else "-"),
           "ours_holds": ours.held_out.holds if ours.held_out else None}
    by_graph = QdqSearch(dataclasses.replace(base, order="graph")).run()
    row.update({"graph_order_kept": len(by_graph.kept), "graph_order_checks": by_graph.checks,
                "graph_order_held": f"{by_graph.held_out.passed}/{by_graph.held_out.count}" if by_graph.held_out
                else "-"})
    lossdbg = loss_debug(base, float_path, qdq_path, work, ours.kept)
    row.update({"qdq_loss_debug_ranks": lossdbg["ranks"], "qdq_loss_debug_top": lossdbg["top_passes"],
                "qdq_loss_debug_seconds": lossdbg["seconds"]})
    s = QdqSearch(base)  # the held-out sets with every activation pair in float: what any set can reach there
    s._validate()
    s._load()
    s.feeds = s._feeds()
    ceiling = s.held_out_check([p.name for p in s.pairs])
    row["all_float_held"] = f"{ceiling.passed}/{ceiling.count}" if ceiling else "-"
    g = greedy(base)
    row.update({"greedy_kept": None if g["kept"] is None else len(g["kept"]), "greedy_checks": g["checks"],
                "greedy_seconds": g["seconds"], "greedy_held": g.get("held", "-")})
    return row


def _verdicts(s: QdqSearch, kept: List[str], feeds) -> List[bool]:
    """Whether the model with ``kept`` in float passes each of ``feeds`` (one check: a run of the model)."""
    outs = s._run_here(s.candidate_model(kept), *s.cand_spec, feeds)
    return [c.passed and not c.only_a for c in s._compare_with(s._reference(feeds), outs)]


def refine(case: str, models: str, work: str, search_sets: int = 3, seed: int = 0, rounds: int = 3) -> dict:
    """Held-out sets used during the search, kept apart from the verdict: the 8 held-out sets split
    into 4 validation sets and 4 test sets. (a) the search on the search sets, its result checked
    on the test sets; (b) the search on the search and validation sets together; (c) refinement:
    the search on the search sets, its result checked on the validation sets (one counted check),
    the failing ones added to the search sets and the search run again (its failing verdicts kept:
    a set that fails on some inputs fails on more), up to ``rounds`` times. Each checked on the
    same 4 test sets."""
    from toolkit.core.io.datafiles import load_inputs

    _, _, search, held, base, atol, _, _ = bench_config(case, models, work, search_sets, seed)
    tag = case.replace(", ", "_").replace(" ", "_")
    held_sets = list(load_inputs(held))
    sets, validation, test = list(load_inputs(search)), held_sets[:4], held_sets[4:]
    test_file = os.path.join(work, f"{tag}_test.json")
    save_inputs(test_file, test)

    def searched(feeds, name, before=None):
        path = os.path.join(work, f"{tag}_{name}.json")
        save_inputs(path, feeds)
        s = QdqSearch(dataclasses.replace(base, load_inputs=[path], validate_inputs=[test_file]))
        if before is not None:  # (its failing verdicts, with their words)
            s.verdicts.update({m: v for m, v in before.verdicts.items() if not v})
            s.details.update({m: before.details[m] for m, v in before.verdicts.items() if not v})
        return s, s.run()

    def held_text(out):
        return f"{out.held_out.passed}/{out.held_out.count}" if out.held_out else "-"
    row = {"case": case, "atol": atol}
    _, plain = searched(sets, "plain")
    row["plain"] = (len(plain.kept), plain.checks, held_text(plain))
    _, more = searched(sets + validation, "more")
    row["more"] = (len(more.kept), more.checks, held_text(more))
    checks, s, out = 0, None, plain
    for r in range(rounds):
        s, out = searched(sets, f"round{r}", s)
        checks += out.checks
        if out.status not in ("found", "none-needed") or not validation:
            break
        ok = _verdicts(s, out.kept, validation)
        checks += 1
        if all(ok):
            break
        sets += [v for v, good in zip(validation, ok) if not good]
        validation = [v for v, good in zip(validation, ok) if good]
    row["refined"] = (len(out.kept), checks, held_text(out), len(sets))
    return row


def variants(case: str, models: str, work: str, search_sets: int = 3, seed: int = 0) -> str:
    """One Markdown row: ours (default), ours with ``--singles``, greedy most error first and greedy in
    node order (kept pairs, checks; ours also what is proved)."""
    base = bench_config(case, models, work, search_sets, seed)[4]

    def ours(**changes):
        o = QdqSearch(dataclasses.replace(base, **changes)).run()
        proved = "minimum" if o.minimum else ("1-minimal" if o.one_minimal else "-")
        return f"{len(o.kept)}, {o.checks}, {proved}"
    cells = [ours(), ours(singles=True)]
    for order in ("error", "graph"):
        g = greedy(base, order)
        cells.append(f"{'-' if g['kept'] is None else len(g['kept'])}, {g['checks']}")
    return f"| {case} | {seed} | " + " | ".join(cells) + " |"


def markdown(rows: List[dict]) -> str:
    head = ("| case | pairs | quantized error (weights' alone) | `--atol` | ours (default): kept, checks, proved, "
            "held out | ours (`--order graph`): kept, checks, held out | qdq_loss_debug: our pairs' ranks in its "
            "`qdq_err` order; its top pairs (as many) in float | greedy: kept, checks, held out | "
            "every pair in float: held out | seconds (ours / qdq_loss_debug / greedy) |")
    lines = [head, "|" + "---|" * 10]
    for r in rows:
        top = {True: "pass", False: "fail", None: "-"}[r["qdq_loss_debug_top"]]
        lines.append(
            f"| {r['case']} | {r['pairs']} | {r['error']:.3g} ({r['weights_error']:.3g}) | {r['atol']} | "
            f"{r['ours_kept']}, {r['ours_checks']}, {r['optimality']}, {r['ours_held']} | "
            f"{r['graph_order_kept']}, {r['graph_order_checks']}, {r['graph_order_held']} | "
            f"{', '.join(map(str, r['qdq_loss_debug_ranks']))}; {top} | "
            f"{r['greedy_kept']}, {r['greedy_checks']}, {r['greedy_held']} | {r['all_float_held']} | "
            f"{r['ours_seconds']:.1f} / {r['qdq_loss_debug_seconds']:.1f} / {r['greedy_seconds']:.1f} |")
    return "\n".join(lines)


def _refine_row(r: dict) -> str:
    cells = [", ".join(map(str, r[k])) for k in ("plain", "more", "refined")]
    return f"| {r['case']} | {r['atol']} | " + " | ".join(cells) + " |"


def _table(head: str, lines) -> None:
    """A Markdown table: ``head``, its rule, then each row as it is made."""
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for line in lines:
        print(line, flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["/work/models", "/tmp/real-models"],
                    help="folders holding the float models (each file taken from the first that has it)")
    ap.add_argument("--cases", choices=sorted(GROUPS), default="romanizer",
                    help="the romanizer's GRU cases (default), the CNN classifier's (cnn), or both (all)")
    ap.add_argument("--work", default="/tmp/bench_quant")
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--search-sets", type=int, default=3, help="input sets searched on (8 more are held out)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the calibration, search and held-out sets")
    ap.add_argument("--variants", action="store_true", help="ours with and without --singles beside greedy "
                    "most error first and in node order instead (see variants)")
    ap.add_argument("--refine", action="store_true", help="the held-out sets used during the search instead "
                    "(validation and test halves; see refine)")
    args = ap.parse_args(argv)
    os.makedirs(args.work, exist_ok=True)
    cases = [c for c in GROUPS[args.cases] if not args.only or any(o in c for o in args.only)]
    if args.refine:
        _table("| case | `--atol` | search sets alone: kept, checks, test | with the validation sets: kept, checks, "
               "test | refined: kept, checks, test, sets searched at the end |",
               (_refine_row(refine(case, args.models, args.work, args.search_sets, args.seed)) for case in cases))
        return 0
    if args.variants:
        _table("| case | seed | ours (default): kept, checks, proved | ours (`--singles`): kept, checks, proved | "
               "greedy (most error first): kept, checks | greedy (node order): kept, checks |",
               (variants(case, args.models, args.work, args.search_sets, args.seed) for case in cases))
        return 0
    rows = []
    for case in cases:
        row = bench(case, args.models, args.work, args.search_sets, args.seed)
        print(row, file=sys.stderr, flush=True)
        rows.append(row)
    print(markdown(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())

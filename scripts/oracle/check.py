"""The oracle: runs toolkit as a subprocess on every case of the corpus and re-checks each verdict with bare
ONNX-Runtime / OpenVINO and numpy (never importing toolkit); prints a table model x verdict kind -> agree,
disagree or skipped (with the reason).

    nice python scripts/oracle/check.py                      # the whole corpus (made + registry models)
    nice python scripts/oracle/check.py --sample             # the CI sample (a few made models)
    nice python scripts/oracle/check.py --models mlp qdq_conv --json results.json --keep

Exit code: 0 every verdict agrees (or is skipped), 1 some disagree. See docs/oracle.md.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional, Tuple

import numpy as np
import onnx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bare  # noqa: E402
import corpus  # noqa: E402
import nonfinite_check  # noqa: E402

TIMEOUT = int(os.environ.get("ORACLE_TIMEOUT", "180"))
ROW_RE = re.compile(r"^\s*(PASSED|FAILED) \| (.+?) \| (?:max abs (\S+?),|(.*))")
NOT_COMPARED_RE = re.compile(r"(\d+) of (\d+) element\(s\) not compared")
PAIR_RE = re.compile(r"Comparing (\S+) vs (\S+)")


def toolkit(args: List[str], cwd: str, timeout: int = TIMEOUT) -> Tuple[int, str, str, str]:
    """(exit code, stdout, stderr, the command as typed) of ``python -m toolkit ARGS`` in ``cwd``."""
    cmd = [sys.executable, "-m", "toolkit", *args]
    shown = "toolkit " + " ".join(shlex.quote(a) for a in args)
    try:
        p = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return 124, "", f"timed out after {timeout} s", shown
    return p.returncode, p.stdout, p.stderr, shown


def row(case: dict, kind: str, status: str, detail: str, command: str = "", tk: str = "", oracle: str = "") -> dict:
    return {"model": case["name"], "origin": case["origin"], "kind": kind, "status": status, "detail": detail,
            "command": command, "toolkit": tk, "oracle": oracle}


def _last_error(text: str) -> str:
    lines = [ln for ln in text.splitlines() if ln.startswith("error:") or "Traceback" in ln]
    return lines[-1][:300] if lines else text.strip().splitlines()[-1][:300] if text.strip() else ""


def _num_close(t: Optional[float], o: Optional[float]) -> bool:
    if t is None or o is None:
        return t is None and o is None
    if not (np.isfinite(t) and np.isfinite(o)):
        return (np.isinf(t) and np.isinf(o)) or (np.isnan(t) and np.isnan(o))
    return abs(t - o) <= 1e-6 + 2e-3 * max(abs(t), abs(o))


def _parse_rows(text: str) -> Dict[str, dict]:
    """{output: {'verdict', 'max_abs', 'not_compared'}} from run's per-output comparison lines."""
    out: Dict[str, dict] = {}
    for line in text.splitlines():
        m = ROW_RE.match(line)
        if not m or " vs " in m.group(2) or m.group(2).startswith("Command"):
            continue
        nc = NOT_COMPARED_RE.search(line)
        val = m.group(3)
        out[m.group(2)] = {"verdict": m.group(1), "max_abs": float(val) if val not in (None, "") else None,
                           "not_compared": int(nc.group(1)) if nc else 0, "line": line.strip()}
    return out


def oracle_verdict(results: Dict[str, dict]) -> Tuple[bool, str]:
    """Pass only with evidence: every output passes, an output whose every element was skipped has not passed,
    and at least one element was compared in all."""
    if not results:
        return False, "no output compared"
    total = sum(r["compared"] for r in results.values())
    bad = [k for k, r in results.items() if not r["passed"] and not (r["compared"] == 0 and not r.get("skipped")
                                                                     and r.get("why") == "no element compared")]
    if bad:
        return False, "mismatched: " + ", ".join(f"{k} ({_why(results[k])})" for k in bad)
    if total == 0:
        return False, "no element compared in any output"
    return True, f"{total} element(s) compared"


def _why(r: dict) -> str:
    if r.get("why"):
        return r["why"] + (f", {r.get('skipped')} skipped" if r.get("skipped") else "")
    return f"max abs {r['max_abs']:.5g}, {r['mismatches']} of {r['compared']} out of tolerance"


def _runner_label(spec: str) -> str:
    return spec


# ---------------------------------------------------------------------------------------------- run


def _nested(model: onnx.ModelProto) -> bool:
    return any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
               for n in model.graph.node for a in n.attribute)


UNSURE = "the oracle's fp16 emulation does not round inside If/Loop bodies: no verdict of its own"


def check_run(case: dict, chk: dict, work: str) -> dict:
    kind = "run " + " vs ".join(chk["runners"]) + (" (mark all)" if chk.get("mark") else "")
    inp = os.path.join(work, "in.npz")
    saved = os.path.join(work, "saved.json")
    args = ["run", case["path"], "--runners", *chk["runners"], "--load-inputs", inp, "--save-inputs", saved,
            "--atol", str(chk["atol"]), "--rtol", str(chk["rtol"])] + (["--onnx-outputs", "mark", "all"]
                                                                      if chk.get("mark") else [])
    rc, so, se, cmd = toolkit(args, work)
    if rc not in (0, 1):
        return row(case, kind, "skipped", f"toolkit exit {rc}: {_last_error(se)}", cmd, f"exit {rc}")
    feeds = bare.read_inputs(saved)[0] if os.path.exists(saved) else case["feeds"]
    model = onnx.load(case["path"])
    if _nested(model) and any("fp16" in r_ for r_ in chk["runners"]):
        return row(case, kind, "skipped", UNSURE, cmd, f"exit {rc}")
    try:
        a = bare.run_spec(chk["runners"][0], case["path"], feeds, mark=bool(chk.get("mark")))
        b = bare.run_spec(chk["runners"][1], case["path"], feeds, mark=bool(chk.get("mark")))
    except Exception as exc:  # noqa: BLE001 -- a runtime that refuses the model: nothing to re-check
        return row(case, kind, "skipped", f"bare runtime failed: {str(exc).splitlines()[0][:200]}", cmd, f"exit {rc}")
    skips, _ = bare.cast_skips(model, feeds, b.keys())
    res = bare.compare_sets(a, b, chk["atol"], chk["rtol"], skips)
    ok, why = oracle_verdict(res)
    tk_rows = _parse_rows(se + so)
    tk_text = f"exit {rc}, " + "; ".join(f"{k}: {v['verdict']} max abs {v['max_abs']}"
                                          + (f", {v['not_compared']} not compared" if v["not_compared"] else "")
                                          for k, v in tk_rows.items())
    or_text = ("PASS" if ok else "FAIL") + f" ({why}); " + "; ".join(
        f"{k}: max abs {r['max_abs']}" + (f", {r.get('skipped')} skipped" if r.get("skipped") else "")
        for k, r in res.items())
    problems = []
    if (rc == 0) != ok:
        problems.append(f"toolkit {'PASSED' if rc == 0 else 'FAILED'}, oracle {'passes' if ok else 'fails'}")
    other = [k for k, v in case["feeds"].items() if k in feeds and not np.array_equal(np.asarray(feeds[k]), v)]
    if other:
        problems.append(f"the inputs toolkit saved differ from those it was given: {other}")
    if rc == 0 and not tk_rows:
        problems.append("PASSED with no comparison row")
    for k, r in res.items():
        t = tk_rows.get(k)
        if t is None:
            if rc in (0, 1) and r["compared"]:
                problems.append(f"{k}: no toolkit row")
            continue
        if r["max_abs"] is not None and t["max_abs"] is not None and not _num_close(t["max_abs"], r["max_abs"]):
            problems.append(f"{k}: max abs toolkit {t['max_abs']} vs oracle {r['max_abs']:.6g}")
        # toolkit looks for undefined elements only in an output that fails without skipping them
        raw_ok = bare.compare(a[k], b[k], chk["atol"], chk["rtol"])["passed"] if k in skips else True
        expected = 0 if raw_ok else r.get("skipped", 0)
        if t["not_compared"] != expected:
            problems.append(f"{k}: toolkit skipped {t['not_compared']} element(s), oracle {expected}")
    status = "disagree" if problems else "agree"
    return row(case, kind, status, "; ".join(problems) or why, cmd, tk_text, or_text)


def check_golden(case: dict, chk: dict, work: str) -> dict:
    """run RUNNER --load-outputs golden.json, the golden file holding the graph outputs of bare fp32 ORT only: the
    reference holds no Cast input, so nothing may be skipped."""
    extra = ["--onnx-outputs", *chk["onnx_outputs"]] if chk.get("onnx_outputs") else []
    kind = f"run {chk['runner']} vs golden file" + (f" (--onnx-outputs {' '.join(chk['onnx_outputs'])})" if extra else "")
    inp = os.path.join(work, "in.npz")
    gold = os.path.join(work, "golden.json")
    ref = bare.ort_run(case["path"], case["feeds"])
    bare.write_outputs(gold, "onnxrt-runner", [ref])
    args = ["run", case["path"], "--runners", chk["runner"], "--load-inputs", inp, "--load-outputs", gold,
            "--atol", str(chk["atol"]), "--rtol", str(chk["rtol"]), *extra]
    rc, so, se, cmd = toolkit(args, work)
    if rc not in (0, 1):
        return row(case, kind, "skipped", f"toolkit exit {rc}: {_last_error(se)}", cmd, f"exit {rc}")
    if "fp16" in chk["runner"] and _nested(onnx.load(case["path"])):
        return row(case, kind, "skipped", UNSURE, cmd, f"exit {rc}")
    test = bare.run_spec(chk["runner"], case["path"], case["feeds"])
    res = bare.compare_sets(test, ref, chk["atol"], chk["rtol"])
    ok, why = oracle_verdict(res)
    tk_rows = _parse_rows(se + so)
    tk_text = f"exit {rc}, " + "; ".join(v["line"][:160] for v in tk_rows.values())
    problems = []
    if (rc == 0) != ok:
        problems.append(f"toolkit {'PASSED' if rc == 0 else 'FAILED'}, oracle {'passes' if ok else 'fails'} ({why})")
    for k, t in tk_rows.items():
        if t["not_compared"]:
            problems.append(f"{k}: toolkit skipped {t['not_compared']} element(s) that the golden file cannot "
                            "decide (it holds no Cast input)")
    return row(case, kind, "disagree" if problems else "agree", "; ".join(problems) or why, cmd, tk_text,
               ("PASS " if ok else "FAIL ") + why)


# ---------------------------------------------------------------------------------------------- reduce


def _full_verdict(model: onnx.ModelProto, path: str, ref: str, test: str, feeds, atol, rtol):
    a = bare.run_spec(test, path, feeds)
    b = bare.run_spec(ref, path, feeds)
    skips, _ = bare.cast_skips(model, feeds, b.keys())
    res = bare.compare_sets(a, b, atol, rtol, skips)
    ok, why = oracle_verdict(res)
    return ok, why, [k for k, r in res.items() if not r["passed"]]


def _sub_verdict(sub: onnx.ModelProto, test: str, values, atol, rtol) -> Tuple[Optional[bool], str, List[str]]:
    """A subgraph on the runner under test, fed the reference's values, its outputs compared with them.
    (None, why, []) when the runtime refuses it."""
    inits = {i.name for i in sub.graph.initializer}
    missing = [i.name for i in sub.graph.input if i.name not in values and i.name not in inits]
    if missing:
        return None, f"inputs that are no tensors of the full model's top graph: {missing[:3]}", ["<missing>"]
    feeds = {i.name: values[i.name] for i in sub.graph.input if i.name in values}
    try:
        got = bare.run_spec(test, sub, feeds)
    except Exception as exc:  # noqa: BLE001
        return None, f"runtime refused: {str(exc).splitlines()[0][:120]}", []
    ref = {o.name: values[o.name] for o in sub.graph.output if o.name in values}
    skips = {}
    for out, (src, to) in bare.float_to_int_casts(sub).items():
        if out in ref and src in values and values[src].dtype.kind == "f":
            skips[out] = bare.undefined_mask(values[src], to)
    res = bare.compare_sets(got, ref, atol, rtol, skips)
    ok, why = oracle_verdict(res)
    return ok, why, [k for k, r in res.items() if not r["passed"]]


def check_reduce_compare(case: dict, chk: dict, work: str) -> dict:
    kind = f"reduce --compare {chk['ref']} {chk['test']}"
    inp = os.path.join(work, "in.npz")
    out = os.path.join(work, "reduced.onnx")
    args = ["debug", "reduce", case["path"], "-o", out, "--compare", chk["ref"], chk["test"], "--load-inputs", inp,
            "--atol", str(chk["atol"]), "--rtol", str(chk["rtol"]), "--json"]
    rc, so, se, cmd = toolkit(args, work)
    try:
        summary = json.loads(so)
    except ValueError:
        return row(case, kind, "skipped", f"toolkit exit {rc}, no JSON: {_last_error(se)}", cmd, f"exit {rc}")
    model = onnx.load(case["path"])
    feeds = case["feeds"]
    if "fp16" in chk["test"] and _nested(model):
        return row(case, kind, "skipped", UNSURE, cmd, f"exit {rc}, status {summary.get('status')}")
    full_ok, full_why, full_bad = _full_verdict(model, case["path"], chk["ref"], chk["test"], feeds, chk["atol"],
                                                chk["rtol"])
    status = summary.get("status")
    tk_text = f"exit {rc}, status {status}, nodes {summary.get('nodes_after')}: {summary.get('result_nodes')}"
    if status == "passed":
        if full_ok:
            return row(case, kind, "agree", "the full model passes deployed", cmd, tk_text, "PASS " + full_why)
        return row(case, kind, "disagree", f"toolkit: the full model passes; deployed it fails ({full_why})", cmd,
                   tk_text, "FAIL " + full_why)
    if status != "reduced" or not os.path.exists(out):
        return row(case, kind, "skipped", f"status {status}, exit {rc}: {_last_error(se)}", cmd, tk_text)
    if full_ok:
        note = f"toolkit reduced a model that passes deployed ({full_why})"
        return row(case, kind, "disagree", note, cmd, tk_text, "PASS " + full_why)
    return _judge_reduced(case, chk, model, feeds, out, full_bad, cmd, tk_text, full_why)


def _judge_reduced(case, chk, model, feeds, out, full_bad, cmd, tk_text, full_why) -> dict:
    kind = f"reduce --compare {chk['ref']} {chk['test']}"
    values = bare.reference_values(model, feeds)
    red = onnx.load(out)
    ok, why, bad = _sub_verdict(red, chk["test"], values, chk["atol"], chk["rtol"])
    if ok is None and bad == ["<missing>"]:
        return row(case, kind, "skipped", f"the reduced model has {why}", cmd, tk_text, f"full FAIL ({full_why})")
    if ok is None or ok:
        return row(case, kind, "disagree", f"the reduced model does not fail fed the reference's values ({why})",
                   cmd, tk_text, f"full FAIL ({full_why}); reduced {'PASS' if ok else why}")
    reach = bare.ancestors(model, full_bad)
    if not set(bad) & reach:
        return row(case, kind, "disagree", f"the reduced model fails on {bad}, which feed none of the full model's "
                   f"mismatching outputs {full_bad}", cmd, tk_text, f"reduced FAIL ({why})")
    still = []
    for idx, end in bare.boundary_nodes(red):
        sub = bare.drop_node(red, idx, end, values)
        if sub is None:
            continue
        s_ok, s_why, s_bad = _sub_verdict(sub, chk["test"], values, chk["atol"], chk["rtol"])
        if s_ok is False and set(s_bad) & reach:
            still.append(f"{red.graph.node[idx].name or red.graph.node[idx].op_type} ({end}): {s_why}")
    or_text = f"full FAIL ({full_why}); reduced FAIL ({why}); {len(red.graph.node)} node(s)"
    if still:
        return row(case, kind, "disagree", "not 1-minimal: dropping " + "; ".join(still) + " still fails", cmd,
                   tk_text, or_text)
    return row(case, kind, "agree", f"fails the same way, 1-minimal ({len(red.graph.node)} node(s))", cmd, tk_text,
               or_text)


CHECK_MODES = {"nonfinite": ("nonfinite", ""), "crash-without-log": ("crash-without", "Log"),
               "has-abs": ("has-op", "Abs")}


def _check_argv(name: str) -> List[str]:
    kind, op = CHECK_MODES[name]
    return [] if kind == "nonfinite" else [f"--{kind}", op]


def check_reduce_check(case: dict, chk: dict, work: str) -> dict:
    """debug reduce --check with a bare check of the oracle's own; the reduced model must fail that check the way
    the full model does (exit code and error class: a crash is another failure) and each boundary node dropped must
    not. With 'replay_from', a first reduce with another check writes the replay the second one loads."""
    name = chk["check"]
    kind = f"reduce --check {name}" + (f" (replay of {chk['replay_from']})" if chk.get("replay_from") else "")
    out = os.path.join(work, "reduced.onnx")
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "nonfinite_check.py")
    replay = os.path.join(work, "replay.json")
    if chk.get("replay_from"):
        first = ["debug", "reduce", case["path"], "-o", os.path.join(work, "first.onnx"), "--save-debug-replay",
                 replay, "--check", sys.executable, script, *_check_argv(chk["replay_from"]), "polygraphy_debug.onnx"]
        toolkit(first, work)
    args = ["debug", "reduce", case["path"], "-o", out, "--json"]
    args += ["--load-debug-replay", replay] if chk.get("replay_from") else []
    args += ["--check", sys.executable, script, *_check_argv(name), "polygraphy_debug.onnx"]
    rc, so, se, cmd = toolkit(args, work)
    mode = CHECK_MODES[name]
    full = _outcome(case["path"], mode)
    if rc == 3 and "fails on every subgraph" in se:
        return _every_subgraph(case, kind, mode, full, cmd, se)
    try:
        summary = json.loads(so)
    except ValueError:
        return row(case, kind, "skipped", f"toolkit exit {rc}, no JSON: {_last_error(se)}", cmd, f"exit {rc}")
    status = summary.get("status")
    tk_text = f"exit {rc}, status {status}, nodes {summary.get('nodes_after')}: {summary.get('result_nodes')}"
    if status == "passed":
        st = "agree" if full == (0, None) else "disagree"
        return row(case, kind, st, f"bare check on the full model: {full}", cmd, tk_text, f"full {full}")
    if status != "reduced" or not os.path.exists(out):
        return row(case, kind, "skipped", f"status {status}: {_last_error(se)}", cmd, tk_text)
    red = onnx.load(out)
    got = _outcome(red, mode)
    if got != full:
        return row(case, kind, "disagree", f"the reduced model's check gives {got} (exit code, error class), the "
                   f"full model's {full}", cmd, tk_text, f"full {full}, reduced {got}")
    values = bare.reference_values(onnx.load(case["path"]), nonfinite_feeds(case["path"]))
    still = []
    for idx, end in bare.boundary_nodes(red):
        sub = bare.drop_node(red, idx, end, values)
        if sub is not None and _outcome(sub, mode) == full:
            still.append(f"{red.graph.node[idx].name} ({end})")
    or_text = f"full {full}, reduced {got}, {len(red.graph.node)} node(s)"
    if still:
        return row(case, kind, "disagree", "not 1-minimal: dropping " + ", ".join(still) + " still fails", cmd,
                   tk_text, or_text)
    return row(case, kind, "agree", f"fails the same way, 1-minimal ({len(red.graph.node)} node(s))", cmd, tk_text,
               or_text)


def _every_subgraph(case: dict, kind: str, mode, full, cmd: str, se: str) -> dict:
    """toolkit's claim that the check fails (the same way) on every subgraph, down to single nodes: each node alone
    is checked; one that passes or fails otherwise refutes it."""
    model = onnx.load(case["path"])
    values = bare.reference_values(model, nonfinite_feeds(case["path"]))
    other = []
    for i, node in enumerate(model.graph.node):
        got = _outcome(bare.single_node(model, i, values), mode)
        if got != full:
            other.append(f"{node.name} alone gives {got}")
    tk_text = f"exit 3, {_last_error(se)}"
    if other:
        return row(case, kind, "disagree", f"toolkit: the check fails on every subgraph; the full model gives {full}, "
                   + "; ".join(other[:3]) + (" ..." if len(other) > 3 else ""), cmd, tk_text, f"full {full}")
    return row(case, kind, "agree", f"every node alone fails as the full model does {full}", cmd, tk_text)


def _outcome(model, mode) -> Tuple[int, Optional[str]]:
    """(exit code, error class or None) of the bare check on ``model``, in this process."""
    import contextlib
    import io

    with contextlib.redirect_stdout(io.StringIO()):
        try:
            return nonfinite_check.check(model, mode), None
        except Exception as exc:  # noqa: BLE001 -- a crash: exit 1 with a traceback, its class recorded
            return 1, type(exc).__name__


def nonfinite_feeds(path: str) -> dict:
    import onnxruntime as ort

    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    return {i.name: rng.uniform(0, 1, [d if isinstance(d, int) else 1 for d in i.shape]).astype(np.float32)
            for i in sess.get_inputs()}


# ---------------------------------------------------------------------------------------------- precision, convert


def check_precision(case: dict, chk: dict, work: str) -> dict:
    kind = "debug precision"
    inp = os.path.join(work, "in.npz")
    out = os.path.join(work, "mixed.onnx")
    args = ["debug", "precision", case["path"], "-o", out, "--load-inputs", inp, "--atol", str(chk["atol"]),
            "--rtol", str(chk["rtol"]), "--json"]
    rc, so, se, cmd = toolkit(args, work)
    try:
        summary = json.loads(so)
    except ValueError:
        return row(case, kind, "skipped", f"toolkit exit {rc}, no JSON: {_last_error(se)}", cmd, f"exit {rc}")
    status = summary.get("status")
    tk_text = f"exit {rc}, status {status}, keep_fp32 {summary.get('keep_fp32')}, {summary.get('error_result')}"
    model = onnx.load(case["path"])
    ref = bare.ort_run(case["path"], case["feeds"])
    skips, _ = bare.cast_skips(model, case["feeds"], ref.keys())
    if rc == 1 and status == "fails-in-fp32":
        res = bare.compare_sets(bare.ort_run(case["path"], case["feeds"]), ref, chk["atol"], chk["rtol"], skips)
        ok, why = oracle_verdict(res)
        return row(case, kind, "disagree" if ok else "agree",
                   "toolkit: fails even with every node in fp32; with every node in fp32 the model is the original, "
                   f"which {'passes' if ok else 'fails'} ({why})", cmd, tk_text, ("PASS " if ok else "FAIL ") + why)
    if rc != 0 or not os.path.exists(out):
        return row(case, kind, "skipped", f"exit {rc}, status {status}: {_last_error(se)}", cmd, tk_text)
    try:
        got = bare.ort_run(out, case["feeds"])
    except Exception as exc:  # noqa: BLE001
        return row(case, kind, "disagree", f"the written model does not run in bare ORT: {str(exc)[:200]}", cmd, tk_text)
    res = bare.compare_sets(got, ref, chk["atol"], chk["rtol"], skips)
    ok, why = oracle_verdict(res)
    st = "agree" if ok else "disagree"
    detail = f"the written model {'passes' if ok else 'fails'} in bare ORT at atol {chk['atol']} rtol {chk['rtol']}: {why}"
    rows = [row(case, kind, st, detail, cmd, tk_text, ("PASS " if ok else "FAIL ") + why)]
    rows.append(_precision_emulated(case, chk, out, skips, cmd, tk_text))
    return rows


def _precision_emulated(case: dict, chk: dict, out: str, skips, cmd: str, tk_text: str) -> dict:
    """The written model with its fp16 tensors rounded where made (what the search's emulation claims passes)
    must pass at the tolerances given: a pass by 'fp16 rounding' above them is no pass."""
    kind = "debug precision emulated"
    try:
        emu = bare.emulate_mixed(onnx.load(out))
    except ValueError as exc:
        return row(case, kind, "skipped", str(exc), cmd, tk_text)
    ref = bare.ort_run(case["path"], case["feeds"], opt="disable")
    got = bare.ort_run(emu, case["feeds"], opt="disable", outputs=list(ref))
    res = bare.compare_sets(got, ref, chk["atol"], chk["rtol"], skips)
    ok, why = oracle_verdict(res)
    detail = (f"the written model emulated {'passes' if ok else 'fails'} at atol {chk['atol']} rtol {chk['rtol']}: "
              f"{why}")
    return row(case, kind, "agree" if ok else "disagree", detail, cmd, tk_text, ("PASS " if ok else "FAIL ") + why)


def check_precision_qdq(case: dict, chk: dict, work: str) -> dict:
    """debug precision on a QDQ model with --reference-model FLOAT: on exit 0 the written model passes against the
    float model (bare ORT); 'fails even with every pair in float' is checked on the float model itself (every pair
    taken back to float exactly is the float model)."""
    kind = "debug precision (QDQ pairs)"
    inp = os.path.join(work, "in.npz")
    out = os.path.join(work, "float_pairs.onnx")
    ref_model = case["path"][:-len(".onnx")] + ".float.onnx"
    args = ["debug", "precision", case["path"], "-o", out, "--reference-model", ref_model, "--load-inputs", inp,
            "--atol", str(chk["atol"]), "--rtol", str(chk["rtol"]), "--json"]
    rc, so, se, cmd = toolkit(args, work)
    try:
        summary = json.loads(so)
    except ValueError:
        return row(case, kind, "skipped", f"toolkit exit {rc}, no JSON: {_last_error(se)}", cmd, f"exit {rc}")
    status = summary.get("status")
    tk_text = f"exit {rc}, status {status}: {_last_error(se)[:200]}"
    ref = bare.ort_run(ref_model, case["feeds"])
    if rc == 0 and os.path.exists(out):
        res = bare.compare_sets(bare.ort_run(out, case["feeds"]), ref, chk["atol"], chk["rtol"])
        ok, why = oracle_verdict(res)
        return row(case, kind, "agree" if ok else "disagree", f"the written model {'passes' if ok else 'fails'} "
                   f"against the float model: {why}", cmd, tk_text, ("PASS " if ok else "FAIL ") + why)
    if rc == 1:
        act = bare.activations_in_float(onnx.load(case["path"]))
        res = bare.compare_sets(bare.ort_run(act, case["feeds"]), ref, chk["atol"], chk["rtol"])
        ok, why = oracle_verdict(res)
        return row(case, kind, "disagree" if ok else "agree",
                   f"toolkit: fails even with every pair in float (status {status}); every activation pair taken back "
                   f"to float exactly (weights still quantized) {'passes' if ok else 'fails'}: {why}", cmd, tk_text,
                   ("PASS " if ok else "FAIL ") + why)
    return row(case, kind, "skipped", f"exit {rc}, status {status}", cmd, tk_text)


def check_convert(case: dict, chk: dict, work: str) -> dict:
    kind = "convert --fp-to-fp16 error"
    inp = os.path.join(work, "in.npz")
    out = os.path.join(work, "converted.onnx")
    args = ["convert", case["path"], "-o", out, "--fp-to-fp16", "--load-inputs", inp, "--json"]
    rc, so, se, cmd = toolkit(args, work)
    try:
        info = json.loads(so)
    except ValueError:
        return row(case, kind, "skipped", f"toolkit exit {rc}, no JSON: {_last_error(se)}", cmd, f"exit {rc}")
    val = info.get("validation") or {}
    measured = (val.get("measured") or {}).get("max_error")
    figure = "measured"
    if measured is None:
        measured, figure = val.get("max_error"), "max_error"
    if measured is None or not os.path.exists(out):
        return row(case, kind, "skipped", f"exit {rc}: no error reported", cmd, f"exit {rc}")
    ref = bare.ort_run(case["path"], case["feeds"])
    try:
        got = bare.ort_run(out, case["feeds"])
    except Exception as exc:  # noqa: BLE001
        return row(case, kind, "disagree", f"the converted model does not run in bare ORT: {str(exc)[:200]}", cmd,
                   f"exit {rc}, {figure} {measured}")
    errs = []
    for k, b in ref.items():
        if k in got and b.dtype.kind == "f":
            d, _ = bare.errors(np.asarray(got[k]), b)
            errs.append(float(d.max()) if d.size else 0.0)
    mine = max(errs) if errs else 0.0
    tk_text = f"exit {rc}, {figure} max error {measured:.6g} (emulated {val.get('max_error')})"
    close = _factor_close(float(measured), mine)
    st = "agree" if close else "disagree"
    detail = (f"reported {measured:.6g} vs bare ORT (default session) {mine:.6g}" +
              ("" if close else ": not within a factor of 2"))
    rows = [row(case, kind, st, detail, cmd, tk_text, f"max error {mine:.6g}")]
    if figure == "measured" and val.get("max_error") is not None:
        rows.append(_convert_emulated(case, out, float(val["max_error"]), cmd, tk_text))
    return rows


def _convert_emulated(case: dict, out: str, reported: float, cmd: str, tk_text: str) -> dict:
    """convert's emulated figure against the written model emulated (its fp16 tensors rounded where made)."""
    kind = "convert emulated error"
    try:
        emu = bare.emulate_mixed(onnx.load(out))
    except ValueError as exc:
        return row(case, kind, "skipped", str(exc), cmd, tk_text)
    ref = bare.ort_run(case["path"], case["feeds"], opt="disable")
    got = bare.ort_run(emu, case["feeds"], opt="disable", outputs=list(ref))
    errs = [float(bare.errors(np.asarray(got[k]), b)[0].max()) for k, b in ref.items()
            if b.dtype.kind == "f" and b.size]
    mine = max(errs) if errs else 0.0
    close = _factor_close(reported, mine)
    detail = (f"reported emulated {reported:.6g} vs the written model emulated {mine:.6g}"
              + ("" if close else ": not within a factor of 2 (the emulation is not the written model)"))
    return row(case, kind, "agree" if close else "disagree", detail, cmd, tk_text, f"max error {mine:.6g}")


def _factor_close(a: float, b: float, factor: float = 2.0, floor: float = 1e-6) -> bool:
    if not (np.isfinite(a) and np.isfinite(b)):
        return np.isinf(a) and np.isinf(b)
    if max(a, b) <= floor:
        return True
    return min(a, b) * factor >= max(a, b)


CHECKS = {"run": check_run, "run-golden": check_golden, "reduce-compare": check_reduce_compare,
          "reduce-check": check_reduce_check, "precision": check_precision, "convert": check_convert,
          "precision-qdq": check_precision_qdq}


def check_case(case: dict, root: str, kinds: Optional[List[str]] = None, only: Optional[List[int]] = None) -> List[dict]:
    """Every check of one case (``kinds``: those kinds only; ``only``: those indices only), one row each."""
    rows = []
    for n, chk in enumerate(case["checks"]):
        if (kinds and chk["kind"] not in kinds) or (only is not None and n not in only):
            continue
        work = os.path.join(root, f"{case['name']}.{n}")
        os.makedirs(work, exist_ok=True)
        bare.write_npz(os.path.join(work, "in.npz"), case["feeds"])
        t0 = time.monotonic()
        try:
            got = CHECKS[chk["kind"]](case, chk, work)
        except Exception as exc:  # noqa: BLE001 -- the oracle's own failure: shown, never an agreement
            got = row(case, chk["kind"], "skipped", f"oracle error: {type(exc).__name__}: {str(exc)[:200]}")
        for r in got if isinstance(got, list) else [got]:
            r["seconds"] = round(time.monotonic() - t0, 2)
            rows.append(r)
            print(f"[{r['status']:>8}] {r['model']:<18} {r['kind']:<44} {r['seconds']:>6.1f}s  {r['detail'][:150]}",
                  file=sys.stderr, flush=True)
    return rows


def table(rows: List[dict]) -> str:
    kinds = sorted({_kind_group(r["kind"]) for r in rows})
    lines = ["| model | " + " | ".join(kinds) + " |", "|---|" + "---|" * len(kinds)]
    for model in dict.fromkeys(r["model"] for r in rows):
        cells = []
        for k in kinds:
            mine = [r for r in rows if r["model"] == model and _kind_group(r["kind"]) == k]
            cells.append(", ".join(_cell(r) for r in mine) if mine else "")
        lines.append(f"| {model} | " + " | ".join(cells) + " |")
    counts = {s: sum(r["status"] == s for r in rows) for s in ("agree", "disagree", "skipped")}
    lines.append("")
    lines.append("totals: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    for k in kinds:
        sub = [r for r in rows if _kind_group(r["kind"]) == k]
        lines.append(f"  {k}: " + ", ".join(f"{s} {sum(r['status'] == s for r in sub)}"
                                             for s in ("agree", "disagree", "skipped")))
    return "\n".join(lines)


def _kind_group(kind: str) -> str:
    kind = {"reduce-compare": "reduce --compare", "reduce-check": "reduce --check", "precision": "debug precision",
            "precision-qdq": "debug precision", "run-golden": "run golden"}.get(kind, kind)
    for g in ("reduce --check", "reduce --compare", "run", "debug precision emulated", "debug precision",
              "convert emulated", "convert"):
        if kind.startswith(g):
            return "golden" if "golden" in kind else g
    return kind


def _cell(r: dict) -> str:
    return {"agree": "agree", "disagree": "DISAGREE", "skipped": "skipped"}[r["status"]]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sample", action="store_true", help="only the CI sample of made models")
    ap.add_argument("--models", nargs="+", help="these cases only (names in corpus.py)")
    ap.add_argument("--kinds", nargs="+", help="these verdict kinds only: " + " ".join(CHECKS))
    ap.add_argument("--work", help="folder for the models and toolkit's files (default a temporary one)")
    ap.add_argument("--json", help="write every row (commands, both sides' answers) to this file")
    ap.add_argument("--keep", action="store_true", help="keep the work folder")
    a = ap.parse_args(argv)
    root = a.work or tempfile.mkdtemp(prefix="oracle-")
    names = list(corpus.SAMPLE) if a.sample else a.models
    rows: List[dict] = []
    try:
        for case in corpus.corpus(os.path.join(root, "models"), names):
            rows += check_case(case, root, a.kinds, corpus.SAMPLE.get(case["name"]) if a.sample else None)
    finally:
        if not a.keep and not a.work:
            shutil.rmtree(root, ignore_errors=True)
    print(table(rows))
    dis = [r for r in rows if r["status"] == "disagree"]
    for r in dis:
        print(f"\nDISAGREE {r['model']} [{r['kind']}]: {r['detail']}\n  command: {r['command']}\n"
              f"  toolkit: {r['toolkit']}\n  oracle:  {r['oracle']}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 1 if dis else 0


if __name__ == "__main__":
    sys.exit(main())

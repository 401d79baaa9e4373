"""``toolkit debug precision``: the fewest nodes to keep in fp32 so the fp16 model passes.

Thin layer: options -> :class:`toolkit.precision.search.PrecisionConfig` -> search -> render.
Logs (one line per check, a summary) go to stderr; the node names found go to stdout, one
per line (or a JSON object with ``--json``), ready for ``convert --keep-fp32``.
"""

# (no `from __future__ import annotations`: Typer would have to eval every annotation string)

from typing import Any, Dict, Optional

import typer

from toolkit.cli.options import (
    Annotated, AtolOpt, CheckErrorStatOpt, ExternalDataDirOpt, InputShapesOpt, ListOpt, ModelArg, RtolOpt, SeedOpt,
    command_kwargs, from_params, option,
)
from toolkit.cli.output import log

_HELP = """Find a minimal set of nodes to keep in fp32 so that the fp16 model passes the comparison.

The reference runner runs the float32 model once; each check runs the model with a set of
nodes kept in fp32 (the rest fp16) and compares. While a check shows an overflow (a tensor
infinite where the reference is finite), the node producing the first one is kept in fp32;
then debug reduce's engine checks that moving any node found back to fp16 fails (1-minimal).
When no overflow explains the failure, its default search (bisect, QuickXplain) runs over the
nodes. -o gets the mixed-precision model (fp16 with the nodes found in fp32), ready for a
strongly typed TensorRT build. The node names go to stdout, one per line.

With --compare onnxrt onnxrt:fp16 (the default) each check emulates fp16 storage on the
CPU: every tensor an fp16 model stores is rounded to fp16 (see docs/precision.md).
--compare onnxrt onnxrt:bf16 (or trt:bf16) searches a mixed bf16 model the same way.
Tolerances default to --atol 1e-2 --rtol 1e-2 here (fp16 keeps 11 significant bits, bf16 8:
loosen them for bf16).

Exit codes: 0 found (or nothing needs fp32); 1 the comparison fails even with every node
in fp32; 2 usage error; 3 bad input; 130 interrupted (the smallest passing set found so far
is printed and written to -o).

Example:

  toolkit debug precision model.onnx -o mixed.onnx --atol 1e-2 --rtol 1e-2
"""


def _summary_json(outcome, cfg, code: int) -> dict:
    """``--json``: the outcome for scripts."""
    return {
        "status": outcome.status,
        "keep_fp32": outcome.kept,
        "also_fp32": {**{n: "--keep-fp32" for n in outcome.user_kept}, **outcome.auto_kept},
        "searched_nodes": outcome.candidates,
        "checks": outcome.checks,
        "broken_checks": outcome.broken,
        "remembered": outcome.remembered,
        "seconds": round(outcome.seconds, 3),
        "precision": outcome.precision,
        "error_all_fp16": outcome.error_fp16,
        "error_result": outcome.error_result,
        "one_minimal": outcome.one_minimal,
        "output": cfg.output if outcome.output_written else None,
        "exit_code": code,
    }


def _summary(outcome, cfg, json_out: bool) -> int:
    from toolkit.cli.output import echo
    from toolkit.core.errors import ExitCode
    from toolkit.precision import search as S

    stats = f"{outcome.checks} check(s), {outcome.remembered} answered from memory, {outcome.seconds:.2f} s"
    code = int(ExitCode.OK)
    if outcome.status == S.STATUS_NONE_NEEDED:
        log(f"The {outcome.precision} model passes as it is ({outcome.error_fp16}); no node needs fp32 ({stats}).")
    elif outcome.status == S.STATUS_FAILS_FP32:
        log(
            f"The comparison fails even with every node in fp32 ({outcome.error_result}): the difference is not "
            f"{outcome.precision}'s. Loosen the tolerances or compare other runners ({stats})."
        )
        code = int(ExitCode.FAILED)
    elif outcome.status == S.STATUS_INTERRUPTED:
        from toolkit.cli.output import state

        state.interrupt_reported = True
        if outcome.kept or outcome.output_written:
            log(f"Interrupted: the smallest passing set so far has {len(outcome.kept)} node(s) ({stats}).")
        else:
            log(f"Interrupted before any passing set was found ({stats}).")
        code = int(ExitCode.INTERRUPTED)
    else:
        log(
            f"Keep {len(outcome.kept)} of {outcome.candidates} node(s) in fp32: {outcome.error_fp16} -> "
            f"{outcome.error_result} ({stats})."
        )
        for name in outcome.kept[:20]:
            log(f"  {name}")
        if len(outcome.kept) > 20:
            log(f"  ... and {len(outcome.kept) - 20} more")
        if outcome.one_minimal and len(outcome.kept) > 0:
            log(
                f"1-minimal: moving any one of them back to {outcome.precision} makes the comparison fail (each checked)."
            )
    if outcome.broken:
        from toolkit.cli.output import warn

        warn(f"{outcome.broken} check(s) could not build, load or run their mixed model; they counted as failing")
    if outcome.output_written:
        log(f"Wrote the mixed-precision model to {cfg.output}")
    if outcome.replay_path and outcome.checks:
        log(f"Verdicts saved to {outcome.replay_path}; resume with --load-debug-replay {outcome.replay_path}")
    if json_out:
        import json

        echo(json.dumps(_summary_json(outcome, cfg, code), indent=2))
    elif outcome.status in ("found", "interrupted"):
        for name in outcome.kept:
            echo(name)
    return code


# The help text of each option of `debug precision`, by its first flag.
_PRECISION_OPTS = {
    "-o": "Where to write the mixed-precision model (fp16 or bf16, the nodes found in fp32).",
    "--compare": "Two runner specs: the fp32 reference and the reduced-precision candidate (default: onnxrt "
        "onnxrt:fp16, fp16 emulated on the CPU; or onnxrt:bf16, trt:fp16, trt:bf16).",
    "--keep-fp32": "Nodes kept in fp32 in every check (names, globs, op types).",
    "--mode": "bisect (fewest checks, not 1-minimal) or linear; default: bisect + 1-minimal.",
    "--load-inputs": "Inputs files (JSON or .npz) to run on; default: generated.",
    "--load-outputs": "Reference outputs from this file (its first runner) instead of running the reference.",
    "--val-range": "Value range of generated inputs: [name:][lo,hi].",
    "--iterations": "Generated input sets to compare on.",
    "--save-debug-replay": "Keep every verdict in this JSON file.",
    "--load-debug-replay": "Reuse the verdicts of an earlier run (same model and runners).",
    "--json": "Print the result as JSON on stdout (instead of node names).",
}


def register(app: typer.Typer) -> None:
    @app.command("precision", **command_kwargs(_HELP))
    def precision_command(
        model: ModelArg,
        output: Annotated[Optional[str], option(_PRECISION_OPTS, "-o", "--output")] = None,
        compare: Annotated[ListOpt, option(_PRECISION_OPTS, "--compare")] = None,
        keep_fp32: Annotated[ListOpt, option(_PRECISION_OPTS, "--keep-fp32")] = None,
        atol: AtolOpt = None,
        rtol: RtolOpt = None,
        check_error_stat: CheckErrorStatOpt = None,
        mode: Annotated[Optional[str], option(_PRECISION_OPTS, "--mode")] = None,
        load_inputs: Annotated[ListOpt, option(_PRECISION_OPTS, "--load-inputs")] = None,
        load_outputs: Annotated[Optional[str], option(_PRECISION_OPTS, "--load-outputs")] = None,
        seed: SeedOpt = None,
        val_range: Annotated[ListOpt, option(_PRECISION_OPTS, "--val-range")] = None,
        input_shapes: InputShapesOpt = None,
        iterations: Annotated[int, option(_PRECISION_OPTS, "--iterations")] = 1,
        save_debug_replay: Annotated[Optional[str], option(_PRECISION_OPTS, "--save-debug-replay")] = None,
        load_debug_replay: Annotated[Optional[str], option(_PRECISION_OPTS, "--load-debug-replay")] = None,
        external_data_dir: ExternalDataDirOpt = None,
        json_out: Annotated[bool, option(_PRECISION_OPTS, "--json")] = False,
    ) -> None:
        _run(locals())


def _run(params: Dict[str, Any]) -> None:
    from toolkit.core.errors import UsageError
    from toolkit.precision.search import PrecisionConfig, PrecisionSearch

    compare = params["compare"]
    if compare and len(compare) != 2:
        raise UsageError("--compare takes two runner specs: the fp32 reference and the candidate, e.g. onnxrt onnxrt:fp16")
    ref, cand = compare if compare else ("onnxrt", "onnxrt:fp16")
    cfg = from_params(
        PrecisionConfig,
        params,
        reference=ref,
        candidate=cand,
        save_replay=params["save_debug_replay"],
        load_replay=params["load_debug_replay"],
    )
    from toolkit.cli.reporters import PrecisionReporter

    outcome = PrecisionSearch(cfg, PrecisionReporter()).run()
    raise typer.Exit(_summary(outcome, cfg, params["json_out"]))

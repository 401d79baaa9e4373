"""``toolkit debug llm``: where two runtimes' generations part, step by step, down to the layer.

Thin layer: options -> :class:`toolkit.llm.session.LlmConfig` -> ``LlmDebugger.run`` -> render.
Progress and the finding go to stderr; ``--json`` prints the record on stdout.
"""

# (no `from __future__ import annotations`: Typer would have to eval every annotation string)

from dataclasses import dataclass
from typing import List, Optional

import typer

from toolkit.cli.options import bind, command_kwargs, values_for
from toolkit.cli.output import is_terminal, state, warn
from toolkit.core import shared_options as S
from toolkit.core.declare import option, shown_as, switch
from toolkit.core.errors import ExitCode, UsageError
from toolkit.core.shared_options import ToleranceOptions
from toolkit.llm.config import LlmConfig

_HELP = f"""Find where two runtimes' generations part, step by step, down to the layer, for a decoder with a KV cache.

The decoder's inputs and outputs are found by their names (input_ids, attention_mask,
position_ids, past_key_values.N.key/.value or past.N.*; logits, present.N.key/.value); map
other names with --name ROLE=NAME. Each prompt runs --steps steps: step 0 runs the prompt,
step k feeds the k-th generated token.

Teacher forced (the default): at every step both sides are fed the reference's tokens and the
reference's cache, so each step is judged on its own. --free-run lets each side keep its own
cache. Every step compares the logits and every present output at the tolerances ({S.ATOL_FLAG},
{S.RTOL_FLAG}, {S.STAT_FLAG}, as in run). A token flip within the tolerances is a near tie (the
reference's top-2 margin is within the measured difference): counted, not a divergence.

At the first diverging step it says the kind (logits: this step's compute; cache: only a
present output differs, a wrong cache write), then runs both sides once more on that step's
feeds with every tensor marked and names the first diverging tensor, its node, op type and
module (layer). --save-step-inputs writes that step's feeds for debug reduce --compare.

Exit codes: 0 no divergence; 1 a divergence found; 2 usage error; 3 bad input (a model that is
not a decoder with a KV cache); 4 a missing dependency; 130 interrupted (what was found so far
is reported).
"""


@shown_as(atol=dict(after="free_run"), rtol=dict(after="atol"), check_error_stat=dict(after="rtol"))
@dataclass
class LlmArgs(ToleranceOptions):
    """The options of ``debug llm`` that its library config does not take (the command binds
    :class:`toolkit.llm.config.LlmConfig`, which declares the others): the runners, the prompts
    and the I/O names as given, the tolerances as typed, what is printed."""

    compare: Optional[List[str]] = option(
        "--compare", metavar="[REF] TEST", complete="runner-spec",
        help="The reference and the runner under test, as runner specs (onnxrt, openvino:precision=f32, trt, "
        "onnxrt:fp16); one spec: the runner under test against onnxrt.",
    )
    prompt_ids: List[List[str]] = option("--prompt-ids", metavar="IDS", factory=list, panel="Inputs",
                                         help='A prompt as token ids ("7 301 45"); repeat for more prompts.')
    prompts: Optional[str] = option("--prompts", metavar="PATH", panel="Inputs",
                                    help="A JSON file of prompts: a list of token-id lists.")
    tokenizer: Optional[str] = option("--tokenizer", metavar="DIR", panel="Inputs", after="seed",
                                      help="A Hugging Face tokenizer folder for --prompt (needs transformers).")
    prompt: List[List[str]] = option("--prompt", metavar="TEXT", factory=list, panel="Inputs", after="tokenizer",
                                     help="A prompt as text, encoded by --tokenizer; repeat for more.")
    name: List[str] = option("--name", metavar="ROLE=NAME...", factory=list, after="check_error_stat",
                             help="Input/output names for roles: input_ids, attention_mask, position_ids, logits, "
                             "past_key, past_value, present_key, present_value ({i}: the layer).")
    json_out: bool = switch("--json", after="save_step_inputs", help="Print the record as JSON on stdout.")


def register(app: typer.Typer) -> None:
    @app.command("llm", **command_kwargs(_HELP, declares=[LlmConfig, LlmArgs], examples=(
        "toolkit debug llm decoder.onnx --compare onnxrt openvino:precision=f32 --samples 16 --steps 64",
        f'toolkit debug llm decoder.onnx --compare onnxrt onnxrt:fp16 --prompt-ids "7 301 45" {S.ATOL_FLAG} 1e-2',
    )))
    @bind(LlmConfig, more=[(LlmArgs, "", None)])
    def llm_command(ctx: typer.Context, **params) -> None:
        raise typer.Exit(_run(LlmConfig(**values_for(LlmConfig, params)), LlmArgs(**values_for(LlmArgs, params))))


def _prompts(a: LlmArgs) -> List[List[int]]:
    from toolkit.llm import prompts as P

    given = [P.parse_ids(" ".join(words)) for words in a.prompt_ids]
    if a.prompts:
        given += P.load_prompts_file(a.prompts)
    if a.prompt and not a.tokenizer:
        raise UsageError("--prompt needs --tokenizer DIR (or give token ids with --prompt-ids)")
    if a.prompt:
        given += P.encode_texts(a.tokenizer or "", [" ".join(words) for words in a.prompt])
    return given


def complete(cfg: LlmConfig, a: LlmArgs) -> LlmConfig:
    """``cfg`` with what the command line gives another way: the runners, the prompts, the I/O
    names, the tolerances (parsed once, here)."""
    from toolkit.llm.io import parse_names
    from toolkit.reduce.accuracy import CompareOptions

    cmp = CompareOptions.from_words(a.compare or ["onnxrt", "onnxrt"])
    if cfg.samples < 1:
        raise UsageError(f"--samples must be at least 1, got {cfg.samples}")
    cfg.reference, cfg.test, cfg.prompts = cmp.reference, cmp.test, _prompts(a)
    cfg.names = parse_names(a.name)
    cfg.tolerances = a.combined()
    return cfg


def _run(cfg: LlmConfig, a: LlmArgs) -> int:
    from toolkit.cli.llm_render import LlmReporter, render
    from toolkit.core.files import paths
    from toolkit.llm.session import LlmDebugger

    for flag, path in (("MODEL", cfg.model), ("--reference-model", cfg.reference_model)):
        if path == "-":
            raise UsageError(f"debug llm {flag} -: a model from stdin is not supported (each runner and the "
                             "layerwise pass read the file again); save it to a file and give its path")
    complete(cfg, a)
    reads = [("--reference-model", cfg.reference_model or ""), ("--prompts", a.prompts or "")]
    paths.check_with_model(cfg.model, reads, [("--save-step-inputs", cfg.save_step_inputs or "")], cfg.external_data_dir)
    with LlmReporter(live=is_terminal()) as reporter:
        outcome = LlmDebugger(cfg, reporter).run()
    code = render(outcome, a.json_out)
    if outcome.interrupted:
        state.interrupt_reported = True
        warn("interrupted: the record above is what was found so far")
        return int(ExitCode.INTERRUPTED)
    return code

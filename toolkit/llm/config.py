"""What ``debug llm`` is asked: :class:`LlmConfig`.

Each option the command line sets is declared on its field (:mod:`toolkit.core.declare`): the
command binds this class, so there is one field list. Nothing heavy is imported here (the
command's ``--help`` reads these declarations).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional

from toolkit.core import shared_options as S
from toolkit.core.compare.tolerances import Tolerances
from toolkit.core.declare import declared, option, switch, unless
from toolkit.core.shared_options import ModelFiles


@dataclass
class LlmConfig(ModelFiles):
    """What ``debug llm`` is asked. Inherited: ``model`` (the decoder the runner under test runs) and
    ``external_data_dir``."""

    reference: str = "onnxrt"  # runner specs
    test: str = "onnxrt"
    reference_model: Optional[str] = option(
        "--reference-model", metavar="PATH", after="compare",
        help="The model the reference runs (default MODEL); the runner under test runs MODEL.",
    )
    prompts: List[List[int]] = field(default_factory=list)  # token ids; none: `samples` random ones
    samples: int = option("--samples", metavar="N", default=4, panel="Inputs", after="prompts",
                          help="Random prompts of 8 token ids when none are given.")
    seed: int = declared(S.SEED.replace(takes=Optional[int], parse=lambda given: S.seed_value(given) or 0,
                                         after="samples"), default=0)
    steps: int = option("--steps", metavar="N", default=16, after="reference_model",
                        help="New tokens per prompt (steps).")
    free_run: bool = switch("--free-run", after="steps",
                            help="Each side keeps its own cache (compare the generations as each side would produce "
                            "them) instead of teacher forcing.")
    names: Dict[str, str] = field(default_factory=dict)  # role -> name (see toolkit.llm.io)
    localize: bool = unless("--no-localize", after="name", help="Do not run the layerwise pass at the diverging step.")
    save_step_inputs: Optional[str] = option(
        "--save-step-inputs", metavar="PATH", after="localize",
        help="Write the diverging step's feeds (an inputs file, JSON or .npz) for debug reduce --compare.",
    )
    tolerances: Tolerances = field(default_factory=Tolerances)

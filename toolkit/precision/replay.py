"""What a ``debug precision`` replay file's verdicts answer: the check, as the command's words.

A replay recorded with another check (other runners, tolerances, inputs) is refused with one
sentence (exit 3), as ``debug reduce`` refuses one (:func:`toolkit.reduce.replay.Replay.load`).

No Typer or Rich here.
"""

from __future__ import annotations

from typing import Any, List


def check_words(c: Any) -> List[str]:
    """The runners, the pass rule and the inputs of a PrecisionConfig ``c``, as the command's words."""
    words = ["--compare", c.reference, c.candidate]
    for flag, values in (("--atol", c.atol), ("--rtol", c.rtol), ("--check-error-stat", c.check_error_stat),
                         ("--load-inputs", c.load_inputs), ("--val-range", c.val_range),
                         ("--input-shapes", c.input_shapes), ("--keep-fp32", c.keep_fp32)):
        if values:
            words += [flag, *(str(v) for v in values)]
    for flag, value in (("--load-outputs", c.load_outputs), ("--seed", c.seed)):
        if value is not None:
            words += [flag, str(value)]
    if not c.load_inputs and c.iterations != 1:
        words += ["--iterations", str(c.iterations)]
    return words

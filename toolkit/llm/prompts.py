"""The prompts a generation starts from: token ids given, read from a JSON file, drawn at random,
or encoded by a Hugging Face tokenizer (when transformers is installed)."""

from __future__ import annotations

import json
import os
from typing import List, Optional, Sequence

import numpy as np

from toolkit.core.errors import DependencyError, InputError, UsageError

Prompt = List[int]

#: Tokens in a random prompt (``--samples``).
RANDOM_LENGTH = 8


def parse_ids(text: str, where: str = "--prompt-ids") -> Prompt:
    """``"7 301 45"`` (or comma-separated) -> ``[7, 301, 45]`` (UsageError when malformed)."""
    words = text.replace(",", " ").split()
    try:
        ids = [int(w) for w in words]
    except ValueError:
        raise UsageError(f"{where} {text!r}: write token ids as integers separated by spaces, e.g. \"7 301 45\"") from None
    if not ids:
        raise UsageError(f"{where} is empty: give at least one token id")
    return ids


def load_prompts_file(path: str) -> List[Prompt]:
    """A JSON list of token-id lists (InputError naming the problem)."""
    data = _read_json(path)
    if not (isinstance(data, list) and data and all(_is_token_ids(p) for p in data)):
        raise InputError(f"--prompts file {path} must hold a non-empty JSON list of non-empty token-id lists, "
                         "e.g. [[7, 301, 45], [12, 9]]")
    return [list(p) for p in data]


def _read_json(path: str):
    """The JSON value in --prompts file ``path`` (InputError: unreadable, or not JSON)."""
    try:
        with open(path, "rb") as fh:
            return json.loads(fh.read().decode("utf-8"))
    except OSError as exc:
        raise InputError(f"cannot read --prompts file {path}: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"--prompts file {path} is not JSON ({exc}); write a list of token-id lists: [[7, 301], [45]]") from None


def _is_token_ids(p) -> bool:
    """A non-empty list of integers (not bools)."""
    return isinstance(p, list) and bool(p) and all(isinstance(t, int) and not isinstance(t, bool) for t in p)


def random_prompts(samples: int, seed: int, vocab: Optional[int], length: int = RANDOM_LENGTH) -> List[Prompt]:
    """``samples`` prompts of ``length`` token ids drawn uniformly from the vocabulary."""
    if vocab is None:
        raise InputError("the model's logits do not fix the vocabulary size, so random prompts cannot be drawn; "
                         "give token ids with --prompt-ids or --prompts")
    rng = np.random.default_rng(seed)
    return [[int(t) for t in rng.integers(0, vocab, size=length)] for _ in range(samples)]


def encode_texts(tokenizer: str, texts: Sequence[str]) -> List[Prompt]:
    """Texts encoded by the tokenizer in folder ``tokenizer`` (DependencyError without transformers)."""
    try:
        from transformers import AutoTokenizer  # (optional: only --tokenizer needs it)
    except ImportError:
        raise DependencyError("--tokenizer needs the transformers package: pip install transformers "
                              "(or give token ids with --prompt-ids)") from None
    if not os.path.isdir(tokenizer):
        raise InputError(f"--tokenizer {tokenizer}: no such folder (a Hugging Face tokenizer folder, as "
                         "save_pretrained writes it)")
    try:
        tok = AutoTokenizer.from_pretrained(tokenizer, local_files_only=True)
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot load a tokenizer from {tokenizer}: {str(exc).splitlines()[0]}") from None
    return [list(tok(text)["input_ids"]) for text in texts]


def check_ids(prompts: Sequence[Prompt], vocab: Optional[int]) -> None:
    """Every id within the vocabulary (when the model fixes it)."""
    for k, prompt in enumerate(prompts):
        bad = _outside(prompt, vocab)
        if bad:
            limit = f"0..{vocab - 1}" if vocab is not None else ">= 0"
            raise InputError(f"prompt {k} has token id(s) {bad[:5]} outside the vocabulary ({limit})")


def _outside(prompt: Prompt, vocab: Optional[int]) -> List[int]:
    """The ids of ``prompt`` outside 0..vocab-1 (below 0, when the vocabulary size is not known)."""
    return [t for t in prompt if t < 0 or (vocab is not None and t >= vocab)]

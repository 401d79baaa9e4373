"""The kind of a data file from its head: the tensor names of an inputs file's first iteration,
read before (and without) the rest of the file.

``run --load-outputs`` refuses an inputs file (one that holds the model's inputs) before it
loads anything; a file of 200k iterations answers as fast as a file of one:

- JSON: the first item of the top-level list, read in chunks that double until it parses;
- ``.npz`` written by toolkit: the head of its index (the archive's last member, found from
  the end of the file without reading the central directory whole).

Anything else (an outputs file, a plain ``.npz``, stdin, a folder, a damaged file) answers
None: the caller then loads the file as usual, which says what is wrong with it.
"""

from __future__ import annotations

import codecs
import json
import os
import re
from typing import List, Optional, Tuple

from toolkit.core.io.datafiles import NPZ_INDEX, is_feed, is_npz_path, json_hook
from toolkit.core.errors import InputError
from toolkit.core.io.model import STDIO, check_data_file
from toolkit.core.io.npy import HEAD_BYTES, last_member_head, npy_text_head

HEAD_CHUNK = 1 << 16
# The start of a toolkit .npz inputs index (json.dumps of {"kind", "version", "iterations"}).
_INPUTS_INDEX = re.compile(r'\{"kind": "inputs", "version": \d+, "iterations": \[')


def first_feed_names(path: str) -> Optional[List[str]]:
    """The tensor names of the first iteration of an inputs file (JSON, or a toolkit ``.npz``),
    read from the head of the file only; None when the file is not known to be one."""
    if path == STDIO or os.path.isdir(path):
        return None
    check_data_file(path)  # (a FIFO would block here: refused, as every data file read)
    try:
        if is_npz_path(path):
            return _npz_first_names(path)
        first = _first_list_item(path)
    except (OSError, UnicodeDecodeError):
        return None
    if not (isinstance(first, dict) and first and is_feed(first)):
        return None
    return list(first)


def _first_list_item(path: str):
    """The first item of the JSON list ``path`` holds (arrays decoded), read in chunks that double
    until it parses: the bytes read are at most about twice the item's (None when the file is no
    list, or its first item does not parse)."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    text, size = "", HEAD_CHUNK
    with open(path, "rb") as f:
        while True:
            chunk = f.read(size)
            text += decoder.decode(chunk, final=not chunk)
            start = len(text) - len(text.lstrip())
            if start < len(text) and not text.startswith("[", start):
                return None
            at = len(text) - len(text[start + 1:].lstrip())
            try:
                return json.JSONDecoder(object_hook=json_hook).raw_decode(text, at)[0]
            except (InputError, ValueError, RecursionError):
                if not chunk:
                    return None
            size *= 2


def _npz_first_names(path: str) -> Optional[List[str]]:
    """The names of the first iteration of a toolkit ``.npz`` inputs file, from the head of its
    index (read in chunks that grow until the first iteration parses)."""
    chars = HEAD_CHUNK
    while True:
        head = _index_head(path, chars)
        if head is None:
            return None
        text, at = head
        try:
            first = json.JSONDecoder().raw_decode(text, at)[0]
        except (ValueError, RecursionError):
            if len(text) < chars:
                return None
            chars *= 4
            continue
        return _names_of(first)


def _index_head(path: str, chars: int) -> Optional[Tuple[str, int]]:
    """The first ``chars`` characters of a toolkit inputs index, and where its first iteration
    starts (None when the file holds no such index)."""
    raw = last_member_head(path, NPZ_INDEX + ".npy", HEAD_BYTES + 4 * chars)
    text = npy_text_head(raw, chars) if raw is not None else None
    found = _INPUTS_INDEX.match(text) if text is not None else None
    if text is None or found is None:
        return None
    return text, found.end()


def _names_of(first) -> Optional[List[str]]:
    """The names of a decoded first iteration (None unless a non-empty dict keyed by names)."""
    if not (isinstance(first, dict) and first and all(isinstance(k, str) for k in first)):
        return None
    return list(first)

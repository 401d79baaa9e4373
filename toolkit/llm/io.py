"""A decoder's inputs and outputs, found by convention (``input_ids``, ``past_key_values.N.key``...).

One generation step of a decoder with a KV cache feeds ``input_ids`` (the new tokens),
``attention_mask`` (ones over the cache and the new tokens), ``position_ids`` when the model has
them, and the cache of every layer (``past_key_values.N.key/.value`` or ``past.N.key/.value``); it
returns ``logits`` and the cache extended by the new tokens (``present.N.key/.value``). Other names
are given by role: ``ROLE=NAME``, with ``{i}`` for the layer index in the cache roles
(``past_key=cache.{i}.k``). The cache's head count, head size, dtype and sequence axis are read
from the model's input types (GQA and fp16 caches included). Nothing here loads weights.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from toolkit.core.errors import InputError, UsageError
from toolkit.core.meta import TensorMeta, dtype_to_numpy
from toolkit.core.io.model import graph_io_meta

#: The roles a name can be given for (``--name ROLE=NAME``).
SCALAR_ROLES = ("input_ids", "attention_mask", "position_ids", "use_cache_branch", "logits")
CACHE_ROLES = ("past_key", "past_value", "present_key", "present_value")
ROLES = SCALAR_ROLES + CACHE_ROLES

_PAST = re.compile(r"^(?:past_key_values|past|past_key_value|cache)[._](\d+)[._](key|value)$")
_PRESENT = re.compile(r"^(?:present|present_key_values|presents)[._](\d+)[._](key|value)$")
_ROLE_HELP = "map other names with --name ROLE=NAME (ROLE: " + ", ".join(ROLES) + "; {i} stands for the layer)"


@dataclass(frozen=True)
class CacheInput:
    """One layer's past key or value input: its name, dtype and the shape rules read from the model."""

    name: str
    dtype: str  # numpy dtype name
    shape: Tuple[object, ...]  # the declared dims (ints, names, None)
    seq_axis: int

    def fixed_dims(self) -> List[object]:
        """The declared dims other than the batch and the sequence (heads, head size)."""
        return [d for k, d in enumerate(self.shape) if k not in (0, self.seq_axis)]

    def empty(self, batch: int = 1) -> "np.ndarray":
        """The cache of no tokens (length 0 on the sequence axis)."""
        return self.filled(0, batch)

    def filled(self, length: int, batch: int = 1) -> "np.ndarray":
        """A cache of ``length`` positions of zeros."""
        dims = [batch if k == 0 else (length if k == self.seq_axis else int(str(d))) for k, d in enumerate(self.shape)]
        return np.zeros(dims, dtype=dtype_to_numpy(self.dtype))


@dataclass
class DecoderIO:
    """Which input and output of the model plays which role in a generation step."""

    input_ids: str
    ids_dtype: str
    logits: str
    past: List[Tuple[CacheInput, CacheInput]]  # per layer: (key, value)
    present: List[Tuple[str, str]]  # per layer: (key, value) output names
    attention_mask: Optional[str] = None
    mask_dtype: str = "int64"
    position_ids: Optional[str] = None
    position_dtype: str = "int64"
    use_cache_branch: Optional[str] = None  # optimum's merged decoders: False on the empty cache of step 0
    vocab: Optional[int] = None  # the logits' last dim when the model fixes it
    others: List[str] = field(default_factory=list)  # outputs with no role (not compared)

    @property
    def layers(self) -> int:
        return len(self.past)

    def present_names(self) -> List[str]:
        return [n for pair in self.present for n in pair]

    def describe(self) -> str:
        """One line: layers, KV heads, head size, cache dtype."""
        key = self.past[0][0]
        heads = key.shape[1] if key.seq_axis != 1 else key.shape[2]
        return (f"{self.layers} layer(s), cache {self.cache_layout()} with {heads} KV head(s) of size "
                f"{key.shape[-1]} in {key.dtype}" + (f", vocab {self.vocab}" if self.vocab else ""))

    def cache_layout(self) -> str:
        return "[batch, heads, seq, head_size]" if self.past[0][0].seq_axis == 2 else (
            f"(sequence axis {self.past[0][0].seq_axis})")


def parse_names(words: Sequence[str]) -> Dict[str, str]:
    """``["past_key=cache.{i}.k", ...]`` -> ``{"past_key": "cache.{i}.k"}`` (UsageError when malformed)."""
    return dict(_role_and_name(word) for word in words)


def _role_and_name(word: str) -> Tuple[str, str]:
    """``"past_key=cache.{i}.k"`` -> ``("past_key", "cache.{i}.k")`` (UsageError when malformed)."""
    role, eq, name = word.partition("=")
    role = role.strip().lower().replace("-", "_")
    if not eq or not name.strip() or role not in ROLES:
        raise UsageError(f"--name {word!r}: write ROLE=NAME with ROLE one of {', '.join(ROLES)}")
    if role in CACHE_ROLES and "{i}" not in name:
        raise UsageError(f"--name {word!r}: a cache name needs {{i}} where the layer index goes (past_key=cache.{{i}}.k)")
    return role, name.strip()


def _layered(names: Sequence[str], pattern: "re.Pattern[str]") -> Dict[Tuple[int, str], str]:
    found = {}
    for name in names:
        m = pattern.match(name)
        if m:
            found[(int(m.group(1)), m.group(2))] = name
    return found


def _mapped(names: Sequence[str], key_fmt: Optional[str], value_fmt: Optional[str]) -> Dict[Tuple[int, str], str]:
    present = set(names)
    found: Dict[Tuple[int, str], str] = {}
    for kind, fmt in (("key", key_fmt), ("value", value_fmt)):
        if fmt is None:
            continue
        i = 0
        while fmt.replace("{i}", str(i)) in present:
            found[(i, kind)] = fmt.replace("{i}", str(i))
            i += 1
    return found


def _pairs(found: Mapping[Tuple[int, str], str], where: str, label: str) -> List[Tuple[str, str]]:
    """Layer 0..L-1, each with a key and a value (InputError naming a gap)."""
    layers = sorted({i for i, _ in found})
    pairs = []
    for want, i in enumerate(layers):
        if i != want or (i, "key") not in found or (i, "value") not in found:
            raise InputError(f"{where}: the {label} of layer {want} lacks its key or value (layers found: {layers}); "
                             f"{_ROLE_HELP}")
        pairs.append((found[(i, "key")], found[(i, "value")]))
    return pairs


def _seq_axis(meta: TensorMeta, where: str) -> int:
    """The one dynamic axis after the batch: the cache's sequence axis."""
    shape = meta.shape
    if shape is None or len(shape) < 3:
        raise InputError(f"{where}: cache input '{meta.name}' has no rank-4 shape declared ({shape}); "
                         "export the model with typed cache inputs")
    dynamic = [k for k, d in enumerate(shape[1:], 1) if not isinstance(d, int)]
    if len(dynamic) != 1:
        raise InputError(
            f"{where}: cache input '{meta.name}' has shape {tuple(shape)}: a decoder's cache has fixed head count "
            "and head size and one dynamic sequence axis (static caches are not supported)"
        )
    return dynamic[0]


def _cache_input(meta: TensorMeta, where: str) -> CacheInput:
    if not meta.dtype:
        raise InputError(f"{where}: cache input '{meta.name}' has no element type")
    return CacheInput(meta.name, meta.dtype, tuple(meta.shape or ()), _seq_axis(meta, where))


def _role_name(role: str, names: Mapping[str, str], present: Sequence[str]) -> Optional[str]:
    name = names.get(role, role)
    return name if name in present else None


def discover(model, names: Optional[Mapping[str, str]] = None, where: str = "the model") -> DecoderIO:
    """The roles of ``model``'s inputs and outputs (InputError naming what is missing)."""
    names = dict(names or {})
    ins, outs = graph_io_meta(model)
    inputs, outputs = {m.name: m for m in ins}, {m.name: m for m in outs}
    ids = _role_name("input_ids", names, list(inputs))
    logits = _role_name("logits", names, list(outputs))
    past_found = _cache_found(list(inputs), names, "past_key", "past_value", _PAST)
    present_found = _cache_found(list(outputs), names, "present_key", "present_value", _PRESENT)
    missing = _missing_roles(names, ids, logits, past_found, present_found)
    if missing:
        raise InputError(f"{where} is not a decoder with a KV cache: it has no {'; no '.join(missing)}; {_ROLE_HELP}")
    assert ids is not None and logits is not None
    past, present = _layers(past_found, present_found, where)
    _check_ids_length(inputs[ids], where)
    io = DecoderIO(ids, inputs[ids].dtype or "int64", logits,
                   [(_cache_input(inputs[k], where), _cache_input(inputs[v], where)) for k, v in past], present)
    _optional_inputs(io, inputs, names, where)
    _other_outputs(io, outputs)
    return io


def _layers(past_found, present_found, where: str):
    """The (key, value) names per layer of the past inputs and of the present outputs: as many layers of each."""
    past = _pairs(past_found, where, "past cache inputs")
    present = _pairs(present_found, where, "present cache outputs")
    if len(past) != len(present):
        raise InputError(f"{where}: {len(past)} layer(s) of past cache inputs but {len(present)} of present outputs; "
                         f"{_ROLE_HELP}")
    return past, present


def _other_outputs(io: DecoderIO, outputs: Mapping[str, TensorMeta]) -> None:
    """The vocabulary size (when the logits fix it) and the outputs that play no role."""
    vocab = (outputs[io.logits].shape or (None,))[-1]
    io.vocab = vocab if isinstance(vocab, int) else None
    used = {io.logits, *io.present_names()}
    io.others = [n for n in outputs if n not in used]


def _cache_found(present: Sequence[str], names: Mapping[str, str], key_role: str, value_role: str, patterns):
    """The cache tensors among ``present``: by the names given for ``key_role``/``value_role``,
    else by the usual names (``patterns``)."""
    if key_role in names or value_role in names:
        return _mapped(present, names.get(key_role), names.get(value_role))
    return _layered(present, patterns)


def _missing_roles(names: Mapping[str, str], ids: Optional[str], logits: Optional[str], past_found,
                   present_found) -> List[str]:
    """What a decoder with a KV cache needs and the model lacks, in words."""
    missing = []
    if ids is None:
        missing.append(f"input '{names.get('input_ids', 'input_ids')}'")
    if logits is None:
        missing.append(f"output '{names.get('logits', 'logits')}'")
    if not past_found:
        missing.append("past key/value inputs (past_key_values.N.key/.value or past.N.key/.value)")
    if not present_found:
        missing.append("present key/value outputs (present.N.key/.value)")
    return missing


def _check_ids_length(meta: TensorMeta, where: str) -> None:
    """input_ids takes the whole prompt at step 0 and one token after: its length must be dynamic."""
    shape = meta.shape or ()
    if len(shape) >= 2 and isinstance(shape[-1], int):
        raise InputError(f"{where}: input '{meta.name}' has the static shape {tuple(shape)}: a generation step feeds "
                         "the whole prompt first and one token after, so its sequence length must be dynamic "
                         "(export the decoder with a dynamic sequence axis)")


def _optional_inputs(io: DecoderIO, inputs: Mapping[str, TensorMeta], names: Mapping[str, str], where: str) -> None:
    """attention_mask and position_ids when the model has them; any other input is an error."""
    for role in ("attention_mask", "position_ids", "use_cache_branch"):
        if role in names and names[role] not in inputs:
            raise InputError(f"{where} has no input '{names[role]}' (given for {role})")
    io.attention_mask = _role_name("attention_mask", names, list(inputs))
    io.position_ids = _role_name("position_ids", names, list(inputs))
    io.use_cache_branch = _role_name("use_cache_branch", names, list(inputs))
    io.mask_dtype = _index_dtype(inputs, io.attention_mask)
    io.position_dtype = _index_dtype(inputs, io.position_ids)
    _refuse_other_inputs(io, inputs, where)


def _index_dtype(inputs: Mapping[str, TensorMeta], name: Optional[str]) -> str:
    """The element type of input ``name`` (an attention mask, positions); int64 when not declared or no such input."""
    return (inputs[name].dtype or "int64") if name else "int64"


def _refuse_other_inputs(io: DecoderIO, inputs: Mapping[str, TensorMeta], where: str) -> None:
    known = _role_inputs(io)
    extra = [n for n in inputs if n not in known]
    if extra:
        raise InputError(f"{where}: input(s) {', '.join(repr(n) for n in extra)} play no known role in a generation "
                         f"step (input_ids, attention_mask, position_ids, use_cache_branch, past keys/values); "
                         f"{_ROLE_HELP}")


def _role_inputs(io: DecoderIO) -> set:
    """The inputs that play a role in a step (None among them for a role the model lacks)."""
    return {io.input_ids, io.attention_mask, io.position_ids, io.use_cache_branch} | {c.name for pair in io.past for c in pair}


def check_compatible(test: DecoderIO, ref: DecoderIO, where: str) -> None:
    """The reference's cache can feed the test model: same layers, and per layer the same shape
    (dtypes may differ: an fp16 cache is fed the reference's cache rounded)."""
    if test.layers != ref.layers:
        raise InputError(f"{where}: the model has {test.layers} layer(s) of cache, the reference model {ref.layers}")
    for (tk, _tv), (rk, _rv) in zip(test.past, ref.past):
        if tk.fixed_dims() != rk.fixed_dims() or tk.seq_axis != rk.seq_axis:
            raise InputError(f"{where}: cache '{tk.name}' has shape {tk.shape} but the reference's '{rk.name}' "
                             f"{rk.shape}: the two models must share the cache layout")

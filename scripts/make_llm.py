#!/usr/bin/env python3
"""Export a random-config Llama decoder with a KV cache to ONNX (no downloads), then check it with
``toolkit debug llm``.

Needs torch and transformers (``pip install transformers``). The config is built in code (GQA,
random weights, lm_head scaled so that logits are decisive); the model is exported by
``torch.onnx.export(dynamo=True)`` with the names ``debug llm`` finds by convention::

    input_ids, attention_mask, position_ids, past_key_values.N.key/.value -> logits, present.N.key/.value

Usage::

    python scripts/make_llm.py OUT.onnx [--layers 4] [--hidden 64] [--vocab 512] [--fault] [--torchscript]
        [--check "--compare onnxrt openvino:precision=f32 --samples 16 --steps 64"]

``--fault`` adds 0.5 to one weight of layer 2's attention output projection (a weight fault for the
command to find); ``--torchscript`` exports with the older TorchScript exporter (nodes named by module
path, no metadata; same weights for the same ``--seed``). ``--check`` runs ``toolkit debug llm`` on the
exported model with those arguments and prints its exit code and time.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import time


def _config(args):
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=2 * args.hidden,
        num_hidden_layers=args.layers, num_attention_heads=args.heads, num_key_value_heads=args.kv_heads,
        max_position_embeddings=1024, rms_norm_eps=1e-6, tie_word_embeddings=False,
        attn_implementation="eager",
    )


def _cache_tensors(cache, layers: int):
    """(keys, values) per layer of a transformers cache (v5 ``layers``, v4 ``key_cache``)."""
    if hasattr(cache, "layers"):
        return [(cache.layers[i].keys, cache.layers[i].values) for i in range(layers)]
    return [(cache.key_cache[i], cache.value_cache[i]) for i in range(layers)]


def build(args):
    import torch
    from transformers import DynamicCache, LlamaForCausalLM

    torch.manual_seed(args.seed)
    config = _config(args)
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(args.lm_scale)
        if args.fault:
            model.model.layers[min(2, args.layers - 1)].self_attn.o_proj.weight[0, 0] += 0.5

    class Flat(torch.nn.Module):
        """The decoder with its cache as flat tensors (one key and one value per layer)."""

        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, input_ids, attention_mask, position_ids, *past):
            cache = DynamicCache(config=config)
            for i in range(config.num_hidden_layers):
                cache.update(past[2 * i], past[2 * i + 1], i)
            out = self.inner(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                             past_key_values=cache, use_cache=True)
            flat = [t for pair in _cache_tensors(out.past_key_values, config.num_hidden_layers) for t in pair]
            return (out.logits, *flat)

    return Flat(model).eval(), config


def export(args) -> str:
    import torch

    flat, config = build(args)
    head = config.hidden_size // config.num_attention_heads
    past_len, seq = 3, 2
    past = [torch.randn(1, config.num_key_value_heads, past_len, head) for _ in range(2 * config.num_hidden_layers)]
    ids = torch.randint(0, config.vocab_size, (1, seq))
    mask = torch.ones(1, past_len + seq, dtype=torch.int64)
    pos = torch.arange(past_len, past_len + seq).unsqueeze(0)
    names_in = ["input_ids", "attention_mask", "position_ids"] + [
        f"past_key_values.{i}.{kv}" for i in range(config.num_hidden_layers) for kv in ("key", "value")]
    names_out = ["logits"] + [f"present.{i}.{kv}" for i in range(config.num_hidden_layers) for kv in ("key", "value")]
    start = time.perf_counter()
    if args.torchscript:  # the older exporter: nodes named by module path (/inner/model/layers.2/self_attn/...)
        axes = {"input_ids": {1: "seq"}, "attention_mask": {1: "total"}, "position_ids": {1: "seq"},
                **{n: {2: "past"} for n in names_in[3:]}, **{n: {2: "total"} for n in names_out[1:]}}
        torch.onnx.export(flat, (ids, mask, pos, *past), args.out, dynamo=False, input_names=names_in,
                          output_names=names_out, dynamic_axes=axes, opset_version=17)
    else:
        dyn = torch.export.Dim.DYNAMIC
        shapes = ({1: dyn}, {1: dyn}, {1: dyn}, tuple({2: dyn} for _ in past))  # (*past: one tuple)
        torch.onnx.export(flat, (ids, mask, pos, *past), args.out, dynamo=True, input_names=names_in,
                          output_names=names_out, dynamic_shapes=shapes, opset_version=18, external_data=False)
    print(f"exported {args.out} in {time.perf_counter() - start:.1f} s "
          f"({config.num_hidden_layers} layers, {config.num_attention_heads} heads, "
          f"{config.num_key_value_heads} KV heads, vocab {config.vocab_size})", file=sys.stderr)
    return args.out


def check(args) -> int:
    cmd = [sys.executable, "-m", "toolkit", "debug", "llm", args.out, *shlex.split(args.check)]
    start = time.perf_counter()
    code = subprocess.call(cmd)
    print(f"`{' '.join(cmd[1:])}` exited {code} in {time.perf_counter() - start:.1f} s", file=sys.stderr)
    return code


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--vocab", type=int, default=512)
    p.add_argument("--lm-scale", type=float, default=20.0, help="lm_head weights times this (decisive logits)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--fault", action="store_true", help="add a weight fault in layer 2's o_proj")
    p.add_argument("--torchscript", action="store_true", help="export with the TorchScript exporter (dynamo=False)")
    p.add_argument("--check", default=None, help="arguments for `toolkit debug llm OUT ...`")
    p.add_argument("--reuse", action="store_true", help="keep OUT when it exists (only run --check)")
    args = p.parse_args(argv)
    if not (args.reuse and os.path.exists(args.out)):
        export(args)
    return check(args) if args.check is not None else 0


if __name__ == "__main__":
    sys.exit(main())

"""``debug llm``: where two runtimes' generations part, step by step, down to the layer, for
decoders with a KV cache (see docs/llm.md)."""

"""convert: fp16 and bf16 conversion of float compute, and its emulation."""

"""Quantization: Q/DQ pairs and fake quantization (``qdq``), per-pair error statistics
(``stats``), ``run --qdq-table`` (``table``), the metrics and held-out validation of
``debug precision``'s search over a quantized model's pairs (``metrics``, ``validate``; the
search itself is ``toolkit.precision.qdq_search``, built on the precision search and runners).
"""

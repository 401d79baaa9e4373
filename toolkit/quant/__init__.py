"""Quantization: Q/DQ pairs and fake quantization (``qdq``), per-pair error statistics
(``stats``), the Q/DQ table of ``run`` and ``debug precision --qdq-table`` (``table``; ``run``'s
marked run of the model for it: ``toolkit.run.qdq_table``), the metrics and held-out validation of
``debug precision``'s search over a quantized model's pairs (``metrics``, ``validate``; the
search itself is ``toolkit.precision.qdq_search``, built on the precision search and runners).
"""

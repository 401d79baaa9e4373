"""``debug precision``: which nodes must stay fp32 for an fp16 model to pass a comparison.

Library use::

    from toolkit.precision.search import PrecisionConfig, PrecisionSearch

    outcome = PrecisionSearch(PrecisionConfig("model.onnx", output="mixed.onnx")).run()
    outcome.kept   # node names to keep in fp32

Nothing heavy is imported until a search runs.
"""

"""ONNX graphs in memory: walking graphs and subgraphs (``graphs``), value bounds
(``bounds``), marking every tensor as an output (``layerwise``).
"""

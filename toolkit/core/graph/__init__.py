"""ONNX graphs in memory: walking graphs and subgraphs (``graphs``), initializers and
``Constant`` values (``constants``), value bounds (``bounds``), marking every tensor as an
output (``layerwise``).
"""

"""Reading and writing models and data: ONNX models (``model``), external weights
(``weights``), the protobuf wire format (``protowire``), model-local functions
(``functions``), data files (``datafiles``, ``npy``, ``dataloader``).
"""

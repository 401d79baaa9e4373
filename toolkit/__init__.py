"""toolkit: a command-line toolkit and library for debugging ONNX models.

Importing this package is cheap: heavy dependencies (numpy, onnx, onnxruntime,
tensorrt) are imported only by the modules that need them.
"""

__version__ = "0.1.0"

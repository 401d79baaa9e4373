"""The delta-debugging search ``debug reduce`` and ``debug precision`` share: sets as bit
masks (``masks``) and the strategies over them (``strategy``). Nothing here knows ONNX.
"""

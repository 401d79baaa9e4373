"""Files a command creates and touches: exclusive creation (``create``), copies and
clones (``clone``), in-place rewrites (``inplace``), the paths a command reads and
writes (``paths``).
"""

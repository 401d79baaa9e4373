"""The names ``toolkit.surgeon.surgery`` used to hold, for code that imports them from here.

The surgery lives in modules by concern: :mod:`toolkit.surgeon.extract`,
:mod:`toolkit.surgeon.sanitize`, :mod:`toolkit.surgeon.fold`, :mod:`toolkit.surgeon.validate`,
:mod:`toolkit.surgeon.optimize`, :mod:`toolkit.surgeon.outputs`, :mod:`toolkit.surgeon.load`
and :mod:`toolkit.surgeon.plumbing`. New code imports from those.
"""

from __future__ import annotations

from toolkit.core.meta import parse_size
from toolkit.surgeon.extract import dangling_tensors, extract
from toolkit.surgeon.fold import FoldPass, SanitizeReport, infer_shapes_in_place
from toolkit.surgeon.load import EAGER_EXTERNAL_BYTES, check_structure, load_for_surgery
from toolkit.surgeon.optimize import optimize
from toolkit.surgeon.outputs import (
    apply_fallback_shapes,
    assume_dynamic_dims,
    mark_outputs,
    parse_upper_bounds,
    set_unbounded_dds_upper_bounds,
    unbounded_dds_tensors,
)
from toolkit.surgeon.plumbing import count_model_nodes, count_nodes
from toolkit.surgeon.sanitize import PARTITIONING_MODES, check_sanitize_options, sanitize
from toolkit.surgeon.validate import check_model

__all__ = [
    "EAGER_EXTERNAL_BYTES", "PARTITIONING_MODES", "FoldPass", "SanitizeReport", "apply_fallback_shapes",
    "assume_dynamic_dims", "check_model", "check_sanitize_options", "check_structure", "count_model_nodes",
    "count_nodes", "dangling_tensors", "extract", "infer_shapes_in_place", "load_for_surgery", "mark_outputs",
    "optimize", "parse_size", "parse_upper_bounds", "sanitize", "set_unbounded_dds_upper_bounds",
    "unbounded_dds_tensors",
]

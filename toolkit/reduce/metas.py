"""Shapes and dtypes for the new inputs and outputs of ``debug reduce``'s candidates."""

from __future__ import annotations

from typing import Callable, Dict, List, Optional, Sequence

from toolkit.core.errors import InputError
from toolkit.core.shapes import collect_inferred, infer_tensor_meta


class MetaProvider:
    """Shapes/dtypes for new subgraph inputs and outputs, inferred once, lazily.

    ONNX shape inference first; if a tensor a candidate needs still has no dtype or rank,
    one run of ONNX-Runtime on the full model fills the gaps (unless it cannot run).
    ``known`` (name -> TensorMeta, e.g. from a layerwise inputs file) fills what inference
    leaves incomplete before that run is needed. ``inference=False`` (--no-shape-inference)
    uses only what the model records and ``known``: no ONNX inference, no ONNX-Runtime run.
    """

    def __init__(
        self,
        model,
        *,
        input_shapes=None,
        force_fallback: bool = False,
        external_data_dir=None,
        warn=None,
        full_model: Optional[Callable] = None,
        feed: Optional[Callable] = None,
        known: Optional[Dict] = None,
        inference: bool = True,
    ):
        """``full_model``: returns the model with its weights, when ``model`` is a light one;
        ``feed``: returns the inputs to run it on (None: generated). Both only needed to
        run ONNX-Runtime."""
        self.model = model
        self.full_model = full_model
        self.feed = feed
        self.input_shapes = dict(input_shapes or {}) or None
        self.force = force_fallback
        self.external_data_dir = external_data_dir
        self.warn = warn or (lambda message: None)
        self.metas: Optional[Dict] = None
        self.tried_fallback = force_fallback or not inference
        self.known = dict(known or {})
        self.inference = inference

    def _infer(self, **kw):
        runs_ort = kw.get("force_fallback") or kw.get("fallback", True)
        model = self.full_model() if (runs_ort and self.full_model is not None) else self.model
        if runs_ort and self.feed is not None:
            kw["feed"] = self.feed()
        return infer_tensor_meta(
            model, input_shapes=self.input_shapes, external_data_dir=self.external_data_dir, **kw
        )

    def ensure(self) -> None:
        if self.metas is None:
            self.metas = self._first_metas()
            for name, meta in self.known.items():
                if _incomplete(self.metas.get(name)):
                    self.metas[name] = meta

    def _first_metas(self) -> Dict:
        """The metas of the first inference: what the model records (no inference), ONNX-Runtime's
        (forced), or ONNX shape inference's."""
        if not self.inference:
            return collect_inferred(self.model)
        if self.force:
            return self._infer(force_fallback=True)
        return self._infer(fallback=False)

    def __call__(self, names: Sequence[str], dtype_only: Sequence[str] = ()):
        """Metas of ``names``; for those in ``dtype_only`` (new outputs) a dtype is enough."""
        self.ensure()
        assert self.metas is not None
        relaxed = set(dtype_only)
        missing = [n for n in names if _lacking(self.metas.get(n), dtype_enough=n in relaxed)]
        if missing and not self.tried_fallback:
            self.tried_fallback = True
            self._fall_back(missing)
        return {n: self.metas.get(n) for n in names}

    def _fall_back(self, missing: List[str]) -> None:
        """The metas of ``missing`` from the fallback inference (run once), where it knows more."""
        assert self.metas is not None
        try:
            better = self._infer(fallback=True, names=missing)
        except InputError as exc:
            self.warn(f"ONNX shape inference left some tensors without a type or shape ({exc.message})")
            return
        for k, v in better.items():
            if not _incomplete(v) or k not in self.metas:
                self.metas[k] = v


def _incomplete(meta) -> bool:
    return meta is None or not meta.dtype or meta.shape is None


def _lacking(meta, dtype_enough: bool) -> bool:
    """Whether ``meta`` lacks what is needed of it: its dtype with ``dtype_enough``, else its dtype or shape."""
    if dtype_enough:
        return meta is None or not meta.dtype
    return _incomplete(meta)

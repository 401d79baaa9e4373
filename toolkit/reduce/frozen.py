"""Frozen input shapes in ``debug reduce``: with --model-input-shapes (or the shapes of
--load-inputs) the full model is also checked as given, with its own input shapes, so that
freezing them neither hides the failure nor changes it. A part of
:class:`~toolkit.reduce.session.Reducer`."""

from __future__ import annotations

from typing import Callable, Dict, Optional

from toolkit.core.errors import ToolkitError
from toolkit.core.progress import Messages
from toolkit.reduce.graph import GraphIndex
from toolkit.reduce.signature import Signature


class FrozenShapes:
    """The check of the model as given of :class:`~toolkit.reduce.session.Reducer` (one of its base classes)."""

    index: GraphIndex
    reporter: Messages  # the session's Reporter
    signature: Optional[Signature]
    memo: Dict[int, bool]
    as_given: bool
    best_chunks: Optional[list]
    _feeds: Optional[Callable[[str], Optional[bool]]]
    verdict: Callable[[int], bool]
    _load: Callable[[], None]

    def _as_given(self, frozen_failed: bool) -> bool:
        """With frozen input shapes, the full model is also checked as given (its own shapes):
        freezing must not hide the failure, nor change it. Returns whether the model fails."""
        frozen_sig = self.signature
        try:
            self._reload(as_given=True)
        except ToolkitError:  # (its shapes cannot be found without freezing them: nothing to compare)
            self._back_to_frozen(frozen_failed)
            self.signature = frozen_sig
            self._announce()
            return frozen_failed
        failed = self.verdict(self.index.full_mask)
        given = self.signature if failed else None
        said = "the model fails the check with its own input shapes" + (f" ({given.describe()})" if given else "")
        if failed and not frozen_failed:
            self.reporter.warn(f"{said} but passes it with its input shapes frozen (--model-input-shapes, or the "
                               "shapes of --load-inputs): freezing hides the failure, so the reduce goes on with "
                               "the model's own input shapes")
        else:
            self._keep_frozen(frozen_failed, failed, given, frozen_sig, said)
        self._announce()
        return failed or frozen_failed

    def _announce(self) -> None:
        """Say the failure this run reduces (when the full model failed)."""
        if self.signature is not None:
            self.reporter.info(self.signature.announce())

    def _keep_frozen(self, frozen_failed: bool, failed: bool, given: Optional[Signature],
                     frozen_sig: Optional[Signature], said: str) -> None:
        """Back to the model with its input shapes frozen, after the check of the model as given
        (``failed``: its verdict; ``given``: its signature, None where it passed or where no check
        judged it, e.g. a verdict from --load-debug-replay): a warning where freezing makes it
        fail, or changes the failure."""
        self._back_to_frozen(frozen_failed)
        if frozen_failed and not failed:
            self.reporter.warn("the model passes the check with its own input shapes but fails it with its input "
                               "shapes frozen: the failure reduced is the frozen model's")
        self.signature = given if failed and frozen_failed else frozen_sig
        if given is not None and frozen_sig is not None:
            self._warn_if_changed(given, frozen_sig, said)

    def _warn_if_changed(self, given: Signature, frozen_sig: Signature, said: str) -> None:
        """A warning when freezing the input shapes changes the failure (``given``: the model's own)."""
        if not given.same(frozen_sig):
            self.reporter.warn(f"{said}, with its input shapes frozen {frozen_sig.describe()}: freezing changes "
                               "the failure; the reduce looks for the model's own failure")

    def _back_to_frozen(self, frozen_failed: bool) -> None:
        """The model with its input shapes frozen loaded again, its verdict remembered."""
        self._reload(as_given=False)
        self.memo[self.index.full_mask] = frozen_failed

    def _reload(self, as_given: bool) -> None:
        self.as_given = as_given
        self._load()
        self.memo.clear()
        self._feeds = None
        self.best_chunks = None  # (bytes of the other shapes' model: -o is written from the index now loaded)

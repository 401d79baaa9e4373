"""The run's inputs, one feed at a time: taken from loaded files, or generated.

Every runner gets the same inputs. Generated inputs are planned once, for the first runner
that asks (its input metadata, ``--input-shapes``, shapes a backend prefers for dynamic
dims); later runners get the same feeds again, regenerated from the seed, rather than
kept in memory, and checked against their own inputs like loaded data.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

from toolkit.core.errors import InferenceError, InputError
from toolkit.core.meta import TensorMeta
from toolkit.core.io.datafiles import load_inputs
from toolkit.core.inputs import plan_generation, select_feed


def load_feeds(paths: Sequence[str]) -> Tuple[List[Mapping], List[Tuple[str, int]]]:
    """Concatenate the iterations of every inputs file; remember each one's (file, index)."""
    feeds: List[Mapping] = []
    where: List[Tuple[str, int]] = []
    for path in paths:
        data = load_inputs(path)
        if not data:
            raise InputError(f"{path}: holds no iterations")
        for k, feed in enumerate(data):
            feeds.append(feed)
            where.append((path, k))
    return feeds, where


class FeedSource:
    """Feeds for every runner of a run.

    ``loaded``: the feeds of ``--load-inputs`` (None when inputs are generated);
    ``preferred``: shapes for dynamic dims of generated inputs that a backend asked for
    (TensorRT's profile opt shapes); ``notes`` receives generation notes (dims guessed).
    """

    def __init__(
        self,
        loaded: Optional[Sequence[Mapping]] = None,
        where: Sequence[Tuple[str, int]] = (),
        *,
        iterations: Optional[int] = None,
        seed: Optional[int] = None,
        ranges=None,
        shapes: Optional[Mapping[str, tuple]] = None,
        notes=None,
    ):
        self.loaded = loaded
        self.where = list(where)
        self.iterations = 1 if iterations is None else iterations
        self.seed = seed
        self.ranges = ranges
        self.shapes = dict(shapes or {})
        self.preferred: Dict[str, tuple] = {}
        self._notes = notes
        # (toolkit.core.inputs.GenerationPlan, fixed values), set by the first runner that asks
        self._generation: Optional[Tuple[Any, Dict[str, Any]]] = None

    def count(self) -> int:
        return len(self.loaded) if self.loaded is not None else self.iterations

    def _plan(self, metas: Sequence[TensorMeta], preferred: Optional[Mapping[str, tuple]], values: Mapping):
        plan = plan_generation(metas, ranges=self.ranges, shapes=self._generation_shapes(metas, preferred, values))
        if self._notes is not None:
            for note in plan.notes:
                self._notes(note)
        return plan

    def _generation_shapes(self, metas: Sequence[TensorMeta], preferred: Optional[Mapping[str, tuple]],
                           values: Mapping) -> Dict[str, tuple]:
        """The shapes to generate: --input-shapes', then, for the other inputs without a fixed value,
        the runner's preferred shapes, then those a backend asked for (:attr:`preferred`)."""
        gen_shapes = dict(self.shapes)
        names = {m.name for m in metas}.difference(values)
        for extra in (preferred or {}, self.preferred):
            gen_shapes.update({name: shape for name, shape in extra.items() if name in names and name not in gen_shapes})
        return gen_shapes

    def _generated(self, k: int) -> Dict:
        assert self._generation is not None
        plan, values = self._generation
        feed = plan.feed(k, self.seed)
        for name, value in values.items():  # shape-tensor inputs get valid shapes (a TensorRT profile's opt values)
            if name in feed and name not in plan.ranges.per_input:
                feed[name] = value.copy()
        return feed

    def feeds(
        self,
        metas: Sequence[TensorMeta],
        preferred: Optional[Mapping[str, tuple]] = None,
        values: Optional[Mapping[str, object]] = None,
    ) -> Iterator[Dict]:
        """The feeds for a runner with inputs ``metas``, one at a time (exactly its inputs, checked).

        ``preferred``: shapes for dynamic dims, ``values``: fixed values for some inputs, both
        used only by the runner that generates the inputs first. Names, shapes and sizes are
        checked when this is called; the data is made or read as the iterator advances.
        """
        if self.loaded is not None:
            return self._select_loaded(metas)
        if self._generation is None:
            self._generation = (self._plan(metas, preferred, values or {}), dict(values or {}))
            return _Feeds(self.iterations, self._generated)
        return _Feeds(
            self.iterations,
            lambda k: select_feed(self._generated(k), metas, source="generated inputs", iteration=k),
        )

    def _select_loaded(self, metas: Sequence[TensorMeta]) -> "_Feeds":
        """The loaded feeds for ``metas``; what select_feed mends (a name differing only in case,
        a value-preserving cast) is said once per file and tensor, not once per iteration."""
        loaded, where = self.loaded or [], self.where
        seen: set = set()

        def make(k: int) -> Dict:
            notes: List[str] = []
            source = where[k][0] if where[k][0] != "-" else "<stdin>"
            feed = select_feed(loaded[k], metas, source=source, iteration=where[k][1], notes=notes)
            for note in notes:
                if note not in seen:
                    seen.add(note)
                    if self._notes is not None:
                        self._notes(note)
            return feed

        return _Feeds(len(loaded), make)

    def all_for(self, metas: Sequence[TensorMeta]) -> List[Dict]:
        """Every feed at once (TensorRT calibrates ``--int8`` on them while it builds)."""
        return list(self.feeds(metas))


class _Feeds:
    """Feed ``k`` made by ``make(k)`` when asked for, and referenced nowhere here once returned
    (a generator would hold the previous feed while it makes the next one)."""

    def __init__(self, count: int, make: Callable[[int], Dict]):
        self.count = count
        self.make = make
        self.next = 0

    def __iter__(self) -> "_Feeds":
        return self

    def __next__(self) -> Dict:
        if self.next >= self.count:
            raise StopIteration
        self.next += 1
        return self.make(self.next - 1)


def explain_generated(
    exc: InferenceError, shapes_option: str = "--input-shapes", real_data: str = "--load-inputs or --data-loader-script"
) -> InferenceError:
    """``exc`` (an inference error on generated inputs) saying how those inputs were made: a model
    that needs particular shapes or values fails deep inside (silero-vad fed a random sample
    rate and 1-sample audio fails in an If branch; a detector fed a 1x1 image in a Concat)."""
    return InferenceError(
        f"{exc.message} (the inputs were generated: dynamic dims 1 unless {shapes_option} says otherwise, values "
        f"in --val-range, default [0,1]; a model that needs particular shapes or values wants {shapes_option} and "
        f"--val-range, or real data with {real_data})",
        exc.exit_code,
    )


def infer_explained(runner, feed: Mapping, feeds: FeedSource, shapes_option: str = "--input-shapes") -> Mapping:
    """``runner.infer(feed)``; an inference error on generated inputs says how they were made
    (:func:`explain_generated`)."""
    try:
        return runner.infer(feed)
    except InferenceError as exc:
        if feeds.loaded is not None:
            raise
        raise explain_generated(exc, shapes_option) from None

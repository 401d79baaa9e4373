"""Validating a rewritten model: it loads in ONNX-Runtime and computes what the input model
does on generated inputs (folded constants compared directly where that is cheaper)."""

from __future__ import annotations

import math
import threading
import time
from typing import Any, List, Optional, Sequence, Tuple

import numpy as np
import onnx
import onnx.shape_inference
from onnx import numpy_helper

from toolkit.core.contain import carried
from toolkit.core.errors import InputError, UsageError, one_line, ort_errors, reraise_bug
from toolkit.core.graph.bounds import run_cost_refusal
from toolkit.core.process.interrupt import RunTimedOut, interruptible_run
from toolkit.core.graph.graphs import (
    copy_field,
    has_external_data,
    node_outputs,
    node_subgraphs,
    tensor_nbytes,
    walk_graphs,
)
from toolkit.core.meta import dtype_to_numpy
from toolkit.core.io.model import PROTOBUF_LIMIT, graph_io_meta, value_info_meta
from toolkit.core.shapes import STUB_BYTES, light_copy, node_reads
from toolkit.surgeon.fold_noops import is_static_dim
from toolkit.surgeon.load import computable_from
from toolkit.surgeon.plumbing import copied, has_graph_attributes, has_tensor_dtype, initializer_named


def check_model(model, original=None) -> None:
    """Run onnx.checker on ``model``; raise InputError if it fails where ``original`` passes."""

    if model.ByteSize() > PROTOBUF_LIMIT:
        return  # the checker needs a path for such models; skip rather than copy gigabytes

    checker_errors = _checker_errors()

    def fails(m) -> Optional[str]:
        try:
            onnx.checker.check_model(m)
        except checker_errors as exc:
            return one_line(exc, first_line=True)
        return None

    err = fails(model)
    if err is None:
        return
    if original is not None and original.ByteSize() <= PROTOBUF_LIMIT and fails(original) is not None:
        return  # the input model already fails the checker the same way; not our doing
    raise InputError(f"the resulting model fails onnx.checker ({err}); nothing was written")


# ---------------------------------------------------------------------- validating a folded model

# Models bigger than this are not validated by running them (the cost would be the run itself).
_VALIDATE_MAX_BYTES = 1 << 30

# The time bound of one run of the input model in validation (seconds; a run of the rewritten model
# gets at least twice what the input model's took): a Loop whose condition stays true and that has
# no trip count runs forever. Past it, the input model's outputs are not compared (the rewritten
# model is checked to load only, and that is said); a rewritten model whose run does not end fails.
RUN_SECONDS = 60.0


def _spread(shape):
    """Values spread over [0, 1) without a random generator (importing numpy.random costs more
    than validation's inputs need): the golden-ratio sequence, deterministic and not periodic."""

    n = int(np.prod(shape, dtype=np.int64))
    return ((np.arange(1, n + 1, dtype=np.float64) * 0.6180339887498949) % 1.0).reshape(shape)


def attempt(fn, *args, **kwargs) -> Tuple[Any, Optional[Exception]]:
    """``(fn(*args, **kwargs), None)``, or ``(None, the exception)`` where it raises.

    Validation loads and runs models on ONNX-Runtime, whose exceptions (Fail, InvalidArgument,
    InvalidGraph...) derive from Exception alone; a failure there is an answer ("it does not
    load"), never a crash. This is the one place that catches them, and a run past its time bound
    (:class:`RunTimedOut`)."""
    try:
        return fn(*args, **kwargs), None
    except ort_errors() + (RunTimedOut,) as exc:
        return None, exc


def light_session(model, external_data_dir: Optional[str] = None, extra_outputs: Sequence[str] = (),
                  only_outputs: Optional[Sequence[str]] = None, optimized: bool = False):
    """An ONNX-Runtime session on a light copy of ``model``: its big top-level weights
    become graph inputs fed with the model's own arrays (no copy), so creating the
    session costs the graph, not the weights. ``only_outputs`` prunes the graph to what
    they need; ``optimized`` loads at ONNX-Runtime's basic level."""
    import onnxruntime as ort  # surgeon commands that validate nothing do not load it

    light, stubbed = _without_big_weights(model)
    if only_outputs is not None:
        _prune_to(light.graph, only_outputs)
    _add_outputs(light.graph, extra_outputs)
    weights = _weights_as_inputs(light.graph, stubbed, pruned=only_outputs is not None)
    so = _session_options(ort, optimized, external_data_dir)
    sess = ort.InferenceSession(light.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return _Session(sess, model, weights)


def _add_outputs(g, names: Sequence[str]) -> None:
    """Make the tensors ``names`` graph outputs of ``g`` too (by name only)."""
    have = {o.name for o in g.output}
    for name in names:
        if name not in have:
            g.output.add().name = name


def _weights_as_inputs(g, stubbed, pruned: bool) -> List[str]:
    """Make the ``stubbed`` (big) weights graph inputs of ``g`` (those it reads, when ``pruned``);
    returns their names."""
    if pruned:  # the pruned graph needs only those it reads
        stubbed = _read_by(g, stubbed)
    listed = {i.name for i in g.input}
    for t in stubbed:
        if t.name not in listed:
            g.input.append(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    return [t.name for t in stubbed]


def _read_by(g, tensors: list) -> list:
    """The ``tensors`` that a node of graph ``g`` reads."""
    if not tensors:
        return []
    read = {r for n in g.node for r in node_reads(n)}
    return [t for t in tensors if t.name in read]


def _session_options(ort, optimized: bool, external_data_dir: Optional[str]):
    """ONNX-Runtime session options for validation runs."""
    so = ort.SessionOptions()
    # ``optimized``: ONNX-Runtime's basic level, as users load models (it inlines constant-condition
    # If branches and folds constants, which meets checks a plain load does not).
    so.graph_optimization_level = (
        ort.GraphOptimizationLevel.ORT_ENABLE_BASIC if optimized else ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    )
    so.log_severity_level = 4
    # One thread that does not spin: validation runs beside folding and must not slow it.
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if external_data_dir:
        so.add_session_config_entry("session.model_external_initializers_file_folder_path", external_data_dir)
    return so


def generated_feed(model) -> Tuple[Optional[dict], Optional[str]]:
    """``(feed, None)``: inputs for ``model``'s graph inputs (dynamic dims as 1; floats spread
    over [0, 1), integers 1); or ``(None, why)`` where they cannot be made."""
    ins, _ = graph_io_meta(model)
    feed = {}
    total = 0
    for i in ins:  # graph inputs that are not initializers
        layout, why = _generated_layout(i)
        if layout is None:
            return None, why
        shape, dtype = layout
        total += math.prod(shape) * max(dtype.itemsize, 1)  # (Python ints: no overflow)
        if total > (64 << 20):
            return None, "generated inputs would be over 64 MiB"
        feed[i.name] = _generated_array(shape, dtype)
    return feed, None


def _generated_layout(m) -> Tuple[Optional[tuple], Optional[str]]:
    """``((shape, numpy dtype), None)`` of the array generated for input ``m`` (dynamic dims as 1);
    or ``(None, why)`` where there is none."""
    if m.shape is None or not has_tensor_dtype(m):
        return None, f"input '{m.name}' is not a tensor with known rank"
    try:
        dtype = dtype_to_numpy(m.dtype)
    except UsageError:  # a dtype numpy has no equivalent of
        return None, f"input '{m.name}' has dtype {m.dtype}"
    return (tuple(d if is_static_dim(d) else 1 for d in m.shape), dtype), None


def _generated_array(shape, dtype):
    """Floats spread over [0, 1), booleans half true, integers 1, strings "a", else zeros."""
    if dtype.kind == "f":
        return _spread(shape).astype(dtype)
    if dtype.kind == "b":
        return _spread(shape) < 0.5
    if dtype.kind in "iu":
        return np.ones(shape, dtype=dtype)
    if dtype.kind in "OU":
        return np.full(shape, "a", dtype=object)
    return np.zeros(shape, dtype=dtype)


def _dynamic_as_one(model, feed) -> str:
    """The generated inputs whose dynamic dims were set to 1, as ``name:1x3x1x1`` ("" if none):
    a model that takes no such size (an image of 1x1 pixels) does not run on them."""
    ins, _ = graph_io_meta(model)
    shown = []
    for m in ins:
        if m.name in feed and m.shape is not None and not all(map(is_static_dim, m.shape)):
            shown.append(f"{m.name}:" + "x".join(str(d) for d in np.shape(feed[m.name])))
    return ", ".join(shown)


def _does_not_run(model, feed, exc: Exception) -> str:
    """Why outputs are not compared when the input model fails (``exc``) on the generated ``feed``."""
    if isinstance(exc, RunTimedOut):
        return (f"the input model's run on generated inputs did not end within {exc.seconds:g} s (a Loop whose "
                "condition stays true?)")
    ones = _dynamic_as_one(model, feed)
    if not ones:
        return f"the input model does not run on generated inputs ({one_line(exc, first_line=True, limit=300)})"
    return (
        f"the input model does not run on generated inputs with its dynamic dims as 1 ({ones}) "
        f"({one_line(exc, first_line=True, limit=300)}) (--override-input-shapes gives them real sizes, in the "
        "written model too)"
    )


def _not_validated(model) -> Optional[str]:
    """Why ``model`` is not validated at all (no ONNX-Runtime, weights over 1 GiB), or None."""
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        return "onnxruntime is not installed"
    # (ByteSize() would walk every weight's bytes: slow on big models)
    if sum(tensor_nbytes(t) for t in model.graph.initializer) > _VALIDATE_MAX_BYTES:
        return "the model is over 1 GiB"
    return None


class Validation:
    """Runs the original model once on generated inputs; checks candidate results against it."""
    def __init__(self, original, external_data_dir: Optional[str], inputs_before_override=None):
        self.original = original
        self.external_data_dir = external_data_dir
        # the graph inputs as the model stated them before --override-input-shapes (or None)
        self.inputs_before_override = inputs_before_override
        self.load_error: Optional[Exception] = None  # why ONNX-Runtime did not load the input model
        # With If/Loop/Scan bodies, models are loaded with basic optimizations, which inline
        # constant-condition branches and then check them (a plain load does not); without bodies
        # those optimizations cannot make a load fail, and cost time.
        self.bodies = any(node_subgraphs(n) for n in original.graph.node)
        self.feed: Any = None
        self.expected: Any = None
        self.skip_reason: Optional[str] = None
        self.compare_reason: Optional[str] = None  # why outputs are not compared (load check only)
        self.all_values: Any = None  # values of the tensors folding may replace, on the generated inputs
        self.structural_only = False
        self.unchecked: set = set()  # big folded tensors whose values are not compared
        self._prepared = False
        self._failure: Optional[BaseException] = None  # what stopped the preparation
        self.original_seconds = 0.0  # how long the input model's longest run took

    # -- sessions
    def _session(self, model, extra_outputs: Sequence[str] = (), only_outputs: Optional[Sequence[str]] = None,
                 optimized: bool = False):
        return light_session(model, self.external_data_dir, extra_outputs, only_outputs, optimized)

    def start(self) -> None:
        """Run the input model for the expected outputs in the background (ONNX-Runtime releases
        the GIL), while folding goes on."""

        self._thread: Optional[threading.Thread] = threading.Thread(target=self._prepare_safely, daemon=True)
        self._thread.start()

    def _prepare_safely(self) -> None:
        got = carried(self._prepare, catching=Exception)  # (the helper thread never dies silently)
        if got.error is not None:
            self._failure = got.error
            self.skip_reason = f"validation could not run ({one_line(got.error, first_line=True, limit=300)})"

    def prepare(self) -> None:
        thread = getattr(self, "_thread", None)
        if thread is not None:
            thread.join()
            self._thread = None
        if not self._prepared:
            self._prepare_safely()
        if self._failure is not None:
            reraise_bug(self._failure)  # (toolkit's own bug, in the helper thread: raised here)

    def _prepare(self) -> None:
        if self._prepared:
            return
        self._prepared = True
        if self._runnable():
            self._run_original()

    def _run_original(self) -> None:
        """Generate inputs and run the input model on them: the values of what folding may replace
        where that part runs alone, else the outputs."""
        g = self.original.graph
        self.output_names = [o.name for o in g.output]
        # Every intermediate tensor's value too, when the model has no subgraphs and they fit:
        # then a folded model is checked by comparing its new constants with them, without
        # running it (folding only replaces tensors by constants and removes dead nodes).
        self.has_subgraphs = has_graph_attributes(g)
        self.feed = self._make_feed()
        if self.feed is None:
            return
        if not self.has_subgraphs and self._compute_foldable(g):
            return
        self._ensure_expected()

    def _runnable(self) -> bool:
        """Whether the input model can be run for validation; else False, with the reason set
        (a model whose weights stay on disk gets a structural check instead)."""
        self.skip_reason = _not_validated(self.original)
        if self.skip_reason:
            return False
        cost = run_cost_refusal(self.original)
        if cost:  # (running it for the expected outputs would not end, or not fit)
            self.compare_reason = cost
            return False
        if has_external_data(self.original):
            # Running would read every weight from disk: check the structure only (ONNX's
            # checker with strict shape inference, which is where loading fails).
            self.structural_only = True
            self.compare_reason = "its weights stay on disk"
            return False
        return True

    def _compute_foldable(self, g) -> bool:
        """Run the part of the input model that folding may replace (shape computations and
        constant subgraphs, with what they read), not the whole model, for the values of those
        tensors; False where that fails (a tensor that cannot be an output: then the whole
        model runs). Big folded tensors (weights made by ConstantOfShape, Transpose of a
        weight...) are not checked: holding them twice costs more than the risk, which is in
        shape values."""
        foldable = _foldable_tensors(g)
        big = _big_tensors(g, _CHECK_MAX_BYTES)
        extra = [t for t in foldable if t not in big]
        self.unchecked = set(foldable) - set(extra)
        self.all_values, err = attempt(lambda: self._run_input_model(self._session(self.original, only_outputs=extra),
                                                                  extra))
        return err is None

    def _ensure_expected(self) -> bool:
        """The input model's outputs on the generated inputs (a full run, done once)."""
        if self.expected is not None:
            return True
        if self.feed is None:
            return False
        sess, exc = attempt(self._session, self.original)
        if exc is not None:
            self.load_error = exc
            self.skip_reason = f"ONNX-Runtime cannot load the input model ({one_line(exc, first_line=True, limit=300)})"
            return False
        self.expected, exc = attempt(self._run_input_model, sess, self.output_names)
        if exc is not None:
            self.compare_reason = _does_not_run(self.original, self.feed, exc)
            self.feed = None
            return False
        return True

    def _make_feed(self):
        feed, why = generated_feed(self.original)
        if why:
            self.compare_reason = why
        return feed

    @staticmethod
    def _run(sess, feed, names, seconds: float):
        """{name: value} of a run of ``sess`` (a :class:`_Session`) on ``feed``, bounded by ``seconds``
        (``names`` None: every output)."""
        names = names or [o.name for o in sess.get_outputs()]
        return dict(zip(names, sess.run(names, feed, seconds)))

    def _run_input_model(self, sess, names):
        """A run of the input model on the generated feed (bounded by :data:`RUN_SECONDS`), timed."""
        t0 = time.perf_counter()
        values = self._run(sess, self.feed, names, RUN_SECONDS)
        self.original_seconds = max(self.original_seconds, time.perf_counter() - t0)
        return values

    # -- checks
    def check(self, result) -> Optional[str]:
        """None if ``result`` loads and (where inputs could be generated) gives the original's outputs."""
        self.prepare()
        if self.load_error is not None:
            self._raise_if_override_broke(self.load_error)
        if self.skip_reason:
            return None
        if self.structural_only:
            return _checker_verdict(result, self.original)
        return self._check_on_ort(result)

    def _check_on_ort(self, result) -> Optional[str]:
        """Load ``result`` in ONNX-Runtime and compare what it computes with the input model: its
        folded constants where the input model's run predicted them, else its outputs."""
        sess, exc = attempt(self._session, result, optimized=self.bodies)
        if exc is not None:
            return self._load_failure(exc)
        if self.feed is None:
            return None
        if _same_outputs(result, self.original) and self._predicted(self._folded(result)):
            return self._check_constants(result)
        return self._check_outputs(sess)

    def _load_failure(self, exc: Exception) -> Optional[str]:
        """What to say when ONNX-Runtime does not load the result (``exc``): that, unless the
        input model does not load either (then validation is skipped)."""
        _, orig_exc = attempt(self._session, self.original, optimized=self.bodies)
        if orig_exc is None:
            return f"ONNX-Runtime cannot load it: {one_line(exc, first_line=True, limit=300)}"
        self._raise_if_override_broke(orig_exc)
        self.skip_reason = f"ONNX-Runtime cannot load the input model ({one_line(orig_exc, first_line=True, limit=300)})"
        return None

    def _check_constants(self, result) -> Optional[str]:
        """Compare the tensors folding made constant with their values in the input model's run."""
        wrong = self.wrong_constants(result)
        if wrong:
            wrong = {name for name in wrong if not self._same_reshape_target(result, name)}
        if not wrong:
            return None
        return self._unless_nondeterministic(f"folded tensor '{sorted(wrong)[0]}' differs from what the input model computes")

    def _check_outputs(self, sess) -> Optional[str]:
        """Run the result's session and compare its outputs with the input model's."""
        if not self._ensure_expected():
            return None
        got, exc = attempt(self._run, sess, self.feed, list(self.expected), self._result_seconds())
        if isinstance(exc, RunTimedOut):
            return (f"its run did not end within {exc.seconds:g} s (the input model's took "
                    f"{self.original_seconds:.2g} s)")
        if exc is not None:
            return f"it fails to run on ONNX-Runtime: {one_line(exc, first_line=True, limit=300)}"
        bad = [n for n in self.expected if not same_value(self.expected[n], got.get(n))]
        if not bad:
            return None
        return self._unless_nondeterministic(f"output '{bad[0]}' differs from the input model's")

    def _result_seconds(self) -> float:
        """The time bound of a run of a rewritten model: :data:`RUN_SECONDS`, at least twice what the
        input model's run took."""
        return max(RUN_SECONDS, 2 * self.original_seconds)

    def _unless_nondeterministic(self, difference: str) -> Optional[str]:
        """``difference``, unless the input model itself differs from run to run (then None, and
        outputs count as not compared)."""
        if self._nondeterministic():
            self.compare_reason = "the input model's outputs change from run to run"
            return None
        return difference

    def limits(self) -> str:
        """What the last :meth:`check` could not do, for the log ("was not validated: why", "loads;
        its outputs were not compared: why"), or ""."""
        if self.skip_reason:
            return f"was not validated: {self.skip_reason}"
        if self.compare_reason:
            return f"loads; its outputs were not compared: {self.compare_reason}"
        return ""

    def check_override(self) -> None:
        """InputError when the model with overridden input shapes does not load while it did
        with its own (see :meth:`_raise_if_override_broke`)."""
        try:
            import onnxruntime  # noqa: F401
        except ImportError:
            return
        _, exc = attempt(self._session, self.original, optimized=True)
        if exc is not None:
            self._raise_if_override_broke(exc)

    def _raise_if_override_broke(self, exc: Exception) -> None:
        """InputError when the input model loads with its own input shapes but not with the
        overridden ones (``exc``): no folding can make such a model load."""
        if self._loads_before_override():
            raise InputError(
                "with the input shapes given (--override-input-shapes) the model no longer loads in "
                f"ONNX-Runtime, folded or not ({one_line(exc, first_line=True, limit=300)}); some part "
                "of it (an If branch, say) cannot take these shapes: choose shapes every part accepts, "
                "or give --no-validate to write it anyway"
            ) from None

    def _loads_before_override(self) -> bool:
        """The input model, with the input shapes it stated (no inferred shapes), loads."""
        if self.inputs_before_override is None:
            return False
        before = light_copy(self.original)  # a copy of its own (the original is untouched)
        del before.graph.input[:]
        before.graph.input.extend(self.inputs_before_override)
        for g in walk_graphs(before.graph):
            del g.value_info[:]
        return attempt(self._session, before, optimized=True)[1] is None

    def _same_reshape_target(self, result, name: str) -> bool:
        """Folded tensor ``name`` is read only as a Reshape target (no allowzero) and equals the
        value the input model computes except for one -1 (inferred, so the same dim) where the
        input model has a positive dim: the same Reshape."""

        if not _read_as_reshape_target_only(result.graph, name):
            return False
        got = initializer_named(result.graph, name)
        want = (self.all_values or {}).get(name)
        if got is None or want is None:
            return False
        return _same_but_one_inferred_dim(np.asarray(raw_array(got, onnx)).reshape(-1), np.asarray(want).reshape(-1))

    def _folded(self, result) -> list:
        """The initializers of ``result`` that are tensors the input model computes (folded)."""
        computed = set(node_outputs(self.original.graph))
        return [t for t in result.graph.initializer if t.name in computed]

    def _predicted(self, folded) -> bool:
        """Every tensor of ``folded`` had its value computed in the input model's run (or is one
        of the big ones left unchecked)."""
        return self.all_values is not None and all(
            t.name in self.all_values or t.name in self.unchecked for t in folded
        )

    def _nondeterministic(self) -> bool:
        """The input model gives different values from run to run (random ops)."""
        # (the values of the first run: the foldable tensors' where computed, else the outputs')
        if self.all_values is not None:
            first, only = self.all_values, list(self.all_values)
        else:
            first, only = self.expected, None
        again, err = attempt(lambda: self._run_input_model(self._session(self.original, only_outputs=only), list(first)))
        if isinstance(err, RunTimedOut):  # (no second run to tell: the difference stands, folding falls back)
            return False
        return err is not None or any(not same_value(first[n], again.get(n)) for n in first)

    def wrong_constants(self, result) -> Optional[set]:
        """Names of tensors that folding made constant with values the input model does not compute.

        None when that cannot be told (no generated inputs)."""
        self.prepare()
        if self.feed is None:
            return None

        folded = self._folded(result)
        if not folded:
            return set()
        if self._predicted(folded):
            return self._wrong_predicted(folded)
        return self._wrong_on_a_run(folded)

    def _wrong_predicted(self, folded) -> set:
        """Names of the ``folded`` tensors whose values differ from those the input model's run
        computed for them (big ones left unchecked are not compared)."""
        return {t.name for t in folded if t.name in self.all_values
                and not same_value(self.all_values.get(t.name), raw_array(t, onnx))}

    def _wrong_on_a_run(self, folded) -> Optional[set]:
        """Names of the ``folded`` tensors whose values differ from those a run of the input model
        computes for them; None when that run fails."""
        names = [t.name for t in folded]
        values, err = attempt(lambda: self._run_input_model(self._session(self.original, names), names))
        if err is not None:
            return None
        return {t.name for t in folded if not same_value(values.get(t.name), numpy_helper.to_array(t))}


def _read_as_reshape_target_only(graph, name: str) -> bool:
    """Tensor ``name`` is read by nodes of ``graph``, each a Reshape that reads it as its target."""
    readers = [n for n in graph.node if name in n.input]
    return bool(readers) and all(_reads_as_reshape_target(n, name) for n in readers)


def _reads_as_reshape_target(node, name: str) -> bool:
    """``node`` is a Reshape (no allowzero) that reads tensor ``name`` as its target (only)."""
    allowzero = any(a.name == "allowzero" and a.i for a in node.attribute)
    return node.op_type == "Reshape" and list(node.input).index(name) == 1 and not allowzero


def _same_but_one_inferred_dim(got, want) -> bool:
    """Integer Reshape targets ``got`` and ``want`` (flat) are the same but for one -1 in ``got``
    (inferred, so the same dim) where ``want`` has a positive dim, and ``want`` has no -1."""
    if got.shape != want.shape or want.dtype.kind not in "iu" or np.count_nonzero(got == -1) != 1:
        return False
    differ = got != want
    return bool(np.all(got[differ] == -1) and np.all(want[differ] > 0) and not np.any(want == -1))


def _foldable_tensors(graph) -> List[str]:
    """Outputs of the top-graph nodes that folding could turn into constants: those computed
    from initializers, constants and Shape/Size results only (an over-estimate)."""
    const = {t.name for t in graph.initializer}
    out: List[str] = []
    for node in graph.node:  # in the model's order; nodes out of order are simply not predicted
        if computable_from(node, const):
            names = [o for o in node.output if o]
            const.update(names)
            out.extend(names)
    return out


# Folded tensors bigger than this are not compared with the input model's values (bytes).
_CHECK_MAX_BYTES = 4 << 20


def _big_tensors(graph, limit: int) -> set:
    """Top-graph tensors whose inferred size is over ``limit`` bytes (dynamic dims as 1)."""
    metas = [value_info_meta(vi) for vi in list(graph.value_info) + list(graph.output)]
    return {m.name for m in metas if m.shape is not None and has_tensor_dtype(m) and _least_nbytes(m) > limit}


def _least_nbytes(m) -> int:
    """The bytes of tensor ``m`` (of known rank and dtype) with its dynamic dims as 1."""
    n = math.prod(d if isinstance(d, int) and d > 0 else 1 for d in m.shape)
    try:
        itemsize = dtype_to_numpy(m.dtype).itemsize
    except UsageError:  # a dtype numpy has no equivalent of: counted as 4 bytes
        itemsize = 4
    return n * itemsize


def _without_big_weights(model):
    """(copy of ``model`` without its big top-level initializers, those initializers): the
    copy shares nothing with the model, and the big weights are not copied."""

    light = onnx.ModelProto()
    _copy_fields_but(model, light, "graph")
    _copy_fields_but(model.graph, light.graph, "initializer")
    big = []
    for t in model.graph.initializer:
        if tensor_nbytes(t) > STUB_BYTES or t.data_location == onnx.TensorProto.EXTERNAL:
            big.append(t)
        else:
            light.graph.initializer.append(t)
    return light, big


def _copy_fields_but(src, dst, skipped: str) -> None:
    """Copy every set field of protobuf message ``src`` but ``skipped`` into ``dst``."""
    for f, value in src.ListFields():
        if f.name != skipped:
            copy_field(dst, f.name, value)


def _prune_to(graph, outputs: Sequence[str]) -> None:
    """Make ``outputs`` the graph's outputs and drop the nodes they do not need (in place)."""
    keep = _needed_nodes(graph, outputs)
    copies = [copied(n) for i, n in enumerate(graph.node) if i in keep]
    del graph.node[:]
    graph.node.extend(copies)
    del graph.output[:]
    for name in outputs:
        graph.output.add().name = name


def _needed_nodes(graph, outputs: Sequence[str]) -> set:
    """The positions of the nodes of ``graph`` that computing ``outputs`` needs (nodes need not be
    sorted)."""
    needed = set(outputs)
    keep: set = set()
    changed = True
    while changed:
        changed = False
        for i, node in enumerate(graph.node):
            if i not in keep and not needed.isdisjoint(node.output):
                keep.add(i)
                needed.update(node_reads(node))
                changed = True
    return keep


def strict_check(model) -> Optional[str]:
    """onnx.checker with strict shape inference on a light copy (no weights read); the error or None."""

    try:
        onnx.checker.check_model(light_copy(model, stub_bytes=0), full_check=True)
    except _checker_errors() as exc:
        return one_line(exc, first_line=True, limit=300)
    return None


def _checker_verdict(result, original) -> Optional[str]:
    """What onnx.checker finds wrong with ``result``, where it finds ``original`` right (else None)."""
    err = strict_check(result)
    return None if err is None or strict_check(original) is not None else f"it fails ONNX's checker: {err}"


def _checker_errors() -> tuple:
    """What onnx.checker raises for a model it refuses: its ValidationError, shape inference's
    InferenceError (``full_check``), ValueError (a malformed field)."""

    return (onnx.checker.ValidationError, onnx.shape_inference.InferenceError, ValueError)


def _same_outputs(a, b) -> bool:
    return [o.name for o in a.graph.output] == [o.name for o in b.graph.output]


class _Session:
    """An ONNX-Runtime session whose weight inputs are fed automatically (read from the
    model only when it runs: a load check costs no weight bytes)."""
    def __init__(self, sess, model, weight_names):
        self.sess = sess
        self.model = model
        self.weight_names = set(weight_names)

    def get_inputs(self):
        return [i for i in self.sess.get_inputs() if i.name not in self.weight_names]

    def get_outputs(self):
        return self.sess.get_outputs()

    def run(self, names, feed, seconds: Optional[float] = None):
        """The session's run, fed its weights too; ``seconds``: its time bound (:class:`RunTimedOut` past it)."""
        weights = {t.name: raw_array(t, onnx) for t in self.model.graph.initializer if t.name in self.weight_names}
        return interruptible_run(self.sess, names, {**feed, **weights}, seconds)


def raw_array(t, onnx):
    """The array of an in-memory initializer, without a copy where it is stored as raw bytes."""

    if t.HasField("raw_data") and t.data_type not in (onnx.TensorProto.STRING,):
        try:
            dtype = onnx.helper.tensor_dtype_to_np_dtype(t.data_type)
            if dtype.itemsize and dtype.kind in "biufc":
                return np.frombuffer(t.raw_data, dtype=dtype).reshape(tuple(t.dims))
        except (KeyError, ValueError) as exc:  # a type onnx does not know, data that does not fill dims: the slow path
            reraise_bug(exc)
    return numpy_helper.to_array(t)


def same_value(a, b) -> bool:
    if a is None or b is None:
        return a is b
    if isinstance(a, list) or isinstance(b, list):
        return _same_lists(a, b)
    return _same_array(np.asarray(a), np.asarray(b))


def _same_lists(a, b) -> bool:
    """``a`` and ``b`` (one of them a list: a sequence output) are lists of the same values."""
    if not (isinstance(a, list) and isinstance(b, list)) or len(a) != len(b):
        return False
    return all(same_value(x, y) for x, y in zip(a, b))


def _identical(a, b) -> bool:
    """Arrays ``a`` and ``b`` of one dtype and shape hold equal values (NaN equals NaN)."""
    if a.dtype.kind in "biufc" and a.tobytes() == b.tobytes():
        return True  # the same bytes (the usual case; cheaper than array_equal on small arrays)
    return bool(np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"))


def _same_array(a, b) -> bool:
    """Same shape, and the same values (floats within 1e-4; NaN equals NaN)."""
    if a.shape != b.shape:
        return False
    if a.dtype == b.dtype and _identical(a, b):
        return True
    if a.dtype.kind in "fc" and b.dtype.kind in "fc":
        return bool(np.allclose(a.astype(np.float64), b.astype(np.float64), rtol=1e-4, atol=1e-4, equal_nan=True))
    try:
        return bool(np.array_equal(a, b))
    except ValueError:  # objects whose comparison is not one truth value are not the same
        return False

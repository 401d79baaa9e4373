"""toolkit.run as a library: runner specs, the registry, the pipeline's steps, streaming."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

import modelzoo as z
from toolkit.core.io import datafiles
from toolkit.core.errors import InputError, UsageError
from toolkit.run import Reporter, RunOptions, execute
from toolkit.run.feeds import FeedSource
from toolkit.run.plan import make_plan
from toolkit.run.registry import KINDS, options_given, runner_order, unused_options
from toolkit.run.specs import RunnerSpec, make_runner, parse_runner_spec


@pytest.fixture
def chain_model(tmp_path):
    return z.save(z.chain(4, shape=(2, 8)), tmp_path / "chain.onnx")


class Recorder(Reporter):
    def __init__(self):
        self.events = []

    def warn(self, message):
        self.events.append(("note", message))

    def iteration(self, runner_name, index, feed, outputs, seconds):
        self.events.append(("iteration", runner_name, index))


# ---------------------------------------------------------------------------- specs


@pytest.mark.parametrize(
    "text, kind, options",
    [
        ("onnxrt", "onnxrt", {}),
        ("trt", "trt", {}),
        ("trt:fp16", "trt", {"fp16": True}),
        ("trt:fp16,int8", "trt", {"fp16": True, "int8": True}),
        ("onnxrt:opt=disable", "onnxrt", {"opt": "disable"}),
        (" ONNXRT:OPT=Basic ", "onnxrt", {"opt": "basic"}),
    ],
)
def test_parse_runner_spec(text, kind, options):
    spec = parse_runner_spec(text)
    assert spec == RunnerSpec(kind, options)
    assert parse_runner_spec(spec.text) == spec  # the text round-trips


@pytest.mark.parametrize(
    "text, says",
    [
        ("tensorflow", "use one of: onnxrt, trt"),
        ("onnxrt:fp99", "its options: "),
        ("onnxrt:opt=fastest", "disable, basic, extended, all"),
        ("onnxrt:opt", "write opt=VALUE"),
        ("trt:fp16=yes", "is a switch"),
    ],
)
def test_bad_runner_specs_are_usage_errors_naming_the_valid_ones(text, says):
    with pytest.raises(UsageError, match=says) as info:
        parse_runner_spec(text)
    assert info.value.exit_code == 2


def test_make_runner_applies_the_spec_and_names_the_runner(chain_model):
    runner = make_runner("onnxrt:opt=disable", chain_model)
    assert runner.name == "onnxrt:opt=disable" and runner.graph_optimization == "disable"
    with runner:
        x = np.linspace(-1, 1, 16, dtype=np.float32).reshape(2, 8)
        out = runner.infer({"x": x})
    assert out["y"].shape == (2, 8)
    plain = make_runner(parse_runner_spec("onnxrt"), chain_model, base=RunOptions(chain_model, ort_optimization="basic"))
    assert plain.name == "onnxrt-runner" and plain.graph_optimization == "basic"  # base options pass through


# ---------------------------------------------------------------------------- registry


def test_runner_order_follows_the_flags():
    assert runner_order(["m.onnx", "--trt", "--onnxrt"], {"onnxrt": True, "trt": True}) == ["trt", "onnxrt"]
    assert runner_order(["m.onnx", "--onnxrt"], {"onnxrt": True, "trt": False}) == ["onnxrt"]
    assert runner_order(["--", "--trt"], {"onnxrt": False, "trt": True}) == ["trt"]  # after --: not a flag


def test_tensorrt_only_options_come_from_the_registry():
    opts = RunOptions("m.onnx", fp16=True, pool_limit=["workspace:1G"], providers=["cpu"])
    assert options_given(opts, "trt") == ["--fp16", "--pool-limit"]
    assert unused_options(opts, ["onnxrt"]) == ["--fp16, --pool-limit ignored without --trt"]
    assert unused_options(opts, ["trt"]) == []
    flags = {o.flag for kind in KINDS.values() for o in kind.options if o.flag}
    assert {"--fp16", "--onnx-outputs", "--ort-optimization", "--save-engine"} <= flags


# ---------------------------------------------------------------------------- steps


def test_the_plan_refuses_bad_options_before_reading_any_file(tmp_path):
    opts = RunOptions(str(tmp_path / "missing.onnx"), iterations=-1, load_inputs=[str(tmp_path / "nope.json")])
    with pytest.raises(UsageError, match="--iterations"):
        make_plan(opts, Reporter())
    with pytest.raises(UsageError, match="unknown runner"):
        make_plan(RunOptions("m.onnx", runners=["onnxrt", "tvm"]), Reporter())


def test_feeds_are_the_same_for_every_runner_and_made_one_at_a_time(chain_model):
    from toolkit.core.meta import TensorMeta

    metas = [TensorMeta("x", (2, 8), "float32")]
    source = FeedSource(iterations=3, seed=7)
    first = source.feeds(metas)
    a0 = next(first)
    again = list(source.feeds(metas))  # a second runner: regenerated, same data
    assert len(again) == 3 and np.array_equal(again[0]["x"], a0["x"])
    assert not np.array_equal(again[0]["x"], again[1]["x"])
    assert source.count() == 3


def test_two_runners_are_compared_and_saved_streaming(chain_model, tmp_path):
    out = tmp_path / "out.json"
    rec = Recorder()
    report = execute(
        RunOptions(chain_model, runners=["onnxrt", "onnxrt:opt=disable"], iterations=3, save_outputs=str(out)), rec
    )
    assert report.passed and len(report.comparisons) == 1
    pair = report.comparisons[0]
    assert (pair.label_a, pair.label_b) == ("onnxrt-runner", "onnxrt:opt=disable")
    assert [it.index for it in pair.iterations] == [0, 1, 2]
    runs = datafiles.load_outputs(str(out)).runs
    assert [(name, len(iters)) for name, iters in runs] == [("onnxrt-runner", 3), ("onnxrt:opt=disable", 3)]
    order = [e[1:] for e in rec.events if e[0] == "iteration"]
    assert order == [("onnxrt-runner", k) for k in range(3)] + [("onnxrt:opt=disable", k) for k in range(3)]
    assert report.results[0].count == 3 and report.results[0].iterations == []  # streamed, not kept


def test_keep_outputs_keeps_them_for_library_use(chain_model):
    report = execute(RunOptions(chain_model, iterations=2, keep_outputs=True))
    assert len(report.results[0].iterations) == 2 and report.results[0].iterations[1]["y"].shape == (2, 8)


def test_a_failed_run_writes_no_file(chain_model, tmp_path):
    golden = tmp_path / "golden.json"
    datafiles.save_outputs(str(golden), datafiles.RunResults([("other", [datafiles.IterationResult({"z": np.ones(2)})])]))
    saved = tmp_path / "saved.json"
    with pytest.raises(InputError, match="no output name in common"):
        execute(RunOptions(chain_model, load_outputs=[str(golden)], save_outputs=str(saved)))
    assert saved.exists()  # the run itself succeeded: its outputs are saved before the comparison fails


def test_memory_is_flat_in_the_number_of_iterations(tmp_path):
    """Each iteration's feed and outputs are dropped once saved and compared (numpy memory, traced)."""
    model = z.save(z.chain(2, shape=(1, 3, 128, 128)), tmp_path / "m.onnx")  # 196 KB per tensor

    def peak(iterations: int) -> int:
        golden = tmp_path / f"golden{iterations}.npz"
        execute(RunOptions(model, iterations=iterations, save_outputs=str(golden)))
        datafiles.clear_cache()
        opts = RunOptions(model, iterations=iterations, save_inputs=str(tmp_path / f"in{iterations}.json"),
                          load_outputs=[str(golden)], validate=True)  # fmt: skip
        tracemalloc.start()
        try:
            report = execute(opts)
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
            assert report.passed

    one, many = peak(1), peak(40)
    assert many <= 1.2 * one, (one, many)

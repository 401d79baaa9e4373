"""Generated inputs equal the reference's: numpy's legacy RandomState(seed + iteration), inputs
drawn in model order, integers/bools with randint(int(lo), int(hi) + 1), floats with
random_sample() * (hi - lo) + lo cast to the input's dtype."""

import numpy as np
import pytest

import modelzoo as mz
from toolkit.core.io.datafiles import load_inputs
from toolkit.core.inputs import generate_inputs, parse_val_ranges
from toolkit.core.meta import TensorMeta

SHAPE = (3, 5)
RANGES = [(0.0, 1.0), (-2.0, 3.0), (-7.5, 7.5), (5.0, 1000.0), (0.0, 0.0)]


def legacy(seed, iteration, draws):
    """What numpy's legacy generator gives for a sequence of (kind, dtype, lo, hi) draws."""
    rng = np.random.RandomState(seed + iteration)
    out = []
    for kind, dtype, lo, hi in draws:
        if kind == "int":
            out.append(rng.randint(int(lo), int(hi) + 1, size=SHAPE, dtype=dtype))
        elif kind == "bool":
            out.append(rng.randint(int(bool(lo)), int(bool(hi)) + 1, size=SHAPE, dtype=np.bool_))
        else:
            out.append((rng.random_sample(SHAPE) * (hi - lo) + lo).astype(dtype))
    return out


@pytest.mark.parametrize("lo,hi", RANGES)
@pytest.mark.parametrize("seed", [None, 0, 1, 42])
def test_every_dtype_matches_numpys_legacy_generator(seed, lo, hi):
    dtypes = [("float32", "float", np.float32), ("float16", "float", np.float16), ("int32", "int", np.int32),
              ("int64", "int", np.int64), ("bool", "bool", np.bool_)]
    metas = [TensorMeta(f"t_{name}", SHAPE, name) for name, _, _ in dtypes]
    feeds, _ = generate_inputs(metas, iterations=3, seed=seed, ranges=parse_val_ranges([f"[{lo},{hi}]"]))
    for k, feed in enumerate(feeds):
        expected = legacy(1 if seed is None else seed, k, [(kind, dt, lo, hi) for _, kind, dt in dtypes])
        for (name, _, dt), want in zip(dtypes, expected):
            got = feed[f"t_{name}"]
            assert got.dtype == dt
            np.testing.assert_array_equal(got, want, err_msg=f"{name} seed={seed} range=[{lo},{hi}] iteration {k}")


def test_per_input_ranges_and_fractional_integer_bounds():
    metas = [TensorMeta("x", SHAPE, "float32"), TensorMeta("i", SHAPE, "int32")]
    (feed,), _ = generate_inputs(metas, seed=9, ranges=parse_val_ranges(["x:[-1,1]", "i:[-3.7,4.2]"]))
    want_x, want_i = legacy(9, 0, [("float", np.float32, -1.0, 1.0), ("int", np.int32, -3.7, 4.2)])
    np.testing.assert_array_equal(feed["x"], want_x)
    np.testing.assert_array_equal(feed["i"], want_i)  # int() truncates: [-3, 4]
    assert feed["i"].min() >= -3 and feed["i"].max() <= 4


def test_same_values_as_polygraphys_data_loader():
    pytest.importorskip("polygraphy")
    from polygraphy.common import TensorMetadata
    from polygraphy.comparator import DataLoader

    meta = TensorMetadata().add("a", np.float32, (2, 3)).add("b", np.int64, (4,)).add("c", np.bool_, (3,))
    meta.add("d", np.float16, (5,))
    ref = DataLoader(seed=5, iterations=2, input_metadata=meta, val_range={"b": (-3.7, 4.2), "d": (-10, 10)})
    metas = [TensorMeta("a", (2, 3), "float32"), TensorMeta("b", (4,), "int64"), TensorMeta("c", (3,), "bool"),
             TensorMeta("d", (5,), "float16")]
    feeds, _ = generate_inputs(metas, iterations=2, seed=5, ranges=parse_val_ranges(["b:[-3.7,4.2]", "d:[-10,10]"]))
    for k in range(2):
        for name in "abcd":
            np.testing.assert_array_equal(feeds[k][name], ref[k][name])
            assert feeds[k][name].dtype == ref[k][name].dtype


def test_run_seed_reproduces_the_readme_values(cli, tmp_path):
    """The reference documents seed 1's first float32 values: 0.417022, 0.720324, ..."""
    model = mz.save(mz.seed_example((1, 3, 2, 2)), tmp_path / "m.onnx")
    path = str(tmp_path / "in.json")
    assert cli("run", model, "--onnxrt", "--save-inputs", path, "-q").code == 0
    first = load_inputs(path)[0]
    values = next(iter(first.values())).ravel()
    np.testing.assert_allclose(values[:2], [0.417022, 0.720324], atol=1e-6)


def test_empty_integer_range_is_a_usage_error():
    from toolkit.core.errors import UsageError

    with pytest.raises(UsageError):
        generate_inputs([TensorMeta("i", SHAPE, "int32")], ranges=parse_val_ranges(["[5,2]"]))

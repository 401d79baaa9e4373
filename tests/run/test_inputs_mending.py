"""Loaded inputs that differ from the model's in ways the reference tolerates: names that
differ only in case, and dtypes that can be cast without changing values."""

import numpy as np
import pytest

import modelzoo as mz
from toolkit.core.io.datafiles import save_inputs
from toolkit.core.errors import InputError
from toolkit.core.inputs import select_feed
from toolkit.core.meta import TensorMeta

META = [TensorMeta("X", (2, 3), "float32")]


def test_case_only_difference_is_used_with_a_note():
    notes = []
    arr = np.ones((2, 3), np.float32)
    feed = select_feed({"x": arr}, META, source="in.json", iteration=0, notes=notes)
    assert feed["X"] is arr
    assert len(notes) == 1 and "'x'" in notes[0] and "'X'" in notes[0] and "case" in notes[0]


def test_exact_mismatch_still_fails():
    with pytest.raises(InputError, match="no tensor for model input"):
        select_feed({"Y": np.ones((2, 3), np.float32)}, META, source="in.json", iteration=0, notes=[])


def test_exact_name_wins_over_a_case_folded_one():
    feed = {"x": np.zeros((2, 3), np.float32), "X": np.ones((2, 3), np.float32)}
    notes = []
    assert select_feed(feed, META, source="f", iteration=0, notes=notes)["X"] is feed["X"]
    assert notes == []


def test_two_case_folded_candidates_fail():
    feed = {"x": np.zeros((2, 3), np.float32)}
    metas = [TensorMeta("X", (2, 3), "float32"), TensorMeta("x", (2, 3), "float32")]
    # 'x' belongs to the input of that exact name, so 'X' has nothing
    with pytest.raises(InputError, match="no tensor for model input"):
        select_feed(feed, metas, source="f", iteration=0, notes=[])


@pytest.mark.parametrize(
    "values,model_dtype",
    [
        (np.random.RandomState(0).rand(2, 3), "float32"),  # float64 saved by numpy
        (np.arange(6, dtype=np.int64).reshape(2, 3), "int32"),
        (np.arange(6, dtype=np.int32).reshape(2, 3), "float32"),
        (np.array([[0, 1, 1], [0, 0, 1]], np.int64), "bool"),
        (np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]), "int64"),
    ],
)
def test_value_preserving_casts_happen_with_a_note(values, model_dtype):
    notes = []
    meta = [TensorMeta("X", (2, 3), model_dtype)]
    got = select_feed({"X": values}, meta, source="in.json", iteration=0, notes=notes)["X"]
    assert str(got.dtype) == model_dtype
    np.testing.assert_allclose(got.astype(np.float64), values.astype(np.float64), rtol=1e-6)
    assert len(notes) == 1 and "'X'" in notes[0] and model_dtype in notes[0]


@pytest.mark.parametrize(
    "values,model_dtype,why",
    [
        (np.array([[1.5, 2, 3], [4, 5, 6]]), "int32", "change values"),
        (np.array([[2**40, 0, 0], [0, 0, 0]], np.int64), "int32", "change values"),
        (np.array([[1e300, 0, 0], [0, 0, 0]]), "float32", "overflow"),
        (np.array([[2**53 + 1, 0, 0], [0, 0, 0]], np.int64), "float32", "integers"),
        (np.array([[0, 2, 1], [0, 0, 1]], np.int64), "bool", "change values"),
    ],
)
def test_lossy_casts_are_refused(values, model_dtype, why):
    with pytest.raises(InputError, match=why):
        select_feed({"X": values}, [TensorMeta("X", (2, 3), model_dtype)], source="f", iteration=0, notes=[])


def test_run_casts_float64_inputs_and_warns_once(cli, tmp_path):
    model = mz.save(mz.seed_example((1, 3, 2, 2)), tmp_path / "m.onnx")
    path = str(tmp_path / "in.json")
    rng = np.random.RandomState(3)
    save_inputs(path, [{"x0": rng.rand(1, 3, 2, 2), "x1": rng.rand(1, 3, 2, 2).astype(np.float32)}] * 3)
    res = cli("run", model, "--onnxrt", "--load-inputs", path)
    assert res.code == 0, res.err
    warnings = [ln for ln in res.err.splitlines() if ln.startswith("warning:")]
    assert len(warnings) == 1 and "'x0'" in warnings[0] and "float64" in warnings[0]


def test_run_with_lossy_input_is_exit_3(cli, tmp_path):
    model = mz.save(mz.seed_example((1, 3, 2, 2)), tmp_path / "m.onnx")
    path = str(tmp_path / "in.json")
    big = np.full((1, 3, 2, 2), 1e300)
    save_inputs(path, [{"x0": big, "x1": big}])
    res = cli("run", model, "--onnxrt", "--load-inputs", path)
    assert res.code == 3 and "overflow" in res.err


@pytest.mark.parametrize("ext", [".npz", ".json"])
def test_big_endian_inputs_reach_the_runtime_as_their_values(cli, tmp_path, ext):
    """Runtimes read a feed's buffer in native byte order: big-endian data must be converted first,
    or the model computes on byte-swapped garbage and the verdict is about that."""
    model = mz.save(mz.seed_example((1, 3, 2, 2)), tmp_path / "m.onnx")
    rng = np.random.RandomState(4)
    native = {"x0": rng.rand(1, 3, 2, 2).astype(np.float32), "x1": rng.rand(1, 3, 2, 2).astype(np.float32)}
    swapped = {k: v.astype(">f4") for k, v in native.items()}
    save_inputs(str(tmp_path / f"be{ext}"), [swapped])
    save_inputs(str(tmp_path / f"le{ext}"), [native])
    res = cli("run", model, "--onnxrt", "--load-inputs", str(tmp_path / f"le{ext}"), "--save-outputs",
              str(tmp_path / "le_out.json"))
    assert res.code == 0, res.err
    res = cli("run", model, "--onnxrt", "--load-inputs", str(tmp_path / f"be{ext}"), "--load-outputs",
              str(tmp_path / "le_out.json"), "--atol", "0", "--rtol", "0")
    assert res.code == 0, res.err

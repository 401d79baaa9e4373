"""`debug precision --compare onnxrt trt:fp16` / `trt:bf16` without a GPU.

TensorRT is the fake of tests/trt_fakes.py (checked against the real API of 10 and 11). Its
ONNX parser here reads the file it is handed and its "GPU" computes that model with the
storage of its own types (float16/bfloat16 tensors rounded, float32 ones not: the CPU
emulation of a strongly typed build). So the test checks the decisions: which mixed model
each check hands to TensorRT, that no weak-typing flag is set, that the network is strongly
typed on TensorRT 11 and the mixed model is not converted again, and that the search finds
the same nodes as on the CPU. What a real GPU computes is not checked here.
"""

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import fp16_models as fm
import modelzoo as mz
from toolkit.convert import fp16
from toolkit.precision.search import PrecisionConfig, PrecisionSearch
from trt_fakes import FakeModel, fake_cudart, fake_tensorrt, install

TRT10, TRT11 = "10.13.3.9", "11.4.0.106"


def _fake_trt(monkeypatch, version):
    """A fake TensorRT whose parser builds a network that computes the parsed ONNX model."""
    cudart = fake_cudart()
    placeholder = FakeModel({}, [], [], lambda feed: {})
    trt = fake_tensorrt(version, memory=cudart.memory, model=placeholder)
    install(monkeypatch, trt, cudart)
    trt.parsed = []  # the ONNX models handed to the parser, in order

    def parse_from_file(self, path):
        trt._calls.append(("parse_from_file", path))
        model = onnx.load(path)
        trt.parsed.append(model)
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        sess = ort.InferenceSession(
            fp16.emulate_any(model).model.SerializeToString(), so, providers=["CPUExecutionProvider"]
        )
        inputs = {i.name: (tuple(i.dims), "FLOAT") for i in _dims(model.graph.input)}
        outs = [o.name for o in model.graph.output]
        self._network._load(
            FakeModel(
                inputs,
                [("net", "ELEMENTWISE", [(o, "FLOAT") for o in outs])],
                outs,
                lambda feed: dict(zip(outs, sess.run(outs, {k: np.asarray(v) for k, v in feed.items()}))),
            )
        )
        return True

    monkeypatch.setattr(trt.OnnxParser, "parse_from_file", parse_from_file)
    return trt


class _Dims:
    def __init__(self, vi):
        self.name = vi.name
        self.dims = [d.dim_value for d in vi.type.tensor_type.shape.dim]


def _dims(values):
    return [_Dims(v) for v in values]


def _fp32_nodes(model, names):
    """Which of ``names`` (original nodes) write float32 outputs in ``model``."""
    inferred = onnx.shape_inference.infer_shapes(model)
    types = {v.name: v.type.tensor_type.elem_type for v in list(inferred.graph.value_info) + list(model.graph.output)}
    return {n.name for n in model.graph.node if n.name in names and types.get(n.output[0]) == onnx.TensorProto.FLOAT}


CASES = {
    "fp16": (fm.layernorm_overflow, fm.LN_MUST_KEEP, "float16", onnx.TensorProto.FLOAT16),
    "bf16": (fm.offset_cancellation, fm.BF16_MUST_KEEP, "bfloat16", onnx.TensorProto.BFLOAT16),
}


@pytest.mark.parametrize("version", [TRT10, TRT11])
@pytest.mark.parametrize("precision", sorted(CASES))
def test_debug_precision_with_a_tensorrt_candidate(monkeypatch, tmp_path, version, precision):
    build, must_keep, dtype, low = CASES[precision]
    path = mz.save(build(), tmp_path / "model.onnx")
    trt = _fake_trt(monkeypatch, version)
    out = tmp_path / "mixed.onnx"
    search = PrecisionSearch(PrecisionConfig(path, output=str(out), candidate=f"trt:{precision}"))
    outcome = search.run()
    assert outcome.status == "found" and outcome.precision == precision
    assert outcome.kept == must_keep and outcome.one_minimal
    # one TensorRT build per check, each of the mixed model of that check
    assert len(trt.parsed) == outcome.checks == len(search.checks)
    universe = set(search.universe)
    for check, model in zip(search.checks, trt.parsed):
        assert fp16.reduced_types(model) == {dtype}  # the precision asked for, nothing else
        assert len(_fp32_nodes(model, universe)) == check.kept
        top = model.graph
        assert {v.type.tensor_type.elem_type for v in list(top.input) + list(top.output)} == {onnx.TensorProto.FLOAT}
    assert _fp32_nodes(trt.parsed[0], universe) == set()  # the first check: everything reduced
    assert low in {t.data_type for t in trt.parsed[0].graph.initializer}
    # the model's types decide: no weak-typing flag, strongly typed on TensorRT 11, no second conversion
    assert not [c for c in trt._calls if c[0] == "set_flag" and c[1] in ("FP16", "BF16")]
    flags = {c[1] for c in trt._calls if c[0] == "create_network"}
    assert flags == ({1} if version == TRT11 else {0})
    # -o: the mixed model of the nodes found, in the candidate's precision
    mixed = onnx.load(str(out))
    assert fp16.reduced_types(mixed) == {dtype} and _fp32_nodes(mixed, universe) == set(must_keep)


def test_on_tensorrt_11_a_mixed_model_is_built_as_it_is_even_with_the_flag(cli, monkeypatch, tmp_path):
    """`run mixed.onnx --trt --fp16` (what a user does with debug precision's -o) on 11."""
    path = mz.save(fm.layernorm_overflow(), tmp_path / "ln.onnx")
    mixed = tmp_path / "mixed.onnx"
    assert cli("debug", "precision", path, "-o", mixed).code == 0
    trt = _fake_trt(monkeypatch, TRT11)
    res = cli("run", mixed, "--trt", "--fp16")
    assert res.code == 0, res.err
    assert "the model holds float16 already: it is built strongly typed as it is" in res.err
    (parsed,) = trt.parsed
    universe = {n.name for n in onnx.load(path).graph.node}
    assert _fp32_nodes(parsed, universe) == set(fm.LN_MUST_KEEP)  # its fp32 nodes stayed fp32


def test_cli_compare_onnxrt_trt_fp16(cli, monkeypatch, tmp_path):
    path = mz.save(fm.layernorm_overflow(), tmp_path / "ln.onnx")
    _fake_trt(monkeypatch, TRT11)
    res = cli("debug", "precision", path, "--compare", "onnxrt", "trt:fp16")
    assert res.code == 0, res.err
    assert res.out.split() == fm.LN_MUST_KEEP
    assert "--compare onnxrt trt:fp16" in res.err

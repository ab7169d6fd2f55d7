#!/usr/bin/env bash
# The demo: what the model is, then its predictions on bundled digit images, with the true labels.
set -euo pipefail
FERRY=${1:-build/ferry}
HERE="$(cd "$(dirname "$0")" && pwd)"
OUT="$(dirname "$FERRY")/demo_out"
MODEL="$HERE/digits_cnn.onnx"

echo "== ferry info $MODEL"
"$FERRY" info "$MODEL"
echo
echo "== ferry run (8 test digits, batch of 8)"
"$FERRY" run "$MODEL" --input "image=$HERE/samples/digits_batch.npy" --output-dir "$OUT" --top-k 1
echo
echo "== predictions vs. true labels"
/usr/bin/python3 "$HERE/show_predictions.py" "$OUT/logits.npy" "$HERE/samples/labels.txt"
echo
echo "== ferry run on one image (digit_0, true label 3)"
"$FERRY" run "$MODEL" --input "$HERE/samples/digit_0_label3.npy" --top-k 3

#!/usr/bin/env bash
# ferry's logits for the demo batch must match PyTorch's (saved when the demo model was trained).
set -euo pipefail
FERRY=$1
OUT=$2
HERE="$(cd "$(dirname "$0")/../../demo" && pwd)"
rm -rf "$OUT"
"$FERRY" run "$HERE/digits_cnn.onnx" --input "image=$HERE/samples/digits_batch.npy" --output-dir "$OUT"
/usr/bin/python3 - "$OUT/logits.npy" "$HERE/samples/digits_batch_logits_torch.npy" "$HERE/samples/labels.txt" <<'PY'
import sys
import numpy as np
got, ref = np.load(sys.argv[1]).astype(np.float64), np.load(sys.argv[2]).astype(np.float64)
labels = [int(x) for x in open(sys.argv[3]).read().split()]
err = np.abs(got - ref).max()
rng = ref.max() - ref.min()
cos = float((got * ref).sum() / (np.linalg.norm(got) * np.linalg.norm(ref)))
pred = got.argmax(axis=1).tolist()
print(f"max abs err {err:.3g} (range {rng:.3g}, ratio {err / rng:.3g}), cosine {cos:.12f}, predictions {pred}, labels {labels}")
ok = err <= 1e-4 * rng and cos >= 1 - 1e-9 and pred == labels
sys.exit(0 if ok else 1)
PY

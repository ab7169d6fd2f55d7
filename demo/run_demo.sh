#!/usr/bin/env bash
# The demo: a user's first five minutes with ferry, on the bundled digits classifier.
#   doctor -> info -> check (every shipped target) -> compile (fp32 with batch gears, and a
#   low-precision mode) -> compare the two -> bench -> the C example on the compiled file.
# A step whose subcommand this build lacks is skipped with a note, so the demo always runs.
set -euo pipefail
FERRY=${1:-build/ferry}
HERE="$(cd "$(dirname "$0")" && pwd)"
BIN="$(dirname "$FERRY")"
OUT="$BIN/demo_out"
MODEL="$HERE/digits_cnn.onnx"
IMAGE="$HERE/samples/digit_0_label3.npy"
BATCH="$HERE/samples/digits_batch.npy"
mkdir -p "$OUT"

COMMANDS=$("$FERRY" --help)
has() { grep -qE "^  $1 " <<<"$COMMANDS"; }
step() { echo; echo "== $*"; }
skip() { echo "   (skipped: this ferry has no '$1' command yet)"; }
# Shows the first N lines of a command's output. Informational steps (doctor, check, compare,
# bench) may report a problem with a non-zero exit (no GPU here, a target that fails): the demo
# goes on; cutting the output short must not fail it either.
first() { local n=$1; shift; { "$@" 2>&1 || echo "   (exit $?)"; } | head -n "$n" || true; }

step "1. ferry doctor: is this machine ready?"
if has doctor; then first 12 "$FERRY" doctor; else skip doctor; fi

step "2. ferry info: what the model is"
first 9 "$FERRY" info "$MODEL"

step "3. ferry check --target all: will it run on each shipped target?"
if has check; then first 30 "$FERRY" check "$MODEL" --target all; else skip check; fi

step "4. ferry compile: fp32 with batch gears 1,2,4,8; fp32 and allow_mix_precision (fp16) at batch 8"
"$FERRY" compile "$MODEL" -o "$OUT/digits_fp32.ferry" --dynamic-batch 1,2,4,8
first 1 "$FERRY" compile "$MODEL" -o "$OUT/digits_fp32_b8.ferry" --input-shape image:8,1,28,28
"$FERRY" compile "$MODEL" -o "$OUT/digits_mix_b8.ferry" --input-shape image:8,1,28,28 --precision-mode allow_mix_precision

step "5. ferry compare: the fp16 compile against the fp32 one, on 8 test digits"
"$FERRY" run "$OUT/digits_fp32_b8.ferry" --input "image=$BATCH" --output-dir "$OUT/fp32" >/dev/null
if has compare; then
  # fp16 rounding moves logits by ~1e-2; what must not move is the predicted class (top-1).
  first 12 "$FERRY" compare "$OUT/digits_mix_b8.ferry" --ref "outputs:$OUT/fp32" --target cpu:fp32 \
    --input "image=$BATCH" --max-abs 0.05
else skip compare; fi
echo "   the compiled fp32 model's predictions vs. the true labels:"
/usr/bin/python3 "$HERE/show_predictions.py" "$OUT/fp32/logits.npy" "$HERE/samples/labels.txt"

step "6. ferry bench: latency of the compiled model"
if has bench; then first 12 "$FERRY" bench "$OUT/digits_fp32.ferry" --duration 1; else skip bench; fi

step "7. the C example (examples/classify.c) on the compiled file: image of a 3"
if [ -x "$BIN/classify" ]; then
  "$BIN/classify" "$OUT/digits_fp32.ferry" "$IMAGE"
else
  echo "   (skipped: $BIN/classify is not built)"
fi

#!/usr/bin/env bash
# The C and C++ examples on the demo model, compiled at test time:
#   classify (examples/classify.c): each demo/samples/digit_<i>_label<L>.npy must print "class L";
#   async_streams (examples/async_streams.cpp): two streams and many threads on a 4-gear model
#   reproduce the synchronous results bit for bit.
# usage: check_examples.sh FERRY CLASSIFY ASYNC_STREAMS SOURCE_DIR WORK_DIR
set -euo pipefail
FERRY=$1 CLASSIFY=$2 ASYNC=$3 SRC=$4 WORK=$5
mkdir -p "$WORK"
MODEL="$SRC/demo/digits_cnn.onnx"
"$FERRY" compile "$MODEL" -o "$WORK/digits.ferry" --input-shape image:1,1,28,28 >/dev/null
fail=0
for f in "$SRC"/demo/samples/digit_*_label*.npy; do
  label=${f##*_label}; label=${label%.npy}
  got=$("$CLASSIFY" "$WORK/digits.ferry" "$f")
  if [[ "$got" != "class $label "* ]]; then
    echo "FAIL: $(basename "$f"): expected class $label, classify printed: $got"; fail=1
  else
    echo "ok: $(basename "$f") -> $got"
  fi
done
"$FERRY" compile "$MODEL" -o "$WORK/digits_gears.ferry" --dynamic-batch 1,2,4,8 >/dev/null
"$ASYNC" "$WORK/digits_gears.ferry" "$SRC/demo/samples/digits_batch.npy" || fail=1
# The C example on a batch of 8 (a gear) prints one class per row, matching labels.txt.
mapfile -t labels < "$SRC/demo/samples/labels.txt"
mapfile -t rows < <("$CLASSIFY" "$WORK/digits_gears.ferry" "$SRC/demo/samples/digits_batch.npy")
for i in "${!labels[@]}"; do
  [[ "${rows[$i]:-}" == "class ${labels[$i]} "* ]] || { echo "FAIL: batch row $i: expected class ${labels[$i]}, got '${rows[$i]:-}'"; fail=1; }
done
exit $fail

#!/usr/bin/env bash
# Run one e2e case through ferry and compare its outputs with PyTorch's.
#
#   tests/e2e/run_case.sh FERRY MODELS_DIR CASE [EXTRA FERRY RUN ARGS...]
#
# MODELS_DIR/CASE is a directory made by gen_models.py (model.onnx, input_<i>.npy,
# expected_<k>.npy, meta.json).  Runs
#   FERRY run MODELS_DIR/CASE/model.onnx --input NAME=input_<i>.npy ... --output-dir TMP [EXTRA...]
# then compare_outputs.py.  Exit status: ferry's (if it failed), else
# compare_outputs.py's (0 pass, 1 mismatch, 2 missing outputs).
# Env: PYTHON (default /usr/bin/python3), KEEP_TMP=1 keeps the output dir.
set -euo pipefail

if [ $# -lt 3 ]; then
  echo "usage: $0 FERRY MODELS_DIR CASE [EXTRA FERRY RUN ARGS...]" >&2
  exit 2
fi
FERRY=$1 MODELS_DIR=$2 CASE=$3
shift 3
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PYTHON=${PYTHON:-/usr/bin/python3}
[ -x "$PYTHON" ] || PYTHON=python3
CASE_DIR=$MODELS_DIR/$CASE
META=$CASE_DIR/meta.json

if [ ! -f "$META" ] || [ ! -f "$CASE_DIR/model.onnx" ]; then
  echo "run_case: $CASE_DIR is not a generated case (no meta.json/model.onnx); run gen_models.py" >&2
  exit 2
fi
if [ ! -x "$FERRY" ]; then
  echo "run_case: ferry binary '$FERRY' not found or not executable" >&2
  exit 2
fi

# meta.json -> "NAME<TAB>FILE" lines for the inputs, then the comma-joined outputs.
read_meta() {
  "$PYTHON" - "$META" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
for name, f in zip(m["inputs"], m["input_files"]):
    print(f"in\t{name}\t{f}")
print("out\t" + ",".join(m["outputs"]))
PY
}
if ! META_LINES=$(read_meta 2>/dev/null); then
  command -v jq >/dev/null || { echo "run_case: cannot read $META" >&2; exit 2; }
  META_LINES=$(jq -r '([.inputs, .input_files] | transpose[] | "in\t\(.[0])\t\(.[1])"), "out\t\(.outputs | join(","))"' "$META")
fi

INPUT_ARGS=()
OUTPUTS=""
while IFS=$'\t' read -r kind a b; do
  case $kind in
    in) INPUT_ARGS+=(--input "$a=$CASE_DIR/$b") ;;
    out) OUTPUTS=$a ;;
  esac
done <<< "$META_LINES"

TMP=$(mktemp -d "${TMPDIR:-/tmp}/ferry_e2e_${CASE}.XXXXXX")
if [ "${KEEP_TMP:-0}" = 1 ]; then
  echo "run_case: outputs kept in $TMP"
else
  trap 'rm -rf "$TMP"' EXIT
fi

CMD=("$FERRY" run "$CASE_DIR/model.onnx" "${INPUT_ARGS[@]}" --output-dir "$TMP" "$@")
echo "== $CASE"
echo "+ ${CMD[*]}"
t0=$(date +%s.%N)
set +e
"${CMD[@]}"
rc=$?
set -e
t1=$(date +%s.%N)
wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')
echo "ferry wall time: ${wall}s (exit $rc)"
if [ $rc -ne 0 ]; then
  echo "run_case: $CASE: ferry failed with exit $rc" >&2
  exit $rc
fi

set +e
"$PYTHON" "$HERE/compare_outputs.py" --expected "$CASE_DIR" --actual "$TMP" --outputs "$OUTPUTS"
rc=$?
set -e
if [ $rc -eq 0 ]; then echo "== $CASE: PASS (ferry ${wall}s)"; else echo "== $CASE: FAIL (compare exit $rc)"; fi
exit $rc

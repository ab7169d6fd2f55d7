#!/bin/bash
# ferry vs ONNX Runtime side by side; writes docs/performance.md.
#
#   bench/run_bench.sh [--quick] [--ferry PATH] [--models DIR] [side_by_side.py options...]
#
# Installs onnxruntime-node 1.30.0 into bench/node_modules (npm, --ignore-scripts; skipped when
# present), exports the models with their inputs (bench/bench_models.py, kept between runs in
# --models, default /tmp/ferry_bench_models), then runs bench/side_by_side.py. --quick: batch 1,
# one round, 1 s per engine (for iterating; the full run takes tens of minutes on 2 cores).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(dirname "$HERE")"
PY=/usr/bin/python3
FERRY="$ROOT/build/ferry"
MODELS=/tmp/ferry_bench_models
ONLY=""
PASS=()
COMMAND="bench/run_bench.sh $*"
while [ $# -gt 0 ]; do
  case "$1" in
    --ferry) FERRY="$2"; shift 2 ;;
    --models) MODELS="$2"; shift 2 ;;
    --only) ONLY="$2"; PASS+=(--only "$2"); shift 2 ;;
    -h|--help) sed -n '2,10p' "$0"; "$PY" "$HERE/side_by_side.py" --help; exit 0 ;;
    *) PASS+=("$1"); shift ;;
  esac
done

if [ ! -f "$HERE/node_modules/onnxruntime-node/package.json" ]; then
  echo "installing onnxruntime-node 1.30.0 into bench/node_modules"
  (cd "$HERE" && npm install --ignore-scripts --no-save --no-package-lock --no-audit --no-fund onnxruntime-node@1.30.0)
fi
[ -x "$FERRY" ] || { echo "run_bench: $FERRY not found; build ferry first (make) or pass --ferry" >&2; exit 2; }

BATCHES=1,8
for ((i = 0; i < ${#PASS[@]}; i++)); do
  [ "${PASS[$i]}" = "--batches" ] && BATCHES="${PASS[$((i + 1))]}"
  [ "${PASS[$i]}" = "--quick" ] && BATCHES=1
done
"$PY" "$HERE/bench_models.py" --out "$MODELS" --batches "$BATCHES" ${ONLY:+--only "$ONLY"}
exec "$PY" "$HERE/side_by_side.py" --ferry "$FERRY" --models "$MODELS" --command "$COMMAND" "${PASS[@]}"

#!/usr/bin/env bash
# Compile -> load -> run reproduces `ferry run` on the ONNX model bit for bit (zoo cases).
# For each case: `ferry compile model.onnx`, then `ferry run` on the .onnx and on the .ferry with
# the case's inputs; every output .npy must be byte-identical.
# CASE@B1,B2,... compiles with --dynamic-batch B1,B2,... (static shapes per gear: weights pre-packed).
# usage: check_zoo_bitexact.sh FERRY ZOO_DIR WORK_DIR CASE[@GEARS]...
set -euo pipefail
FERRY=$1 ZOO=$2 WORK=$3; shift 3
fail=0
for spec in "$@"; do
  case="${spec%@*}"
  opts=()
  [ "$case" = "$spec" ] || opts=(--dynamic-batch "${spec#*@}")
  dir="$ZOO/$case"
  [ -f "$dir/meta.json" ] || { echo "FAIL: $case: not generated in $ZOO (run the zoo_generate test)"; fail=1; continue; }
  out="$WORK/${spec//[@,]/_}"; rm -rf "$out"; mkdir -p "$out"
  inputs=()
  for f in $(ls "$dir"/input_*.npy | sort -V); do inputs+=(--input "$f"); done
  "$FERRY" compile "$dir/model.onnx" -o "$out/model.ferry" "${opts[@]}" >/dev/null
  "$FERRY" run "$dir/model.onnx" "${inputs[@]}" --output-dir "$out/onnx" >/dev/null
  "$FERRY" run "$out/model.ferry" "${inputs[@]}" --output-dir "$out/ferry" >/dev/null
  n=0
  for f in "$out"/onnx/*.npy; do
    n=$((n+1))
    if ! cmp -s "$f" "$out/ferry/$(basename "$f")"; then echo "FAIL: $case: $(basename "$f") differs"; fail=1; fi
  done
  [ $n -gt 0 ] || { echo "FAIL: $case: no outputs"; fail=1; }
  [ $fail -ne 0 ] || echo "ok: $spec: $n output(s) identical ($(du -h "$out/model.ferry" | cut -f1) compiled)"
done
exit $fail

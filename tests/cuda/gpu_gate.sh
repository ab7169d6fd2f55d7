#!/usr/bin/env bash
# Runs a GPU-only test command: exits 77 (ctest's SKIP_RETURN_CODE for these tests) with the
# reason when ferry_cuda_probe finds no usable GPU, else runs the command.
#   gpu_gate.sh PROBE COMMAND [ARGS...]
set -u
probe=$1
shift
out=$("$probe" 2>&1)
rc=$?
if [ $rc -eq 77 ]; then
  echo "SKIPPED: $out"
  exit 77
elif [ $rc -ne 0 ]; then
  echo "ferry_cuda_probe failed (exit $rc): $out" >&2
  exit 1
fi
echo "$out"
exec "$@"

#!/usr/bin/env bash
# `cmake --install` into a temporary prefix, then a user's project (tests/compile/consumer) finds
# the package with find_package(ferry), builds against ferry/ferry.h and ferry.hpp, and runs on a
# model compiled by the installed CLI.
# usage: check_install.sh BUILD_DIR SOURCE_DIR WORK_DIR
set -euo pipefail
BUILD=$1 SRC=$2 WORK=$3
rm -rf "$WORK"; mkdir -p "$WORK"
cmake --install "$BUILD" --prefix "$WORK/prefix" >/dev/null
for f in bin/ferry include/ferry/ferry.h include/ferry/ferry.hpp lib/cmake/ferry/ferryConfig.cmake; do
  [ -e "$WORK/prefix/$f" ] || { echo "FAIL: $f not installed"; exit 1; }
done
ls "$WORK"/prefix/lib*/libferry.so* >/dev/null || { echo "FAIL: libferry.so not installed"; exit 1; }
cmake -S "$SRC/tests/compile/consumer" -B "$WORK/consumer" -DCMAKE_PREFIX_PATH="$WORK/prefix" \
      -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$WORK/consumer" -j2 >/dev/null
FERRY_BIN=$(cat "$WORK/consumer/ferry_executable.txt")
[ "$FERRY_BIN" = "$WORK/prefix/bin/ferry" ] || { echo "FAIL: FERRY_EXECUTABLE is '$FERRY_BIN'"; exit 1; }
"$FERRY_BIN" compile "$SRC/demo/digits_cnn.onnx" -o "$WORK/digits.ferry" --input-shape image:1,1,28,28 >/dev/null
"$WORK/consumer/consumer_c" "$WORK/digits.ferry"
"$WORK/consumer/consumer_cpp" "$WORK/digits.ferry"
# Only the C API is exported from libferry.so.
leaked=$(nm -D --defined-only "$WORK"/prefix/lib*/libferry.so | awk '$2 ~ /[TW]/ {print $3}' | grep -v '^ferry_' | head -5 || true)
[ -z "$leaked" ] || { echo "FAIL: libferry.so exports non-API symbols: $leaked"; exit 1; }
# Backend modules (docs/cuda.md) install in <libdir>/ferry/, where the installed ferry finds them.
for m in "$BUILD"/libferry_backend_*.so; do
  [ -e "$m" ] || continue
  name=$(basename "$m")
  ls "$WORK"/prefix/lib*/ferry/"$name" >/dev/null 2>&1 || { echo "FAIL: $name not installed in <libdir>/ferry"; exit 1; }
  dev=${name#libferry_backend_}
  dev=${dev%.so}
  out=$("$WORK/prefix/bin/ferry" run "$SRC/demo/digits_cnn.onnx" --input "image=$SRC/demo/samples/digits_batch.npy" \
        --device "$dev" 2>&1 || true)
  if echo "$out" | grep -q "was not found"; then echo "FAIL: the installed ferry does not find $name: $out"; exit 1; fi
done
echo "ok: installed package found, consumer built and ran"

#!/usr/bin/env bash
# The one-shot GPU check of the CUDA backend (docs/cuda.md), in two halves:
#
#   scripts/gpu_check.sh --prepare [BUILD_DIR]   here (no GPU needed): builds ferry with nvcc for
#       sm_90 (BUILD_DIR, default build-gpu), generates the ONNX node suite, and packs the binaries,
#       the shared libraries the GPU machine lacks (protobuf, onnx, oneDNN, ...; not CUDA's, which it
#       has) and the suite into .gpu/bundle.tar.xz (ignored by git; carry ".gpu" to the machine).
#   scripts/gpu_check.sh [--budget-s S]            on the GPU machine, from the repository root:
#       unpacks the bundle and runs, each stage under its own time limit, writing under $OUT:
#         1. ferry_cuda_probe                  -> probe.txt
#         2. CUDA unit tests (gtest Cuda*)     -> unit.txt
#         3. ONNX node suite on cuda (16 shards in parallel, exclusion list of cpu-ref) -> conformance.txt
#         4. bench/gpu_bench.py: ferry vs PyTorch eager / torch.compile               -> gpu_bench.{md,json}
#         5. ferry cuda vs cpu-ref on the bench's fp32 ResNet-50 / BERT exports, and zoo cases when
#            tests/zoo/gen_zoo.py can export there                                    -> zoo.txt
#       and summary.txt (one line per stage: PASS / FAIL / TIMEOUT, seconds); 8 files in all, the
#       most the device tool brings back. At most 585 s of stage limits (typically about 7 minutes); run it with timeout_s 600.
#       FERRY_GPU_CHECK_STAGES=probe,unit,... runs only the stages named (a rerun of one stage).
#   scripts/gpu_check.sh --dry-run                 here: checks the bundle is complete, the scripts
#       parse, and runs the benchmark's CPU smoke test; touches no GPU.
#
# Why prebuilt: the GPU machine has nvcc, CMake, PyTorch and CUDA's libraries but not the Debian
# development packages ferry builds against (protobuf, onnx, oneDNN, CLI11, gtest), and nothing can
# be installed there; building here also keeps the machine's time for the checks.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
BUNDLE_DIR=.gpu
BUNDLE=$BUNDLE_DIR/bundle.tar.xz
BINARIES=(ferry ferry_unit_tests ferry_node_tests ferry_device_bench ferry_cuda_probe)
MODULES=(libferry_backend_cuda.so)  # backend modules: next to the binaries, where ferry looks for them

prepare() {
  local build=${1:-build-gpu}
  grep -qx "/$BUNDLE_DIR/" .git/info/exclude 2>/dev/null || echo "/$BUNDLE_DIR/" >> .git/info/exclude
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DFERRY_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
        $(command -v ccache >/dev/null && echo -DCMAKE_CXX_COMPILER_LAUNCHER=ccache) > "$build.configure.log" 2>&1 \
    || { cat "$build.configure.log"; return 1; }
  cmake --build "$build" -j "$(nproc)" --target "${BINARIES[@]}" ferry_backend_modules || return 1
  local stage
  stage=$(mktemp -d)
  mkdir -p "$stage/bin" "$stage/lib"
  for b in "${BINARIES[@]}" "${MODULES[@]}"; do
    cp "$build/$b" "$stage/bin/" && strip "$stage/bin/$b" || return 1
  done
  # Shared libraries: everything ldd resolves except glibc's own and CUDA's (the machine has those).
  for b in "${BINARIES[@]}" "${MODULES[@]}"; do ldd "$build/$b"; done | awk '/=> \//{print $3}' | sort -u | while read -r lib; do
    case "$(basename "$lib")" in
      libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|ld-linux*|libcudnn*|libcublas*|libcudart*|libcuda.so*) ;;
      *) cp -L "$lib" "$stage/lib/" ;;
    esac
  done
  /usr/bin/python3 tests/conformance/generate_node_tests.py "$stage/onnx_node_suite" > /dev/null || return 1
  mkdir -p "$BUNDLE_DIR"
  tar -C "$stage" -cJf "$BUNDLE" . || return 1
  rm -rf "$stage"
  echo "bundle: $BUNDLE ($(du -h "$BUNDLE" | cut -f1)); run on the GPU machine with carry [\"$BUNDLE_DIR\"]:"
  echo "  bash scripts/gpu_check.sh"
}

# --- on the GPU machine ---------------------------------------------------------------------

OUT=${OUT:-$ROOT/gpu_check_out}
SUMMARY=$OUT/summary.txt
WORK=/tmp/ferry_gpu
PY=python3

stage() {  # stage NAME LIMIT_S LOGFILE COMMAND... (a command or a function of this script)
  local name=$1 limit=$2 log=$3
  shift 3
  if [ -n "${FERRY_GPU_CHECK_STAGES:-}" ] && [[ ",$FERRY_GPU_CHECK_STAGES," != *",$name,"* ]]; then
    printf '%-14s %-16s\n' "$name" "not selected" | tee -a "$SUMMARY"
    return 0
  fi
  local t0=$SECONDS rc
  echo "== $name (limit ${limit}s)"
  if [ "$(type -t "$1")" = function ]; then
    timeout --kill-after=10 "$limit" bash -c '"$@"' _ "$@" > "$OUT/$log" 2>&1
  else
    timeout --kill-after=10 "$limit" "$@" > "$OUT/$log" 2>&1
  fi
  rc=$?
  local verdict=PASS
  [ $rc -eq 124 ] || [ $rc -eq 137 ] && verdict=TIMEOUT
  [ $rc -ne 0 ] && [ "$verdict" = PASS ] && verdict="FAIL (exit $rc)"
  printf '%-14s %-16s %4ss  %s\n' "$name" "$verdict" $((SECONDS - t0)) "$log" | tee -a "$SUMMARY"
  tail -n 5 "$OUT/$log"
}

cuda_lib_path() {
  # CUDA's libraries: the toolkit's, then the ones PyTorch's wheels bring (cuDNN lives there).
  "$PY" - <<'PYEOF' 2>/dev/null
import glob, os
dirs = ["/usr/local/cuda/lib64", "/usr/local/cuda/lib"]
try:
    import nvidia
    for base in nvidia.__path__:
        dirs += sorted(glob.glob(os.path.join(base, "*", "lib")))
except Exception:
    pass
print(":".join(d for d in dirs if os.path.isdir(d)))
PYEOF
}

conformance_shards() {
  local pids=() rc=0 i=0
  for prefix in test_a test_b test_c test_d test_e test_g test_h test_i test_l test_m test_n test_o test_p test_r test_s test_t test_u test_w test_x test_f test_q test_k test_y test_z test_v test_j; do
    "$WORK/run/ferry_node_tests" "$WORK/onnx_node_suite" tests/conformance/filters.jsonc --device cuda --filter "$prefix" \
      > "$WORK/conf_$prefix.txt" 2>&1 &
    pids+=($!)
    i=$((i + 1))
    if [ $((i % 16)) -eq 0 ]; then for p in "${pids[@]}"; do wait "$p" || rc=1; done; pids=(); fi
  done
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  cat "$WORK"/conf_test_*.txt
  echo "== shard summaries"
  grep -h "^device cuda" "$WORK"/conf_test_*.txt
  return $rc
}

cross_check() {
  # ferry cuda vs ferry cpu-ref (the oracle) on the bench stage's fp32 exports, batch 1.
  local rc=0
  for m in resnet50 bert; do
    [ -f "$WORK/bench/${m}_fp32.onnx" ] || { echo "$m: no export from the bench stage"; rc=1; continue; }
    for dev in cuda cpu-ref; do
      "$WORK/run/ferry_device_bench" "$WORK/bench/${m}_fp32.onnx" "$WORK/bench/${m}_fp32_b1_in.npz" "$dev" 0 1 \
          "$WORK/${m}_$dev.npz" || rc=1
    done
    "$PY" - "$WORK/${m}_cuda.npz" "$WORK/${m}_cpu-ref.npz" "$m" <<'PYEOF' || rc=1
import sys, numpy as np
a, b = np.load(sys.argv[1])["output"].astype(np.float64), np.load(sys.argv[2])["output"].astype(np.float64)
err = np.abs(a - b).max() / max(np.abs(b).max(), 1e-30)
cos = (a.ravel() @ b.ravel()) / (np.linalg.norm(a) * np.linalg.norm(b))
ok = err <= 1e-4 and cos >= 1 - 1e-7
print(f"{sys.argv[3]}: cuda vs cpu-ref max err/max {err:.3e}, cosine {cos:.10f}: {'PASS' if ok else 'FAIL'}")
sys.exit(0 if ok else 1)
PYEOF
  done
  # Zoo cases, when the zoo's exporter works with this PyTorch (it targets Debian's torch 1.13).
  if timeout 45 "$PY" tests/zoo/gen_zoo.py --out "$WORK/zoo" --threads 8 --only mobilenet_v2_op13,unet_op17,bert_small_dynamic_op17 \
       > "$WORK/zoo_gen.txt" 2>&1; then
    PYTHON=$PY tests/zoo/run_fidelity.sh "$WORK/run/ferry" "$WORK/zoo" --device cuda || rc=1
  else
    echo "zoo export did not run here (see below); cuda vs cpu-ref above covers ResNet-50 and BERT"
    tail -n 5 "$WORK/zoo_gen.txt"
  fi
  return $rc
}

run_on_gpu() {
  local budget=${1:-210}
  mkdir -p "$OUT" "$WORK"
  : > "$SUMMARY"
  [ -f "$BUNDLE" ] || { echo "no $BUNDLE: run 'scripts/gpu_check.sh --prepare' first and carry .gpu" | tee -a "$SUMMARY"; return 2; }
  tar -C "$WORK" -xJf "$BUNDLE" || return 2
  # The bundled libraries (Debian's libstdc++, oneDNN, ...) are for ferry's binaries only: each
  # runs through a wrapper that sets LD_LIBRARY_PATH, so PyTorch keeps the machine's own.
  local libs
  libs="$WORK/lib:$(cuda_lib_path)"
  mkdir -p "$WORK/run"
  for b in "${BINARIES[@]}"; do
    printf '#!/bin/sh\nLD_LIBRARY_PATH="%s${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "%s" "$@"\n' "$libs" "$WORK/bin/$b" > "$WORK/run/$b"
    chmod +x "$WORK/run/$b"
  done
  export PYTHONUNBUFFERED=1 WORK PY
  export -f conformance_shards cross_check
  stage probe 30 probe.txt bash -c "nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; \"$WORK/run/ferry_cuda_probe\""
  if ! grep -q '^probe .*PASS' "$SUMMARY" && [ -z "${FERRY_GPU_CHECK_STAGES:-}" ]; then
    echo "no usable GPU (probe.txt): the other stages need one" | tee -a "$SUMMARY"
    return 1
  fi
  stage unit 60 unit.txt "$WORK/run/ferry_unit_tests" --gtest_filter='Cuda*'
  stage conformance 120 conformance.txt conformance_shards
  stage bench $((budget + 45)) bench.txt "$PY" bench/gpu_bench.py --runner "$WORK/run/ferry_device_bench" --out "$OUT" \
      --work "$WORK/bench" --budget-s "$budget"
  stage cross_check 120 zoo.txt cross_check
  echo "== summary"
  cat "$SUMMARY"
}

dry_run() {
  local ok=0
  bash -n "$0" && echo "gpu_check.sh: syntax ok" || ok=1
  /usr/bin/python3 -m py_compile bench/gpu_bench.py && echo "gpu_bench.py: syntax ok" || ok=1
  if [ -f "$BUNDLE" ]; then
    tar -tJf "$BUNDLE" > /tmp/ferry_bundle_list.txt || ok=1
    for b in "${BINARIES[@]}" "${MODULES[@]}"; do grep -q "bin/$b\$" /tmp/ferry_bundle_list.txt || { echo "bundle lacks $b"; ok=1; }; done
    echo "bundle: $(grep -c '^./lib/' /tmp/ferry_bundle_list.txt) libraries, $(grep -c 'model.onnx$' /tmp/ferry_bundle_list.txt) node tests"
  else
    echo "no bundle yet ($BUNDLE): run --prepare"
  fi
  local runner=${FERRY_DEVICE_BENCH:-build-gpu/ferry_device_bench}
  if [ -x "$runner" ]; then
    /usr/bin/python3 bench/gpu_bench.py --runner "$runner" --out /tmp/ferry_gpu_dry/out --work /tmp/ferry_gpu_dry/work \
        --dry-run || ok=1
  else
    echo "no $runner: skipping the benchmark smoke test"
  fi
  return $ok
}

case "${1:-}" in
  --prepare) shift; prepare "$@" ;;
  --dry-run) dry_run ;;
  --budget-s) run_on_gpu "${2:-210}" ;;
  "") run_on_gpu ;;
  *) sed -n '2,25p' "$0"; exit 2 ;;
esac

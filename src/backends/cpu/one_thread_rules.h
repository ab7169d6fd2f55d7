// Which short, memory-bound cpu kernels run on one thread when the intra-op pool has more (issue 22):
// waking and joining the second thread costs about what splitting such a kernel saves, and its
// output then sits in one core's cache for the next node. Each rule has an environment switch with
// the byte limit (0: always split, as before), read at each call so tests can run both ways.
//
// Measured on EfficientNet-B0 b1 at 2 threads, where 2 threads barely beat 1 (5.44 against 5.79 ms
// in session 14's table): its depthwise layers from 28x28x240 down and its squeeze-excitation Muls
// (after a one-thread global pool and small-GEMM FCs) are 3-60 us each. Per node (`ferry profile -t 2
// --trace`, 25th percentile of each node's calls over two 3 s runs per setting, load 4.5-4.8 on the
// 2 cores): depthwise 14x14x480 0.055 -> 0.031 ms, 7x7x1152 0.057 -> 0.034, 28x28x240 0.141 ->
// 0.111, SE Mul 14x14x480 0.015 -> 0.006; all depthwise 1.51 -> 1.13 ms, all Muls 0.31 -> 0.17 ms
// per run. Whole model (`ferry bench -t 2 --duration 0.6`, 6 interleaved rounds per setting, runs
// pooled, wall p50; the machine shared with other engineers' builds and benchmarks): EfficientNet-B0
// b1 8.19 -> 7.81 ms (load 2.4-2.7), 9.14 -> 8.18 (2 MiB limits, load 2.7-3.2), 18.77 -> 17.53
// (load 4.0-4.2); MobileNetV2 b1 5.21 -> 4.98 (load 2.7-2.8). A limit of 4 MiB measured about the
// same as 1-2 MiB; 1 MiB is kept (the larger layers may still gain from two threads on a quiet
// host). Batch 8 (split into parts of 2 images) barely meets the limits.
#pragma once

#include <omp.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "common/env_switch.h"

namespace ferry::cpu {

/// The limit in bytes from environment variable `env`, or `dflt` when it is unset or not a number.
inline int64_t one_thread_limit(const char* env, int64_t dflt) {
  const char* e = env_value(env);
  if (!e || !*e) return dflt;
  char* end = nullptr;
  const long long v = std::strtoll(e, &end, 10);
  return end && *end == '\0' ? static_cast<int64_t>(v) : dflt;
}

/// True when a kernel touching `bytes` (below `limit`) should run on one thread of several.
inline bool one_thread_for(int64_t bytes, int64_t limit) {
  return limit > 0 && bytes < limit && !omp_in_parallel() && omp_get_max_threads() > 1;
}

/// Depthwise convolutions (dnnl_conv.cpp) whose source is smaller than this run on one thread.
/// FERRY_DW_ONE_THREAD_BYTES overrides it.
constexpr int64_t kDepthwiseOneThreadBytes = int64_t{1} << 20;
inline bool depthwise_on_one_thread(int64_t src_bytes) {
  return one_thread_for(src_bytes, one_thread_limit("FERRY_DW_ONE_THREAD_BYTES", kDepthwiseOneThreadBytes));
}

/// f32 binary elementwise ops (elementwise.cpp) with a smaller output run on one thread.
/// FERRY_ELTWISE_ONE_THREAD_BYTES overrides it.
constexpr int64_t kBinaryOneThreadBytes = int64_t{1} << 20;
inline bool binary_on_one_thread(int64_t out_bytes) {
  return one_thread_for(out_bytes, one_thread_limit("FERRY_ELTWISE_ONE_THREAD_BYTES", kBinaryOneThreadBytes));
}

/// True when idle OpenMP threads block at once (OMP_WAIT_POLICY=PASSIVE: ferry's choice at start-up on a
/// crowded host, tools/omp_defaults.cpp, or the user's): each parallel region then pays a futex wake-up.
inline bool idle_threads_block() {
  const char* p = env_value("OMP_WAIT_POLICY");
  return p && (std::strcmp(p, "PASSIVE") == 0 || std::strcmp(p, "passive") == 0);
}

/// With blocking idle threads, int8 convolutions and products of fewer multiply-adds than this run on one
/// thread (issue 38): the depthwise kernel (int8_depthwise_conv.cpp), int8_im2col_conv.cpp's 1x1s, oneDNN's
/// int8 convolutions (dnnl_int8_conv.cpp) and cpu::int8_gemm. At 2-3x fp32's rate their small layers took
/// less than a wake-up and join of the second thread: MobileNetV2 int8 made 280 futex calls per run at 2
/// threads (fp32: 164), 24 with this rule (docs/performance.md, "Issue 38, session 25: MobileNetV2 int8 at
/// 2 threads"). Spinning idle threads (a quiet host) keep the split. FERRY_I8_ONE_THREAD_MACS overrides the limit.
constexpr int64_t kInt8OneThreadMacs = 12'000'000;
inline bool int8_on_one_thread(int64_t macs) {
  return idle_threads_block() && one_thread_for(macs, one_thread_limit("FERRY_I8_ONE_THREAD_MACS", kInt8OneThreadMacs));
}

/// Concat and Resize (data_movement.cpp) with a smaller output run on one thread: off by default
/// (0), FERRY_MOVE_ONE_THREAD_BYTES=N turns it on. UNet b1 at 2 threads, per node (`ferry profile -t
/// 2 --trace`, 25th percentile over two 2 s runs per setting, load 4.1 on the 2 cores) with N = 4
/// MiB: its 4 Resizes 0.285 -> 0.244 ms per run, 4 Concats 0.261 -> 0.214 (the largest, 2.4 MB,
/// 0.139 -> 0.128; on one thread at -t 1 they took 0.10-0.11 ms, so two threads gain nothing even
/// there); whole-model runs at that load were too noisy to show the ~0.1 ms (wall twice the CPU
/// time), so it stays off until an interleaved A/B on a quieter host shows it.
constexpr int64_t kMoveOneThreadBytes = 0;
inline bool move_on_one_thread(int64_t out_bytes) {
  return one_thread_for(out_bytes, one_thread_limit("FERRY_MOVE_ONE_THREAD_BYTES", kMoveOneThreadBytes));
}

}  // namespace ferry::cpu

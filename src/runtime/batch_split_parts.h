// The parts of a split batch (runtime/batch_split.h) run side by side: with T intra-op threads and
// a multiple of T parts, each thread runs whole parts on its own (every kernel single-threaded)
// instead of every node being split over all T threads. No fork-join per node, no node's work
// divided into per-thread slivers; each part's tensors stay in one core's caches.
#pragma once

#include <cstdint>
#include <functional>

namespace ferry {

/// How many parts run at once for `parts` parts of a batch: FERRY_SPLIT_LANES=N asks for N lanes
/// (at most the intra-op threads), taken where there are at least two, N divides the parts, and
/// this is not already inside a parallel region; else 1 (one part after the other, each on every
/// thread). Unset: 1 (off by default until measured faster on a quiet machine).
int batch_split_lanes(int64_t parts);

/// Calls job(i) for every part i in [0, parts), `lanes` parts at a time, each lane on its own
/// thread with one intra-op thread for the kernels it calls. lanes <= 1: one after the other on
/// the calling thread. The intra-op thread count is the caller's again afterwards.
void run_batch_parts(int64_t parts, int lanes, const std::function<void(int64_t)>& job);

/// How many times run_batch_parts has run parts side by side (tests: that the path fired).
int64_t batch_split_concurrent_runs();

}  // namespace ferry

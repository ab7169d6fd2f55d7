// Intra-op parallelism for the CPU kernels: OpenMP loops over independent ranges, run serially
// when the work is too small to pay for waking the team (or when already inside a parallel region).
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>

namespace ferry {

/// Calls fn(begin, end) over [0, n) split into contiguous chunks, one per thread, when
/// n * cost_per_item exceeds a threshold (cost in rough "element operations").
template <typename F>
void parallel_ranges(int64_t n, int64_t cost_per_item, F fn) {
  constexpr int64_t kMinParallelWork = 1 << 15;
  const int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  if (threads <= 1 || n < 2 || n * cost_per_item < kMinParallelWork) {
    fn(int64_t{0}, n);
    return;
  }
  const int64_t chunks = std::min<int64_t>(n, threads);
#pragma omp parallel for num_threads(static_cast<int>(chunks)) schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = n * c / chunks, end = n * (c + 1) / chunks;
    fn(begin, end);
  }
}

}  // namespace ferry

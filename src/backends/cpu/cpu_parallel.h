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

/// Below this many bytes read + written, a oneDNN pooling runs on one thread: measured with
/// `ferry profile -t 2` on EfficientNet-B0 b1 (2 cores), its 17 global average pools took 0.312 ms
/// split over two threads and 0.238 ms on one. (Elementwise kernels, by contrast, gain from the
/// split even when small: their input is already spread over both cores' caches.)
constexpr int64_t kMinParallelBytes = int64_t{8} << 20;

/// OpenMP regions limited to one thread for this scope (oneDNN primitives created here are planned
/// for one thread: they run inside ferry's own parallel regions); the thread count is restored on exit.
class SingleThreadScope {
 public:
  SingleThreadScope() : saved_(omp_get_max_threads()) { omp_set_num_threads(1); }
  ~SingleThreadScope() { omp_set_num_threads(saved_); }
  SingleThreadScope(const SingleThreadScope&) = delete;
  SingleThreadScope& operator=(const SingleThreadScope&) = delete;

 private:
  int saved_;
};

/// Runs fn() with OpenMP regions limited to one thread when `bytes` of memory-bound work is too
/// small to split (for library calls such as oneDNN pooling that size their own teams).
template <typename F>
auto with_threads_for_bytes(int64_t bytes, F fn) {
  if (bytes >= kMinParallelBytes || omp_in_parallel() || omp_get_max_threads() <= 1) return fn();
  SingleThreadScope one;
  return fn();
}

}  // namespace ferry

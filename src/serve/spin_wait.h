// A bounded, adaptive spin before a blocking wait, for the I/O loops of `ferry serve` (HTTP I/O
// threads, gRPC ModelInfer pollers) and the clients of `ferry perf`. On this kind of VM a thread
// blocked in epoll_wait / recv is woken 35-40 us after its data arrives (an idle vCPU's wake-up:
// bench/tcp_pingpong_probe.c), twice per request at concurrency 1; polling without blocking for a
// short while right after work catches the next request or the response without that wake-up.
// Bounded as ONNX Runtime's spinning thread pool: a spin starts only right after work (so an idle
// server blocks within one budget of its last request), never when the machine's cores are all
// busy (the spinner would take a core from the compute), and after a few spins in a row found
// nothing (a model whose response takes longer than the budget) only one time in 16.
#pragma once

#include <chrono>
#include <cstdint>

namespace ferry::serve {

/// Default spin budget of `ferry serve` / `ferry perf --io-spin-microseconds`: 200 us. On a quiet
/// machine (load 1.2-1.7) it takes concurrency 1's overhead from +161 to +56 us over HTTP binary, and
/// costs 3-5% of HTTP throughput at concurrency 16; at load ~3 it cost up to 45 us (docs/serving.md
/// "Spinning before blocking").
constexpr int64_t kDefaultIoSpinMicroseconds = 200;

/// Whether a thread that spins would not take a core from another: the machine's runnable tasks
/// (the calling thread included; /proc/loadavg) are no more than its online cores. Read at most
/// once a millisecond per thread; true where /proc/loadavg cannot be read.
bool cores_free();

class SpinWait {
 public:
  /// budget_us <= 0: never spin. `may_spin`: whether a spin may start now (cores_free; tests
  /// pass their own).
  explicit SpinWait(int64_t budget_us, bool (*may_spin)() = cores_free) : budget_ns_(budget_us * 1000), may_spin_(may_spin) {}
  /// Work was just done (a handler ran, a request went out): a spin of the budget may follow. Work
  /// found while a spin is on counts as a hit.
  void arm();
  /// A non-blocking poll found nothing: true to poll again (after a pause), false to block now.
  bool again();
  /// Whether a spin is on (armed and not yet run out).
  bool spinning() const { return armed_; }
  /// Spins that found work / that ran out (for tests and logs).
  uint64_t hits() const { return hits_; }
  uint64_t misses() const { return total_misses_; }

  /// Spins in a row that found nothing, after which a spin starts only one time in kProbeEvery.
  static constexpr int kMaxMisses = 3;
  static constexpr unsigned kProbeEvery = 16;
  /// A gap this long between two polls of one spin: the spinner was preempted (another task
  /// wanted its core), so it blocks instead.
  static constexpr int64_t kPreemptedNs = 50000;

 private:
  using Clock = std::chrono::steady_clock;
  int64_t budget_ns_;
  bool (*may_spin_)();
  Clock::time_point deadline_{}, last_{};
  bool armed_ = false;
  int misses_ = 0;  // in a row
  unsigned skipped_ = 0;
  uint64_t hits_ = 0, total_misses_ = 0;
};

}  // namespace ferry::serve

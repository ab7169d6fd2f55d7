// What `ferry serve`'s per-request statistics cost: the updates src/serve/served_model.cpp makes to a
// model's ModelStats (serve/inference_types.h) for one request run alone (a batch of one), the
// counters that /metrics and the statistics extension both read, on one thread and on THREADS
// threads sharing one ModelStats (their cache lines then move between cores, the contended case of
// concurrent requests). Prints ns per request (docs/serving.md, "Metrics"). Build after the main
// build (one command line):
//   g++ -O2 -std=c++17 -Isrc -Ibuild/generated bench/serve_stats_probe.cpp -lpthread -o /tmp/serve_stats_probe
//   /tmp/serve_stats_probe [REQUESTS] [THREADS]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "serve/inference_types.h"

namespace {

using Clock = std::chrono::steady_clock;
using ferry::serve::kLatencyBucketsUs;
using ferry::serve::ModelStats;

uint64_t ns_between(Clock::time_point a, Clock::time_point b) {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(b - a).count());
}

// One request's updates, in served_model.cpp's order. The steady-clock reads that the trace, the
// inline policy or the queue also need (enqueue, run start, infer start and end) are not counted:
// `t` stands for them; the clock reads made only for the statistics are.
void one_request(ModelStats& s, Clock::time_point t) {
  constexpr auto r = std::memory_order_relaxed;
  // run_batch: the queue time; the batch's compute, counts, batch size 1, last inference.
  s.queue_count.fetch_add(1, r);
  s.queue_ns.fetch_add(ns_between(t, t), r);
  s.compute_input_ns.fetch_add(ns_between(t, t), r);
  s.compute_infer_ns.fetch_add(ns_between(t, t), r);
  s.execution_count.fetch_add(1, r);
  s.inference_count.fetch_add(1, r);
  s.batch_count[1].fetch_add(1, r);
  s.batch_ns[1].fetch_add(ns_between(t, t), r);
  s.last_inference_ms.store(static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                std::chrono::system_clock::now().time_since_epoch()).count()), r);
  // finish: success, its time, the latency histogram.
  const uint64_t ns = ns_between(t, Clock::now());
  s.success_count.fetch_add(1, r);
  s.success_ns.fetch_add(ns, r);
  const uint64_t us = ns / 1000;
  size_t b = 0;
  while (b < kLatencyBucketsUs.size() && us > kLatencyBucketsUs[b]) ++b;
  s.latency_buckets[b].fetch_add(1, r);
  s.latency_sum_us.fetch_add(us, r);
  // run_batch, after the outputs were handed over: the output time.
  s.compute_output_ns.fetch_add(ns_between(t, Clock::now()), r);
}

double ns_per_request(ModelStats& s, int threads, long requests) {
  std::vector<std::thread> pool;
  const auto t0 = Clock::now();
  for (int i = 0; i < threads; ++i)
    pool.emplace_back([&s, requests] {
      const auto t = Clock::now();
      for (long k = 0; k < requests; ++k) one_request(s, t);
    });
  for (auto& th : pool) th.join();
  // Each thread's requests took this long: the time one request's updates add to its thread.
  return static_cast<double>(ns_between(t0, Clock::now())) / static_cast<double>(requests);
}

}  // namespace

int main(int argc, char** argv) {
  const long requests = argc > 1 ? std::atol(argv[1]) : 2000000;
  const int threads = argc > 2 ? std::atoi(argv[2]) : 2;
  ModelStats s;
  s.max_batch = 1;
  s.batch_count.reset(new std::atomic<uint64_t>[2]());
  s.batch_ns.reset(new std::atomic<uint64_t>[2]());
  for (int round = 0; round < 3; ++round)
    std::printf("round %d: 1 thread %.1f ns/request, %d threads sharing the counters %.1f ns/request\n", round + 1,
                ns_per_request(s, 1, requests), threads, ns_per_request(s, threads, requests));
  return s.success_count.load() > 0 ? 0 : 1;
}

// The serving layer's plain types, shared by the protocol codecs (ferry_serve_protocol: no
// runtime) and the scheduler (ferry_serve): requests, results, statistics counters, index rows.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "ir/tensor.h"
#include "serve/model_config.h"

namespace ferry::serve {

/// Tensors by name (the runtime's NamedTensors).
using TensorList = std::vector<std::pair<std::string, Tensor>>;

/// Why a request failed, as the metrics' reason label (Triton's).
enum class FailureReason : int { kRejected = 0, kCanceled = 1, kBackend = 2, kOther = 3 };
inline const char* failure_reason_name(FailureReason r) {
  switch (r) {
    case FailureReason::kRejected: return "REJECTED";
    case FailureReason::kCanceled: return "CANCELED";
    case FailureReason::kBackend: return "BACKEND";
    default: return "OTHER";
  }
}

/// A request's cancellation: the front end sets it when the client goes away (an HTTP client
/// disconnected, a gRPC call or stream was cancelled; a stream's requests share one). A model that
/// queued a request under it listens: set() tells it at once, on the setting thread, and it drops
/// the request from its queue then (CANCELED), freeing its max_queue_size slot; a request already
/// taken into a batch runs, and its answer goes nowhere.
class Cancellation {
 public:
  class Listener {
   public:
    virtual void on_cancel() = 0;

   protected:
    ~Listener() = default;
  };
  bool is_set() const { return set_.load(std::memory_order_acquire); }
  void set() {
    std::vector<std::weak_ptr<Listener>> told;
    {
      std::lock_guard<std::mutex> lock(mu_);
      set_.store(true, std::memory_order_release);
      told.swap(listeners_);
    }
    for (auto& w : told)
      if (auto l = w.lock()) l->on_cancel();
  }
  /// `l` is told on set(), or now when it was set already; held weakly, once however often it listens.
  void listen(const std::weak_ptr<Listener>& l) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!set_.load(std::memory_order_relaxed)) {
        bool known = false;
        for (auto it = listeners_.begin(); it != listeners_.end();) {
          if (it->expired()) {
            it = listeners_.erase(it);
            continue;
          }
          known = known || (!it->owner_before(l) && !l.owner_before(*it));
          ++it;
        }
        if (!known) listeners_.push_back(l);
        return;
      }
    }
    if (auto p = l.lock()) p->on_cancel();
  }
  /// For a new call reusing it (nothing holds it any more).
  void reset() {
    std::lock_guard<std::mutex> lock(mu_);
    set_.store(false, std::memory_order_relaxed);
    listeners_.clear();
  }

 private:
  std::atomic<bool> set_{false};
  std::mutex mu_;
  std::vector<std::weak_ptr<Listener>> listeners_;
};

struct InferRequest {
  std::string id;
  /// Validated against the config by the front end: every input, its dtype and its full shape
  /// (batch axis included when max_batch_size > 0).
  TensorList inputs;
  /// Rows along the batch axis (1 when the model does not batch).
  int64_t batch = 1;
  /// The request's own `timeout` parameter in µs (0: none); see ModelQueuePolicy.
  uint64_t timeout_us = 0;
  /// Set by the front end when the client goes away: a queued request is then dropped (CANCELED).
  std::shared_ptr<Cancellation> cancelled;
  /// The request named its model version (a replaced version forwards it only to the same number).
  bool version_pinned = false;
};

/// When a request passed the batcher's steps, steady-clock ns (0: it did not reach the step); what
/// the trace extension (serve/trace.h) records.
struct InferTimestamps {
  int64_t queue_start = 0, compute_start = 0, compute_input_end = 0, compute_output_start = 0, compute_end = 0;
};

struct InferResult {
  Status status;
  /// When !status.is_ok(): why (REJECTED: queue full or timed out before it ran; answered 503).
  FailureReason reason = FailureReason::kOther;
  /// Every output of the model, in the config's order, this request's rows only.
  TensorList outputs;
  /// The version that ran it (another than the one enqueued to when that one was replaced and
  /// forwarded it to its successor); 0 when it did not run.
  int64_t version = 0;
  InferTimestamps timestamps;
};

using InferCallback = std::function<void(InferResult)>;

/// What a request is checked against: the served model's name, version and tensors.
struct ModelSignature {
  std::string name;
  int64_t version = 1;
  std::string platform;
  /// > 0: every tensor has a leading batch axis of 1..max_batch rows (not in the specs' dims).
  int32_t max_batch = 0;
  std::vector<TensorSpec> inputs, outputs;
};

/// Latency histogram bounds (µs) of ferry_inference_request_duration_us.
constexpr std::array<uint64_t, 14> kLatencyBucketsUs = {100,   250,    500,    1000,   2500,    5000,    10000,
                                                        25000, 50000, 100000, 250000, 500000, 1000000, 5000000};

/// Counters of one model version; all atomics, so recording costs no lock.
struct ModelStats {
  std::atomic<uint64_t> success_count{0}, success_ns{0};
  std::atomic<uint64_t> fail_count{0}, fail_ns{0};
  std::array<std::atomic<uint64_t>, 4> fail_by_reason{};
  std::atomic<uint64_t> queue_count{0}, queue_ns{0};
  std::atomic<uint64_t> compute_input_ns{0}, compute_infer_ns{0}, compute_output_ns{0};
  std::atomic<uint64_t> inference_count{0};  // batch items run
  std::atomic<uint64_t> execution_count{0};  // model executions
  std::atomic<uint64_t> last_inference_ms{0};
  std::array<std::atomic<uint64_t>, kLatencyBucketsUs.size() + 1> latency_buckets{};  // last: +Inf
  std::atomic<uint64_t> latency_sum_us{0};
  /// Executions per batch size (index = batch size, 0 unused) and their compute time.
  std::unique_ptr<std::atomic<uint64_t>[]> batch_count, batch_ns;
  int64_t max_batch = 0;
};

/// One model's statistics summed over its versions (the fields `ferry perf` reports).
struct StatsTotals {
  uint64_t success = 0, queue_ns = 0, queue_count = 0, infer_ns = 0, inferences = 0, executions = 0;
};

/// One row of the repository index.
struct IndexEntry {
  std::string name;
  std::string version;  // "" when the row is about the whole model
  std::string state;    // READY, UNAVAILABLE
  std::string reason;
};

}  // namespace ferry::serve

// One version of one model being served: its Session (weights loaded once, shared by every
// instance), the dynamic batcher (one bounded queue, instance threads that merge queued requests
// along the batch axis and split the results back) and its statistics (atomics, read by the
// statistics endpoint and /metrics). Free of HTTP and protobuf wire formats: testable without a socket.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "compiler/session.h"
#include "serve/inference_types.h"
#include "serve/model_config.h"

namespace ferry::serve {

struct ServeOptions {
  std::string device = "cpu";
  /// Compute threads of this model, divided between its instances (0: the machine's cores).
  int threads = 0;
  /// Triton's auto-complete: a model without config.pbtxt, or a config that lists no inputs or
  /// outputs, gets them from the model. false: --disable-auto-complete-config (or Triton's older
  /// --strict-model-config true): every model needs a config.pbtxt that lists them.
  bool auto_complete_config = true;
};

/// When enqueue() may run a request on the caller's thread (see there).
enum class InlinePolicy {
  kInstanceFree,  // an instance is free and the queue empty (callers on many threads: HTTP)
  kIdle,          // nothing queued or running (a caller that is one thread for every client)
  kNever,
};

class ServedModel : public Cancellation::Listener, public std::enable_shared_from_this<ServedModel> {
 public:
  /// Loads `path` (model.onnx or model.ferry) and starts one thread per instance. `config` is
  /// completed and validated against the model here; warnings are appended. `labels`: the outputs'
  /// classification labels (read_output_labels), attached to the signature's output specs.
  static StatusOr<std::shared_ptr<ServedModel>> load(const std::string& name, int64_t version, const std::string& path,
                                                     inference::ModelConfig config, const ServeOptions& options,
                                                     std::vector<std::string>* warnings, const OutputLabels& labels = {});
  ~ServedModel();

  /// Queues a request; `done` runs exactly once, on an instance thread, or on this thread before
  /// enqueue returns: when the queue is full or the model is stopping, and when the request runs
  /// inline (below).
  ///
  /// Inline: a request that finds the queue empty and an instance idle, on a model that does not
  /// wait to batch (no dynamic_batching, or max_queue_delay_microseconds 0), runs on the calling
  /// thread in that instance's place, without the hand-off to the instance thread and back (two
  /// thread wake-ups, the bulk of the served overhead at low concurrency). It counts against the
  /// instances: at most instance_group count runs at once, inline or not; what finds them all busy
  /// is queued and batched as before. Only while the model's recent executions took under
  /// kInlineMaxNs: a longer run goes to an instance thread, so that the caller (an I/O thread with
  /// other connections to serve) is never held long; there the hand-off is a small part.
  void enqueue(InferRequest request, InferCallback done, InlinePolicy policy = InlinePolicy::kInstanceFree);
  static constexpr uint64_t kInlineMaxNs = 1000000;
  /// Stops taking requests, runs what is queued, joins the instance threads.
  void stop() { retire(nullptr); }
  /// stop() for a version that `successor` replaces (a reload, or a new version in its place): a
  /// request that found this version before the swap and reaches its queue after it goes to the
  /// successor instead of being refused, when the successor takes the same tensors (inputs,
  /// outputs, max_batch_size) and, for a request that named its version, has the same number.
  void retire(std::shared_ptr<ServedModel> successor);

  const std::string& name() const { return name_; }
  int64_t version() const { return version_; }
  const inference::ModelConfig& config() const { return config_; }
  const std::vector<TensorSpec>& inputs() const { return inputs_; }
  const std::vector<TensorSpec>& outputs() const { return outputs_; }
  const ModelStats& stats() const { return stats_; }
  const ModelSignature& signature() const { return signature_; }
  /// Requests queued or running.
  int64_t pending() const { return pending_.load(std::memory_order_relaxed); }
  int threads_per_instance() const { return threads_per_instance_; }
  /// A queued request's client went away (Cancellation::set): the cancelled requests leave the
  /// queue now, answered CANCELED on this thread, not when the batcher next wakes.
  void on_cancel() override;

 private:
  struct Entry {
    InferRequest request;
    InferCallback done;
    std::chrono::steady_clock::time_point enqueued;
    std::chrono::steady_clock::time_point deadline;  // max(): no timeout
  };
  ServedModel() = default;
  void instance_loop();
  /// Takes the next batch from the queue (lock held); empty when there is none yet.
  std::vector<Entry> take_batch(std::unique_lock<std::mutex>& lock);
  /// The cancelled and timed-out requests, out of the queue (lock held); then answered by drop().
  std::vector<Entry> take_dropped(std::chrono::steady_clock::time_point now);
  void drop(std::vector<Entry>& dropped, std::chrono::steady_clock::time_point now);
  void run_batch(std::vector<Entry> batch);
  void finish(Entry& e, InferResult result);
  /// `t` (batch axis first when max_batch_size > 0) with `r` applied to the dims after that axis.
  StatusOr<Tensor> reshaped(const Tensor& t, const TensorReshape& r) const;

  std::string name_;
  int64_t version_ = 0;
  inference::ModelConfig config_;
  std::vector<TensorSpec> inputs_, outputs_;
  std::vector<TensorReshape> input_reshapes_, output_reshapes_;  // config.pbtxt `reshape`s
  ModelSignature signature_;
  std::shared_ptr<Session> session_;
  int threads_per_instance_ = 1;
  int32_t max_batch_ = 0;
  bool dynamic_batching_ = false;
  int64_t target_batch_ = 1;  // run at once when this many rows are queued
  std::chrono::microseconds max_delay_{0};
  uint32_t max_queue_size_ = 0;
  uint64_t default_timeout_us_ = 0;
  bool allow_timeout_override_ = false;
  int instances_ = 1;
  bool run_inline_ = false;  // no batching delay: see enqueue()

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Entry> queue_;
  bool stopping_ = false;
  int busy_ = 0;  // instances running a batch, on their thread or inline
  std::shared_ptr<ServedModel> successor_;  // set with stopping_ by retire()
  std::vector<std::thread> threads_;
  std::atomic<int64_t> pending_{0};
  std::atomic<uint64_t> recent_run_ns_{0};  // executions' time, a moving average (3/4 old, 1/4 new)
  ModelStats stats_;
};

}  // namespace ferry::serve

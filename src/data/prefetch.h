// Prefetcher: loads the batches of coming training steps on background threads so a step finds
// its data ready. The caller requests step N's batch ahead of time and takes it when step N runs:
//   for (s = 0; s < depth; ++s) prefetcher.request(s, batch_indices(s), seed);
//   for (s = 0; s < steps; ++s) {
//     ASSIGN_OR_RETURN(Batch b, prefetcher.take(s, &wait_ms));
//     if (s + depth < steps) RETURN_IF_ERROR(prefetcher.request(s + depth, batch_indices(s + depth), seed));
//     ...
//   }
// Each batch is split into parts (up to one per thread) loaded in parallel and joined in order,
// so it relies on the Dataset's samples depending only on (index, seed), as ImageFolderDataset's
// and NpzDataset's do.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "common/status.h"
#include "data/dataset.h"

namespace ferry {

class Prefetcher {
 public:
  /// `dataset` must outlive the prefetcher. `threads` background loaders (0: take() loads
  /// synchronously); at most `max_queued` batches requested and not yet taken (at least 1).
  Prefetcher(const Dataset* dataset, int threads, int max_queued = 3);
  /// Drops queued work, lets running parts finish, and joins the threads.
  ~Prefetcher();
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;

  /// Queues the batch of `step`: samples `indices` with random-transform seed `seed`. Fails
  /// (kInternal: a caller bug) when the step is already queued or max_queued batches wait.
  Status request(int64_t step, std::vector<int64_t> indices, uint64_t seed);

  /// Returns the batch of `step` once loaded (its loading error, if any, naming the sample).
  /// `waited_ms` (optional) receives how long the call blocked (with threads == 0: the load).
  StatusOr<Batch> take(int64_t step, double* waited_ms = nullptr);

  /// Batches requested and not yet taken.
  int64_t queued() const;
  int max_queued() const { return max_queued_; }
  int threads() const { return static_cast<int>(workers_.size()); }

 private:
  struct Job {
    std::vector<int64_t> indices;
    uint64_t seed = 0;
    std::vector<Batch> parts;
    std::vector<Status> part_status;
    size_t parts_done = 0;
  };
  struct Task {
    std::shared_ptr<Job> job;
    size_t part = 0;
    int64_t begin = 0, end = 0;
  };
  void worker_loop();
  static StatusOr<Batch> assemble(Job& job);

  const Dataset* dataset_;
  int max_queued_;
  mutable std::mutex mu_;
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  std::deque<Task> tasks_;
  std::map<int64_t, std::shared_ptr<Job>> jobs_;
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

/// Joins batches row-wise (same inputs, dtypes and per-sample dims): inputs, labels, indices.
StatusOr<Batch> concat_batches(const std::vector<Batch>& parts);

}  // namespace ferry

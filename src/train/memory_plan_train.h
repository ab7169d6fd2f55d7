// The training memory plan: what a `ferry train` run will hold at its peak, computed from the
// planned training graph before anything is allocated: weights, gradients, optimizer state,
// the executor's activation arena (saved activations + workspace tensors, placed by the same
// planner the executor uses: runtime/memory_plan.h), the convolutions' layout buffers, data
// buffers and the process itself (measured when planning: code, libraries, the loaded model).
// Against the measured peak RSS (VmHWM) of `ferry train`: ResNet-50 b8 within 1%, with and
// without --recompute (docs/training.md); tests/train/check_train_memory.py holds it to 15%.
// `--plan-memory` prints it; `--memory-limit` refuses a run that would not fit.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "common/status.h"
#include "ir/graph.h"

namespace ferry {

struct TrainMemoryPlan {
  int64_t batch = 0, accumulate = 1;
  int64_t weights = 0;          // parameters and BN statistics (f32 master copies)
  int64_t gradients = 0;        // one per parameter (two with accumulation: the sum and the next)
  int64_t optimizer_state = 0;  // momentum / Adam moments
  int64_t activations = 0;      // the executor's arena: saved activations and backward temporaries
  int64_t data_buffers = 0;     // batches in flight (prefetch queue + the step's)
  int64_t workspace = 0;        // kernels' own buffers: the convolutions' blocked-layout copies
  int64_t runtime = 0;          // the process when planning, less the weights: code, libraries, model (measured)
  int64_t startup_peak = 0;     // the process's peak before planning (measured: loading, building graphs)
  std::string peak_node;        // where the activation peak is
  int64_t parts() const {
    return weights + gradients + optimizer_state + activations + workspace + data_buffers + runtime;
  }
  /// The run's peak: the parts held at once, or the peak the process already reached.
  int64_t total() const { return parts() > startup_peak ? parts() : startup_peak; }
};

/// What the plan needs besides the graph.
struct TrainMemoryInputs {
  int64_t batch = 1, accumulate = 1;
  int64_t param_bytes = 0, state_bytes = 0, grad_bytes = 0;
  int optimizer_slots = 0;  // optimizer state tensors per parameter (sgd momentum 1, adam 2)
  int batches_in_flight = 4;
};

/// Plans `model` (the training graph as the executor runs it, optimized, static shapes).
StatusOr<TrainMemoryPlan> plan_train_memory(const Model& model, const TrainMemoryInputs& in);

/// The largest batch (1 .. 1<<20) whose plan fits `limit`; `plan_at(b)` plans batch b. 0: none.
StatusOr<int64_t> largest_batch_that_fits(int64_t limit, const TrainMemoryPlan& at_batch,
                                          const std::function<StatusOr<TrainMemoryPlan>(int64_t)>& plan_at);

/// Text (one line per part) or JSON of the plan, with the limit and the largest batch.
std::string format_train_memory(const TrainMemoryPlan& p, int64_t limit, int64_t largest_batch, bool json);

}  // namespace ferry

// Training driven one step at a time by the caller (the Python package's ferry.Trainer): the
// caller brings each batch (its own data pipeline), the step is `ferry train`'s (train/trainer.h):
// the same training graph, feeds (dropout seeds from (seed, step), dLoss = loss scale), gradient
// unscaling, clipping, schedule and optimizer, so the same batches in the same order give the same
// losses. Checkpoints use `ferry train`'s tensor names (param/, optim/, scaler/) and carry the
// configuration, so StepTrainer::resume rebuilds the trainer from the folder alone.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "runtime/executor.h"
#include "train/trainer.h"

namespace ferry {

struct StepResult {
  int64_t step = 0;
  double loss = 0, lr = 0, time_ms = 0;
  double loss_scale = 0;  // 0: no loss scaling
  bool skipped = false;   // inf/NaN gradients under loss scaling: the weights were left as they were
};

struct EvalResult {
  double loss = 0;
  double accuracy = 0;  // cross_entropy only
  int64_t samples = 0;
};

class StepTrainer {
 public:
  /// Uses of `config`: model, batch_size, seed, threads, device, opt_level, optimizer, schedule
  /// (total_steps = config.steps, needed by cosine / onecycle), clip_grad_norm, loss,
  /// label_smoothing, freeze, num_classes, amp, keep_fp32, loss_scaling / scaler, recompute_segments.
  static StatusOr<std::unique_ptr<StepTrainer>> create(const TrainConfig& config);
  /// Rebuilds the trainer a checkpoint folder (or file) was written by, at its step.
  static StatusOr<std::unique_ptr<StepTrainer>> resume(const std::string& path);
  ~StepTrainer();

  /// One optimizer step on a batch: `inputs` by model input name ([batch_size, ...] each), labels
  /// int64 [batch_size] (cross_entropy) or float targets shaped as the output (mse).
  StatusOr<StepResult> step(const NamedTensors& inputs, const Tensor& labels);
  /// Loss (and accuracy) of the current weights on a batch of any size, as inference runs them.
  StatusOr<EvalResult> evaluate(const NamedTensors& inputs, const Tensor& labels);
  /// Writes the inference model with the current weights (`ferry train --out`).
  Status export_model(const std::string& path) const;
  /// Writes a checkpoint into `dir` (keeps the last `keep`).
  Status save_checkpoint(const std::string& dir, int keep = 3) const;

  int64_t steps_done() const { return step_; }
  const TrainConfig& config() const { return c_; }
  /// The data inputs a step takes (name, dtype, per-sample dims).
  const std::vector<ValueInfo>& data_inputs() const { return data_inputs_; }
  /// Current parameters and BN statistics (f32), by name.
  const std::map<std::string, Tensor>& weights() const { return values_; }

 private:
  StepTrainer() = default;
  Status setup();
  TrainConfig c_;
  struct State;
  std::unique_ptr<State> s_;
  std::map<std::string, Tensor> values_;
  std::vector<ValueInfo> data_inputs_;
  int64_t step_ = 0;
};

}  // namespace ferry

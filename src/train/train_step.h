// The parts of a training step that `ferry train` (train/trainer.cpp) and ferry.Trainer
// (train/step_trainer.cpp) share, in one place so the two cannot drift apart: the same training
// graph and executor options, the same feeds (dropout seeds from (seed, micro-batch), dLoss), the
// same update (GradScaler unscale and skip, clipping, schedule, optimizer), the same checkpoint
// tensors and the same evaluation loss.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "common/status.h"
#include "format/checkpoint.h"
#include "runtime/executor.h"
#include "train/grad_scaler.h"
#include "train/lr_schedule.h"
#include "train/optimizer.h"
#include "train/trainer.h"
#include "train/training_graph.h"

namespace ferry {

/// The training graph's options from the run's configuration (`ferry train` adds --sync-bn).
StatusOr<TrainGraphOptions> train_graph_options(const TrainConfig& c);
/// The executor's options for the training graph: no batch split (the loss mixes the batch's
/// rows), no huge pages for a fresh arena (see Trainer::setup).
ExecutorOptions train_executor_options(const TrainConfig& c);

/// The feeds of micro-batch `m` (1-based) of the data stream: `inputs`, the labels, the weights
/// and BN statistics (`values`), the dropout seeds drawn from (seed, m) and dLoss = `loss_seed`.
NamedTensors train_step_feeds(const TrainGraph& tg, const NamedTensors& inputs, const Tensor& labels,
                              const std::map<std::string, Tensor>& values, uint64_t seed, int64_t m, float loss_seed,
                              bool loss_seed_f64);

struct StepUpdate {
  double lr = 0;
  bool skipped = false;    // inf/NaN gradients (or loss) under loss scaling: weights left as they were
  double update_ms = 0;    // the optimizer's step
};
/// After the backward of step k (1-based): GradScaler unscale (an overflow skips the step),
/// gradient clipping, the schedule's lr, the scaler's update and the optimizer's step on `values`.
/// `scaler` null: no loss scaling.
StatusOr<StepUpdate> apply_step_update(const TrainConfig& c, const ScheduleConfig& schedule, const TrainGraph& tg,
                                       int64_t k, double loss, std::map<std::string, Tensor>* grads,
                                       std::map<std::string, Tensor>* values, GradScaler* scaler, Optimizer* optimizer);

/// The checkpoint's tensors: param/ (weights and BN statistics), optim/, scaler/ (when scaling),
/// sharing the live buffers (write the checkpoint before the next step).
void add_checkpoint_tensors(const std::map<std::string, Tensor>& values, const Optimizer& optimizer,
                            const GradScaler* scaler, Checkpoint* ck);
/// Restores them from checkpoint `path`, consuming `ck`'s tensors (the weights copied into `values`'
/// own storage, which the training graph and the source model share, each freed once copied; the
/// optimizer state taken as it is): a resume holds each once. The errors name the checkpoint and
/// the tensor. `no_scaler_fix`: what to do when the run scales the loss and the checkpoint has no scaler/.
Status restore_checkpoint_tensors(Checkpoint* ck, const std::string& path, std::map<std::string, Tensor>* values,
                                  Optimizer* optimizer, GradScaler* scaler, const std::string& no_scaler_fix);

/// Adds the loss (and for cross_entropy the correct predictions) of the first `rows` rows of the
/// inference model's output `y` against `labels`, as PyTorch's criterion with the run's label
/// smoothing: cross_entropy wants [N, C] logits and int64 class labels, mse targets shaped as y.
Status add_eval_rows(const TrainConfig& c, const Tensor& y, const Tensor& labels, int64_t rows, double* loss_sum,
                     int64_t* correct);

}  // namespace ferry

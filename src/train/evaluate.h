// Evaluation of a model being trained, shared by `ferry train` (train/trainer.cpp, after each
// epoch and at the end) and ferry.Trainer (train/step_trainer.cpp): the inference model of the
// current weights on its own executor, and the loss / accuracy sums over a data set.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "common/status.h"
#include "runtime/executor.h"
#include "train/trainer.h"
#include "train/training_graph.h"

namespace ferry {

class Dataset;

/// An executor of the inference model of `weights` (params and BN statistics): BatchNorm in its
/// inference form, at the device's defaults (c.device, c.threads). Each weight it packs is held
/// once (ExecutorOptions::release_weights: the BN-folded copies go once packed). batch > 0: the
/// only batch it will run (evaluate_dataset's c.batch_size), so every weight is packed, and its
/// copy released, when the executor is made; 0 keeps the batch dimension symbolic.
StatusOr<std::unique_ptr<Executor>> make_eval_executor(const TrainConfig& c, const Model& source, const TrainGraph& tg,
                                                       const std::map<std::string, Tensor>& weights, int64_t batch = 0);

/// The loss summed over a data set's samples and how many the model classified right
/// (cross_entropy), for the mean loss and accuracy.
struct EvalSums {
  int64_t samples = 0;
  double loss_sum = 0;
  int64_t correct = 0;
};

/// Runs `ex` over every sample of `data` in order, c.batch_size at a time (a short last batch
/// padded with its last sample, for fixed-batch models; the padding is not counted). Errors carry
/// the context "evaluation".
StatusOr<EvalSums> evaluate_dataset(const TrainConfig& c, Executor& ex, const Dataset& data);

}  // namespace ferry

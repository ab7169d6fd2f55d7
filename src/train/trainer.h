// The training loop of `ferry train`: data -> training graph (forward + loss + backward) on the
// executor -> gradient clipping -> optimizer step, with a JSONL log, evaluation, checkpoints,
// resume and the trained model written as ONNX.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "common/status.h"
#include "train/communicator.h"
#include "train/grad_scaler.h"
#include "train/lr_schedule.h"
#include "train/optimizer.h"

namespace ferry {

struct TrainConfig {
  std::string model;            // the exported .onnx
  std::string data;             // .npz or ImageFolder directory
  std::string eval_data;        // optional, same forms
  int64_t image_size = 224;
  int64_t batch_size = 1;
  int64_t steps = 0;            // optimizer steps (or epochs)
  int64_t epochs = 0;
  bool shuffle = true;
  uint64_t seed = 0;
  int threads = 0;              // 0: the machine's cores
  int data_workers = -1;        // image decoding threads; -1: chosen from the cores
  std::string device = "cpu";
  int opt_level = -1;           // graph optimization of the training graph (-1: default)
  OptimizerConfig optimizer;
  ScheduleConfig schedule;      // total_steps filled by the trainer
  double clip_grad_norm = 0.0;  // > 0: clip the global gradient norm
  std::string loss = "cross_entropy";
  double label_smoothing = 0.0;
  std::string freeze;           // regex of frozen parameter names
  int64_t num_classes = 0;      // > 0: fresh classifier
  std::string log_path;         // JSONL
  std::string out_path;         // trained inference model (.onnx)
  std::string checkpoint_dir;
  int64_t save_every = 0;
  int keep_checkpoints = 3;
  std::string resume;           // checkpoint file or directory (its latest)
  bool skip_bad_images = false;
  DistConfig dist;              // data parallel (train/ddp.h): this process's rank of world_size
  /// --sync-bn: BatchNorm statistics over every rank's batch (torch.nn.SyncBatchNorm); a world of
  /// one trains as without it. A model without BatchNormalization is refused.
  bool sync_bn = false;
  /// --amp: "bf16" or "fp16" autocasts the matrix ops (train/autocast.h); "" f32.
  std::string amp;
  /// --keep-fp32: nodes autocast leaves in f32.
  std::vector<std::string> keep_fp32;
  /// Loss scaling (grad_scaler.h): on with --amp fp16, --init-scale or --loss-scale.
  bool loss_scaling = false;
  GradScalerConfig scaler;
  /// Micro-batches of batch_size per optimizer step (gradients summed, loss divided by it).
  int64_t accumulate = 1;
  /// Activation recomputation: -1 off, 0 about sqrt(forward nodes) segments, N segments.
  int64_t recompute_segments = -1;
  /// Refuse (exit 2) a run whose training memory plan exceeds this; 0: no check.
  int64_t memory_limit = 0;
  /// Print the training memory plan (memory_plan_train.h) instead of training; as JSON.
  bool plan_memory = false;
  bool plan_json = false;
  /// Called once, just before the training executor is made: where the application sets
  /// process-wide state for the steps' allocation pattern (`ferry train`: glibc's malloc
  /// thresholds, tools/cmd_train.cpp). The library sets none itself.
  std::function<void()> before_executor;
};

/// What the CLI shows after each step (progress bar).
struct StepReport {
  int64_t step = 0, total_steps = 0, epoch = 0;
  double loss = 0, lr = 0, time_ms = 0, samples_per_s = 0, data_wait_ms = 0;
  double loss_scale = 0;  // 0: no loss scaling
  bool skipped = false;   // the step found inf/NaN gradients and left the weights as they were
  bool eval = false;
  double eval_loss = 0, eval_accuracy = 0;
};

struct TrainSummary {
  int64_t steps_done = 0;
  double last_loss = 0;
  double mean_step_ms = 0;
  std::vector<std::string> notes;  // things the user should know (skipped images, resumed from ...)
  std::string memory_plan;          // with TrainConfig::plan_memory: the plan, as text or JSON
  bool memory_fits = true;          // with plan_memory: the plan fits the limit (`ferry train --plan-memory` exits 2 if not)
};

/// What a run is about to do, reported once before its first step.
struct TrainStart {
  int64_t samples = 0, eval_samples = 0;
  int64_t classes = 0;                   // the classifier's outputs (0: mse)
  std::vector<std::string> class_names;  // an ImageFolder's, in label order
  int64_t image_size = 0;                // 0: the data are arrays, not images
  int64_t total_steps = 0, start_step = 0, batch_size = 0, accumulate = 1, world_size = 1;
  std::string device, optimizer;
  double lr = 0;
  std::string resumed_from;  // the checkpoint --resume read ("": a fresh start)
};

/// Runs the whole training. `on_step` (may be empty) is called after each step and evaluation,
/// `on_start` once after the data, model and any checkpoint are read, before the first step.
StatusOr<TrainSummary> run_training(const TrainConfig& config, const std::function<void(const StepReport&)>& on_step = {},
                                    const std::function<void(const TrainStart&)>& on_start = {});

}  // namespace ferry

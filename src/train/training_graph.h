// From an exported model to a training graph: BatchNormalization and Dropout take their
// training forms (com.ferry BatchNormTraining, SyncBatchNormTraining with sync_bn, TrainDropout),
// an optional fresh classifier replaces the last Gemm/MatMul, the loss is appended, trained
// parameters become graph inputs (so no pass ever takes them for constants) and the backward graph
// is built (grad/autodiff.h).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/status.h"
#include "ir/graph.h"

namespace ferry {

struct TrainGraphOptions {
  int64_t batch_size = 1;
  /// "cross_entropy" (labels are class indices) or "mse" (targets shaped as the output).
  std::string loss = "cross_entropy";
  double label_smoothing = 0.0;
  /// Parameters whose name matches this ECMAScript regex (std::regex_search) are frozen.
  std::string freeze;
  /// > 0: replace the last Gemm/MatMul classifier with a fresh one of this many outputs.
  int64_t num_classes = 0;
  /// Seeds the fresh classifier's initialization.
  uint64_t seed = 0;
  /// Activation recomputation (grad/recompute.h): -1 off, 0 about sqrt(forward nodes) segments,
  /// N > 0 that many segments.
  int64_t recompute_segments = -1;
  /// Backward's dLoss is the graph input TrainGraph::loss_seed (the trainer feeds loss scale /
  /// accumulation steps there); false: a constant 1.
  bool loss_seed_input = false;
  /// --amp: kBF16 / kF16 autocasts the forward's matrix ops (train/autocast.h); kF32 off.
  DType amp = DType::kF32;
  /// --keep-fp32: nodes (name or origin) autocast leaves in f32.
  std::vector<std::string> keep_fp32;
  /// --sync-bn in a job of more than one rank: BatchNormalization becomes com.ferry
  /// SyncBatchNormTraining, whose statistics span every rank's batch (torch.nn.SyncBatchNorm; the
  /// kernels exchange them through ops/kernel_collectives.h). false: each rank's own batch.
  bool sync_bn = false;
  /// Fuse BatchNormTraining -> Relu and ReluGrad -> BatchNormTrainingGrad (f32 without
  /// --recompute; FERRY_TRAIN_FUSE_BN_RELU=0 also turns it off, to compare).
  bool fuse_bn_relu = true;
};

/// A BatchNormalization's running statistic: fed as `input`, its update comes out as `output`.
struct StateUpdate {
  std::string input;
  std::string output;
};

struct TrainGraph {
  /// The training graph: forward + loss + backward. Inputs: the data inputs, `labels`, every
  /// trained parameter, every BN running statistic, every dropout seed. Outputs: `loss`, then one
  /// gradient per entry of `params` that has one, then the state updates.
  std::shared_ptr<Model> model;
  std::vector<std::string> data_inputs;
  std::string labels = "train/labels";
  std::string loss = "train/loss";
  /// dLoss fed to backward (the loss's type) with TrainGraphOptions::loss_seed_input: loss scale /
  /// accumulation steps, 1 for a plain step. Empty without it.
  std::string loss_seed;
  std::string logits;  // the model output the loss reads
  std::vector<std::string> params;                  // trained parameters, in initializer order
  std::map<std::string, std::string> grads;         // param -> gradient output (absent: no gradient)
  std::vector<StateUpdate> state;                   // BN running statistics
  std::vector<std::string> dropout_seeds;           // int64 scalar inputs, one per Dropout
  std::vector<std::string> frozen;                  // float initializers not trained
  /// Initial values of params and state (f32 copies the trainer owns), by name.
  std::map<std::string, Tensor> initial;
  /// The classifier replaced by --num-classes ("" when none) and its parameter names.
  std::string replaced_classifier;
  std::vector<std::string> fresh_params;
  int64_t num_classes = 0;  // the output's classes (dim 1 of the logits), 0 when unknown
  /// What --recompute did (segments 0 when off).
  int64_t recompute_segments = 0;
  int64_t recomputed_nodes = 0;
  /// BatchNormTraining -> Relu pairs fused (TrainGraphOptions::fuse_bn_relu).
  int64_t fused_bn_relu = 0;
  /// Nodes --amp runs in the low type (empty when off).
  std::vector<std::string> amp_nodes;
};

/// The forward model as PyTorch's train() runs it, with the parameters still initializers: BN and
/// Dropout in their training forms, a fresh classifier when asked. `seed_inputs` receives the
/// dropout seed input names, `state` the BN statistics.
Status prepare_training_forward(Model* model, const TrainGraphOptions& options, TrainGraph* out);

/// Builds the whole training graph (see TrainGraph) of `model` (left unchanged).
StatusOr<TrainGraph> build_train_graph(const Model& model, const TrainGraphOptions& options);

/// Points `source`'s initializers of tg's parameters and BN statistics at tg.initial's tensors (the
/// same storage), so the source model stops holding a copy of its own once the training graph owns
/// them: a run then keeps each parameter once (issue 40). The source's values are the live ones
/// from then on (the optimizer updates tg.initial in place); an initializer whose type differs
/// (the classifier --num-classes replaced) keeps its own. Returns the bytes released.
int64_t share_trained_initializers(Model* source, const TrainGraph& tg);

/// Nodes of `model` that would stop training for lack of a gradient (as `ferry check --train`
/// reports them): node descriptions, empty when the model trains.
StatusOr<std::vector<std::string>> untrainable_nodes(const Model& model, const TrainGraphOptions& options);

/// The inference model for `weights` (params and BN statistics by name, others kept): BN in
/// inference mode, Dropout as identity; the classifier replaced when the training graph did.
/// batch > 0: the inputs' symbolic first (batch) dimension fixed to it (an evaluation's fixed
/// batch), so the executor plans and packs every weight when it is made.
StatusOr<std::shared_ptr<Model>> inference_model(const Model& model, const TrainGraph& tg,
                                                 const std::map<std::string, Tensor>& weights, int64_t batch = 0);

}  // namespace ferry

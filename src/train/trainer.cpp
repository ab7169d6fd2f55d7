// The training loop of `ferry train` (see trainer.h).
#include "train/trainer.h"

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <set>
#include <thread>

#include "backends/backend.h"
#include "backends/device_defaults.h"
#include "common/heap_trim.h"
#include "common/splitmix64.h"
#include "data/data_source.h"
#include "data/image_folder.h"
#include "data/prefetch.h"
#include "format/checkpoint.h"
#include "io/image_metadata.h"
#include "onnx/onnx_export.h"
#include "onnx/onnx_import.h"
#include "ops/conv_grad_link.h"
#include "ops/kernel_collectives.h"
#include "passes/pipeline.h"
#include "train/autocast.h"
#include "runtime/executor.h"
#include "runtime/memory_estimate.h"
#include "train/ddp.h"
#include "train/evaluate.h"
#include "train/memory_plan_train.h"
#include "train/sampler.h"
#include "train/train_step.h"
#include "train/training_graph.h"

namespace ferry {

namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

// The process's start (static initialization, before main), for the log's elapsed_ms: what a run
// pays before its first steady step (model load, graph build, the first steps' planning and page
// faults) is elapsed_ms at step 2's end, short fine-tunes pay it every run (issue 37).
const Clock::time_point kProcessStart = Clock::now();

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

bool exists(const std::string& p) {
  struct stat st{};
  return ::stat(p.c_str(), &st) == 0;
}

std::string config_fingerprint(const TrainConfig& c) {
  json j = {{"model", c.model}, {"data", c.data}, {"batch_size", c.batch_size}, {"shuffle", c.shuffle},
            {"seed", c.seed},    {"optimizer", c.optimizer.kind}, {"loss", c.loss}, {"freeze", c.freeze},
            {"num_classes", c.num_classes}, {"image_size", c.image_size}};
  if (c.accumulate != 1) j["accumulate"] = c.accumulate;  // absent at 1: earlier checkpoints stay valid
  return j.dump();
}

class Trainer {
 public:
  Trainer(const TrainConfig& c, const std::function<void(const StepReport&)>& on_step,
          const std::function<void(const TrainStart&)>& on_start)
      : c_(c), on_step_(on_step), on_start_(on_start) {}

  StatusOr<TrainSummary> run();

 private:
  Status setup();
  Status resume();
  Status open_log();
  Status step(int64_t k);
  Status check_memory();
  StatusOr<TrainMemoryPlan> memory_plan_at(int64_t batch);
  StatusOr<double> micro_step(int64_t k, int64_t m, float seed, std::map<std::string, Tensor>* grads, double* wait_ms,
                              double* exec_ms);
  // Micro-batch j (0-based) of step k is micro-batch (k-1)*K + j + 1 of the data stream.
  int64_t first_micro(int64_t k) const { return (k - 1) * c_.accumulate + 1; }
  int64_t epoch_of_step(int64_t k) const { return sampler_->epoch_of(first_micro(k)); }
  Status save_checkpoint(int64_t k);
  Status evaluate(int64_t k, int64_t epoch);
  Status export_model();
  void log(const json& j) {
    if (log_) {
      log_ << j.dump() << "\n";
      log_.flush();
    }
  }

  const TrainConfig& c_;
  std::function<void(const StepReport&)> on_step_;
  std::function<void(const TrainStart&)> on_start_;
  std::shared_ptr<Model> source_;
  TrainGraph tg_;
  TrainGraphOptions tg_options_;  // how tg_ was built (the memory plan rebuilds it per batch)
  std::unique_ptr<Executor> exec_;
  std::unique_ptr<DataParallel> ddp_;  // null: one process
  bool rank0() const { return !ddp_ || ddp_->rank() == 0; }
  std::unique_ptr<Dataset> data_;
  std::unique_ptr<Dataset> eval_data_;
  bool decodes_ = false;
  std::unique_ptr<Prefetcher> prefetch_;
  std::unique_ptr<Sampler> sampler_;
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<GradScaler> scaler_;  // null: no loss scaling
  bool loss_seed_f64_ = false;          // the loss (and so its seed) is f64
  ScheduleConfig schedule_;
  std::map<std::string, Tensor> values_;  // params and BN statistics (f32, owned)
  int64_t total_steps_ = 0;
  int64_t start_step_ = 0;
  std::ofstream log_;
  TrainSummary summary_;
  double step_ms_sum_ = 0;
};

Status Trainer::setup() {
  ImportOptions io;
  io.infer_shapes = false;  // training-mode BatchNormalization is rewritten before shapes are inferred
  ASSIGN_OR_RETURN(source_, load_onnx_model(c_.model, io));
  ASSIGN_OR_RETURN(TrainGraphOptions o, train_graph_options(c_));
  // As SyncBatchNorm, which falls back to plain batch_norm in a process group of one.
  o.sync_bn = c_.sync_bn && c_.dist.distributed();
  ASSIGN_OR_RETURN(tg_, build_train_graph(*source_, o));
  if (c_.sync_bn) {
    const size_t layers = tg_.state.size() / 2;  // running mean and variance per BatchNormalization
    if (layers == 0)
      return invalid_argument("--sync-bn: model '" + c_.model + "' has no BatchNormalization node, so there are no "
                              "statistics to synchronize; drop --sync-bn");
    summary_.notes.push_back("--sync-bn: " + std::to_string(layers) + " BatchNorm layer(s) " +
                             (o.sync_bn ? "use the statistics of all " + std::to_string(c_.dist.world_size) + " ranks' batches"
                                        : "train as plain BatchNorm (a world of one rank, as torch.nn.SyncBatchNorm)"));
  }
  tg_options_ = o;
  values_ = tg_.initial;
  // The source model's weights become the training values' storage: one copy of each parameter.
  share_trained_initializers(source_.get(), tg_);
  if (tg_.recompute_segments > 0)
    summary_.notes.push_back("--recompute: " + std::to_string(tg_.recompute_segments) + " segments, " +
                             std::to_string(tg_.recomputed_nodes) + " forward nodes recomputed in backward");

  DataOptions d;
  d.image_size = c_.image_size;
  d.train = true;
  d.skip_bad_images = c_.skip_bad_images;
  d.float_targets = c_.loss == "mse";
  d.inputs = tg_.data_inputs;
  d.model_inputs = tg_.model;
  ASSIGN_OR_RETURN(DataSource train_src, open_data_source(c_.data, d));
  data_ = std::move(train_src.dataset);
  decodes_ = train_src.decodes;
  for (auto& note : train_src.notes) summary_.notes.push_back(note);
  if (!c_.eval_data.empty()) {
    d.train = false;
    ASSIGN_OR_RETURN(DataSource eval_src, open_data_source(c_.eval_data, d));
    eval_data_ = std::move(eval_src.dataset);
    for (auto& note : eval_src.notes) summary_.notes.push_back(note);
  }
  RETURN_IF_ERROR(check_labels(*data_, c_.data, c_.loss, tg_.num_classes));
  if (eval_data_) RETURN_IF_ERROR(check_labels(*eval_data_, c_.eval_data, c_.loss, tg_.num_classes));

  const int64_t n = data_->size();
  if (n < 1) return invalid_argument("'" + c_.data + "' holds no samples");
  if (c_.accumulate < 1) return invalid_argument("--accumulate must be at least 1");
  const int64_t rows_per_step = c_.batch_size * c_.accumulate;
  if (c_.steps > 0) total_steps_ = c_.steps;
  else if (c_.epochs > 0) total_steps_ = (c_.epochs * shard_size(n, c_.dist.world_size) + rows_per_step - 1) / rows_per_step;
  else return invalid_argument("give --steps N or --epochs N");
  sampler_ = std::make_unique<Sampler>(n, c_.batch_size, c_.shuffle, c_.seed, c_.dist.rank, c_.dist.world_size);

  // The loss mixes the batch's rows: no batch split (train_executor_options). The arena is bound once, on step 2. A fresh arena stays on 4 KiB pages here: huge pages from
  // memory never touched before cost this VM ~1 s per 1.5 GB (ResNet-50 b8, 2 threads, 5 quiet
  // interleaved rounds of 7 steps: step 2 2044-2396 ms with huge pages, 1334-2077 without). Since
  // runtime/page_blocks the arena is assembled from the recording run's pages (2 MiB blocks where
  // they fit) and this flag applies only when there are none ($FERRY_ARENA_REUSE=0).
  // $FERRY_ARENA_HUGEPAGES=0 turns huge pages off everywhere.
  if (c_.before_executor) c_.before_executor();
  ASSIGN_OR_RETURN(exec_, Executor::create(tg_.model, train_executor_options(c_)));
  if (tg_options_.amp != DType::kF32) {  // native: nodes the amp_bf16_fold pass folded (src/passes/amp_bf16_fold.cpp)
    int64_t native = 0;
    for (const Node& n : exec_->model().graph.nodes) native += n.attr("amp_bf16") != nullptr;
    summary_.notes.push_back("--amp " + c_.amp + ": " + std::to_string(tg_.amp_nodes.size()) + " matrix ops autocast (" +
                             (native ? std::to_string(native) + " Conv/ConvGrad nodes native bf16, the rest " : std::string()) +
                             "emulated: f32 compute on operands and results rounded to " + c_.amp + ")");
  }
  if (ddp_) {
    RETURN_IF_ERROR(ddp_->plan(tg_.params, tg_.grads, values_));
    exec_->set_observer(ddp_->observer(), /*keeps_outputs=*/false);
  }
  ASSIGN_OR_RETURN(optimizer_, make_optimizer(c_.optimizer));
  if (c_.loss_scaling) {
    RETURN_IF_ERROR(GradScaler::validate(c_.scaler));
    scaler_ = std::make_unique<GradScaler>(c_.scaler);
  }
  const TensorType* lt = tg_.model->graph.find_type(tg_.loss);
  loss_seed_f64_ = lt && lt->dtype == DType::kF64;
  schedule_ = c_.schedule;
  schedule_.total_steps = total_steps_;
  RETURN_IF_ERROR(validate_schedule(schedule_));

  int workers = c_.data_workers;
  if (workers < 0) workers = decodes_ ? std::max(1u, std::thread::hardware_concurrency() / 2) : 0;
  prefetch_ = std::make_unique<Prefetcher>(data_.get(), workers);
  return Status::ok();
}

// A resumed run keeps the log's lines up to the checkpoint's step and drops the later ones the
// interrupted run wrote, so the log reads as one run; a fresh run starts the log anew.
Status Trainer::open_log() {
  if (c_.log_path.empty() || !rank0()) return Status::ok();
  std::vector<std::string> keep;
  if (start_step_ > 0) {
    std::ifstream in(c_.log_path);
    std::string line;
    while (std::getline(in, line)) {
      json j = json::parse(line, nullptr, false);
      if (!j.is_discarded() && j.contains("step") && j["step"].is_number_integer() && j["step"].get<int64_t>() <= start_step_)
        keep.push_back(line);
    }
  }
  log_.open(c_.log_path, std::ios::out | std::ios::trunc);
  if (!log_) return invalid_argument("cannot write the log '" + c_.log_path + "'");
  for (const auto& line : keep) log_ << line << "\n";
  log_.flush();
  return Status::ok();
}

Status Trainer::resume() {
  if (c_.resume.empty()) return Status::ok();
  ASSIGN_OR_RETURN(Checkpoint ck, read_checkpoint(c_.resume));
  json meta = json::parse(ck.meta_json, nullptr, false);
  if (meta.is_discarded() || !meta.contains("fingerprint"))
    return invalid_argument("checkpoint '" + c_.resume + "' has no readable metadata");
  if (meta["fingerprint"].get<std::string>() != config_fingerprint(c_)) {
    // Name the settings that differ, not the whole record.
    json then = json::parse(meta["fingerprint"].get<std::string>(), nullptr, false);
    json now = json::parse(config_fingerprint(c_), nullptr, false);
    std::string diff;
    if (then.is_object() && now.is_object()) {
      std::set<std::string> keys;
      for (auto it = then.begin(); it != then.end(); ++it) keys.insert(it.key());
      for (auto it = now.begin(); it != now.end(); ++it) keys.insert(it.key());
      for (const std::string& k : keys) {
        const std::string a = then.contains(k) ? then[k].dump() : "(unset)";
        const std::string b = now.contains(k) ? now[k].dump() : "(unset)";
        if (a != b) diff += (diff.empty() ? "" : "; ") + k + " " + a + " in the checkpoint, " + b + " now";
      }
    }
    if (diff.empty()) diff = meta["fingerprint"].get<std::string>();
    return invalid_argument("checkpoint '" + c_.resume + "' was written by a different run: " + diff +
                            " (resume with the checkpoint's settings, or start a new run without --resume)");
  }
  RETURN_IF_ERROR(restore_checkpoint_tensors(&ck, c_.resume, &values_, optimizer_.get(), scaler_.get(),
                                             "resume it without --amp/--init-scale/--loss-scale, or start a new run"));
  start_step_ = ck.step;
  // The checkpoint's parsed tensors, freed on return, would stay in the heap (cmd_train.cpp's trim
  // threshold) beside the run's own: ResNet-50 b8's resumed run peaked 230 MiB above a fresh one.
  ck = Checkpoint{};
  trim_heap();
  return Status::ok();
}

// The plan of the training graph at `batch` (the run's own graph at its batch), before allocating.
StatusOr<TrainMemoryPlan> Trainer::memory_plan_at(int64_t batch) {
  std::shared_ptr<const Model> model;
  if (batch == c_.batch_size) {
    model = std::shared_ptr<const Model>(exec_->model().clone());
  } else {
    TrainGraphOptions o = tg_options_;
    o.batch_size = batch;
    ASSIGN_OR_RETURN(TrainGraph tg, build_train_graph(*source_, o));
    OptimizeOptions oo;
    oo.opt_level = c_.opt_level >= 0 ? c_.opt_level : default_opt_level(c_.device);
    oo.device_traits = device_graph_traits(c_.device);
    if (oo.opt_level > 0) RETURN_IF_ERROR(optimize_model(tg.model.get(), oo));
    model = tg.model;
  }
  TrainMemoryInputs in;
  in.batch = batch;
  in.accumulate = c_.accumulate;
  for (const auto& p : tg_.params) in.param_bytes += tg_.initial.at(p).nbytes();
  for (const auto& st : tg_.state) in.state_bytes += tg_.initial.at(st.input).nbytes();
  for (const auto& [p, g] : tg_.grads) in.grad_bytes += tg_.initial.at(p).nbytes();
  const OptimizerDef* optimizer = find_optimizer(c_.optimizer.kind);
  in.optimizer_slots = optimizer ? optimizer->state_slots(c_.optimizer) : 0;
  in.batches_in_flight = prefetch_->max_queued() + 1;
  return plan_train_memory(*model, in);
}

// --plan-memory and --memory-limit (default: the memory available now): refuse before any step.
Status Trainer::check_memory() {
  const int64_t limit = c_.memory_limit > 0 ? c_.memory_limit : available_memory_bytes();
  if (!c_.plan_memory && limit <= 0) return Status::ok();
  ASSIGN_OR_RETURN(TrainMemoryPlan plan, memory_plan_at(c_.batch_size));
  const bool fits = limit <= 0 || plan.total() <= limit;
  if (fits && !c_.plan_memory) return Status::ok();
  int64_t largest = 0;
  if (limit > 0) {
    auto at = [this](int64_t b) { return memory_plan_at(b); };
    ASSIGN_OR_RETURN(largest, largest_batch_that_fits(limit, plan, at));
  }
  const std::string text = format_train_memory(plan, limit, largest, c_.plan_json && c_.plan_memory);
  if (c_.plan_memory) {
    summary_.memory_plan = text;
    summary_.memory_fits = fits;
    return Status::ok();
  }
  const int64_t fixed = plan.weights + plan.gradients + plan.optimizer_state + plan.runtime;
  std::string help;
  if (largest == 0 && limit > 0 && fixed >= limit) {
    // Not even batch 1: the batch-size remedies cannot help; only less fixed memory does.
    help = "not even batch 1 fits: the weights, gradients, optimizer state and runtime alone need " + format_bytes(fixed) +
           "; what would help: --freeze REGEX (frozen parameters have no gradient or optimizer state), an optimizer "
           "with less state (adam/adamw keep 2 copies per parameter, sgd with momentum 1, plain sgd 0), or more memory "
           "(--memory-limit, a larger machine)";
  } else {
    help = "what would help: --recompute (recompute activations in backward), --amp bf16 (half-size "
           "activations), a smaller --batch-size";
    if (largest > 0) help += " (" + std::to_string(largest) + " fits) with --accumulate " +
                             std::to_string((c_.batch_size + largest - 1) / largest) + " to keep the batch per step";
    else help += " (not even batch 1 fits as planned now: try --recompute and --amp bf16 together)";
  }
  if (!conv_grad_links(exec_->model().graph).empty())
    help += "; FERRY_TRAIN_CONV_KEEP_X=0 (the forward convolutions stop keeping their blocked inputs for backward: "
            "a few percent slower, their share of the plan's convolution layouts freed)";
  return resource_exhausted("the training run needs about " + format_bytes(plan.total()) + " but the memory limit is " +
                            format_bytes(limit) + (c_.memory_limit > 0 ? "" : " (memory available now)") + "\n" + text +
                            help);
}

// One micro-batch (m, 1-based) of step k: forward + backward with dLoss = `seed`; its gradients
// are added to *grads, the BN statistics move on. Returns the micro-batch's loss.
StatusOr<double> Trainer::micro_step(int64_t k, int64_t m, float seed, std::map<std::string, Tensor>* grads, double* wait_ms,
                                     double* exec_ms) {
  double waited = 0;
  ASSIGN_OR_RETURN(Batch batch, prefetch_->take(m, &waited));
  *wait_ms += waited;
  if (m + 1 <= total_steps_ * c_.accumulate)
    RETURN_IF_ERROR(prefetch_->request(m + 1, sampler_->indices(m + 1), splitmix64(c_.seed ^ splitmix64(m + 1))));
  const NamedTensors feeds = train_step_feeds(tg_, batch.inputs, batch.labels, values_, c_.seed, m, seed, loss_seed_f64_);
  NamedTensors outs;
  if (ddp_) ddp_->begin_step(/*sync=*/m == k * c_.accumulate, grads);  // DDP's no_sync but on the last micro-batch
  // --sync-bn: the SyncBatchNormTraining kernels reach the other ranks through this thread's collectives.
  ScopedKernelCollectives collectives(ddp_ && tg_options_.sync_bn ? ddp_->kernel_collectives() : nullptr);
  const auto exec_t0 = Clock::now();
  RETURN_IF_ERROR(exec_->run(feeds, &outs).with_context("step " + std::to_string(k)));
  *exec_ms += ms_since(exec_t0);
  const double loss = outs[0].second.get_double(0);
  if (!std::isfinite(loss) && !scaler_)
    return invalid_argument("step " + std::to_string(k) + ": the loss is " + (std::isnan(loss) ? "NaN" : "infinite") +
                            "; training stopped (the last checkpoint, if any, is kept). Lower --lr, check the data for "
                            "NaN/inf values, or clip gradients (--clip-grad-norm)");
  size_t o = 1;
  for (const auto& p : tg_.params) {
    if (!tg_.grads.count(p)) continue;
    Tensor& g = outs[o++].second;
    auto it = grads->find(p);
    if (it == grads->end()) {
      (*grads)[p] = g;
    } else {  // accumulation: summed in f32 as PyTorch's .grad +=
      float* acc = it->second.mutable_data<float>();
      const float* add = g.data<float>();
      for (int64_t i = 0; i < g.numel(); ++i) acc[i] += add[i];
    }
  }
  for (const auto& s : tg_.state) values_[s.input] = outs[o++].second;
  return loss;
}

Status Trainer::step(int64_t k) {
  const auto t0 = Clock::now();
  double wait_ms = 0, exec_ms = 0, loss_sum = 0;
  // dLoss of each micro-batch: (loss / K) * scale, as PyTorch's backward of scaler.scale(loss / K).
  const float scale_used = scaler_ ? scaler_->scale() : 1.0f;
  const float seed = scale_used / static_cast<float>(c_.accumulate);
  std::map<std::string, Tensor> grads;
  for (int64_t j = 0; j < c_.accumulate; ++j) {
    ASSIGN_OR_RETURN(double micro_loss, micro_step(k, (k - 1) * c_.accumulate + j + 1, seed, &grads, &wait_ms, &exec_ms));
    loss_sum += micro_loss;
  }
  const double loss = loss_sum / static_cast<double>(c_.accumulate);
  double comm_wait_ms = 0;
  if (ddp_) RETURN_IF_ERROR(ddp_->finish_step(&grads, &comm_wait_ms).with_context("step " + std::to_string(k)));
  ASSIGN_OR_RETURN(StepUpdate u, apply_step_update(c_, schedule_, tg_, k, loss, &grads, &values_, scaler_.get(), optimizer_.get()));
  const bool skipped = u.skipped;
  const double lr = u.lr;
  const double update_ms = u.update_ms;
  const double ms = ms_since(t0);
  step_ms_sum_ += ms;
  StepReport r;
  r.step = k;
  r.total_steps = total_steps_;
  r.epoch = epoch_of_step(k);
  r.loss = loss;
  r.loss_scale = scaler_ ? scale_used : 0.0;
  r.skipped = skipped;
  r.lr = lr;
  r.time_ms = ms;
  r.samples_per_s = ms > 0 ? c_.batch_size * c_.accumulate * 1000.0 / ms : 0;
  r.data_wait_ms = wait_ms;
  json line = {{"step", k}, {"epoch", r.epoch}, {"loss", loss}, {"lr", lr}, {"time_ms", ms}, {"samples_per_s", r.samples_per_s},
               {"data_wait_ms", wait_ms}, {"compute_ms", exec_ms}, {"update_ms", update_ms},
               {"elapsed_ms", ms_since(kProcessStart)}};
  if (ddp_)
    line.update({{"rank", ddp_->rank()}, {"world_size", ddp_->world_size()}, {"comm_wait_ms", comm_wait_ms},
                 {"buckets", ddp_->buckets().size()}, {"buckets_overlapped", ddp_->launched_early()}});
  if (tg_options_.sync_bn) line.update({{"sync_bn", true}, {"sync_bn_wait_ms", ddp_->take_kernel_wait_ms()}});
  if (scaler_) line.update({{"loss_scale", scale_used}, {"skipped", skipped}});
  log(line);
  if (on_step_) on_step_(r);
  summary_.last_loss = loss;
  summary_.steps_done = k;
  return Status::ok();
}

Status Trainer::save_checkpoint(int64_t k) {
  if (!rank0()) return Status::ok();
  Checkpoint ck;
  ck.step = k;
  add_checkpoint_tensors(values_, *optimizer_, scaler_.get(), &ck);
  json meta = {{"fingerprint", config_fingerprint(c_)}, {"step", k}, {"epoch", epoch_of_step(k)},
               {"rows_consumed", k * c_.batch_size * c_.accumulate}, {"world_size", c_.dist.world_size},
               {"rng", "every random draw derives from (seed, step, sample): nothing else to store"}};
  ck.meta_json = meta.dump();
  return write_checkpoint(c_.checkpoint_dir, ck, c_.keep_checkpoints);
}

Status Trainer::evaluate(int64_t k, int64_t epoch) {
  if (!eval_data_ || !rank0()) return Status::ok();
  // Between epochs the training executor's arena (activations and workspace: 692 MiB on ResNet-50
  // at batch 8) sits idle while the evaluation's executor holds its weights and arena: freed here,
  // it is bound again from the stored plan by the next step, so the evaluation runs under the
  // steps' peak rather than on top of it.
  if (exec_) {
    exec_->release_idle_arenas();
    trim_heap();
  }
  ASSIGN_OR_RETURN(std::unique_ptr<Executor> ex, make_eval_executor(c_, *source_, tg_, values_, c_.batch_size));
  ASSIGN_OR_RETURN(const EvalSums sums, evaluate_dataset(c_, *ex, *eval_data_));
  const int64_t n = sums.samples;
  const double loss_sum = sums.loss_sum;
  const int64_t correct = sums.correct;
  StepReport r;
  r.step = k;
  r.total_steps = total_steps_;
  r.epoch = epoch;
  r.eval = true;
  r.eval_loss = n ? loss_sum / static_cast<double>(n) : 0;
  r.eval_accuracy = n ? static_cast<double>(correct) / static_cast<double>(n) : 0;
  json j = {{"step", k}, {"epoch", epoch}, {"eval_loss", r.eval_loss}, {"eval_samples", n}};
  if (c_.loss == "cross_entropy") j["eval_accuracy"] = r.eval_accuracy;
  log(j);
  if (on_step_) on_step_(r);
  return Status::ok();
}

Status Trainer::export_model() {
  if (!rank0()) return Status::ok();
  TrainedExport e;
  for (const auto& [name, t] : values_) e.weights[name] = t;
  if (decodes_) {  // an ImageFolder: what `ferry run MODEL --input photo.jpg` needs to classify a photo
    const std::vector<std::string> names = data_->class_names();
    if (!names.empty()) e.metadata[kClassNamesKey] = class_names_json(names);
    EvalImageTransform t;
    t.crop = c_.image_size;
    e.metadata[kImageTransformKey] = eval_transform_json(t);
  }
  return export_trained_onnx(c_.model, e, c_.out_path);
}

StatusOr<TrainSummary> Trainer::run() {
  if (!c_.out_path.empty() && exists(c_.out_path) && c_.out_path == c_.model)
    return invalid_argument("--out '" + c_.out_path + "' is the input model; choose another file");
  if (c_.dist.distributed()) {
    ASSIGN_OR_RETURN(ddp_, DataParallel::join(c_.dist));
  }
  RETURN_IF_ERROR(setup());
  RETURN_IF_ERROR(check_memory());
  if (c_.plan_memory) return summary_;
  RETURN_IF_ERROR(resume());
  if (ddp_) {  // as DDP's constructor: every rank starts from rank 0's state
    RETURN_IF_ERROR(ddp_->agree("the run's configuration", static_cast<int64_t>(std::hash<std::string>()(config_fingerprint(c_)) >> 1)));
    RETURN_IF_ERROR(ddp_->agree("the step to start from (--resume)", start_step_));
    RETURN_IF_ERROR(ddp_->agree("--sync-bn (1: on)", c_.sync_bn ? 1 : 0));
    RETURN_IF_ERROR(ddp_->broadcast_from_rank0(&values_));
  }
  RETURN_IF_ERROR(open_log());
  if (on_start_) {
    TrainStart b;
    b.samples = data_->size();
    b.eval_samples = eval_data_ ? eval_data_->size() : 0;
    b.classes = c_.loss == "cross_entropy" ? tg_.num_classes : 0;
    b.class_names = data_->class_names();
    b.image_size = decodes_ ? c_.image_size : 0;
    b.total_steps = total_steps_;
    b.start_step = start_step_;
    b.batch_size = c_.batch_size;
    b.accumulate = c_.accumulate;
    b.world_size = c_.dist.world_size;
    b.device = c_.device;
    b.optimizer = c_.optimizer.kind;
    b.lr = effective_lr(c_.optimizer);
    b.resumed_from = start_step_ > 0 ? c_.resume : "";
    on_start_(b);
  }
  if (start_step_ >= total_steps_)
    summary_.notes.push_back("the checkpoint is at step " + std::to_string(start_step_) + " of " + std::to_string(total_steps_) + ": nothing to train");
  if (start_step_ < total_steps_)
    RETURN_IF_ERROR(prefetch_->request(first_micro(start_step_ + 1), sampler_->indices(first_micro(start_step_ + 1)),
                                       splitmix64(c_.seed ^ splitmix64(first_micro(start_step_ + 1)))));
  for (int64_t k = start_step_ + 1; k <= total_steps_; ++k) {
    RETURN_IF_ERROR(step(k));
    // The last step done: the training executor (its arena of activations and gradients) and the
    // batches in flight go before the final checkpoint, evaluation and export, which then run
    // beside the weights and optimizer state alone rather than on top of the steps' peak.
    if (k == total_steps_) {
      exec_.reset();
      prefetch_.reset();
      trim_heap();  // the steps' freed gradients, which the heap keeps for the next step (cmd_train.cpp)
    }
    // --checkpoint-dir without --save-every: the end only (never silently nothing).
    if (!c_.checkpoint_dir.empty() && ((c_.save_every > 0 && k % c_.save_every == 0) || k == total_steps_))
      RETURN_IF_ERROR(save_checkpoint(k));
    const int64_t epoch = epoch_of_step(k);
    const bool epoch_end = k == total_steps_ || epoch_of_step(k + 1) != epoch;
    if (epoch_end) RETURN_IF_ERROR(evaluate(k, epoch));
  }
  if (ddp_) RETURN_IF_ERROR(ddp_->finish());
  if (start_step_ >= total_steps_) RETURN_IF_ERROR(evaluate(total_steps_, epoch_of_step(std::max<int64_t>(1, total_steps_))));
  if (!c_.out_path.empty()) RETURN_IF_ERROR(export_model());
  if (const auto* images = dynamic_cast<const ImageFolderDataset*>(data_.get()); images && images->replaced_samples() > 0) {
    std::string note = "replaced " + std::to_string(images->replaced_samples()) + " sample(s) whose image failed to decode";
    for (const auto& e : images->replaced_examples()) note += "; " + e;
    summary_.notes.push_back(note);
  }
  const int64_t ran = total_steps_ - start_step_;
  summary_.mean_step_ms = ran > 0 ? step_ms_sum_ / static_cast<double>(ran) : 0;
  return summary_;
}

}  // namespace

StatusOr<TrainSummary> run_training(const TrainConfig& config, const std::function<void(const StepReport&)>& on_step,
                                    const std::function<void(const TrainStart&)>& on_start) {
  Trainer t(config, on_step, on_start);
  return t.run();
}

}  // namespace ferry

// Step-at-a-time training for callers that bring their own batches; see step_trainer.h. The step
// follows Trainer::micro_step / Trainer::step (train/trainer.cpp) for accumulate = 1 on one process.
#include "train/step_trainer.h"

#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>

#include "common/splitmix64.h"
#include "format/checkpoint.h"
#include "onnx/onnx_export.h"
#include "onnx/onnx_import.h"
#include "train/autocast.h"
#include "train/evaluate.h"
#include "train/grad_scaler.h"
#include "train/lr_schedule.h"
#include "train/optimizer.h"
#include "train/train_step.h"
#include "train/training_graph.h"

namespace ferry {

using json = nlohmann::json;

namespace {

json config_json(const TrainConfig& c) {
  json o = {{"kind", c.optimizer.kind}, {"momentum", c.optimizer.momentum}, {"dampening", c.optimizer.dampening},
            {"nesterov", c.optimizer.nesterov}, {"beta1", c.optimizer.beta1}, {"beta2", c.optimizer.beta2},
            {"eps", c.optimizer.eps}, {"amsgrad", c.optimizer.amsgrad}};
  if (c.optimizer.lr) o["lr"] = *c.optimizer.lr;
  if (c.optimizer.weight_decay) o["weight_decay"] = *c.optimizer.weight_decay;
  json s = {{"kind", c.schedule.kind}, {"warmup_steps", c.schedule.warmup_steps}, {"step_size", c.schedule.step_size},
            {"gamma", c.schedule.gamma}, {"eta_min", c.schedule.eta_min}, {"pct_start", c.schedule.pct_start},
            {"div_factor", c.schedule.div_factor}, {"final_div_factor", c.schedule.final_div_factor}};
  if (c.schedule.max_lr) s["max_lr"] = *c.schedule.max_lr;
  return {{"model", c.model}, {"batch_size", c.batch_size}, {"steps", c.steps}, {"seed", c.seed}, {"threads", c.threads},
          {"device", c.device}, {"opt_level", c.opt_level}, {"optimizer", o}, {"schedule", s},
          {"clip_grad_norm", c.clip_grad_norm}, {"loss", c.loss}, {"label_smoothing", c.label_smoothing},
          {"freeze", c.freeze}, {"num_classes", c.num_classes}, {"amp", c.amp}, {"keep_fp32", c.keep_fp32},
          {"loss_scaling", c.loss_scaling}, {"init_scale", c.scaler.init_scale}, {"growth_factor", c.scaler.growth_factor},
          {"backoff_factor", c.scaler.backoff_factor}, {"growth_interval", c.scaler.growth_interval},
          {"dynamic_scale", c.scaler.dynamic}, {"recompute_segments", c.recompute_segments}};
}

TrainConfig config_from_json(const json& j) {
  TrainConfig c;
  c.model = j.at("model").get<std::string>();
  c.batch_size = j.at("batch_size").get<int64_t>();
  c.steps = j.at("steps").get<int64_t>();
  c.seed = j.at("seed").get<uint64_t>();
  c.threads = j.at("threads").get<int>();
  c.device = j.at("device").get<std::string>();
  c.opt_level = j.at("opt_level").get<int>();
  const json& o = j.at("optimizer");
  c.optimizer.kind = o.at("kind").get<std::string>();
  c.optimizer.momentum = o.at("momentum").get<double>();
  c.optimizer.dampening = o.at("dampening").get<double>();
  c.optimizer.nesterov = o.at("nesterov").get<bool>();
  c.optimizer.beta1 = o.at("beta1").get<double>();
  c.optimizer.beta2 = o.at("beta2").get<double>();
  c.optimizer.eps = o.at("eps").get<double>();
  c.optimizer.amsgrad = o.at("amsgrad").get<bool>();
  if (o.contains("lr")) c.optimizer.lr = o.at("lr").get<double>();
  if (o.contains("weight_decay")) c.optimizer.weight_decay = o.at("weight_decay").get<double>();
  const json& s = j.at("schedule");
  c.schedule.kind = s.at("kind").get<std::string>();
  c.schedule.warmup_steps = s.at("warmup_steps").get<int64_t>();
  c.schedule.step_size = s.at("step_size").get<int64_t>();
  c.schedule.gamma = s.at("gamma").get<double>();
  c.schedule.eta_min = s.at("eta_min").get<double>();
  c.schedule.pct_start = s.at("pct_start").get<double>();
  c.schedule.div_factor = s.at("div_factor").get<double>();
  c.schedule.final_div_factor = s.at("final_div_factor").get<double>();
  if (s.contains("max_lr")) c.schedule.max_lr = s.at("max_lr").get<double>();
  c.clip_grad_norm = j.at("clip_grad_norm").get<double>();
  c.loss = j.at("loss").get<std::string>();
  c.label_smoothing = j.at("label_smoothing").get<double>();
  c.freeze = j.at("freeze").get<std::string>();
  c.num_classes = j.at("num_classes").get<int64_t>();
  c.amp = j.at("amp").get<std::string>();
  c.keep_fp32 = j.at("keep_fp32").get<std::vector<std::string>>();
  c.loss_scaling = j.at("loss_scaling").get<bool>();
  c.scaler.init_scale = j.at("init_scale").get<double>();
  c.scaler.growth_factor = j.at("growth_factor").get<double>();
  c.scaler.backoff_factor = j.at("backoff_factor").get<double>();
  c.scaler.growth_interval = j.at("growth_interval").get<int64_t>();
  c.scaler.dynamic = j.at("dynamic_scale").get<bool>();
  c.recompute_segments = j.at("recompute_segments").get<int64_t>();
  return c;
}

}  // namespace

struct StepTrainer::State {
  std::shared_ptr<Model> source;
  TrainGraph tg;
  std::unique_ptr<Executor> exec;
  std::unique_ptr<Optimizer> optimizer;
  std::unique_ptr<GradScaler> scaler;
  ScheduleConfig schedule;
  bool loss_seed_f64 = false;
};

StepTrainer::~StepTrainer() = default;

StatusOr<std::unique_ptr<StepTrainer>> StepTrainer::create(const TrainConfig& config) {
  std::unique_ptr<StepTrainer> t(new StepTrainer());
  t->c_ = config;
  RETURN_IF_ERROR(t->setup());
  return t;
}

Status StepTrainer::setup() {
  s_ = std::make_unique<State>();
  if (c_.batch_size < 1) return invalid_argument("batch_size must be at least 1");
  ImportOptions io;
  io.infer_shapes = false;  // as Trainer::setup: training-mode BN is rewritten before shapes are inferred
  ASSIGN_OR_RETURN(s_->source, load_onnx_model(c_.model, io));
  ASSIGN_OR_RETURN(TrainGraphOptions o, train_graph_options(c_));
  ASSIGN_OR_RETURN(s_->tg, build_train_graph(*s_->source, o));
  values_ = s_->tg.initial;
  share_trained_initializers(s_->source.get(), s_->tg);  // one copy of each parameter (issue 40)
  for (const std::string& name : s_->tg.data_inputs) {
    const TensorType* t = s_->tg.model->graph.find_type(name);
    ValueInfo v{name, t ? *t : TensorType{}};
    data_inputs_.push_back(v);
  }
  ASSIGN_OR_RETURN(s_->exec, Executor::create(s_->tg.model, train_executor_options(c_)));
  ASSIGN_OR_RETURN(s_->optimizer, make_optimizer(c_.optimizer));
  if (c_.loss_scaling || c_.amp == "fp16") {
    c_.loss_scaling = true;
    RETURN_IF_ERROR(GradScaler::validate(c_.scaler));
    s_->scaler = std::make_unique<GradScaler>(c_.scaler);
  }
  const TensorType* lt = s_->tg.model->graph.find_type(s_->tg.loss);
  s_->loss_seed_f64 = lt && lt->dtype == DType::kF64;
  s_->schedule = c_.schedule;
  s_->schedule.total_steps = c_.steps;
  if ((c_.schedule.kind == "cosine" || c_.schedule.kind == "onecycle") && c_.steps < 1)
    return invalid_argument("schedule '" + c_.schedule.kind + "' needs the run's total steps: give steps=N");
  return validate_schedule(s_->schedule);
}

StatusOr<StepResult> StepTrainer::step(const NamedTensors& inputs, const Tensor& labels) {
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t k = step_ + 1;
  const TrainGraph& tg = s_->tg;
  if (labels.rank() < 1 || labels.dim(0) != c_.batch_size)
    return invalid_argument("step " + std::to_string(k) + ": labels hold " +
                            (labels.rank() < 1 ? std::string("a scalar") : std::to_string(labels.dim(0)) + " rows") +
                            "; the training graph is built for batch_size " + std::to_string(c_.batch_size) +
                            " (drop a last partial batch: DataLoader(drop_last=True))");
  if (c_.loss == "cross_entropy") {
    if (labels.dtype() != DType::kI64)
      return invalid_argument("step " + std::to_string(k) + ": cross_entropy labels are class indices (int64), given " +
                              labels.type().to_string());
    for (int64_t r = 0; r < labels.numel(); ++r) {
      const int64_t v = labels.get_int64(r);
      if (v < 0 || (tg.num_classes > 0 && v >= tg.num_classes))
        return invalid_argument("step " + std::to_string(k) + ": row " + std::to_string(r) + " has label " +
                                std::to_string(v) + ", outside the model's " + std::to_string(tg.num_classes) +
                                " classes; fix the labels or give num_classes");
    }
  }
  // Micro-batch m of ferry train is step k here (accumulate = 1): the same dropout seeds.
  const float scale_used = s_->scaler ? s_->scaler->scale() : 1.0f;
  const NamedTensors feeds = train_step_feeds(tg, inputs, labels, values_, c_.seed, k, scale_used, s_->loss_seed_f64);
  NamedTensors outs;
  RETURN_IF_ERROR(s_->exec->run(feeds, &outs).with_context("step " + std::to_string(k)));
  const double loss = outs[0].second.get_double(0);
  if (!std::isfinite(loss) && !s_->scaler)
    return invalid_argument("step " + std::to_string(k) + ": the loss is " + (std::isnan(loss) ? "NaN" : "infinite") +
                            "; lower lr, check the batch for NaN/inf values, or clip gradients (clip_grad_norm)");
  std::map<std::string, Tensor> grads;
  size_t o = 1;
  for (const auto& p : tg.params) {
    if (!tg.grads.count(p)) continue;
    grads[p] = outs[o++].second;
  }
  std::map<std::string, Tensor> new_state;
  for (const auto& s : tg.state) new_state[s.input] = outs[o++].second;
  ASSIGN_OR_RETURN(StepUpdate u, apply_step_update(c_, s_->schedule, tg, k, loss, &grads, &values_, s_->scaler.get(),
                                                   s_->optimizer.get()));
  for (auto& [name, t] : new_state) values_[name] = t;
  step_ = k;
  StepResult r;
  r.step = k;
  r.loss = loss;
  r.lr = u.lr;
  r.skipped = u.skipped;
  r.loss_scale = s_->scaler ? scale_used : 0.0;
  r.time_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

StatusOr<EvalResult> StepTrainer::evaluate(const NamedTensors& inputs, const Tensor& labels) {
  ASSIGN_OR_RETURN(std::unique_ptr<Executor> ex, make_eval_executor(c_, *s_->source, s_->tg, values_));
  NamedTensors outs;
  RETURN_IF_ERROR(ex->run(inputs, &outs).with_context("evaluate"));
  const Tensor& y = outs[0].second;
  const int64_t rows = y.rank() > 0 ? y.dim(0) : 1;
  if (labels.rank() < 1 || labels.dim(0) != rows)
    return invalid_argument("evaluate: " + std::to_string(rows) + " output rows, labels " + labels.type().to_string());
  if (c_.loss != "cross_entropy" && labels.numel() != y.numel())
    return invalid_argument("evaluate: targets " + labels.type().to_string() + " differ from the output " + y.type().to_string());
  EvalResult r;
  r.samples = rows;
  double loss_sum = 0;
  int64_t correct = 0;
  RETURN_IF_ERROR(add_eval_rows(c_, y, labels, rows, &loss_sum, &correct).with_context("evaluate"));
  if (c_.loss == "cross_entropy") r.accuracy = rows ? static_cast<double>(correct) / static_cast<double>(rows) : 0;
  r.loss = rows ? loss_sum / static_cast<double>(rows) : 0;
  return r;
}

Status StepTrainer::export_model(const std::string& path) const {
  if (path == c_.model) return invalid_argument("export: '" + path + "' is the input model; choose another file");
  TrainedExport e;
  for (const auto& [name, t] : values_) e.weights[name] = t;
  return export_trained_onnx(c_.model, e, path);
}

Status StepTrainer::save_checkpoint(const std::string& dir, int keep) const {
  Checkpoint ck;
  ck.step = step_;
  add_checkpoint_tensors(values_, *s_->optimizer, s_->scaler.get(), &ck);
  json meta = {{"step", step_}, {"step_trainer", config_json(c_)},
               {"rng", "every random draw derives from (seed, step): nothing else to store"}};
  ck.meta_json = meta.dump();
  return write_checkpoint(dir, ck, keep);
}

StatusOr<std::unique_ptr<StepTrainer>> StepTrainer::resume(const std::string& path) {
  ASSIGN_OR_RETURN(Checkpoint ck, read_checkpoint(path));
  json meta = json::parse(ck.meta_json, nullptr, false);
  if (meta.is_discarded() || !meta.contains("step_trainer"))
    return invalid_argument("checkpoint '" + path + "' was not written by ferry.Trainer (a `ferry train` checkpoint: "
                            "resume it with `ferry train --resume`)");
  TrainConfig c;
  try {
    c = config_from_json(meta["step_trainer"]);
  } catch (const json::exception& e) {
    return invalid_argument("checkpoint '" + path + "': its configuration is unreadable (" + e.what() + ")");
  }
  ASSIGN_OR_RETURN(auto t, create(c));
  RETURN_IF_ERROR(restore_checkpoint_tensors(&ck, path, &t->values_, t->s_->optimizer.get(), t->s_->scaler.get(),
                                             "its configuration asks for it: the checkpoint is damaged"));
  t->step_ = ck.step;
  return t;
}

}  // namespace ferry

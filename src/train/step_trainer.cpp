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
#include "train/grad_scaler.h"
#include "train/lr_schedule.h"
#include "train/optimizer.h"
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
  TrainGraphOptions o;
  o.batch_size = c_.batch_size;
  o.loss = c_.loss;
  o.label_smoothing = c_.label_smoothing;
  o.freeze = c_.freeze;
  o.num_classes = c_.num_classes;
  o.seed = c_.seed;
  o.recompute_segments = c_.recompute_segments;
  o.loss_seed_input = true;
  ASSIGN_OR_RETURN(o.amp, parse_amp_dtype(c_.amp));
  o.keep_fp32 = c_.keep_fp32;
  ASSIGN_OR_RETURN(s_->tg, build_train_graph(*s_->source, o));
  values_ = s_->tg.initial;
  for (const std::string& name : s_->tg.data_inputs) {
    const TensorType* t = s_->tg.model->graph.find_type(name);
    ValueInfo v{name, t ? *t : TensorType{}};
    data_inputs_.push_back(v);
  }
  ExecutorOptions eo;
  eo.device = c_.device;
  eo.threads = c_.threads;
  eo.opt_level = c_.opt_level;
  eo.batch_split_rows = 0;  // the loss mixes the batch's rows
  eo.arena_huge_pages = false;
  ASSIGN_OR_RETURN(s_->exec, Executor::create(s_->tg.model, eo));
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
  NamedTensors feeds = inputs;
  feeds.emplace_back(tg.labels, labels);
  for (const auto& [name, t] : values_) feeds.emplace_back(name, t);
  // Micro-batch m of ferry train is step k here (accumulate = 1): the same dropout seeds.
  const uint64_t m = static_cast<uint64_t>(k);
  for (size_t i = 0; i < tg.dropout_seeds.size(); ++i)
    feeds.emplace_back(tg.dropout_seeds[i], Tensor::scalar<int64_t>(static_cast<int64_t>(splitmix64(c_.seed ^ splitmix64(m) ^ (i + 1)) >> 1)));
  const float scale_used = s_->scaler ? s_->scaler->scale() : 1.0f;
  feeds.emplace_back(tg.loss_seed, s_->loss_seed_f64 ? Tensor::scalar<double>(scale_used) : Tensor::scalar<float>(scale_used));
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
  std::vector<Tensor*> gptr;
  for (auto& [name, g] : grads) gptr.push_back(&g);
  const bool skipped = s_->scaler && (s_->scaler->unscale(gptr) || !std::isfinite(loss));
  if (c_.clip_grad_norm > 0 && !skipped) {
    ASSIGN_OR_RETURN(double norm, clip_grad_norm(gptr, c_.clip_grad_norm));
    (void)norm;
  }
  const double lr = lr_at(s_->schedule, effective_lr(c_.optimizer), k - 1);
  std::vector<ParamRef> refs;
  for (const auto& p : tg.params) {
    auto it = grads.find(p);
    refs.push_back(ParamRef{p, &values_.at(p), it == grads.end() ? nullptr : &it->second});
  }
  if (s_->scaler) RETURN_IF_ERROR(s_->scaler->update(skipped, k));
  if (!skipped) RETURN_IF_ERROR(s_->optimizer->step(refs, lr));
  for (auto& [name, t] : new_state) values_[name] = t;
  step_ = k;
  StepResult r;
  r.step = k;
  r.loss = loss;
  r.lr = lr;
  r.skipped = skipped;
  r.loss_scale = s_->scaler ? scale_used : 0.0;
  r.time_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

StatusOr<EvalResult> StepTrainer::evaluate(const NamedTensors& inputs, const Tensor& labels) {
  ASSIGN_OR_RETURN(std::shared_ptr<Model> m, inference_model(*s_->source, s_->tg, values_));
  ExecutorOptions eo;
  eo.device = c_.device;
  eo.threads = c_.threads;
  ASSIGN_OR_RETURN(std::unique_ptr<Executor> ex, Executor::create(m, eo));
  NamedTensors outs;
  RETURN_IF_ERROR(ex->run(inputs, &outs).with_context("evaluate"));
  const Tensor& y = outs[0].second;
  const int64_t rows = y.rank() > 0 ? y.dim(0) : 1;
  if (labels.rank() < 1 || labels.dim(0) != rows)
    return invalid_argument("evaluate: " + std::to_string(rows) + " output rows, labels " + labels.type().to_string());
  EvalResult r;
  r.samples = rows;
  double loss_sum = 0;
  int64_t correct = 0;
  if (c_.loss == "cross_entropy") {  // as Trainer::evaluate
    if (y.rank() != 2) return invalid_argument("evaluate: cross_entropy needs [N, C] logits, the model gives " + y.type().to_string());
    const int64_t cls = y.dim(1);
    for (int64_t r0 = 0; r0 < rows; ++r0) {
      const int64_t label = labels.get_int64(r0);
      if (label < 0 || label >= cls)
        return invalid_argument("evaluate: row " + std::to_string(r0) + " has label " + std::to_string(label) + ", outside [0, " +
                                std::to_string(cls - 1) + "]");
      double mx = -INFINITY;
      int64_t arg = 0;
      for (int64_t j = 0; j < cls; ++j)
        if (y.get_double(r0 * cls + j) > mx) mx = y.get_double(r0 * cls + j), arg = j;
      double se = 0, smooth = 0;
      for (int64_t j = 0; j < cls; ++j) se += std::exp(y.get_double(r0 * cls + j) - mx);
      const double lse = mx + std::log(se);
      for (int64_t j = 0; j < cls; ++j) smooth += lse - y.get_double(r0 * cls + j);
      const double e = c_.label_smoothing;
      loss_sum += (1 - e) * (lse - y.get_double(r0 * cls + label)) + e / static_cast<double>(cls) * smooth;
      correct += arg == label;
    }
    r.accuracy = rows ? static_cast<double>(correct) / static_cast<double>(rows) : 0;
  } else {
    if (labels.numel() != y.numel())
      return invalid_argument("evaluate: targets " + labels.type().to_string() + " differ from the output " + y.type().to_string());
    const int64_t per = y.numel() / std::max<int64_t>(rows, 1);
    for (int64_t i = 0; i < y.numel(); ++i) {
      const double d = y.get_double(i) - labels.get_double(i);
      loss_sum += d * d / static_cast<double>(per);
    }
  }
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
  for (const auto& [name, t] : values_) ck.tensors["param/" + name] = t;
  for (const auto& [name, t] : s_->optimizer->state()) ck.tensors["optim/" + name] = t;
  if (s_->scaler)
    for (const auto& [name, t] : s_->scaler->state()) ck.tensors["scaler/" + name] = t;
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
  for (auto& [name, v] : t->values_) {
    auto it = ck.tensors.find("param/" + name);
    if (it == ck.tensors.end()) return invalid_argument("checkpoint '" + path + "' has no tensor for '" + name + "'");
    if (it->second.dims() != v.dims() || it->second.dtype() != v.dtype())
      return invalid_argument("checkpoint '" + path + "': '" + name + "' is " + it->second.type().to_string() +
                              ", the model wants " + v.type().to_string());
    v = it->second.clone();
  }
  std::map<std::string, Tensor> opt, sc;
  for (const auto& [name, v] : ck.tensors) {
    if (name.rfind("optim/", 0) == 0) opt[name.substr(6)] = v.clone();
    if (name.rfind("scaler/", 0) == 0) sc[name.substr(7)] = v.clone();
  }
  RETURN_IF_ERROR(t->s_->optimizer->load_state(opt));
  if (t->s_->scaler) RETURN_IF_ERROR(t->s_->scaler->load_state(sc).with_context("checkpoint '" + path + "'"));
  t->step_ = ck.step;
  return t;
}

}  // namespace ferry

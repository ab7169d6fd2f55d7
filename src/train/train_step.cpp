// The shared parts of a training step; see train_step.h.
#include "train/train_step.h"

#include <chrono>
#include <cmath>
#include <cstring>
#include <vector>

#include "common/splitmix64.h"
#include "train/autocast.h"

namespace ferry {

StatusOr<TrainGraphOptions> train_graph_options(const TrainConfig& c) {
  TrainGraphOptions o;
  o.batch_size = c.batch_size;
  o.loss = c.loss;
  o.label_smoothing = c.label_smoothing;
  o.freeze = c.freeze;
  o.num_classes = c.num_classes;
  o.seed = c.seed;
  o.recompute_segments = c.recompute_segments;
  o.loss_seed_input = true;
  ASSIGN_OR_RETURN(o.amp, parse_amp_dtype(c.amp));
  o.keep_fp32 = c.keep_fp32;
  return o;
}

ExecutorOptions train_executor_options(const TrainConfig& c) {
  ExecutorOptions eo;
  eo.device = c.device;
  eo.threads = c.threads;
  eo.opt_level = c.opt_level;
  eo.batch_split_rows = 0;  // the loss mixes the batch's rows
  eo.arena_huge_pages = false;
  return eo;
}

NamedTensors train_step_feeds(const TrainGraph& tg, const NamedTensors& inputs, const Tensor& labels,
                              const std::map<std::string, Tensor>& values, uint64_t seed, int64_t m, float loss_seed,
                              bool loss_seed_f64) {
  NamedTensors feeds = inputs;
  feeds.emplace_back(tg.labels, labels);
  for (const auto& [name, t] : values) feeds.emplace_back(name, t);
  const uint64_t mu = static_cast<uint64_t>(m);
  for (size_t i = 0; i < tg.dropout_seeds.size(); ++i)
    feeds.emplace_back(tg.dropout_seeds[i], Tensor::scalar<int64_t>(static_cast<int64_t>(splitmix64(seed ^ splitmix64(mu) ^ (i + 1)) >> 1)));
  feeds.emplace_back(tg.loss_seed, loss_seed_f64 ? Tensor::scalar<double>(loss_seed) : Tensor::scalar<float>(loss_seed));
  return feeds;
}

StatusOr<StepUpdate> apply_step_update(const TrainConfig& c, const ScheduleConfig& schedule, const TrainGraph& tg,
                                       int64_t k, double loss, std::map<std::string, Tensor>* grads,
                                       std::map<std::string, Tensor>* values, GradScaler* scaler, Optimizer* optimizer) {
  StepUpdate u;
  std::vector<Tensor*> gptr;
  for (auto& [name, g] : *grads) gptr.push_back(&g);
  // GradScaler: unscale (and look for inf/NaN) before clipping; an overflowing step is skipped.
  u.skipped = scaler && (scaler->unscale(gptr) || !std::isfinite(loss));
  if (c.clip_grad_norm > 0 && !u.skipped) {
    ASSIGN_OR_RETURN(double norm, clip_grad_norm(gptr, c.clip_grad_norm));
    (void)norm;
  }
  u.lr = lr_at(schedule, effective_lr(c.optimizer), k - 1);
  std::vector<ParamRef> refs;
  for (const auto& p : tg.params) {
    auto it = grads->find(p);
    refs.push_back(ParamRef{p, &values->at(p), it == grads->end() ? nullptr : &it->second});
  }
  if (scaler) RETURN_IF_ERROR(scaler->update(u.skipped, k));
  const auto t0 = std::chrono::steady_clock::now();
  if (!u.skipped) RETURN_IF_ERROR(optimizer->step(refs, u.lr));
  u.update_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return u;
}

void add_checkpoint_tensors(const std::map<std::string, Tensor>& values, const Optimizer& optimizer,
                            const GradScaler* scaler, Checkpoint* ck) {
  for (const auto& [name, t] : values) ck->tensors["param/" + name] = t;
  for (const auto& [name, t] : optimizer.state_view()) ck->tensors["optim/" + name] = t;
  if (scaler)
    for (const auto& [name, t] : scaler->state()) ck->tensors["scaler/" + name] = t;
}

Status restore_checkpoint_tensors(Checkpoint* ck, const std::string& path, std::map<std::string, Tensor>* values,
                                  Optimizer* optimizer, GradScaler* scaler, const std::string& no_scaler_fix) {
  for (auto& [name, t] : *values) {
    auto it = ck->tensors.find("param/" + name);
    if (it == ck->tensors.end()) return invalid_argument("checkpoint '" + path + "' has no tensor for '" + name + "'");
    if (it->second.dims() != t.dims() || it->second.dtype() != t.dtype())
      return invalid_argument("checkpoint '" + path + "': '" + name + "' is " + it->second.type().to_string() +
                              ", the model wants " + t.type().to_string());
    // In place: the training graph's initial values, the source model and the run share this
    // storage, a new tensor here would leave them holding a second copy (issue 40).
    std::memcpy(t.mutable_raw(), it->second.raw(), static_cast<size_t>(t.nbytes()));
    ck->tensors.erase(it);  // copied: freed now, not when the checkpoint goes
  }
  std::map<std::string, Tensor> opt, sc;
  for (auto& [name, t] : ck->tensors) {
    if (name.rfind("optim/", 0) == 0) opt[name.substr(6)] = std::move(t);
    if (name.rfind("scaler/", 0) == 0) sc[name.substr(7)] = std::move(t);
  }
  ck->tensors.clear();
  RETURN_IF_ERROR(optimizer->adopt_state(std::move(opt)));  // parsed for this resume alone: taken, not copied
  if (scaler) {
    if (sc.empty()) return invalid_argument("checkpoint '" + path + "' was written without loss scaling; " + no_scaler_fix);
    RETURN_IF_ERROR(scaler->load_state(sc).with_context("checkpoint '" + path + "'"));
  }
  return Status::ok();
}

Status add_eval_rows(const TrainConfig& c, const Tensor& y, const Tensor& labels, int64_t rows, double* loss_sum,
                     int64_t* correct) {
  if (c.loss == "cross_entropy") {
    if (y.rank() != 2) return invalid_argument("cross_entropy needs [N, C] logits, the model gives " + y.type().to_string());
    const int64_t cls = y.dim(1);
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t label = labels.get_int64(r);
      if (label < 0 || label >= cls)
        return invalid_argument("row " + std::to_string(r) + " has label " + std::to_string(label) + ", outside [0, " +
                                std::to_string(cls - 1) + "]");
      double mx = -INFINITY;
      int64_t arg = 0;
      for (int64_t j = 0; j < cls; ++j)
        if (y.get_double(r * cls + j) > mx) mx = y.get_double(r * cls + j), arg = j;
      double se = 0, smooth = 0;
      for (int64_t j = 0; j < cls; ++j) se += std::exp(y.get_double(r * cls + j) - mx);
      const double lse = mx + std::log(se);
      for (int64_t j = 0; j < cls; ++j) smooth += lse - y.get_double(r * cls + j);
      const double e = c.label_smoothing;
      *loss_sum += (1 - e) * (lse - y.get_double(r * cls + label)) + e / static_cast<double>(cls) * smooth;
      *correct += arg == label;
    }
    return Status::ok();
  }
  const int64_t per = y.rank() > 0 && y.dim(0) > 0 ? y.numel() / y.dim(0) : y.numel();
  if (labels.numel() < rows * per)
    return invalid_argument("targets " + labels.type().to_string() + " are fewer than the output's " +
                            y.type().to_string() + " rows");
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < per; ++j) {
      const double d = y.get_double(r * per + j) - labels.get_double(r * per + j);
      *loss_sum += d * d / static_cast<double>(per);
    }
  return Status::ok();
}

}  // namespace ferry

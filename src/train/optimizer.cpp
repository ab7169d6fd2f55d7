// SGD, Adam and AdamW as torch.optim (1.13) computes them with foreach=False, maximize=False,
// capturable=False: per-parameter state created on the first gradient, hyperparameters converted
// to float32 where torch hands Python floats to float32 kernels, Adam's bias corrections in double
// from the float32 step count (step_t.item()). The element loops are in optimizer_kernels.cpp.
#include "train/optimizer.h"

#include <cmath>
#include <set>

#include "train/optimizer_kernels.h"

namespace ferry {

namespace {

std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

std::string dims_str(const std::vector<int64_t>& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) {
    if (i > 0) s += ',';
    s += std::to_string(d[i]);
  }
  return s + "]";
}

// Checks a step's parameters: f32 values, gradients of the same shape, unique names.
Status check_params(const std::vector<ParamRef>& params) {
  std::set<std::string> seen;
  for (const ParamRef& pr : params) {
    const std::string what = "optimizer: parameter '" + pr.name + "'";
    if (!seen.insert(pr.name).second) return invalid_argument(what + " is listed twice");
    if (pr.value == nullptr) return invalid_argument(what + " has no value tensor");
    if (pr.value->dtype() != DType::kF32) {
      return unsupported(what + " is " + dtype_name(pr.value->dtype()) + "; the optimizers update float32 parameters");
    }
    if (pr.grad == nullptr) continue;
    if (pr.grad->dtype() != DType::kF32) {
      return unsupported(what + ": its gradient is " + dtype_name(pr.grad->dtype()) + ", expected float32");
    }
    if (pr.grad->dims() != pr.value->dims()) {
      return invalid_argument(what + " is " + dims_str(pr.value->dims()) + " but its gradient is " +
                              dims_str(pr.grad->dims()));
    }
  }
  return Status::ok();
}

// The parameter name of a state key "<kind>/<name>" whose kind is in `kinds`.
StatusOr<std::pair<std::string, std::string>> split_key(const std::string& key, const std::vector<std::string>& kinds) {
  const size_t slash = key.find('/');
  const std::string kind = slash == std::string::npos ? "" : key.substr(0, slash);
  for (const std::string& k : kinds) {
    if (k == kind && slash + 1 < key.size()) return std::make_pair(kind, key.substr(slash + 1));
  }
  std::string list;
  for (const std::string& k : kinds) list += (list.empty() ? "" : ", ") + k + "/<param>";
  return invalid_argument("optimizer state '" + key + "' is not an entry of this optimizer (expected " +
                          (list.empty() ? std::string("no entries") : list) +
                          "): was the checkpoint written with another --optimizer or options?");
}

Status check_state_tensor(const std::string& key, const Tensor& t) {
  if (t.dtype() != DType::kF32) {
    return invalid_argument("optimizer state '" + key + "' is " + dtype_name(t.dtype()) + ", expected float32");
  }
  return Status::ok();
}

Status shape_mismatch(const std::string& key, const Tensor& t, const ParamRef& pr) {
  return invalid_argument("optimizer state '" + key + "' is " + dims_str(t.dims()) + " but parameter '" + pr.name +
                          "' is " + dims_str(pr.value->dims()) + ": the checkpoint does not belong to this model");
}

Status check_lr(double lr) {
  if (!(lr >= 0) || !std::isfinite(lr)) {
    return invalid_argument("optimizer step: learning rate " + num(lr) + " must be finite and >= 0");
  }
  return Status::ok();
}

// ---- SGD ------------------------------------------------------------------------------------

class Sgd final : public Optimizer {
 public:
  explicit Sgd(const OptimizerConfig& c)
      : momentum_(c.momentum), dampening_(c.dampening), weight_decay_(effective_weight_decay(c)),
        nesterov_(c.nesterov) {}

  Status step(const std::vector<ParamRef>& params, double lr) override {
    RETURN_IF_ERROR(check_lr(lr));
    RETURN_IF_ERROR(check_params(params));
    for (const ParamRef& pr : params) {
      if (pr.grad == nullptr || momentum_ == 0) continue;
      auto it = buffers_.find(pr.name);
      if (it != buffers_.end() && it->second.dims() != pr.value->dims()) {
        return shape_mismatch("momentum_buffer/" + pr.name, it->second, pr);
      }
    }
    optim::SgdArgs a;
    a.has_weight_decay = weight_decay_ != 0;
    a.weight_decay = static_cast<float>(weight_decay_);
    a.has_momentum = momentum_ != 0;
    a.momentum = static_cast<float>(momentum_);
    a.one_minus_dampening = static_cast<float>(1 - dampening_);
    a.nesterov = nesterov_;
    a.neg_lr = static_cast<float>(-lr);
    for (const ParamRef& pr : params) {
      if (pr.grad == nullptr) continue;
      float* buf = nullptr;
      a.first = false;
      if (a.has_momentum) {
        auto it = buffers_.find(pr.name);
        if (it == buffers_.end()) {
          it = buffers_.emplace(pr.name, Tensor::allocate(DType::kF32, pr.value->dims())).first;
          a.first = true;
        }
        buf = it->second.mutable_data<float>();
      }
      optim::sgd_update(pr.value->mutable_data<float>(), pr.grad->data<float>(), buf, pr.value->numel(), a);
    }
    return Status::ok();
  }

  std::map<std::string, Tensor> state_view() const override {
    std::map<std::string, Tensor> s;
    for (const auto& [name, buf] : buffers_) s.emplace("momentum_buffer/" + name, buf);
    return s;
  }

  Status load(const std::map<std::string, Tensor>& s, bool copy) override {
    std::vector<std::string> kinds;
    if (momentum_ != 0) kinds.push_back("momentum_buffer");
    std::map<std::string, Tensor> buffers;
    for (const auto& [key, t] : s) {
      ASSIGN_OR_RETURN(auto kind_name, split_key(key, kinds));
      RETURN_IF_ERROR(check_state_tensor(key, t));
      buffers.emplace(kind_name.second, copy ? t.clone() : t);
    }
    buffers_ = std::move(buffers);
    return Status::ok();
  }

 private:
  double momentum_, dampening_, weight_decay_;
  bool nesterov_;
  std::map<std::string, Tensor> buffers_;
};

// ---- Adam / AdamW ---------------------------------------------------------------------------

class Adam final : public Optimizer {
 public:
  Adam(const OptimizerConfig& c, bool decoupled)
      : decoupled_(decoupled), beta1_(c.beta1), beta2_(c.beta2), eps_(c.eps),
        weight_decay_(effective_weight_decay(c)), amsgrad_(c.amsgrad) {}

  Status step(const std::vector<ParamRef>& params, double lr) override {
    RETURN_IF_ERROR(check_lr(lr));
    RETURN_IF_ERROR(check_params(params));
    for (const ParamRef& pr : params) {
      auto it = states_.find(pr.name);
      if (pr.grad == nullptr || it == states_.end()) continue;
      for (const auto& [kind, t] : {std::pair<const char*, const Tensor*>{"exp_avg", &it->second.exp_avg},
                                    {"exp_avg_sq", &it->second.exp_avg_sq},
                                    {"max_exp_avg_sq", &it->second.max_exp_avg_sq}}) {
        if (t->defined() && t->dims() != pr.value->dims()) return shape_mismatch(std::string(kind) + "/" + pr.name, *t, pr);
      }
    }
    optim::AdamArgs a;
    a.beta1 = static_cast<float>(beta1_);
    a.one_minus_beta1 = static_cast<float>(1 - beta1_);
    a.beta2 = static_cast<float>(beta2_);
    a.one_minus_beta2 = static_cast<float>(1 - beta2_);
    a.eps = static_cast<float>(eps_);
    a.amsgrad = amsgrad_;
    if (decoupled_) {
      a.has_decay = true;  // torch multiplies even by 1 (a no-op)
      a.decay = static_cast<float>(1 - lr * weight_decay_);
    } else {
      a.has_l2 = weight_decay_ != 0;
      a.l2 = static_cast<float>(weight_decay_);
    }
    for (const ParamRef& pr : params) {
      if (pr.grad == nullptr) continue;
      auto it = states_.find(pr.name);
      if (it == states_.end()) {
        State st;
        st.step = 0;
        st.exp_avg = Tensor::allocate(DType::kF32, pr.value->dims());
        st.exp_avg_sq = Tensor::allocate(DType::kF32, pr.value->dims());
        if (amsgrad_) st.max_exp_avg_sq = Tensor::allocate(DType::kF32, pr.value->dims());
        it = states_.emplace(pr.name, std::move(st)).first;
      }
      State& st = it->second;
      st.step += 1.0f;  // state_steps is a float32 tensor
      const double step = static_cast<double>(st.step);
      const double bias_correction1 = 1 - std::pow(beta1_, step);
      const double bias_correction2 = 1 - std::pow(beta2_, step);
      const double step_size = lr / bias_correction1;
      a.bias_correction2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
      a.neg_step_size = static_cast<float>(-step_size);
      optim::adam_update(pr.value->mutable_data<float>(), pr.grad->data<float>(), st.exp_avg.mutable_data<float>(),
                         st.exp_avg_sq.mutable_data<float>(),
                         amsgrad_ ? st.max_exp_avg_sq.mutable_data<float>() : nullptr, pr.value->numel(), a);
    }
    return Status::ok();
  }

  std::map<std::string, Tensor> state_view() const override {
    std::map<std::string, Tensor> s;
    for (const auto& [name, st] : states_) {
      s.emplace("step/" + name, Tensor::scalar<float>(st.step));
      s.emplace("exp_avg/" + name, st.exp_avg);
      s.emplace("exp_avg_sq/" + name, st.exp_avg_sq);
      if (amsgrad_) s.emplace("max_exp_avg_sq/" + name, st.max_exp_avg_sq);
    }
    return s;
  }

  Status load(const std::map<std::string, Tensor>& s, bool copy) override {
    std::vector<std::string> kinds = {"step", "exp_avg", "exp_avg_sq"};
    if (amsgrad_) kinds.push_back("max_exp_avg_sq");
    std::map<std::string, std::map<std::string, const Tensor*>> by_param;
    for (const auto& [key, t] : s) {
      ASSIGN_OR_RETURN(auto kind_name, split_key(key, kinds));
      RETURN_IF_ERROR(check_state_tensor(key, t));
      by_param[kind_name.second][kind_name.first] = &t;
    }
    std::map<std::string, State> states;
    for (const auto& [name, entries] : by_param) {
      for (const std::string& k : kinds) {
        if (entries.count(k) == 0) {
          return invalid_argument("optimizer state of parameter '" + name + "' lacks '" + k + "/" + name +
                                  "' (a checkpoint of another optimizer, or written without amsgrad?)");
        }
      }
      const Tensor& step = *entries.at("step");
      if (step.numel() != 1) {
        return invalid_argument("optimizer state 'step/" + name + "' has " + std::to_string(step.numel()) +
                                " elements, expected a scalar");
      }
      const float step_value = step.data<float>()[0];
      if (!(step_value >= 0) || !std::isfinite(step_value) || step_value != std::floor(step_value)) {
        return invalid_argument("optimizer state 'step/" + name + "' is " + num(step_value) +
                                ", expected a count of steps");
      }
      State st;
      st.step = step_value;
      auto take = [copy](const Tensor* t) { return copy ? t->clone() : *t; };
      st.exp_avg = take(entries.at("exp_avg"));
      for (const std::string& k : kinds) {
        if (k == "step") continue;
        const Tensor& t = *entries.at(k);
        if (t.dims() != st.exp_avg.dims()) {
          return invalid_argument("optimizer state '" + k + "/" + name + "' is " + dims_str(t.dims()) + " but 'exp_avg/" +
                                  name + "' is " + dims_str(st.exp_avg.dims()));
        }
      }
      st.exp_avg_sq = take(entries.at("exp_avg_sq"));
      if (amsgrad_) st.max_exp_avg_sq = take(entries.at("max_exp_avg_sq"));
      states.emplace(name, std::move(st));
    }
    states_ = std::move(states);
    return Status::ok();
  }

 private:
  struct State {
    float step = 0;
    Tensor exp_avg, exp_avg_sq, max_exp_avg_sq;
  };
  bool decoupled_;
  double beta1_, beta2_, eps_, weight_decay_;
  bool amsgrad_;
  std::map<std::string, State> states_;
};

// ---- the registry ------------------------------------------------------------------------------

StatusOr<std::unique_ptr<Optimizer>> make_sgd(const OptimizerConfig& c, const std::string& where) {
  if (!(c.momentum >= 0) || !std::isfinite(c.momentum)) {
    return invalid_argument(where + "invalid momentum " + num(c.momentum) + ": must be >= 0");
  }
  if (!std::isfinite(c.dampening)) return invalid_argument(where + "invalid dampening " + num(c.dampening));
  if (c.nesterov && (c.momentum <= 0 || c.dampening != 0)) {
    return invalid_argument(where + "nesterov momentum requires a momentum > 0 and zero dampening (got momentum " +
                            num(c.momentum) + ", dampening " + num(c.dampening) + ")");
  }
  if (c.amsgrad) return invalid_argument(where + "amsgrad is an option of adam and adamw");
  return std::unique_ptr<Optimizer>(std::make_unique<Sgd>(c));
}

// adam and adamw: the same options; adamw decays the weights apart from the gradient.
template <bool kDecoupled>
StatusOr<std::unique_ptr<Optimizer>> make_adam(const OptimizerConfig& c, const std::string& where) {
  if (!(c.eps >= 0) || !std::isfinite(c.eps)) return invalid_argument(where + "invalid epsilon (eps) " + num(c.eps) + ": must be >= 0");
  if (!(c.beta1 >= 0 && c.beta1 < 1)) {
    return invalid_argument(where + "invalid beta1 " + num(c.beta1) + ": must be in [0, 1)");
  }
  if (!(c.beta2 >= 0 && c.beta2 < 1)) {
    return invalid_argument(where + "invalid beta2 " + num(c.beta2) + ": must be in [0, 1)");
  }
  if (c.momentum != 0 || c.dampening != 0 || c.nesterov) {
    return invalid_argument(where + "momentum, dampening and nesterov are options of sgd (adam's momentum is beta1)");
  }
  return std::unique_ptr<Optimizer>(std::make_unique<Adam>(c, kDecoupled));
}

int sgd_slots(const OptimizerConfig& c) { return c.momentum != 0 ? 1 : 0; }  // momentum_buffer
int adam_slots(const OptimizerConfig&) { return 2; }                         // exp_avg, exp_avg_sq

}  // namespace

const std::vector<OptimizerDef>& optimizer_kinds() {
  static const std::vector<OptimizerDef> kinds = {
      // torch.optim requires an lr for SGD; 0.01 is ferry's default.
      {"sgd", 0.01, 0.0, sgd_slots, make_sgd},
      {"adam", 1e-3, 0.0, adam_slots, make_adam<false>},
      {"adamw", 1e-3, 1e-2, adam_slots, make_adam<true>},
  };
  return kinds;
}

const OptimizerDef* find_optimizer(const std::string& name) {
  for (const OptimizerDef& d : optimizer_kinds())
    if (d.name == name) return &d;
  return nullptr;
}

std::vector<std::string> optimizer_names() {
  std::vector<std::string> names;
  for (const OptimizerDef& d : optimizer_kinds()) names.push_back(d.name);
  return names;
}

double effective_lr(const OptimizerConfig& c) {
  if (c.lr) return *c.lr;
  const OptimizerDef* d = find_optimizer(c.kind);
  return d ? d->default_lr : 1e-3;
}

double effective_weight_decay(const OptimizerConfig& c) {
  if (c.weight_decay) return *c.weight_decay;
  const OptimizerDef* d = find_optimizer(c.kind);
  return d ? d->default_weight_decay : 0.0;
}

StatusOr<std::unique_ptr<Optimizer>> make_optimizer(const OptimizerConfig& c) {
  const std::string& k = c.kind;
  const OptimizerDef* def = find_optimizer(k);
  if (!def) {
    const std::vector<std::string> names = optimizer_names();
    std::string list;
    for (size_t i = 0; i < names.size(); ++i) list += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
    return invalid_argument("optimizer '" + k + "' is not known; use " + list);
  }
  const std::string where = "optimizer '" + k + "': ";
  const double lr = effective_lr(c), wd = effective_weight_decay(c);
  // torch's checks are `not 0.0 <= x`, which also refuse NaN.
  if (!(lr >= 0) || !std::isfinite(lr)) return invalid_argument(where + "invalid learning rate (lr) " + num(lr) + ": must be >= 0");
  if (!(wd >= 0) || !std::isfinite(wd)) {
    return invalid_argument(where + "invalid weight_decay " + num(wd) + ": must be >= 0");
  }
  return def->make(c, where);
}

StatusOr<double> clip_grad_norm(const std::vector<Tensor*>& grads, double max_norm) {
  if (!(max_norm >= 0) || !std::isfinite(max_norm)) {
    return invalid_argument("clip_grad_norm: max_norm " + num(max_norm) + " must be finite and >= 0");
  }
  // torch: total_norm = norm(stack([norm(g) for g in grads])), each norm a float32 tensor.
  double sum_norms_sq = 0;
  int64_t count = 0;
  for (size_t i = 0; i < grads.size(); ++i) {
    const Tensor* g = grads[i];
    if (g == nullptr) continue;
    if (g->dtype() != DType::kF32) {
      return unsupported("clip_grad_norm: gradient #" + std::to_string(i) + " is " + dtype_name(g->dtype()) +
                         ", expected float32");
    }
    const float norm = static_cast<float>(std::sqrt(optim::sum_of_squares(g->data<float>(), g->numel())));
    if (!std::isfinite(norm)) {
      return invalid_argument("clip_grad_norm: gradient #" + std::to_string(i) + " " + dims_str(g->dims()) +
                              " has a non-finite norm (" + num(norm) +
                              "): the loss diverged or the inputs hold NaN/inf; lower the lr or check the data");
    }
    sum_norms_sq += static_cast<double>(norm) * static_cast<double>(norm);
    ++count;
  }
  if (count == 0) return 0.0;
  const float total_norm = static_cast<float>(std::sqrt(sum_norms_sq));
  if (!std::isfinite(total_norm)) {
    return invalid_argument("clip_grad_norm: the total gradient norm overflows float32; lower the lr or check the data");
  }
  // clip_coef = max_norm / (total_norm + 1e-6): Python float / tensor is reciprocal() * max_norm.
  const float denom = total_norm + static_cast<float>(1e-6);
  float coef = (1.0f / denom) * static_cast<float>(max_norm);
  coef = std::min(coef, 1.0f);  // clamp(max=1.0); torch multiplies by 1.0 then, a no-op
  if (coef < 1.0f) {
    for (Tensor* g : grads) {
      if (g != nullptr) optim::scale(g->mutable_data<float>(), g->numel(), coef);
    }
  }
  return static_cast<double>(total_norm);
}

}  // namespace ferry

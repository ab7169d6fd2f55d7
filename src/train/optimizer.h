// Optimizers (SGD, Adam, AdamW) and gradient-norm clipping with PyTorch 1.13's semantics and
// defaults: the arithmetic of torch.optim's single-tensor (foreach=False) code, in its order and
// in float32 where torch computes on float32 tensors, so a run matches torch step for step
// (bit for bit on the tests' data; see tests/unit/test_train_optimizer.cpp).
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "ir/tensor.h"

namespace ferry {

/// Hyperparameters, named as torch.optim names them. Unset optionals take torch's default for
/// the kind (lr: sgd 0.01 (torch requires one; this is ferry's default), adam/adamw 1e-3;
/// weight_decay: sgd/adam 0, adamw 0.01).
struct OptimizerConfig {
  std::string kind = "sgd";  // sgd | adam | adamw
  std::optional<double> lr;
  double momentum = 0, dampening = 0;     // sgd
  std::optional<double> weight_decay;     // sgd/adam: L2 added to the gradient; adamw: decoupled
  bool nesterov = false;                  // sgd
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;  // adam/adamw
  bool amsgrad = false;                   // adam/adamw
};

/// The learning rate the config asks for (torch's default for the kind when unset).
double effective_lr(const OptimizerConfig& c);
/// The weight decay the config asks for (adamw: 0.01 when unset, else 0).
double effective_weight_decay(const OptimizerConfig& c);

/// A parameter to update: its float32 value (updated in place) and gradient of the same shape.
/// grad == nullptr is torch's `p.grad is None`: the parameter is skipped and its state untouched.
struct ParamRef {
  std::string name;
  Tensor* value = nullptr;
  const Tensor* grad = nullptr;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  /// One optimizer step over `params` with learning rate `lr` (the schedule's value for this
  /// step). State is kept per parameter name and created on a parameter's first gradient.
  /// Errors (nothing is updated then) name the parameter: dtype, shape, duplicate names, a
  /// loaded state whose shape does not match.
  virtual Status step(const std::vector<ParamRef>& params, double lr) = 0;
  /// A deep copy of the state for checkpoints: "momentum_buffer/<name>" (sgd with momentum),
  /// "exp_avg/<name>", "exp_avg_sq/<name>", "max_exp_avg_sq/<name>" (amsgrad) and "step/<name>"
  /// (a float32 scalar, as torch keeps it) for adam/adamw. Parameters never stepped have none.
  std::map<std::string, Tensor> state() const {
    std::map<std::string, Tensor> s = state_view();
    for (auto& [name, t] : s) t = t.clone();
    return s;
  }
  /// The same entries sharing the live buffers (no copy): they change with the next step(). What a
  /// checkpoint writes at once takes this, so saving does not hold the state twice (issue 40).
  virtual std::map<std::string, Tensor> state_view() const = 0;
  /// Replaces the state with a copy of `s` (as state() returned it). Validates the names, dtypes
  /// and that each parameter's entries agree in shape; shapes against the parameters are checked
  /// at the next step(). Errors name the tensor; the state is unchanged then.
  Status load_state(const std::map<std::string, Tensor>& s) { return load(s, /*copy=*/true); }
  /// As load_state, taking `s`'s tensors themselves (no copy; `s` is consumed, also on an error):
  /// the caller holds no other reference to them, and they are writable memory of their own (a
  /// checkpoint just read), so a resume holds the state once.
  Status adopt_state(std::map<std::string, Tensor>&& s) {
    const std::map<std::string, Tensor> taken = std::move(s);
    return load(taken, /*copy=*/false);
  }

 protected:
  /// load_state (copy) and adopt_state (!copy).
  virtual Status load(const std::map<std::string, Tensor>& s, bool copy) = 0;
};

/// One optimizer kind, registered as ops and gradients are (optimizer.cpp's table): torch's
/// defaults for it, the state it keeps, and its maker.
struct OptimizerDef {
  std::string name;                 // OptimizerConfig::kind
  double default_lr = 0;            // when OptimizerConfig::lr is unset
  double default_weight_decay = 0;  // when OptimizerConfig::weight_decay is unset
  /// State tensors kept per parameter, each of the parameter's size (the training memory plan).
  int (*state_slots)(const OptimizerConfig& c) = nullptr;
  /// Checks the kind's own options (lr and weight_decay are checked before) and creates the
  /// optimizer; messages start with `where` ("optimizer 'sgd': ").
  StatusOr<std::unique_ptr<Optimizer>> (*make)(const OptimizerConfig& c, const std::string& where) = nullptr;
};

/// The registered kinds, in the order help texts list them (sgd, adam, adamw).
const std::vector<OptimizerDef>& optimizer_kinds();
/// The kind named `name`, or nullptr.
const OptimizerDef* find_optimizer(const std::string& name);
/// The registered kinds' names.
std::vector<std::string> optimizer_names();

/// Validates `c` (torch's checks: lr >= 0, momentum >= 0, weight_decay >= 0, eps >= 0,
/// betas in [0, 1), nesterov needs momentum > 0 and dampening 0; options of another kind left
/// at their defaults) and creates the optimizer of its kind.
StatusOr<std::unique_ptr<Optimizer>> make_optimizer(const OptimizerConfig& c);

/// torch.nn.utils.clip_grad_norm_(norm_type=2): total_norm = the 2-norm of the per-tensor
/// 2-norms (float32, as torch returns it), clip_coef = max_norm / (total_norm + 1e-6) clamped
/// to 1, every gradient multiplied by it (in float32). Returns total_norm. A non-finite norm is
/// an error and leaves the gradients untouched (torch would scale them to NaN). null entries are
/// skipped (gradients that are None). Norms are accumulated in double, so they can differ from
/// torch's float32 accumulation in the last bit or two.
StatusOr<double> clip_grad_norm(const std::vector<Tensor*>& grads, double max_norm);

}  // namespace ferry

// Dynamic loss scaling (see grad_scaler.h), following torch/cuda/amp/grad_scaler.py and the
// _amp_update_scale_ kernel.
#include "train/grad_scaler.h"

#include <cmath>

namespace ferry {

GradScaler::GradScaler(const GradScalerConfig& config) : c_(config), scale_(static_cast<float>(config.init_scale)) {}

Status GradScaler::validate(const GradScalerConfig& c) {
  const float s = static_cast<float>(c.init_scale);
  if (!(c.init_scale > 0) || !std::isfinite(s) || !std::isfinite(1.0f / s))
    return invalid_argument("loss scale " + std::to_string(c.init_scale) +
                            " must be positive and fit a float32 with its reciprocal (3e-38 .. 3.4e38); try --init-scale 65536");
  if (!(c.growth_factor > 1.0) || !(c.backoff_factor > 0.0 && c.backoff_factor < 1.0))
    return invalid_argument("loss scaling: growth factor must be > 1 and backoff factor in (0, 1)");
  if (c.growth_interval < 1) return invalid_argument("--growth-interval must be at least 1");
  return Status::ok();
}

bool GradScaler::unscale(const std::vector<Tensor*>& grads) const {
  // torch: inv_scale = scale.double().reciprocal().float(); each element checked, then multiplied.
  const float inv = static_cast<float>(1.0 / static_cast<double>(scale_));
  bool found_inf = false;
  for (Tensor* g : grads) {
    if (g == nullptr) continue;
    float* p = g->mutable_data<float>();
    const int64_t n = g->numel();
    for (int64_t i = 0; i < n; ++i) {
      found_inf |= !std::isfinite(p[i]);
      p[i] *= inv;
    }
  }
  return found_inf;
}

Status GradScaler::update(bool found_inf, int64_t step) {
  // A dynamic scale that stays below 1, or a static one whose steps keep overflowing: the
  // gradients are inf/NaN whatever the scale.
  const bool bad = c_.dynamic ? scale_ < 1.0f : found_inf;
  below_one_ = bad ? below_one_ + 1 : 0;
  if (below_one_ >= c_.max_steps_below_one)
    return invalid_argument(
        "step " + std::to_string(step) + ": " +
        (c_.dynamic ? "the loss scale has been below 1 for " + std::to_string(below_one_) + " steps in a row (now " +
                          std::to_string(scale_) + ") and the gradients still overflow"
                    : std::to_string(below_one_) + " steps in a row overflowed at the static loss scale " + std::to_string(scale_)) +
        ": the forward pass itself produces inf/NaN. Check the data for NaN/inf values and extreme inputs, or lower --lr (the weights diverged); "
        "--clip-grad-norm and a smaller --init-scale help when the loss spikes early");
  if (!c_.dynamic) return Status::ok();
  if (found_inf) {
    scale_ = scale_ * static_cast<float>(c_.backoff_factor);
    growth_tracker_ = 0;
  } else {
    const int64_t successful = growth_tracker_ + 1;
    if (successful == c_.growth_interval) {
      const float grown = scale_ * static_cast<float>(c_.growth_factor);
      if (std::isfinite(grown)) scale_ = grown;  // torch: only grows while the new scale is finite
      growth_tracker_ = 0;
    } else {
      growth_tracker_ = successful;
    }
  }
  return Status::ok();
}

std::map<std::string, Tensor> GradScaler::state() const {
  return {{"scale", Tensor::scalar<float>(scale_)},
          {"growth_tracker", Tensor::scalar<int64_t>(growth_tracker_)},
          {"below_one", Tensor::scalar<int64_t>(below_one_)}};
}

Status GradScaler::load_state(const std::map<std::string, Tensor>& state) {
  auto get = [&](const char* key, DType dt) -> const Tensor* {
    auto it = state.find(key);
    return it == state.end() || it->second.dtype() != dt || it->second.numel() != 1 ? nullptr : &it->second;
  };
  const Tensor* s = get("scale", DType::kF32);
  const Tensor* t = get("growth_tracker", DType::kI64);
  const Tensor* b = get("below_one", DType::kI64);
  if (!s || !t || !b) return invalid_argument("the checkpoint's loss-scaler state is missing or malformed (scale, growth_tracker, below_one)");
  scale_ = s->data<float>()[0];
  growth_tracker_ = t->data<int64_t>()[0];
  below_one_ = b->data<int64_t>()[0];
  return Status::ok();
}

}  // namespace ferry

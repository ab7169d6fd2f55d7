// Dynamic loss scaling as torch.cuda.amp.GradScaler does it: backward runs on loss * scale; the
// gradients are then checked for inf/NaN and unscaled (multiplied by the float32 reciprocal of the
// scale); a step that found one is skipped, the scale multiplied by the backoff factor and the
// growth count reset; growth_interval good steps in a row multiply the scale by the growth factor.
// A static scaler (torch_npu's dynamic=False) keeps its scale and still skips overflowing steps.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "ir/tensor.h"

namespace ferry {

struct GradScalerConfig {
  double init_scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  bool dynamic = true;  // false: --loss-scale N, a fixed scale
  /// Stop training when the scale stays below 1 (static: steps overflow) this many steps in a row.
  int64_t max_steps_below_one = 20;
};

class GradScaler {
 public:
  explicit GradScaler(const GradScalerConfig& config);
  /// Checks the configuration (positive finite scale, factors, interval).
  static Status validate(const GradScalerConfig& config);

  /// The scale the next backward uses (float32, as torch keeps it).
  float scale() const { return scale_; }
  /// Checks `grads` for inf/NaN and multiplies them by 1/scale (torch's
  /// _amp_foreach_non_finite_check_and_unscale_); returns whether one was found.
  bool unscale(const std::vector<Tensor*>& grads) const;
  /// torch's _amp_update_scale_ after a step (found_inf: the step was skipped). Fails when the
  /// scale has stayed below 1 for max_steps_below_one steps, saying why that happens.
  Status update(bool found_inf, int64_t step);

  /// State for checkpoints ("scale", "growth_tracker", "below_one") and back.
  std::map<std::string, Tensor> state() const;
  Status load_state(const std::map<std::string, Tensor>& state);

 private:
  GradScalerConfig c_;
  float scale_;
  int64_t growth_tracker_ = 0;
  int64_t below_one_ = 0;  // steps in a row that used a scale below 1 (static: that overflowed)
};

}  // namespace ferry

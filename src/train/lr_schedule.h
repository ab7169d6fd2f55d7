// Learning-rate schedules that reproduce torch.optim.lr_scheduler stepped once per optimizer
// step, value for value (get_last_lr(), including the last bits of the chainable recursive forms).
//
// Which torch composition each kind is (W = warmup_steps, T = total_steps, base = the optimizer's lr):
//   constant : LambdaLR(lambda s: 1.0)
//   step     : StepLR(step_size, gamma)
//   cosine   : CosineAnnealingLR(T_max = T - W, eta_min)
//   onecycle : OneCycleLR(max_lr, total_steps = T, pct_start, anneal_strategy='cos',
//              div_factor, final_div_factor, three_phase=False, cycle_momentum=False)
//              (torch's default cycle_momentum=True also rewrites momentum/beta1; ferry does not)
// With W > 0 (not for onecycle, which warms up itself) the kind runs after a linear warm-up:
//   SequentialLR([LinearLR(start_factor = 1 / (W + 1), end_factor = 1, total_iters = W), <kind>],
//                milestones = [W])
// so step s < W uses base * (s + 1) / (W + 1) (up to rounding) and step W starts the kind at base.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace ferry {

struct ScheduleConfig {
  std::string kind = "constant";  // constant | step | cosine | onecycle
  int64_t total_steps = 0;        // optimizer steps of the run (needed by cosine and onecycle)
  int64_t warmup_steps = 0;
  int64_t step_size = 0;          // step: multiply by gamma every step_size steps (after warm-up)
  double gamma = 0.1;             // step
  double eta_min = 0;             // cosine: the final lr
  std::optional<double> max_lr;   // onecycle: the peak; unset: the optimizer's lr
  double pct_start = 0.3;         // onecycle: share of the steps spent rising
  double div_factor = 25;         // onecycle: initial lr = max_lr / div_factor
  double final_div_factor = 1e4;  // onecycle: final lr = initial lr / final_div_factor

  bool operator==(const ScheduleConfig&) const = default;
};

/// Checks the options the kind uses (errors name the option and what to try).
Status validate_schedule(const ScheduleConfig& c);

/// A schedule stepped like torch's scheduler: lr() is get_last_lr() after step() advances.
class LrSchedule {
 public:
  /// Validates `c`; `base_lr` is the optimizer's configured lr.
  static StatusOr<LrSchedule> create(const ScheduleConfig& c, double base_lr);
  /// The lr for the next optimizer step (step() optimizer steps done so far).
  double lr() const { return lr_; }
  /// Optimizer steps done.
  int64_t step() const { return step_; }
  /// Moves to the next step (torch's scheduler.step()). Onecycle holds its final value after
  /// total_steps (torch raises there).
  void advance();

 private:
  LrSchedule(const ScheduleConfig& c, double base_lr);
  double main_lr(int64_t epoch, bool restart) const;

  ScheduleConfig c_;
  double base_lr_ = 0;
  double lr_ = 0;      // torch's group['lr']
  int64_t step_ = 0;
  double start_factor_ = 1;  // warm-up's LinearLR
};

/// The lr of optimizer step `step` + 1 (`step` steps done), as torch's get_last_lr() after `step`
/// scheduler.step() calls. The recursive forms are replayed from the last call on this thread
/// when it had the same config and an earlier or equal step (so a loop's calls cost O(1) each),
/// else from step 0. `c` must pass validate_schedule (else base_lr is returned).
double lr_at(const ScheduleConfig& c, double base_lr, int64_t step);

}  // namespace ferry

// The schedules replay torch.optim.lr_scheduler's arithmetic in double (Python floats), in the
// order its expressions evaluate, so the values agree to the last bit (math.cos / ** are libm's
// cos / pow here too). Keep the expressions as written: no algebraic simplification.
#include "train/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <optional>

namespace ferry {

namespace {

constexpr double kPi = std::numbers::pi;  // math.pi

std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

// Python's a % b for b > 0 (the result takes b's sign).
int64_t py_mod(int64_t a, int64_t b) {
  const int64_t r = a % b;
  return r < 0 ? r + b : r;
}

// OneCycleLR._annealing_cos.
double annealing_cos(double start, double end, double pct) {
  const double cos_out = std::cos(kPi * pct) + 1;
  return end + (start - end) / 2.0 * cos_out;
}

}  // namespace

Status validate_schedule(const ScheduleConfig& c) {
  const std::string& k = c.kind;
  if (k != "constant" && k != "step" && k != "cosine" && k != "onecycle") {
    return invalid_argument("schedule '" + k + "' is not known; use constant, step, cosine or onecycle");
  }
  if (c.warmup_steps < 0) {
    return invalid_argument("warmup_steps " + std::to_string(c.warmup_steps) + " is negative; use 0 for no warm-up");
  }
  if (k == "step" && c.step_size < 1) {
    return invalid_argument("schedule 'step' needs step_size >= 1 (got " + std::to_string(c.step_size) +
                            "): the lr is multiplied by gamma every step_size steps");
  }
  if (k == "cosine" && c.total_steps <= c.warmup_steps) {
    return invalid_argument("schedule 'cosine' needs total_steps (" + std::to_string(c.total_steps) +
                            ") > warmup_steps (" + std::to_string(c.warmup_steps) +
                            "): it anneals over total_steps - warmup_steps steps");
  }
  if (k == "cosine" && !std::isfinite(c.eta_min)) {
    return invalid_argument("schedule 'cosine': eta_min " + num(c.eta_min) + " is not finite");
  }
  if (k == "onecycle") {
    if (c.warmup_steps > 0) {
      return invalid_argument("schedule 'onecycle' warms up by itself (pct_start of the steps): set warmup_steps to 0");
    }
    if (c.total_steps < 1) {
      return invalid_argument("schedule 'onecycle' needs total_steps >= 1 (got " + std::to_string(c.total_steps) + ")");
    }
    if (!(c.pct_start >= 0 && c.pct_start <= 1)) {
      return invalid_argument("schedule 'onecycle': pct_start " + num(c.pct_start) + " must be in [0, 1]");
    }
    // torch divides by pct_start * total_steps - 1 on the first step: zero is a ZeroDivisionError there.
    if (c.pct_start * static_cast<double>(c.total_steps) - 1 == 0) {
      return invalid_argument("schedule 'onecycle': pct_start * total_steps = 1 leaves no rising phase (torch fails "
                              "with a division by zero); change pct_start or total_steps");
    }
    if (c.max_lr && !(*c.max_lr >= 0 && std::isfinite(*c.max_lr))) {
      return invalid_argument("schedule 'onecycle': max_lr " + num(*c.max_lr) + " must be finite and >= 0");
    }
    if (!(c.div_factor > 0) || !(c.final_div_factor > 0)) {
      return invalid_argument("schedule 'onecycle': div_factor and final_div_factor must be > 0");
    }
  }
  return Status::ok();
}

LrSchedule::LrSchedule(const ScheduleConfig& c, double base_lr) : c_(c), base_lr_(base_lr) {
  const int64_t w = c_.warmup_steps;
  if (w > 0) {
    // SequentialLR: the warm-up LinearLR's initial step on the reset group lr.
    start_factor_ = 1.0 / static_cast<double>(w + 1);
    lr_ = base_lr_ * start_factor_;
  } else {
    lr_ = base_lr_;  // the group lr the scheduler starts from
    lr_ = main_lr(0, /*restart=*/false);
  }
}

StatusOr<LrSchedule> LrSchedule::create(const ScheduleConfig& c, double base_lr) {
  RETURN_IF_ERROR(validate_schedule(c));
  if (!std::isfinite(base_lr) || base_lr < 0) {
    return invalid_argument("schedule: base lr " + num(base_lr) + " must be finite and >= 0");
  }
  return LrSchedule(c, base_lr);
}

// The main scheduler's lr at its epoch `e` given the current group lr_ (its chainable get_lr).
// `restart`: epoch 0 entered through SequentialLR's scheduler.step(0), which takes the closed form.
double LrSchedule::main_lr(int64_t e, bool restart) const {
  const std::string& k = c_.kind;
  if (k == "onecycle") {
    const double max_lr = c_.max_lr ? *c_.max_lr : base_lr_;
    const double initial_lr = max_lr / c_.div_factor;
    const double min_lr = initial_lr / c_.final_div_factor;
    const int64_t step_num = std::min(e, c_.total_steps);
    const double end0 = c_.pct_start * static_cast<double>(c_.total_steps) - 1;
    const double end1 = static_cast<double>(c_.total_steps - 1);
    if (static_cast<double>(step_num) <= end0) {
      const double pct = static_cast<double>(step_num - 0) / (end0 - 0);
      return annealing_cos(initial_lr, max_lr, pct);
    }
    const double pct = (static_cast<double>(step_num) - end0) / (end1 - end0);
    return annealing_cos(max_lr, min_lr, pct);
  }
  if (k == "constant") return base_lr_ * 1.0;  // LambdaLR(lambda s: 1.0)
  if (k == "step") {
    if (e == 0) return restart ? base_lr_ * std::pow(c_.gamma, 0.0) : lr_;
    if (e % c_.step_size != 0) return lr_;
    return lr_ * c_.gamma;
  }
  // cosine
  const double eta_min = c_.eta_min;
  const int64_t t_max = c_.total_steps - c_.warmup_steps;
  const double t = static_cast<double>(t_max);
  if (e == 0) {
    if (!restart) return lr_;
    return eta_min + (base_lr_ - eta_min) * (1 + std::cos(kPi * 0.0 / t)) / 2;
  }
  if (py_mod(e - 1 - t_max, 2 * t_max) == 0) {
    return lr_ + (base_lr_ - eta_min) * (1 - std::cos(kPi / t)) / 2;
  }
  const double ed = static_cast<double>(e);
  return (1 + std::cos(kPi * ed / t)) / (1 + std::cos(kPi * static_cast<double>(e - 1) / t)) * (lr_ - eta_min) +
         eta_min;
}

void LrSchedule::advance() {
  ++step_;
  const int64_t w = c_.warmup_steps;
  if (w > 0 && step_ < w) {
    // LinearLR's chainable get_lr at epoch step_ (1 <= step_ < total_iters).
    const double sf = start_factor_, ef = 1.0;
    lr_ = lr_ * (1. + (ef - sf) / (static_cast<double>(w) * sf + static_cast<double>(step_ - 1) * (ef - sf)));
    return;
  }
  lr_ = main_lr(step_ - w, /*restart=*/w > 0 && step_ == w);
}

double lr_at(const ScheduleConfig& c, double base_lr, int64_t step) {
  // The schedule of the previous call on this thread, kept when the next asks for a later step.
  thread_local std::optional<LrSchedule> last;
  thread_local ScheduleConfig last_config;
  thread_local double last_base = 0;
  const bool reuse = last && last_config == c && last_base == base_lr && last->step() <= step;
  if (!reuse) {
    StatusOr<LrSchedule> s = LrSchedule::create(c, base_lr);
    if (!s.is_ok()) return base_lr;
    last = std::move(s).value();
    last_config = c;
    last_base = base_lr;
  }
  while (last->step() < step) last->advance();
  return last->lr();
}

}  // namespace ferry

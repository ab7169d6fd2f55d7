// Element loops of the optimizers (internal to src/train/optimizer.cpp). Each reproduces the
// float32 operations of torch's CPU kernels in their order: torch's `add(x, alpha=a)` is a fused
// multiply-add on its vector path (ATen's vec::fmadd; the scalar tail is contracted by GCC too),
// `addcmul` is fma(value * t1, t2, self), `addcdiv` is self + value * t1 / t2 (unfused). Scalars
// arrive already rounded to float, as torch converts Python floats for float32 tensors.
#pragma once

#include <cstdint>

namespace ferry::optim {

struct SgdArgs {
  bool has_weight_decay = false, has_momentum = false, first = false, nesterov = false;
  float weight_decay = 0, momentum = 0, one_minus_dampening = 1, neg_lr = 0;
};

/// One SGD step over n elements: p (updated), g (read), buf (momentum buffer, written when
/// has_momentum; `first` initialises it to the gradient, as torch clones d_p on the first step).
void sgd_update(float* p, const float* g, float* buf, int64_t n, const SgdArgs& a);

struct AdamArgs {
  bool has_l2 = false;     // adam: grad += weight_decay * p
  bool has_decay = false;  // adamw: p *= decay first
  bool amsgrad = false;
  float l2 = 0, decay = 1;
  float beta1 = 0, one_minus_beta1 = 0, beta2 = 0, one_minus_beta2 = 0;
  float bias_correction2_sqrt = 1, eps = 0, neg_step_size = 0;
};

/// One Adam/AdamW step over n elements (m = exp_avg, v = exp_avg_sq, vmax = max_exp_avg_sq
/// when amsgrad, else unused).
void adam_update(float* p, const float* g, float* m, float* v, float* vmax, int64_t n, const AdamArgs& a);

/// Sum of x[i]^2 in double.
double sum_of_squares(const float* x, int64_t n);

/// x[i] *= s (float32).
void scale(float* x, int64_t n, float s);

/// Tests only: true runs the baseline x86-64 loops even where AVX2+FMA is available.
void force_baseline_for_testing(bool on);

}  // namespace ferry::optim

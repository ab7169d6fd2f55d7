// CPU kernels of ops/grad_activation.cpp's activation gradients: com.ferry ReluGrad,
// LeakyReluGrad, SigmoidGrad, TanhGrad, HardSwishGrad (f32, vectorized, written over dY when the
// memory plan allows; anything else runs the reference kernel).

#include "backends/cpu/grad_kernel_util.h"
#include "backends/cpu/vec_math.h"

namespace ferry::cpu {
namespace {
#define FERRY_PAIR_SPAN(NAME, EXPR)                                                        \
  FERRY_VEC void NAME(const float* dy, const float* z, float* dx, int64_t n, float alpha) { \
    (void)alpha;                                                                           \
    for (int64_t i = 0; i < n; ++i) {                                                      \
      const float g = dy[i], v = z[i];                                                     \
      dx[i] = EXPR;                                                                        \
    }                                                                                      \
  }
FERRY_PAIR_SPAN(relu_grad_span, v > 0.f ? g : 0.f)
FERRY_PAIR_SPAN(leaky_relu_grad_span, v > 0.f ? g : alpha * g)
FERRY_PAIR_SPAN(sigmoid_grad_span, g * v * (1.f - v))
FERRY_PAIR_SPAN(tanh_grad_span, g * (1.f - v * v))
FERRY_PAIR_SPAN(hard_swish_grad_span, v < -3.f ? 0.f : (v <= 3.f ? g * (v * (1.f / 3.f) + 0.5f) : g))
#undef FERRY_PAIR_SPAN

using PairSpan = void (*)(const float*, const float*, float*, int64_t, float);

template <PairSpan kSpan>
StatusOr<bool> run_pair_grad(KernelContext& ctx) {
  if (!all_f32(ctx) || ctx.num_inputs() != 2) return false;
  const Tensor &dy = ctx.input(0), &z = ctx.input(1);
  if (dy.dims() != z.dims()) return false;
  const float alpha = ctx.get_float("alpha", 0.01f);
  ASSIGN_OR_RETURN(Tensor * dx, ctx.allocate_output_over(0, 0, DType::kF32, dy.dims()));
  const float *pg = dy.data<float>(), *pz = z.data<float>();
  float* pdx = dx->mutable_data<float>();
  parallel_ranges(dy.numel(), 2, [&](int64_t s, int64_t e) { kSpan(pg + s, pz + s, pdx + s, e - s, alpha); });
  return true;
}

}  // namespace
}  // namespace ferry::cpu

namespace ferry {
void register_cpu_grad_activation_kernels(CpuKernelTable& t) {
  using namespace cpu;
  t.add("com.ferry", "ReluGrad", grad_kernel_factory(run_pair_grad<relu_grad_span>));
  t.add("com.ferry", "LeakyReluGrad", grad_kernel_factory(run_pair_grad<leaky_relu_grad_span>));
  t.add("com.ferry", "SigmoidGrad", grad_kernel_factory(run_pair_grad<sigmoid_grad_span>));
  t.add("com.ferry", "TanhGrad", grad_kernel_factory(run_pair_grad<tanh_grad_span>));
  t.add("com.ferry", "HardSwishGrad", grad_kernel_factory(run_pair_grad<hard_swish_grad_span>));
}
}  // namespace ferry

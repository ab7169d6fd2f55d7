// Pieces shared by the cpu backend's training kernel files (grad_norm_pool.cpp, grad_activation.cpp,
// grad_blocked.cpp): the factory of their f32 kernels, the outputs a node wants, per-channel threads,
// and BatchNormTraining's per-channel arithmetic between its sums and its elementwise loops (one
// definition for the plain NCHW and the blocked nChwBc kernels, which differ only in those loops).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>

#include "backends/cpu/cpu_kernel_util.h"
#include "backends/cpu/cpu_parallel.h"

namespace ferry::cpu {

/// Whether the node has output i and something reads it (an empty name: not computed).
inline bool output_wanted(const KernelContext& ctx, int64_t i) {
  return i < ctx.num_outputs() && !ctx.node().outputs[static_cast<size_t>(i)].empty();
}

/// Calls fn(c) for every channel, threads over channels when the work (elements per channel) pays.
template <typename F>
void for_channels(int64_t C, int64_t per_channel, F fn) {
  parallel_ranges(C, per_channel, [&](int64_t b, int64_t e) {
    for (int64_t c = b; c < e; ++c) fn(c);
  });
}

/// Whether t is an f32 vector of C values (a per-channel operand).
inline bool is_f32_vector(const Tensor& t, int64_t C) {
  return t.dtype() == DType::kF32 && t.rank() == 1 && t.dim(0) == C;
}

/// The factory of a training kernel `fn` (FnKernel: the reference runs what fn declines): every
/// input may be f32 (or int64) at load time; other nodes get no kernel.
inline CpuKernelFactory grad_kernel_factory(StatusOr<bool> (*fn)(KernelContext&)) {
  return [fn](const Node& node, const OpSchema& schema, const Graph& g) -> StatusOr<std::unique_ptr<Kernel>> {
    for (const std::string& in : node.inputs)
      if (!in.empty() && !maybe_f32(g, in) && g.find_type(in)->dtype != DType::kI64) return std::unique_ptr<Kernel>();
    return make_fn_kernel(fn, schema);
  };
}

/// BatchNormTraining, channel c: from s1 = sum(x - k) and s2 = sum((x - k)^2) over its `count` values
/// (k: its first value), writes the statistics outputs out[1..4] (running mean, running var, saved
/// mean, saved inv std; each where not null) and returns Y = a * X + b's coefficients. In double, as
/// the reference (src/ops/grad_norm_pool.cpp); `scale`, `bias`, `rm`, `rv`: the channel's inputs.
inline void bn_training_channel(float k, double s1, double s2, int64_t count, double eps, double momentum, float scale,
                                float bias, float rm, float rv, Tensor* const* out, int64_t c, float* a, float* b) {
  const double dmean = s1 / static_cast<double>(count);
  const double ss = std::max(0.0, s2 - s1 * dmean);  // sum of squared deviations
  const double mu = k + dmean, var = ss / static_cast<double>(count);
  const double inv = 1.0 / std::sqrt(var + eps);
  if (out[1]) out[1]->mutable_data<float>()[c] = static_cast<float>(rm * momentum + mu * (1.0 - momentum));
  if (out[2])
    out[2]->mutable_data<float>()[c] = static_cast<float>(rv * momentum + ss / static_cast<double>(count - 1) * (1.0 - momentum));
  if (out[3]) out[3]->mutable_data<float>()[c] = static_cast<float>(mu);
  if (out[4]) out[4]->mutable_data<float>()[c] = static_cast<float>(inv);
  const double sa = inv * scale;
  *a = static_cast<float>(sa);
  *b = static_cast<float>(bias - mu * sa);
}

/// BatchNormTrainingGrad, channel c: from sg = sum(dY) and sgxm = sum(dY * (X - mean)) over its
/// `count` values, writes dScale and dB (out[1], out[2], where not null) and returns dX = a * dY +
/// b * X + cc's coefficients: dX = k * (count * dY - dB - (X - mean) * inv * dScale), k = scale * inv / count.
inline void bn_training_grad_channel(double sg, double sgxm, float inv, float scale, float mean, double count,
                                     Tensor* const* out, int64_t c, float* a, float* b, float* cc) {
  const double is = inv, sgx = sgxm * is;
  if (out[1]) out[1]->mutable_data<float>()[c] = static_cast<float>(sgx);
  if (out[2]) out[2]->mutable_data<float>()[c] = static_cast<float>(sg);
  const double k = scale * is / count;
  const double da = k * count, db = -k * is * sgx, dc = -k * sg - db * mean;
  *a = static_cast<float>(da);
  *b = static_cast<float>(db);
  *cc = static_cast<float>(dc);
}

}  // namespace ferry::cpu

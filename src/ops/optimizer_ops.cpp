// Op family 'optimizer_ops': the ai.onnx.preview.training optimizers Adagrad, Momentum and Adam, one
// update step as ONNX defines it (computed in double). The trainer's optimizers (src/train/optimizer)
// follow torch's semantics; these are the ONNX ops a model may contain.
#include <algorithm>
#include <cmath>
#include <string>

#include "ops/op_util.h"

namespace ferry {
namespace {

using std::string;
using std::vector;

// ---- ai.onnx.preview.training optimizers ----------------------------------------------------
// Inputs: R (learning rate, scalar), T (update count, scalar int64), then n groups of tensors
// (X..., G..., and the optimizer's state tensors). Outputs: the updated X... and state tensors.

enum class Optim { kAdagrad, kMomentum, kAdam };

int optim_groups(Optim o) { return o == Optim::kAdagrad ? 3 : (o == Optim::kMomentum ? 3 : 4); }

template <Optim kO, class Ctx>
Status optim_counts(Ctx& ctx, int64_t num_inputs, int64_t num_outputs, int64_t* n) {
  const int g = optim_groups(kO);
  if (num_inputs < 2 + g || (num_inputs - 2) % g != 0)
    return ctx.error("expects R, T and " + std::to_string(g) + " tensors per optimized tensor, got " +
                     std::to_string(num_inputs) + " inputs");
  *n = (num_inputs - 2) / g;
  if (num_outputs > (g - 1) * *n)
    return ctx.error("has " + std::to_string(num_outputs) + " outputs; at most " + std::to_string((g - 1) * *n) + " expected");
  if (kO == Optim::kMomentum) {
    for (const char* req : {"alpha", "beta", "mode", "norm_coefficient"})
      if (!ctx.has(req)) return ctx.error(string("required attribute '") + req + "' is missing");
    const string mode = ctx.get_string("mode", "");
    if (mode != "standard" && mode != "nesterov")
      return ctx.error("attribute 'mode' must be 'standard' or 'nesterov', got '" + mode + "'");
  }
  return Status::ok();
}

template <Optim kO>
Status infer_optim(InferContext& ctx) {
  int64_t n = 0;
  RETURN_IF_ERROR(optim_counts<kO>(ctx, ctx.num_inputs(), ctx.num_outputs(), &n));
  // Output j*n + i has the type of input 2 + (j == 0 ? 0 : j + 1) * n + i (X, then the state tensors).
  for (int64_t o = 0; o < ctx.num_outputs(); ++o) {
    const int64_t j = o / n, i = o % n;
    const int64_t in = 2 + (j == 0 ? 0 : j + 1) * n + i;
    ctx.set_output(o, ctx.has_input(in) ? ctx.input_type(in) : TensorType{});
  }
  return Status::ok();
}

template <Optim kO>
Status k_optim(KernelContext& ctx) {
  int64_t n = 0;
  RETURN_IF_ERROR(optim_counts<kO>(ctx, ctx.num_inputs(), ctx.num_outputs(), &n));
  const Tensor& rt = ctx.input(0);
  const Tensor& tt = ctx.input(1);
  if (!dtype_is_float(rt.dtype()) || rt.numel() != 1) return ctx.error("input 'R' must be a float scalar");
  if (!dtype_is_integer(tt.dtype()) || tt.numel() != 1) return ctx.error("input 'T' must be an int64 scalar");
  const double r = rt.get_double(0);
  const double t = static_cast<double>(tt.get_int64(0));
  const int g = optim_groups(kO);
  for (int64_t i = 0; i < n; ++i) {
    vector<const Tensor*> in(static_cast<size_t>(g));
    for (int k = 0; k < g; ++k) {
      in[k] = &ctx.input(2 + k * n + i);
      if (!dtype_is_float(in[k]->dtype())) return ctx.error("optimized tensors and their state must be float tensors");
      if (in[k]->dims() != in[0]->dims() || in[k]->dtype() != in[0]->dtype())
        return ctx.error("tensor group " + std::to_string(i) + ": input " + std::to_string(2 + k * n + i) + " " +
                         dtype_name(in[k]->dtype()) + dims_to_string(in[k]->dims()) + " does not match X " +
                         dtype_name(in[0]->dtype()) + dims_to_string(in[0]->dims()));
    }
    const vector<double> x = in[0]->to_double_vector(), gr = in[1]->to_double_vector(), s1 = in[2]->to_double_vector();
    const vector<double> s2 = g == 4 ? in[3]->to_double_vector() : vector<double>();
    const size_t m = x.size();
    vector<double> x_new(m), s1_new(m), s2_new(g == 4 ? m : 0);
    if (kO == Optim::kAdagrad) {
      const double decay = ctx.get_float("decay_factor", 0.0f), eps = ctx.get_float("epsilon", 1e-6f);
      const double norm = ctx.get_float("norm_coefficient", 0.0f);
      const double r_ = r / (1.0 + t * decay);
      for (size_t k = 0; k < m; ++k) {
        const double greg = norm * x[k] + gr[k];
        s1_new[k] = s1[k] + greg * greg;
        x_new[k] = x[k] - r_ * greg / (std::sqrt(s1_new[k]) + eps);
      }
    } else if (kO == Optim::kMomentum) {
      const double alpha = ctx.get_float("alpha", 0.0f), beta = ctx.get_float("beta", 0.0f);
      const double norm = ctx.get_float("norm_coefficient", 0.0f);
      const bool nesterov = ctx.get_string("mode", "") == "nesterov";
      const double beta_adj = t > 0 ? beta : 1.0;
      for (size_t k = 0; k < m; ++k) {
        const double greg = norm * x[k] + gr[k];
        s1_new[k] = alpha * s1[k] + beta_adj * greg;
        x_new[k] = nesterov ? x[k] - r * (greg + alpha * s1_new[k]) : x[k] - r * s1_new[k];
      }
    } else {
      const double alpha = ctx.get_float("alpha", 0.9f), beta = ctx.get_float("beta", 0.999f);
      const double eps = ctx.get_float("epsilon", 1e-6f), norm = ctx.get_float("norm_coefficient", 0.0f);
      const double norm_post = ctx.get_float("norm_coefficient_post", 0.0f);
      const double r_adj = t > 0 ? r * std::sqrt(1.0 - std::pow(beta, t)) / (1.0 - std::pow(alpha, t)) : r;
      for (size_t k = 0; k < m; ++k) {
        const double greg = norm * x[k] + gr[k];
        s1_new[k] = alpha * s1[k] + (1.0 - alpha) * greg;
        s2_new[k] = beta * s2[k] + (1.0 - beta) * greg * greg;
        const double xn = x[k] - r_adj * (s1_new[k] / (std::sqrt(s2_new[k]) + eps));
        x_new[k] = (1.0 - norm_post) * xn;
      }
    }
    const vector<double>* outs[3] = {&x_new, &s1_new, &s2_new};
    for (int j = 0; j < g - 1; ++j) {
      const int64_t o = j * n + i;
      if (o >= ctx.num_outputs()) continue;
      ASSIGN_OR_RETURN(Tensor out, doubles_to_tensor(*outs[j], in[0]->dims(), in[0]->dtype()));
      ctx.set_output(o, std::move(out));
    }
  }
  return Status::ok();
}

}  // namespace

void register_optimizer_ops_ops(OpRegistry& r) {
  const char* kTraining = "ai.onnx.preview.training";
  const vector<DType> opt_types = {DType::kF32, DType::kF64};
  r.add(OpSchema{.name = "Adagrad", .domain = kTraining, .since_version = 1, .min_inputs = 5, .max_inputs = 1 << 20,
                 .min_outputs = 1, .max_outputs = 1 << 20,
                 .attrs = {{"decay_factor", AttrType::kFloat}, {"epsilon", AttrType::kFloat}, {"norm_coefficient", AttrType::kFloat}},
                 .types = opt_types, .infer = infer_optim<Optim::kAdagrad>, .kernel = k_optim<Optim::kAdagrad>});
  r.add(OpSchema{.name = "Momentum", .domain = kTraining, .since_version = 1, .min_inputs = 5, .max_inputs = 1 << 20,
                 .min_outputs = 1, .max_outputs = 1 << 20,
                 .attrs = {{"alpha", AttrType::kFloat, true}, {"beta", AttrType::kFloat, true}, {"mode", AttrType::kString, true},
                           {"norm_coefficient", AttrType::kFloat, true}},
                 .types = opt_types, .infer = infer_optim<Optim::kMomentum>, .kernel = k_optim<Optim::kMomentum>});
  r.add(OpSchema{.name = "Adam", .domain = kTraining, .since_version = 1, .min_inputs = 6, .max_inputs = 1 << 20,
                 .min_outputs = 1, .max_outputs = 1 << 20,
                 .attrs = {{"alpha", AttrType::kFloat}, {"beta", AttrType::kFloat}, {"epsilon", AttrType::kFloat},
                           {"norm_coefficient", AttrType::kFloat}, {"norm_coefficient_post", AttrType::kFloat}},
                 .types = opt_types, .infer = infer_optim<Optim::kAdam>, .kernel = k_optim<Optim::kAdam>});
}

}  // namespace ferry

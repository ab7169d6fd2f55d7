// cpu kernel of com.ferry.InvertedResidual (src/ops/fused_block.cpp): cpu::InvertedResidual
// (inverted_residual.h) on weights packed once at load. Covers f32 with constant weights and
// activations that are clamps (none, Relu, Clip); anything else runs the reference kernel.
#include <cmath>
#include <memory>

#include <omp.h>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/dnnl_util.h"
#include "backends/cpu/inverted_residual.h"
#include "ops/fused_activation.h"

namespace ferry {
namespace {

bool clamp_of(const FusedActivation& a, cpu::InvertedResidual::Clamp* c) {
  switch (a.kind) {
    case ActKind::kNone: *c = {-INFINITY, INFINITY}; return true;
    case ActKind::kRelu: *c = {0.f, INFINITY}; return true;
    case ActKind::kClip: *c = {a.alpha, a.beta}; return a.alpha <= a.beta;
    default: return false;
  }
}

bool activation(const Node& node, const char* prefix, cpu::InvertedResidual::Clamp* c) {
  const std::string p = prefix;
  std::string name;
  std::vector<float> params;
  if (const Attribute* a = node.attr(p + "activation")) name = a->s;
  if (const Attribute* a = node.attr(p + "activation_params")) params = a->floats;
  auto act = parse_fused_activation(name, params);
  return act.is_ok() && clamp_of(act.value(), c);
}

class InvertedResidualKernel : public Kernel {
 public:
  InvertedResidualKernel(const Node& node, KernelFn fallback) : node_(node), fallback_(fallback) {}

  bool init(const Graph& graph) {
    if (!cpu::InvertedResidual::available() || node_.inputs.size() < 7) return false;
    const bool expand = !node_.inputs[1].empty() || !node_.inputs[2].empty();
    const Tensor* t[7] = {};
    for (size_t i = expand ? 1 : 3; i < 7; ++i) {
      t[i] = cpu::constant_input(graph, node_, i);
      if (!t[i] || t[i]->dtype() != DType::kF32) return false;
    }
    if ((expand && t[1]->rank() != 4) || t[3]->rank() != 4 || t[5]->rank() != 4) return false;
    const int64_t cmid = t[3]->dim(0), cin = expand ? t[1]->dim(1) : cmid, cout = t[5]->dim(0);
    if ((expand && (t[1]->dims() != std::vector<int64_t>{cmid, cin, 1, 1} || t[2]->numel() != cmid)) ||
        t[3]->dims() != std::vector<int64_t>{cmid, 1, 3, 3} || t[4]->numel() != cmid ||
        t[5]->dims() != std::vector<int64_t>{cout, cmid, 1, 1} || t[6]->numel() != cout)
      return false;
    const Attribute* s = node_.attr("stride");
    const int64_t stride = s ? s->i : 1;
    if (stride != 1 && stride != 2) return false;
    cpu::InvertedResidual::Clamp ae{-INFINITY, INFINITY}, ad, ap;
    if ((expand && !activation(node_, "expand_", &ae)) || !activation(node_, "dw_", &ad) || !activation(node_, "", &ap)) return false;
    cin_ = cin;
    cout_ = cout;
    has_z_ = node_.inputs.size() > 7 && !node_.inputs[7].empty();
    block_ = std::make_unique<cpu::InvertedResidual>(expand ? t[1]->data<float>() : nullptr,
                                                     expand ? t[2]->data<float>() : nullptr, cin, cmid, ae,
                                                     t[3]->data<float>(), t[4]->data<float>(), stride, ad,
                                                     t[5]->data<float>(), t[6]->data<float>(), cout, ap);
    return true;
  }

  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    if (x.dtype() != DType::kF32 || x.rank() != 4 || x.dim(1) < 1 || x.dim(2) < 1 || x.dim(3) != cin_) return fallback_(ctx);
    const std::vector<int64_t> out = {x.dim(0), block_->out_size(x.dim(1)), block_->out_size(x.dim(2)), cout_};
    if (has_z_ && (ctx.input(7).dtype() != DType::kF32 || ctx.input(7).dims() != out)) return fallback_(ctx);
    ASSIGN_OR_RETURN(Tensor * y, has_z_ ? ctx.allocate_output_over(0, 7, DType::kF32, out)
                                        : ctx.allocate_output(0, DType::kF32, out, false));
    const int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
    block_->run(x.data<float>(), x.dim(0), x.dim(1), x.dim(2), has_z_ ? ctx.input(7).data<float>() : nullptr,
                y->mutable_data<float>(), threads);
    return Status::ok();
  }

 private:
  Node node_;
  KernelFn fallback_;
  int64_t cin_ = 0, cout_ = 0;
  bool has_z_ = false;
  std::unique_ptr<cpu::InvertedResidual> block_;
};

StatusOr<std::unique_ptr<Kernel>> make_inverted_residual(const Node& node, const OpSchema& schema, const Graph& graph) {
  auto k = std::make_unique<InvertedResidualKernel>(node, schema.kernel);
  if (!k->init(graph)) return std::unique_ptr<Kernel>();
  return std::unique_ptr<Kernel>(std::move(k));
}

}  // namespace

void register_cpu_inverted_residual_kernel_kernels(CpuKernelTable& t) {
  t.add("com.ferry", "InvertedResidual", make_inverted_residual);
}

}  // namespace ferry

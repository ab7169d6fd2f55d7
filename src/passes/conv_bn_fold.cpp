// Pass conv_bn_fold (level 2): BatchNormalization (inference) right after a Conv or ConvTranspose
// with constant weights is folded into the convolution's weights and bias:
//   s = scale / sqrt(var + eps);  W'[m, ...] = W[m, ...] * s[m];  B'[m] = (B[m] - mean[m]) * s[m] + beta[m]
// (for ConvTranspose, output channel m of group g is W[g * C/group + c, m - g * M/group, ...]).
// f32 and f64 weights; the arithmetic is done in double. New weights are new initializers: the
// original tensors are shared with the loaded model and never written.
#include <cmath>

#include "passes/graph_edit.h"
#include "passes/pipeline.h"

namespace ferry {
namespace {

// Output channel of each element of W (Conv: axis 0; ConvTranspose: group-interleaved axis 1).
std::vector<int64_t> output_channel_of(const Node& conv, const Tensor& w) {
  const int64_t per = w.numel() / std::max<int64_t>(1, w.dim(0) * w.dim(1));  // kernel elements
  std::vector<int64_t> ch(static_cast<size_t>(w.numel()));
  const bool transpose = conv.op_type == "ConvTranspose";
  int64_t group = 1;
  if (const Attribute* a = conv.attr("group")) group = a->i;
  const int64_t cg = w.dim(0) / group, mg = w.dim(1);
  for (int64_t i = 0; i < w.numel(); ++i) {
    const int64_t a0 = i / (w.dim(1) * per), a1 = (i / per) % w.dim(1);
    ch[i] = transpose ? (a0 / cg) * mg + a1 : a0;
  }
  return ch;
}

bool is_float_weight(const Tensor* t) { return t && (t->dtype() == DType::kF32 || t->dtype() == DType::kF64); }

bool fold_one(PatternContext& pc, long bn_index) {
  Graph& g = pc.g;
  const Node& bn = g.nodes[bn_index];
  if (bn.inputs.size() != 5 || bn.outputs.size() != 1) return false;  // training outputs requested
  if (const Attribute* t = bn.attr("training_mode"); t && t->i != 0) return false;
  if (const Attribute* s = bn.attr("spatial"); s && s->i == 0) return false;
  long conv = pc.single_use_producer(bn.inputs[0], "Conv");
  if (conv < 0) conv = pc.single_use_producer(bn.inputs[0], "ConvTranspose");
  if (conv < 0) return false;
  const Node& cn = g.nodes[conv];
  const Tensor* w = constant_value(g, cn.inputs[1]);
  const Tensor* b = cn.inputs.size() > 2 && !cn.inputs[2].empty() ? constant_value(g, cn.inputs[2]) : nullptr;
  if (cn.inputs.size() > 2 && !cn.inputs[2].empty() && !b) return false;
  if (!is_float_weight(w) || w->rank() < 3 || (b && b->dtype() != w->dtype())) return false;
  const Tensor* p[4];
  for (int i = 0; i < 4; ++i) {
    p[i] = constant_value(g, bn.inputs[1 + i]);
    if (!p[i] || p[i]->dtype() != w->dtype() || p[i]->rank() != 1) return false;
  }
  int64_t group = 1;
  if (const Attribute* a = cn.attr("group")) group = a->i;
  const int64_t m = cn.op_type == "Conv" ? w->dim(0) : w->dim(1) * group;
  for (int i = 0; i < 4; ++i)
    if (p[i]->numel() != m) return false;
  if (b && b->numel() != m) return false;
  const double eps = bn.attr("epsilon") ? bn.attr("epsilon")->f : 1e-5;

  std::vector<double> scale(static_cast<size_t>(m)), bias(static_cast<size_t>(m));
  for (int64_t c = 0; c < m; ++c) {
    scale[c] = p[0]->get_double(c) / std::sqrt(p[3]->get_double(c) + eps);
    bias[c] = ((b ? b->get_double(c) : 0.0) - p[2]->get_double(c)) * scale[c] + p[1]->get_double(c);
  }
  Tensor nw = Tensor::allocate(w->dtype(), w->dims());
  Tensor nb = Tensor::allocate(w->dtype(), {m});
  const std::vector<int64_t> ch = output_channel_of(cn, *w);
  for (int64_t i = 0; i < w->numel(); ++i) {
    const double v = w->get_double(i) * scale[ch[i]];
    if (w->dtype() == DType::kF32) nw.mutable_data<float>()[i] = static_cast<float>(v);
    else nw.mutable_data<double>()[i] = v;
  }
  for (int64_t c = 0; c < m; ++c) {
    if (w->dtype() == DType::kF32) nb.mutable_data<float>()[c] = static_cast<float>(bias[c]);
    else nb.mutable_data<double>()[c] = bias[c];
  }
  Node fused = cn;
  const std::string wn = fresh_name(g, cn.name + "_W_bnfold"), bname = fresh_name(g, cn.name + "_B_bnfold");
  g.initializers[wn] = nw;
  g.value_types[wn] = nw.type();
  g.initializers[bname] = nb;
  g.value_types[bname] = nb.type();
  fused.inputs.resize(3);
  fused.inputs[1] = wn;
  fused.inputs[2] = bname;
  fused.outputs = bn.outputs;
  fused.name = cn.name;
  pc.replace({conv, bn_index}, std::move(fused));
  return true;
}

Status run_conv_bn_fold(Model* model, PassContext& ctx) {
  PatternContext pc(model->graph);
  for (size_t i = 0; i < pc.g.nodes.size(); ++i) {
    const Node& n = pc.g.nodes[i];
    if (pc.dead[i] || !n.domain.empty() || n.op_type != "BatchNormalization") continue;
    if (fold_one(pc, static_cast<long>(i))) ++ctx.changes;
  }
  pc.finish();
  return Status::ok();
}

}  // namespace

GraphPass conv_bn_fold_pass() {
  return {"conv_bn_fold", 2, "BatchNormalization after Conv/ConvTranspose folds into the weights and bias",
          run_conv_bn_fold};
}

}  // namespace ferry

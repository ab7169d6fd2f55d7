// Pass amp_bf16_fold (level 2, devices with trait "bf16_conv": cpu, offered on a CPU with avx512_bf16):
// `ferry train --amp bf16`
// computes its convolutions natively in bf16. The autocast rewrite (src/train/autocast.cpp) is the
// specification: each operand of a matrix op is rounded by a Cast pair f32 -> bf16 -> f32, the op
// computes in f32 and its result is rounded by another pair; autodiff differentiates through the
// pairs, so ConvGrad reads rounded dY, X, W and its dX / dW are rounded before they reach f32 values.
// This pass folds those pairs into the convolution nodes of the training graph (Conv with run-time
// weights and com.ferry.ConvGrad):
//   - an input read through a pair is read from the pair's source, and the node gets amp_bf16 = 1
//     (its kernel, src/backends/cpu/dnnl_conv_grad.cpp, converts the operands to bf16 in the reorder
//     into oneDNN's layout, which rounds as the Cast does, and runs oneDNN's bf16 primitive with f32
//     accumulation);
//   - an output whose only reader is a pair (nothing else reads the unrounded value) is written
//     rounded under the pair's output name; bit i of amp_round_outputs says output i is rounded (the
//     kernel writes it in bf16, read back exactly into the f32 tensor).
// The pairs nothing reads any more (the rounded copies of the saved activations among them) go with
// dead_node_removal. Results differ from the emulated graph only by oneDNN's f32 accumulation order.
// A node folds only when every convolution operand (X, W; dY, X, W for ConvGrad) comes through a
// pair; the bias keeps its pair. $FERRY_AMP_NATIVE=0 takes the trait from the cpu backend
// (backends/cpu/cpu_backend.cpp), so the pass does not run (the emulated graph runs).
#include "passes/graph_edit.h"
#include "passes/pipeline.h"

namespace ferry {
namespace {

bool is_cast_to(const Node& n, DType to) {
  if (!n.domain.empty() || n.op_type != "Cast" || n.inputs.size() != 1 || n.outputs.size() != 1) return false;
  const Attribute* a = n.attr("to");
  return a && a->i == static_cast<int64_t>(to);
}

bool f32_value(const Graph& g, const std::string& v) {
  const TensorType* t = v.empty() ? nullptr : g.find_type(v);
  return t && t->dtype == DType::kF32;
}

// `v` = Cast(Cast(src, bf16), f32) with src f32: returns src, else "".
std::string rounded_source(const Graph& g, const GraphUses& u, const std::string& v) {
  const long c2 = u.producer_of(v);
  if (c2 < 0 || !is_cast_to(g.nodes[c2], DType::kF32)) return "";
  const long c1 = u.producer_of(g.nodes[c2].inputs[0]);
  if (c1 < 0 || !is_cast_to(g.nodes[c1], DType::kBF16)) return "";
  const std::string& src = g.nodes[c1].inputs[0];
  return f32_value(g, src) ? src : "";
}

// The pair rounding `v` when it is v's only reader (and the bf16 middle value is read only by the
// pair's second Cast): the two Cast nodes, else false.
bool rounding_reader(const Graph& g, const GraphUses& u, const std::vector<bool>& dead, const std::string& v,
                     long* c1, long* c2) {
  if (v.empty() || !u.single_use(v)) return false;
  *c1 = static_cast<long>(u.readers.at(v)[0]);
  if (dead[*c1] || !is_cast_to(g.nodes[*c1], DType::kBF16)) return false;
  const std::string& mid = g.nodes[*c1].outputs[0];
  if (!u.single_use(mid)) return false;
  *c2 = static_cast<long>(u.readers.at(mid)[0]);
  return !dead[*c2] && is_cast_to(g.nodes[*c2], DType::kF32);
}

Status run_amp_bf16_fold(Model* model, PassContext& ctx) {
  Graph& g = model->graph;
  const GraphUses u(g);
  std::vector<bool> dead(g.nodes.size(), false);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& n = g.nodes[i];
    const bool conv = n.domain.empty() && n.op_type == "Conv";
    const bool grad = n.domain == kFerryDomain && n.op_type == "ConvGrad";
    if ((!conv && !grad) || n.attr("amp_bf16") || n.inputs.size() < (conv ? 2u : 3u)) continue;
    if (conv && constant_value(g, n.inputs[1])) continue;  // inference: dnnl_conv.cpp's kernel
    const size_t operands = conv ? 2 : 3;
    std::vector<std::string> src(operands);
    bool all = true;
    for (size_t k = 0; k < operands && all; ++k) all = !(src[k] = rounded_source(g, u, n.inputs[k])).empty();
    if (!all) continue;
    int64_t round_mask = 0;
    const size_t outs = conv ? 1 : 2;  // ConvGrad's dB keeps its pair (f32 from the kernel)
    for (size_t k = 0; k < outs && k < n.outputs.size(); ++k) {
      long c1 = -1, c2 = -1;
      if (!rounding_reader(g, u, dead, n.outputs[k], &c1, &c2)) continue;
      dead[c1] = dead[c2] = true;
      n.outputs[k] = g.nodes[c2].outputs[0];
      round_mask |= int64_t{1} << k;
    }
    for (size_t k = 0; k < operands; ++k) n.inputs[k] = src[k];
    set_attr(&n, "amp_bf16", int64_t{1});
    set_attr(&n, "amp_round_outputs", round_mask);
    ++ctx.changes;
  }
  erase_nodes(&g, dead);
  return Status::ok();
}

}  // namespace

GraphPass amp_bf16_fold_pass() {
  return {"amp_bf16_fold", 2,
          "--amp bf16: the Cast pairs around training convolutions fold into them (oneDNN bf16 kernels)",
          run_amp_bf16_fold, "bf16_conv"};
}

}  // namespace ferry

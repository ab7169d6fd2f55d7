// Pass layernorm_fusion (level 2): the decomposed layer norm of opset-13 exports,
//   m = ReduceMean(x, last axis); d = Sub(x, m); v = ReduceMean(Pow(d, 2)); s = Sqrt(Add(v, eps))
//   y = Div(d, s) [* gamma] [+ beta]
// and ONNX LayerNormalization (one output) become com.ferry.LayerNorm(x, gamma, beta).
#include "passes/graph_edit.h"
#include "passes/pipeline.h"

namespace ferry {
namespace {

// Whether a ReduceMean reduces only the last axis of its input, keeping dims.
bool reduces_last_axis(const Model& model, const Graph& g, const Node& n) {
  if (n.attr("keepdims") && n.attr("keepdims")->i != 1) return false;
  std::vector<int64_t> axes;
  if (const Attribute* a = n.attr("axes")) axes = a->ints;
  else if (n.inputs.size() > 1 && !n.inputs[1].empty()) {
    const Tensor* t = constant_value(g, n.inputs[1]);
    if (!t) return false;
    axes = t->to_int64_vector();
  }
  if (axes.size() != 1) return false;
  const TensorType* t = g.find_type(n.inputs[0]);
  if (!t || !t->shape) return false;
  return axes[0] == -1 || axes[0] == t->shape->rank() - 1;
}

// A constant 1-D parameter of length c (the normalized size), or a scalar.
bool is_param(const Graph& g, const std::string& v, int64_t c) {
  const Tensor* t = constant_value(g, v);
  return t && t->dtype() == DType::kF32 && (t->numel() == c && t->rank() == 1);
}

int64_t last_dim(const Graph& g, const std::string& v) {
  const TensorType* t = g.find_type(v);
  if (!t || !t->shape || t->shape->rank() == 0 || !t->shape->dims.back().is_known()) return -1;
  return t->shape->dims.back().value;
}

bool fuse_decomposed(const Model& model, PatternContext& pc, long div) {
  const Graph& g = pc.g;
  const Node& dv = g.nodes[div];
  if (dv.inputs.size() != 2) return false;
  const long sqrt = pc.single_use_producer(dv.inputs[1], "Sqrt");
  if (sqrt < 0) return false;
  const long add = pc.single_use_producer(g.nodes[sqrt].inputs[0], "Add");
  if (add < 0) return false;
  const Node& an = g.nodes[add];
  double eps = 0;
  std::string var;
  if (scalar_constant(g, an.inputs[1], &eps)) var = an.inputs[0];
  else if (scalar_constant(g, an.inputs[0], &eps)) var = an.inputs[1];
  else return false;
  const long rm2 = pc.single_use_producer(var, "ReduceMean");
  if (rm2 < 0 || !reduces_last_axis(model, g, g.nodes[rm2])) return false;
  const std::string& sq = g.nodes[rm2].inputs[0];
  long pw = pc.single_use_producer(sq, "Pow");
  double two = 0;
  if (pw >= 0 && !(scalar_constant(g, g.nodes[pw].inputs[1], &two) && two == 2.0)) return false;
  if (pw < 0) {
    pw = pc.single_use_producer(sq, "Mul");
    if (pw < 0 || g.nodes[pw].inputs[0] != g.nodes[pw].inputs[1]) return false;
  }
  const std::string& d = dv.inputs[0];
  if (g.nodes[pw].inputs[0] != d) return false;
  // d is read by the Pow/Mul and the Div only.
  const long sub = pc.producer(d, "Sub");
  const size_t d_reads = g.nodes[pw].op_type == "Mul" ? 3 : 2;
  if (sub < 0 || pc.uses.pinned.count(d) || pc.uses.num_readers(d) != d_reads) return false;
  const std::string& x = g.nodes[sub].inputs[0];
  const long rm1 = pc.single_use_producer(g.nodes[sub].inputs[1], "ReduceMean");
  if (rm1 < 0 || g.nodes[rm1].inputs[0] != x || !reduces_last_axis(model, g, g.nodes[rm1])) return false;
  const TensorType* xt = g.find_type(x);
  if (!xt || xt->dtype != DType::kF32) return false;
  const int64_t c = last_dim(g, x);
  std::vector<long> covered = {rm1, sub, pw, rm2, add, sqrt, div};
  std::string out = dv.outputs[0], gamma, beta;
  if (c > 0) {
    const long mul = pc.sole_reader(out);
    if (mul >= 0 && g.nodes[mul].op_type == "Mul" && g.nodes[mul].domain.empty() && is_param(g, other_input(g.nodes[mul], out), c)) {
      gamma = other_input(g.nodes[mul], out);
      covered.push_back(mul);
      out = g.nodes[mul].outputs[0];
      const long badd = pc.sole_reader(out);
      if (badd >= 0 && g.nodes[badd].op_type == "Add" && g.nodes[badd].domain.empty() &&
          is_param(g, other_input(g.nodes[badd], out), c)) {
        beta = other_input(g.nodes[badd], out);
        covered.push_back(badd);
        out = g.nodes[badd].outputs[0];
      }
    }
  }
  Node fused;
  fused.op_type = "LayerNorm";
  fused.domain = kFerryDomain;
  fused.name = g.nodes[rm1].name + "_LayerNorm";
  fused.inputs = {x, gamma, beta};
  while (!fused.inputs.empty() && fused.inputs.back().empty()) fused.inputs.pop_back();
  fused.outputs = {out};
  set_attr(&fused, "axis", int64_t{-1});
  set_attr(&fused, "epsilon", static_cast<float>(eps));
  pc.replace(covered, std::move(fused));
  return true;
}

// ONNX LayerNormalization with only output Y: same arithmetic, one kernel for both.
bool fuse_onnx_layernorm(PatternContext& pc, long i) {
  Node& n = pc.g.nodes[i];
  if (n.outputs.size() > 1) {
    for (size_t k = 1; k < n.outputs.size(); ++k)
      if (!n.outputs[k].empty() && (pc.uses.num_readers(n.outputs[k]) || pc.uses.pinned.count(n.outputs[k]))) return false;
  }
  if (n.attr("stash_type") && n.attr("stash_type")->i != 1) return false;
  Node fused = n;
  fused.domain = kFerryDomain;
  fused.op_type = "LayerNorm";
  fused.outputs = {n.outputs[0]};
  fused.attrs.erase("stash_type");
  pc.replace({i}, std::move(fused));
  return true;
}

Status run_layernorm_fusion(Model* model, PassContext& ctx) {
  PatternContext pc(model->graph);
  for (size_t i = 0; i < pc.g.nodes.size(); ++i) {
    if (pc.dead[i] || !pc.g.nodes[i].domain.empty()) continue;
    const std::string& op = pc.g.nodes[i].op_type;
    if ((op == "Div" && fuse_decomposed(*model, pc, static_cast<long>(i))) ||
        (op == "LayerNormalization" && fuse_onnx_layernorm(pc, static_cast<long>(i))))
      ++ctx.changes;
  }
  pc.finish();
  if (ctx.changes) use_ferry_domain(model);
  return Status::ok();
}

}  // namespace

GraphPass layernorm_fusion_pass() {
  return {"layernorm_fusion", 2, "decomposed layer norms and LayerNormalization become com.ferry.LayerNorm",
          run_layernorm_fusion};
}

}  // namespace ferry

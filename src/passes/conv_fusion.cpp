// Pass conv_fusion (level 2): a convolution or matrix product and the cheap ops after it become one
// com.ferry node whose kernel applies them while the result is still in cache (oneDNN post-ops):
//   Conv [+ Add(residual Z)] [+ act]                        -> FusedConv(X, W, B, Z)
//   Gemm [+ act]                                            -> FusedGemm(A, B, C)
//   MatMul [+ Add(constant bias)] [+ Add(residual Z)] [+ act] -> FusedMatMul(A, B, Bias, Z)
// act: Relu, LeakyRelu, Clip (constant bounds), Sigmoid, HardSigmoid, HardSwish, Tanh, com.ferry.Gelu,
// and the two-node forms x * Sigmoid(x) (SiLU/Swish, EfficientNet) and x * HardSigmoid(x; 1/6, 1/2)
// (HardSwish as exported before opset 14, MobileNetV3). A residual Z must have exactly the product's
// shape, static or with the same named dims (the fused op does not broadcast it into a bigger output).
// Runs after conv_bn_fold, so Conv+BatchNormalization+Add+Relu becomes one FusedConv.
#include <cfloat>
#include <cmath>
#include <cstdlib>
#include <string>

#include "common/env_switch.h"
#include "ops/fused_activation.h"
#include "passes/graph_edit.h"
#include "passes/pipeline.h"

namespace ferry {
namespace {

struct ActMatch {
  std::vector<long> nodes;
  std::string out;
  std::string name;
  std::vector<float> params;
};

bool is_onnx(const Node& n, const char* op) { return n.domain.empty() && n.op_type == op; }

float float_attr(const Node& n, const char* key, float dflt) {
  const Attribute* a = n.attr(key);
  return a ? a->f : dflt;
}

// Clip's bounds from attributes (opset < 11) or constant inputs; false when an input is not constant.
bool clip_bounds(const Graph& g, const Node& n, float* lo, float* hi) {
  *lo = n.attr("min") ? n.attr("min")->f : -FLT_MAX;
  *hi = n.attr("max") ? n.attr("max")->f : FLT_MAX;
  double v = 0;
  if (n.inputs.size() > 1 && !n.inputs[1].empty()) {
    if (!scalar_constant(g, n.inputs[1], &v)) return false;
    *lo = static_cast<float>(v);
  }
  if (n.inputs.size() > 2 && !n.inputs[2].empty()) {
    if (!scalar_constant(g, n.inputs[2], &v)) return false;
    *hi = static_cast<float>(v);
  }
  return true;
}

// x * gate(x) where `v` is read exactly twice: by the gate node and by the Mul of v and the gate.
bool match_gated(const PatternContext& pc, const std::string& v, ActMatch* m) {
  if (pc.uses.pinned.count(v) || pc.uses.num_readers(v) != 2) return false;
  const Graph& g = pc.g;
  long gate = -1, mul = -1;
  for (size_t r : pc.uses.readers.at(v)) {
    if (pc.dead[r]) return false;
    const Node& n = g.nodes[r];
    if (is_onnx(n, "Sigmoid") || is_onnx(n, "HardSigmoid")) gate = static_cast<long>(r);
    else if (is_onnx(n, "Mul")) mul = static_cast<long>(r);
  }
  if (gate < 0 || mul < 0) return false;
  const Node& gn = g.nodes[gate];
  if (pc.sole_reader(gn.outputs[0]) != mul || other_input(g.nodes[mul], v) != gn.outputs[0]) return false;
  if (is_onnx(gn, "Sigmoid")) {
    m->name = "Silu";
  } else {
    if (!approx_equal(float_attr(gn, "alpha", 0.2f), 1.0 / 6.0) || !approx_equal(float_attr(gn, "beta", 0.5f), 0.5))
      return false;
    m->name = "HardSwish";
  }
  m->nodes = {gate, mul};
  m->out = g.nodes[mul].outputs[0];
  return true;
}

// The activation applied to `v`, if any.
bool match_activation(const PatternContext& pc, const std::string& v, ActMatch* m) {
  if (match_gated(pc, v, m)) return true;
  const long r = pc.sole_reader(v);
  if (r < 0 || pc.dead[r]) return false;
  const Node& n = pc.g.nodes[r];
  m->params.clear();
  if (n.domain == kFerryDomain && n.op_type == "Gelu") {
    const Attribute* a = n.attr("approximate");
    m->name = a && a->s == "tanh" ? "GeluTanh" : "Gelu";
  } else if (!n.domain.empty()) {
    return false;
  } else if (n.op_type == "Relu" || n.op_type == "Sigmoid" || n.op_type == "Tanh" || n.op_type == "HardSwish") {
    m->name = n.op_type;
  } else if (n.op_type == "LeakyRelu") {
    m->name = n.op_type;
    m->params = {float_attr(n, "alpha", 0.01f)};
  } else if (n.op_type == "HardSigmoid") {
    m->name = n.op_type;
    m->params = {float_attr(n, "alpha", 0.2f), float_attr(n, "beta", 0.5f)};
  } else if (n.op_type == "Clip") {
    float lo = 0, hi = 0;
    if (!clip_bounds(pc.g, n, &lo, &hi)) return false;
    m->name = n.op_type;
    m->params = {lo, hi};
  } else {
    return false;
  }
  m->nodes = {r};
  m->out = n.outputs[0];
  return true;
}

// Same dtype and the same shape for every input: each dim a known number or a named symbol (a dynamic
// batch "N" on both sides is the same size at run time; an anonymous "?" dim proves nothing).
bool same_shape(const Graph& g, const std::string& a, const std::string& b) {
  const TensorType* ta = g.find_type(a);
  const TensorType* tb = g.find_type(b);
  if (!ta || !tb || !ta->shape || !tb->shape || ta->dtype != tb->dtype || !(*ta->shape == *tb->shape)) return false;
  for (const Dim& d : ta->shape->dims)
    if (!d.is_known() && d.symbol.empty()) return false;
  return true;
}

// The Add reading `v` whose other input is a non-constant value of v's exact shape (a residual).
long match_residual(const PatternContext& pc, const std::string& v, std::string* z) {
  const long a = pc.sole_reader(v);
  if (a < 0 || pc.dead[a] || !is_onnx(pc.g.nodes[a], "Add")) return -1;
  const std::string other = other_input(pc.g.nodes[a], v);
  if (other.empty() || constant_value(pc.g, other) || !same_shape(pc.g, v, other)) return -1;
  *z = other;
  return a;
}

// The Add reading `v` with a constant whose elements vary only along v's last axis (a bias).
long match_bias(const PatternContext& pc, const std::string& v, std::string* bias) {
  const long a = pc.sole_reader(v);
  if (a < 0 || pc.dead[a] || !is_onnx(pc.g.nodes[a], "Add")) return -1;
  const std::string other = other_input(pc.g.nodes[a], v);
  const Tensor* c = other.empty() ? nullptr : constant_value(pc.g, other);
  const TensorType* tv = pc.g.find_type(v);
  if (!c || !tv || !tv->shape || tv->shape->rank() < 1 || c->rank() > tv->shape->rank() || c->rank() < 1) return -1;
  const Dim& last = tv->shape->dims.back();
  if (!last.is_known() || c->numel() != last.value || c->dims().back() != last.value || c->dtype() != tv->dtype)
    return -1;
  *bias = other;
  return a;
}

void apply_activation(const ActMatch& act, Node* fused, std::vector<long>* covered, std::string* out) {
  set_attr(fused, "activation", act.name);
  if (!act.params.empty()) {
    Attribute a;
    a.type = AttrType::kFloats;
    a.floats = act.params;
    fused->attrs["activation_params"] = a;
  }
  covered->insert(covered->end(), act.nodes.begin(), act.nodes.end());
  *out = act.out;
}

bool fuse_conv(PatternContext& pc, long c) {
  const Node& conv = pc.g.nodes[c];
  if (!constant_value(pc.g, conv.inputs[1])) return false;
  std::vector<long> covered = {c};
  std::string out = conv.outputs[0], z;
  const long add = match_residual(pc, out, &z);
  if (add >= 0) {
    covered.push_back(add);
    out = pc.g.nodes[add].outputs[0];
  }
  Node fused = conv;
  fused.op_type = "FusedConv";
  fused.domain = kFerryDomain;
  ActMatch act;
  if (match_activation(pc, out, &act)) apply_activation(act, &fused, &covered, &out);
  if (covered.size() == 1) return false;
  fused.inputs.resize(3);
  if (!z.empty()) fused.inputs.push_back(z);
  while (!fused.inputs.empty() && fused.inputs.back().empty()) fused.inputs.pop_back();
  fused.outputs = {out};
  pc.replace(covered, std::move(fused));
  return true;
}

bool fuse_gemm(PatternContext& pc, long i) {
  ActMatch act;
  Node fused = pc.g.nodes[i];
  std::vector<long> covered = {i};
  std::string out;
  if (fused.outputs.size() != 1 || !match_activation(pc, fused.outputs[0], &act)) return false;
  fused.op_type = "FusedGemm";
  fused.domain = kFerryDomain;
  apply_activation(act, &fused, &covered, &out);
  fused.outputs = {out};
  pc.replace(covered, std::move(fused));
  return true;
}

// FERRY_MATMUL_RESIDUAL=0 leaves the residual Add after a MatMul unfused (to compare).
bool matmul_residual_enabled() {
  static const bool enabled = env_switch_on("FERRY_MATMUL_RESIDUAL");
  return enabled;
}

bool fuse_matmul(PatternContext& pc, long i) {
  Node fused = pc.g.nodes[i];
  std::vector<long> covered = {i};
  std::string out = fused.outputs[0], bias, z;
  const long b = match_bias(pc, out, &bias);
  if (b >= 0) {
    covered.push_back(b);
    out = pc.g.nodes[b].outputs[0];
  }
  const long r = matmul_residual_enabled() ? match_residual(pc, out, &z) : -1;
  if (r >= 0) {
    covered.push_back(r);
    out = pc.g.nodes[r].outputs[0];
  }
  ActMatch act;
  if (match_activation(pc, out, &act)) apply_activation(act, &fused, &covered, &out);
  if (covered.size() == 1) return false;
  fused.op_type = "FusedMatMul";
  fused.domain = kFerryDomain;
  fused.inputs.resize(2);
  fused.inputs.push_back(bias);
  if (!z.empty()) fused.inputs.push_back(z);
  while (fused.inputs.back().empty()) fused.inputs.pop_back();
  fused.outputs = {out};
  pc.replace(covered, std::move(fused));
  return true;
}

Status run_conv_fusion(Model* model, PassContext& ctx) {
  PatternContext pc(model->graph);
  for (size_t i = 0; i < pc.g.nodes.size(); ++i) {
    if (pc.dead[i]) continue;
    const Node& n = pc.g.nodes[i];
    const long k = static_cast<long>(i);
    if ((is_onnx(n, "Conv") && fuse_conv(pc, k)) || (is_onnx(n, "Gemm") && fuse_gemm(pc, k)) ||
        (is_onnx(n, "MatMul") && fuse_matmul(pc, k)))
      ++ctx.changes;
  }
  pc.finish();
  if (ctx.changes) use_ferry_domain(model);
  return Status::ok();
}

}  // namespace

GraphPass conv_fusion_pass() {
  return {"conv_fusion", 2, "Conv/Gemm/MatMul + bias + residual Add + activation become FusedConv/FusedGemm/FusedMatMul",
          run_conv_fusion};
}

}  // namespace ferry

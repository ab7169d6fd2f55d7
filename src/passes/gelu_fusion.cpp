// Pass gelu_fusion (level 2): the exact GELU of exports, in its usual arrangements,
//   e = Erf(x / sqrt(2))  (or x * (1/sqrt(2)));  y = (x * (e + 1)) * 0.5  or  (x * 0.5) * (e + 1)
// and the tanh approximation
//   y = (x * 0.5) * (1 + Tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))  (any product order)
// and ONNX Gelu (opset 20) become com.ferry.Gelu(x).
#include <cmath>

#include "passes/graph_edit.h"
#include "passes/pipeline.h"

namespace ferry {
namespace {

// The node reading `v` as its only reader when it is an ai.onnx `op`, else -1.
long reader_op(const PatternContext& pc, const std::string& v, const char* op) {
  const long r = pc.sole_reader(v);
  return r >= 0 && pc.g.nodes[r].domain.empty() && pc.g.nodes[r].op_type == op ? r : -1;
}

// Matches "Mul(v, c)" (either order) with scalar constant c == want; returns the Mul or -1.
long mul_by(const PatternContext& pc, const std::string& v, double want) {
  const long m = reader_op(pc, v, "Mul");
  double c = 0;
  if (m < 0 || !scalar_constant(pc.g, other_input(pc.g.nodes[m], v), &c) || !approx_equal(c, want)) return -1;
  return m;
}

// From `gate` = (1 + f(x)) with the products by x and 0.5 after it; appends them to covered and
// returns the final output ("" when the tail does not match).
std::string match_half_x_tail(PatternContext& pc, const std::string& x, const std::string& gate, std::vector<long>* covered) {
  const Graph& g = pc.g;
  const long m1 = reader_op(pc, gate, "Mul");
  if (m1 < 0) return "";
  const std::string other = other_input(g.nodes[m1], gate);
  if (other == x) {  // (x * gate) * 0.5
    const long m2 = mul_by(pc, g.nodes[m1].outputs[0], 0.5);
    if (m2 < 0) return "";
    covered->insert(covered->end(), {m1, m2});
    return g.nodes[m2].outputs[0];
  }
  // (x * 0.5) * gate
  const long h = pc.single_use_producer(other, "Mul");
  double c = 0;
  if (h < 0 || other_input(g.nodes[h], x) == "" || !scalar_constant(g, other_input(g.nodes[h], x), &c) ||
      !approx_equal(c, 0.5))
    return "";
  covered->insert(covered->end(), {h, m1});
  return g.nodes[m1].outputs[0];
}

// The Add(v, 1) reading v (either order), or -1.
long plus_one(const PatternContext& pc, const std::string& v) {
  const long a = reader_op(pc, v, "Add");
  double c = 0;
  return a >= 0 && scalar_constant(pc.g, other_input(pc.g.nodes[a], v), &c) && c == 1.0 ? a : -1;
}

bool fuse_erf(PatternContext& pc, long erf) {
  const Graph& g = pc.g;
  const std::string& t = g.nodes[erf].inputs[0];
  std::string x;
  long scale = pc.single_use_producer(t, "Div");
  double c = 0;
  if (scale >= 0 && scalar_constant(g, g.nodes[scale].inputs[1], &c) && approx_equal(c, std::sqrt(2.0))) {
    x = g.nodes[scale].inputs[0];
  } else {
    scale = pc.single_use_producer(t, "Mul");
    if (scale < 0) return false;
    const Node& m = g.nodes[scale];
    for (int k = 0; k < 2; ++k)
      if (scalar_constant(g, m.inputs[k], &c) && approx_equal(c, std::sqrt(0.5))) x = m.inputs[1 - k];
    if (x.empty()) return false;
  }
  const long add = plus_one(pc, g.nodes[erf].outputs[0]);
  if (add < 0) return false;
  std::vector<long> covered = {scale, erf, add};
  const std::string out = match_half_x_tail(pc, x, g.nodes[add].outputs[0], &covered);
  if (out.empty()) return false;
  Node fused;
  fused.op_type = "Gelu";
  fused.domain = kFerryDomain;
  fused.name = g.nodes[erf].name + "_Gelu";
  fused.inputs = {x};
  fused.outputs = {out};
  set_attr(&fused, "approximate", std::string("none"));
  pc.replace(covered, std::move(fused));
  return true;
}

// tanh form: inner = sqrt(2/pi) * (x + 0.044715 * x^3), x^3 = Pow(x, 3) or x * x * x.
bool fuse_tanh(PatternContext& pc, long th) {
  const Graph& g = pc.g;
  std::vector<long> covered = {th};
  const long ms = pc.single_use_producer(g.nodes[th].inputs[0], "Mul");
  double c = 0;
  if (ms < 0) return false;
  std::string sum;
  for (int k = 0; k < 2; ++k)
    if (scalar_constant(g, g.nodes[ms].inputs[k], &c) && approx_equal(c, std::sqrt(2.0 / M_PI))) sum = g.nodes[ms].inputs[1 - k];
  const long add = sum.empty() ? -1 : pc.single_use_producer(sum, "Add");
  if (add < 0) return false;
  covered.insert(covered.end(), {ms, add});
  // One Add input is x, the other 0.044715 * x^3.
  for (int k = 0; k < 2; ++k) {
    const std::string x = g.nodes[add].inputs[k];
    const long mc = pc.single_use_producer(g.nodes[add].inputs[1 - k], "Mul");
    if (mc < 0) continue;
    std::string cube;
    for (int j = 0; j < 2; ++j)
      if (scalar_constant(g, g.nodes[mc].inputs[j], &c) && approx_equal(c, 0.044715)) cube = g.nodes[mc].inputs[1 - j];
    const long pw = cube.empty() ? -1 : pc.single_use_producer(cube, "Pow");
    if (pw < 0 || g.nodes[pw].inputs[0] != x || !scalar_constant(g, g.nodes[pw].inputs[1], &c) || c != 3.0) continue;
    const long one = plus_one(pc, g.nodes[th].outputs[0]);
    if (one < 0) continue;
    std::vector<long> cov = covered;
    cov.insert(cov.end(), {mc, pw, one});
    const std::string out = match_half_x_tail(pc, x, g.nodes[one].outputs[0], &cov);
    if (out.empty()) continue;
    Node fused;
    fused.op_type = "Gelu";
    fused.domain = kFerryDomain;
    fused.name = g.nodes[th].name + "_Gelu";
    fused.inputs = {x};
    fused.outputs = {out};
    set_attr(&fused, "approximate", std::string("tanh"));
    pc.replace(cov, std::move(fused));
    return true;
  }
  return false;
}

bool fuse_onnx_gelu(PatternContext& pc, long i) {
  Node fused = pc.g.nodes[i];
  fused.domain = kFerryDomain;
  pc.replace({i}, std::move(fused));
  return true;
}

Status run_gelu_fusion(Model* model, PassContext& ctx) {
  PatternContext pc(model->graph);
  for (size_t i = 0; i < pc.g.nodes.size(); ++i) {
    if (pc.dead[i] || !pc.g.nodes[i].domain.empty()) continue;
    const std::string& op = pc.g.nodes[i].op_type;
    const long n = static_cast<long>(i);
    if ((op == "Erf" && fuse_erf(pc, n)) || (op == "Tanh" && fuse_tanh(pc, n)) || (op == "Gelu" && fuse_onnx_gelu(pc, n)))
      ++ctx.changes;
  }
  pc.finish();
  if (ctx.changes) use_ferry_domain(model);
  return Status::ok();
}

}  // namespace

GraphPass gelu_fusion_pass() {
  return {"gelu_fusion", 2, "Erf- and tanh-form GELU subgraphs become com.ferry.Gelu", run_gelu_fusion};
}

}  // namespace ferry

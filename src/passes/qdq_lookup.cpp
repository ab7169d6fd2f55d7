// Pass qdq_lookup (level 2): DequantizeLinear(x) -> one elementwise float op -> QuantizeLinear, all per
// tensor with constant parameters and x 8-bit, becomes com.ferry.QLookup(x, table): x takes only 256
// values, so the three nodes are a table of 256 results, computed here by their own reference kernels
// (evaluate_node), bit for bit what the three nodes give on cpu-ref. A BERT encoder's int8 MLP has
// DQ -> Gelu -> Q between its two int8 MatMuls (com.ferry.Gelu after gelu_fusion, which runs first):
// a float GELU over 128 x 3072 values per layer becomes one byte lookup each (ONNX Runtime's
// QLinearSigmoid / QLinearLeakyRelu are such tables too). The op: src/ops/quantize_fused.cpp.
// The float op must read only x and be one of kOps (unary, elementwise, attributes only), or be the
// SiLU / HardSwish of exports, x * Sigmoid(x) / x * HardSigmoid(x) (EfficientNet's 49 SiLUs on quantized
// tensors); the DQ stays where another node reads its output.
#include <cstring>
#include <string>
#include <vector>

#include "passes/graph_edit.h"
#include "passes/pipeline.h"

namespace ferry {
namespace {

bool lookup_op(const Node& n) {
  static const char* const kOps[] = {"Gelu", "Sigmoid", "Tanh",    "Erf", "HardSigmoid", "HardSwish", "LeakyRelu",
                                     "Elu",  "Selu",    "Softplus", "Relu", "Abs",        "Neg",       "Exp"};
  if (n.domain == kFerryDomain) return n.op_type == "Gelu";
  if (!n.domain.empty() && n.domain != "ai.onnx") return false;
  for (const char* op : kOps)
    if (n.op_type == op) return true;
  return false;
}

bool is_onnx(const Node& n, const char* op) { return (n.domain.empty() || n.domain == "ai.onnx") && n.op_type == op; }

// A per-tensor Q/DQ node: scalar float scale > 0, an 8-bit scalar zero point (or none), no block size.
bool per_tensor(const Graph& g, const Node& n) {
  if (n.inputs.size() < 2 || n.outputs.size() != 1) return false;
  const Tensor* s = constant_value(g, n.inputs[1]);
  if (!s || s->numel() != 1 || s->dtype() != DType::kF32 || !(s->data<float>()[0] > 0)) return false;
  if (n.inputs.size() > 2 && !n.inputs[2].empty()) {
    const Tensor* z = constant_value(g, n.inputs[2]);
    if (!z || z->numel() != 1 || (z->dtype() != DType::kU8 && z->dtype() != DType::kI8)) return false;
  }
  const Attribute* bs = n.attr("block_size");
  return !(bs && bs->i != 0);
}

bool fuse_lookup(Model* model, PatternContext& pc, long qi) {
  Graph& g = pc.g;
  const Node& q = g.nodes[qi];
  if (!per_tensor(g, q) || !(q.inputs.size() > 2 && !q.inputs[2].empty())) return false;  // the output type explicit
  const std::string& u_out = q.inputs[0];
  const long ui = pc.uses.producer_of(u_out);
  if (ui < 0 || pc.dead[ui] || !pc.uses.single_use(u_out)) return false;
  const Node& u = g.nodes[ui];
  if (u.outputs.size() != 1) return false;
  // The float region between the DQ's output d and the Q: one op of kOps on d, or d * Sigmoid(d)
  // (SiLU) / d * HardSigmoid(d) (HardSwish's export), the gate read only by the Mul.
  std::string d;
  long gi = -1;
  if (lookup_op(u) && u.inputs.size() == 1) {
    d = u.inputs[0];
  } else if (is_onnx(u, "Mul") && u.inputs.size() == 2) {
    for (int k = 0; k < 2 && d.empty(); ++k) {
      const long si = pc.uses.producer_of(u.inputs[k]);
      if (si < 0 || pc.dead[si] || !pc.uses.single_use(u.inputs[k])) continue;
      const Node& sn = g.nodes[si];
      if ((is_onnx(sn, "Sigmoid") || is_onnx(sn, "HardSigmoid")) && sn.inputs.size() == 1 && sn.outputs.size() == 1 &&
          sn.inputs[0] == u.inputs[1 - k]) {
        d = sn.inputs[0];
        gi = si;
      }
    }
  }
  if (d.empty()) return false;
  const long di = pc.uses.producer_of(d);
  if (di < 0 || pc.dead[di] || !is_onnx(g.nodes[di], "DequantizeLinear")) return false;
  const Node& dq = g.nodes[di];
  if (!per_tensor(g, dq)) return false;
  const TensorType* xt = g.find_type(dq.inputs[0]);
  if (!xt || (xt->dtype != DType::kU8 && xt->dtype != DType::kI8)) return false;
  // The 256 values of x in index order (int8: index i is i - 128), through the three reference kernels.
  Tensor x = Tensor::allocate(xt->dtype, {256});
  for (int i = 0; i < 256; ++i) static_cast<uint8_t*>(x.mutable_raw())[i] = static_cast<uint8_t>(xt->dtype == DType::kI8 ? i ^ 0x80 : i);
  const auto params = [&](const Node& n, const Tensor* first) {
    std::vector<const Tensor*> in = {first};
    for (size_t k = 1; k < n.inputs.size(); ++k) in.push_back(n.inputs[k].empty() ? nullptr : constant_value(g, n.inputs[k]));
    return in;
  };
  auto dv = evaluate_node(*model, dq, params(dq, &x));
  if (!dv.is_ok() || dv.value().size() != 1) return false;
  StatusOr<std::vector<Tensor>> v = std::vector<Tensor>{};
  if (gi < 0) {
    v = evaluate_node(*model, u, {&dv.value()[0]});
  } else {
    auto gate = evaluate_node(*model, g.nodes[gi], {&dv.value()[0]});
    if (!gate.is_ok() || gate.value().size() != 1) return false;
    std::vector<const Tensor*> in;
    for (const std::string& name : u.inputs) in.push_back(name == d ? &dv.value()[0] : &gate.value()[0]);
    v = evaluate_node(*model, u, in);
  }
  if (!v.is_ok() || v.value().size() != 1) return false;
  auto t = evaluate_node(*model, q, params(q, &v.value()[0]));
  if (!t.is_ok() || t.value().size() != 1 || t.value()[0].numel() != 256 ||
      (t.value()[0].dtype() != DType::kU8 && t.value()[0].dtype() != DType::kI8))
    return false;
  const std::string table = fresh_name(g, q.outputs[0] + "_table");
  g.initializers[table] = t.value()[0];
  g.value_types[table] = t.value()[0].type();
  Node fused;
  fused.op_type = "QLookup";
  fused.domain = kFerryDomain;
  fused.name = fresh_name(g, q.name.empty() ? "QLookup" : q.name + "_lookup");
  fused.inputs = {dq.inputs[0], table};
  fused.outputs = {q.outputs[0]};
  std::vector<long> covered = {ui, qi};
  if (gi >= 0) covered.insert(covered.begin(), gi);
  // The DQ goes where the region's nodes are its only readers (d read once, or by the gate and the Mul).
  if (pc.uses.num_readers(d) == (gi < 0 ? 1u : 2u) && !pc.uses.pinned.count(d)) covered.insert(covered.begin(), di);
  pc.replace(covered, std::move(fused));
  return true;
}

Status run_qdq_lookup(Model* model, PassContext& ctx) {
  PatternContext pc(model->graph);
  for (size_t i = 0; i < pc.g.nodes.size(); ++i)
    if (!pc.dead[i] && is_onnx(pc.g.nodes[i], "QuantizeLinear") && fuse_lookup(model, pc, static_cast<long>(i))) ++ctx.changes;
  pc.finish();
  if (ctx.changes) use_ferry_domain(model);
  return Status::ok();
}

}  // namespace

GraphPass qdq_lookup_pass() {
  return {"qdq_lookup", 2,
          "DequantizeLinear -> Gelu|Sigmoid|Tanh|...|x*Sigmoid(x) -> QuantizeLinear (per tensor) become com.ferry.QLookup, a 256-entry table",
          run_qdq_lookup};
}

}  // namespace ferry

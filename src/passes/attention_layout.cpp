// Pass attention_layout (level 2): torch's nn.MultiheadAttention export works in [S, B, E] between
// two Transposes of the [B, S, E] residual stream:
//   T = Transpose(X, [1,0,2]); QKV = MatMul(T, W) [+ bias]; q/k/v = Reshape(Slice(QKV, axis 2), [S, B*H, D]);
//   A = com.ferry.Attention(q, k, v[, mask]; q_perm [1,0,2], k_perm [1,2,0], v_perm [1,0,2], out_perm [1,0,2]);
//   Y = Transpose(Reshape(Gemm(Reshape(A, [S*B, E]), Wo, bo), [S, B, E]), [1,0,2])
// At batch > 1 both Transposes copy the activations, and the residual Add after Y cannot be a
// post-op of the out-projection. Here the block runs in [B, S, E] instead: the QKV MatMul reads X,
// q/k/v are [B, S, H, D] views (Reshape), the Attention is rank 4 with the heads as a batch dim
// (q_perm [0,2,1,3], k_perm [0,2,3,1], v_perm [0,2,1,3], out_perm [0,2,1,3], a [B*H, m, Sk] mask
// reshaped to [B, H, m, Sk]), its output [B, S, H, D] is [B, S, E] as it stands, and the
// out-projection is MatMul(.., Wo^T) + bo, so conv_fusion adds bias and residual in the GEMM.
// Same arithmetic per element. Runs after attention_fusion, before conv_fusion. FERRY_DISABLE_PASSES=attention_layout: off.
#include <cstdlib>
#include <string>
#include <vector>

#include "ops/shape_inference.h"
#include "passes/graph_edit.h"
#include "passes/pipeline.h"

namespace ferry {

GraphPass dead_node_removal_pass();

namespace {

bool is_onnx(const Node& n, const char* op) { return n.domain.empty() && n.op_type == op; }

std::vector<int64_t> ints_of(const Node& n, const char* key) {
  const Attribute* a = n.attr(key);
  return a ? a->ints : std::vector<int64_t>{};
}

const Shape* shape_of(const Graph& g, const std::string& v) {
  const TensorType* t = g.find_type(v);
  return t && t->shape && t->dtype == DType::kF32 ? &*t->shape : nullptr;
}

std::string add_const(Graph* g, const std::string& base, Tensor t) {
  const std::string name = fresh_name(*g, base);
  g->value_types[name] = t.type();
  g->initializers[name] = std::move(t);
  return name;
}

Tensor i64(const std::vector<int64_t>& v) { return Tensor::from_vector<int64_t>(v, {static_cast<int64_t>(v.size())}); }

// The index of the live node producing v with exactly one reader (v not pinned), or -1.
long only_producer(const PatternContext& pc, const std::string& v) {
  if (!pc.uses.single_use(v)) return -1;
  const long p = pc.uses.producer_of(v);
  return p >= 0 && !pc.dead[p] ? p : -1;
}

// Nodes to insert before index `at` of the node list (at == size: at the end).
struct Insertion {
  size_t at;
  std::vector<Node> nodes;
};

bool rewrite(PatternContext& pc, long ai, std::vector<Insertion>* ins) {
  Graph& g = pc.g;
  const Node& a = g.nodes[ai];
  if (a.inputs.size() < 3 || a.outputs.size() != 1) return false;
  if (ints_of(a, "q_perm") != std::vector<int64_t>{1, 0, 2} || ints_of(a, "k_perm") != std::vector<int64_t>{1, 2, 0} ||
      ints_of(a, "v_perm") != std::vector<int64_t>{1, 0, 2} || ints_of(a, "out_perm") != std::vector<int64_t>{1, 0, 2})
    return false;
  // q, k, v: Reshape(Slice(QKV, last axis), [S, B*H, D]) of one QKV.
  long reshapes[3], slices[3];
  std::string qkv;
  int64_t heads = -1, head_dim = -1;
  for (int i = 0; i < 3; ++i) {
    reshapes[i] = only_producer(pc, a.inputs[i]);
    if (reshapes[i] < 0 || !is_onnx(g.nodes[reshapes[i]], "Reshape")) return false;
    const std::string& s = g.nodes[reshapes[i]].inputs[0];
    slices[i] = only_producer(pc, s);
    if (slices[i] < 0 || !is_onnx(g.nodes[slices[i]], "Slice")) return false;
    const Node& sn = g.nodes[slices[i]];
    const Shape* ss = shape_of(g, s);
    const Shape* rs = shape_of(g, a.inputs[i]);
    if (!ss || !rs || ss->rank() != 3 || rs->rank() != 3 || !ss->dims[2].is_known() || !rs->dims[2].is_known()) return false;
    if (!(ss->dims[0] == rs->dims[0]) || !ss->dims[0].is_known()) return false;
    // The slice is along the last axis.
    if (sn.inputs.size() < 4) return false;
    const Tensor* axes = constant_value(g, sn.inputs[3]);
    if (!axes || axes->numel() != 1 || (axes->to_int64_vector()[0] != 2 && axes->to_int64_vector()[0] != -1)) return false;
    if (i == 0) qkv = sn.inputs[0];
    else if (sn.inputs[0] != qkv) return false;
    const int64_t d = rs->dims[2].value, e = ss->dims[2].value;
    if (d <= 0 || e % d != 0) return false;
    if (i == 0) {
      heads = e / d;
      head_dim = d;
    } else if (e / d != heads) {
      return false;
    }
  }
  if (pc.uses.pinned.count(qkv) || pc.uses.num_readers(qkv) != 3) return false;
  // QKV = [Add(bias, ] MatMul(Transpose(X, [1,0,2]), W) [)].
  long add = -1, mm = pc.uses.producer_of(qkv);
  if (mm < 0 || pc.dead[mm]) return false;
  if (is_onnx(g.nodes[mm], "Add")) {
    add = mm;
    std::string m;
    for (const std::string& in : g.nodes[add].inputs)
      if (!constant_value(g, in)) m = in;
    const Shape* bs = nullptr;
    for (const std::string& in : g.nodes[add].inputs)
      if (constant_value(g, in)) bs = shape_of(g, in);
    if (m.empty() || !bs || bs->rank() > 1) return false;
    mm = only_producer(pc, m);
    if (mm < 0) return false;
  }
  if (!is_onnx(g.nodes[mm], "MatMul")) return false;
  const Tensor* w = constant_value(g, g.nodes[mm].inputs[1]);
  if (!w || w->rank() != 2) return false;
  // The Transpose may have other readers (Shape nodes of the export): it stays for them (dead_node_removal
  // takes it when they go with the Reshape targets they built).
  const long t = pc.uses.producer_of(g.nodes[mm].inputs[0]);
  if (t < 0 || pc.dead[t] || !is_onnx(g.nodes[t], "Transpose") || ints_of(g.nodes[t], "perm") != std::vector<int64_t>{1, 0, 2}) return false;
  const std::string x = g.nodes[t].inputs[0];
  const Shape* xs = shape_of(g, x);
  if (!xs || xs->rank() != 3) return false;
  // Output: Transpose(Reshape(Gemm(Reshape(A, [S*B, E]), Wo, bo), [S, B, E]), [1,0,2]).
  const long r3 = pc.sole_reader(a.outputs[0]);
  if (r3 < 0 || !is_onnx(g.nodes[r3], "Reshape")) return false;
  const long gm = pc.sole_reader(g.nodes[r3].outputs[0]);
  if (gm < 0 || !is_onnx(g.nodes[gm], "Gemm") || g.nodes[gm].inputs[0] != g.nodes[r3].outputs[0]) return false;
  const Node& gn = g.nodes[gm];
  auto f = [&](const char* k) { return gn.attr(k) ? gn.attr(k)->f : 1.f; };
  auto ii = [&](const char* k) { return gn.attr(k) ? gn.attr(k)->i : 0; };
  if (f("alpha") != 1.f || f("beta") != 1.f || ii("transA") != 0) return false;
  const Tensor* wo = constant_value(g, gn.inputs[1]);
  if (!wo || wo->rank() != 2 || wo->dtype() != DType::kF32) return false;
  const int64_t e_out = ii("transB") ? wo->dims()[1] : wo->dims()[0];  // K of the out-projection
  if (e_out != heads * head_dim) return false;
  std::string bo;
  if (gn.inputs.size() > 2 && !gn.inputs[2].empty()) {
    const Tensor* c = constant_value(g, gn.inputs[2]);
    if (!c || c->rank() != 1) return false;
    bo = gn.inputs[2];
  }
  const long r4 = pc.sole_reader(gn.outputs[0]);
  if (r4 < 0 || !is_onnx(g.nodes[r4], "Reshape")) return false;
  const long t5 = pc.sole_reader(g.nodes[r4].outputs[0]);
  if (t5 < 0 || !is_onnx(g.nodes[t5], "Transpose") || ints_of(g.nodes[t5], "perm") != std::vector<int64_t>{1, 0, 2})
    return false;
  const Shape* r4s = shape_of(g, g.nodes[r4].outputs[0]);
  if (!r4s || r4s->rank() != 3) return false;
  // Mask [B*H, m, Sk] -> [B, H, m, Sk].
  std::string mask;
  if (a.inputs.size() > 3 && !a.inputs[3].empty()) {
    const Shape* ms = shape_of(g, a.inputs[3]);
    if (!ms || ms->rank() != 3 || !ms->dims[1].is_known() || !ms->dims[2].is_known()) return false;
    if (ms->dims[0].is_known() && ms->dims[0].value == 1) return false;  // shared by all heads: would need [1,1,m,Sk]
    mask = a.inputs[3];
  }

  // Rewrite. Values whose shapes change lose their recorded type (shape inference runs next).
  auto forget = [&](const std::string& v) { g.value_types.erase(v); };
  g.nodes[mm].inputs[0] = x;
  forget(g.nodes[mm].outputs[0]);
  if (add >= 0) forget(g.nodes[add].outputs[0]);
  for (int i = 0; i < 3; ++i) {
    forget(g.nodes[slices[i]].outputs[0]);
    g.nodes[reshapes[i]].inputs[1] = add_const(&g, g.nodes[reshapes[i]].name + "_bshd", i64({0, 0, heads, head_dim}));
    forget(g.nodes[reshapes[i]].outputs[0]);
  }
  Node& an = g.nodes[ai];
  set_attr(&an, "q_perm", std::vector<int64_t>{0, 2, 1, 3});
  set_attr(&an, "k_perm", std::vector<int64_t>{0, 2, 3, 1});
  set_attr(&an, "v_perm", std::vector<int64_t>{0, 2, 1, 3});
  set_attr(&an, "out_perm", std::vector<int64_t>{0, 2, 1, 3});
  std::vector<Node> before_a;
  if (!mask.empty()) {
    const Shape* ms = shape_of(g, mask);
    Node mr;
    mr.op_type = "Reshape";
    mr.name = fresh_name(g, an.name + "_mask_heads");
    mr.inputs = {mask, add_const(&g, mr.name + "_shape", i64({-1, heads, ms->dims[1].value, ms->dims[2].value}))};
    mr.outputs = {fresh_name(g, mask + "_heads")};
    an.inputs[3] = mr.outputs[0];
    before_a.push_back(std::move(mr));
  }
  const std::string a4 = fresh_name(g, an.outputs[0] + "_bshd");
  an.outputs[0] = a4;
  // [B, S, H, D] -> [B, S, E] -> MatMul(., Wo^T) [+ bo]: written as the Transpose's output.
  Node r3n;
  r3n.op_type = "Reshape";
  r3n.name = fresh_name(g, g.nodes[r3].name + "_bse");
  r3n.inputs = {a4, add_const(&g, r3n.name + "_shape", i64({0, 0, heads * head_dim}))};
  r3n.outputs = {fresh_name(g, a4 + "_bse")};
  std::string weight = gn.inputs[1];
  if (ii("transB")) {
    const int64_t n = wo->dims()[0], k = wo->dims()[1];
    Tensor wt = Tensor::allocate(DType::kF32, {k, n});
    const float* src = wo->data<float>();
    float* dst = wt.mutable_data<float>();
    for (int64_t r = 0; r < n; ++r)
      for (int64_t c = 0; c < k; ++c) dst[c * n + r] = src[r * k + c];
    weight = add_const(&g, gn.inputs[1] + "_t", std::move(wt));
  }
  const std::string y = g.nodes[t5].outputs[0];
  Node mmo;
  mmo.op_type = "MatMul";
  mmo.name = fresh_name(g, gn.name + "_bse");
  mmo.inputs = {r3n.outputs[0], weight};
  mmo.outputs = {bo.empty() ? y : fresh_name(g, gn.outputs[0] + "_bse")};
  mmo.origin = {gn.name, g.nodes[r4].name, g.nodes[t5].name};
  std::vector<Node> at_t5 = {r3n, mmo};
  if (!bo.empty()) {
    Node ab;
    ab.op_type = "Add";
    ab.name = fresh_name(g, gn.name + "_bias");
    ab.inputs = {mmo.outputs[0], bo};
    ab.outputs = {y};
    ab.origin = {gn.name};
    at_t5.push_back(std::move(ab));
  }
  forget(y);
  pc.dead[r3] = pc.dead[gm] = pc.dead[r4] = true;
  // t5 is replaced by the new out-projection (placed there: A and the weights come before it).
  const long t5_pos = t5;
  g.nodes[t5_pos] = at_t5[0];
  pc.dead[t5_pos] = false;
  // The mask Reshape before A, the rest after the first new node at t5.
  ins->push_back({static_cast<size_t>(ai), std::move(before_a)});
  ins->push_back({static_cast<size_t>(t5_pos + 1), std::vector<Node>(at_t5.begin() + 1, at_t5.end())});
  // The input Transpose's other readers are the export's Shape nodes (at batch > 1 the batch dim is
  // symbolic, so BERT's mask Reshape keeps one alive, and with it a copy of the activations per
  // layer: 8.5 of 473 CPU ms at BERT b8, 1 thread). Shape(Transpose(X, [1,0,2])) is
  // Gather(Shape(X), [1,0,2]): with no reader left the Transpose goes (dead_node_removal).
  const std::string tv = g.nodes[t].outputs[0];
  bool only_shapes = !pc.uses.pinned.count(tv);
  std::vector<long> shape_readers;
  if (only_shapes && pc.uses.readers.count(tv))
    for (size_t rd : pc.uses.readers.at(tv)) {
      if (static_cast<long>(rd) == mm) continue;
      const Node& sn = g.nodes[rd];
      if (pc.dead[rd] || !is_onnx(sn, "Shape") || sn.attr("start") || sn.attr("end")) {
        only_shapes = false;
        break;
      }
      shape_readers.push_back(static_cast<long>(rd));
    }
  if (only_shapes)
    for (long rd : shape_readers) {
      Node& sn = g.nodes[rd];
      const std::string out = sn.outputs[0];
      sn.inputs[0] = x;
      sn.outputs[0] = fresh_name(g, out + "_x");
      Node gather;
      gather.op_type = "Gather";
      gather.name = fresh_name(g, sn.name + "_bse");
      gather.inputs = {sn.outputs[0], add_const(&g, gather.name + "_perm", i64({1, 0, 2}))};
      gather.outputs = {out};
      set_attr(&gather, "axis", int64_t{0});
      ins->push_back({static_cast<size_t>(rd + 1), {std::move(gather)}});
    }
  return true;
}

Status run_attention_layout(Model* model, PassContext& ctx) {
  // Shape nodes whose dims were folded would count as readers.
  const GraphPass dead_nodes = dead_node_removal_pass();
  PassContext dead_ctx{ctx.options};
  RETURN_IF_ERROR(dead_nodes.run(model, dead_ctx));
  for (bool changed = true; changed;) {
    changed = false;
    PatternContext pc(model->graph);
    std::vector<Insertion> ins;
    for (size_t i = 0; i < pc.g.nodes.size() && !changed; ++i) {
      const Node& n = pc.g.nodes[i];
      if (n.domain == kFerryDomain && n.op_type == "Attention") changed = rewrite(pc, static_cast<long>(i), &ins);
    }
    if (!changed) break;
    ++ctx.changes;
    std::vector<Node> nodes;
    for (size_t k = 0; k <= pc.g.nodes.size(); ++k) {
      for (Insertion& in : ins)
        if (in.at == k)
          for (Node& n : in.nodes) nodes.push_back(std::move(n));
      if (k < pc.g.nodes.size() && !pc.dead[k]) nodes.push_back(std::move(pc.g.nodes[k]));
    }
    pc.g.nodes = std::move(nodes);
  }
  // The rewritten values' types for the passes after this one (conv_fusion's residual check).
  if (ctx.changes) RETURN_IF_ERROR(infer_shapes(model));
  return Status::ok();
}

}  // namespace

GraphPass attention_layout_pass() {
  return {"attention_layout", 2,
          "torch multi-head attention between [S,B,E] Transposes runs in [B,S,E] (rank-4 Attention, out-projection as MatMul)",
          run_attention_layout};
}

}  // namespace ferry

// Pass row_pruning (level 2): rows nobody reads are not computed. A Slice (constant start/end on one
// axis, step 1) or a Gather of one constant index moves above the node producing its input when that
// node computes each position of the axis from the same position of its inputs:
//   elementwise unary ops and com.ferry.Gelu; binary elementwise ops with broadcast (an input is sliced
//   where it has the axis with the output's size, not where it broadcasts along it); LayerNorm /
//   LayerNormalization normalizing over later axes; MatMul / FusedMatMul with a 2-D B on a row axis of
//   A (the residual Z sliced too); Gemm / FusedGemm on A's rows; Transpose (the input's permuted axis);
//   Reshape keeping the axis and what is before it; a Reshape of a Gemm's rows into [.., N] (the Gemm
//   becomes a FusedMatMul on the split rows, so the slice goes on into it); com.ferry.Attention on its
//   query axis (output rows depend on their query rows only: Q is sliced, K and V are not).
// It moves only when every reader of the value is the same slice (else the rows are needed anyway),
// so the arithmetic of each kept row is unchanged. ViT's class-token Gather then cuts its last
// encoder block to one row per image (MLP, LayerNorms, out-projection, attention queries).
// Runs after the fusions (it moves through the fused nodes). FERRY_DISABLE_PASSES=row_pruning turns it off.
#include <cstdlib>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "ops/shape_inference.h"
#include "passes/graph_edit.h"
#include "passes/pipeline.h"

namespace ferry {

GraphPass dead_node_removal_pass();

namespace {

// Rows [start, end) of one axis.
struct Sel {
  int64_t axis = 0, start = 0, end = 0;
  bool operator==(const Sel& o) const { return axis == o.axis && start == o.start && end == o.end; }
};

bool is_onnx(const Node& n, const char* op) { return n.domain.empty() && n.op_type == op; }
bool is_ferry(const Node& n, const char* op) { return n.domain == kFerryDomain && n.op_type == op; }

const Shape* shape_of(const Graph& g, const std::string& v) {
  const TensorType* t = g.find_type(v);
  return t && t->shape ? &*t->shape : nullptr;
}

// One constant integer from a 1-element constant, or false.
bool one_int(const Graph& g, const std::string& v, int64_t* out) {
  const Tensor* t = constant_value(g, v);
  if (!t || t->numel() != 1 || !dtype_is_integer(t->dtype())) return false;
  *out = t->to_int64_vector()[0];
  return true;
}

// The selection of a Slice node with constant starts/ends/axes of one axis and step 1.
std::optional<Sel> slice_sel(const Model& model, const Graph& g, const Node& n) {
  if (!is_onnx(n, "Slice") || model.opset() < 10 || n.inputs.size() < 3 || n.outputs.size() != 1) return std::nullopt;
  const Shape* s = shape_of(g, n.inputs[0]);
  if (!s) return std::nullopt;
  int64_t start = 0, end = 0, axis = 0, step = 1;
  if (!one_int(g, n.inputs[1], &start) || !one_int(g, n.inputs[2], &end)) return std::nullopt;
  if (n.inputs.size() > 3 && !n.inputs[3].empty() && !one_int(g, n.inputs[3], &axis)) return std::nullopt;
  if (n.inputs.size() > 4 && !n.inputs[4].empty() && (!one_int(g, n.inputs[4], &step) || step != 1)) return std::nullopt;
  if (axis < 0) axis += s->rank();
  if (axis < 0 || axis >= s->rank()) return std::nullopt;
  const Dim& d = s->dims[axis];
  if (start < 0 || end < 0 || end > (d.is_known() ? d.value : 0)) {
    if (!d.is_known()) return std::nullopt;
    if (start < 0) start += d.value;
    if (end < 0) end += d.value;
    start = std::max<int64_t>(0, std::min(start, d.value));
    end = std::max<int64_t>(0, std::min(end, d.value));
  }
  if (end <= start) return std::nullopt;
  if (d.is_known() && start == 0 && end == d.value) return std::nullopt;  // the whole axis: nothing to gain
  return Sel{axis, start, end};
}

// The selection of Gather(x, constant single index, axis), as rows [i, i+1).
std::optional<Sel> gather_sel(const Graph& g, const Node& n) {
  if (!is_onnx(n, "Gather") || n.inputs.size() != 2 || n.outputs.size() != 1) return std::nullopt;
  const Shape* s = shape_of(g, n.inputs[0]);
  int64_t i = 0;
  if (!s || !one_int(g, n.inputs[1], &i)) return std::nullopt;
  int64_t axis = n.attr("axis") ? n.attr("axis")->i : 0;
  if (axis < 0) axis += s->rank();
  if (axis < 0 || axis >= s->rank()) return std::nullopt;
  const Dim& d = s->dims[axis];
  if (i < 0) {
    if (!d.is_known()) return std::nullopt;
    i += d.value;
  }
  if (i < 0 || (d.is_known() && (i >= d.value || d.value == 1))) return std::nullopt;
  return Sel{axis, i, i + 1};
}

// How a producer is rewritten: the selection of each input (none: read whole), and replacements.
struct Plan {
  std::vector<std::optional<Sel>> in_sel;
  Node node;                      // the producer as it will be (inputs before slicing)
  std::vector<Node> before;       // nodes to add before it (a Reshape of a Gemm's input)
  std::vector<std::pair<std::string, Tensor>> new_consts;
  bool rewrite_only = false;      // the producer is replaced (same output), the slice stays below it
};

// Whether value v (an input of a node whose output has shape `out`) is sliced along out's axis a:
// true with *sel when it has that axis with the output's size, false with no slice when it
// broadcasts along it; nullopt-like failure through the return of `ok`.
bool broadcast_input_sel(const Graph& g, const std::string& v, const Shape& out, const Sel& sel, std::optional<Sel>* res,
                         bool* ok) {
  *res = std::nullopt;
  const Shape* s = shape_of(g, v);
  if (!s) return *ok = false;
  const int64_t ia = sel.axis - (out.rank() - s->rank());
  if (ia < 0) return *ok = true;
  const Dim& d = s->dims[ia];
  if (d.is_known() && d.value == 1 && !(out.dims[sel.axis].is_known() && out.dims[sel.axis].value == 1)) return *ok = true;
  if (!(d == out.dims[sel.axis]) || (!d.is_known() && d.symbol.empty())) return *ok = false;
  *res = Sel{ia, sel.start, sel.end};
  return *ok = true;
}

bool is_unary_rowwise(const Node& n) {
  static const char* kOps[] = {"Relu", "Erf", "Sigmoid", "Tanh", "Neg", "Exp", "Sqrt", "Abs", "Cast", "Identity",
                               "Softplus", "Gelu", "HardSwish", "LeakyRelu", "Elu", "Reciprocal", "Log"};
  if (is_ferry(n, "Gelu")) return true;
  if (!n.domain.empty()) return false;
  for (const char* op : kOps)
    if (n.op_type == op) return true;
  return false;
}

bool is_binary_rowwise(const Node& n) {
  static const char* kOps[] = {"Add", "Sub", "Mul", "Div", "Pow"};
  if (!n.domain.empty() || n.inputs.size() != 2) return false;
  for (const char* op : kOps)
    if (n.op_type == op) return true;
  return false;
}

int64_t product(const Shape& s, int64_t from, int64_t to, bool* known) {
  int64_t p = 1;
  for (int64_t i = from; i < to; ++i) {
    if (!s.dims[i].is_known()) *known = false;
    else p *= s.dims[i].value;
  }
  return p;
}

// A Reshape target for `out` as a constant: its static dims, -1 for the one unknown dim.
std::optional<std::vector<int64_t>> constant_target(const Graph& g, const Node& reshape, const Shape& out) {
  if (const Tensor* t = constant_value(g, reshape.inputs[1])) {
    std::vector<int64_t> v = t->to_int64_vector();
    bool zero = false;
    for (int64_t x : v) zero = zero || x == 0;
    if (!zero && static_cast<int64_t>(v.size()) == out.rank()) return v;
    // A 0 (copy the input's dim): the target from the output's dims below.
  }
  std::vector<int64_t> v;
  int unknown = 0;
  for (const Dim& d : out.dims) {
    v.push_back(d.is_known() ? d.value : -1);
    unknown += !d.is_known();
  }
  if (unknown > 1) return std::nullopt;
  for (int64_t x : v)
    if (x == 0) return std::nullopt;
  return v;
}

Tensor i64_vector(const std::vector<int64_t>& v) { return Tensor::from_vector<int64_t>(v, {static_cast<int64_t>(v.size())}); }

bool plan_move(const Model& model, const Graph& g, const GraphUses& uses, const Node& p, const Sel& sel, Plan* plan) {
  if (p.outputs.empty() || has_subgraph(p)) return false;
  for (size_t k = 1; k < p.outputs.size(); ++k)
    if (!p.outputs[k].empty() && (uses.num_readers(p.outputs[k]) || uses.pinned.count(p.outputs[k]))) return false;
  const Shape* out = shape_of(g, p.outputs[0]);
  if (!out || sel.axis >= out->rank()) return false;
  plan->node = p;
  plan->in_sel.assign(p.inputs.size(), std::nullopt);
  auto& in = plan->in_sel;
  if (is_unary_rowwise(p)) {
    if (p.inputs.size() != 1) return false;
    in[0] = sel;
    return true;
  }
  if (is_binary_rowwise(p)) {
    bool ok = true;
    for (size_t k = 0; k < 2 && ok; ++k) broadcast_input_sel(g, p.inputs[k], *out, sel, &in[k], &ok);
    return ok;
  }
  if (is_ferry(p, "LayerNorm") || is_onnx(p, "LayerNormalization")) {
    int64_t axis = p.attr("axis") ? p.attr("axis")->i : -1;
    if (axis < 0) axis += out->rank();
    if (axis <= sel.axis) return false;
    in[0] = sel;
    return true;
  }
  if (is_ferry(p, "FusedMatMul") || is_onnx(p, "MatMul")) {
    const Shape* a = shape_of(g, p.inputs[0]);
    const Shape* b = shape_of(g, p.inputs[1]);
    if (!a || !b || b->rank() != 2 || a->rank() != out->rank() || a->rank() < 2 || sel.axis >= a->rank() - 1) return false;
    in[0] = sel;
    if (p.inputs.size() > 2 && !p.inputs[2].empty()) {
      const Shape* bias = shape_of(g, p.inputs[2]);
      if (!bias || bias->rank() > 1) return false;
    }
    if (p.inputs.size() > 3 && !p.inputs[3].empty()) {
      bool ok = true;
      broadcast_input_sel(g, p.inputs[3], *out, sel, &in[3], &ok);
      if (!ok) return false;
    }
    return true;
  }
  if (is_onnx(p, "Gemm") || is_ferry(p, "FusedGemm")) {
    if (sel.axis != 0 || (p.attr("transA") && p.attr("transA")->i != 0)) return false;
    in[0] = sel;
    if (p.inputs.size() > 2 && !p.inputs[2].empty()) {
      bool ok = true;
      broadcast_input_sel(g, p.inputs[2], *out, sel, &in[2], &ok);
      if (!ok) return false;
    }
    return true;
  }
  if (is_onnx(p, "Transpose")) {
    const Attribute* perm = p.attr("perm");
    if (!perm || static_cast<int64_t>(perm->ints.size()) != out->rank()) return false;
    in[0] = Sel{perm->ints[sel.axis], sel.start, sel.end};
    return true;
  }
  if (is_onnx(p, "Reshape") && p.inputs.size() == 2) {
    const Shape* x = shape_of(g, p.inputs[0]);
    if (!x) return false;
    std::optional<std::vector<int64_t>> target = constant_target(g, p, *out);
    if (!target || (*target)[sel.axis] < 0) return false;
    const Dim& od = out->dims[sel.axis];
    if (!od.is_known()) return false;
    // The axis and what is before it are kept: the input axis a' of the same size with the same
    // (static) number of elements before it, or the same axis after the same (symbolic) dims.
    bool known = true;
    const int64_t before = product(*out, 0, sel.axis, &known);
    int64_t ia = -1;
    if (sel.axis < x->rank() && x->dims[sel.axis].is_known() && x->dims[sel.axis].value == od.value) {
      bool same = true;
      for (int64_t k = 0; k < sel.axis && same; ++k)
        same = x->dims[k] == out->dims[k] && (x->dims[k].is_known() || !x->dims[k].symbol.empty());
      if (same) ia = sel.axis;
    }
    if (known && ia < 0) {
      for (int64_t k = 0; k < x->rank() && ia < 0; ++k) {
        bool kk = true;
        const int64_t xb = product(*x, 0, k, &kk);
        if (!kk) break;
        if (xb == before && x->dims[k].is_known() && x->dims[k].value == od.value) ia = k;
        if (xb > before) break;
      }
    }
    if (ia >= 0) {
      (*target)[sel.axis] = sel.end - sel.start;
      const std::string shape_name = fresh_name(g, p.name + "_rows_shape");
      plan->new_consts.emplace_back(shape_name, i64_vector(*target));
      plan->node.inputs[1] = shape_name;
      in[0] = Sel{ia, sel.start, sel.end};
      return true;
    }
    // Reshape(Gemm(A, B, C)) splitting the Gemm's rows into out[:-1] (out's last dim is N): the Gemm
    // becomes FusedMatMul(Reshape(A, out[:-1] + [K]), B, C) and the Reshape goes away.
    const long gi = uses.producer_of(p.inputs[0]);
    if (gi < 0 || !uses.single_use(p.inputs[0]) || sel.axis == out->rank() - 1) return false;
    const Node& gm = g.nodes[gi];
    if (!(is_onnx(gm, "Gemm") || is_ferry(gm, "FusedGemm")) || gm.outputs.size() != 1) return false;
    auto f = [&](const char* k, float d) { return gm.attr(k) ? gm.attr(k)->f : d; };
    auto i = [&](const char* k) { return gm.attr(k) ? gm.attr(k)->i : 0; };
    if (f("alpha", 1.f) != 1.f || f("beta", 1.f) != 1.f || i("transA") != 0) return false;
    const Tensor* b = constant_value(g, gm.inputs[1]);
    const Shape* a = shape_of(g, gm.inputs[0]);
    if (!b || b->rank() != 2 || b->dtype() != DType::kF32 || !a || a->rank() != 2) return false;
    const int64_t n = i("transB") ? b->dims()[0] : b->dims()[1];
    const int64_t k_dim = i("transB") ? b->dims()[1] : b->dims()[0];
    if (!out->dims.back().is_known() || out->dims.back().value != n || (*target).back() != n) return false;
    std::string bias;
    if (gm.inputs.size() > 2 && !gm.inputs[2].empty()) {
      const Shape* c = shape_of(g, gm.inputs[2]);
      if (!c || c->rank() > 1 || (c->rank() == 1 && !(c->dims[0].is_known() && c->dims[0].value == n))) return false;
      if (c->rank() == 0 || !constant_value(g, gm.inputs[2])) return false;
      bias = gm.inputs[2];
    }
    std::string weight = gm.inputs[1];
    if (i("transB")) {
      Tensor t = Tensor::allocate(DType::kF32, {b->dims()[1], b->dims()[0]});
      const float* src = b->data<float>();
      float* dst = t.mutable_data<float>();
      for (int64_t r = 0; r < b->dims()[0]; ++r)
        for (int64_t c = 0; c < b->dims()[1]; ++c) dst[c * b->dims()[0] + r] = src[r * b->dims()[1] + c];
      weight = fresh_name(g, gm.inputs[1] + "_t");
      plan->new_consts.emplace_back(weight, std::move(t));
    }
    // A's new shape: out's dims with the last one K; A read through a Reshape of a Reshape reads the first's input.
    std::vector<int64_t> a_target = *target;
    a_target.back() = k_dim;
    std::string a_in = gm.inputs[0];
    const long ri = uses.producer_of(a_in);
    if (ri >= 0 && is_onnx(g.nodes[ri], "Reshape") && uses.single_use(a_in)) a_in = g.nodes[ri].inputs[0];
    Node rs;
    rs.op_type = "Reshape";
    rs.name = fresh_name(g, gm.name + "_rows_reshape");
    const std::string a_shape = fresh_name(g, gm.name + "_rows_a_shape");
    plan->new_consts.emplace_back(a_shape, i64_vector(a_target));
    rs.inputs = {a_in, a_shape};
    rs.outputs = {fresh_name(g, gm.name + "_rows_a")};
    Node mm;
    mm.op_type = "FusedMatMul";
    mm.domain = kFerryDomain;
    mm.name = gm.name + "_rows";
    mm.inputs = {rs.outputs[0], weight};
    if (!bias.empty()) mm.inputs.push_back(bias);
    for (const char* k : {"activation", "activation_params"})
      if (gm.attr(k)) mm.attrs[k] = *gm.attr(k);
    mm.outputs = p.outputs;
    mm.origin = gm.origin.empty() ? std::vector<std::string>{gm.name} : gm.origin;
    mm.origin.push_back(p.name);
    plan->node = mm;
    plan->before.push_back(std::move(rs));
    // The slice then moves through the FusedMatMul in the next round: here only the rewrite.
    plan->in_sel.assign(mm.inputs.size(), std::nullopt);
    plan->rewrite_only = true;
    return true;
  }
  if (is_ferry(p, "Attention")) {
    const Shape* q = shape_of(g, p.inputs[0]);
    if (!q || q->rank() != out->rank()) return false;
    const int64_t r = out->rank();
    std::vector<int64_t> out_perm = p.attr("out_perm") ? p.attr("out_perm")->ints : std::vector<int64_t>{};
    std::vector<int64_t> q_perm = p.attr("q_perm") ? p.attr("q_perm")->ints : std::vector<int64_t>{};
    const int64_t ya = out_perm.empty() ? sel.axis : out_perm[sel.axis];
    if (ya != r - 2) return false;  // only the query axis
    const int64_t qa = q_perm.empty() ? ya : q_perm[ya];
    if (!(q->dims[qa] == out->dims[sel.axis])) return false;
    in[0] = Sel{qa, sel.start, sel.end};
    if (p.inputs.size() > 3 && !p.inputs[3].empty()) {
      const Shape* m = shape_of(g, p.inputs[3]);
      if (!m) return false;
      const int64_t ma = r - 2 - (r - m->rank());
      if (ma >= 0) {
        const Dim& d = m->dims[ma];
        if (!(d.is_known() && d.value == 1)) {
          if (!(d == q->dims[qa]) || !d.is_known()) return false;
          in[3] = Sel{ma, sel.start, sel.end};
        }
      }
    }
    return true;
  }
  return false;
}

// A Slice node of `v` by `sel` (constants for starts/ends/axes), output `out`.
Node make_slice(Graph* g, const std::string& v, const Sel& sel, const std::string& out) {
  Node s;
  s.op_type = "Slice";
  s.name = fresh_name(*g, out + "_slice");
  std::string names[3];
  const int64_t vals[3] = {sel.start, sel.end, sel.axis};
  const char* what[3] = {"_starts", "_ends", "_axes"};
  for (int k = 0; k < 3; ++k) {
    names[k] = fresh_name(*g, out + what[k]);
    Tensor t = i64_vector({vals[k]});
    g->value_types[names[k]] = t.type();
    g->initializers[names[k]] = std::move(t);
  }
  s.inputs = {v, names[0], names[1], names[2]};
  s.outputs = {out};
  return s;
}

// One move: the Slice/Gather readers of some value go above its producer. Returns whether it changed.
StatusOr<bool> move_once(Model* model) {
  Graph& g = model->graph;
  GraphUses uses(g);
  for (size_t si = 0; si < g.nodes.size(); ++si) {
    const Node& sn = g.nodes[si];
    std::optional<Sel> sel;
    bool is_gather = false;
    if (is_onnx(sn, "Slice")) sel = slice_sel(*model, g, sn);
    else if (is_onnx(sn, "Gather")) {
      sel = gather_sel(g, sn);
      is_gather = true;
    }
    if (!sel) continue;
    const std::string v = sn.inputs[0];
    const long pi = uses.producer_of(v);
    if (pi < 0 || uses.pinned.count(v)) continue;
    // Every reader of v is the same slice (a Gather only alone).
    std::vector<size_t> readers = uses.readers.at(v);
    bool same = true;
    for (size_t r : readers) {
      const Node& rn = g.nodes[r];
      if (is_gather) same = same && readers.size() == 1;
      else same = same && rn.inputs[0] == v && slice_sel(*model, g, rn) == sel;
    }
    if (!same) continue;
    Plan plan;
    if (!plan_move(*model, g, uses, g.nodes[pi], *sel, &plan)) continue;
    if (is_gather) {
      // Gather(v, i) becomes Gather(Slice(v, [i, i+1)), 0); the Slice then moves in the next round.
      const Tensor* idx = constant_value(g, sn.inputs[1]);
      Tensor zero = Tensor::allocate(idx->dtype(), idx->dims());
      if (idx->dtype() == DType::kI64) zero.mutable_data<int64_t>()[0] = 0;
      else if (idx->dtype() == DType::kI32) zero.mutable_data<int32_t>()[0] = 0;
      else continue;
      const std::string zname = fresh_name(g, sn.name + "_index0");
      g.value_types[zname] = zero.type();
      g.initializers[zname] = std::move(zero);
      const std::string sliced = fresh_name(g, v + "_rows");
      Node s = make_slice(&g, v, *sel, sliced);
      g.nodes[si].inputs = {sliced, zname};
      g.nodes.insert(g.nodes.begin() + static_cast<long>(si), std::move(s));
      return true;
    }
    for (auto& [name, t] : plan.new_consts) {
      g.value_types[name] = t.type();
      g.initializers[name] = std::move(t);
    }
    if (plan.rewrite_only) {
      // The Gemm and the Reshape before it lose their reader: dead_node_removal takes them.
      std::vector<Node> added = std::move(plan.before);
      added.push_back(std::move(plan.node));
      g.nodes.erase(g.nodes.begin() + pi);
      g.nodes.insert(g.nodes.begin() + pi, std::make_move_iterator(added.begin()), std::make_move_iterator(added.end()));
      return true;
    }
    // The producer's output is renamed to the slice's output (a pinned one when there is one).
    std::string out_name;
    for (size_t r : readers)
      if (uses.pinned.count(g.nodes[r].outputs[0])) {
        if (!out_name.empty()) out_name = "!";
        else out_name = g.nodes[r].outputs[0];
      }
    if (out_name == "!") continue;
    if (out_name.empty()) out_name = g.nodes[readers[0]].outputs[0];
    std::vector<Node> added = std::move(plan.before);
    Node np = std::move(plan.node);
    for (size_t k = 0; k < np.inputs.size(); ++k) {
      if (!plan.in_sel[k] || np.inputs[k].empty()) continue;
      const std::string sliced = fresh_name(g, np.inputs[k] + "_rows");
      Node s = make_slice(&g, np.inputs[k], *plan.in_sel[k], sliced);
      if (constant_value(g, np.inputs[k])) {  // a constant operand: slice it now
        std::vector<const Tensor*> cin;
        for (const std::string& in : s.inputs) cin.push_back(constant_value(g, in));
        ASSIGN_OR_RETURN(std::vector<Tensor> r, evaluate_node(*model, s, cin));
        g.value_types[sliced] = r[0].type();
        g.initializers[sliced] = std::move(r[0]);
      } else {
        added.push_back(std::move(s));
      }
      np.inputs[k] = sliced;
    }
    if (np.origin.empty() && np.name == g.nodes[pi].name) np.origin = {np.name};
    np.name = fresh_name(g, g.nodes[pi].name + "_rows");
    np.outputs = {out_name};
    for (size_t r : readers)
      if (g.nodes[r].outputs[0] != out_name) replace_uses(&g, g.nodes[r].outputs[0], out_name);
    added.push_back(std::move(np));
    std::vector<bool> dead(g.nodes.size(), false);
    for (size_t r : readers) dead[r] = true;
    dead[pi] = true;
    std::vector<Node> kept;
    kept.reserve(g.nodes.size() + added.size());
    for (size_t k = 0; k < g.nodes.size(); ++k) {
      if (k == static_cast<size_t>(pi)) {
        // The new nodes read only values produced before the producer.
        for (Node& a : added) kept.push_back(std::move(a));
      }
      if (!dead[k]) kept.push_back(std::move(g.nodes[k]));
    }
    g.nodes = std::move(kept);
    return true;
  }
  return false;
}

Status run_row_pruning(Model* model, PassContext& ctx) {
  // Nodes nobody reads (Shape nodes whose dims were folded) must not count as readers of the rows.
  const GraphPass dead_nodes = dead_node_removal_pass();
  for (int round = 0; round < 10000; ++round) {
    PassContext dead_ctx{ctx.options};
    RETURN_IF_ERROR(dead_nodes.run(model, dead_ctx));
    ASSIGN_OR_RETURN(bool changed, move_once(model));
    if (!changed) break;
    ++ctx.changes;
    RETURN_IF_ERROR(infer_shapes(model));
  }
  if (ctx.changes) use_ferry_domain(model);
  return Status::ok();
}

}  // namespace

GraphPass row_pruning_pass() {
  return {"row_pruning", 2,
          "a Slice/Gather of rows moves above row-independent producers (only the rows read are computed)",
          run_row_pruning};
}

}  // namespace ferry

// Pass nhwc_layout (level 2, devices with trait "channels_last": cpu): runs CNN regions in
// channels-last (NHWC) layout so
// oneDNN's fast NHWC convolutions chain without a layout change between layers. Explicit Transposes
// are inserted only at region edges.
//
// A region grows from every 2-D convolution with constant weights (Conv / FusedConv become FusedConv
// with channels_last = 1; so does the int8 com.ferry.QConvFused) through the ops that do not care
// about the layout or have an NHWC form (an 8-bit MaxPool too: src/backends/cpu/int8_pool.cpp):
//   - unary activations (Relu, Sigmoid, Clip, ...), com.ferry.Gelu and com.ferry.QLookup;
//   - Add / Sub / Mul / Div of 4-D values (constants are permuted to match, e.g. a [C,1,1] scale; an
//     Add / Mul whose input 0 is broadcast and input 1 full takes the full one first: in place);
//   - Concat of 4-D values (the axis is remapped);
//   - MaxPool (one output) / AveragePool / GlobalAveragePool -> com.ferry.NhwcMaxPool / ...
//   - Resize with constant scales / sizes that keep N and C (they are permuted);
// such a node joins when one of its inputs comes from the region. Values leaving the region (read
// by another node, a graph output, a subgraph) get a Transpose back to NCHW under their original name,
// so nothing outside the region changes. A value entering the region from outside gets one Transpose
// to NHWC, shared by all its readers in the region, except where a convolution reads it: that one
// takes it as it is (FusedConv nchw_input = 1) and changes the layout inside its kernel (measured:
// oneDNN's reorder of a [1,3,224,224] image takes 0.04 ms, the reference Transpose 0.1-0.2 ms), and where
// it is a per-tensor QuantizeLinear's output that only the region reads (an int8 model's image), that node
// writes NHWC itself (com.ferry.QuantizeLinearToNhwc).
// Measured (ResNet-50 layers, 1 thread): oneDNN NCHW convolutions take 1.3-2x the NHWC / blocked time.
#include <cstdlib>
#include <cstring>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "common/env_switch.h"
#include "passes/graph_edit.h"
#include "passes/pipeline.h"

namespace ferry {
namespace {

const std::vector<int64_t> kToNhwc = {0, 2, 3, 1};
const std::vector<int64_t> kToNchw = {0, 3, 1, 2};

bool is_onnx(const Node& n) { return n.domain.empty(); }

int64_t rank_of(const Graph& g, const std::string& v) {
  const TensorType* t = g.find_type(v);
  return t && t->shape ? t->shape->rank() : -1;
}

TensorType permuted(const TensorType& t, const std::vector<int64_t>& perm) {
  if (!t.shape || t.shape->rank() != 4) return t;
  Shape s;
  for (int64_t p : perm) s.dims.push_back(t.shape->dims[p]);
  return TensorType{t.dtype, s};
}

// Resize whose scales / sizes are constants of 4 values, scaling neither N nor C (per-axis
// interpolation then does not care about the axis order); not tf_crop_and_resize, no 'axes'.
bool resize_convertible(const Graph& g, const Node& n) {
  if (n.attr("axes") || rank_of(g, n.inputs[0]) != 4) return false;
  if (const Attribute* m = n.attr("coordinate_transformation_mode"); m && m->s == "tf_crop_and_resize") return false;
  bool given = false;
  for (size_t i = 2; i < n.inputs.size() && i < 4; ++i) {
    if (n.inputs[i].empty()) continue;
    const Tensor* c = constant_value(g, n.inputs[i]);
    if (!c || c->rank() != 1) return false;
    if (c->numel() == 0) continue;
    if (c->numel() != 4) return false;
    const TensorType* xt = g.find_type(n.inputs[0]);
    const double keep0 = i == 2 ? 1.0 : (xt->shape->dims[0].is_known() ? xt->shape->dims[0].value : -1);
    const double keep1 = i == 2 ? 1.0 : (xt->shape->dims[1].is_known() ? xt->shape->dims[1].value : -1);
    if (c->get_double(0) != keep0 || c->get_double(1) != keep1) return false;
    given = true;
  }
  return given;
}

// A 1-D constant of 4 per-axis values (Resize scales / sizes) in NHWC order.
std::string permuted_axis_constant(Graph& g, const std::string& v) {
  const Tensor* c = constant_value(g, v);
  if (!c || c->numel() != 4) return v;
  Tensor out = Tensor::allocate(c->dtype(), {4});
  const int64_t es = dtype_size(c->dtype());
  const int64_t order[4] = {0, 2, 3, 1};
  for (int64_t i = 0; i < 4; ++i)
    std::memcpy(static_cast<char*>(out.mutable_raw()) + i * es, static_cast<const char*>(c->raw()) + order[i] * es,
                static_cast<size_t>(es));
  const std::string name = fresh_name(g, v + "_nhwc");
  g.initializers[name] = out;
  g.value_types[name] = out.type();
  return name;
}

// QuantizeLinear / DequantizeLinear with a constant scalar scale and zero point (no block quantization).
bool scalar_qparams(const Graph& g, const Node& n) {
  if (n.inputs.size() < 2 || n.attr("block_size")) return false;
  for (size_t i = 1; i < n.inputs.size() && i < 3; ++i) {
    if (n.inputs[i].empty()) continue;
    const Tensor* c = constant_value(g, n.inputs[i]);
    if (!c || c->numel() != 1) return false;
  }
  return true;
}

enum class Kind { kNone, kConv, kQConv, kPool, kUnary, kBinary, kConcat, kResize };

Kind kind_of(const Graph& g, const Node& n) {
  static const std::unordered_set<std::string> unary = {"Relu", "Sigmoid", "Tanh", "Clip", "LeakyRelu", "HardSigmoid",
                                                        "HardSwish", "Elu", "Selu", "Softplus", "Erf", "Neg", "Abs"};
  static const std::unordered_set<std::string> binary = {"Add", "Sub", "Mul", "Div"};
  if (n.outputs.empty() || rank_of(g, n.outputs[0]) != 4) return Kind::kNone;
  const bool conv_like = (is_onnx(n) && n.op_type == "Conv") || (n.domain == kFerryDomain && n.op_type == "FusedConv");
  if (conv_like) {
    const Attribute* cl = n.attr("channels_last");
    if (cl && cl->i != 0) return Kind::kNone;
    if (rank_of(g, n.inputs[0]) != 4 || !constant_value(g, n.inputs[1])) return Kind::kNone;
    return Kind::kConv;
  }
  if (n.domain == kFerryDomain && n.op_type == "QConvFused") {  // int8 (qdq_fusion): x and the residual z
    const Attribute* cl = n.attr("channels_last");
    if ((cl && cl->i != 0) || rank_of(g, n.inputs[0]) != 4 || n.inputs.size() < 4 || !constant_value(g, n.inputs[3]))
      return Kind::kNone;
    return Kind::kQConv;
  }
  if (n.domain == kFerryDomain && (n.op_type == "Gelu" || n.op_type == "QLookup")) return Kind::kUnary;  // (QLookup: qdq_lookup, per tensor)
  if (n.domain == kFerryDomain && n.op_type == "QGlobalAveragePool")  // int8 (qdq_fusion): -> NhwcQGlobalAveragePool
    return rank_of(g, n.inputs[0]) == 4 ? Kind::kPool : Kind::kNone;
  if (!is_onnx(n)) return Kind::kNone;
  if (unary.count(n.op_type)) return Kind::kUnary;
  if ((n.op_type == "QuantizeLinear" || n.op_type == "DequantizeLinear") && scalar_qparams(g, n))
    return Kind::kUnary;  // per-tensor: elementwise (an int8 region's float islands, e.g. SiLU, stay NHWC)
  if (binary.count(n.op_type)) return Kind::kBinary;
  if (n.op_type == "Concat") return Kind::kConcat;
  if (n.op_type == "Resize" && resize_convertible(g, n)) return Kind::kResize;
  if ((n.op_type == "MaxPool" && n.outputs.size() == 1) || n.op_type == "AveragePool" ||
      n.op_type == "GlobalAveragePool")
    return rank_of(g, n.inputs[0]) == 4 ? Kind::kPool : Kind::kNone;
  return Kind::kNone;
}

// Whether input i of a node of kind k carries an activation in the node's layout.
bool layout_input(Kind k, size_t i) {
  switch (k) {
    case Kind::kConv: return i == 0 || i == 3;
    case Kind::kQConv: return i == 0 || i == 9;
    case Kind::kPool:
    case Kind::kResize:
    case Kind::kUnary: return i == 0;
    case Kind::kBinary:
    case Kind::kConcat: return true;
    case Kind::kNone: return false;
  }
  return false;
}

// A constant operand of a binary op, rewritten for the NHWC layout: broadcast to rank 4 (leading 1s)
// and permuted. Scalars and single elements stay as they are.
const Tensor* nhwc_constant(Graph& g, const std::string& v, std::string* name) {
  const Tensor* c = constant_value(g, v);
  if (!c || c->numel() == 1 || c->rank() > 4) return c;
  std::vector<int64_t> dims = c->dims();
  dims.insert(dims.begin(), 4 - dims.size(), 1);
  // Permute by copying with the NHWC index order (any dtype: move bytes).
  Tensor out = Tensor::allocate(c->dtype(), {dims[0], dims[2], dims[3], dims[1]});
  const int64_t es = dtype_size(c->dtype());
  const char* src = static_cast<const char*>(c->raw());
  char* dst = static_cast<char*>(out.mutable_raw());
  int64_t o = 0;
  for (int64_t n = 0; n < dims[0]; ++n)
    for (int64_t h = 0; h < dims[2]; ++h)
      for (int64_t w = 0; w < dims[3]; ++w)
        for (int64_t ch = 0; ch < dims[1]; ++ch, ++o) {
          const int64_t i = ((n * dims[1] + ch) * dims[2] + h) * dims[3] + w;
          std::memcpy(dst + o * es, src + i * es, static_cast<size_t>(es));
        }
  *name = fresh_name(g, v + "_nhwc");
  g.initializers[*name] = out;
  g.value_types[*name] = out.type();
  return &g.initializers[*name];
}

bool convertible_inputs(const Graph& g, const Node& n, Kind k) {
  if (k != Kind::kBinary && k != Kind::kConcat) return true;
  for (const std::string& in : n.inputs) {
    if (in.empty()) return false;
    const Tensor* c = constant_value(g, in);
    if (c ? (c->numel() != 1 && c->rank() > 4) : rank_of(g, in) != 4) return false;
    if (c && (c->dtype() == DType::kString)) return false;
  }
  return true;
}

// A shape every dim of which is a number or a named symbol (two unknown dims compare equal as Dims).
bool definite_shape(const TensorType* t) {
  if (!t || !t->shape) return false;
  for (const Dim& d : t->shape->dims)
    if (!d.is_known() && d.symbol.empty()) return false;
  return true;
}

// Add / Mul whose input 0 is broadcast (squeeze-excitation's [N,C,1,1] scale times the [N,C,H,W]
// activation, as PyTorch exports it) and whose input 1 has the output's shape: the inputs are swapped
// (exact for IEEE floats and for integers), so that the output can take input 1's buffer in place (the
// memory plan writes an elementwise output over input 0 only: runtime/memory_plan.cpp) instead of a
// second activation-sized buffer. True when swapped.
// FERRY_NHWC_SWAP_OPERANDS=0 keeps the order (to compare).
bool swap_operands_enabled() {
  static const bool enabled = env_switch_on("FERRY_NHWC_SWAP_OPERANDS");
  return enabled;
}

bool put_full_operand_first(const Graph& g, Node* n) {
  if (!is_onnx(*n) || (n->op_type != "Mul" && n->op_type != "Add") || n->inputs.size() != 2 || n->outputs.size() != 1)
    return false;
  const TensorType *a = g.find_type(n->inputs[0]), *b = g.find_type(n->inputs[1]), *y = g.find_type(n->outputs[0]);
  if (!definite_shape(a) || !definite_shape(b) || !definite_shape(y) || a->dtype != b->dtype) return false;
  if (*a->shape == *y->shape || !(*b->shape == *y->shape)) return false;
  std::swap(n->inputs[0], n->inputs[1]);
  return true;
}

Node make_transpose(const std::string& in, const std::string& out, const std::vector<int64_t>& perm) {
  Node t;
  t.op_type = "Transpose";
  t.name = out;
  t.inputs = {in};
  t.outputs = {out};
  set_attr(&t, "perm", perm);
  return t;
}

// A per-tensor QuantizeLinear of a 4-D float32 value into 8 bits (constant scale and zero point), whose output only
// the region reads, at layout inputs: it becomes com.ferry.QuantizeLinearToNhwc (NCHW in, NHWC out) in place of
// the Transpose into the region (an int8 model's input image: MobileNetV2's QuantizeLinear and Transpose of the
// [1,3,224,224] image 0.059 + 0.013 CPU ms, the one node 0.051 at 1 thread; issue 38, docs/performance.md).
bool quantize_into_region(const Graph& g, const GraphUses& uses, const std::vector<bool>& nhwc, const std::vector<Kind>& kinds,
                          const Node& q) {
  if (!is_onnx(q) || q.op_type != "QuantizeLinear" || q.inputs.size() != 3 || q.outputs.size() != 1 || q.attr("output_dtype") ||
      !scalar_qparams(g, q))
    return false;
  const TensorType* xt = g.find_type(q.inputs[0]);
  const Tensor* scale = constant_value(g, q.inputs[1]);
  const Tensor* zp = q.inputs[2].empty() ? nullptr : constant_value(g, q.inputs[2]);
  if (!xt || xt->dtype != DType::kF32 || rank_of(g, q.inputs[0]) != 4 || !scale || scale->dtype() != DType::kF32 || !zp ||
      (zp->dtype() != DType::kU8 && zp->dtype() != DType::kI8))
    return false;
  const std::string& y = q.outputs[0];
  auto r = uses.readers.find(y);
  if (uses.pinned.count(y) || r == uses.readers.end()) return false;
  for (size_t reader : r->second) {
    const Node& rn = g.nodes[reader];
    for (size_t j = 0; j < rn.inputs.size(); ++j)
      if (rn.inputs[j] == y && !(nhwc[reader] && layout_input(kinds[reader], j))) return false;
  }
  return true;
}

void to_nhwc_op(Node* n, Kind k) {
  if (k == Kind::kQConv) {
    set_attr(n, "channels_last", int64_t(1));
  } else if (k == Kind::kConv) {
    if (n->origin.empty() && n->op_type == "Conv") n->origin = {n->name};
    n->op_type = "FusedConv";
    n->domain = kFerryDomain;
    set_attr(n, "channels_last", int64_t(1));
  } else if (k == Kind::kPool) {
    if (n->origin.empty()) n->origin = {n->name};
    n->op_type = "Nhwc" + n->op_type;
    n->domain = kFerryDomain;
  } else if (k == Kind::kConcat) {
    int64_t axis = n->attr("axis") ? n->attr("axis")->i : 0;
    if (axis < 0) axis += 4;
    static const int64_t kNchwToNhwcAxis[4] = {0, 3, 1, 2};
    set_attr(n, "axis", kNchwToNhwcAxis[axis]);
  }
}

Status run_nhwc_layout(Model* model, PassContext& ctx) {
  Graph& g = model->graph;
  const GraphUses uses(g);
  const size_t count = g.nodes.size();
  std::vector<Kind> kinds(count, Kind::kNone);
  std::vector<bool> nhwc(count, false);
  for (size_t i = 0; i < count; ++i) {
    const Node& n = g.nodes[i];
    const Kind k = kind_of(g, n);
    if (k == Kind::kNone || !convertible_inputs(g, n, k)) continue;
    bool from_region = k == Kind::kConv || k == Kind::kQConv;
    for (size_t j = 0; j < n.inputs.size() && !from_region; ++j) {
      const long p = uses.producer_of(n.inputs[j]);
      from_region = layout_input(k, j) && p >= 0 && nhwc[p];
    }
    kinds[i] = k;
    nhwc[i] = from_region;
  }
  std::unordered_map<std::string, std::string> nhwc_name;  // NCHW value -> its NHWC twin
  std::vector<Node> out;
  out.reserve(count * 2);
  std::vector<size_t> out_at(count, 0);  // node i's place in out (the nodes outside the region)
  for (size_t i = 0; i < count; ++i) {
    Node n = g.nodes[i];
    if (!nhwc[i]) {
      out_at[i] = out.size();
      out.push_back(std::move(n));
      continue;
    }
    const Kind k = kinds[i];
    if (k == Kind::kBinary && swap_operands_enabled()) put_full_operand_first(g, &n);
    for (size_t j = 0; j < n.inputs.size(); ++j) {
      std::string& in = n.inputs[j];
      if (in.empty() || !layout_input(k, j)) continue;
      auto it = nhwc_name.find(in);
      if (it != nhwc_name.end()) {
        in = it->second;
      } else if (constant_value(g, in)) {
        std::string name;
        if (nhwc_constant(g, in, &name) && !name.empty()) in = name;
      } else if (k == Kind::kConv && j == 0) {  // enters the region through a convolution: no Transpose
        set_attr(&n, "nchw_input", int64_t(1));
      } else {  // enters the region: a Transpose, or its QuantizeLinear writing NHWC
        const std::string t = fresh_name(g, in + "_nhwc");
        g.value_types[t] = permuted(*g.find_type(in), kToNhwc);
        const long p = uses.producer_of(in);
        if (p >= 0 && quantize_into_region(g, uses, nhwc, kinds, g.nodes[p])) {
          Node& q = out[out_at[p]];
          if (q.origin.empty()) q.origin = {q.name};
          q.op_type = "QuantizeLinearToNhwc";
          q.domain = kFerryDomain;
          q.attrs.clear();  // (axis: per tensor here)
          q.outputs[0] = t;
          g.value_types.erase(in);
        } else {
          out.push_back(make_transpose(in, t, kToNhwc));
        }
        nhwc_name[in] = t;
        in = t;
      }
    }
    if (k == Kind::kResize)
      for (size_t j = 2; j < n.inputs.size() && j < 4; ++j)
        if (!n.inputs[j].empty()) n.inputs[j] = permuted_axis_constant(g, n.inputs[j]);
    to_nhwc_op(&n, k);
    std::vector<std::string> leaving;
    for (std::string& o : n.outputs) {
      const std::string t = fresh_name(g, o + "_nhwc");
      g.value_types[t] = permuted(*g.find_type(o), kToNhwc);
      nhwc_name[o] = t;
      bool outside = uses.pinned.count(o) > 0;
      auto r = uses.readers.find(o);
      if (r != uses.readers.end())
        for (size_t reader : r->second) {
          const Node& rn = g.nodes[reader];
          bool in_layout = false;
          for (size_t j = 0; j < rn.inputs.size(); ++j)
            if (rn.inputs[j] == o && nhwc[reader] && layout_input(kinds[reader], j)) in_layout = true;
          if (!in_layout) outside = true;
        }
      if (outside) leaving.push_back(o);
      o = t;
    }
    out.push_back(std::move(n));
    for (const std::string& o : leaving) out.push_back(make_transpose(nhwc_name[o], o, kToNchw));
    ++ctx.changes;
  }
  g.nodes = std::move(out);
  if (ctx.changes) use_ferry_domain(model);
  return Status::ok();
}

}  // namespace

GraphPass nhwc_layout_pass() {
  return {"nhwc_layout", 2, "CNN regions run channels-last (NHWC) with Transposes only at the region's edges (cpu)",
          run_nhwc_layout, "channels_last"};
}

}  // namespace ferry

// The decomposition table and the expansions; see decompositions.h.
#include "passes/decompositions.h"

#include <cmath>
#include <unordered_set>

#include "ops/registry.h"

namespace ferry {
namespace {

/// Emits the replacement nodes of one node: fresh names for intermediates, typed scalar constants.
class Expander {
 public:
  Expander(const Model& model, Graph* g, const Node& node) : model_(model), g_(g), node_(node) {
    const TensorType* t = node.inputs.empty() ? nullptr : g->find_type(node.inputs[0]);
    if (t) x_type_ = *t;
    for (const auto& [name, t2] : g->initializers) taken_.insert(name);
    for (const auto& [name, t2] : g->value_types) taken_.insert(name);
    for (const Node& n : g->nodes) {
      taken_.insert(n.name);
      for (const std::string& o : n.outputs) taken_.insert(o);
    }
    for (const ValueInfo& v : g->inputs) taken_.insert(v.name);
  }

  const std::string& x() const { return node_.inputs[0]; }
  int64_t opset() const { return model_.opset(""); }
  DType dtype() const { return x_type_.dtype; }

  /// A node `op(inputs)`; returns its output. `out` = "" gives a fresh intermediate name typed
  /// with x's element type (shape inference, which the pipeline re-runs, fills the shape).
  std::string emit(const char* op, std::vector<std::string> inputs, const std::string& out = "",
                   std::map<std::string, Attribute> attrs = {}, const TensorType* type = nullptr) {
    Node n;
    n.op_type = op;
    n.name = fresh(node_.name + "/" + op);
    n.inputs = std::move(inputs);
    n.outputs = {out.empty() ? fresh(node_.name + "/" + op + ":0") : out};
    n.attrs = std::move(attrs);
    n.origin = {node_.name};
    if (out.empty()) g_->value_types[n.outputs[0]] = type ? *type : TensorType{x_type_.dtype, std::nullopt};
    nodes_.push_back(std::move(n));
    return nodes_.back().outputs[0];
  }

  /// A scalar constant of x's element type.
  std::string constant(double v) {
    Tensor t = Tensor::allocate(dtype(), {});
    switch (dtype()) {
      case DType::kF32: *t.mutable_data<float>() = static_cast<float>(v); break;
      case DType::kF64: *t.mutable_data<double>() = v; break;
      case DType::kF16: *t.mutable_data<uint16_t>() = f32_to_f16(static_cast<float>(v)); break;
      case DType::kBF16: *t.mutable_data<uint16_t>() = f32_to_bf16(static_cast<float>(v)); break;
      default: break;  // can_decompose refuses other types
    }
    return add_initializer(std::move(t));
  }

  std::string add_initializer(Tensor t) {
    const std::string name = fresh(node_.name + "/const");
    g_->value_types[name] = t.type();
    g_->initializers[name] = std::move(t);
    return name;
  }

  /// ReduceMean over `axes` with keepdims=1: attribute form before opset 18, input form after.
  std::string reduce_mean(const std::string& in, const std::vector<int64_t>& axes) {
    TensorType t{dtype(), std::nullopt};
    if (opset() >= 18) {
      const std::string a = add_initializer(Tensor::from_vector<int64_t>(axes, {static_cast<int64_t>(axes.size())}));
      return emit("ReduceMean", {in, a}, "", {{"keepdims", int_attr(1)}}, &t);
    }
    Attribute ax;
    ax.type = AttrType::kInts;
    ax.ints = axes;
    return emit("ReduceMean", {in}, "", {{"axes", ax}, {"keepdims", int_attr(1)}}, &t);
  }

  static Attribute float_attr(float v) {
    Attribute a;
    a.type = AttrType::kFloat;
    a.f = v;
    return a;
  }
  static Attribute int_attr(int64_t v) {
    Attribute a;
    a.type = AttrType::kInt;
    a.i = v;
    return a;
  }

  std::vector<Node> take() { return std::move(nodes_); }

 private:
  std::string fresh(const std::string& base) {
    std::string s = base;
    for (int i = 1; taken_.count(s); ++i) s = base + "_" + std::to_string(i);
    taken_.insert(s);
    return s;
  }

  const Model& model_;
  Graph* g_;
  const Node& node_;
  TensorType x_type_;
  std::unordered_set<std::string> taken_;
  std::vector<Node> nodes_;
};

const std::string& output(const Node& n) { return n.outputs[0]; }

float attr_f(const Node& n, const char* name, float dflt) {
  const Attribute* a = n.attr(name);
  return a && a->type == AttrType::kFloat ? a->f : dflt;
}

void expand_hard_sigmoid(Expander& e, const Node& n) {
  // max(0, min(1, alpha*x + beta))
  const std::string lin = e.emit("Add", {e.emit("Mul", {e.x(), e.constant(attr_f(n, "alpha", 0.2f))}), e.constant(attr_f(n, "beta", 0.5f))});
  e.emit("Max", {e.emit("Min", {lin, e.constant(1.0)}), e.constant(0.0)}, output(n));
}

void expand_hard_swish(Expander& e, const Node& n) {
  const std::string hs = e.emit("HardSigmoid", {e.x()}, "", {{"alpha", Expander::float_attr(1.0f / 6.0f)}, {"beta", Expander::float_attr(0.5f)}});
  e.emit("Mul", {e.x(), hs}, output(n));
}

void expand_softplus(Expander& e, const Node& n) {
  // relu(x) + log(1 + exp(-|x|)): log(1 + exp(x)) without overflow for large x.
  const std::string tail = e.emit("Log", {e.emit("Add", {e.emit("Exp", {e.emit("Neg", {e.emit("Abs", {e.x()})})}), e.constant(1.0)})});
  e.emit("Add", {e.emit("Relu", {e.x()}), tail}, output(n));
}

void expand_softsign(Expander& e, const Node& n) {
  e.emit("Div", {e.x(), e.emit("Add", {e.emit("Abs", {e.x()}), e.constant(1.0)})}, output(n));
}

void expand_mish(Expander& e, const Node& n) {
  e.emit("Mul", {e.x(), e.emit("Tanh", {e.emit("Softplus", {e.x()})})}, output(n));
}

bool gelu_tanh(const Node& n) {
  const Attribute* a = n.attr("approximate");
  return a && a->s == "tanh";
}

void expand_gelu(Expander& e, const Node& n) {
  const std::string half_x = e.emit("Mul", {e.x(), e.constant(0.5)});
  std::string inner;
  if (gelu_tanh(n)) {
    // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
    const std::string x3 = e.emit("Mul", {e.emit("Mul", {e.x(), e.x()}), e.x()});
    const std::string poly = e.emit("Add", {e.x(), e.emit("Mul", {x3, e.constant(0.044715)})});
    inner = e.emit("Tanh", {e.emit("Mul", {poly, e.constant(std::sqrt(2.0 / M_PI))})});
  } else {
    // 0.5 x (1 + erf(x / sqrt(2)))
    inner = e.emit("Erf", {e.emit("Mul", {e.x(), e.constant(1.0 / std::sqrt(2.0))})});
  }
  e.emit("Mul", {half_x, e.emit("Add", {inner, e.constant(1.0)})}, output(n));
}

/// LayerNormalization's normalized axes [axis, rank); negative axes need no rank.
bool layer_norm_axes(const Graph& g, const Node& n, std::vector<int64_t>* axes, std::string* why) {
  const Attribute* a = n.attr("axis");
  const int64_t axis = a ? a->i : -1;
  if (axis < 0) {
    for (int64_t k = axis; k < 0; ++k) axes->push_back(k);
    return true;
  }
  const TensorType* t = g.find_type(n.inputs[0]);
  if (!t || !t->shape) {
    if (why) *why = "axis " + std::to_string(axis) + " is positive and the input's rank is not known";
    return false;
  }
  for (int64_t k = axis; k < t->shape->rank(); ++k) axes->push_back(k);
  return !axes->empty();
}

void expand_layer_norm(Expander& e, const Node& n, const std::vector<int64_t>& axes) {
  const std::string mean = e.reduce_mean(e.x(), axes);
  const std::string d = e.emit("Sub", {e.x(), mean});
  const std::string var = e.reduce_mean(e.emit("Mul", {d, d}), axes);
  const std::string stddev = e.emit("Sqrt", {e.emit("Add", {var, e.constant(attr_f(n, "epsilon", 1e-5f))})});
  const bool bias = n.inputs.size() > 2 && !n.inputs[2].empty();
  const std::string scaled = e.emit("Mul", {e.emit("Div", {d, stddev}), n.inputs[1]}, bias ? "" : output(n));
  if (bias) e.emit("Add", {scaled, n.inputs[2]}, output(n));
}

void expand_cast_like(Expander& e, const Node& n, DType to) {
  e.emit("Cast", {e.x()}, output(n), {{"to", Expander::int_attr(static_cast<int64_t>(to))}});
}

/// Trilu's k (input 1): 0 when omitted; false when given but not a constant.
bool trilu_k(const Graph& g, const Node& n, int64_t* k) {
  *k = 0;
  if (n.inputs.size() < 2 || n.inputs[1].empty()) return true;
  const Tensor* t = g.find_initializer(n.inputs[1]);
  if (!t || t->numel() != 1) return false;
  *k = t->get_int64(0);
  return true;
}

/// Trilu's last two dims when known.
bool trilu_dims(const Graph& g, const Node& n, int64_t* rows, int64_t* cols) {
  const TensorType* t = g.find_type(n.inputs[0]);
  if (!t || !t->shape || t->shape->rank() < 2) return false;
  const Dim& r = t->shape->dims[t->shape->rank() - 2];
  const Dim& c = t->shape->dims[t->shape->rank() - 1];
  if (!r.is_known() || !c.is_known() || r.value * c.value > (int64_t{1} << 24)) return false;
  *rows = r.value;
  *cols = c.value;
  return true;
}

void expand_trilu(Expander& e, const Graph& g, const Node& n) {
  int64_t k = 0, rows = 0, cols = 0;
  trilu_k(g, n, &k);
  trilu_dims(g, n, &rows, &cols);
  const Attribute* upper_attr = n.attr("upper");
  const bool upper = !upper_attr || upper_attr->i != 0;
  Tensor mask = Tensor::allocate(DType::kBool, {rows, cols});
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) mask.mutable_data<bool>()[i * cols + j] = upper ? j - i >= k : j - i <= k;
  auto zero = Tensor::create(e.dtype(), {});
  e.emit("Where", {e.add_initializer(std::move(mask)), e.x(), e.add_initializer(std::move(zero).value())}, output(n));
}

}  // namespace

const std::vector<Decomposition>& decompositions() {
  static const std::vector<Decomposition> table = {
      {"HardSigmoid", 6, "max(0, min(1, alpha*x + beta))", {"Mul", "Add", "Min", "Max"}},
      {"HardSwish", 14, "x * HardSigmoid(x; alpha=1/6, beta=0.5)", {"HardSigmoid", "Mul"}},
      {"Softplus", 1, "Relu(x) + Log(1 + Exp(-|x|))", {"Relu", "Abs", "Neg", "Exp", "Add", "Log"}},
      {"Softsign", 1, "x / (1 + |x|)", {"Abs", "Add", "Div"}},
      {"Mish", 18, "x * Tanh(Softplus(x))", {"Softplus", "Tanh", "Mul"}},
      {"Gelu", 20, "0.5 x (1 + Erf(x / sqrt 2)) (tanh form when approximate='tanh')", {"Mul", "Add", "Erf", "Tanh"}},
      {"LayerNormalization", 17, "(x - ReduceMean(x)) / Sqrt(ReduceMean((x - mean)^2) + epsilon) * scale + bias",
       {"ReduceMean", "Sub", "Mul", "Add", "Sqrt", "Div"}},
      {"CastLike", 15, "Cast(x; to = the element type of the second input)", {"Cast"}},
      {"Trilu", 14, "Where(constant triangle mask, x, 0) (needs the last two dims and k known)", {"Where"}},
  };
  return table;
}

const Decomposition* find_decomposition(const std::string& domain, const std::string& op_type) {
  if (!domain.empty() && domain != "ai.onnx") return nullptr;
  for (const Decomposition& d : decompositions())
    if (op_type == d.op) return &d;
  return nullptr;
}

namespace {
bool accepted_at(const Decomposition& d, const std::function<bool(const std::string&)>& accepts, int depth) {
  for (const char* op : d.produces) {
    if (accepts(op)) continue;
    const Decomposition* inner = find_decomposition("", op);
    if (!inner || depth >= 3 || !accepted_at(*inner, accepts, depth + 1)) return false;
  }
  return true;
}
}  // namespace

bool decomposition_accepted(const Decomposition& d, const std::function<bool(const std::string& op)>& accepts) {
  return accepted_at(d, accepts, 0);
}

bool can_decompose(const Model& model, const Graph& g, const Node& node, std::string* why) {
  if (!find_decomposition(node.domain, node.op_type)) {
    if (why) *why = "ferry has no decomposition of " + node.op_type;
    return false;
  }
  if (node.inputs.empty() || node.inputs[0].empty() || node.outputs.empty() || node.outputs[0].empty()) {
    if (why) *why = "input 0 or output 0 is missing";
    return false;
  }
  const TensorType* t = g.find_type(node.inputs[0]);
  if (node.op_type == "CastLike" || node.op_type == "Trilu") {
    const TensorType* like = node.op_type == "CastLike" && node.inputs.size() > 1 ? g.find_type(node.inputs[1]) : t;
    if (!t || t->dtype == DType::kUndefined || t->dtype == DType::kString || !like || like->dtype == DType::kUndefined) {
      if (why) *why = "the element types are not known";
      return false;
    }
    int64_t k = 0, rows = 0, cols = 0;
    if (node.op_type == "Trilu" && !trilu_k(g, node, &k)) {
      if (why) *why = "k is not a constant";
      return false;
    }
    if (node.op_type == "Trilu" && !trilu_dims(g, node, &rows, &cols)) {
      if (why) *why = "the last two dimensions are not known";
      return false;
    }
    return true;
  }
  if (!t || !dtype_is_float(t->dtype)) {
    if (why) *why = "the input's element type is not a known float type";
    return false;
  }
  if (node.op_type == "LayerNormalization") {
    for (size_t k = 1; k < node.outputs.size(); ++k)
      if (!node.outputs[k].empty()) {
        if (why) *why = "its Mean/InvStdDev outputs are read";
        return false;
      }
    if (node.inputs.size() < 2 || node.inputs[1].empty()) {
      if (why) *why = "the scale input is missing";
      return false;
    }
    std::vector<int64_t> axes;
    if (!layer_norm_axes(g, node, &axes, why)) return false;
  }
  return true;
}

StatusOr<std::vector<Node>> decompose_node(const Model& model, Graph* g, const Node& node) {
  std::string why;
  if (!can_decompose(model, *g, node, &why)) return unsupported(node.describe() + ": cannot decompose: " + why);
  Expander e(model, g, node);
  const std::string& op = node.op_type;
  if (op == "HardSigmoid") expand_hard_sigmoid(e, node);
  else if (op == "HardSwish") expand_hard_swish(e, node);
  else if (op == "Softplus") expand_softplus(e, node);
  else if (op == "Softsign") expand_softsign(e, node);
  else if (op == "Mish") expand_mish(e, node);
  else if (op == "Gelu") expand_gelu(e, node);
  else if (op == "CastLike") expand_cast_like(e, node, g->find_type(node.inputs[1])->dtype);
  else if (op == "Trilu") expand_trilu(e, *g, node);
  else if (op == "LayerNormalization") {
    std::vector<int64_t> axes;
    layer_norm_axes(*g, node, &axes, nullptr);
    expand_layer_norm(e, node, axes);
  } else {
    return internal_error("decomposition of " + op + " is listed but not implemented");
  }
  return e.take();
}

}  // namespace ferry

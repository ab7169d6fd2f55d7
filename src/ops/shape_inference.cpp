#include "ops/shape_inference.h"

#include <algorithm>
#include <optional>

#include "ops/op_util.h"
#include "ops/registry.h"

namespace ferry {
namespace {

// Constant inputs up to this many elements are evaluated at load time.
constexpr int64_t kMaxFoldElements = 1 << 16;

struct InferState {
  const Model* model;
  std::unordered_map<std::string, Tensor>* constants;
  bool skip_unknown_ops;
  /// Integer values made of dims (Shape of a partly known shape, a dynamic batch): their elements
  /// as dims, numbers or named symbols. Gather picking known dims out of them folds to a constant;
  /// Gather / Unsqueeze / Squeeze / Cast / Concat carry them on, so a Reshape whose target is
  /// built from them at run time gets the dims it will produce ([batch, 197, 768], not [?, ?, ?]).
  std::unordered_map<std::string, std::vector<Dim>> shape_dims = {};
};

// Records the dims a Shape node outputs (opset 15 start/end applied).
void record_shape_dims(InferState& st, const Node& node, int64_t opset, const TensorType* in) {
  if (!in || !in->shape || node.outputs.empty()) return;
  const int64_t rank = in->shape->rank();
  int64_t start = 0, end = rank;
  if (opset >= 15) {
    start = node.attr("start") ? node.attr("start")->i : 0;
    end = node.attr("end") ? node.attr("end")->i : rank;
    if (start < 0) start += rank;
    if (end < 0) end += rank;
    start = std::clamp<int64_t>(start, 0, rank);
    end = std::clamp<int64_t>(end, start, rank);
  }
  st.shape_dims[node.outputs[0]] = std::vector<Dim>(in->shape->dims.begin() + start, in->shape->dims.begin() + end);
}

// Gather(Shape(x), constant indices) where every picked dim of x is known: the constant it yields.
std::optional<Tensor> fold_shape_gather(const InferState& st, const Node& node, const std::vector<const Tensor*>& values) {
  if (node.inputs.size() != 2 || values.size() != 2 || !values[1]) return std::nullopt;
  if (node.attr("axis") && node.attr("axis")->i != 0) return std::nullopt;
  auto it = st.shape_dims.find(node.inputs[0]);
  const Tensor& idx = *values[1];
  if (it == st.shape_dims.end() || (idx.dtype() != DType::kI64 && idx.dtype() != DType::kI32) || idx.numel() > 64)
    return std::nullopt;
  const std::vector<Dim>& dims = it->second;
  std::vector<int64_t> picked;
  for (int64_t i = 0; i < idx.numel(); ++i) {
    int64_t k = static_cast<int64_t>(idx.get_double(i));
    if (k < 0) k += static_cast<int64_t>(dims.size());
    if (k < 0 || k >= static_cast<int64_t>(dims.size()) || !dims[k].is_known()) return std::nullopt;
    picked.push_back(dims[k].value);
  }
  return Tensor::from_vector<int64_t>(picked, idx.dims());
}

// Symbols that stand for negative elements in shape_dims (-1, any other); never a value's dim.
const char kMinusOne[] = "#-1";
const char kNegative[] = "#negative";

// The elements of an integer value as dims: its known value, or the dims recorded for it.
std::optional<std::vector<Dim>> value_dims(const InferState& st, const std::string& name, const Tensor* value) {
  if (value) {
    if ((value->dtype() != DType::kI64 && value->dtype() != DType::kI32) || value->rank() > 1 || value->numel() > 64)
      return std::nullopt;
    std::vector<Dim> dims;
    for (int64_t i = 0; i < value->numel(); ++i) {
      const auto v = static_cast<int64_t>(value->get_double(i));
      // A negative number is no dim: kept as a marker symbol (Reshape's -1 in refine_reshape).
      dims.push_back(v >= 0 ? Dim(v) : Dim::symbolic(v == -1 ? kMinusOne : kNegative));
    }
    return dims;
  }
  auto it = st.shape_dims.find(name);
  if (it == st.shape_dims.end()) return std::nullopt;
  return it->second;
}

// Whether dims a and b are the same number: 1 yes, 0 no, -1 not known at load time. A named or
// unknown dim is a size (>= 0), so it differs from every negative number.
int dims_equal(const Dim& a, const Dim& b) {
  const bool neg_a = a.symbol == kMinusOne, neg_b = b.symbol == kMinusOne;
  if (a.symbol == kNegative || b.symbol == kNegative) return -1;
  if (neg_a || neg_b) return neg_a && neg_b ? 1 : 0;
  if (a.is_known() && b.is_known()) return a.value == b.value ? 1 : 0;
  return -1;
}

// Carries dims through the integer ops that build Reshape targets from Shape (see shape_dims).
// Equal(dims, constant) that is decided at load time becomes a constant (PyTorch's expand(n, -1, -1)
// exports Where(Equal(shape, -1), 1, shape) in front of Expand).
void record_value_dims(InferState& st, const Node& node, const std::vector<const Tensor*>& values,
                       std::vector<TensorType>* outs) {
  if (!node.domain.empty() || node.outputs.size() != 1 || node.outputs[0].empty() || node.inputs.empty()) return;
  if (st.constants->count(node.outputs[0])) return;
  const std::string& op = node.op_type;
  std::optional<std::vector<Dim>> out;
  if (op == "Gather" && node.inputs.size() == 2 && values[1] && !values[0]) {
    if (node.attr("axis") && node.attr("axis")->i != 0) return;
    auto in = value_dims(st, node.inputs[0], nullptr);
    const Tensor& idx = *values[1];
    if (!in || (idx.dtype() != DType::kI64 && idx.dtype() != DType::kI32) || idx.rank() > 1 || idx.numel() > 64) return;
    std::vector<Dim> picked;
    for (int64_t i = 0; i < idx.numel(); ++i) {
      int64_t k = static_cast<int64_t>(idx.get_double(i));
      if (k < 0) k += static_cast<int64_t>(in->size());
      if (k < 0 || k >= static_cast<int64_t>(in->size())) return;
      picked.push_back((*in)[static_cast<size_t>(k)]);
    }
    out = picked;
  } else if (op == "Unsqueeze" || op == "Squeeze" || op == "Identity" ||
             (op == "Cast" && node.attr("to") &&
              (node.attr("to")->i == static_cast<int64_t>(7) || node.attr("to")->i == static_cast<int64_t>(6)))) {
    // Cast to int64 (7) or int32 (6) keeps the sizes; the other ops keep the elements.
    if (values[0]) return;
    out = value_dims(st, node.inputs[0], nullptr);
  } else if (op == "Reshape" && node.inputs.size() == 2 && values[1] && !values[0] && values[1]->numel() == 1 &&
             !outs->empty() && (*outs)[0].shape && (*outs)[0].shape->rank() == 1) {
    out = value_dims(st, node.inputs[0], nullptr);  // a 1-D value reshaped to 1-D: the same elements
  } else if (op == "Equal" && node.inputs.size() == 2 && (!values[0] || !values[1])) {
    auto a = value_dims(st, node.inputs[0], values[0]), b = value_dims(st, node.inputs[1], values[1]);
    if (!a || !b || a->size() != b->size() || outs->empty() || !(*outs)[0].shape || (*outs)[0].shape->rank() != 1) return;
    Tensor eq = Tensor::allocate(DType::kBool, {static_cast<int64_t>(a->size())});
    for (size_t i = 0; i < a->size(); ++i) {
      const int e = dims_equal((*a)[i], (*b)[i]);
      if (e < 0) return;
      eq.mutable_data<bool>()[i] = e == 1;
    }
    (*outs)[0] = eq.type();
    (*st.constants)[node.outputs[0]] = eq;
    return;
  } else if (op == "Where" && node.inputs.size() == 3 && values[0] && values[0]->dtype() == DType::kBool &&
             values[0]->rank() == 1 && (!values[1] || !values[2])) {
    auto x = value_dims(st, node.inputs[1], values[1]), y = value_dims(st, node.inputs[2], values[2]);
    const int64_t n = values[0]->numel();
    if (!x || !y || static_cast<int64_t>(x->size()) != n || static_cast<int64_t>(y->size()) != n) return;
    std::vector<Dim> picked;
    for (int64_t i = 0; i < n; ++i) picked.push_back(values[0]->data<bool>()[i] ? (*x)[i] : (*y)[i]);
    out = picked;
  } else if ((op == "Mul" || op == "Div") && node.inputs.size() == 2 && (!values[0] || !values[1])) {
    // dims * c, dims / c (torch's heads: batch * num_heads, embed / num_heads): known where both
    // sides are, the other side where one is 1, else an unknown dim (the element count is kept, so a
    // Concat of it still gives a Reshape target of known rank and its other dims).
    auto a = value_dims(st, node.inputs[0], values[0]), b = value_dims(st, node.inputs[1], values[1]);
    if (!a || !b || (a->size() != b->size() && a->size() != 1 && b->size() != 1)) return;
    if (outs->empty() || !(*outs)[0].shape || (*outs)[0].shape->rank() > 1) return;
    const size_t n = std::max(a->size(), b->size());
    std::vector<Dim> res;
    for (size_t i = 0; i < n; ++i) {
      const Dim& x = (*a)[a->size() == 1 ? 0 : i];
      const Dim& y = (*b)[b->size() == 1 ? 0 : i];
      if (!x.symbol.empty() && x.symbol[0] == '#') return;
      if (!y.symbol.empty() && y.symbol[0] == '#') return;
      if (x.is_known() && y.is_known()) {
        if (op == "Div" && y.value == 0) return;
        res.push_back(Dim(op == "Mul" ? x.value * y.value : x.value / y.value));
      } else if (y.is_known() && y.value == 1) {
        res.push_back(x);
      } else if (op == "Mul" && x.is_known() && x.value == 1) {
        res.push_back(y);
      } else {
        res.push_back(Dim());
      }
    }
    out = res;
  } else if (op == "Concat") {
    if (!node.attr("axis") || (node.attr("axis")->i != 0 && node.attr("axis")->i != -1)) return;
    std::vector<Dim> all;
    bool any_symbolic = false;
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      if (node.inputs[i].empty()) continue;
      auto part = value_dims(st, node.inputs[i], values[i]);
      if (!part) return;
      any_symbolic = any_symbolic || !values[i];
      all.insert(all.end(), part->begin(), part->end());
    }
    if (any_symbolic) out = all;
  }
  if (out) st.shape_dims[node.outputs[0]] = *out;
}

// Reshape whose target is only known as dims (shape_dims): the output dims it resolves to, each
// dim kept where the shape rule already knew it.
void refine_reshape(const InferState& st, const Node& node, int64_t opset, const std::vector<const TensorType*>& types,
                    TensorType* out) {
  auto it = st.shape_dims.find(node.inputs[1]);
  if (it == st.shape_dims.end() || !out->shape) return;
  const std::vector<Dim>& target = it->second;
  Shape& s = *out->shape;
  if (s.rank() != static_cast<int64_t>(target.size())) return;
  const Shape* in = types[0] && types[0]->shape ? &*types[0]->shape : nullptr;
  const bool allowzero = opset >= 14 && node.attr("allowzero") && node.attr("allowzero")->i != 0;
  std::vector<Dim> dims(target.size());
  int64_t infer_at = -1;
  for (size_t i = 0; i < target.size(); ++i) {
    const Dim& t = target[i];
    if (t.symbol == kMinusOne) {
      if (infer_at >= 0) return;
      infer_at = static_cast<int64_t>(i);
    } else if (t.symbol == kNegative) {
      return;  // an invalid dim: the kernel reports it at run time
    } else if (t.is_known() && t.value == 0 && !allowzero) {
      if (!in || static_cast<int64_t>(i) >= in->rank()) return;
      dims[i] = in->dims[i];
    } else {
      dims[i] = t;
    }
  }
  if (infer_at >= 0) {
    // -1 = product(input) / product(other dims), once equal symbols cancel and the rest is known.
    if (!in) return;
    std::vector<Dim> num = in->dims;
    int64_t den = 1, nk = 1;
    bool solvable = true;
    for (size_t i = 0; i < dims.size() && solvable; ++i) {
      if (static_cast<int64_t>(i) == infer_at) continue;
      if (dims[i].is_known()) {
        den *= dims[i].value;
        continue;
      }
      auto m = dims[i].symbol.empty() ? num.end() : std::find(num.begin(), num.end(), dims[i]);
      if (m == num.end()) solvable = false;
      else num.erase(m);
    }
    for (const Dim& d : num) {
      if (d.is_known()) nk *= d.value;
      else solvable = false;
    }
    if (solvable && den > 0 && nk % den == 0) dims[static_cast<size_t>(infer_at)] = Dim(nk / den);
  }
  for (size_t i = 0; i < dims.size(); ++i)
    if (!s.dims[i].is_known() && s.dims[i].symbol.empty()) s.dims[i] = dims[i];
}

// Expand whose target shape is only known as dims: the broadcast of the input shape and those dims.
void refine_expand(const InferState& st, const Node& node, const std::vector<const TensorType*>& types, TensorType* out) {
  auto it = st.shape_dims.find(node.inputs[1]);
  if (it == st.shape_dims.end() || !out->shape || !types[0] || !types[0]->shape) return;
  for (const Dim& d : it->second)
    if (d.symbol == kMinusOne || d.symbol == kNegative) return;  // the kernel reports it
  Shape b;
  if (!broadcast_shapes(*types[0]->shape, Shape(it->second), &b) || b.rank() != out->shape->rank()) return;
  for (int64_t i = 0; i < b.rank(); ++i)
    if (!out->shape->dims[i].is_known() && out->shape->dims[i].symbol.empty()) out->shape->dims[i] = b.dims[i];
}

// Ops whose output is a fresh random draw each run: never evaluated at load time.
bool is_random_op(const Node& n) {
  return n.op_type.find("Random") != std::string::npos || n.op_type == "Bernoulli" || n.op_type == "Multinomial";
}

bool has_subgraph(const Node& n) {
  for (const auto& [k, a] : n.attrs)
    if (a.g || !a.graphs.empty()) return true;
  return false;
}

Status check_declared(const Node& node, const std::string& value, const TensorType& declared, TensorType* inferred) {
  if (declared.dtype != DType::kUndefined && inferred->dtype != DType::kUndefined && declared.dtype != inferred->dtype)
    return invalid_model(node.describe() + ": output '" + value + "' is declared " + dtype_name(declared.dtype) +
                         " but the op produces " + dtype_name(inferred->dtype));
  if (inferred->dtype == DType::kUndefined) inferred->dtype = declared.dtype;
  if (!declared.shape) return Status::ok();
  if (!inferred->shape) {
    inferred->shape = declared.shape;
    return Status::ok();
  }
  Shape& s = *inferred->shape;
  const Shape& d = *declared.shape;
  if (s.rank() != d.rank())
    return invalid_model(node.describe() + ": output '" + value + "' is declared with shape " + d.to_string() +
                         " but the op produces rank " + std::to_string(s.rank()) + " " + s.to_string());
  for (int64_t i = 0; i < s.rank(); ++i) {
    if (s.dims[i].is_known() && d.dims[i].is_known() && s.dims[i].value != d.dims[i].value)
      return invalid_model(node.describe() + ": output '" + value + "' is declared with shape " + d.to_string() +
                           " but the op produces " + s.to_string());
    if (!s.dims[i].is_known() && (d.dims[i].is_known() || !d.dims[i].symbol.empty())) s.dims[i] = d.dims[i];
  }
  return Status::ok();
}

Status infer_graph(InferState& st, Graph* g);

Status infer_node(InferState& st, Graph* g, const Node& node) {
  const int64_t opset = st.model->opset(node.domain);
  auto resolved = resolve_schema(node, opset);
  if (!resolved.is_ok()) {
    if (st.skip_unknown_ops) return Status::ok();
    return resolved.status();
  }
  const OpSchema* schema = resolved.value();
  for (auto& [k, a] : node.attrs) {
    if (a.g) RETURN_IF_ERROR(infer_graph(st, a.g.get()));
    for (const auto& sg : a.graphs) RETURN_IF_ERROR(infer_graph(st, sg.get()));
  }
  static const TensorType kUnknown{};
  std::vector<const TensorType*> types;
  std::vector<const Tensor*> values;
  bool all_const = true;
  for (const std::string& in : node.inputs) {
    if (in.empty()) {
      types.push_back(nullptr);
      values.push_back(nullptr);
      continue;
    }
    const TensorType* t = g->find_type(in);
    types.push_back(t ? t : &kUnknown);
    const Tensor* v = g->find_initializer(in);
    // A graph input with the same name overrides its initializer: not a constant then.
    for (const ValueInfo& gi : g->inputs)
      if (gi.name == in) v = nullptr;
    if (!v) {
      auto it = st.constants->find(in);
      if (it != st.constants->end()) v = &it->second;
    }
    if (!v || v->numel() > kMaxFoldElements) all_const = false;
    values.push_back(v);
  }
  for (size_t i = 0; i < types.size(); ++i) {
    if (types[i] && types[i]->shape) {
      for (const Dim& d : types[i]->shape->dims)
        if (d.is_known() && d.value < 0) return invalid_model(node.describe() + ": input " + std::to_string(i) + " has a negative dimension");
    }
  }
  InferContext ctx(node, opset, types, values);
  if (schema->infer) {
    RETURN_IF_ERROR(schema->infer(ctx));
  }
  std::vector<TensorType> outs = ctx.outputs();
  if (node.domain.empty() && node.op_type == "Shape") record_shape_dims(st, node, opset, types.empty() ? nullptr : types[0]);
  if (node.domain.empty() && node.op_type == "Gather" && !values.empty() && !values[0] && !node.outputs[0].empty()) {
    if (std::optional<Tensor> folded = fold_shape_gather(st, node, values)) {
      outs[0] = folded->type();
      (*st.constants)[node.outputs[0]] = *folded;
    }
  }
  if (node.domain.empty() && node.op_type == "Reshape" && node.inputs.size() == 2 && !values[1] && !outs.empty())
    refine_reshape(st, node, opset, types, &outs[0]);
  // ConstantOfShape(Shape(x)) of a partly symbolic x: x's dims (the mask exports build Where on it).
  if (node.domain.empty() && node.op_type == "ConstantOfShape" && !node.inputs.empty() && !values.empty() && !values[0] &&
      !outs.empty() && outs[0].shape) {
    auto it = st.shape_dims.find(node.inputs[0]);
    if (it != st.shape_dims.end() && static_cast<int64_t>(it->second.size()) == outs[0].shape->rank()) {
      bool valid = true;
      for (const Dim& d : it->second) valid = valid && !(!d.symbol.empty() && d.symbol[0] == '#');
      for (size_t i = 0; valid && i < it->second.size(); ++i) {
        Dim& o = outs[0].shape->dims[i];
        if (!o.is_known() && o.symbol.empty()) o = it->second[i];
      }
    }
  }
  // Values the shape rule computed without running the kernel (Shape of a static shape) are constants too.
  const std::vector<Tensor>& known = ctx.output_values();
  for (size_t i = 0; i < known.size() && i < node.outputs.size(); ++i) {
    if (!known[i].defined() || node.outputs[i].empty() || known[i].numel() > kMaxFoldElements) continue;
    outs[i] = known[i].type();
    (*st.constants)[node.outputs[i]] = known[i];
  }
  // Evaluate small all-constant nodes so value-dependent shapes downstream resolve.
  if (all_const && !has_subgraph(node) && schema->kernel && !is_random_op(node)) {
    std::vector<Value> in_values;
    in_values.reserve(values.size());
    for (const Tensor* v : values) in_values.push_back(v ? Value(*v) : Value());
    std::vector<const Value*> in_ptrs;
    for (size_t i = 0; i < values.size(); ++i) in_ptrs.push_back(values[i] ? &in_values[i] : nullptr);
    std::vector<Value> results(node.outputs.size());
    KernelContext kctx(node, opset, in_ptrs, &results);
    Status s = schema->kernel(kctx);
    if (s.is_ok()) {
      for (size_t i = 0; i < results.size(); ++i) {
        if (!results[i].is_tensor() || !results[i].tensor.defined() || node.outputs[i].empty()) continue;
        const Tensor& r = results[i].tensor;
        outs[i] = r.type();
        if (r.numel() <= kMaxFoldElements) (*st.constants)[node.outputs[i]] = r;
      }
    }
  }
  record_value_dims(st, node, values, &outs);
  if (node.domain.empty() && node.op_type == "Expand" && node.inputs.size() == 2 && !values[1] && !outs.empty())
    refine_expand(st, node, types, &outs[0]);
  for (size_t i = 0; i < node.outputs.size(); ++i) {
    const std::string& name = node.outputs[i];
    if (name.empty()) continue;
    TensorType t = outs[i];
    if (t.shape) {
      for (const Dim& d : t.shape->dims)
        if (d.is_known() && d.value > kMaxTensorElements)
          return invalid_model(node.describe() + ": output '" + name + "' would have dimension " +
                               std::to_string(d.value));
      if (t.shape->is_static()) {
        auto n = checked_element_count(t.shape->values(), node.describe() + " output '" + name + "'");
        if (!n.is_ok()) return n.status();
      }
    }
    auto decl = g->value_types.find(name);
    if (decl != g->value_types.end()) RETURN_IF_ERROR(check_declared(node, name, decl->second, &t));
    g->value_types[name] = t;
  }
  return Status::ok();
}

Status infer_graph(InferState& st, Graph* g) {
  for (const Node& node : g->nodes) RETURN_IF_ERROR(infer_node(st, g, node));
  for (ValueInfo& out : g->outputs) {
    const TensorType* t = g->find_type(out.name);
    if (!t) continue;
    TensorType merged = *t;
    if (out.type.dtype != DType::kUndefined && merged.dtype != DType::kUndefined && out.type.dtype != merged.dtype)
      return invalid_model("graph output '" + out.name + "' is declared " + dtype_name(out.type.dtype) +
                           " but is computed as " + dtype_name(merged.dtype));
    if (merged.dtype == DType::kUndefined) merged.dtype = out.type.dtype;
    if (!merged.shape || (!merged.shape->is_static() && out.type.shape && out.type.shape->rank() == merged.shape->rank())) {
      if (out.type.shape && merged.shape) {
        for (int64_t i = 0; i < merged.shape->rank(); ++i)
          if (!merged.shape->dims[i].is_known() && merged.shape->dims[i].symbol.empty()) merged.shape->dims[i] = out.type.shape->dims[i];
      } else if (!merged.shape) {
        merged.shape = out.type.shape;
      }
    }
    out.type = merged;
  }
  return Status::ok();
}

}  // namespace

Status infer_shapes(Model* model, std::unordered_map<std::string, Tensor>* constants, bool skip_unknown_ops) {
  InferState st{model, constants, skip_unknown_ops};
  return infer_graph(st, &model->graph);
}

Status infer_shapes(Model* model, bool skip_unknown_ops) {
  std::unordered_map<std::string, Tensor> constants;
  return infer_shapes(model, &constants, skip_unknown_ops);
}

}  // namespace ferry

// The gradient registry and GradContext (see registry.h).
#include "grad/registry.h"

#include "ops/op_util.h"

#include <algorithm>

namespace ferry {

#define X(family) void register_##family##_grads(GradRegistry& r);
#include "grad/grad_families.inc"
#undef X

namespace {
const std::string kEmpty;
}

std::string GradGraph::fresh(const std::string& hint) { return "grad/" + hint + "_" + std::to_string(next_id++); }

GradContext::GradContext(const Node& node, int64_t opset, GradGraph* g, std::vector<std::string> output_grads,
                         std::vector<bool> wanted)
    : AttrReader(node), opset_(opset), g_(g), output_grads_(std::move(output_grads)), wanted_(std::move(wanted)),
      input_grads_(node.inputs.size()) {}

const std::string& GradContext::input(int64_t i) const {
  return i >= 0 && i < num_inputs() ? node().inputs[static_cast<size_t>(i)] : kEmpty;
}
const std::string& GradContext::output(int64_t i) const {
  return i >= 0 && i < num_outputs() ? node().outputs[static_cast<size_t>(i)] : kEmpty;
}
const std::string& GradContext::output_grad(int64_t i) const {
  return i >= 0 && i < static_cast<int64_t>(output_grads_.size()) ? output_grads_[static_cast<size_t>(i)] : kEmpty;
}

const TensorType* GradContext::type_of(const std::string& value) const {
  return value.empty() ? nullptr : g_->model->graph.find_type(value);
}

StatusOr<std::vector<int64_t>> GradContext::dims_of(const std::string& value) const {
  const TensorType* t = type_of(value);
  if (!t || !t->shape || !t->shape->is_static())
    return error("the shape of value '" + value + "' is not known at training-graph build time; give the model's inputs fixed shapes");
  return t->shape->values();
}

const Tensor* GradContext::constant_of(const std::string& value) const {
  if (value.empty()) return nullptr;
  if (g_->constants) {
    auto it = g_->constants->find(value);
    if (it != g_->constants->end()) return &it->second;
  }
  return g_->model->graph.find_initializer(value);
}

std::vector<std::string> GradContext::emit(const std::string& op_type, std::vector<std::string> inputs, int64_t num_outputs,
                                           std::map<std::string, Attribute> attrs, const std::string& domain) {
  Node n;
  n.op_type = op_type;
  n.domain = domain;
  n.name = g_->fresh(node().name + "/" + op_type);
  n.inputs = std::move(inputs);
  for (int64_t k = 0; k < num_outputs; ++k) n.outputs.push_back(n.name + ":" + std::to_string(k));
  n.attrs = std::move(attrs);
  n.origin = {node().name};
  if (!domain.empty() && !g_->model->opset_imports.count(domain)) g_->model->opset_imports[domain] = 1;
  std::vector<std::string> outs = n.outputs;
  g_->model->graph.nodes.push_back(std::move(n));
  return outs;
}

std::vector<std::string> GradContext::emit_wanted(const std::string& op_type, std::vector<std::string> inputs,
                                                  const std::vector<bool>& wanted, std::map<std::string, Attribute> attrs,
                                                  const std::string& domain) {
  std::vector<std::string> outs =
      emit(op_type, std::move(inputs), static_cast<int64_t>(wanted.size()), std::move(attrs), domain);
  Node& n = g_->model->graph.nodes.back();
  for (size_t k = 0; k < wanted.size(); ++k)
    if (!wanted[k]) n.outputs[k].clear(), outs[k].clear();
  return outs;
}

std::string GradContext::constant(Tensor t, const std::string& hint) {
  std::string name = g_->fresh(node().name + "/" + hint);
  g_->model->graph.value_types[name] = t.type();
  g_->model->graph.initializers[name] = std::move(t);
  return name;
}

std::string GradContext::scalar_like(double v, const std::string& like) {
  const TensorType* t = type_of(like);
  if (t && t->dtype == DType::kF64) return constant(Tensor::scalar<double>(v), "scalar");
  if (t && (t->dtype == DType::kF16 || t->dtype == DType::kBF16)) {
    StatusOr<Tensor> c = cast_tensor(Tensor::scalar<float>(static_cast<float>(v)), t->dtype);
    if (c.is_ok()) return constant(std::move(c).value(), "scalar");
  }
  return constant(Tensor::scalar<float>(static_cast<float>(v)), "scalar");
}

std::string GradContext::ints_constant(const std::vector<int64_t>& v) {
  return constant(Tensor::from_vector<int64_t>(v, {static_cast<int64_t>(v.size())}), "ints");
}

std::string GradContext::reduce_sum(const std::string& value, const std::vector<int64_t>& axes, bool keepdims) {
  std::map<std::string, Attribute> attrs{{"keepdims", attr_int(keepdims ? 1 : 0)}};
  if (g_->model->opset() < 13) {
    attrs["axes"] = attr_ints(axes);
    return emit1("ReduceSum", {value}, std::move(attrs));
  }
  return emit1("ReduceSum", {value, ints_constant(axes)}, std::move(attrs));
}

std::string GradContext::reshape(const std::string& value, const std::vector<int64_t>& dims) {
  return emit1("Reshape", {value, ints_constant(dims)});
}

StatusOr<std::string> GradContext::sum_to(const std::string& grad, const std::vector<int64_t>& grad_dims,
                                          const std::string& like) {
  ASSIGN_OR_RETURN(std::vector<int64_t> target, dims_of(like));
  if (target == grad_dims) return grad;
  if (target.size() > grad_dims.size())
    return error("gradient of rank " + std::to_string(grad_dims.size()) + " cannot be summed to '" + like + "' of rank " +
                 std::to_string(target.size()));
  const size_t lead = grad_dims.size() - target.size();
  std::vector<int64_t> axes;
  for (size_t i = 0; i < grad_dims.size(); ++i) {
    if (i < lead) axes.push_back(static_cast<int64_t>(i));
    else if (target[i - lead] == 1 && grad_dims[i] != 1) axes.push_back(static_cast<int64_t>(i));
    else if (target[i - lead] != grad_dims[i])
      return error("gradient dims do not broadcast to '" + like + "'");
  }
  std::string r = axes.empty() ? grad : reduce_sum(grad, axes, true);
  return reshape(r, target);
}

void GradContext::set_input_grad(int64_t i, const std::string& grad) {
  if (wants_input_grad(i)) input_grads_[static_cast<size_t>(i)] = grad;
}

Status GradContext::error(const std::string& msg) const {
  return invalid_model(node().describe() + ": gradient: " + msg);
}

void GradRegistry::add(GradDef def) {
  std::string key = std::string(def.domain) + "::" + def.op;
  defs_[key].push_back(std::move(def));
}

void GradRegistry::finalize() {
  for (auto& [key, list] : defs_) {
    std::sort(list.begin(), list.end(), [](const GradDef& a, const GradDef& b) { return a.since_version < b.since_version; });
    for (size_t i = 0; i < list.size(); ++i)
      list[i].until_version = (i + 1 < list.size()) ? list[i + 1].since_version - 1 : kMaxOpset;
  }
}

const GradDef* GradRegistry::find(const std::string& domain, const std::string& op, int64_t opset) const {
  auto it = defs_.find((domain == "ai.onnx" ? "" : domain) + "::" + op);
  if (it == defs_.end()) return nullptr;
  const GradDef* best = nullptr;
  for (const GradDef& d : it->second)
    if (d.since_version <= opset) best = &d;
  return best;
}

std::vector<const GradDef*> GradRegistry::all() const {
  std::vector<const GradDef*> out;
  for (const auto& [key, list] : defs_)
    for (const GradDef& d : list) out.push_back(&d);
  return out;
}

const GradRegistry& grad_registry() {
  static const GradRegistry* registry = [] {
    auto* r = new GradRegistry();
#define X(family) register_##family##_grads(*r);
#include "grad/grad_families.inc"
#undef X
    r->finalize();
    return r;
  }();
  return *registry;
}

Attribute attr_int(int64_t v) {
  Attribute a;
  a.type = AttrType::kInt;
  a.i = v;
  return a;
}
Attribute attr_float(float v) {
  Attribute a;
  a.type = AttrType::kFloat;
  a.f = v;
  return a;
}
Attribute attr_ints(std::vector<int64_t> v) {
  Attribute a;
  a.type = AttrType::kInts;
  a.ints = std::move(v);
  return a;
}
Attribute attr_string(const std::string& v) {
  Attribute a;
  a.type = AttrType::kString;
  a.s = v;
  return a;
}

}  // namespace ferry

#include "ops/registry.h"

#include <algorithm>

namespace ferry {

#define X(family) void register_##family##_ops(OpRegistry& registry);
#include "ops/op_families.inc"
#undef X

int64_t AttrReader::get_int(const char* name, int64_t dflt) const {
  const Attribute* a = node_.attr(name);
  return (a && a->type == AttrType::kInt) ? a->i : dflt;
}
float AttrReader::get_float(const char* name, float dflt) const {
  const Attribute* a = node_.attr(name);
  if (!a) return dflt;
  if (a->type == AttrType::kFloat) return a->f;
  if (a->type == AttrType::kInt) return static_cast<float>(a->i);
  return dflt;
}
std::string AttrReader::get_string(const char* name, const std::string& dflt) const {
  const Attribute* a = node_.attr(name);
  return (a && a->type == AttrType::kString) ? a->s : dflt;
}
std::vector<int64_t> AttrReader::get_ints(const char* name, const std::vector<int64_t>& dflt) const {
  const Attribute* a = node_.attr(name);
  return (a && a->type == AttrType::kInts) ? a->ints : dflt;
}
std::vector<float> AttrReader::get_floats(const char* name, const std::vector<float>& dflt) const {
  const Attribute* a = node_.attr(name);
  return (a && a->type == AttrType::kFloats) ? a->floats : dflt;
}
std::vector<std::string> AttrReader::get_strings(const char* name) const {
  const Attribute* a = node_.attr(name);
  return (a && a->type == AttrType::kStrings) ? a->strings : std::vector<std::string>{};
}
const Tensor* AttrReader::get_tensor(const char* name) const {
  const Attribute* a = node_.attr(name);
  return (a && a->type == AttrType::kTensor) ? &a->t : nullptr;
}
const Graph* AttrReader::get_graph(const char* name) const {
  const Attribute* a = node_.attr(name);
  return (a && a->type == AttrType::kGraph) ? a->g.get() : nullptr;
}

Status InferContext::error(const std::string& msg) const {
  return invalid_model(node().describe() + ": " + msg);
}

Status KernelContext::error(const std::string& msg) const {
  return invalid_argument(node().describe() + ": " + msg);
}

StatusOr<Tensor*> KernelContext::allocate_output_over(int64_t i, int64_t input, DType dtype, std::vector<int64_t> dims) {
  if (!allocator || dtype == DType::kString || !has_input(input)) return allocate_output(i, dtype, std::move(dims), false);
  bool valid = dtype != DType::kUndefined && static_cast<int64_t>(dims.size()) <= kMaxRank;
  int64_t n = 1;
  for (int64_t d : dims) {
    valid = valid && d >= 0 && (d == 0 || n <= kMaxTensorElements / d);
    if (valid) n *= d;
  }
  if (!valid) return allocate_output(i, dtype, std::move(dims), false);  // it names the problem
  Value& out = (*outputs_)[i];
  out = Value();
  std::vector<int64_t> d = dims;
  if (!allocator->allocate_over(i, input, dtype, &d, &out.tensor)) return allocate_on_heap(i, dtype, std::move(dims));
  return &out.tensor;
}

StatusOr<Tensor*> KernelContext::allocate_output(int64_t i, DType dtype, std::vector<int64_t> dims, bool zero_fill) {
  bool valid = dtype != DType::kUndefined && static_cast<int64_t>(dims.size()) <= kMaxRank;
  int64_t n = 1;
  for (int64_t d : dims) {
    valid = valid && d >= 0 && (d == 0 || n <= kMaxTensorElements / d);
    if (valid) n *= d;
  }
  if (!valid) {
    // The slow, checked path only when something looks wrong: it builds the error message.
    const std::string what = node().describe() + " output " + std::to_string(i);
    ASSIGN_OR_RETURN(Tensor t, Tensor::create(dtype, std::move(dims), what));
    (*outputs_)[i] = Value(std::move(t));
    return &(*outputs_)[i].tensor;
  }
  Value& out = (*outputs_)[i];
  out = Value();
  if (!allocator || dtype == DType::kString || !allocator->allocate(i, dtype, &dims, zero_fill, &out.tensor))
    return allocate_on_heap(i, dtype, std::move(dims));
  return &out.tensor;
}

StatusOr<Tensor*> KernelContext::allocate_on_heap(int64_t i, DType dtype, std::vector<int64_t> dims) {
  StatusOr<Tensor> t = Tensor::try_allocate(dtype, std::move(dims));
  if (!t.is_ok()) return t.status().with_context(node().describe() + " output " + std::to_string(i));
  (*outputs_)[i] = Value(std::move(t).value());
  return &(*outputs_)[i].tensor;
}

void OpRegistry::add(OpSchema schema) {
  std::string key = std::string(schema.domain) + "::" + schema.name;
  ops_[key].push_back(std::move(schema));
}

void OpRegistry::finalize() {
  for (auto& [key, list] : ops_) {
    std::sort(list.begin(), list.end(),
              [](const OpSchema& a, const OpSchema& b) { return a.since_version < b.since_version; });
    for (size_t i = 0; i < list.size(); ++i)
      list[i].until_version = (i + 1 < list.size()) ? list[i + 1].since_version - 1 : kMaxOpset;
  }
}

const std::vector<OpSchema>* OpRegistry::versions(const std::string& domain, const std::string& op) const {
  auto it = ops_.find((domain == "ai.onnx" ? "" : domain) + "::" + op);
  return it == ops_.end() ? nullptr : &it->second;
}

const OpSchema* OpRegistry::find(const std::string& domain, const std::string& op, int64_t opset) const {
  const std::vector<OpSchema>* list = versions(domain, op);
  if (!list) return nullptr;
  const OpSchema* best = nullptr;
  for (const OpSchema& s : *list)
    if (s.since_version <= opset) best = &s;
  return best;
}

std::vector<std::string> OpRegistry::op_names() const {
  std::vector<std::string> names;
  for (const auto& [key, list] : ops_) names.push_back(list.front().name);
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<const std::vector<OpSchema>*> OpRegistry::all() const {
  std::vector<const std::vector<OpSchema>*> out;
  for (const auto& [key, list] : ops_) out.push_back(&list);
  return out;
}

const OpRegistry& op_registry() {
  static const OpRegistry* registry = [] {
    auto* r = new OpRegistry();
#define X(family) register_##family##_ops(*r);
#include "ops/op_families.inc"
#undef X
    r->finalize();
    return r;
  }();
  return *registry;
}

StatusOr<const OpSchema*> resolve_schema(const Node& node, int64_t opset) {
  const OpRegistry& reg = op_registry();
  const OpSchema* s = reg.find(node.domain, node.op_type, opset);
  if (s) return s;
  const std::string dom = node.domain.empty() ? "ai.onnx" : node.domain;
  const std::vector<OpSchema>* list = reg.versions(node.domain, node.op_type);
  if (!list)
    return unsupported(node.describe() + ": operator " + dom + "::" + node.op_type + " (opset " +
                       std::to_string(opset) + ") is not implemented by ferry (the list: `ferry ops`); "
                       "re-export the model without it, or decompose it into supported ops");
  return unsupported(node.describe() + ": " + node.op_type + " is implemented from opset " +
                     std::to_string(list->front().since_version) + ", but the model imports " + dom + " opset " +
                     std::to_string(opset) + "; re-export with a newer opset_version");
}

}  // namespace ferry

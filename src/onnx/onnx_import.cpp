#include "onnx/onnx_import.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include <climits>
#include <cstring>
#include <fstream>
#include <functional>
#include <set>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "ir/graph_check.h"
#include "io/file_util.h"
#include "onnx/onnx_pb.h"
// After onnx_pb.h, which defines ONNX_API.
#include "onnx/onnx-data.pb.h"
#include "ops/registry.h"
#include "ops/shape_inference.h"

namespace ferry {
namespace {

constexpr int kMaxSubgraphDepth = 32;
constexpr int64_t kMaxNodes = 10'000'000;

// Everything one import needs to carry around: where external data may come from, limits,
// mapped external files (shared by the tensors that view them).
struct ImportState {
  std::string base_dir;
  ImportOptions options;
  std::unordered_map<std::string, MappedFile> external_files;
  int64_t weight_bytes = 0;
  int64_t node_count = 0;
  std::map<std::string, int64_t> opsets;
};

Status read_external(ImportState& st, const onnx::TensorProto& tp, const std::string& what, DType dtype,
                     const std::vector<int64_t>& dims, int64_t nbytes, Tensor* out) {
  if (st.base_dir.empty())
    return invalid_model(what + ": uses external data, but the model was not loaded from a file");
  std::string location;
  int64_t offset = 0, length = -1;
  for (const auto& kv : tp.external_data()) {
    const std::string& k = kv.key();
    const std::string& v = kv.value();
    if (k == "location") {
      location = v;
    } else if (k == "offset" || k == "length") {
      char* end = nullptr;
      errno = 0;
      long long x = std::strtoll(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || errno != 0 || x < 0)
        return invalid_model(what + ": external data " + k + " '" + v + "' is not a non-negative integer");
      (k == "offset" ? offset : length) = x;
    }
  }
  ASSIGN_OR_RETURN(std::string path, resolve_inside(st.base_dir, location, what));
  auto it = st.external_files.find(path);
  if (it == st.external_files.end()) {
    ASSIGN_OR_RETURN(MappedFile f, map_file(path, std::numeric_limits<int64_t>::max(), what + " external data"));
    it = st.external_files.emplace(path, f).first;
  }
  const MappedFile& f = it->second;
  if (length < 0) length = static_cast<int64_t>(f.size) - offset;
  if (offset > static_cast<int64_t>(f.size) || length > static_cast<int64_t>(f.size) - offset)
    return invalid_model(what + ": external data range [offset " + std::to_string(offset) + ", length " +
                         std::to_string(length) + "] runs past the end of '" + location + "' (" +
                         std::to_string(f.size) + " bytes)");
  if (length != nbytes)
    return invalid_model(what + ": external data holds " + std::to_string(length) + " bytes but shape " +
                         dims_to_string(dims) + " of " + dtype_name(dtype) + " needs " + std::to_string(nbytes));
  const uint8_t* p = f.data + offset;
  if (reinterpret_cast<uintptr_t>(p) % static_cast<uintptr_t>(std::max<int64_t>(dtype_size(dtype), 1)) == 0) {
    *out = Tensor::wrap(dtype, dims, f.owner, p);  // zero copy
  } else {
    ASSIGN_OR_RETURN(*out, Tensor::create(dtype, dims, what));
    if (nbytes) std::memcpy(out->mutable_raw(), p, static_cast<size_t>(nbytes));
  }
  return Status::ok();
}

template <typename Field, typename T>
Status copy_field(const Field& field, int64_t n, const std::string& what, const char* field_name, T* dst) {
  if (static_cast<int64_t>(field.size()) != n)
    return invalid_model(what + ": " + field_name + " holds " + std::to_string(field.size()) +
                         " values but the shape needs " + std::to_string(n));
  for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<T>(field.Get(static_cast<int>(i)));
  return Status::ok();
}

// The values a TensorProto holds in the field its element type uses (raw_data counts in bytes
// and is checked by the caller), and that field's name.
std::pair<int64_t, const char*> stored_values(const onnx::TensorProto& tp, DType dtype) {
  switch (dtype) {
    case DType::kF32: return {tp.float_data_size(), "float_data"};
    case DType::kF64: return {tp.double_data_size(), "double_data"};
    case DType::kI64: return {tp.int64_data_size(), "int64_data"};
    case DType::kU64: case DType::kU32: return {tp.uint64_data_size(), "uint64_data"};
    case DType::kString: return {tp.string_data_size(), "string_data"};
    default: return {tp.int32_data_size(), "int32_data"};
  }
}

StatusOr<Tensor> tensor_from_proto(ImportState* st, const onnx::TensorProto& tp, const std::string& what_in) {
  const std::string what = what_in.empty() ? "tensor '" + tp.name() + "'" : what_in;
  DType dtype;
  if (!dtype_from_onnx(tp.data_type(), &dtype))
    return unsupported(what + ": element type " + std::to_string(tp.data_type()) +
                       " (ONNX TensorProto.DataType) is not supported; ferry supports f32, f16, bf16, f64, "
                       "(u)int8/16/32/64, bool, string");
  if (tp.has_segment()) return unsupported(what + ": segmented tensors are not supported");
  std::vector<int64_t> dims(tp.dims().begin(), tp.dims().end());
  ASSIGN_OR_RETURN(int64_t n, checked_element_count(dims, what));
  const int64_t nbytes = n * dtype_size(dtype);
  if (st) {
    st->weight_bytes += nbytes;
    if (st->weight_bytes > st->options.max_weight_bytes)
      return resource_exhausted(what + ": initializers exceed the weight limit of " +
                                std::to_string(st->options.max_weight_bytes) + " bytes");
  }
  if (tp.data_location() == onnx::TensorProto::EXTERNAL) {
    if (dtype == DType::kString) return invalid_model(what + ": string tensors cannot use external data");
    if (!st) return invalid_model(what + ": external data is not allowed here");
    Tensor t;
    RETURN_IF_ERROR(read_external(*st, tp, what, dtype, dims, nbytes, &t));
    return t;
  }
  // Check the data against the shape before allocating: a few bytes must not declare gigabytes.
  if (tp.has_raw_data() && dtype != DType::kString) {
    if (static_cast<int64_t>(tp.raw_data().size()) != nbytes)
      return invalid_model(what + ": raw_data holds " + std::to_string(tp.raw_data().size()) + " bytes but shape " +
                           dims_to_string(dims) + " of " + dtype_name(dtype) + " needs " + std::to_string(nbytes));
  } else if (auto [count, field] = stored_values(tp, dtype); count != n) {
    return invalid_model(what + ": " + field + " holds " + std::to_string(count) + " values but shape " +
                         dims_to_string(dims) + " needs " + std::to_string(n));
  }
  ASSIGN_OR_RETURN(Tensor t, Tensor::create(dtype, dims, what));
  if (dtype == DType::kString) {
    if (tp.string_data_size() != n)
      return invalid_model(what + ": string_data holds " + std::to_string(tp.string_data_size()) +
                           " strings but the shape needs " + std::to_string(n));
    for (int64_t i = 0; i < n; ++i) t.mutable_strings()[i] = tp.string_data(static_cast<int>(i));
    return t;
  }
  if (tp.has_raw_data()) {
    if (static_cast<int64_t>(tp.raw_data().size()) != nbytes)
      return invalid_model(what + ": raw_data holds " + std::to_string(tp.raw_data().size()) + " bytes but shape " +
                           dims_to_string(dims) + " of " + dtype_name(dtype) + " needs " + std::to_string(nbytes));
    if (nbytes) std::memcpy(t.mutable_raw(), tp.raw_data().data(), static_cast<size_t>(nbytes));
    if (dtype == DType::kBool)  // normalise to 0/1 so bool reads are defined
      for (int64_t i = 0; i < n; ++i) t.mutable_data<uint8_t>()[i] = t.data<uint8_t>()[i] != 0;
    return t;
  }
  switch (dtype) {
    case DType::kF32: RETURN_IF_ERROR(copy_field(tp.float_data(), n, what, "float_data", t.mutable_data<float>())); break;
    case DType::kF64: RETURN_IF_ERROR(copy_field(tp.double_data(), n, what, "double_data", t.mutable_data<double>())); break;
    case DType::kI64: RETURN_IF_ERROR(copy_field(tp.int64_data(), n, what, "int64_data", t.mutable_data<int64_t>())); break;
    case DType::kU64: RETURN_IF_ERROR(copy_field(tp.uint64_data(), n, what, "uint64_data", t.mutable_data<uint64_t>())); break;
    case DType::kU32: RETURN_IF_ERROR(copy_field(tp.uint64_data(), n, what, "uint64_data", t.mutable_data<uint32_t>())); break;
    case DType::kI32: RETURN_IF_ERROR(copy_field(tp.int32_data(), n, what, "int32_data", t.mutable_data<int32_t>())); break;
    case DType::kI16: RETURN_IF_ERROR(copy_field(tp.int32_data(), n, what, "int32_data", t.mutable_data<int16_t>())); break;
    case DType::kU16: case DType::kF16: case DType::kBF16:
      RETURN_IF_ERROR(copy_field(tp.int32_data(), n, what, "int32_data", t.mutable_data<uint16_t>())); break;
    case DType::kI8: RETURN_IF_ERROR(copy_field(tp.int32_data(), n, what, "int32_data", t.mutable_data<int8_t>())); break;
    case DType::kU8: RETURN_IF_ERROR(copy_field(tp.int32_data(), n, what, "int32_data", t.mutable_data<uint8_t>())); break;
    case DType::kBool: {
      if (tp.int32_data_size() != n)
        return invalid_model(what + ": int32_data holds " + std::to_string(tp.int32_data_size()) +
                             " values but the shape needs " + std::to_string(n));
      for (int64_t i = 0; i < n; ++i) t.mutable_data<bool>()[i] = tp.int32_data(static_cast<int>(i)) != 0;
      break;
    }
    default: return unsupported(what + ": element type not supported");
  }
  return t;
}

Status convert_tensor_type(const onnx::TypeProto_Tensor& tt, const std::string& what, TensorType* out) {
  DType dtype = DType::kUndefined;
  if (tt.elem_type() != 0 && !dtype_from_onnx(tt.elem_type(), &dtype))
    return unsupported(what + ": element type " + std::to_string(tt.elem_type()) + " is not supported");
  out->dtype = dtype;
  if (tt.has_shape()) {
    if (tt.shape().dim_size() > kMaxRank)
      return invalid_model(what + ": rank " + std::to_string(tt.shape().dim_size()) + " exceeds the limit of " +
                           std::to_string(kMaxRank));
    Shape s;
    for (const auto& d : tt.shape().dim()) {
      if (d.has_dim_value()) {
        if (d.dim_value() < 0)
          return invalid_model(what + ": negative dimension " + std::to_string(d.dim_value()));
        s.dims.emplace_back(d.dim_value());
      } else if (d.has_dim_param()) {
        s.dims.push_back(Dim::symbolic(d.dim_param()));
      } else {
        s.dims.emplace_back();
      }
    }
    out->shape = s;
  } else {
    out->shape.reset();
  }
  return Status::ok();
}

// Converts tensors, sequences of tensors and optionals of either; `supported` is false for
// other types (maps, sparse tensors, nested sequences).
Status convert_type(const onnx::TypeProto& tp, const std::string& what, TensorType* out, bool* supported) {
  *supported = false;
  if (tp.has_tensor_type()) {
    *supported = true;
    out->kind = ValueKind::kTensor;
    return convert_tensor_type(tp.tensor_type(), what, out);
  }
  if (tp.has_sequence_type() && tp.sequence_type().elem_type().has_tensor_type()) {
    *supported = true;
    out->kind = ValueKind::kSequence;
    return convert_tensor_type(tp.sequence_type().elem_type().tensor_type(), what, out);
  }
  if (tp.has_optional_type()) {
    const onnx::TypeProto& e = tp.optional_type().elem_type();
    if (e.has_tensor_type()) {
      *supported = true;
      out->kind = ValueKind::kOptionalTensor;
      return convert_tensor_type(e.tensor_type(), what, out);
    }
    if (e.has_sequence_type() && e.sequence_type().elem_type().has_tensor_type()) {
      *supported = true;
      out->kind = ValueKind::kOptionalSequence;
      return convert_tensor_type(e.sequence_type().elem_type().tensor_type(), what, out);
    }
  }
  return Status::ok();
}

Status convert_graph(ImportState& st, const onnx::GraphProto& gp, Graph* g, int depth);

Status convert_attribute(ImportState& st, const onnx::AttributeProto& ap, const Node& node, Graph* owner,
                         int depth, Attribute* a) {
  const std::string what = node.describe() + " attribute '" + ap.name() + "'";
  if (!ap.ref_attr_name().empty()) return unsupported(what + ": attribute references (functions) are not supported");
  switch (ap.type()) {
    case onnx::AttributeProto::FLOAT: a->type = AttrType::kFloat; a->f = ap.f(); break;
    case onnx::AttributeProto::INT: a->type = AttrType::kInt; a->i = ap.i(); break;
    case onnx::AttributeProto::STRING: a->type = AttrType::kString; a->s = ap.s(); break;
    case onnx::AttributeProto::FLOATS: a->type = AttrType::kFloats; a->floats.assign(ap.floats().begin(), ap.floats().end()); break;
    case onnx::AttributeProto::INTS: a->type = AttrType::kInts; a->ints.assign(ap.ints().begin(), ap.ints().end()); break;
    case onnx::AttributeProto::STRINGS: a->type = AttrType::kStrings; a->strings.assign(ap.strings().begin(), ap.strings().end()); break;
    case onnx::AttributeProto::TENSOR: {
      a->type = AttrType::kTensor;
      ASSIGN_OR_RETURN(a->t, tensor_from_proto(&st, ap.t(), what));
      break;
    }
    case onnx::AttributeProto::TENSORS: {
      a->type = AttrType::kTensors;
      for (const auto& t : ap.tensors()) {
        ASSIGN_OR_RETURN(Tensor x, tensor_from_proto(&st, t, what));
        a->tensors.push_back(std::move(x));
      }
      break;
    }
    case onnx::AttributeProto::GRAPH: {
      a->type = AttrType::kGraph;
      a->g = std::make_shared<Graph>();
      a->g->parent = owner;
      RETURN_IF_ERROR(convert_graph(st, ap.g(), a->g.get(), depth + 1).with_context(what));
      break;
    }
    case onnx::AttributeProto::GRAPHS: {
      a->type = AttrType::kGraphs;
      for (const auto& gp : ap.graphs()) {
        auto sub = std::make_shared<Graph>();
        sub->parent = owner;
        RETURN_IF_ERROR(convert_graph(st, gp, sub.get(), depth + 1).with_context(what));
        a->graphs.push_back(sub);
      }
      break;
    }
    case onnx::AttributeProto::TYPE_PROTO: {
      a->type = AttrType::kTypeProto;
      bool supported = false;
      RETURN_IF_ERROR(convert_type(ap.tp(), what, &a->tp, &supported));
      if (!supported) return unsupported(what + ": only tensor, sequence and optional types are supported");
      break;
    }
    default:
      // Old exporters leave type unset; infer from the populated field.
      if (ap.type() == onnx::AttributeProto::UNDEFINED) {
        if (ap.has_f()) { a->type = AttrType::kFloat; a->f = ap.f(); break; }
        if (ap.has_i()) { a->type = AttrType::kInt; a->i = ap.i(); break; }
        if (ap.has_s()) { a->type = AttrType::kString; a->s = ap.s(); break; }
        if (ap.ints_size()) { a->type = AttrType::kInts; a->ints.assign(ap.ints().begin(), ap.ints().end()); break; }
        if (ap.floats_size()) { a->type = AttrType::kFloats; a->floats.assign(ap.floats().begin(), ap.floats().end()); break; }
      }
      return unsupported(what + ": attribute type " + std::to_string(ap.type()) + " is not supported");
  }
  return Status::ok();
}

// Checks the node against its schema: known op at this opset, input/output counts, attributes.
Status check_node(const ImportState& st, const Node& node) {
  auto op_it = st.opsets.find(node.domain);
  if (op_it == st.opsets.end())
    return invalid_model(node.describe() + ": domain '" + node.domain + "' is not in the model's opset_import");
  ASSIGN_OR_RETURN(const OpSchema* schema, resolve_schema(node, op_it->second));
  const int64_t nin = static_cast<int64_t>(node.inputs.size());
  const int64_t nout = static_cast<int64_t>(node.outputs.size());
  if (nin < schema->min_inputs || nin > schema->max_inputs)
    return invalid_model(node.describe() + ": has " + std::to_string(nin) + " inputs; " + schema->name + " takes " +
                         std::to_string(schema->min_inputs) +
                         (schema->max_inputs == schema->min_inputs ? "" : " to " + std::to_string(schema->max_inputs)));
  if (nout < schema->min_outputs || nout > schema->max_outputs)
    return invalid_model(node.describe() + ": has " + std::to_string(nout) + " outputs; " + schema->name + " gives " +
                         std::to_string(schema->min_outputs) +
                         (schema->max_outputs == schema->min_outputs ? "" : " to " + std::to_string(schema->max_outputs)));
  for (int64_t i = 0; i < schema->min_inputs; ++i)
    if (node.inputs[i].empty() && !(i < 64 && (schema->optional_input_mask >> i) & 1))
      return invalid_model(node.describe() + ": required input " + std::to_string(i) + " is empty");
  for (const AttrSpec& spec : schema->attrs) {
    const Attribute* a = node.attr(spec.name);
    if (!a) {
      if (spec.required) return invalid_model(node.describe() + ": required attribute '" + spec.name + "' is missing");
      continue;
    }
    bool ok = a->type == spec.type || (spec.type == AttrType::kFloat && a->type == AttrType::kInt);
    if (!ok)
      return invalid_model(node.describe() + ": attribute '" + spec.name + "' has type " + attr_type_name(a->type) +
                           ", expected " + attr_type_name(spec.type));
  }
  return Status::ok();
}

Status convert_graph(ImportState& st, const onnx::GraphProto& gp, Graph* g, int depth) {
  if (depth > kMaxSubgraphDepth)
    return invalid_model("subgraphs are nested more than " + std::to_string(kMaxSubgraphDepth) + " deep");
  g->name = gp.name();
  for (const auto& tp : gp.initializer()) {
    if (tp.name().empty()) return invalid_model("an initializer has no name");
    if (g->initializers.count(tp.name())) return invalid_model("initializer '" + tp.name() + "' is defined twice");
    ASSIGN_OR_RETURN(Tensor t, tensor_from_proto(&st, tp, "initializer '" + tp.name() + "'"));
    g->value_types[tp.name()] = t.type();
    g->initializers.emplace(tp.name(), std::move(t));
  }
  for (const auto& sp : gp.sparse_initializer())
    return unsupported("sparse initializer '" + sp.values().name() + "' is not supported");
  std::unordered_set<std::string> input_names;
  for (const auto& vi : gp.input()) {
    if (!input_names.insert(vi.name()).second) return invalid_model("graph input '" + vi.name() + "' is declared twice");
    if (g->initializers.count(vi.name())) continue;  // an initializer with a default value
    ValueInfo v{vi.name(), {}};
    bool is_tensor = false;
    RETURN_IF_ERROR(convert_type(vi.type(), "graph input '" + vi.name() + "'", &v.type, &is_tensor));
    if (!is_tensor && depth == 0)
      return unsupported("graph input '" + vi.name() + "' has a type ferry does not support (maps, sparse tensors and "
                         "nested sequences are not supported; tensors, sequences of tensors and optionals are)");
    if (vi.name().empty()) return invalid_model("a graph input has no name");
    g->value_types[v.name] = v.type;
    g->inputs.push_back(std::move(v));
  }
  std::unordered_set<std::string> output_names;
  for (const auto& vi : gp.output()) {
    if (!output_names.insert(vi.name()).second)
      return invalid_model("graph output '" + vi.name() + "' is declared twice");
    ValueInfo v{vi.name(), {}};
    bool is_tensor = false;
    RETURN_IF_ERROR(convert_type(vi.type(), "graph output '" + vi.name() + "'", &v.type, &is_tensor));
    if (!is_tensor && depth == 0)
      return unsupported("graph output '" + vi.name() + "' has a type ferry does not support (maps, sparse tensors and "
                         "nested sequences are not supported; tensors, sequences of tensors and optionals are)");
    g->outputs.push_back(std::move(v));
  }
  for (const auto& vi : gp.value_info()) {
    TensorType t;
    bool is_tensor = false;
    RETURN_IF_ERROR(convert_type(vi.type(), "value_info '" + vi.name() + "'", &t, &is_tensor));
    if (is_tensor && !g->value_types.count(vi.name())) g->value_types[vi.name()] = t;
  }
  st.node_count += gp.node_size();
  if (st.node_count > kMaxNodes)
    return resource_exhausted("the model has more than " + std::to_string(kMaxNodes) + " nodes");
  std::unordered_set<std::string> names;
  g->nodes.reserve(static_cast<size_t>(gp.node_size()));
  for (int i = 0; i < gp.node_size(); ++i) {
    const onnx::NodeProto& np = gp.node(i);
    Node node;
    node.op_type = np.op_type();
    node.domain = np.domain() == "ai.onnx" ? "" : np.domain();
    node.name = np.name();
    if (node.name.empty() || names.count(node.name)) {
      std::string base = (node.name.empty() ? node.op_type : node.name) + "_" + std::to_string(i);
      node.name = base;
      for (int k = 1; names.count(node.name); ++k) node.name = base + "_" + std::to_string(k);
    }
    names.insert(node.name);
    node.inputs.assign(np.input().begin(), np.input().end());
    node.outputs.assign(np.output().begin(), np.output().end());
    for (const auto& ap : np.attribute()) {
      if (node.attrs.count(ap.name()))
        return invalid_model(node.describe() + ": attribute '" + ap.name() + "' is given twice");
      Attribute a;
      RETURN_IF_ERROR(convert_attribute(st, ap, node, g, depth, &a));
      node.attrs.emplace(ap.name(), std::move(a));
    }
    std::set<std::string> free_vals;
    for (const auto& [k, a] : node.attrs) {
      if (a.g) collect_free_values(*a.g, &free_vals);
      for (const auto& sg : a.graphs) collect_free_values(*sg, &free_vals);
    }
    node.implicit_inputs.assign(free_vals.begin(), free_vals.end());
    g->nodes.push_back(std::move(node));
  }
  RETURN_IF_ERROR(check_graph(g, enclosing_scope_values(*g), NodeOrder::kSort));
  for (const Node& node : g->nodes) {
    if (!st.options.require_known_ops) {
      auto it = st.opsets.find(node.domain);
      if (it == st.opsets.end() || !op_registry().find(node.domain, node.op_type, it->second)) continue;
    }
    RETURN_IF_ERROR(check_node(st, node));
  }
  return Status::ok();
}

}  // namespace

StatusOr<std::shared_ptr<Model>> parse_onnx_model(const void* data, size_t size, const std::string& base_dir,
                                                  const std::string& what, const ImportOptions& options) {
  if (size > static_cast<size_t>(INT_MAX))
    return resource_exhausted(what + " is over 2 GiB; protobuf cannot hold it: save the weights as external data "
                              "(onnx.save_model(..., save_as_external_data=True))");
  onnx::ModelProto mp;
  {
    google::protobuf::io::ArrayInputStream raw(data, static_cast<int>(size));
    google::protobuf::io::CodedInputStream coded(&raw);
    coded.SetTotalBytesLimit(INT_MAX);
    coded.SetRecursionLimit(200);
    if (!mp.ParseFromCodedStream(&coded) || !coded.ConsumedEntireMessage())
      return invalid_model(what + " is not a valid ONNX model (protobuf parse failed: the file is truncated, "
                           "corrupted, or not an .onnx file)");
  }
  if (!mp.has_graph())
    return invalid_model(what + " has no graph (is it an ONNX model? its ir_version field is " +
                         std::to_string(mp.ir_version()) + ")");
  auto model = std::make_shared<Model>();
  model->ir_version = mp.ir_version();
  model->producer_name = mp.producer_name();
  model->producer_version = mp.producer_version();
  model->domain = mp.domain();
  model->model_version = mp.model_version();
  model->doc_string = mp.doc_string();
  for (const auto& kv : mp.metadata_props()) model->metadata[kv.key()] = kv.value();
  if (mp.functions_size() > 0) return unsupported(what + " defines model-local functions, which ferry does not support");

  ImportState st;
  st.base_dir = base_dir;
  st.options = options;
  for (const auto& os : mp.opset_import()) {
    std::string dom = os.domain() == "ai.onnx" ? "" : os.domain();
    st.opsets[dom] = os.version();
  }
  if (mp.opset_import_size() == 0) st.opsets[""] = 1;
  auto onnx_it = st.opsets.find("");
  if (onnx_it != st.opsets.end()) {
    int64_t v = onnx_it->second;
    if (v < kMinOpset || v > kMaxOpset)
      return unsupported(what + " imports ai.onnx opset " + std::to_string(v) + "; ferry supports opsets " +
                         std::to_string(kMinOpset) + " to " + std::to_string(kMaxOpset) +
                         ": re-export with torch.onnx.export(..., opset_version=17)");
  }
  model->opset_imports = st.opsets;
  RETURN_IF_ERROR(convert_graph(st, mp.graph(), &model->graph, 0).with_context(what));
  if (options.infer_shapes) {
    RETURN_IF_ERROR(infer_shapes(model.get(), !options.require_known_ops).with_context(what));
  }
  return model;
}

StatusOr<std::shared_ptr<Model>> load_onnx_model(const std::string& path, const ImportOptions& options) {
  ASSIGN_OR_RETURN(MappedFile f, map_file(path, options.max_file_bytes, "model file"));
  if (f.size == 0) return invalid_model("model file '" + path + "' is empty");
  ASSIGN_OR_RETURN(auto model, parse_onnx_model(f.data, f.size, dir_name(path), "model '" + path + "'", options));
  model->path = path;
  return model;
}

namespace {
StatusOr<Tensor> parse_tensor_pb_in(const void* data, size_t size, const std::string& base_dir, const std::string& what,
                                    std::string* name) {
  if (size > static_cast<size_t>(INT_MAX)) return invalid_argument(what + " is larger than 2 GiB, the limit of a TensorProto");
  onnx::TensorProto tp;
  google::protobuf::io::ArrayInputStream raw(data, static_cast<int>(size));
  google::protobuf::io::CodedInputStream coded(&raw);
  coded.SetTotalBytesLimit(INT_MAX);
  if (!tp.ParseFromCodedStream(&coded) || !coded.ConsumedEntireMessage())
    return invalid_argument(what + " is not a valid ONNX TensorProto (.pb)");
  if (name) *name = tp.name();
  ImportState st;
  st.base_dir = base_dir;
  ASSIGN_OR_RETURN(Tensor t, tensor_from_proto(&st, tp, what));
  if (!st.external_files.empty()) t = t.clone();  // do not keep the mapping alive
  return t;
}
}  // namespace

StatusOr<Tensor> read_tensor_pb(const std::string& path, std::string* name) {
  ASSIGN_OR_RETURN(MappedFile f, map_file(path, INT_MAX, "tensor file"));
  return parse_tensor_pb_in(f.data, f.size, dir_name(path), "tensor file '" + path + "'", name);
}

StatusOr<Tensor> parse_tensor_pb(const void* data, size_t size, const std::string& what, std::string* name) {
  ASSIGN_OR_RETURN(Tensor t, parse_tensor_pb_in(data, size, "", what, name));
  return t.clone();  // own the bytes: `data` may go away
}

namespace {
StatusOr<Value> value_from_sequence(ImportState* st, const onnx::SequenceProto& sp, const std::string& what) {
  if (sp.elem_type() != onnx::SequenceProto::TENSOR && sp.elem_type() != onnx::SequenceProto::UNDEFINED)
    return unsupported(what + ": only sequences of tensors are supported");
  std::vector<Tensor> items;
  for (const auto& tp : sp.tensor_values()) {
    ASSIGN_OR_RETURN(Tensor t, tensor_from_proto(st, tp, what));
    items.push_back(std::move(t));
  }
  return Value::make_sequence(std::move(items));
}
}  // namespace

StatusOr<Value> read_value_pb(const std::string& path, ValueKind kind, std::string* name) {
  if (kind == ValueKind::kTensor) {
    ASSIGN_OR_RETURN(Tensor t, read_tensor_pb(path, name));
    return Value(std::move(t));
  }
  ASSIGN_OR_RETURN(MappedFile f, map_file(path, INT_MAX, "value file"));
  google::protobuf::io::ArrayInputStream raw(f.data, static_cast<int>(f.size));
  google::protobuf::io::CodedInputStream coded(&raw);
  coded.SetTotalBytesLimit(INT_MAX);
  const std::string what = "value file '" + path + "'";
  if (kind == ValueKind::kSequence) {
    onnx::SequenceProto sp;
    if (!sp.ParseFromCodedStream(&coded) || !coded.ConsumedEntireMessage())
      return invalid_argument(what + " is not a valid ONNX SequenceProto");
    if (name) *name = sp.name();
    return value_from_sequence(nullptr, sp, what);
  }
  onnx::OptionalProto op;
  if (!op.ParseFromCodedStream(&coded) || !coded.ConsumedEntireMessage())
    return invalid_argument(what + " is not a valid ONNX OptionalProto");
  if (name) *name = op.name();
  if (op.has_tensor_value()) {
    ASSIGN_OR_RETURN(Tensor t, tensor_from_proto(nullptr, op.tensor_value(), what));
    Value v(std::move(t));
    v.kind = ValueKind::kOptionalTensor;
    return v;
  }
  if (op.has_sequence_value()) {
    ASSIGN_OR_RETURN(Value v, value_from_sequence(nullptr, op.sequence_value(), what));
    v.kind = ValueKind::kOptionalSequence;
    return v;
  }
  return Value::none(kind);
}

Status write_tensor_pb(const std::string& path, const Tensor& t, const std::string& name) {
  onnx::TensorProto tp;
  tp.set_name(name);
  tp.set_data_type(static_cast<int32_t>(t.dtype()));
  for (int64_t d : t.dims()) tp.add_dims(d);
  if (t.dtype() == DType::kString) {
    for (const std::string& s : t.strings()) tp.add_string_data(s);
  } else {
    tp.set_raw_data(std::string(static_cast<const char*>(t.raw()), static_cast<size_t>(t.nbytes())));
  }
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out || !tp.SerializeToOstream(&out)) return invalid_argument("cannot write '" + path + "'");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) return invalid_argument("cannot write '" + path + "'");
  return Status::ok();
}

}  // namespace ferry

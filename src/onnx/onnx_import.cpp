#include "onnx/onnx_import.h"

#include <unistd.h>

#include <climits>
#include <cstring>
#include <fstream>
#include <functional>
#include <set>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "common/utf8.h"
#include "ir/graph_check.h"
#include "io/file.h"
#include "onnx/onnx_pb.h"
// After onnx_pb.h, which defines ONNX_API.
#include "onnx/onnx-data.pb.h"
#include "onnx/opset_upgrade.h"
#include "onnx/proto_names.h"
#include "onnx/tensor_proto.h"
#include "ops/registry.h"
#include "ops/shape_inference.h"

namespace ferry {
namespace {

constexpr int kMaxSubgraphDepth = 32;
constexpr int64_t kMaxNodes = 10'000'000;

// Everything one import needs to carry around: where external data may come from, limits,
// mapped external files (shared by the tensors that view them).
struct ImportState {
  TensorSource tensors;  // external data from the model's folder, the weight limit
  ImportOptions options;
  int64_t node_count = 0;
  std::map<std::string, int64_t> opsets;
  /// The top graph of parse_onnx_model's own ModelProto: each initializer's bytes are freed as
  /// soon as they are copied into the graph, so the import never holds the weights twice.
  onnx::GraphProto* release_initializers_of = nullptr;
  /// When the ModelProto was parsed without its top graph's initializer bytes (strip_raw_data):
  /// where initializer i's raw_data lies in the mapped file (-1: it had none), read from there
  /// one tensor at a time and its pages dropped once copied.
  const std::vector<std::pair<int64_t, int64_t>>* raw_spans = nullptr;
  const uint8_t* raw_base = nullptr;
  size_t raw_size = 0;
  bool raw_mapped = false;  // raw_base is a private file mapping (its pages may be dropped), not a heap copy
};

// --- Reading an .onnx file without holding its weights twice ---------------------------------
// protobuf copies every bytes field it parses: the ModelProto of a mapped file would hold all the
// weights beside the file's pages. strip_raw_data copies the model's wire bytes without the raw_data
// of the top graph's initializers (ModelProto.graph = 7, GraphProto.initializer = 5,
// TensorProto.raw_data = 9), noting where each lies; the weights are then copied from the mapping
// one initializer at a time. Anything unexpected (a group, a field given twice) returns false: the
// whole file is then parsed as usual, which also names what is wrong with it.
bool read_varint(const uint8_t*& p, const uint8_t* end, uint64_t* v) {
  uint64_t r = 0;
  for (int shift = 0; shift < 64 && p < end; shift += 7) {
    const uint8_t b = *p++;
    r |= static_cast<uint64_t>(b & 0x7f) << shift;
    if (!(b & 0x80)) {
      *v = r;
      return true;
    }
  }
  return false;
}

void put_varint(uint64_t v, std::string* out) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

// One field at p: its number, wire type, and (length-delimited) its payload; p moves past it.
struct WireField {
  uint32_t number = 0;
  int type = 0;
  const uint8_t* begin = nullptr;    // the whole field, tag included
  const uint8_t* payload = nullptr;  // wire type 2
  uint64_t length = 0;
};

bool next_field(const uint8_t*& p, const uint8_t* end, WireField* f) {
  f->begin = p;
  uint64_t tag = 0;
  if (!read_varint(p, end, &tag) || (tag >> 3) == 0 || (tag >> 3) > 0x1fffffff) return false;
  f->number = static_cast<uint32_t>(tag >> 3);
  f->type = static_cast<int>(tag & 7);
  uint64_t skip = 0;
  switch (f->type) {
    case 0: return read_varint(p, end, &skip);
    case 1: skip = 8; break;
    case 5: skip = 4; break;
    case 2:
      if (!read_varint(p, end, &f->length) || f->length > static_cast<uint64_t>(end - p)) return false;
      f->payload = p;
      skip = f->length;
      break;
    default: return false;  // groups
  }
  if (skip > static_cast<uint64_t>(end - p)) return false;
  p += skip;
  return true;
}

void put_message(uint32_t number, const std::string& body, std::string* out) {
  put_varint((static_cast<uint64_t>(number) << 3) | 2, out);
  put_varint(body.size(), out);
  out->append(body);
}

bool strip_tensor(const uint8_t* p, const uint8_t* end, const uint8_t* base, std::string* out,
                  std::pair<int64_t, int64_t>* span) {
  *span = {-1, 0};
  WireField f;
  while (p < end) {
    if (!next_field(p, end, &f)) return false;
    if (f.number == 9 && f.type == 2) {
      if (span->first >= 0) return false;
      *span = {f.payload - base, static_cast<int64_t>(f.length)};
      continue;
    }
    out->append(reinterpret_cast<const char*>(f.begin), static_cast<size_t>(p - f.begin));
  }
  return true;
}

bool strip_graph(const uint8_t* p, const uint8_t* end, const uint8_t* base, std::string* out,
                 std::vector<std::pair<int64_t, int64_t>>* spans) {
  WireField f;
  std::string tensor;
  while (p < end) {
    if (!next_field(p, end, &f)) return false;
    if (f.number == 5 && f.type == 2) {
      tensor.clear();
      std::pair<int64_t, int64_t> span;
      if (!strip_tensor(f.payload, f.payload + f.length, base, &tensor, &span)) return false;
      put_message(5, tensor, out);
      spans->push_back(span);
      continue;
    }
    out->append(reinterpret_cast<const char*>(f.begin), static_cast<size_t>(p - f.begin));
  }
  return true;
}

bool strip_raw_data(const uint8_t* data, size_t size, std::string* out, std::vector<std::pair<int64_t, int64_t>>* spans) {
  const uint8_t* p = data;
  const uint8_t* end = data + size;
  WireField f;
  bool graph_seen = false;
  out->reserve(1 << 16);
  while (p < end) {
    if (!next_field(p, end, &f)) return false;
    if (f.number == 7 && f.type == 2) {
      if (graph_seen) return false;  // protobuf would merge the two
      graph_seen = true;
      std::string graph;
      if (!strip_graph(f.payload, f.payload + f.length, data, &graph, spans)) return false;
      put_message(7, graph, out);
      continue;
    }
    out->append(reinterpret_cast<const char*>(f.begin), static_cast<size_t>(p - f.begin));
  }
  return true;
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
      ASSIGN_OR_RETURN(a->t, tensor_from_proto(&st.tensors, ap.t(), what));
      break;
    }
    case onnx::AttributeProto::TENSORS: {
      a->type = AttrType::kTensors;
      for (const auto& t : ap.tensors()) {
        ASSIGN_OR_RETURN(Tensor x, tensor_from_proto(&st.tensors, t, what));
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
  onnx::GraphProto* release = st.release_initializers_of == &gp ? st.release_initializers_of : nullptr;
  for (int i = 0; i < gp.initializer_size(); ++i) {
    const onnx::TensorProto& tp = gp.initializer(i);
    if (tp.name().empty()) return invalid_model("an initializer has no name");
    if (g->initializers.count(tp.name())) return invalid_model("initializer '" + tp.name() + "' is defined twice");
    const std::pair<int64_t, int64_t>* span = nullptr;
    if (release && st.raw_spans && static_cast<size_t>(i) < st.raw_spans->size() && (*st.raw_spans)[static_cast<size_t>(i)].first >= 0)
      span = &(*st.raw_spans)[static_cast<size_t>(i)];
    const std::string_view raw = span ? std::string_view(reinterpret_cast<const char*>(st.raw_base) + span->first,
                                                         static_cast<size_t>(span->second))
                                      : std::string_view();
    ASSIGN_OR_RETURN(Tensor t, tensor_from_proto(&st.tensors, tp, "initializer '" + tp.name() + "'", span ? &raw : nullptr));
    g->value_types[tp.name()] = t.type();
    g->initializers.emplace(tp.name(), std::move(t));
    if (release) std::string().swap(*release->mutable_initializer(i)->mutable_raw_data());  // frees, unlike clear()
    if (span && st.raw_mapped) drop_pages(st.raw_base + span->first, static_cast<size_t>(span->second));
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

namespace {
void escape(std::string* s) {
  std::string e = escape_name(*s);
  if (e.size() != s->size()) *s = std::move(e);
}

void escape_graph_names(onnx::GraphProto* g, int depth) {
  if (depth > 64) return;  // convert_graph refuses deeper nesting with its own message
  escape(g->mutable_name());
  for (onnx::NodeProto& n : *g->mutable_node()) {
    escape(n.mutable_name());
    escape(n.mutable_op_type());
    escape(n.mutable_domain());
    for (std::string& v : *n.mutable_input()) escape(&v);
    for (std::string& v : *n.mutable_output()) escape(&v);
    for (onnx::AttributeProto& a : *n.mutable_attribute()) {
      escape(a.mutable_name());
      if (a.has_g()) escape_graph_names(a.mutable_g(), depth + 1);
      for (onnx::GraphProto& sub : *a.mutable_graphs()) escape_graph_names(&sub, depth + 1);
    }
  }
  for (onnx::ValueInfoProto& v : *g->mutable_input()) escape(v.mutable_name());
  for (onnx::ValueInfoProto& v : *g->mutable_output()) escape(v.mutable_name());
  for (onnx::ValueInfoProto& v : *g->mutable_value_info()) escape(v.mutable_name());
  for (onnx::TensorProto& t : *g->mutable_initializer()) escape(t.mutable_name());
  for (onnx::SparseTensorProto& t : *g->mutable_sparse_initializer()) {
    if (t.has_values()) escape(t.mutable_values()->mutable_name());
    if (t.has_indices()) escape(t.mutable_indices()->mutable_name());
  }
}
}  // namespace

void escape_model_names(onnx::ModelProto* mp) {
  if (mp->has_graph()) escape_graph_names(mp->mutable_graph(), 0);
  escape(mp->mutable_producer_name());
  escape(mp->mutable_producer_version());
  escape(mp->mutable_domain());
  for (onnx::StringStringEntryProto& kv : *mp->mutable_metadata_props()) {
    escape(kv.mutable_key());
    if (!is_valid_utf8(kv.value())) kv.set_value(escape_non_utf8(kv.value()));
  }
  if (!is_valid_utf8(mp->doc_string())) mp->set_doc_string(escape_non_utf8(mp->doc_string()));
}

namespace {

/// parse_onnx_model, calling `release_input` (when given) as soon as `data` is no longer read, so
/// load_onnx_model unmaps the file before the graph's copies of the weights are made.
/// `stripped`: data is strip_raw_data's copy of the file `stripped->raw_base` maps, whose initializer
/// bytes are read from the mapping (raw_spans).
StatusOr<std::shared_ptr<Model>> parse_model(const void* data, size_t size, const std::string& base_dir,
                                             const std::string& what, const ImportOptions& options,
                                             const std::function<void()>& release_input,
                                             const ImportState* stripped = nullptr) {
  if (size > static_cast<size_t>(INT_MAX))
    return resource_exhausted(what + " is over 2 GiB; protobuf cannot hold it: save the weights as external data "
                              "(onnx.save_model(..., save_as_external_data=True))");
  onnx::ModelProto mp;
  if (!parse_model_proto(data, size, &mp))
    return invalid_model(what + " is not a valid ONNX model (protobuf parse failed: the file is truncated, "
                         "corrupted, or not an .onnx file)");
  if (release_input) release_input();  // the ModelProto holds its own copy of everything from here on
  escape_model_names(&mp);
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

  int64_t declared_opset = 0;
  for (const auto& os : mp.opset_import())
    if (os.domain().empty() || os.domain() == "ai.onnx") declared_opset = os.version();
  if (mp.opset_import_size() == 0) declared_opset = 1;
  if (declared_opset >= 1 && declared_opset < kUpgradeTargetOpset && mp.graph().node_size() > 0) {
    if (mp.graph().node_size() > kMaxNodes)
      return resource_exhausted(what + ": the model has more than " + std::to_string(kMaxNodes) + " nodes");
    if (stripped) {  // the converter reads initializers: the whole file, parsed as usual
      mp.Clear();
      if (!parse_model_proto(stripped->raw_base, stripped->raw_size, &mp))
        return invalid_model(what + " is not a valid ONNX model (protobuf parse failed)");
      escape_model_names(&mp);
      stripped = nullptr;
    }
    onnx::ModelProto original;
    if (options.require_known_ops) original = mp;
    Status up = upgrade_opset(&mp, declared_opset, what, options.require_known_ops);
    // `ferry info` describes a model it cannot upgrade as it is (its old ops show as not implemented).
    if (up.is_ok()) {
      model->upgraded_from_opset = declared_opset;
    } else if (options.require_known_ops) {
      // A broken graph (dangling edge, cycle, ...) is named by ferry's own checks, not the converter's.
      ImportState check;
      check.tensors.base_dir = base_dir;
      check.tensors.max_weight_bytes = options.max_weight_bytes;
      check.options = options;
      check.options.require_known_ops = false;
      for (const auto& os : original.opset_import()) check.opsets[os.domain() == "ai.onnx" ? "" : os.domain()] = os.version();
      if (original.opset_import_size() == 0) check.opsets[""] = 1;
      Graph scratch;
      RETURN_IF_ERROR(convert_graph(check, original.graph(), &scratch, 0).with_context(what));
      return up;
    }
  }

  ImportState st;
  st.tensors.base_dir = base_dir;
  st.tensors.max_weight_bytes = options.max_weight_bytes;
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
  st.release_initializers_of = mp.mutable_graph();
  if (stripped) {
    st.raw_spans = stripped->raw_spans;
    st.raw_base = stripped->raw_base;
    st.raw_size = stripped->raw_size;
    st.raw_mapped = stripped->raw_mapped;
  }
  RETURN_IF_ERROR(convert_graph(st, mp.graph(), &model->graph, 0).with_context(what));
  if (options.infer_shapes) {
    RETURN_IF_ERROR(infer_shapes(model.get(), !options.require_known_ops).with_context(what));
  }
  return model;
}

}  // namespace

StatusOr<std::shared_ptr<Model>> parse_onnx_model(const void* data, size_t size, const std::string& base_dir,
                                                  const std::string& what, const ImportOptions& options) {
  return parse_model(data, size, base_dir, what, options, {});
}

StatusOr<std::shared_ptr<Model>> load_onnx_model(const std::string& path, const ImportOptions& options) {
  ASSIGN_OR_RETURN(FileBytes f, map_file(path, options.max_file_bytes, "model file"));
  if (f.size == 0) return invalid_model("model file '" + path + "' is empty");
  // protobuf parses the file without its top graph's initializer bytes, which are copied into the
  // graph from the mapping one at a time (each one's pages dropped once copied): the weights are
  // never held twice (strip_raw_data).
  std::string wire;
  std::vector<std::pair<int64_t, int64_t>> spans;
  if (strip_raw_data(f.data, f.size, &wire, &spans)) {
    ImportState stripped;
    stripped.raw_spans = &spans;
    stripped.raw_base = f.data;
    stripped.raw_size = f.size;
    stripped.raw_mapped = f.mapped;
    ASSIGN_OR_RETURN(auto model, parse_model(wire.data(), wire.size(), dir_name(path), "model '" + path + "'", options,
                                             [&wire] { std::string().swap(wire); }, &stripped));
    model->path = path;
    return model;
  }
  // Not what strip_raw_data reads (the usual parse names the problem): the mapping is released once
  // protobuf has parsed it, its pages would otherwise stay resident beside the parsed copy.
  ASSIGN_OR_RETURN(auto model, parse_model(f.data, f.size, dir_name(path), "model '" + path + "'", options,
                                           [&f] { f = FileBytes{}; }));
  model->path = path;
  return model;
}

}  // namespace ferry

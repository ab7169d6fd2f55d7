// flatbuffer -> Graph with every reference checked; see graph_codec.h.
#include <unistd.h>

#include <unordered_set>

#include "common/utf8.h"
#include "format/file_header.h"
#include "format/graph_codec.h"
#include "io/file.h"
#include "ir/packed_layout.h"
#include "ir/graph_check.h"

namespace ferry::format {
namespace {

std::string to_string(const flatbuffers::String* s) { return s ? s->str() : std::string(); }
// Names (of graphs, values, nodes, ops, attributes, symbolic dims) escaped once here (common/utf8.h).
std::string name_of(const flatbuffers::String* s) { return s ? escape_name(std::string_view(s->c_str(), s->size())) : std::string(); }

std::vector<std::string> names_of(const flatbuffers::Vector<flatbuffers::Offset<flatbuffers::String>>* v) {
  std::vector<std::string> out;
  if (!v) return out;
  out.reserve(v->size());
  for (const auto* s : *v) out.push_back(name_of(s));
  return out;
}

std::vector<std::string> to_strings(const flatbuffers::Vector<flatbuffers::Offset<flatbuffers::String>>* v) {
  std::vector<std::string> out;
  if (!v) return out;
  out.reserve(v->size());
  for (const auto* s : *v) out.push_back(to_string(s));
  return out;
}

Status read_dtype(int32_t raw, const std::string& where, DType* out) {
  if (raw == 0) {
    *out = DType::kUndefined;
    return Status::ok();
  }
  if (!dtype_from_onnx(raw, out)) return invalid_model(where + ": unknown element type " + std::to_string(raw));
  return Status::ok();
}

Status read_type(const fb::TensorType* in, const std::string& where, TensorType* out) {
  if (!in) return invalid_model(where + ": missing type");
  RETURN_IF_ERROR(read_dtype(in->dtype(), where, &out->dtype));
  if (in->kind() < 0 || in->kind() > static_cast<int8_t>(ValueKind::kOptionalSequence))
    return invalid_model(where + ": unknown value kind " + std::to_string(in->kind()));
  out->kind = static_cast<ValueKind>(in->kind());
  if (!in->has_shape()) return Status::ok();
  Shape s;
  if (in->dims()) {
    if (in->dims()->size() > kMaxRank) return invalid_model(where + ": rank " + std::to_string(in->dims()->size()) + " over the limit");
    for (const fb::Dim* d : *in->dims()) {
      if (d->value() >= 0) s.dims.push_back(Dim(d->value()));
      else s.dims.push_back(Dim::symbolic(name_of(d->symbol())));
    }
  }
  out->shape = std::move(s);
  return Status::ok();
}

// The plain form of a weight stored only packed, made on first read (ir/packed_layout.h).
class UnpackedBytes : public LazyBytes {
 public:
  UnpackedBytes(std::shared_ptr<const void> owner, const uint8_t* packed, uint64_t packed_bytes, bool mapped,
                std::vector<int64_t> layout, DType dtype, std::vector<int64_t> dims)
      : owner_(std::move(owner)), packed_(packed), packed_bytes_(packed_bytes), mapped_(mapped), layout_(std::move(layout)),
        dtype_(dtype), dims_(std::move(dims)) {}

 protected:
  std::shared_ptr<const void> make() override {
    auto plain = std::make_shared<Tensor>(Tensor::allocate(dtype_, dims_));
    unpack_layout(layout_, packed_, plain->mutable_raw(), dtype_size(dtype_));
    // The packed bytes just read stay in the process only if a kernel uses them in place (it then
    // touches them again, from the page cache): from a file mapping they are dropped.
    if (mapped_) drop_pages(packed_, static_cast<size_t>(packed_bytes_));
    const void* data = plain->raw();
    return std::shared_ptr<const void>(std::move(plain), data);
  }

 private:
  std::shared_ptr<const void> owner_;  // the mapping
  const uint8_t* packed_;
  uint64_t packed_bytes_;
  bool mapped_;
  std::vector<int64_t> layout_;
  DType dtype_;
  std::vector<int64_t> dims_;
};

Status read_packed_tensor(const fb::TensorRef* in, const WeightsView& w, const std::string& where, DType dt,
                          std::vector<int64_t> dims, Tensor* out) {
  if (dt == DType::kString || dtype_size(dt) <= 0) return invalid_model(where + ": a packed tensor of " + dtype_name(dt));
  if (in->offset() % kWeightAlignment != 0 || in->offset() > w.size || in->nbytes() > w.size - in->offset())
    return invalid_model(where + ": packed tensor bytes lie outside the weights section");
  std::vector<int64_t> layout(in->layout()->begin(), in->layout()->end());
  RETURN_IF_ERROR(check_packed_layout(layout, element_count(dims), dtype_size(dt), in->nbytes(), where));
  auto bytes = std::make_shared<UnpackedBytes>(w.owner, w.data + in->offset(), in->nbytes(), w.mapped, std::move(layout), dt, dims);
  *out = Tensor::deferred(dt, std::move(dims), std::move(bytes));
  return Status::ok();
}

Status read_tensor(const fb::TensorRef* in, const WeightsView& w, const std::string& where, Tensor* out) {
  if (!in) return invalid_model(where + ": missing tensor");
  DType dt;
  RETURN_IF_ERROR(read_dtype(in->dtype(), where, &dt));
  if (dt == DType::kUndefined) return invalid_model(where + ": tensor without an element type");
  std::vector<int64_t> dims;
  if (in->dims()) dims.assign(in->dims()->begin(), in->dims()->end());
  if (static_cast<int64_t>(dims.size()) > kMaxRank) return invalid_model(where + ": rank over the limit");
  auto count = checked_element_count(dims, where);
  if (!count.is_ok()) return invalid_model(count.status().message());
  if (dt == DType::kString) {
    const size_t n = in->strings() ? in->strings()->size() : 0;
    if (static_cast<int64_t>(n) != count.value())
      return invalid_model(where + ": string tensor of " + std::to_string(count.value()) + " elements holds " +
                           std::to_string(n));
    ASSIGN_OR_RETURN(Tensor t, Tensor::create(dt, std::move(dims), where));
    t.mutable_strings() = to_strings(in->strings());
    *out = std::move(t);
    return Status::ok();
  }
  const uint64_t expected = static_cast<uint64_t>(count.value() * dtype_size(dt));
  if (in->layout() && in->layout()->size() > 0) return read_packed_tensor(in, w, where, dt, std::move(dims), out);
  if (in->nbytes() != expected)
    return invalid_model(where + ": tensor of " + dims_to_string(dims) + " " + dtype_name(dt) + " has " +
                         std::to_string(in->nbytes()) + " bytes, expected " + std::to_string(expected));
  if (in->offset() % kWeightAlignment != 0 || in->offset() > w.size || expected > w.size - in->offset())
    return invalid_model(where + ": tensor bytes lie outside the weights section");
  *out = Tensor::wrap(dt, std::move(dims), w.owner, w.data + in->offset());
  return Status::ok();
}

struct Reader {
  const WeightsView& w;

  Status attribute(const fb::Attribute* in, const std::string& where, const Graph* owner, Attribute* a) {
    if (in->type() < 0 || in->type() > static_cast<int8_t>(AttrType::kTypeProto))
      return invalid_model(where + ": unknown attribute type " + std::to_string(in->type()));
    a->type = static_cast<AttrType>(in->type());
    a->f = in->f();
    a->i = in->i();
    a->s = to_string(in->s());
    if (in->t()) RETURN_IF_ERROR(read_tensor(in->t(), w, where, &a->t));
    if (in->g()) {
      a->g = std::make_shared<Graph>();
      RETURN_IF_ERROR(graph(*in->g(), owner, a->g.get()));
    }
    if (in->floats()) a->floats.assign(in->floats()->begin(), in->floats()->end());
    if (in->ints()) a->ints.assign(in->ints()->begin(), in->ints()->end());
    a->strings = to_strings(in->strings());
    if (in->tensors())
      for (const fb::TensorRef* t : *in->tensors()) {
        a->tensors.emplace_back();
        RETURN_IF_ERROR(read_tensor(t, w, where, &a->tensors.back()));
      }
    if (in->graphs())
      for (const fb::Graph* sg : *in->graphs()) {
        auto g = std::make_shared<Graph>();
        RETURN_IF_ERROR(graph(*sg, owner, g.get()));
        a->graphs.push_back(std::move(g));
      }
    if (a->type == AttrType::kTypeProto) RETURN_IF_ERROR(read_type(in->tp(), where, &a->tp));
    return Status::ok();
  }

  Status graph(const fb::Graph& in, const Graph* parent, Graph* g) {
    g->parent = parent;
    g->name = name_of(in.name());
    const std::string where = "graph '" + g->name + "'";
    if (in.inputs())
      for (const fb::ValueInfo* v : *in.inputs()) {
        ValueInfo vi{name_of(v->name()), {}};
        RETURN_IF_ERROR(read_type(v->type(), where + " input '" + vi.name + "'", &vi.type));
        g->inputs.push_back(std::move(vi));
      }
    if (in.outputs())
      for (const fb::ValueInfo* v : *in.outputs()) {
        ValueInfo vi{name_of(v->name()), {}};
        RETURN_IF_ERROR(read_type(v->type(), where + " output '" + vi.name + "'", &vi.type));
        g->outputs.push_back(std::move(vi));
      }
    if (in.initializers())
      for (const fb::NamedTensor* t : *in.initializers()) {
        const std::string name = name_of(t->name());
        Tensor tensor;
        RETURN_IF_ERROR(read_tensor(t->tensor(), w, where + " initializer '" + name + "'", &tensor));
        g->initializers[name] = std::move(tensor);
      }
    if (in.value_types())
      for (const fb::ValueInfo* v : *in.value_types()) {
        const std::string name = name_of(v->name());
        TensorType t;
        RETURN_IF_ERROR(read_type(v->type(), where + " value '" + name + "'", &t));
        g->value_types[name] = std::move(t);
      }
    if (in.nodes()) {
      g->nodes.reserve(in.nodes()->size());
      for (const fb::Node* n : *in.nodes()) {
        Node node;
        node.name = name_of(n->name());
        node.op_type = name_of(n->op_type());
        node.domain = name_of(n->domain());
        node.inputs = names_of(n->inputs());
        node.outputs = names_of(n->outputs());
        node.implicit_inputs = names_of(n->implicit_inputs());
        node.origin = names_of(n->origin());
        const std::string nwhere = where + " " + node.describe();
        if (n->attrs())
          for (const fb::Attribute* a : *n->attrs()) {
            const std::string key = name_of(a->name());
            Attribute attr;
            RETURN_IF_ERROR(attribute(a, nwhere + " attribute '" + key + "'", g, &attr));
            node.attrs[key] = std::move(attr);
          }
        g->nodes.push_back(std::move(node));
      }
    }
    // A subgraph may read what its enclosing graphs define; their value_types name the values
    // of nodes not read yet.
    std::unordered_set<std::string> outer = enclosing_scope_values(*g);
    for (const Graph* p = parent; p; p = p->parent)
      for (const auto& [name, t] : p->value_types) outer.insert(name);
    return check_graph(g, outer, NodeOrder::kRequireSorted).with_context(where + " (the file is corrupted)");
  }
};

}  // namespace

Status read_graph(const fb::Graph& in, const WeightsView& weights, const Graph* parent, Graph* out) {
  Reader r{weights};
  return r.graph(in, parent, out);
}

}  // namespace ferry::format

// Graph -> flatbuffer + weights section; see graph_codec.h.
#include <algorithm>
#include <cstring>
#include <map>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "format/file_header.h"
#include "format/graph_codec.h"
#include "ir/packed_layout.h"

namespace ferry::format {

using flatbuffers::Offset;

Offset<flatbuffers::Vector<Offset<flatbuffers::String>>> GraphWriter::strs(const std::vector<std::string>& v) {
  std::vector<Offset<flatbuffers::String>> out;
  out.reserve(v.size());
  for (const std::string& s : v) out.push_back(str(s));
  return fbb_.CreateVector(out);
}

uint64_t GraphWriter::store(const Tensor& t) {
  const auto* bytes = static_cast<const uint8_t*>(t.raw());
  const size_t n = static_cast<size_t>(t.nbytes());
  const uint64_t hash = XXH3_64bits(bytes, n);
  auto& candidates = by_hash_[hash];
  for (uint64_t off : candidates)
    if (off + n <= weights_.size() && (n == 0 || std::memcmp(weights_.data() + off, bytes, n) == 0)) return off;
  const uint64_t off = weights_.size();
  if (n) weights_.append(reinterpret_cast<const char*>(bytes), n);
  weights_.resize((weights_.size() + kWeightAlignment - 1) / kWeightAlignment * kWeightAlignment, '\0');
  candidates.push_back(off);
  return off;
}

Offset<fb::TensorRef> GraphWriter::tensor(const Tensor& t) {
  auto dims = fbb_.CreateVector(t.dims());
  if (t.dtype() == DType::kString) {
    auto strings = strs(t.strings());
    return fb::CreateTensorRef(fbb_, static_cast<int32_t>(t.dtype()), dims, 0, 0, strings);
  }
  const uint64_t off = store(t);
  return fb::CreateTensorRef(fbb_, static_cast<int32_t>(t.dtype()), dims, off, static_cast<uint64_t>(t.nbytes()));
}

Offset<fb::TensorRef> GraphWriter::packed_tensor(const Tensor& t, const Tensor& packed, const std::vector<int64_t>& layout) {
  auto dims = fbb_.CreateVector(t.dims());
  const uint64_t off = store(packed);
  auto l = fbb_.CreateVector(layout);
  return fb::CreateTensorRef(fbb_, static_cast<int32_t>(t.dtype()), dims, off, static_cast<uint64_t>(packed.nbytes()), 0, l);
}


Offset<fb::TensorType> GraphWriter::type(const TensorType& t) {
  Offset<flatbuffers::Vector<Offset<fb::Dim>>> dims = 0;
  if (t.shape) {
    std::vector<Offset<fb::Dim>> ds;
    for (const Dim& d : t.shape->dims) ds.push_back(fb::CreateDim(fbb_, d.value, d.symbol.empty() ? 0 : str(d.symbol)));
    dims = fbb_.CreateVector(ds);
  }
  return fb::CreateTensorType(fbb_, static_cast<int32_t>(t.dtype), t.shape.has_value(), dims,
                              static_cast<int8_t>(t.kind));
}

Offset<fb::ValueInfo> GraphWriter::value_info(const std::string& name, const TensorType& t) {
  auto n = str(name);
  auto ty = type(t);
  return fb::CreateValueInfo(fbb_, n, ty);
}

Offset<fb::Attribute> GraphWriter::attribute(const std::string& name, const Attribute& a) {
  auto n = str(name);
  auto s = a.s.empty() ? 0 : fbb_.CreateString(a.s);
  auto t = a.t.defined() ? tensor(a.t) : 0;
  auto g = a.g ? graph(*a.g) : 0;
  auto floats = a.floats.empty() ? 0 : fbb_.CreateVector(a.floats);
  auto ints = a.ints.empty() ? 0 : fbb_.CreateVector(a.ints);
  auto strings = a.strings.empty() ? 0 : strs(a.strings);
  Offset<flatbuffers::Vector<Offset<fb::TensorRef>>> tensors = 0;
  if (!a.tensors.empty()) {
    std::vector<Offset<fb::TensorRef>> ts;
    for (const Tensor& x : a.tensors) ts.push_back(tensor(x));
    tensors = fbb_.CreateVector(ts);
  }
  Offset<flatbuffers::Vector<Offset<fb::Graph>>> graphs = 0;
  if (!a.graphs.empty()) {
    std::vector<Offset<fb::Graph>> gs;
    for (const auto& x : a.graphs) gs.push_back(graph(*x));
    graphs = fbb_.CreateVector(gs);
  }
  auto tp = a.type == AttrType::kTypeProto ? type(a.tp) : 0;
  return fb::CreateAttribute(fbb_, n, static_cast<int8_t>(a.type), a.f, a.i, s, t, g, floats, ints, strings, tensors,
                             graphs, tp);
}

Offset<fb::Node> GraphWriter::node(const Node& n) {
  std::vector<Offset<fb::Attribute>> attrs;
  for (const auto& [k, a] : n.attrs) attrs.push_back(attribute(k, a));
  auto attrs_vec = fbb_.CreateVector(attrs);
  auto name = str(n.name);
  auto op = str(n.op_type);
  auto domain = str(n.domain);
  auto inputs = strs(n.inputs);
  auto outputs = strs(n.outputs);
  auto implicit = strs(n.implicit_inputs);
  auto origin = strs(n.origin);
  return fb::CreateNode(fbb_, name, op, domain, inputs, outputs, attrs_vec, implicit, origin);
}

Offset<fb::Graph> GraphWriter::graph(const Graph& g) {
  std::vector<Offset<fb::ValueInfo>> inputs, outputs, types;
  for (const ValueInfo& v : g.inputs) inputs.push_back(value_info(v.name, v.type));
  for (const ValueInfo& v : g.outputs) outputs.push_back(value_info(v.name, v.type));
  std::vector<Offset<fb::Node>> nodes;
  for (const Node& n : g.nodes) nodes.push_back(node(n));
  std::vector<Offset<fb::NamedTensor>> inits;
  const auto packed = packed_only_weights(g);
  for (const auto& [name, t] : g.initializers) {
    auto n = str(name);
    auto p = packed.find(name);
    auto tr = p == packed.end() ? tensor(t) : packed_tensor(t, *p->second.packed, *p->second.layout);
    inits.push_back(fb::CreateNamedTensor(fbb_, n, tr));
  }
  // Sorted so that compiling the same model twice gives the same bytes.
  std::vector<const std::pair<const std::string, TensorType>*> sorted;
  for (const auto& entry : g.value_types) sorted.push_back(&entry);
  std::sort(sorted.begin(), sorted.end(), [](const auto* a, const auto* b) { return a->first < b->first; });
  for (const auto* entry : sorted) types.push_back(value_info(entry->first, entry->second));
  auto name = str(g.name);
  auto iv = fbb_.CreateVector(inputs);
  auto ov = fbb_.CreateVector(outputs);
  auto nv = fbb_.CreateVector(nodes);
  auto tv = fbb_.CreateVector(inits);
  auto vt = fbb_.CreateVector(types);
  return fb::CreateGraph(fbb_, name, iv, ov, nv, tv, vt);
}

}  // namespace ferry::format

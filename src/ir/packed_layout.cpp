// Plain tensors from packed (blocked) bytes; see packed_layout.h.
#include "ir/packed_layout.h"

#include <algorithm>
#include <cstring>

namespace ferry {
namespace {

constexpr int64_t kMaxDims = 12;
constexpr int64_t kMaxValue = int64_t{1} << 40;

struct Parsed {
  int64_t n = 0, nblks = 0, offset0 = 0;
  const int64_t *dims = nullptr, *plain = nullptr, *packed = nullptr, *blks = nullptr, *idxs = nullptr;
};

bool parse(const std::vector<int64_t>& l, Parsed* p) {
  if (l.empty() || l[0] < 1 || l[0] > kMaxDims) return false;
  const int64_t n = l[0];
  if (static_cast<int64_t>(l.size()) < 1 + 3 * n + 2) return false;
  p->n = n;
  p->dims = l.data() + 1;
  p->plain = p->dims + n;
  p->packed = p->plain + n;
  p->offset0 = p->packed[n];
  p->nblks = p->packed[n + 1];
  if (p->nblks < 0 || p->nblks > kMaxDims || static_cast<int64_t>(l.size()) != 1 + 3 * n + 2 + 2 * p->nblks) return false;
  p->blks = p->packed + n + 2;
  p->idxs = p->blks + p->nblks;
  return true;
}

// Offset (in elements) of logical index `x` in the packed bytes.
inline int64_t packed_offset(const Parsed& p, const int64_t* x) {
  int64_t pos[kMaxDims];
  std::copy(x, x + p.n, pos);
  int64_t off = p.offset0, stride = 1;
  for (int64_t j = p.nblks - 1; j >= 0; --j) {
    const int64_t d = p.idxs[j], b = p.blks[j];
    off += (pos[d] % b) * stride;
    pos[d] /= b;
    stride *= b;
  }
  for (int64_t d = 0; d < p.n; ++d) off += pos[d] * p.packed[d];
  return off;
}

}  // namespace

Status check_packed_layout(const std::vector<int64_t>& layout, int64_t numel, int64_t elem_size, uint64_t packed_bytes,
                           const std::string& where) {
  // A blocked layout only adds padding: fewer bytes than the plain tensor's (which a hostile file
  // could use to make a load allocate far more than the file holds) is refused.
  if (static_cast<__int128>(numel) * elem_size > static_cast<__int128>(packed_bytes))
    return invalid_model(where + ": " + std::to_string(packed_bytes) + " packed bytes hold fewer than its " +
                         std::to_string(numel) + " elements");
  Parsed p;
  if (!parse(layout, &p)) return invalid_model(where + ": malformed packed layout (" + std::to_string(layout.size()) + " values)");
  for (const int64_t* v = layout.data() + 1; v != layout.data() + layout.size(); ++v)
    if (*v < 0 || *v > kMaxValue) return invalid_model(where + ": packed layout value " + std::to_string(*v) + " out of range");
  __int128 count = 1;
  for (int64_t d = 0; d < p.n; ++d) {
    if (p.dims[d] < 1) return invalid_model(where + ": packed layout dim " + std::to_string(d) + " is 0");
    count *= p.dims[d];
    if (count > numel) break;
  }
  if (count != numel)
    return invalid_model(where + ": packed layout covers other than the tensor's " + std::to_string(numel) + " elements");
  // Plain strides: dense, each element once (sorted by stride, each is the product of the dims inside it).
  std::vector<int64_t> order;
  for (int64_t d = 0; d < p.n; ++d)
    if (p.dims[d] > 1) order.push_back(d);
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return p.plain[a] < p.plain[b]; });
  int64_t expect = 1;
  for (int64_t d : order) {
    if (p.plain[d] != expect) return invalid_model(where + ": packed layout's plain strides are not dense");
    expect *= p.dims[d];
  }
  __int128 inner = 1;
  std::vector<__int128> per_dim(static_cast<size_t>(p.n), 1);
  for (int64_t j = 0; j < p.nblks; ++j) {
    if (p.blks[j] < 1 || p.idxs[j] >= p.n) return invalid_model(where + ": packed layout block " + std::to_string(j) + " is malformed");
    inner *= p.blks[j];
    per_dim[static_cast<size_t>(p.idxs[j])] *= p.blks[j];
    if (inner > kMaxValue) return invalid_model(where + ": packed layout blocks too large");
  }
  __int128 last = p.offset0 + inner - 1;
  for (int64_t d = 0; d < p.n; ++d) last += static_cast<__int128>((p.dims[d] - 1) / per_dim[static_cast<size_t>(d)]) * p.packed[d];
  if ((last + 1) * elem_size > static_cast<__int128>(packed_bytes))
    return invalid_model(where + ": packed layout reaches past its " + std::to_string(packed_bytes) + " packed bytes");
  return Status::ok();
}

void unpack_layout(const std::vector<int64_t>& layout, const void* packed, void* plain, int64_t elem_size) {
  Parsed p;
  if (!parse(layout, &p)) return;
  const auto* src = static_cast<const uint8_t*>(packed);
  auto* dst = static_cast<uint8_t*>(plain);
  const size_t es = static_cast<size_t>(elem_size);
  int64_t x[kMaxDims] = {};
  for (;;) {
    int64_t plain_off = 0;
    for (int64_t d = 0; d < p.n; ++d) plain_off += x[d] * p.plain[d];
    std::memcpy(dst + static_cast<size_t>(plain_off) * es, src + static_cast<size_t>(packed_offset(p, x)) * es, es);
    int64_t d = p.n - 1;
    while (d >= 0 && ++x[d] == p.dims[d]) x[d--] = 0;
    if (d < 0) return;
  }
}

StoredWeights stored_weights(const Graph& graph) {
  StoredWeights s;
  for (const auto& [name, t] : graph.initializers) {
    if (t.pending()) continue;  // counted below, as the packed bytes stored for it
    s.plain_bytes += t.nbytes();
    ++s.plain_count;
  }
  for (const Node& n : graph.nodes) {
    const Attribute* packed = n.attr(kPackedBytesAttr);
    if (!packed || packed->type != AttrType::kTensor) continue;
    const Attribute* input = n.attr(kPackedInputAttr);
    const Tensor* w = nullptr;
    if (input && input->type == AttrType::kInt && input->i >= 0 && input->i < static_cast<int64_t>(n.inputs.size())) {
      auto it = graph.initializers.find(n.inputs[static_cast<size_t>(input->i)]);
      if (it != graph.initializers.end()) w = &it->second;
    }
    if (w && w->pending()) {
      s.packed_only_bytes += packed->t.nbytes();
      ++s.packed_only_count;
    } else {
      s.packed_beside_bytes += packed->t.nbytes();
      ++s.packed_beside_nodes;
    }
  }
  return s;
}

std::map<std::string, PackedOnlyWeight> packed_only_weights(const Graph& g) {
  std::map<std::string, PackedOnlyWeight> out;
  std::map<std::string, int> reads;
  for (const Node& n : g.nodes) {
    for (const std::string& in : n.inputs) ++reads[in];
    for (const std::string& in : n.implicit_inputs) reads[in] += 2;
  }
  for (const ValueInfo& v : g.inputs) reads[v.name] += 2;
  for (const ValueInfo& v : g.outputs) reads[v.name] += 2;
  for (const Node& n : g.nodes) {
    const Attribute* layout = n.attr(kPackedLayoutAttr);
    const Attribute* input = n.attr(kPackedInputAttr);
    const Attribute* packed = n.attr(kPackedBytesAttr);
    if (!layout || !input || !packed || layout->type != AttrType::kInts || input->type != AttrType::kInt ||
        packed->type != AttrType::kTensor || input->i < 0 || input->i >= static_cast<int64_t>(n.inputs.size()))
      continue;
    const std::string& name = n.inputs[static_cast<size_t>(input->i)];
    auto w = g.initializers.find(name);
    if (w == g.initializers.end() || w->second.dtype() == DType::kString || reads[name] != 1) continue;
    if (!check_packed_layout(layout->ints, w->second.numel(), dtype_size(w->second.dtype()),
                             static_cast<uint64_t>(packed->t.nbytes()), name).is_ok())
      continue;
    out[name] = {&packed->t, &layout->ints};
  }
  return out;
}

namespace {
class UnpackOnRead : public LazyBytes {
 public:
  UnpackOnRead(Tensor packed, std::vector<int64_t> layout, DType dtype, std::vector<int64_t> dims)
      : packed_(std::move(packed)), layout_(std::move(layout)), dtype_(dtype), dims_(std::move(dims)) {}

 protected:
  std::shared_ptr<const void> make() override {
    auto plain = std::make_shared<Tensor>(Tensor::allocate(dtype_, dims_));
    unpack_layout(layout_, packed_.raw(), plain->mutable_raw(), dtype_size(dtype_));
    const void* data = plain->raw();
    return std::shared_ptr<const void>(std::move(plain), data);
  }

 private:
  Tensor packed_;
  std::vector<int64_t> layout_;
  DType dtype_;
  std::vector<int64_t> dims_;
};
}  // namespace

Tensor unpacked_on_read(Tensor packed, std::vector<int64_t> layout, DType dtype, std::vector<int64_t> dims) {
  auto bytes = std::make_shared<UnpackOnRead>(std::move(packed), std::move(layout), dtype, dims);
  return Tensor::deferred(dtype, std::move(dims), std::move(bytes));
}

}  // namespace ferry

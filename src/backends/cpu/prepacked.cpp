// Pre-packed weights: stored bytes used in place, or a reorder at load; see prepacked.h.
#include "backends/cpu/prepacked.h"

#include <atomic>
#include <cstring>

#include "backends/cpu/dnnl_util.h"
#include "ir/packed_layout.h"

namespace ferry::cpu {
namespace {

thread_local PackRecorder* t_recorder = nullptr;
std::atomic<int64_t> g_stored{0}, g_reordered{0};

std::string hex(const void* data, size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string s(2 * n, '0');
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < n; ++i) {
    s[2 * i] = digits[p[i] >> 4];
    s[2 * i + 1] = digits[p[i] & 15];
  }
  return s;
}

// The stored bytes on `node` when they are exactly the weights in layout `want`, else nullptr.
const uint8_t* stored_bytes(const Node& node, const char* kind, const dnnl::memory::desc& want) {
  const Attribute* bytes = node.attr(kPackedAttr);
  const Attribute* key = node.attr(kPackedKeyAttr);
  if (!bytes || !key || bytes->type != AttrType::kTensor || key->type != AttrType::kString) return nullptr;
  const Tensor& t = bytes->t;
  if (t.dtype() != DType::kU8 || t.rank() != 1 || static_cast<size_t>(t.nbytes()) != want.get_size()) return nullptr;
  if (reinterpret_cast<uintptr_t>(t.raw()) % 64 != 0) return nullptr;
  if (key->s != packed_key(kind, want)) return nullptr;
  return static_cast<const uint8_t*>(t.raw());
}

// ferry's description of the blocked layout `want` of the plain weights `user` (ir/packed_layout.h),
// or empty when the packing is more than a permutation with padding.
std::vector<int64_t> layout_of(const dnnl::memory::desc& want, const dnnl::memory::desc& user) {
  const dnnl_memory_desc_t& w = want.data;
  const dnnl_memory_desc_t& u = user.data;
  if (w.format_kind != dnnl_blocked || u.format_kind != dnnl_blocked || w.data_type != u.data_type ||
      w.extra.flags != 0 || u.extra.flags != 0 || w.ndims != u.ndims || w.ndims < 1 || u.format_desc.blocking.inner_nblks != 0 ||
      u.offset0 != 0)
    return {};
  const int n = w.ndims;
  for (int d = 0; d < n; ++d)
    if (w.dims[d] != u.dims[d] || w.padded_offsets[d] != 0 || u.padded_dims[d] != u.dims[d]) return {};
  std::vector<int64_t> l{n};
  for (int d = 0; d < n; ++d) l.push_back(w.dims[d]);
  for (int d = 0; d < n; ++d) l.push_back(u.format_desc.blocking.strides[d]);
  for (int d = 0; d < n; ++d) l.push_back(w.format_desc.blocking.strides[d]);
  l.push_back(w.offset0);
  const auto& b = w.format_desc.blocking;
  l.push_back(b.inner_nblks);
  for (int j = 0; j < b.inner_nblks; ++j) l.push_back(b.inner_blks[j]);
  for (int j = 0; j < b.inner_nblks; ++j) l.push_back(b.inner_idxs[j]);
  return l;
}

}  // namespace

std::string packed_key(const char* kind, const dnnl::memory::desc& want) {
  const dnnl_version_t* v = dnnl_version();
  return std::string(kind) + "|oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
         std::to_string(v->patch) + "|isa " + std::to_string(static_cast<int>(dnnl_get_effective_cpu_isa())) + "|" +
         hex(&want.data, sizeof want.data);
}

dnnl::memory packed_weights(const Node& node, const char* kind, const dnnl::memory::desc& want,
                            const std::function<dnnl::memory()>& make_user) {
  if (const uint8_t* stored = stored_bytes(node, kind, want)) {
    ++g_stored;
    // oneDNN only reads weights; the mapping is read-only and stays alive with the node's attribute.
    return dnnl::memory(want, dnnl_engine(), const_cast<uint8_t*>(stored));
  }
  ++g_reordered;
  const dnnl::memory user = make_user();
  dnnl::memory src = user;  // a handle copy: reorder takes non-const memories
  dnnl::memory packed(want, dnnl_engine());
  dnnl::reorder(src, packed).execute(dnnl_stream(), src, packed);
  dnnl_stream().wait();
  if (t_recorder && !node.outputs.empty() && !t_recorder->by_output.count(node.outputs[0])) {
    const size_t n = want.get_size();
    PackedWeights pw;
    pw.key = packed_key(kind, want);
    // The kernel's own buffer (kept alive by the record beyond the kernel), not a copy of it.
    pw.bytes = Tensor::wrap(DType::kU8, {static_cast<int64_t>(n)}, std::make_shared<dnnl::memory>(packed),
                            packed.get_data_handle());
    pw.source = user.get_data_handle();
    pw.layout = layout_of(want, user.get_desc());
    t_recorder->by_output.emplace(node.outputs[0], std::move(pw));
  }
  return packed;
}

PackRecorder::PackRecorder() { t_recorder = this; }
PackRecorder::~PackRecorder() {
  if (t_recorder == this) t_recorder = nullptr;
}

namespace {

class CpuWeightPrepack : public WeightPrepack {
 public:
  void store(Graph& g, int64_t* nodes, int64_t* bytes) override {
    for (Node& n : g.nodes) {
      if (n.outputs.empty()) continue;
      auto it = recorder_.by_output.find(n.outputs[0]);
      if (it == recorder_.by_output.end()) continue;
      // Only bytes packed from one of this node's own weights (an initializer it reads).
      bool own = false;
      int64_t own_input = -1;
      for (size_t i = 0; i < n.inputs.size(); ++i) {
        auto w = g.initializers.find(n.inputs[i]);
        if (w != g.initializers.end() && w->second.raw() == it->second.source) {
          own = true;
          if (own_input < 0) own_input = static_cast<int64_t>(i);
        }
      }
      // The few-channel int8 convolution packs a copy of its own weights made at load (KW taps as channels:
      // dnnl_int8_conv.cpp, init_tap_packing), as do the int8 conv / matmul split on hosts without VNNI
      // (int8_pair_saturation.h); their kinds say so, and the key still checks the layout and ISA.
      const std::string& k = it->second.key;
      if (!own && k.rfind("dnnl_int8_conv_taps|", 0) != 0 && k.rfind("dnnl_int8_conv_split|", 0) != 0 &&
          k.rfind("dnnl_int8_matmul_split|", 0) != 0)
        continue;
      Attribute packed;
      packed.type = AttrType::kTensor;
      packed.t = it->second.bytes;
      Attribute key;
      key.type = AttrType::kString;
      key.s = it->second.key;
      *bytes += it->second.bytes.nbytes();
      ++*nodes;
      if (own && k.rfind("dnnl_conv|", 0) == 0) mark_stored_once(g, n, packed.t, it->second.layout, own_input);
      n.attrs[kPackedAttr] = std::move(packed);
      n.attrs[kPackedKeyAttr] = std::move(key);
    }
  }

 private:
  // The packed bytes can stand for the weights themselves (the file then stores them once:
  // ir/packed_layout.h) when their layout is a permutation with padding, checked here by unpacking
  // them back to exactly the weights. Convolutions only: a MatMul's form depends on the run's thread
  // count and shapes (packed layouts, small_gemm panels, RowGemm: dnnl_matmul.cpp), so a run at
  // another count would unpack the plain weights beside the file's packed ones (ViT-B/16 at 1
  // thread: peak RSS 413 -> 560 MiB); its files are within 1.1x of the ONNX file without it.
  static void mark_stored_once(const Graph& g, Node& n, const Tensor& packed, const std::vector<int64_t>& layout,
                               int64_t input) {
    if (layout.empty() || input < 0) return;
    const Tensor& w = g.initializers.at(n.inputs[static_cast<size_t>(input)]);
    const int64_t es = dtype_size(w.dtype());
    if (w.dtype() == DType::kString || es <= 0 ||
        !check_packed_layout(layout, w.numel(), es, static_cast<uint64_t>(packed.nbytes()), n.name).is_ok())
      return;
    std::vector<uint8_t> plain(static_cast<size_t>(w.nbytes()));
    unpack_layout(layout, packed.raw(), plain.data(), es);
    if (std::memcmp(plain.data(), w.raw(), plain.size()) != 0) return;
    Attribute l;
    l.type = AttrType::kInts;
    l.ints = layout;
    Attribute in;
    in.type = AttrType::kInt;
    in.i = input;
    n.attrs[kPackedLayoutAttr] = std::move(l);
    n.attrs[kPackedInputAttr] = std::move(in);
  }


  PackRecorder recorder_;
};

}  // namespace

std::unique_ptr<WeightPrepack> begin_prepack(Graph& graph) {
  for (Node& n : graph.nodes) {
    n.attrs.erase(kPackedAttr);
    n.attrs.erase(kPackedKeyAttr);
    n.attrs.erase(kPackedLayoutAttr);
    n.attrs.erase(kPackedInputAttr);
  }
  return std::make_unique<CpuWeightPrepack>();
}

PackCounts pack_counts() { return {g_stored.load(), g_reordered.load()}; }

}  // namespace ferry::cpu

// oneDNN plumbing for the cpu backend; see dnnl_util.h.
#include "backends/cpu/dnnl_util.h"

#include "backends/cpu/prepacked.h"

#include "ops/registry.h"

namespace ferry::cpu {

using dnnl::algorithm;
using dnnl::memory;
using tag = dnnl::memory::format_tag;

dnnl::engine& dnnl_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

dnnl::stream& dnnl_stream() {
  thread_local dnnl::stream stream(dnnl_engine());
  return stream;
}

bool to_dnnl_type(DType t, dnnl::memory::data_type* out) {
  switch (t) {
    case DType::kF32: *out = dnnl::memory::data_type::f32; return true;
    case DType::kBF16: *out = dnnl::memory::data_type::bf16; return true;
    case DType::kF16: *out = dnnl::memory::data_type::f16; return true;
    default: return false;
  }
}

dnnl::memory::dims to_dnnl_dims(const std::vector<int64_t>& d) { return dnnl::memory::dims(d.begin(), d.end()); }

memory::desc padded_plain_weights(const memory::desc& chosen) {
  const memory::dims d = chosen.dims();
  if (d.size() != 2 || d[1] % 256 != 0 || chosen.data_type() != memory::data_type::f32 ||
      chosen != memory::desc(d, memory::data_type::f32, tag::ab))
    return memory::desc();
  return memory::desc(d, memory::data_type::f32, memory::dims{d[1] + kWeightRowPad, 1});
}

tag plain_tag(size_t rank, bool channels_last) {
  if (channels_last) {
    switch (rank) {
      case 3: return tag::nwc;
      case 4: return tag::nhwc;
      case 5: return tag::ndhwc;
      default: break;
    }
  }
  switch (rank) {
    case 1: return tag::a;
    case 2: return tag::ab;
    case 3: return tag::abc;
    case 4: return tag::abcd;
    case 5: return tag::abcde;
    case 6: return tag::abcdef;
    default: return tag::undef;
  }
}

bool append_activation(const FusedActivation& act, dnnl::post_ops* ops) {
  switch (act.kind) {
    case ActKind::kNone: return true;
    case ActKind::kRelu: ops->append_eltwise(1.f, algorithm::eltwise_relu, 0.f, 0.f); return true;
    case ActKind::kLeakyRelu: ops->append_eltwise(1.f, algorithm::eltwise_relu, act.alpha, 0.f); return true;
    case ActKind::kClip: ops->append_eltwise(1.f, algorithm::eltwise_clip_v2, act.alpha, act.beta); return true;
    case ActKind::kSigmoid: ops->append_eltwise(1.f, algorithm::eltwise_logistic, 0.f, 0.f); return true;
    case ActKind::kHardSigmoid:  // max(0, min(1, a x + b)) = clip(linear(x))
      ops->append_eltwise(1.f, algorithm::eltwise_linear, act.alpha, act.beta);
      ops->append_eltwise(1.f, algorithm::eltwise_clip_v2, 0.f, 1.f);
      return true;
    case ActKind::kHardSwish: ops->append_eltwise(1.f, algorithm::eltwise_hardswish, 0.f, 0.f); return true;
    case ActKind::kTanh: ops->append_eltwise(1.f, algorithm::eltwise_tanh, 0.f, 0.f); return true;
    case ActKind::kSilu: ops->append_eltwise(1.f, algorithm::eltwise_swish, 1.f, 0.f); return true;
    case ActKind::kGelu: ops->append_eltwise(1.f, algorithm::eltwise_gelu_erf, 0.f, 0.f); return true;
    case ActKind::kGeluTanh: ops->append_eltwise(1.f, algorithm::eltwise_gelu_tanh, 0.f, 0.f); return true;
  }
  return false;
}

bool node_activation(const Node& node, FusedActivation* act) {
  AttrReader r(node);
  auto a = parse_fused_activation(r.get_string("activation", ""), r.get_floats("activation_params"));
  if (!a.is_ok()) return false;
  *act = a.value();
  return true;
}

dnnl::memory wrap(const dnnl::memory::desc& desc, const Tensor& t) {
  return dnnl::memory(desc, dnnl_engine(), const_cast<void*>(t.raw()));
}

Status dnnl_error(const Node& node, const dnnl::error& e) {
  return internal_error(node.describe() + ": oneDNN failed: " + e.what() + " (status " + std::to_string(e.status) +
                        "); run with --device cpu-ref to use the reference kernels");
}

const Tensor* constant_input(const Graph& graph, const Node& node, size_t i) {
  if (i >= node.inputs.size() || node.inputs[i].empty()) return nullptr;
  for (const ValueInfo& in : graph.inputs)
    if (in.name == node.inputs[i]) return nullptr;  // a graph input overrides an initializer of its name
  return graph.find_initializer(node.inputs[i]);
}

bool static_dims(const Graph& graph, const std::string& v, std::vector<int64_t>* dims) {
  const TensorType* t = graph.find_type(v);
  if (!t || !t->shape || !t->shape->is_static()) return false;
  *dims = t->shape->values();
  return true;
}

dnnl::reorder make_reorder(const dnnl::memory::desc& from, const dnnl::memory::desc& to) {
  return dnnl::reorder(dnnl::reorder::primitive_desc(dnnl_engine(), from, dnnl_engine(), to));
}

dnnl::memory s32_scalar_memory(const int32_t* v) {
  return dnnl::memory(dnnl::memory::desc({1}, dnnl::memory::data_type::s32, dnnl::memory::format_tag::x), dnnl_engine(),
                      const_cast<int32_t*>(v));
}

bool is_reference_impl(const dnnl::primitive_desc_base& pd) {
  return std::string(pd.impl_info_str()).find("ref") != std::string::npos;
}

const dnnl::memory* PackedWeightsCache::get(const Node& node, const char* kind, const dnnl::memory::desc& want,
                                            const std::function<dnnl::memory()>& user) {
  for (auto& [desc, mem] : packed_)
    if (desc == want) return &mem;
  packed_.emplace_back(want, packed_weights(node, kind, want, user));
  return &packed_.back().second;
}

}  // namespace ferry::cpu

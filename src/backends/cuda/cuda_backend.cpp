// The CUDA backend: kernel table lookup, the per-node adapter that moves values between host
// and device, and the module's open function (cuda_module.cpp).
#include "backends/cuda/cuda_backend.h"

#include <cstdlib>
#include <unordered_map>

#include "backends/cuda/cuda_device.h"
#include "backends/cuda/cuda_kernels.h"
#include "common/env_switch.h"

namespace ferry {

#define K(name) void register_cuda_##name##_kernels(CudaKernelTable&);
#include "backends/cuda/cuda_kernels.inc"
#undef K

const CudaKernelTable& cuda_kernel_table() {
  static const CudaKernelTable table = [] {
    CudaKernelTable t;
#define K(name) register_cuda_##name##_kernels(t);
#include "backends/cuda/cuda_kernels.inc"
#undef K
    return t;
  }();
  return table;
}

DType CudaKernelArgs::input_dtype(size_t i) const {
  if (i >= node.inputs.size() || node.inputs[i].empty()) return DType::kUndefined;
  const TensorType* t = type_of(node.inputs[i]);
  return t ? t->dtype : DType::kUndefined;
}

const Tensor* CudaKernelArgs::constant_input(size_t i) const {
  if (i >= node.inputs.size() || node.inputs[i].empty()) return nullptr;
  for (const ValueInfo& v : graph.inputs)
    if (v.name == node.inputs[i]) return nullptr;  // a graph input overrides its initializer
  return graph.find_initializer(node.inputs[i]);
}

namespace {

using ValueKey = std::pair<const Graph*, std::string>;

/// Runs one node: device kernel with staging, or the reference kernel on the host.
class CudaNodeKernel : public Kernel {
 public:
  CudaNodeKernel(std::shared_ptr<CudaRuntimeState> state, const Node& node, const OpSchema& schema, const Graph& graph)
      : state_(std::move(state)), node_(node), schema_(schema), graph_(graph) {}

  std::unique_ptr<CudaOpKernel> op;
  std::vector<DeviceTensor> constants;     // per input: uploaded initializer, or undefined
  std::vector<bool> read_later;            // per output: a later node of the graph reads it
  std::vector<std::string> release_after;  // resident values whose last reader is this node

  Status compute(KernelContext& kc) override {
    CudaRuntimeState& st = *state_;
    if (!op) {
      ++st.ctx->transfers().host_fallbacks;
      return schema_.kernel(kc);
    }
    CudaContext& ctx = *st.ctx;
    std::vector<const DeviceTensor*> in(node_.inputs.size(), nullptr);
    std::vector<DeviceTensor> uploaded(node_.inputs.size());
    for (size_t i = 0; i < node_.inputs.size(); ++i) {
      if (!kc.has_input(static_cast<int64_t>(i)) || (i < 64 && (op->host_input_mask >> i) & 1)) continue;
      if (constants[i].defined()) {
        in[i] = &constants[i];
        continue;
      }
      auto it = st.resident.find({&graph_, node_.inputs[i]});
      if (it != st.resident.end()) {
        ++ctx.transfers().resident_hits;
        in[i] = &it->second;
        continue;
      }
      const Value& v = kc.input_value(static_cast<int64_t>(i));
      if (!v.is_tensor())
        return kc.error("input " + std::to_string(i) + " is " + v.describe() + "; the cuda kernel takes tensors");
      ASSIGN_OR_RETURN(uploaded[i], ctx.upload(v.tensor));
      in[i] = &uploaded[i];
    }
    std::vector<DeviceTensor> out(node_.outputs.size());
    Status st_run = op->run(ctx, kc, in, out);
    if (st_run.code() == StatusCode::kUnsupported && schema_.kernel && host_inputs_present(kc)) {
      // A type or size the kernel does not cover, found only now (types unknown at load):
      // the reference kernel runs it on the host.
      ++ctx.transfers().host_fallbacks;
      return schema_.kernel(kc);
    }
    RETURN_IF_ERROR(st_run);
    if (st.sync_each_node) RETURN_IF_ERROR(ctx.synchronize(node_.describe()));
    auto host_it = st.host_values.find(&graph_);
    for (size_t k = 0; k < node_.outputs.size(); ++k) {
      const std::string& name = node_.outputs[k];
      if (name.empty()) continue;
      if (!out[k].defined()) return internal_error(node_.describe() + ": the cuda kernel did not produce output " + std::to_string(k));
      const ValueKey key{&graph_, name};
      const bool host_needed = host_it == st.host_values.end() || host_it->second.count(name) ||
                               st.read_on_host.count(key) || !read_later[k];
      if (host_needed) {
        ASSIGN_OR_RETURN(Tensor t, ctx.download(out[k]));
        kc.set_output(static_cast<int64_t>(k), std::move(t));
      } else {
        // Only CUDA kernels read it: the host gets a tensor with the right type and dims and no
        // data (reading it on the host would be a bug; set_host_values lists every host reader).
        kc.set_output(static_cast<int64_t>(k), Tensor::wrap(out[k].dtype, out[k].dims, nullptr, nullptr));
      }
      if (read_later[k]) st.resident[key] = out[k];
    }
    for (const std::string& name : release_after) st.resident.erase({&graph_, name});
    return Status::ok();
  }

 private:
  bool host_inputs_present(KernelContext& kc) const {
    for (int64_t i = 0; i < kc.num_inputs(); ++i) {
      if (!kc.has_input(i) || !kc.input_value(i).is_tensor()) continue;
      const Tensor& t = kc.input(i);
      if (t.numel() > 0 && t.dtype() != DType::kString && !t.raw()) return false;
    }
    return true;
  }

  std::shared_ptr<CudaRuntimeState> state_;
  const Node& node_;
  const OpSchema& schema_;
  const Graph& graph_;
};

/// For each value read in `g`, the index of the last node reading it.
std::unordered_map<std::string, size_t> last_readers(const Graph& g) {
  std::unordered_map<std::string, size_t> last;
  for (size_t j = 0; j < g.nodes.size(); ++j) {
    for (const std::string& in : g.nodes[j].inputs)
      if (!in.empty()) last[in] = j;
    for (const std::string& in : g.nodes[j].implicit_inputs) last[in] = j;
  }
  return last;
}

size_t node_index(const Graph& g, const Node& node) {
  for (size_t j = 0; j < g.nodes.size(); ++j)
    if (&g.nodes[j] == &node) return j;
  return g.nodes.size();
}

}  // namespace

StatusOr<std::unique_ptr<CudaBackend>> CudaBackend::open(int index) {
  CudaOptions o;
  o.device = index;
  ASSIGN_OR_RETURN(std::unique_ptr<CudaContext> ctx, CudaContext::open(o));
  std::unique_ptr<CudaBackend> b(new CudaBackend());
  b->index_ = index;
  b->state_ = std::make_shared<CudaRuntimeState>();
  b->state_->ctx = std::move(ctx);
  const char* sync = env_value("FERRY_CUDA_SYNC");
  b->state_->sync_each_node = sync && *sync && *sync != '0';
  return b;
}

std::unique_ptr<CudaBackend> CudaBackend::unavailable(std::string why) {
  std::unique_ptr<CudaBackend> b(new CudaBackend());
  b->unavailable_reason_ = std::move(why);
  return b;
}

std::string CudaBackend::name() const { return "cuda:" + std::to_string(index_); }

std::string CudaBackend::description() const {
  if (!available()) return "cuda: unavailable: " + unavailable_reason_;
  CudaContext& ctx = *state_->ctx;
  std::string d = name() + ": " + ctx.device_name() + ", " + std::to_string(cuda_kernel_table().size()) +
                  " ops with CUDA kernels; TF32 " + (ctx.options().allow_tf32 ? "on" : "off") + "; memory: " +
                  ctx.allocator().stats().to_string();
  const TransferStats& t = ctx.transfers();
  d += "; copies: " + std::to_string(t.h2d_copies) + " to the GPU (" + std::to_string(t.h2d_bytes) + " B), " +
       std::to_string(t.d2h_copies) + " back (" + std::to_string(t.d2h_bytes) + " B), " +
       std::to_string(t.resident_hits) + " inputs found on the GPU, " + std::to_string(t.host_fallbacks) +
       " node runs on the host";
  return d;
}

bool CudaBackend::supports(const Node& node, const OpSchema& schema, std::string* why) const {
  if (!available()) {
    if (why) *why = "the cuda device is unavailable: " + unavailable_reason_;
    return false;
  }
  const auto* entries = cuda_kernel_table().find(schema.domain, schema.name);
  if (!entries) {
    if (why) *why = std::string(schema.name) + " has no CUDA kernel";
    return false;
  }
  std::string reason;
  for (const CudaKernelEntry& e : *entries)
    if (!e.accepts || e.accepts(node, &reason)) return true;
  if (why) *why = reason.empty() ? std::string(schema.name) + ": these attributes have no CUDA kernel" : reason;
  return false;
}

std::vector<DType> CudaBackend::supported_types(const OpSchema& schema) const {
  const auto* entries = cuda_kernel_table().find(schema.domain, schema.name);
  if (!entries) return {};
  std::vector<DType> types;
  for (const CudaKernelEntry& e : *entries) {
    if (e.types.empty()) return schema.types;
    for (DType t : e.types) {
      bool seen = false;
      for (DType u : types) seen |= u == t;
      if (!seen) types.push_back(t);
    }
  }
  return types;
}

StatusOr<std::unique_ptr<Kernel>> CudaBackend::create_kernel(const Node& node, const OpSchema& schema, const Graph& graph) {
  if (!available()) return unsupported(node.describe() + ": the cuda device is unavailable: " + unavailable_reason_);
  CudaRuntimeState& st = *state_;
  const int64_t opset = schema.since_version;  // the schema resolved for the model's opset
  auto k = std::make_unique<CudaNodeKernel>(state_, node, schema, graph);
  CudaKernelArgs args{node, schema, graph, *st.ctx, opset};
  if (const auto* entries = cuda_kernel_table().find(schema.domain, schema.name)) {
    for (const CudaKernelEntry& e : *entries) {
      if (e.accepts && !e.accepts(node, nullptr)) continue;
      ASSIGN_OR_RETURN(k->op, e.factory(args));
      if (k->op) break;
    }
  }
  if (!k->op) {
    if (!schema.kernel) return unsupported(node.describe() + ": no CUDA kernel for these types/shapes and no reference kernel");
    for (const std::string& in : node.inputs)
      if (!in.empty()) st.read_on_host.insert({&graph, in});
    return std::unique_ptr<Kernel>(std::move(k));
  }
  // Upload constant inputs once (shared between nodes reading the same initializer).
  k->constants.resize(node.inputs.size());
  for (size_t i = 0; i < node.inputs.size(); ++i) {
    if (i < 64 && (k->op->host_input_mask >> i) & 1) {
      if (!node.inputs[i].empty()) st.read_on_host.insert({&graph, node.inputs[i]});
      continue;
    }
    const Tensor* c = args.constant_input(i);
    if (!c || c->dtype() == DType::kString) continue;
    auto it = st.weights.find(c->raw());
    if (it == st.weights.end() || it->second.dims != c->dims() || it->second.dtype != c->dtype()) {
      ASSIGN_OR_RETURN(DeviceTensor d, st.ctx->upload(*c));
      ++st.ctx->transfers().weight_uploads;
      it = st.weights.insert_or_assign(c->raw(), std::move(d)).first;
    }
    k->constants[i] = it->second;
  }
  const auto last = last_readers(graph);
  const size_t self = node_index(graph, node);
  k->read_later.resize(node.outputs.size());
  for (size_t o = 0; o < node.outputs.size(); ++o) {
    auto it = last.find(node.outputs[o]);
    k->read_later[o] = it != last.end() && it->second > self;
  }
  for (const std::string& in : node.inputs) {
    if (in.empty()) continue;
    auto it = last.find(in);
    if (it != last.end() && it->second == self) k->release_after.push_back(in);
  }
  return std::unique_ptr<Kernel>(std::move(k));
}

void CudaBackend::set_host_values(const Graph& graph, const std::vector<std::string>& host_values) {
  if (!available()) return;
  state_->host_values[&graph] = std::set<std::string>(host_values.begin(), host_values.end());
}

void CudaBackend::empty_cache() {
  if (!available()) return;
  state_->resident.clear();
  state_->ctx->allocator().empty_cache();
}

// The module's open function (cuda_module.cpp: libferry_backend_cuda.so's entry point).
StatusOr<std::unique_ptr<Backend>> open_cuda_backend(const std::string& device) {
  ASSIGN_OR_RETURN(int index, parse_cuda_device_index(device));
  ASSIGN_OR_RETURN(std::unique_ptr<CudaBackend> b, CudaBackend::open(index));
  return std::unique_ptr<Backend>(std::move(b));
}

}  // namespace ferry

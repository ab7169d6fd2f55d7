// Host-side helpers for the CUDA op files.
#include "backends/cuda/ops_util.h"

namespace ferry {

Status launched(cudaError_t err, const Node& node, const char* what) {
  if (err == cudaSuccess) return Status::ok();
  if (err == cudaErrorInvalidValue)
    return unsupported(node.describe() + ": the cuda " + what + " kernel does not cover these types or sizes");
  return internal_error(node.describe() + ": launching the cuda " + what + " kernel failed: " + cudaGetErrorString(err));
}

namespace {

/// Merges dim i into i+1 where every stride list is contiguous across them; drops size-1 dims.
void merge_dims(std::vector<int64_t>& dims, std::vector<std::vector<int64_t>*> strides) {
  std::vector<int64_t> nd;
  std::vector<std::vector<int64_t>> ns(strides.size());
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] == 1 && dims.size() > 1) continue;
    bool mergeable = !nd.empty();
    for (size_t s = 0; s < strides.size() && mergeable; ++s)
      mergeable = ns[s].back() == (*strides[s])[i] * dims[i];
    if (mergeable) {
      nd.back() *= dims[i];
      for (size_t s = 0; s < strides.size(); ++s) ns[s].back() = (*strides[s])[i];
    } else {
      nd.push_back(dims[i]);
      for (size_t s = 0; s < strides.size(); ++s) ns[s].push_back((*strides[s])[i]);
    }
  }
  if (nd.empty()) {
    nd.push_back(1);
    for (auto& v : ns) v.push_back(0);
  }
  dims = nd;
  for (size_t s = 0; s < strides.size(); ++s) *strides[s] = ns[s];
}

}  // namespace

Status make_broadcast_desc(const std::vector<int64_t>& out_dims, const std::vector<std::vector<int64_t>>& operands,
                           cuda::StridedDesc* d, std::vector<std::vector<int64_t>>* extra) {
  std::vector<int64_t> dims = out_dims;
  std::vector<std::vector<int64_t>> strides;
  for (const auto& op : operands) strides.push_back(broadcast_strides(op, out_dims));
  std::vector<std::vector<int64_t>*> ptrs;
  for (auto& s : strides) ptrs.push_back(&s);
  merge_dims(dims, ptrs);
  if (dims.size() > static_cast<size_t>(cuda::kMaxRank))
    return unsupported("broadcast over " + std::to_string(dims.size()) + " non-mergeable dims (cuda kernels take " +
                       std::to_string(cuda::kMaxRank) + ")");
  *d = cuda::StridedDesc{};
  d->rank = static_cast<int>(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) {
    d->dims[i] = dims[i];
    d->in_strides[i] = strides[0][i];
  }
  extra->assign(strides.begin() + 1, strides.end());
  for (auto& e : *extra) e.resize(cuda::kMaxRank, 0);
  return Status::ok();
}

Status make_copy_desc(const std::vector<int64_t>& dims_in, const std::vector<int64_t>& in_strides, int64_t in_offset,
                      const std::vector<int64_t>& out_strides, int64_t out_offset, cuda::StridedDesc* d) {
  std::vector<int64_t> dims = dims_in, is = in_strides, os = out_strides;
  merge_dims(dims, {&is, &os});
  if (dims.size() > static_cast<size_t>(cuda::kMaxRank))
    return unsupported("a copy over " + std::to_string(dims.size()) + " non-mergeable dims (cuda kernels take " +
                       std::to_string(cuda::kMaxRank) + ")");
  *d = cuda::StridedDesc{};
  d->rank = static_cast<int>(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) {
    d->dims[i] = dims[i];
    d->in_strides[i] = is[i];
    d->out_strides[i] = os[i];
  }
  d->in_offset = in_offset;
  d->out_offset = out_offset;
  return Status::ok();
}

namespace {
class FnKernel : public CudaOpKernel {
 public:
  explicit FnKernel(CudaRunFn fn) : fn_(std::move(fn)) {}
  Status run(CudaContext& ctx, KernelContext& kc, const std::vector<const DeviceTensor*>& in,
             std::vector<DeviceTensor>& out) override {
    return fn_(ctx, kc, in, out);
  }

 private:
  CudaRunFn fn_;
};
}  // namespace

std::unique_ptr<CudaOpKernel> make_fn_kernel(CudaRunFn fn, uint64_t host_input_mask) {
  auto k = std::make_unique<FnKernel>(std::move(fn));
  k->host_input_mask = host_input_mask;
  return k;
}

bool accepts_single_output(const Node& node, std::string* why) {
  int used = 0;
  for (const std::string& o : node.outputs) used += !o.empty();
  if (used <= 1 && (node.outputs.empty() || !node.outputs[0].empty())) return true;
  if (why) *why = node.op_type + " with optional outputs (mask, statistics) runs on the host";
  return false;
}

}  // namespace ferry

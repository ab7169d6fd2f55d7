// The CUDA backend ("cuda", "cuda:N"): nodes with a CUDA kernel run on the GPU; values move
// through pinned staging. Host tensors stay the executor's currency: each kernel uploads the
// inputs it does not already find on the device (weights are uploaded once, at load; values
// produced by an earlier CUDA kernel are reused from the device), runs on the backend's stream,
// and copies its outputs back — all of them, unless the executor said through set_host_values()
// which ones the host needs.
#pragma once

#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "backends/backend.h"
#include "backends/cuda/cuda_context.h"
#include "backends/cuda/device_tensor.h"

namespace ferry {

/// State shared by the backend and its kernels (the kernels may outlive nothing: the executor
/// destroys kernels before the backend).
struct CudaRuntimeState {
  std::unique_ptr<CudaContext> ctx;
  /// Values produced by CUDA kernels that later CUDA kernels read, by (graph, value name).
  std::map<std::pair<const Graph*, std::string>, DeviceTensor> resident;
  /// Initializers uploaded once, by host address.
  std::map<const void*, DeviceTensor> weights;
  /// Per graph: values the host needs; absent graph: all of them (set_host_values not called).
  std::map<const Graph*, std::set<std::string>> host_values;
  /// Values read by nodes that run their reference kernel inside this backend (need host copies).
  std::set<std::pair<const Graph*, std::string>> read_on_host;
  /// FERRY_CUDA_SYNC=1: wait after every node, so a kernel fault names its node.
  bool sync_each_node = false;
};

class CudaBackend : public Backend {
 public:
  /// A usable backend on device `index`, or the reason there is none.
  static StatusOr<std::unique_ptr<CudaBackend>> open(int index);
  /// A backend that only describes why CUDA is unavailable (for listings); runs nothing.
  static std::unique_ptr<CudaBackend> unavailable(std::string why);

  std::string name() const override;
  std::string description() const override;
  bool supports(const Node& node, const OpSchema& schema, std::string* why) const override;
  std::vector<DType> supported_types(const OpSchema& schema) const override;
  StatusOr<std::unique_ptr<Kernel>> create_kernel(const Node& node, const OpSchema& schema, const Graph& graph) override;
  void set_host_values(const Graph& graph, const std::vector<std::string>& host_values) override;

  bool available() const { return state_ && state_->ctx; }
  /// nullptr when unavailable.
  CudaContext* context() { return available() ? state_->ctx.get() : nullptr; }
  /// Copy and fallback counters (nullptr when unavailable).
  const TransferStats* transfer_stats() const { return available() ? &state_->ctx->transfers() : nullptr; }
  /// Why the backend is unavailable ("" when it is available).
  const std::string& unavailable_reason() const { return unavailable_reason_; }
  /// Returns cached device memory (and the resident values of finished runs) to the driver.
  void empty_cache();

 private:
  CudaBackend() = default;
  std::shared_ptr<CudaRuntimeState> state_;
  int index_ = 0;
  std::string unavailable_reason_;
};

}  // namespace ferry

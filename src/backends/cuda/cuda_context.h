// Everything one CUDA backend instance owns on its GPU: the stream its kernels run on, the
// cuBLASLt and cuDNN handles, the caching allocator, a workspace, and pinned host staging for
// asynchronous host<->device copies. Kernels get it in run(); nothing in it is thread-safe
// (the executor runs one node at a time per backend).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backends/cuda/caching_allocator.h"
#include "backends/cuda/device_tensor.h"
#include "common/status.h"
#include "ir/tensor.h"

namespace ferry {

/// Options of a CUDA backend instance.
struct CudaOptions {
  int device = 0;
  /// TF32 tensor-core math for fp32 convolutions and GEMMs. Off by default: TF32 keeps 10 mantissa
  /// bits, so fp32 results change (about 1e-3 relative). Env FERRY_CUDA_TF32=1 turns it on.
  bool allow_tf32 = false;
  /// cuDNN algorithm choice by timing every candidate on first use of a shape (cached per shape);
  /// when false, cuDNN's heuristic picks (faster first run). Env FERRY_CUDA_CONV_TUNE=0 turns it off.
  bool tune_conv = true;
};

/// Counters for `ferry profile` / doctor and for tests that check copies are not repeated.
struct TransferStats {
  int64_t h2d_copies = 0;
  int64_t h2d_bytes = 0;
  int64_t d2h_copies = 0;
  int64_t d2h_bytes = 0;
  int64_t resident_hits = 0;    // inputs found on the device (no copy)
  int64_t weight_uploads = 0;   // initializers uploaded once at load
  int64_t host_fallbacks = 0;   // node runs that went to the reference kernel on the host
};

class CudaContext {
 public:
  /// Opens device `options.device`: fails with a clear message when it is absent or too old.
  static StatusOr<std::unique_ptr<CudaContext>> open(const CudaOptions& options);
  ~CudaContext();

  int device() const { return options_.device; }
  const CudaOptions& options() const { return options_; }
  cudaStream_t stream() const { return stream_; }
  /// Library handles, created on first use (a process that runs no GEMM or convolution never
  /// loads cuBLASLt or cuDNN: faster start, e.g. for the conformance suite's one process per test).
  /// nullptr when creation failed; the library call then reports the error.
  cublasLtHandle_t cublaslt();
  cudnnHandle_t cudnn();
  CachingAllocator& allocator() { return *allocator_; }
  TransferStats& transfers() { return transfers_; }
  const std::string& device_name() const { return device_name_; }
  int sm_count() const { return sm_count_; }

  /// A device tensor of the given type and dims (uninitialized).
  StatusOr<DeviceTensor> allocate(DType dtype, std::vector<int64_t> dims);
  /// Scratch memory for one kernel call (cuDNN / cuBLASLt workspaces); grows, never shrinks.
  StatusOr<void*> workspace(size_t bytes);
  /// Copies a host tensor to the device through pinned staging (asynchronous on the stream).
  StatusOr<DeviceTensor> upload(const Tensor& host);
  /// Copies a device tensor into a new host tensor; waits for the stream.
  StatusOr<Tensor> download(const DeviceTensor& dev);
  /// Waits for everything queued on the stream; reports kernel faults with `what`.
  Status synchronize(const std::string& what);
  /// Status of the last kernel launch (launch configuration errors), naming `what`.
  Status check_launch(const char* what);
  /// Tuned algorithm choices (cuDNN convolution), by problem signature: (algorithm, math type,
  /// workspace bytes). Shared by every node with the same signature, so each is timed once.
  struct TunedAlgo {
    int algo = 0;
    int math_type = 0;
    size_t workspace = 0;
  };
  std::map<std::string, TunedAlgo>& tuned_algos() { return tuned_algos_; }

 private:
  explicit CudaContext(const CudaOptions& o) : options_(o) {}
  Status init();
  StatusOr<char*> staging(size_t bytes);

  CudaOptions options_;
  std::string device_name_;
  int sm_count_ = 0;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t staging_free_ = nullptr;  // recorded after the last copy that read the staging buffer
  cublasLtHandle_t cublaslt_ = nullptr;
  cudnnHandle_t cudnn_ = nullptr;
  std::unique_ptr<DeviceMemoryProvider> provider_;
  std::unique_ptr<CachingAllocator> allocator_;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  char* staging_ = nullptr;
  size_t staging_bytes_ = 0;
  size_t staging_used_ = 0;
  TransferStats transfers_;
  std::map<std::string, TunedAlgo> tuned_algos_;
};

}  // namespace ferry

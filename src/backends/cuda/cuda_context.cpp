// The CUDA backend's per-device state: stream, library handles, allocator, staging copies.
#include "backends/cuda/cuda_context.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "backends/cuda/cuda_device.h"
#include "backends/cuda/cuda_status.h"
#include "common/env_switch.h"

namespace ferry {
namespace {

/// Segments for the caching allocator come from cudaMalloc on the context's device.
class CudaMemoryProvider : public DeviceMemoryProvider {
 public:
  void* raw_alloc(size_t bytes) override {
    void* p = nullptr;
    if (cudaMalloc(&p, bytes) != cudaSuccess) {
      (void)cudaGetLastError();  // clear the sticky-free out-of-memory error
      return nullptr;
    }
    return p;
  }
  void raw_free(void* p) override { cudaFree(p); }
};

constexpr size_t kStagingMin = size_t{16} << 20;
constexpr size_t kAlign = 256;

size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

bool env_flag(const char* name, bool dflt) {
  const char* v = env_value(name);
  if (!v || !*v) return dflt;
  return !(std::strcmp(v, "0") == 0 || std::strcmp(v, "false") == 0 || std::strcmp(v, "off") == 0);
}

}  // namespace

StatusOr<std::unique_ptr<CudaContext>> CudaContext::open(const CudaOptions& options) {
  ASSIGN_OR_RETURN(std::vector<CudaDeviceInfo> devices, list_cuda_devices());
  if (options.device < 0 || options.device >= static_cast<int>(devices.size())) {
    std::string list;
    for (const CudaDeviceInfo& d : devices) list += "\n  " + d.describe();
    return invalid_argument("cuda:" + std::to_string(options.device) + " does not exist; this machine has " +
                            std::to_string(devices.size()) + " GPU(s):" + list);
  }
  const CudaDeviceInfo& info = devices[options.device];
  if (!cuda_arch_compatible(info.cc_major, info.cc_minor))
    return unsupported(info.describe() + ": this ferry was built for sm_" + std::to_string(FERRY_CUDA_MIN_ARCH) +
                       " and newer; rebuild with -DCMAKE_CUDA_ARCHITECTURES=" + std::to_string(info.cc_major) +
                       std::to_string(info.cc_minor) + ", or use --device cpu");
  CudaOptions o = options;
  o.allow_tf32 = env_flag("FERRY_CUDA_TF32", o.allow_tf32);
  o.tune_conv = env_flag("FERRY_CUDA_CONV_TUNE", o.tune_conv);
  std::unique_ptr<CudaContext> ctx(new CudaContext(o));
  ctx->device_name_ = info.name;
  ctx->sm_count_ = info.sm_count;
  RETURN_IF_ERROR(ctx->init());
  return ctx;
}

Status CudaContext::init() {
  CUDA_RETURN_IF_ERROR(cudaSetDevice(options_.device));
  CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&staging_free_, cudaEventDisableTiming));
  provider_ = std::make_unique<CudaMemoryProvider>();
  allocator_ = std::make_unique<CachingAllocator>(provider_.get());
  return Status::ok();
}

CudaContext::~CudaContext() {
  if (stream_) cudaStreamSynchronize(stream_);
  allocator_.reset();  // frees every segment (cudaFree)
  if (workspace_) cudaFree(workspace_);
  if (staging_) cudaFreeHost(staging_);
  if (cudnn_) cudnnDestroy(cudnn_);
  if (cublaslt_) cublasLtDestroy(cublaslt_);
  if (staging_free_) cudaEventDestroy(staging_free_);
  if (stream_) cudaStreamDestroy(stream_);
}

cublasLtHandle_t CudaContext::cublaslt() {
  if (!cublaslt_ && cublasLtCreate(&cublaslt_) != CUBLAS_STATUS_SUCCESS) cublaslt_ = nullptr;
  return cublaslt_;
}

cudnnHandle_t CudaContext::cudnn() {
  if (!cudnn_) {
    if (cudnnCreate(&cudnn_) != CUDNN_STATUS_SUCCESS) {
      cudnn_ = nullptr;
    } else if (cudnnSetStream(cudnn_, stream_) != CUDNN_STATUS_SUCCESS) {
      cudnnDestroy(cudnn_);
      cudnn_ = nullptr;
    }
  }
  return cudnn_;
}

StatusOr<DeviceTensor> CudaContext::allocate(DType dtype, std::vector<int64_t> dims) {
  DeviceTensor t;
  t.dtype = dtype;
  t.dims = std::move(dims);
  const size_t bytes = static_cast<size_t>(t.nbytes());
  void* p = allocator_->allocate(bytes);
  if (!p)
    return resource_exhausted("the GPU (" + device_name_ + ") is out of memory allocating " + std::to_string(bytes) +
                              " bytes for a " + dims_to_string(t.dims) + " " + dtype_name(dtype) + " tensor (" +
                              allocator_->stats().to_string() + "); use a smaller batch, or free other GPU work");
  CachingAllocator* alloc = allocator_.get();
  t.buffer = std::shared_ptr<void>(p, [alloc](void* q) { alloc->free(q); });
  t.data = p;
  return t;
}

StatusOr<void*> CudaContext::workspace(size_t bytes) {
  if (bytes <= workspace_bytes_) return workspace_;
  if (workspace_) {
    CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    CUDA_RETURN_IF_ERROR(cudaFree(workspace_));
    workspace_ = nullptr;
    workspace_bytes_ = 0;
  }
  const size_t n = std::max(bytes, size_t{32} << 20);
  CUDA_RETURN_IF_ERROR(cudaMalloc(&workspace_, n));
  workspace_bytes_ = n;
  return workspace_;
}

StatusOr<char*> CudaContext::staging(size_t bytes) {
  bytes = align_up(std::max<size_t>(bytes, 1));
  if (staging_used_ + bytes <= staging_bytes_) {
    char* p = staging_ + staging_used_;
    staging_used_ += bytes;
    return p;
  }
  // Wrap around: wait until the copies that read the buffer are done.
  CUDA_RETURN_IF_ERROR(cudaEventSynchronize(staging_free_));
  staging_used_ = 0;
  if (bytes > staging_bytes_) {
    if (staging_) CUDA_RETURN_IF_ERROR(cudaFreeHost(staging_));
    staging_ = nullptr;
    const size_t n = std::max({bytes, kStagingMin, staging_bytes_ * 2});
    CUDA_RETURN_IF_ERROR(cudaHostAlloc(reinterpret_cast<void**>(&staging_), n, cudaHostAllocDefault));
    staging_bytes_ = n;
  }
  staging_used_ = bytes;
  return staging_;
}

StatusOr<DeviceTensor> CudaContext::upload(const Tensor& host) {
  if (host.dtype() == DType::kString)
    return unsupported("string tensors cannot be copied to the GPU; the node must run on the host");
  ASSIGN_OR_RETURN(DeviceTensor dev, allocate(host.dtype(), host.dims()));
  const size_t n = static_cast<size_t>(host.nbytes());
  if (n == 0) return dev;
  ASSIGN_OR_RETURN(char* stage, staging(n));
  std::memcpy(stage, host.raw(), n);
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dev.data, stage, n, cudaMemcpyHostToDevice, stream_));
  CUDA_RETURN_IF_ERROR(cudaEventRecord(staging_free_, stream_));
  ++transfers_.h2d_copies;
  transfers_.h2d_bytes += static_cast<int64_t>(n);
  return dev;
}

StatusOr<Tensor> CudaContext::download(const DeviceTensor& dev) {
  Tensor host = Tensor::allocate(dev.dtype, dev.dims);
  const size_t n = static_cast<size_t>(dev.nbytes());
  if (n == 0) return host;
  ASSIGN_OR_RETURN(char* stage, staging(n));
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(stage, dev.data, n, cudaMemcpyDeviceToHost, stream_));
  RETURN_IF_ERROR(synchronize("copying a result to the host"));
  std::memcpy(host.mutable_raw(), stage, n);
  staging_used_ = 0;  // the stream is idle: the whole buffer is free
  ++transfers_.d2h_copies;
  transfers_.d2h_bytes += static_cast<int64_t>(n);
  return host;
}

Status CudaContext::synchronize(const std::string& what) {
  cudaError_t err = cudaStreamSynchronize(stream_);
  if (err != cudaSuccess) return cuda_error(err, ("cudaStreamSynchronize after " + what).c_str());
  return Status::ok();
}

Status CudaContext::check_launch(const char* what) {
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return cuda_error(err, what);
  return Status::ok();
}

}  // namespace ferry

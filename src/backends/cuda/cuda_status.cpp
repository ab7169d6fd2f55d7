// Error translation for CUDA, cuDNN and cuBLASLt calls.
#include "backends/cuda/cuda_status.h"

namespace ferry {

Status cuda_error(cudaError_t err, const char* call) {
  std::string msg = std::string("CUDA error in ") + call + ": " + cudaGetErrorName(err) + " (" +
                    cudaGetErrorString(err) + ")";
  if (err == cudaErrorMemoryAllocation)
    return resource_exhausted(msg + "; the GPU is out of memory: use a smaller batch, or free other GPU work");
  if (err == cudaErrorNoDevice || err == cudaErrorInsufficientDriver)
    return unsupported(msg + "; no usable NVIDIA GPU: run with --device cpu");
  return internal_error(msg);
}

Status cudnn_error(cudnnStatus_t err, const char* call) {
  std::string msg = std::string("cuDNN error in ") + call + ": " + cudnnGetErrorString(err);
  if (err == CUDNN_STATUS_NOT_SUPPORTED) return unsupported(msg);
  if (err == CUDNN_STATUS_ALLOC_FAILED) return resource_exhausted(msg + "; the GPU is out of memory");
  return internal_error(msg);
}

Status cublas_error(cublasStatus_t err, const char* call) {
  std::string msg = std::string("cuBLAS error in ") + call + ": " + cublasLtGetStatusName(err) + " (" +
                    cublasLtGetStatusString(err) + ")";
  if (err == CUBLAS_STATUS_NOT_SUPPORTED) return unsupported(msg);
  if (err == CUBLAS_STATUS_ALLOC_FAILED) return resource_exhausted(msg + "; the GPU is out of memory");
  return internal_error(msg);
}

}  // namespace ferry

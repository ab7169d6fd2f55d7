// Error translation for the CUDA backend: CUDA runtime, cuDNN and cuBLAS(Lt) results become
// Status values that say which call failed on which device, and what to try.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <string>

#include "common/status.h"

namespace ferry {

Status cuda_error(cudaError_t err, const char* call);
Status cudnn_error(cudnnStatus_t err, const char* call);
Status cublas_error(cublasStatus_t err, const char* call);

}  // namespace ferry

/// Returns a Status naming the call when a CUDA runtime call fails.
#define CUDA_RETURN_IF_ERROR(expr)                                  \
  do {                                                              \
    cudaError_t _ferry_e = (expr);                                  \
    if (_ferry_e != cudaSuccess) return ::ferry::cuda_error(_ferry_e, #expr); \
  } while (0)
#define CUDNN_RETURN_IF_ERROR(expr)                                 \
  do {                                                              \
    cudnnStatus_t _ferry_e = (expr);                                \
    if (_ferry_e != CUDNN_STATUS_SUCCESS) return ::ferry::cudnn_error(_ferry_e, #expr); \
  } while (0)
#define CUBLAS_RETURN_IF_ERROR(expr)                                \
  do {                                                              \
    cublasStatus_t _ferry_e = (expr);                               \
    if (_ferry_e != CUBLAS_STATUS_SUCCESS) return ::ferry::cublas_error(_ferry_e, #expr); \
  } while (0)

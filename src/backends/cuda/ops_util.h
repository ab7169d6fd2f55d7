// Host-side helpers for the CUDA op files: launch error reporting, broadcast and strided-walk
// descriptors (with adjacent contiguous dims merged so most walks are rank 1 or 2), and a
// kernel adapter for ops written as one function.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/cuda_launch.h"
#include "ops/op_util.h"

namespace ferry {

inline int onnx_type(DType t) { return static_cast<int>(t); }

/// Maps a launcher's result to a Status naming the node.
Status launched(cudaError_t err, const Node& node, const char* what);

/// Descriptor walking `out_dims` with operand 0's strides in d.in_strides (contiguous output);
/// `extra` receives the strides of operands 1.. . Operands broadcast (right-aligned) to out_dims.
/// Fails (Unsupported) past kMaxRank merged dims.
Status make_broadcast_desc(const std::vector<int64_t>& out_dims, const std::vector<std::vector<int64_t>>& operands,
                           cuda::StridedDesc* d, std::vector<std::vector<int64_t>>* extra);

/// Descriptor copying a view (dims, in_strides, in_offset) into a contiguous output region with
/// out_strides / out_offset; merges dims contiguous in both.
Status make_copy_desc(const std::vector<int64_t>& dims, const std::vector<int64_t>& in_strides, int64_t in_offset,
                      const std::vector<int64_t>& out_strides, int64_t out_offset, cuda::StridedDesc* d);

/// A CudaOpKernel from a function (for ops with little state).
using CudaRunFn = std::function<Status(CudaContext& ctx, KernelContext& kc, const std::vector<const DeviceTensor*>& in,
                                       std::vector<DeviceTensor>& out)>;
std::unique_ptr<CudaOpKernel> make_fn_kernel(CudaRunFn fn, uint64_t host_input_mask = 0);

/// accepts() helpers.
bool accepts_single_output(const Node& node, std::string* why);

}  // namespace ferry

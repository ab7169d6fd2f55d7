// `ferry train --amp bf16|fp16`: autocast as torch.autocast does it, as a rewrite of the forward
// model before autodiff. The inputs of the matrix ops (the precision modes' "cube_ops" list,
// data/precision/mix_precision.json: Conv, ConvTranspose, Gemm, MatMul, ...) are rounded to the
// low type and their output is rounded to it too; everything else (reductions, softmax, losses,
// normalization statistics) and the optimizer stay f32 on the f32 master weights. Nodes named in
// `keep_fp32` (Node::name or Node::origin) stay f32.
//
// Emulated: each rounding is a Cast pair f32 -> low -> f32 and the op itself computes in f32 on
// the rounded operands (as `ferry compare` emulates fp16: fp32 arithmetic, low-precision storage).
// Autodiff differentiates through the Casts, so the backward of a low node sees its output
// gradient rounded to the low type and its input gradients are rounded before they reach f32
// values, as torch's bf16/f16 backward kernels store them.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "ir/graph.h"

namespace ferry {

struct AutocastReport {
  std::vector<std::string> lowered;  // names of the nodes that run in the low type
  int64_t casts_inserted = 0;
};

/// "bf16" / "fp16" (also "f16", "float16", "bfloat16") -> kBF16 / kF16; "fp32"/"" -> kF32.
StatusOr<DType> parse_amp_dtype(const std::string& text);

/// Rewrites model->graph's main graph for `low` (kBF16 or kF16; kF32 changes nothing). Types of
/// the node inputs must be known (shape inference run). Unknown keep_fp32 names are an error.
Status apply_autocast(Model* model, DType low, const std::vector<std::string>& keep_fp32, AutocastReport* report);

}  // namespace ferry

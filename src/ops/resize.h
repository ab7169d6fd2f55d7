// The interpolation plan of a Resize / Upsample node, shared by the reference kernel and the
// optimized backends: per axis, which input indices feed each output index and with which weights
// (the ONNX reference's coordinate transforms, clamping, exclude_outside and antialias), so a fast
// kernel computes the same taps instead of re-deriving them.
#pragma once

#include <cstdint>
#include <vector>

#include "ops/op_util.h"

namespace ferry {

/// One axis: `n` taps per output index; idx/w hold out_len * n entries (idx clamped to the input).
/// `identity`: the axis is not resized (output j reads input j with weight 1).
struct ResizeAxisTaps {
  int64_t n = 1;
  std::vector<int64_t> idx;
  std::vector<float> w;
  bool identity = true;
};

/// For the Resize / Upsample node of `ctx` with its current inputs: the output dims and the taps of
/// every axis (nearest mode: one tap of weight 1). Returns false, with nothing filled, when the
/// plan needs what taps cannot express (tf_crop_and_resize extrapolation, strings); an error for
/// invalid scales / sizes, with the reference kernel's message.
StatusOr<bool> resize_taps(KernelContext& ctx, std::vector<int64_t>* out_dims, std::vector<ResizeAxisTaps>* taps);

}  // namespace ferry
